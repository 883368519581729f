// Column sums added into gradients (engine: ops::column_sums_into; CPU:
// kernels/cpu/column_sums.cpp, CUDA: kernels/cuda/column_sums.cu). For each set s:
//
//   acc_s[c] += sum_r x_s[r, c] * y_s[r, c]      (y_s absent: sum_r x_s[r, c])
//
// x_s, y_s [rows, cols] contiguous in one float dtype T; acc_s [cols] contiguous in T's
// accumulation type A (f64 for f64, f32 otherwise): a bias gradient (x = dy), RWKV6's mu
// gradients (x = dout, y = delta) and x_bias gradient (five sets), read once each, the
// product formed in A, never rounded to T. Deterministic on both backends (a fixed order);
// the CUDA order (row splits, then a tree) differs from the CPU's: compare with a tolerance.
#pragma once
#include <cstdint>

#include "kernels/elementwise_ops.h"

namespace lt::kern {

constexpr int kColumnSumMaxSets = 8;

struct ColumnSumParams {
  int nsets = 0;
  int64_t rows = 0, cols = 0;
  const void* x[kColumnSumMaxSets] = {};
  const void* y[kColumnSumMaxSets] = {};  // null: the plain sum of x
  void* acc[kColumnSumMaxSets] = {};
  void* workspace = nullptr;  // CUDA: column_sum_workspace(rows, cols, nsets) elements of A
};

// Row splits of the CUDA reduction (each a block per column tile) for `rows` rows: enough
// blocks to fill the GPU at a few thousand rows, 128 rows a split at least.
constexpr int64_t column_sum_splits(int64_t rows) {
  const int64_t s = (rows + 127) / 128;
  return s < 1 ? 1 : (s > 64 ? 64 : s);
}
// The CUDA workspace in elements of the accumulation type: one partial per split, set and
// column (none when one split does it all).
constexpr int64_t column_sum_workspace(int64_t rows, int64_t cols, int nsets) {
  const int64_t s = column_sum_splits(rows);
  return s == 1 ? 0 : s * cols * nsets;
}

}  // namespace lt::kern
