// Cross-entropy rows, CUDA backend (twin: kernels/cpu/cross_entropy.cpp; contract:
// kernels/cross_entropy.h). f32, f64 and bf16 logits (bf16: computed in f32, the
// gradient rounded to bf16 in place: the bf16 mode's logits, as fla's bf16 models have them).
//
// One block of kRowThreads per row (grid-stride over rows), two passes over the row:
//   1. statistics: each thread scans j = tid, tid + kRowThreads, ... keeping an online
//      (max, first index of the max, sum of exp(z - max)), rescaling its sum when the max
//      grows; the block merges them in a fixed shuffle / shared-memory tree (larger max
//      wins, a tie goes to the smaller index: the first index of the row's maximum, as on
//      the CPU). Deterministic; the sum is accumulated in the compute type (f32 for f32 and
//      bf16 logits), not the CPU's f64, so compare with a tolerance;
//   2. the gradient written in place.
// z[target] is read by every thread before the block's first barrier, so pass 2's writes
// cannot race with it. A target outside [0, V) (and not ignore_index) gives NaN loss and
// gradient for its row.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/half.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

constexpr int kRowThreads = 512;
constexpr int kWarps = kRowThreads / 32;
constexpr int64_t kNoIndex = INT64_MAX;  // argmax candidate of a thread without elements

// A partial softmax statistic over some elements of a row: their maximum, the first index
// holding it, and sum of exp(z - max) (0 for no elements).
template <class T>
struct RowStats {
  T max;
  T sum;
  int64_t index;
};

// Merges b into a: the larger max (on a tie the smaller index), the sums rescaled to it.
template <class T>
__device__ __forceinline__ RowStats<T> merge(RowStats<T> a, RowStats<T> b) {
  const bool take_b = b.max > a.max || (b.max == a.max && b.index < a.index);
  const T m = take_b ? b.max : a.max;
  // an empty side (sum 0, max -inf) must add 0, not 0 * exp(-inf - -inf) = NaN
  const T sa = a.sum == T(0) ? T(0) : a.sum * math::exp(a.max - m);
  const T sb = b.sum == T(0) ? T(0) : b.sum * math::exp(b.max - m);
  return {m, sa + sb, take_b ? b.index : a.index};
}

