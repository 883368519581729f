// Reductions along one dim, CUDA backend (twin: kernels/cpu/reduce.cpp).
//   sum (f64 accumulation for f64, f32 otherwise) and max (NaN propagates).
// Two shapes of work:
//   len < 256:  one thread per output element, a sequential loop over the line (the same
//               order as the CPU);
//   len >= 256: one 256-thread block per output element: each thread accumulates a strided
//               part of the line, then a shared-memory tree combines the 256 partials
//               (deterministic, but not the CPU's order: compare with a tolerance);
//   len >= 256 over an outer dim (adjacent outputs read adjacent inputs: the column sums
//               of a [len, n] matrix, e.g. a bias gradient): a line per block read a column,
//               one 4-byte word of each 32-byte sector; instead a block takes kColumns
//               adjacent columns with kColumnGroups row groups (a warp reads whole sectors
//               of 4 rows), each thread sums its rows in ascending order and a shared-memory
//               tree combines the groups (deterministic).
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

constexpr int64_t kBlockReduceMinLen = 256;
constexpr int kReduceThreads = 256;

template <class C, bool IsMax>
__device__ __forceinline__ C combine(C acc, C v) {
  if constexpr (IsMax) {
    if (acc != acc) return acc;
    return (v > acc || v != v) ? v : acc;
  } else {
    return acc + v;
  }
}

template <class T, bool IsMax>
__global__ void reduce_line_per_thread(ReduceParams p) {
  using C = compute_t<T>;
  T* out = static_cast<T*>(p.it.data[0]);
  const T* in = static_cast<const T*>(p.it.data[1]);
  for (int64_t i = global_thread(); i < p.it.numel; i += grid_threads()) {
    int64_t o[2];
    iter_offsets<2>(p.it, i, o);
    const T* line = in + o[1];
    C acc = IsMax ? load_as_compute(line[0]) : C(0);
    for (int64_t j = IsMax ? 1 : 0; j < p.len; ++j)
      acc = combine<C, IsMax>(acc, load_as_compute(line[j * p.in_stride]));
    out[o[0]] = store_from_compute<T>(acc);
  }
}

template <class T, bool IsMax>
__global__ void reduce_line_per_block(ReduceParams p) {
  using C = compute_t<T>;
  __shared__ C partial[kReduceThreads];  // one partial per thread
  T* out = static_cast<T*>(p.it.data[0]);
  const T* in = static_cast<const T*>(p.it.data[1]);
  for (int64_t i = blockIdx.x; i < p.it.numel; i += gridDim.x) {
    int64_t o[2];
    iter_offsets<2>(p.it, i, o);
    const T* line = in + o[1];
    // every thread has at least one element since len >= kBlockReduceMinLen = blockDim
    C acc = load_as_compute(line[threadIdx.x * p.in_stride]);
    for (int64_t j = threadIdx.x + kReduceThreads; j < p.len; j += kReduceThreads)
      acc = combine<C, IsMax>(acc, load_as_compute(line[j * p.in_stride]));
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = kReduceThreads / 2; s > 0; s /= 2) {
      if (static_cast<int>(threadIdx.x) < s)
        partial[threadIdx.x] = combine<C, IsMax>(partial[threadIdx.x], partial[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) out[o[0]] = store_from_compute<T>(partial[0]);
    __syncthreads();  // partial[] is reused by the next output
  }
}

constexpr int kColumns = 8;         // adjacent outputs per block: 32 bytes of f32 per row
constexpr int kColumnGroups = 128;  // row groups per block (kColumns * kColumnGroups threads)

// Outputs whose innermost iteration dim is unit-stride in the input (column sums: line i
// is in[off(i) + j in_stride], off(i + 1) = off(i) + 1 within a row of outputs).
template <class T, bool IsMax>
__global__ void reduce_columns(ReduceParams p) {
  using C = compute_t<T>;
  __shared__ C partial[kColumnGroups][kColumns];
  T* out = static_cast<T*>(p.it.data[0]);
  const T* in = static_cast<const T*>(p.it.data[1]);
  const int col = static_cast<int>(threadIdx.x) % kColumns, grp = static_cast<int>(threadIdx.x) / kColumns;
  for (int64_t i0 = static_cast<int64_t>(blockIdx.x) * kColumns; i0 < p.it.numel;
       i0 += static_cast<int64_t>(gridDim.x) * kColumns) {
    const int64_t i = i0 + col;
    int64_t o[2] = {0, 0};
    C acc = C(0);
    if (i < p.it.numel) {
      iter_offsets<2>(p.it, i, o);
      const T* line = in + o[1];
      // every group has at least one row since len >= kBlockReduceMinLen > kColumnGroups
      acc = load_as_compute(line[grp * p.in_stride]);
      for (int64_t j = grp + kColumnGroups; j < p.len; j += kColumnGroups)
        acc = combine<C, IsMax>(acc, load_as_compute(line[j * p.in_stride]));
    }
    partial[grp][col] = acc;
    __syncthreads();
    for (int s = kColumnGroups / 2; s > 0; s /= 2) {
      if (grp < s) partial[grp][col] = combine<C, IsMax>(partial[grp][col], partial[grp + s][col]);
      __syncthreads();
    }
    if (grp == 0 && i < p.it.numel) out[o[0]] = store_from_compute<T>(partial[0][col]);
    __syncthreads();  // partial[] is reused by the next columns
  }
}

template <class T, bool IsMax>
void launch_reduce(const ReduceParams& p, cudaStream_t stream) {
  static_assert(kColumnGroups < kBlockReduceMinLen);
  if (p.len >= kBlockReduceMinLen && p.it.ndim >= 1 && p.it.strides[1][p.it.ndim - 1] == 1 && p.in_stride > 1) {
    auto kernel = reduce_columns<T, IsMax>;
    const int64_t need = (p.it.numel + kColumns - 1) / kColumns;
    const int64_t blocks = need < kMaxBlocks ? need : kMaxBlocks;
    LT_LAUNCH(kernel, dim3(static_cast<unsigned>(blocks)), kColumns * kColumnGroups, 0, stream, p);
  } else if (p.len >= kBlockReduceMinLen) {
    auto kernel = reduce_line_per_block<T, IsMax>;
    const int64_t blocks = p.it.numel < kMaxBlocks ? p.it.numel : kMaxBlocks;
    LT_LAUNCH(kernel, dim3(static_cast<unsigned>(blocks)), kReduceThreads, 0, stream, p);
  } else {
    auto kernel = reduce_line_per_thread<T, IsMax>;
    LT_LAUNCH(kernel, grid_for(p.it.numel), kThreads, 0, stream, p);
  }
}

}  // namespace

void reduce(ReduceOp op, DType dtype, const ReduceParams& p, uintptr_t stream) {
  if (p.it.numel == 0) return;
  visit_float_dtype(dtype, "cuda", "reduce", [&](auto t) {
    using T = decltype(t);
    if (op == ReduceOp::max) launch_reduce<T, true>(p, as_stream(stream));
    else launch_reduce<T, false>(p, as_stream(stream));
  });
}

}  // namespace lt::kern::cuda
