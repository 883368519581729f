// AdamW kernels, CUDA backend (twin: kernels/cpu/adamw.cpp; formulas in kernels/adamw.h).
//
// grad_norm, two launches, deterministic (the same bits run to run for the same input):
//   sum_squares_partials  kGradNormPartials blocks x 256 threads; block b owns the fixed chunk
//                         [b * chunk, (b + 1) * chunk) (kernels/adamw.h); each thread sums
//                         the squares of a fixed strided subset in f64 (16-byte vector loads
//                         when the chunk is 16-byte aligned), then a fixed shuffle tree and an
//                         ordered sum over the 8 warps give partials[b].
//   sum_squares_finish    one block: thread t sums partials t, t + 256, ... in order, the same
//                         fixed tree combines them; norm = sqrt, rounded to the dtype.
// update, one launch: every thread reads the norm (and the loss, when gated) from device memory
//   and computes the skip code; global thread 0 writes the report, and on a skip increments
//   *skipped (the only writer); a skip leaves params and moments alone
//   (the bf16 shadow is still rewritten from params). Otherwise a grid-stride loop applies the
//   update, four elements per iteration with 16-byte loads and stores when every arena is
//   16-byte aligned (8 bytes for the shadow). f32 arenas compute in f32, f64 in f64.
//   Elementwise: deterministic.
#include <cstdint>

#include "kernels/adamw.h"
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int kNormWarps = kNormThreads / 32;

// 16-byte vector of T: float4 for f32, double2 for f64.
template <class T>
struct Vec16;
template <>
struct Vec16<float> {
  using type = float4;
  static constexpr int kLanes = 4;
};
template <>
struct Vec16<double> {
  using type = double2;
  static constexpr int kLanes = 2;
};

__device__ __forceinline__ double sum_sq(float4 x) {
  const double a = x.x, b = x.y, c = x.z, d = x.w;
  return a * a + b * b + c * c + d * d;
}
__device__ __forceinline__ double sum_sq(double2 x) { return x.x * x.x + x.y * x.y; }

// Sum of one value per thread over the block: shuffle tree inside each warp (offsets 16 .. 1),
// then thread 0 adds the warps' sums in warp order. The result is valid in thread 0.
__device__ __forceinline__ double block_sum(double s) {
  __shared__ double warp_sums[kNormWarps];
  for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kNormWarps; ++w) total += warp_sums[w];
  return total;
}

template <class T>
__global__ void sum_squares_partials(AdamWParams p) {
  const T* g = static_cast<const T*>(p.grads);
  const int64_t chunk = grad_norm_chunk(p.n);
  const int64_t begin = min(p.n, static_cast<int64_t>(blockIdx.x) * chunk);
  const int64_t end = min(p.n, begin + chunk);
  double s = 0.0;
  using V = typename Vec16<T>::type;
  constexpr int kLanes = Vec16<T>::kLanes;
  int64_t i = begin;
  if (reinterpret_cast<uintptr_t>(g + begin) % 16 == 0) {
    const int64_t nvec = (end - begin) / kLanes;
    const V* gv = reinterpret_cast<const V*>(g + begin);
#pragma unroll 4  // several 16-byte loads in flight per thread
    for (int64_t j = threadIdx.x; j < nvec; j += kNormThreads) s += sum_sq(__ldg(gv + j));
    i = begin + nvec * kLanes;
  }
  for (int64_t k = i + threadIdx.x; k < end; k += kNormThreads) {
    const double x = static_cast<double>(g[k]);
    s += x * x;
  }
  const double total = block_sum(s);
  if (threadIdx.x == 0) p.partials[blockIdx.x] = total;
}

template <class T>
__global__ void sum_squares_finish(AdamWParams p) {
  double s = 0.0;
  for (int64_t b = threadIdx.x; b < kGradNormPartials; b += kNormThreads) s += p.partials[b];
  const double total = block_sum(s);
  if (threadIdx.x == 0) *static_cast<T*>(p.norm) = static_cast<T>(sqrt(total));
}

// The per-element AdamW arithmetic in C (float for f32 arenas, double for f64).
template <class C>
struct AdamWMath {
  C scale, beta1, beta2, one_minus_beta1, one_minus_beta2, lr, eps, wd, bc1, bc2;
  // Updates m, v and returns the new parameter.
  __device__ __forceinline__ C step(C g, C& m, C& v, C p, bool decay) const {
    g *= scale;
    m = beta1 * m + one_minus_beta1 * g;
    v = beta2 * v + one_minus_beta2 * g * g;
    C u = (m / bc1) / (sqrt(v / bc2) + eps);
    if (decay) u += wd * p;
    return p - lr * u;
  }
};

