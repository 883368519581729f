// The KDA fused forward at head dim 128, every chunk and dtype (kernels/cuda/kda/launch.cuh).
#include "kernels/cuda/kda/launch.cuh"

namespace lt::kda::cuda_launch {
template void forward<128>(const FusedArgs&, const ForwardWorkspace&, cudaStream_t);
}  // namespace lt::kda::cuda_launch