// The row's statistic, the same in every thread: a shuffle tree in each warp, then the
// warps' results merged in warp order (a fixed order: deterministic).
template <class T>
__device__ RowStats<T> block_row_stats(RowStats<T> v, RowStats<T>* shared) {
  for (int s = 16; s > 0; s /= 2) {
    RowStats<T> o;
    o.max = __shfl_xor_sync(0xffffffffu, v.max, s);
    o.sum = __shfl_xor_sync(0xffffffffu, v.sum, s);
    o.index = __shfl_xor_sync(0xffffffffu, v.index, s);
    v = merge(v, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  RowStats<T> r = shared[0];
  for (int w = 1; w < kWarps; ++w) r = merge(r, shared[w]);
  __syncthreads();  // shared is reused by the next row
  return r;
}

// kVec elements of T in 16 bytes: one vector load / store per thread per step when the rows
// allow it (Aligned: every row starts on 16 bytes and V is a multiple of kVec).
template <class T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

template <class T>
struct alignas(16) Pack {
  T e[kVec<T>];
};

// Elements j0 .. j0 + P - 1 of row z into e (one 16-byte access when Aligned, else P = 1), and back.
template <bool Aligned, class T, int P>
__device__ __forceinline__ void load_elems(T (&e)[P], const T* z, int64_t j0) {
  if constexpr (Aligned) *reinterpret_cast<Pack<T>*>(e) = *reinterpret_cast<const Pack<T>*>(z + j0);
  else e[0] = z[j0];
}
template <bool Aligned, class T, int P>
__device__ __forceinline__ void store_elems(T* z, int64_t j0, const T (&e)[P]) {
  if constexpr (Aligned) *reinterpret_cast<Pack<T>*>(z + j0) = *reinterpret_cast<const Pack<T>*>(e);
  else z[j0] = e[0];
}

// exp(x) for the rows' softmax: bf16 logits take the fast exponential (ex2.approx, a few ulp
// of f32: far inside the gradient's bf16 rounding; the loss is a log of their sum); f32 and f64
// logits the accurate one (the accurate one left the bf16 kernel bound by its instructions).
template <class T, class A>
__device__ __forceinline__ A row_exp(A x) {
  if constexpr (std::is_same_v<T, bfloat16>) return __expf(x);
  else return math::exp(x);
}

// Storage T (f32, f64 or bf16), compute A = compute_t<T> (f32 for bf16): logits are read as
// A, the gradient rounded to T once, the loss written as A.
template <class T, class I, bool Aligned>
__global__ void __launch_bounds__(kRowThreads) cross_entropy_rows(CrossEntropyParams p) {
  using A = compute_t<T>;
  constexpr int P = Aligned ? kVec<T> : 1;  // elements per thread per step
  __shared__ RowStats<A> stats_shared[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const A scale = static_cast<A>(p.inv_count_at ? *p.inv_count_at : p.inv_count);
  const A nan = static_cast<A>(NAN);
  for (int64_t r = blockIdx.x; r < p.n; r += gridDim.x) {
    T* z = static_cast<T*>(p.logits) + r * p.ld;
    const int64_t t = static_cast<int64_t>(static_cast<const I*>(p.targets)[r]);
    const bool ignored = t == p.ignore_index;
    const bool bad = !ignored && (t < 0 || t >= p.V);
    const A z_t = (ignored || bad) ? A(0) : load_as_compute(z[t]);

    // online max / sum over this thread's elements: per step the pack's max first (its first
    // index on a new maximum), the sum rescaled only when it grows, then one exp an element
    RowStats<A> mine{-static_cast<A>(INFINITY), A(0), kNoIndex};
    for (int64_t j0 = static_cast<int64_t>(tid) * P; j0 < p.V; j0 += static_cast<int64_t>(kRowThreads) * P) {
      T e[P];
      load_elems<Aligned>(e, z, j0);
      A v[P];
#pragma unroll
      for (int u = 0; u < P; ++u) v[u] = load_as_compute(e[u]);
      A pmax = v[0];
#pragma unroll
      for (int u = 1; u < P; ++u) pmax = v[u] > pmax ? v[u] : pmax;
      if (pmax > mine.max) {
        int first = 0;
#pragma unroll
        for (int u = P - 1; u >= 0; --u)
          if (v[u] == pmax) first = u;
        mine.sum = mine.sum == A(0) ? A(0) : mine.sum * row_exp<T>(mine.max - pmax);
        mine.max = pmax;
        mine.index = j0 + first;
      }
#pragma unroll
      for (int u = 0; u < P; ++u) mine.sum += row_exp<T>(v[u] - mine.max);
    }
    const RowStats<A> row = block_row_stats(mine, stats_shared);

    if (tid == 0) {
      const A lse = row.max + math::log(row.sum);
      static_cast<A*>(p.row_loss)[r] = ignored ? A(0) : (bad ? nan : lse - z_t);
      if (p.correct) p.correct[r] = ignored ? -1 : (row.index == t ? 1 : 0);
    }
    if (p.write_grad) {
      const A inv_sum = A(1) / row.sum;
      for (int64_t j0 = static_cast<int64_t>(tid) * P; j0 < p.V; j0 += static_cast<int64_t>(kRowThreads) * P) {
        T e[P];
        load_elems<Aligned>(e, z, j0);
        A g[P];
#pragma unroll
        for (int u = 0; u < P; ++u) g[u] = row_exp<T>(load_as_compute(e[u]) - row.max) * inv_sum;
        if (static_cast<uint64_t>(t - j0) < static_cast<uint64_t>(P))  // the target is in this pack
#pragma unroll
          for (int u = 0; u < P; ++u)
            if (j0 + u == t) g[u] -= A(1);
#pragma unroll
        for (int u = 0; u < P; ++u) g[u] = ignored ? A(0) : (bad ? nan : g[u] * scale);
#pragma unroll
        for (int u = 0; u < P; ++u) e[u] = store_from_compute<T>(g[u]);
        store_elems<Aligned>(z, j0, e);
      }
    }
  }
}

template <class T, class I>
void launch_rows(const CrossEntropyParams& p, dim3 grid, cudaStream_t stream) {
  const bool aligned = p.V % kVec<T> == 0 && p.ld % kVec<T> == 0 && reinterpret_cast<uintptr_t>(p.logits) % 16 == 0;
  if (aligned) {
    auto kernel = cross_entropy_rows<T, I, true>;
    LT_LAUNCH(kernel, grid, kRowThreads, 0, stream, p);
  } else {
    auto kernel = cross_entropy_rows<T, I, false>;
    LT_LAUNCH(kernel, grid, kRowThreads, 0, stream, p);
  }
}

template <class T>
void launch(const CrossEntropyParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.n < kMaxBlocks ? p.n : kMaxBlocks));
  if (p.target_dtype == DType::i32) launch_rows<T, int32_t>(p, grid, stream);
  else if (p.target_dtype == DType::i64) launch_rows<T, int64_t>(p, grid, stream);
  else unsupported_dtype("cuda", "cross_entropy", p.target_dtype);
}

}  // namespace

void cross_entropy(DType dtype, const CrossEntropyParams& p, uintptr_t stream) {
  if (p.n == 0) return;
  if (dtype == DType::f32) launch<float>(p, as_stream(stream));
  else if (dtype == DType::f64) launch<double>(p, as_stream(stream));
  else if (dtype == DType::bf16) launch<bfloat16>(p, as_stream(stream));
  else unsupported_dtype("cuda", "cross_entropy", dtype);
}

}  // namespace lt::kern::cuda
