// The KDA fused backward at head dim 64, every chunk and dtype (kernels/cuda/kda/launch.cuh).
#include "kernels/cuda/kda/launch.cuh"

namespace lt::kda::cuda_launch {
template void backward<64>(const FusedArgs&, const BackwardWorkspace&, cudaStream_t, BackwardPart);
}  // namespace lt::kda::cuda_launch
