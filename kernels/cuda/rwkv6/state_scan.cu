// RWKV6 state scans (stage `state_scan` of the forward, `scans` of the backward): the forward
// scan of the chunk states h[n] (and ht) and the reverse scan of their gradients dh[n] (and
// dh0), one grid layer each; the SIMT fp32 kernel rwkv6_state_scan, the tensor-core kernel
// rwkv6_state_scan_tc, and their launchers.
#include "kernels/cuda/rwkv6/tc_common.cuh"

namespace lt::rwkv6 {
namespace {

// =======================================================================================
// State scans. grid (tiles, B*H, nz): tile = W x W block (rows: key dim, cols: value dim)
// of the state; z + z_offset = 0: forward scan S <- e^g S + (K e^{g-Gi})^T V storing h[n]
// (the state entering chunk n; 0 where chunk n starts a segment) and ht; = 1: reverse scan S' <- e^g S' + scale (Q e^Ge)^T dO
// storing dh[n] (the gradient of the state leaving chunk n) and dh0.
// Every (row tile, col tile) pair evolves independently, so tiles are separate CTAs; each
// recomputes the gates of its W key columns. The next chunk's tiles are prefetched into
// registers while the current one is multiplied.
// Packed documents: chunk n of row b starts a segment (FusedArgs::chunk_reset; n < NT). The
// forward scan then enters chunk n with S = 0; the reverse scan carries S' = 0 out of it (to
// chunk n - 1, or to dh0 for n = 0).
__device__ __forceinline__ bool segment_break(const FusedArgs& a, int64_t b, int64_t NT, int64_t n) {
  return a.chunk_reset != nullptr && n < NT && a.chunk_reset[b * NT + n] != 0;
}

template <class Tin, int C, int W>
__global__ void __launch_bounds__(kThreads) rwkv6_state_scan(const FusedArgs a, int z_offset) {
  ::lt::pdl_enter();  // launched with LT_LAUNCH_PDL (kernels/cuda/pdl.cuh)
  constexpr int LD = W + 1, TM = W / 16, E = C * W / kThreads;
  static_assert(E >= 1 && (C * W) % kThreads == 0, "tile elements per thread");
  extern __shared__ float smem[];
  float* w_s = smem;            // [C][LD] w, then Gi
  float* x_s = w_s + C * LD;    // [C][LD] k e^{g-Gi}   or  scale q e^{Ge}
  float* y_s = x_s + C * LD;    // [C][LD] v            or  dO
  float* gam_s = y_s + C * LD;  // [W] gamma per key column

  const bool reverse = (blockIdx.z + z_offset) == 1;
  const int64_t B = a.dims.B, T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int64_t NT = (T + C - 1) / C;
  const int ntile = static_cast<int>(D / W);
  const int tr = blockIdx.x / ntile, tc = blockIdx.x % ntile;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H;
  (void)B;
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t rs = H * D;
  const int64_t base = (b * T * H + h) * D;
  const Tin* xsrc = static_cast<const Tin*>(reverse ? a.r : a.k) + base + tr * W;
  const Tin* ysrc = static_cast<const Tin*>(reverse ? a.dO : a.v) + base + tc * W;
  const Tin* wsrc = static_cast<const Tin*>(a.w) + base + tr * W;
  const float scale = a.scale;

  float S[TM][TM];
  const float* init = reverse ? a.dht : a.h0;
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TM; ++j)
      S[i][j] = init ? init[(bh * D + tr * W + ty + 16 * i) * D + tc * W + tx + 16 * j] : 0.f;
  float* traj = reverse ? a.dh : a.h;

  float rw[E], rx[E], ry[E];
  auto prefetch = [&](int64_t n) {
    const int L = rows_in_chunk(C, T, n);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int idx = tid + e * kThreads, r = idx / W, c = idx % W;
      const int64_t off = (n * C + r) * rs + c;
      const bool ok = r < L;
      rw[e] = ok ? ldg(wsrc, off) : 0.f;
      rx[e] = ok ? ldg(xsrc, off) : 0.f;
      ry[e] = ok ? ldg(ysrc, off) : 0.f;
    }
  };
  prefetch(reverse ? NT - 1 : 0);
  for (int64_t step = 0; step < NT; ++step) {
    const int64_t n = reverse ? NT - 1 - step : step;
    if (segment_break(a, b, NT, reverse ? n + 1 : n)) {
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TM; ++j) S[i][j] = 0.f;
    }
    float* out = traj + ((bh * NT + n) * D + tr * W) * D + tc * W;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TM; ++j) out[(ty + 16 * i) * D + tx + 16 * j] = S[i][j];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int idx = tid + e * kThreads, r = idx / W, c = idx % W;
      w_s[r * LD + c] = rw[e];
      x_s[r * LD + c] = rx[e];
      y_s[r * LD + c] = ry[e];
    }
    __syncthreads();
    if (step + 1 < NT) prefetch(reverse ? n - 1 : n + 1);
    column_cumsum<C, W>(w_s, [&](int r, int c, float gi, float w, float gamma) {
      x_s[r * LD + c] *= reverse ? scale * __expf(gi - w) : __expf(gamma - gi);
      if (r == C - 1) gam_s[c] = gamma;
    });
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const float decay = __expf(gam_s[ty + 16 * i]);
#pragma unroll
      for (int j = 0; j < TM; ++j) S[i][j] *= decay;
    }