template <class T>
__global__ void adamw_update(AdamWParams p) {
  using C = compute_t<T>;
  T* params = static_cast<T*>(p.params);
  bfloat16* shadow = static_cast<bfloat16*>(p.shadow);
  const T norm_t = *static_cast<const T*>(p.norm);
  const C norm = static_cast<C>(norm_t);
  // The skip code (kernels/adamw.h), the same in every thread; the spike test in f64.
  const double loss =
      p.loss ? static_cast<double>(*static_cast<const T*>(p.loss)) : __longlong_as_double(0x7ff8000000000000ll);
  SkipCode code = SkipCode::applied;
  if (p.loss && !isfinite(loss)) code = SkipCode::nonfinite_loss;
  else if (!isfinite(norm)) code = SkipCode::nonfinite_norm;
  else if (p.spike_test && p.spike_sd > 0.0 && __ddiv_rn(__dsub_rn(loss, p.spike_mean), p.spike_sd) > p.spike_zscore)
    code = SkipCode::loss_spike;
  if (p.report && global_thread() == 0) {
    p.report[0] = loss;
    p.report[1] = static_cast<double>(norm_t);
    p.report[2] = static_cast<double>(static_cast<int32_t>(code));
  }
  if (code != SkipCode::applied) {
    if (global_thread() == 0) *p.skipped += 1;
    if (shadow)
      for (int64_t i = global_thread(); i < p.n; i += grid_threads())
        shadow[i] = bfloat16(static_cast<float>(params[i]));
    return;
  }
  AdamWMath<C> am;
  am.scale = p.max_grad_norm > 0.0 ? min(C(1), static_cast<C>(p.max_grad_norm) / (norm + C(1e-6))) : C(1);
  am.beta1 = static_cast<C>(p.beta1);
  am.beta2 = static_cast<C>(p.beta2);
  am.one_minus_beta1 = static_cast<C>(1.0 - p.beta1);
  am.one_minus_beta2 = static_cast<C>(1.0 - p.beta2);
  am.lr = static_cast<C>(p.lr);
  am.eps = static_cast<C>(p.eps);
  am.wd = static_cast<C>(p.weight_decay);
  am.bc1 = static_cast<C>(p.bc1);
  am.bc2 = static_cast<C>(p.bc2);
  const T* grads = static_cast<const T*>(p.grads);
  T* m = static_cast<T*>(p.m);
  T* v = static_cast<T*>(p.v);

  int64_t done = 0;  // elements [0, done) are handled by the vector loop
  if constexpr (sizeof(T) == 4) {
    const bool aligned = (reinterpret_cast<uintptr_t>(params) | reinterpret_cast<uintptr_t>(grads) |
                          reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v)) %
                                 16 ==
                             0 &&
                         reinterpret_cast<uintptr_t>(shadow) % 8 == 0;
    if (aligned) {
      const int64_t nvec = p.n / 4;
      for (int64_t j = global_thread(); j < nvec; j += grid_threads()) {
        const float4 g4 = __ldg(reinterpret_cast<const float4*>(grads) + j);
        float4 m4 = reinterpret_cast<float4*>(m)[j];
        float4 v4 = reinterpret_cast<float4*>(v)[j];
        float4 p4 = reinterpret_cast<float4*>(params)[j];
        const int64_t i = 4 * j;
        p4.x = am.step(g4.x, m4.x, v4.x, p4.x, i < p.decay_end);
        p4.y = am.step(g4.y, m4.y, v4.y, p4.y, i + 1 < p.decay_end);
        p4.z = am.step(g4.z, m4.z, v4.z, p4.z, i + 2 < p.decay_end);
        p4.w = am.step(g4.w, m4.w, v4.w, p4.w, i + 3 < p.decay_end);
        reinterpret_cast<float4*>(m)[j] = m4;
        reinterpret_cast<float4*>(v)[j] = v4;
        reinterpret_cast<float4*>(params)[j] = p4;
        if (shadow) {
          // four bf16 as one 8-byte store: element 4j in the low half of the first word
          const uint2 packed = make_uint2(
              static_cast<uint32_t>(float_to_bf16_bits(p4.x)) | (static_cast<uint32_t>(float_to_bf16_bits(p4.y)) << 16),
              static_cast<uint32_t>(float_to_bf16_bits(p4.z)) |
                  (static_cast<uint32_t>(float_to_bf16_bits(p4.w)) << 16));
          reinterpret_cast<uint2*>(shadow)[j] = packed;
        }
      }
      done = nvec * 4;
    }
  }
  for (int64_t i = done + global_thread(); i < p.n; i += grid_threads()) {
    C mi = static_cast<C>(m[i]), vi = static_cast<C>(v[i]);
    const C pn = am.step(static_cast<C>(grads[i]), mi, vi, static_cast<C>(params[i]), i < p.decay_end);
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    params[i] = static_cast<T>(pn);
    if (shadow) shadow[i] = bfloat16(static_cast<float>(pn));
  }
}

template <class T>
void run(AdamWOp op, const AdamWParams& p, cudaStream_t stream) {
  if (op == AdamWOp::grad_norm) {
    auto partials = sum_squares_partials<T>;
    LT_LAUNCH(partials, dim3(static_cast<unsigned>(kGradNormPartials)), kNormThreads, 0, stream, p);
    auto finish = sum_squares_finish<T>;
    LT_LAUNCH(finish, dim3(1), kNormThreads, 0, stream, p);
  } else {
    auto update = adamw_update<T>;
    const int64_t work = sizeof(T) == 4 ? (p.n + 3) / 4 : p.n;
    LT_LAUNCH(update, grid_for(work), kThreads, 0, stream, p);
  }
}

}  // namespace

void adamw(AdamWOp op, DType dtype, const AdamWParams& p, uintptr_t stream) {
  switch (dtype) {
    case DType::f32: run<float>(op, p, as_stream(stream)); break;
    case DType::f64: run<double>(op, p, as_stream(stream)); break;
    default: unsupported_dtype("cuda", "adamw", dtype);
  }
}

}  // namespace lt::kern::cuda
