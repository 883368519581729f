// Causal depthwise short convolution, CUDA backend (twin: kernels/cpu/conv.cpp; math and
// layout: kernels/conv.h). f32 and bf16 activations; w, dw and every sum in f32.
//
// Work split: a block of 32 x 4 threads covers 32 channel groups of one slot (b, tile of
// kConvTileT = 32 consecutive t); thread (gx, sub) owns the V channels of group gx (V = 4 when
// C and the pointers allow a V-wide vector access, else 1) for the kSub = 8 tokens of sub-tile
// `sub`. It loads every input row it needs at once (V-wide loads; a warp reads a contiguous row
// segment of 32 x V elements per token) into registers, the width W a compile-time constant,
// so all loads of a thread are in flight together and no index is dynamic.
//   conv_forward_tiles   x[t0 - W + 1 .. t0 + 7] -> y[t0 .. t0 + 7].
//   conv_backward_tiles  x[t0 - W + 1 .. t0 + 7 + W - 1] and dy[t0 .. t0 + 7 + W - 1] give the
//                        pre-activations and da of the rows whose taps reach the sub-tile, then
//                        dx[t0 .. t0 + 7] and the sub-tile's dw partial; the block sums its four
//                        sub-tiles' partials in shared memory in ascending order and writes the
//                        slot's [C, W] partial to scratch[slot].
//   conv_weight_reduce   dw[c, i] += sum over slots: warp w of a block sums slots w, w + 8, ...
//                        of 32 outputs, then the 8 warp sums are added in ascending order.
// Deterministic: bit-identical results run to run. Summation orders differ from the CPU
// twin's (compare with a tolerance).
#include "kernels/conv.h"
#include "kernels/cuda/grid.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

constexpr int kGroupsX = 32;                                    // channel groups per block
constexpr int kSub = 8;                                         // tokens per thread
constexpr int kSubTiles = static_cast<int>(kConvTileT) / kSub;  // threads per group in a block
constexpr int kReduceWarps = 8;
constexpr int64_t kMaxGridY = 65535;
static_assert(kConvTileT % kSub == 0, "a slot is a whole number of sub-tiles");

__device__ __forceinline__ float silu_of(float a) { return a / (1.0f + expf(-a)); }
// d silu(a) / da = s (1 + a (1 - s)), s = sigmoid(a); the fast exponential and reciprocal
// (a few ulp: the gradient, not a stored activation, and far inside bf16's rounding)
__device__ __forceinline__ float silu_grad(float a) {
  const float s = __frcp_rn(1.0f + __expf(-a));
  return s * (1.0f + a * (1.0f - s));
}

// V consecutive channels of one token, moved as one access.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};
template <class T, int V>
__device__ __forceinline__ void load_pack(const T* src, float (&out)[V]) {
  const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(src);
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = load_as_compute(pk.v[v]);
}
template <class T, int V>
__device__ __forceinline__ void store_pack(T* dst, const float (&in)[V]) {
  Pack<T, V> pk;
#pragma unroll
  for (int v = 0; v < V; ++v) pk.v[v] = store_from_compute<T>(in[v]);
  *reinterpret_cast<Pack<T, V>*>(dst) = pk;
}

// w[c0 + v, k] for the thread's channels (zeros past C).
template <int V, int W>
__device__ __forceinline__ void load_taps(const ConvParams& p, int64_t c0, float (&wk)[V][W]) {
  const float* w = static_cast<const float*>(p.w);
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int k = 0; k < W; ++k) wk[v][k] = c0 + v < p.C ? w[(c0 + v) * W + k] : 0.0f;
}

// xs[i] = x[t_first + i] for i < N, zeros outside [0, T); xb points at x[b, 0, c0], rows C apart.
template <class T, int V, int N>
__device__ __forceinline__ void load_rows(const T* xb, int64_t t_first, int64_t T_, int64_t C, float (&xs)[N][V]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int64_t ts = t_first + i;
    if (ts >= 0 && ts < T_) load_pack<T, V>(xb + ts * C, xs[i]);
    else
#pragma unroll
      for (int v = 0; v < V; ++v) xs[i][v] = 0.0f;
  }
}