#pragma unroll 8
    for (int r = 0; r < C; ++r) {
      float xa[TM], ya[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) xa[i] = x_s[r * LD + ty + 16 * i];
#pragma unroll
      for (int j = 0; j < TM; ++j) ya[j] = y_s[r * LD + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TM; ++j) S[i][j] = fmaf(xa[i], ya[j], S[i][j]);
    }
    __syncthreads();
  }
  float* fin = reverse ? a.dh0 : a.ht;
  if (reverse && segment_break(a, b, NT, 0)) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TM; ++j) S[i][j] = 0.f;
  }
  if (fin) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TM; ++j) fin[(bh * D + tr * W + ty + 16 * i) * D + tc * W + tx + 16 * j] = S[i][j];
  }
}

namespace tck {

// ---------------------------------------------------------------------------------------
// State scans on tensor cores. grid (tiles, B*H, nz), tiles = (D/64)^2 blocks of 64 x 64 of
// the state; z + z_offset = 0: forward scan (h[n], ht), 1: reverse scan (dh[n], dh0), as
// rwkv6_state_scan. Warp w owns state rows 16 (w % 4).. and columns 32 (w / 4)..; the state
// stays in fp32 mma fragments. Per chunk: S <- e^g S + R(x')^T y with x' = k e^{g - Gi}
// (forward) or scale q e^{Ge} (reverse), y = v or dO. The chunk tiles come through a 3-stage
// cp.async ring: chunk step + 2 is in flight while step is computed (the chain of steps is
// the scan's critical path; one step of lead did not cover the load latency).
constexpr int kScanStages = 3;
template <int C>
constexpr int scan_tc_smem_bytes() {
  return kScanStages * 3 * Shape<C>::TOK_BYTES + 64 * 4;
}

template <int C>
__global__ void __launch_bounds__(256) rwkv6_state_scan_tc(const FusedArgs a, int z_offset) {
  ::lt::pdl_enter();  // launched with LT_LAUNCH_PDL (kernels/cuda/pdl.cuh)
  using S = Shape<C>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* buf = reinterpret_cast<bf16*>(smem);  // [kScanStages][3][C][kLDB]: x, y, w
  float* gam_s = reinterpret_cast<float*>(smem + kScanStages * 3 * S::TOK_BYTES);

  const bool reverse = (blockIdx.z + z_offset) == 1;
  const int64_t T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int64_t NT = (T + C - 1) / C;
  const int ntile = static_cast<int>(D / 64);
  const int tr = blockIdx.x / ntile, tcol = blockIdx.x % ntile;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rb = warp & 3, part = warp >> 2;
  const int64_t rs = H * D, base = (b * T * H + h) * D;
  const bf16* xsrc = static_cast<const bf16*>(reverse ? a.r : a.k) + base + tr * 64;
  const bf16* ysrc = static_cast<const bf16*>(reverse ? a.dO : a.v) + base + tcol * 64;
  const bf16* wsrc = static_cast<const bf16*>(a.w) + base + tr * 64;
  const float scale = a.scale;

  // element e of n8 tile nt: state row 16 rb + g + 8 (e >> 1), column 32 part + 8 nt + 2 t + (e & 1)
  float Sacc[4][4];
  const float* init = reverse ? a.dht : a.h0;
  const int64_t st0 = (bh * D + tr * 64) * D + tcol * 64;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      Sacc[nt][e] = init ? init[st0 + (16 * rb + g + 8 * (e >> 1)) * D + 32 * part + 8 * nt + 2 * t + (e & 1)] : 0.f;
  float* traj = reverse ? a.dh : a.h;

  // Every step commits exactly one (possibly empty) group, so after wait_group<kScanStages - 2>
  // at step s the group of step s has landed (only the groups of later steps may be pending).
  auto issue = [&](int64_t step) {
    if (step < NT) {
      const int64_t n = reverse ? NT - 1 - step : step;
      const int L = rows_in_chunk(C, T, n);
      bf16* xs = buf + (step % kScanStages) * 3 * C * kLDB;
      async_tile<C>(xs, xsrc + n * C * rs, rs, L);
      async_tile<C>(xs + C * kLDB, ysrc + n * C * rs, rs, L);
      async_tile<C>(xs + 2 * C * kLDB, wsrc + n * C * rs, rs, L);
    }
    tc::cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kScanStages - 1; ++s) issue(s);
  for (int64_t step = 0; step < NT; ++step) {
    const int64_t n = reverse ? NT - 1 - step : step;
    if (segment_break(a, b, NT, reverse ? n + 1 : n)) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) Sacc[nt][e] = 0.f;
    }
    float* out = traj + (bh * NT + n) * D * D + (tr * 64) * D + tcol * 64;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2)
        *reinterpret_cast<float2*>(out + (16 * rb + g + 8 * h2) * D + 32 * part + 8 * nt + 2 * t) =
            make_float2(Sacc[nt][2 * h2], Sacc[nt][2 * h2 + 1]);
    bf16* xs = buf + (step % kScanStages) * 3 * C * kLDB;
    bf16* ys = xs + C * kLDB;
    bf16* ws = ys + C * kLDB;
    tc::cp_async_wait<kScanStages - 2>();
    __syncthreads();                // this step's tiles visible to all; every thread is past step - 1's MMA
    issue(step + kScanStages - 1);  // into the stage that step - 1 used
    {                               // column cumsum of w; x' in place
      constexpr int P = 4, R = C / P;
      const int c = tid / P, seg = tid % P;
      float loc[R];
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        loc[k] = bf2f(ws[(seg * R + k) * kLDB + c]);
        sum += loc[k];
      }
      float incl = sum;
