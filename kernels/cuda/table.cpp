// The CUDA backend's op table (see kernels/table.h).
#include "kernels/table.h"

namespace lt::kern {

const KernelTable& cuda_kernels() {
  static const KernelTable table{
      "cuda",        cuda::binary,  cuda::unary,  cuda::where,    cuda::fill,     cuda::convert,
      cuda::reduce,  cuda::cumsum,  cuda::matmul, cuda::tri_mask, cuda::trisolve, cuda::random,
  };
  return table;
}

}  // namespace lt::kern
