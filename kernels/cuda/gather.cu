// Row gather with a fill, CUDA backend (twin: kernels/cpu/gather.cpp; contract:
// kernels/gather.h). A copy bound by memory: rows whose bytes are a multiple of 16 (and
// 16-byte aligned operands) move as 16-byte units, a thread each; others an element a thread.
#include <cstring>

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

// units: 16-byte units a row; fill: the fill value repeated over 16 bytes.
__global__ void gather_rows_vec_kernel(GatherRowsParams p, int64_t units, uint4 fill) {
  const int64_t n = p.rows_out * units;
  const auto* x = static_cast<const uint4*>(p.x);
  auto* out = static_cast<uint4*>(p.out);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t m = i / units, c = i % units;
    const int32_t src = p.index[m];
    out[i] = src >= 0 && src < p.rows_in ? x[src * units + c] : fill;
  }
}

}  // namespace

void gather_rows(DType dtype, const GatherRowsParams& p, uintptr_t stream) {
  const int64_t n = p.rows_out * p.width;
  if (n == 0) return;
  visit_float_dtype(dtype, "cuda", "gather_rows", [&](auto t) {
    using T = decltype(t);
    const T fill = store_from_compute<T>(static_cast<compute_t<T>>(p.fill));
    const int64_t row_bytes = p.width * static_cast<int64_t>(sizeof(T));
    if (row_bytes % 16 == 0 && aligned16(p.x) && aligned16(p.out)) {
      uint4 f;
      unsigned char bytes[16];
      for (size_t k = 0; k < 16; k += sizeof(T)) std::memcpy(bytes + k, &fill, sizeof(T));
      std::memcpy(&f, bytes, 16);
      const int64_t units = row_bytes / 16;
      LT_LAUNCH(gather_rows_vec_kernel, grid_for(p.rows_out * units), kThreads, 0, as_stream(stream), p, units, f);
      return;
    }
    auto kernel = gather_rows_kernel<T>;
    LT_LAUNCH(kernel, grid_for(n), kThreads, 0, as_stream(stream), p, fill);
  });
}

}  // namespace lt::kern::cuda