template <class T, int V, int W, bool Pos>
__global__ void __launch_bounds__(kGroupsX* kSubTiles) conv_forward_tiles(ConvParams p) {
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * kGroupsX + threadIdx.x) * V;
  if (c0 >= p.C) return;
  const int64_t C = p.C, T_ = p.T;
  const int64_t ntt = (T_ + kConvTileT - 1) / kConvTileT;
  float wk[V][W];
  load_taps<V, W>(p, c0, wk);
  for (int64_t q = blockIdx.y; q < p.B * ntt; q += gridDim.y) {
    const int64_t b = q / ntt, t0 = (q % ntt) * kConvTileT + threadIdx.y * kSub;
    if (t0 >= T_) continue;
    const T* xb = static_cast<const T*>(p.x) + b * T_ * C + c0;  // x[b, t, c0] = xb[t * C]
    T* yb = static_cast<T*>(p.y) + b * T_ * C + c0;
    const int32_t* pb = Pos && p.pos ? p.pos + b * T_ : nullptr;  // row b's document positions
    float xs[kSub + W - 1][V];                                    // xs[i] = x[t0 - W + 1 + i]
    load_rows<T, V, kSub + W - 1>(xb, t0 - W + 1, T_, C, xs);
#pragma unroll
    for (int i = 0; i < kSub; ++i) {
      const int64_t t = t0 + i;
      if (t >= T_) break;
      const int since = pb ? pb[t] : W;  // the tap of lag L counts when L <= since
      float a[V];
#pragma unroll
      for (int v = 0; v < V; ++v) {
        a[v] = 0.0f;
#pragma unroll
        for (int k = 0; k < W; ++k)
          if (W - 1 - k <= since) a[v] += wk[v][k] * xs[i + k][v];
        if (p.silu) a[v] = silu_of(a[v]);
      }
      store_pack<T, V>(yb + t * C, a);
    }
  }
}

template <class T, int V, int W, bool Pos>
__global__ void __launch_bounds__(kGroupsX* kSubTiles) conv_backward_tiles(ConvParams p) {
  constexpr int E = kSub + W - 1;  // rows t0 .. t0 + E - 1 whose da the sub-tile's dx reads
  __shared__ float part_s[kSubTiles][kGroupsX * V * W];
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * kGroupsX + threadIdx.x) * V;
  const bool active = c0 < p.C;
  const int64_t C = p.C, T_ = p.T;
  const int64_t ntt = (T_ + kConvTileT - 1) / kConvTileT;
  float wk[V][W];
  load_taps<V, W>(p, c0, wk);
  for (int64_t q = blockIdx.y; q < p.B * ntt; q += gridDim.y) {
    const int64_t b = q / ntt, t0 = (q % ntt) * kConvTileT + threadIdx.y * kSub;
    float dwp[V][W];
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int k = 0; k < W; ++k) dwp[v][k] = 0.0f;
    if (active && t0 < T_) {
      const T* xb = static_cast<const T*>(p.x) + b * T_ * C + c0;
      const T* dyb = static_cast<const T*>(p.dy) + b * T_ * C + c0;
      T* dxb = static_cast<T*>(p.dx) + b * T_ * C + c0;
      const int32_t* pb = Pos && p.pos ? p.pos + b * T_ : nullptr;  // null: one document a row
      float xs[E + W - 1][V];                                       // xs[i] = x[t0 - W + 1 + i]
      float da[E][V];  // da[e] = dy[t0 + e] silu'(a[t0 + e]); 0 past the row's end
      int since[E];    // pos[t0 + e]: the taps of a[t0 + e] count up to this lag
      load_rows<T, V, E + W - 1>(xb, t0 - W + 1, T_, C, xs);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int64_t u = t0 + e;
        if (u < T_) {
          load_pack<T, V>(dyb + u * C, da[e]);
          since[e] = pb ? pb[u] : W;
        } else {
#pragma unroll
          for (int v = 0; v < V; ++v) da[e][v] = 0.0f;
          since[e] = W;
        }
      }
      if (p.silu)
#pragma unroll
        for (int e = 0; e < E; ++e)
#pragma unroll
          for (int v = 0; v < V; ++v) {
            float a = 0.0f;
#pragma unroll
            for (int k = 0; k < W; ++k)
              if (W - 1 - k <= since[e]) a += wk[v][k] * xs[e + k][v];
            da[e][v] *= silu_grad(a);
          }
