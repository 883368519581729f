// The KDA fused backward at head dim 128, every chunk and dtype (kernels/cuda/kda/launch.cuh).
#include "kernels/cuda/kda/launch.cuh"

namespace lt::kda::cuda_launch {
template void backward<128>(const FusedArgs&, const BackwardWorkspace&, cudaStream_t, BackwardPart);
}  // namespace lt::kda::cuda_launch
