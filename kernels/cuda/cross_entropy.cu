// Cross-entropy rows, CUDA backend (twin: kernels/cpu/cross_entropy.cpp; contract:
// kernels/cross_entropy.h). f32 and f64 logits.
//
// One block of kThreads per row (grid-stride over rows). Three passes over the row:
//   1. max and argmax: each thread scans j = tid, tid + kThreads, ... keeping the first
//      index of its maximum; the block combines (value, index) pairs preferring the larger
//      value, then the smaller index: the first index of the row's maximum, as on the CPU;
//   2. sum of exp(z_j - max): per-thread partial sums, then a fixed shuffle / shared tree
//      (deterministic; accumulated in the logits' dtype, not the CPU's f64: compare with a
//      tolerance);
//   3. the gradient written in place.
// z[target] is read by every thread before the first block barrier, so pass 3's writes
// cannot race with it. A target outside [0, V) (and not ignore_index) gives NaN loss and
// gradient for its row.
#include <cmath>
#include <cstdint>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

constexpr int kRowThreads = 512;
constexpr int kWarps = kRowThreads / 32;
constexpr int64_t kNoIndex = INT64_MAX;  // argmax candidate of a thread without elements

template <class T>
struct MaxArg {
  T value;
  int64_t index;
};

// b replaces a when larger, or equal with a smaller index.
template <class T>
__device__ __forceinline__ MaxArg<T> better(MaxArg<T> a, MaxArg<T> b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

template <class T>
__device__ MaxArg<T> block_max_arg(MaxArg<T> v, MaxArg<T>* shared) {
  for (int s = 16; s > 0; s /= 2) {
    MaxArg<T> o;
    o.value = __shfl_xor_sync(0xffffffffu, v.value, s);
    o.index = __shfl_xor_sync(0xffffffffu, v.index, s);
    v = better(v, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  MaxArg<T> r = shared[0];
  for (int w = 1; w < kWarps; ++w) r = better(r, shared[w]);
  __syncthreads();  // shared is reused by the next reduction
  return r;
}

template <class T>
__device__ T block_sum(T v, T* shared) {
  for (int s = 16; s > 0; s /= 2) v += __shfl_xor_sync(0xffffffffu, v, s);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = shared[0];
  for (int w = 1; w < kWarps; ++w) r += shared[w];
  __syncthreads();
  return r;
}

template <class T, class I>
__global__ void __launch_bounds__(kRowThreads) cross_entropy_rows(CrossEntropyParams p) {
  __shared__ MaxArg<T> max_shared[kWarps];
  __shared__ T sum_shared[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const T scale = static_cast<T>(p.inv_count);
  const T nan = static_cast<T>(NAN);
  for (int64_t r = blockIdx.x; r < p.n; r += gridDim.x) {
    T* z = static_cast<T*>(p.logits) + r * p.ld;
    const int64_t t = static_cast<int64_t>(static_cast<const I*>(p.targets)[r]);
    const bool ignored = t == p.ignore_index;
    const bool bad = !ignored && (t < 0 || t >= p.V);
    const T z_t = (ignored || bad) ? T(0) : z[t];

    MaxArg<T> mine{-static_cast<T>(INFINITY), kNoIndex};
    if (tid < p.V) mine = {z[tid], tid};
    for (int64_t j = tid + kRowThreads; j < p.V; j += kRowThreads)
      if (z[j] > mine.value) mine = {z[j], j};
    const MaxArg<T> top = block_max_arg(mine, max_shared);

    T partial = T(0);
    for (int64_t j = tid; j < p.V; j += kRowThreads) partial += math::exp(z[j] - top.value);
    const T sum = block_sum(partial, sum_shared);

    if (tid == 0) {
      const T lse = top.value + math::log(sum);
      static_cast<T*>(p.row_loss)[r] = ignored ? T(0) : (bad ? nan : lse - z_t);
      if (p.correct) p.correct[r] = ignored ? -1 : (top.index == t ? 1 : 0);
    }
    if (p.write_grad) {
      const T inv_sum = T(1) / sum;
      for (int64_t j = tid; j < p.V; j += kRowThreads) {
        T g;
        if (ignored) g = T(0);
        else if (bad) g = nan;
        else g = (math::exp(z[j] - top.value) * inv_sum - (j == t ? T(1) : T(0))) * scale;
        z[j] = g;
      }
    }
  }
}

template <class T>
void launch(const CrossEntropyParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.n < kMaxBlocks ? p.n : kMaxBlocks));
  if (p.target_dtype == DType::i32) {
    auto kernel = cross_entropy_rows<T, int32_t>;
    LT_LAUNCH(kernel, grid, kRowThreads, 0, stream, p);
  } else if (p.target_dtype == DType::i64) {
    auto kernel = cross_entropy_rows<T, int64_t>;
    LT_LAUNCH(kernel, grid, kRowThreads, 0, stream, p);
  } else {
    unsupported_dtype("cuda", "cross_entropy", p.target_dtype);
  }
}

}  // namespace

void cross_entropy(DType dtype, const CrossEntropyParams& p, uintptr_t stream) {
  if (p.n == 0) return;
  if (dtype == DType::f32) launch<float>(p, as_stream(stream));
  else if (dtype == DType::f64) launch<double>(p, as_stream(stream));
  else unsupported_dtype("cuda", "cross_entropy", dtype);
}

}  // namespace lt::kern::cuda
