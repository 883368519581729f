// Column sums added into gradients, CUDA backend (twin: kernels/cpu/column_sums.cpp;
// contract: kernels/column_sums.h). Bound by reading x (and y) once.
//   Stage 1: a block per (column tile, row split, set); 8 threads span a tile's row with one
//            W-element vector each (16 bytes where the rows allow), 32 row groups walk the
//            split's rows in ascending order, and a shared-memory tree over the groups gives
//            the split's partial. With one split it is added to acc directly.
//   Stage 2: a thread per (set, column) adds the splits' partials in ascending order to acc.
// Both orders are fixed: the result does not depend on scheduling.
#include "kernels/column_sums.h"
#include "kernels/cuda/grid.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

constexpr int kVecPerRow = 8;   // threads across a tile's row
constexpr int kRowGroups = 32;  // threads down the rows (kVecPerRow * kRowGroups = 256)

template <class T, int W>
__global__ void column_sums_split(ColumnSumParams p, int64_t splits) {
  using A = compute_t<T>;
  __shared__ A part[kRowGroups][kVecPerRow * W];
  const int s = static_cast<int>(blockIdx.z);
  const int v = static_cast<int>(threadIdx.x) % kVecPerRow, g = static_cast<int>(threadIdx.x) / kVecPerRow;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kVecPerRow * W + static_cast<int64_t>(v) * W;
  const int64_t per_split = (p.rows + splits - 1) / splits;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * per_split;
  const int64_t r1 = r0 + per_split < p.rows ? r0 + per_split : p.rows;
  const T* x = static_cast<const T*>(p.x[s]);
  const T* y = static_cast<const T*>(p.y[s]);
  A acc[W];
#pragma unroll
  for (int e = 0; e < W; ++e) acc[e] = A(0);
  if (col0 < p.cols) {
    if constexpr (W > 1) {
      using V = Vec16<T>;
      static_assert(V::n == W);
#pragma unroll 4
      for (int64_t r = r0 + g; r < r1; r += kRowGroups) {
        const V vx = *reinterpret_cast<const V*>(x + r * p.cols + col0);
        if (y != nullptr) {
          const V vy = *reinterpret_cast<const V*>(y + r * p.cols + col0);
#pragma unroll
          for (int e = 0; e < W; ++e) acc[e] += load_as_compute(vx.v[e]) * load_as_compute(vy.v[e]);
        } else {
#pragma unroll
          for (int e = 0; e < W; ++e) acc[e] += load_as_compute(vx.v[e]);
        }
      }
    } else {
#pragma unroll 4
      for (int64_t r = r0 + g; r < r1; r += kRowGroups) {
        const A vx = load_as_compute(x[r * p.cols + col0]);
        acc[0] += y != nullptr ? vx * load_as_compute(y[r * p.cols + col0]) : vx;
      }
    }
  }
#pragma unroll
  for (int e = 0; e < W; ++e) part[g][v * W + e] = acc[e];
  __syncthreads();
  for (int half = kRowGroups / 2; half > 0; half /= 2) {
    if (g < half)
#pragma unroll
      for (int e = 0; e < W; ++e) part[g][v * W + e] += part[g + half][v * W + e];
    __syncthreads();
  }
  if (g != 0 || col0 >= p.cols) return;
#pragma unroll
  for (int e = 0; e < W; ++e) {
    if (splits == 1) {
      static_cast<A*>(p.acc[s])[col0 + e] += part[0][v * W + e];
    } else {
      A* ws = static_cast<A*>(p.workspace);
      ws[(static_cast<int64_t>(s) * splits + blockIdx.y) * p.cols + col0 + e] = part[0][v * W + e];
    }
  }
}

template <class A>
__global__ void column_sums_combine(ColumnSumParams p, int64_t splits) {
  const int64_t n = static_cast<int64_t>(p.nsets) * p.cols;
  const A* ws = static_cast<const A*>(p.workspace);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int s = static_cast<int>(i / p.cols);
    const int64_t c = i % p.cols;
    A t = A(0);
    for (int64_t k = 0; k < splits; ++k) t += ws[(s * splits + k) * p.cols + c];
    static_cast<A*>(p.acc[s])[c] += t;
  }
}

template <class T, int W>
void launch(const ColumnSumParams& p, cudaStream_t stream) {
  const int64_t splits = column_sum_splits(p.rows);
  const int64_t tile = static_cast<int64_t>(kVecPerRow) * W;
  const dim3 grid(static_cast<unsigned>((p.cols + tile - 1) / tile), static_cast<unsigned>(splits),
                  static_cast<unsigned>(p.nsets));
  auto split_kernel = column_sums_split<T, W>;
  LT_LAUNCH(split_kernel, grid, kVecPerRow * kRowGroups, 0, stream, p, splits);
  if (splits == 1) return;
  auto combine_kernel = column_sums_combine<compute_t<T>>;
  LT_LAUNCH(combine_kernel, grid_for(static_cast<int64_t>(p.nsets) * p.cols), kThreads, 0, stream, p, splits);
}

}  // namespace

void column_sums(DType dtype, const ColumnSumParams& p, uintptr_t stream) {
  if (p.rows == 0 || p.cols == 0 || p.nsets == 0) return;
  visit_float_dtype(dtype, "cuda", "column_sums", [&](auto t) {
    using T = decltype(t);
    constexpr int W = Vec16<T>::n;
    bool vec = p.cols % W == 0;
    for (int s = 0; s < p.nsets; ++s) vec = vec && aligned16(p.x[s]) && (p.y[s] == nullptr || aligned16(p.y[s]));
    if (vec) launch<T, W>(p, as_stream(stream));
    else launch<T, 1>(p, as_stream(stream));
  });
}

}  // namespace lt::kern::cuda
