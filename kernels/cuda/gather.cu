// Row gather with a fill, CUDA backend (twin: kernels/cpu/gather.cpp; contract:
// kernels/gather.h). One thread per output element (grid-stride): a copy, bound by memory.
#include "kernels/cuda/grid.h"
#include "kernels/gather.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

template <class T>
__global__ void gather_rows_kernel(GatherRowsParams p, T fill) {
  const int64_t n = p.rows_out * p.width;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) gather_rows_element<T>(p, i, fill);
}

}  // namespace

void gather_rows(DType dtype, const GatherRowsParams& p, uintptr_t stream) {
  const int64_t n = p.rows_out * p.width;
  if (n == 0) return;
  visit_float_dtype(dtype, "cuda", "gather_rows", [&](auto t) {
    using T = decltype(t);
    const T fill = store_from_compute<T>(static_cast<compute_t<T>>(p.fill));
    auto kernel = gather_rows_kernel<T>;
    LT_LAUNCH(kernel, grid_for(n), kThreads, 0, as_stream(stream), p, fill);
  });
}

}  // namespace lt::kern::cuda
