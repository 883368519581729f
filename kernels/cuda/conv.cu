// Causal depthwise short convolution, CUDA backend (twin: kernels/cpu/conv.cpp; math and
// layout: kernels/conv.h). f32 and bf16 activations; w, dw and every sum in f32.
//
// Work split: a thread owns one channel c of one slot (b, tile of kConvTileT consecutive t);
// the threads of a block take consecutive channels, so every load and store of x, y, dy, dx
// [B, T, C] is a coalesced row segment. Each thread slides a window of the last W inputs
// through registers (kConvMaxWidth slots, indices fixed at compile time after unrolling; slots
// beyond W are masked out), so every x element is loaded about once per tile.
//   conv_forward_tiles   ascending t: window xw[k] = x[t - 7 + k] (right-aligned), y[t].
//   conv_backward_tiles  descending t from the tile's last row + W - 1 (the rows whose da the
//                        tile's dx needs) down to the tile's first: window xw[k] = x[t - W + 1 + k]
//                        (left-aligned) recomputes a[t]; window dwin[j] = da[t + j] gives
//                        dx[t] = sum_j w[W - 1 - j] dwin[j]; the thread's dw partial over its
//                        tile rows goes to scratch[slot, c, :].
//   conv_weight_reduce   thread per (c, i): dw[c, i] += sum over slots in ascending order.
// Deterministic: bit-identical results run to run. Summation orders differ from the CPU
// twin's (compare with a tolerance).
#include "kernels/conv.h"
#include "kernels/cuda/grid.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

constexpr int kConvThreads = 128;  // channels per block
constexpr int kMaxW = static_cast<int>(kConvMaxWidth);
constexpr int64_t kMaxGridY = 65535;

__device__ __forceinline__ float silu_of(float a) { return a / (1.0f + expf(-a)); }
// d silu(a) / da = s (1 + a (1 - s)), s = sigmoid(a)
__device__ __forceinline__ float silu_grad(float a) {
  const float s = 1.0f / (1.0f + expf(-a));
  return s * (1.0f + a * (1.0f - s));
}

template <class T>
__global__ void conv_forward_tiles(ConvParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= p.C) return;
  const T* x = static_cast<const T*>(p.x);
  const float* w = static_cast<const float*>(p.w);
  T* y = static_cast<T*>(p.y);
  const int W = static_cast<int>(p.W);
  const int64_t C = p.C, T_ = p.T;
  const int64_t ntt = (T_ + kConvTileT - 1) / kConvTileT;
  float wr[kMaxW];  // right-aligned taps: wr[k] = w[c, k - (8 - W)] for k >= 8 - W
#pragma unroll
  for (int k = 0; k < kMaxW; ++k) wr[k] = k >= kMaxW - W ? w[c * W + k - (kMaxW - W)] : 0.0f;
  for (int64_t q = blockIdx.y; q < p.B * ntt; q += gridDim.y) {
    const int64_t b = q / ntt, t0 = (q % ntt) * kConvTileT;
    const int64_t t1 = t0 + kConvTileT < T_ ? t0 + kConvTileT : T_;
    const T* xb = x + b * T_ * C + c;  // x[b, t, c] = xb[t * C]
    T* yb = y + b * T_ * C + c;
    const int32_t* pb = p.pos ? p.pos + b * T_ : nullptr;  // row b's document positions
    float xw[kMaxW];  // before row t0: xw[k] = x[t0 - 8 + k]; only the last W - 1 are read
#pragma unroll
    for (int k = 0; k < kMaxW; ++k) {
      const int64_t ts = t0 - kMaxW + k;
      xw[k] = (k > kMaxW - W && ts >= 0) ? load_as_compute(xb[ts * C]) : 0.0f;
    }
    for (int64_t t = t0; t < t1; ++t) {
#pragma unroll
      for (int k = 0; k + 1 < kMaxW; ++k) xw[k] = xw[k + 1];
      xw[kMaxW - 1] = load_as_compute(xb[t * C]);
      const int since = pb ? pb[t] : kMaxW;  // tap k (lag kMaxW - 1 - k) counts when its lag <= since
      float a = 0.0f;
#pragma unroll
      for (int k = 0; k < kMaxW; ++k)
        if (k >= kMaxW - W && kMaxW - 1 - k <= since) a += wr[k] * xw[k];
      yb[t * C] = store_from_compute<T>(p.silu ? silu_of(a) : a);
    }
  }
}

template <class T>
__global__ void conv_backward_tiles(ConvParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= p.C) return;
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  const float* w = static_cast<const float*>(p.w);
  T* dx = static_cast<T*>(p.dx);
  float* scratch = static_cast<float*>(p.scratch);  // [Q, C, W]
  const int W = static_cast<int>(p.W);
  const int64_t C = p.C, T_ = p.T;
  const int64_t ntt = (T_ + kConvTileT - 1) / kConvTileT;
  float wl[kMaxW], wrev[kMaxW];  // wl[k] = w[c, k], wrev[j] = w[c, W - 1 - j] (k, j < W)