#pragma unroll
      for (int i = 0; i < kSub; ++i) {
        const int64_t t = t0 + i;
        if (t >= T_) break;
        float dx[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
          // x[t] feeds output t + j through the tap of lag j (weight W - 1 - j)
          float acc = 0.0f;
#pragma unroll
          for (int j = 0; j < W; ++j)
            if (j <= since[i + j]) acc += wk[v][W - 1 - j] * da[i + j][v];
          dx[v] = acc;
#pragma unroll
          for (int k = 0; k < W; ++k)
            if (W - 1 - k <= since[i]) dwp[v][k] += da[i][v] * xs[i + k][v];
        }
        store_pack<T, V>(dxb + t * C, dx);
      }
    }
    // The slot's dw partial: the four sub-tiles in ascending order.
    __syncthreads();  // the previous slot's partials have been read
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int k = 0; k < W; ++k) part_s[threadIdx.y][(threadIdx.x * V + v) * W + k] = dwp[v][k];
    __syncthreads();
    if (threadIdx.y == 0 && active) {
      float* part = static_cast<float*>(p.scratch) + (q * C + c0) * W;  // [V, W] of [C, W]
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int k = 0; k < W; ++k) {
          if (c0 + v >= C) continue;
          float s = 0.0f;
#pragma unroll
          for (int st = 0; st < kSubTiles; ++st) s += part_s[st][(threadIdx.x * V + v) * W + k];
          part[v * W + k] = s;
        }
    }
  }
}

// Block of 32 x kReduceWarps: lane = output (c, i) within 32, warp = a residue class of slots.
__global__ void __launch_bounds__(32 * kReduceWarps) conv_weight_reduce(ConvParams p, int64_t slots) {
  __shared__ float warp_sum[kReduceWarps][32];
  const float* scratch = static_cast<const float*>(p.scratch);  // [Q, C, W]
  const int64_t n = p.C * p.W;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  float sum = 0.0f;
  if (i < n)
    for (int64_t q = warp; q < slots; q += kReduceWarps) sum += scratch[q * n + i];
  warp_sum[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && i < n) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kReduceWarps; ++w) total += warp_sum[w][lane];
    static_cast<float*>(p.dw)[i] += total;
  }
}

// Whether every [B, T, C] operand allows V-wide accesses: C % V == 0 and V-element alignment.
template <class T>
bool packs_fit(const ConvParams& p, ConvPass pass, int V) {
  auto ok = [&](const void* ptr) { return ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % (sizeof(T) * V) == 0; };
  if (p.C % V != 0 || !ok(p.x)) return false;
  return pass == ConvPass::forward ? ok(p.y) : ok(p.dy) && ok(p.dx);
}

template <class T, int V, int W, bool Pos>
void launch_width(ConvPass pass, const ConvParams& p, cudaStream_t stream) {
  const int64_t slots = conv_weight_slots(p.B, p.T);
  const int64_t groups = (p.C + V - 1) / V;
  const dim3 grid(static_cast<unsigned>((groups + kGroupsX - 1) / kGroupsX),
                  static_cast<unsigned>(slots < kMaxGridY ? slots : kMaxGridY));
  const dim3 block(kGroupsX, kSubTiles);
  if (pass == ConvPass::forward) {
    auto kernel = conv_forward_tiles<T, V, W, Pos>;
    LT_LAUNCH(kernel, grid, block, 0, stream, p);
    return;
  }
  auto kernel = conv_backward_tiles<T, V, W, Pos>;
  LT_LAUNCH(kernel, grid, block, 0, stream, p);
  const auto reduce_blocks = static_cast<unsigned>((p.C * p.W + 31) / 32);
  LT_LAUNCH(conv_weight_reduce, dim3(reduce_blocks), dim3(32 * kReduceWarps), 0, stream, p, slots);
}

template <class T, int V, bool Pos>
void launch_vec(ConvPass pass, const ConvParams& p, cudaStream_t stream) {
  switch (p.W) {
    case 1: launch_width<T, V, 1, Pos>(pass, p, stream); break;
    case 2: launch_width<T, V, 2, Pos>(pass, p, stream); break;
    case 3: launch_width<T, V, 3, Pos>(pass, p, stream); break;
    case 4: launch_width<T, V, 4, Pos>(pass, p, stream); break;
    case 5: launch_width<T, V, 5, Pos>(pass, p, stream); break;
    case 6: launch_width<T, V, 6, Pos>(pass, p, stream); break;
    case 7: launch_width<T, V, 7, Pos>(pass, p, stream); break;
    case 8: launch_width<T, V, 8, Pos>(pass, p, stream); break;
    default: throw std::invalid_argument("conv: width " + std::to_string(p.W) + " outside 1..8");
  }
}

template <class T>
void launch_conv(ConvPass pass, const ConvParams& p, cudaStream_t stream) {
  // Without document positions every tap counts: the packed path compiles that in (Pos
  // false: pb is a constant null, no position loads, no per-tap test); the element path keeps
  // the general form, which tests pb at run time.
  if (!packs_fit<T>(p, pass, 4)) launch_vec<T, 1, true>(pass, p, stream);
  else if (p.pos != nullptr) launch_vec<T, 4, true>(pass, p, stream);
  else launch_vec<T, 4, false>(pass, p, stream);
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
