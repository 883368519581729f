// Inclusive cumulative sum along one dim, CUDA backend (twin: kernels/cpu/scan.cpp).
// One thread per line, a sequential running sum in the compute type: the same order and
// roundings as the CPU, so the results match exactly for f32 and f64 (bf16/f16 too).
// Meant for the chunk-local cumsums of the mixers (lines of C <= 64 elements, many lines);
// a long line with few lines in total is slow here.
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

template <class T>
__global__ void cumsum_line_per_thread(ScanParams p) {
  using C = compute_t<T>;
  T* out = static_cast<T*>(p.it.data[0]);
  const T* in = static_cast<const T*>(p.it.data[1]);
  for (int64_t i = global_thread(); i < p.it.numel; i += grid_threads()) {
    int64_t o[2];
    iter_offsets<2>(p.it, i, o);
    C acc = C(0);
    for (int64_t s = 0; s < p.len; ++s) {
      const int64_t j = p.reverse ? p.len - 1 - s : s;
      acc += load_as_compute(in[o[1] + j * p.in_stride]);
      out[o[0] + j * p.out_stride] = store_from_compute<T>(acc);
    }
  }
}

}  // namespace

void cumsum(DType dtype, const ScanParams& p, uintptr_t stream) {
  if (p.it.numel == 0 || p.len == 0) return;
  visit_float_dtype(dtype, "cuda", "cumsum", [&](auto t) {
    auto kernel = cumsum_line_per_thread<decltype(t)>;
    LT_LAUNCH(kernel, grid_for(p.it.numel, 128), 128, 0, as_stream(stream), p);
  });
}

}  // namespace lt::kern::cuda