#pragma unroll
  for (int k = 0; k < kMaxW; ++k) {
    wl[k] = k < W ? w[c * W + k] : 0.0f;
    wrev[k] = k < W ? w[c * W + W - 1 - k] : 0.0f;
  }
  for (int64_t q = blockIdx.y; q < p.B * ntt; q += gridDim.y) {
    const int64_t b = q / ntt, t0 = (q % ntt) * kConvTileT;
    const int64_t t_tile_end = t0 + kConvTileT < T_ ? t0 + kConvTileT : T_;
    const int64_t t_hi = t_tile_end - 1 + W - 1 < T_ - 1 ? t_tile_end - 1 + W - 1 : T_ - 1;
    const T* xb = x + b * T_ * C + c;
    const T* dyb = dy + b * T_ * C + c;
    T* dxb = dx + b * T_ * C + c;
    const int32_t* pb = p.pos ? p.pos + b * T_ : nullptr;  // row b's document positions
    // xw[k] = x[t - W + 1 + k]; dwin[j] = da[t + j], swin[j] = pos[t + j] (tap of lag j into x[t])
    float xw[kMaxW], dwin[kMaxW], dw_part[kMaxW];
    int swin[kMaxW];
#pragma unroll
    for (int k = 0; k < kMaxW; ++k) {
      const int64_t ts = t_hi - W + 1 + k;
      xw[k] = (k < W && ts >= 0) ? load_as_compute(xb[ts * C]) : 0.0f;
      dwin[k] = 0.0f;  // da beyond t_hi: past the sequence end, or not needed by this tile
      swin[k] = kMaxW;
      dw_part[k] = 0.0f;
    }
    for (int64_t t = t_hi; t >= t0; --t) {
      const int since = pb ? pb[t] : kMaxW;  // tap k of a[t] (lag W - 1 - k) counts when its lag <= since
      float a = 0.0f;
#pragma unroll
      for (int k = 0; k < kMaxW; ++k)
        if (k < W && W - 1 - k <= since) a += wl[k] * xw[k];
      const float g = load_as_compute(dyb[t * C]);
      const float da = p.silu ? g * silu_grad(a) : g;
#pragma unroll
      for (int j = kMaxW - 1; j > 0; --j) dwin[j] = dwin[j - 1], swin[j] = swin[j - 1];
      dwin[0] = da;
      swin[0] = since;
      if (t < t_tile_end) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < kMaxW; ++j)
          if (j < W && j <= swin[j]) acc += wrev[j] * dwin[j];
        dxb[t * C] = store_from_compute<T>(acc);
#pragma unroll
        for (int k = 0; k < kMaxW; ++k)
          if (k < W && W - 1 - k <= since) dw_part[k] += da * xw[k];
      }
#pragma unroll
      for (int k = kMaxW - 1; k > 0; --k) xw[k] = xw[k - 1];
      xw[0] = t - W >= 0 ? load_as_compute(xb[(t - W) * C]) : 0.0f;
    }
    float* part = scratch + (q * C + c) * W;  // [W]
#pragma unroll
    for (int k = 0; k < kMaxW; ++k)
      if (k < W) part[k] = dw_part[k];
  }
}

__global__ void conv_weight_reduce(ConvParams p, int64_t slots) {
  const float* scratch = static_cast<const float*>(p.scratch);  // [Q, C, W]
  float* dw = static_cast<float*>(p.dw);
  const int64_t n = p.C * p.W;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    float sum = 0.0f;
    for (int64_t q = 0; q < slots; ++q) sum += scratch[q * n + i];
    dw[i] += sum;
  }
}

template <class T>
void launch_conv(ConvPass pass, const ConvParams& p, cudaStream_t stream) {
  const int64_t slots = conv_weight_slots(p.B, p.T);
  const dim3 grid(static_cast<unsigned>((p.C + kConvThreads - 1) / kConvThreads),
                  static_cast<unsigned>(slots < kMaxGridY ? slots : kMaxGridY));
  if (pass == ConvPass::forward) {
    auto kernel = conv_forward_tiles<T>;
    LT_LAUNCH(kernel, grid, kConvThreads, 0, stream, p);
    return;
  }
  auto kernel = conv_backward_tiles<T>;
  LT_LAUNCH(kernel, grid, kConvThreads, 0, stream, p);
  LT_LAUNCH(conv_weight_reduce, grid_for(p.C * p.W), kThreads, 0, stream, p, slots);
}

}  // namespace

void conv(ConvPass pass, DType dtype, const ConvParams& p, uintptr_t stream) {
  if (p.B * p.T * p.C == 0) return;
  switch (dtype) {
    case DType::f32: launch_conv<float>(pass, p, as_stream(stream)); break;
    case DType::bf16: launch_conv<bfloat16>(pass, p, as_stream(stream)); break;
    default: unsupported_dtype("cuda", "conv", dtype);
  }
}

}  // namespace lt::kern::cuda