#pragma unroll
      for (int off = 1; off < P; off <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, incl, off, P);
        if (seg >= off) incl += y;
      }
      const float gamma = __shfl_sync(0xffffffffu, incl, P - 1, P);
      float gcur = incl - sum;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const float prev = gcur;
        gcur += loc[k];
        bf16* px_ = xs + (seg * R + k) * kLDB + c;
        const float f = reverse ? scale * __expf(prev) : __expf(gamma - gcur);
        *px_ = __float2bfloat16_rn(bf2f(*px_) * f);
      }
      if (seg == 0) gam_s[c] = gamma;
    }
    __syncthreads();
    const float d0 = __expf(gam_s[16 * rb + g]), d1 = __expf(gam_s[16 * rb + g + 8]);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) { Sacc[nt][0] *= d0, Sacc[nt][1] *= d0, Sacc[nt][2] *= d1, Sacc[nt][3] *= d1; }
#pragma unroll
    for (int ks = 0; ks < C / 16; ++ks) {
      uint32_t af[4];
      tc::load_a_trans(af, xs, kLDB, 16 * rb, 16 * ks);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t b0[2], b1[2];
        tc::load_b_trans_2n(b0, b1, ys, kLDB, 16 * ks, 32 * part + 16 * np);
        tc::mma(Sacc[2 * np], af, b0);
        tc::mma(Sacc[2 * np + 1], af, b1);
      }
    }
  }
  tc::cp_async_wait<0>();
  if (reverse && segment_break(a, b, NT, 0)) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) Sacc[nt][e] = 0.f;
  }
  float* fin = reverse ? a.dh0 : a.ht;
  if (fin) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2)
        *reinterpret_cast<float2*>(fin + st0 + (16 * rb + g + 8 * h2) * D + 32 * part + 8 * nt + 2 * t) =
            make_float2(Sacc[nt][2 * h2], Sacc[nt][2 * h2 + 1]);
  }
}

}  // namespace tck
}  // namespace

template <class T, int C, int W>
void launch_scan(const FusedArgs& a, int nz, int z_offset, cudaStream_t stream) {
  const size_t smem = (3 * C * (W + 1) + W) * sizeof(float);
  auto kernel = rwkv6_state_scan<T, C, W>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  const int64_t nt = a.dims.D / W;
  dim3 grid(static_cast<unsigned>(nt * nt), static_cast<unsigned>(a.dims.B * a.dims.H), nz);
  LT_LAUNCH_PDL(kernel, grid, kThreads, smem, stream, a, z_offset);
}

template <int C>
void launch_scan_tc(const FusedArgs& a, int nz, int z_offset, cudaStream_t stream) {
  const size_t smem = tck::scan_tc_smem_bytes<C>();
  auto kernel = tck::rwkv6_state_scan_tc<C>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  const int64_t nt = a.dims.D / 64;
  dim3 grid(static_cast<unsigned>(nt * nt), static_cast<unsigned>(a.dims.B * a.dims.H), nz);
  LT_LAUNCH_PDL(kernel, grid, kThreads, smem, stream, a, z_offset);
}

template void launch_scan<float, 16, 32>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan<float, 16, 64>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan<float, 32, 32>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan<float, 32, 64>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan<float, 64, 32>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan<float, 64, 64>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan<bfloat16, 16, 32>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan<bfloat16, 16, 64>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan<bfloat16, 32, 32>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan<bfloat16, 32, 64>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan<bfloat16, 64, 32>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan<bfloat16, 64, 64>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan_tc<32>(const FusedArgs&, int, int, cudaStream_t);
template void launch_scan_tc<64>(const FusedArgs&, int, int, cudaStream_t);

}  // namespace lt::rwkv6
