// Row gather with a fill (engine: ops::gather_rows; CPU: kernels/cpu/gather.cpp, CUDA:
// kernels/cuda/gather.cu). Lays packed documents out for the chunked mixers and back
// (engine/mixers/segments.h):
//
//   out[m, :] = index[m] >= 0 ? x[index[m], :] : fill          m < rows_out, width columns
//
// x [rows_in, width], out [rows_out, width] contiguous, one float dtype; index [rows_out]
// i32, -1 for a fill row (the layouts that make it: engine/mixers/segments.h); an entry
// outside [0, rows_in) gives the fill too, never a read out of bounds. The fill is rounded
// once to the dtype. A copy: bit-exact on both backends.
#pragma once
#include <cstdint>

#include "kernels/elementwise_ops.h"

namespace lt::kern {

struct GatherRowsParams {
  int64_t rows_in = 0, rows_out = 0, width = 0;
  const void* x = nullptr;
  const int32_t* index = nullptr;
  void* out = nullptr;
  double fill = 0.0;
};

// Element i in [0, rows_out * width) of the gather; T the tensors' dtype.
template <class T>
LT_HD void gather_rows_element(const GatherRowsParams& p, int64_t i, T fill) {
  const int64_t m = i / p.width, c = i % p.width;
  const int32_t src = p.index[m];
  static_cast<T*>(p.out)[i] = src >= 0 && src < p.rows_in ? static_cast<const T*>(p.x)[src * p.width + c] : fill;
}

}  // namespace lt::kern
