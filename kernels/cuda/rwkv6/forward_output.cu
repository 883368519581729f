// RWKV6 forward output (stage `output` of the forward): per chunk O = scale (Q e^Ge) h[n] + A V
// from the scanned states; the SIMT fp32 kernel rwkv6_fwd_output, the tensor-core kernel
// rwkv6_fwd_output_tc, and their launchers.
#include "kernels/cuda/rwkv6/tc_common.cuh"

namespace lt::rwkv6 {
namespace {

// (its own copy: one per value tile) and accumulates O[:, own] = scale (Q e^Ge) h[n][:, own] + A V.
template <int C>
constexpr int fwd_output_smem_floats() {
  return 5 * ChunkSmem::tile(C) + ChunkSmem::state() + ChunkSmem::vecs(C);
}

template <class Tin, int C>
__global__ void __launch_bounds__(kThreads) rwkv6_fwd_output(const FusedArgs a) {
  ::lt::pdl_enter();  // launched with LT_LAUNCH_PDL (kernels/cuda/pdl.cuh)
  constexpr int TM = C / 16, NB = C / kBC, LDC = C + 1;
  extern __shared__ float smem[];
  float* q_s = smem;                        // q, then q~
  float* k_s = q_s + ChunkSmem::tile(C);    // k, then k~
  float* gi_s = k_s + ChunkSmem::tile(C);   // w, then Gi
  float* ge_s = gi_s + ChunkSmem::tile(C);  // Ge, then q e^Ge
  float* x_s = ge_s + ChunkSmem::tile(C);   // A (after the key loop) [C][C+1]
  float* h_s = x_s + ChunkSmem::tile(C);    // h[n] block [64][65], then V [C][65]
  float* gam_s = h_s + ChunkSmem::state();
  float* u_s = gam_s + kW;
  float* gs_s = u_s + 3 * kW;  // [NB][64]
  float* gend_s = gs_s + NB * kW;
  float* eW_s = gend_s + NB * kW;

  const int64_t T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int vt = blockIdx.x;
  const int64_t n = blockIdx.y, bh = blockIdx.z, b = bh / H, h = bh % H;
  const int64_t NT = gridDim.y;
  const int L = rows_in_chunk(C, T, n);
  const int nK = static_cast<int>(D / kW);
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t rs = H * D, base = ((b * T + n * C) * H + h) * D;
  const float scale = a.scale;
  const Tin* r = static_cast<const Tin*>(a.r) + base;
  const Tin* k = static_cast<const Tin*>(a.k) + base;
  const Tin* v = static_cast<const Tin*>(a.v) + base;
  const Tin* w = static_cast<const Tin*>(a.w) + base;
  const float* hn = a.h + (bh * NT + n) * D * D;

  float acc_o[TM][4] = {};   // rows ty+16i, value cols tx+16j of the own tile
  float acc_A[TM][TM] = {};  // rows ty+16i, cols tx+16j (unscaled)

  for (int kt = 0; kt < nK; ++kt) {
    load_tokens<Tin, C, kW>(q_s, r + kt * kW, rs, L);
    load_tokens<Tin, C, kW>(k_s, k + kt * kW, rs, L);
    load_tokens<Tin, C, kW>(gi_s, w + kt * kW, rs, L);
    load_state<kW, kW>(h_s, hn + (int64_t)kt * kW * D + vt * kW, D);
    if (tid < kW) u_s[tid] = a.u[h * D + kt * kW + tid];
    __syncthreads();
    column_cumsum<C, kW>(gi_s, [&](int rr, int c, float gi, float wv, float gamma) {
      gi_s[rr * kLD + c] = gi;
      ge_s[rr * kLD + c] = gi - wv;
      (void)gamma;
    });
    __syncthreads();
    block_refs<C>(gi_s, gs_s, gend_s, eW_s);
    // Diagonal blocks, elementwise: A[r,s] += sum_c q_r k_s e^{Ge_r - Gi_s} (s < r), q u k (s = r).
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int rr = 16 * i + ty, ss = 16 * i + tx;
      float acc = 0.f;
      if (tx < ty) {
#pragma unroll 8
        for (int c = 0; c < kW; ++c)
          acc += q_s[rr * kLD + c] * k_s[ss * kLD + c] * __expf(ge_s[rr * kLD + c] - gi_s[ss * kLD + c]);
      } else if (tx == ty) {
#pragma unroll 8
        for (int c = 0; c < kW; ++c) acc += q_s[rr * kLD + c] * u_s[c] * k_s[rr * kLD + c];
      }
      acc_A[i][i] += acc;
    }
    __syncthreads();
    // In place: q~ = q e^{Ge - gs}, k~ = k e^{gend - Gi}, qe = q e^{Ge} (over Ge).
    for (int idx = tid; idx < C * kW; idx += kThreads) {
      const int rr = idx / kW, c = idx % kW, blk = rr / kBC, o = rr * kLD + c;
      const float qv = q_s[o], kv = k_s[o], ge = ge_s[o], gi = gi_s[o];
      q_s[o] = qv * __expf(ge - gs_s[blk * kW + c]);
      k_s[o] = kv * __expf(gend_s[blk * kW + c] - gi);
      ge_s[o] = qv * __expf(ge);
    }
    __syncthreads();
#pragma unroll 4
    for (int c = 0; c < kW; ++c) {
      float qe[TM], hv[4], qt[TM], kt_[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        qe[i] = ge_s[(ty + 16 * i) * kLD + c];
        qt[i] = q_s[(ty + 16 * i) * kLD + c];
        kt_[i] = k_s[(tx + 16 * i) * kLD + c];
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) hv[j] = h_s[c * kLD + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc_o[i][j] = fmaf(qe[i], hv[j], acc_o[i][j]);
          // Off-diagonal blocks j < i: q~_r m_ij k~_s, m_ij = prod_{j<b<i} eW_b.
#pragma unroll
      for (int i = 1; i < TM; ++i) {
        float mm = qt[i];
#pragma unroll
        for (int j = i - 1; j >= 0; --j) {
          acc_A[i][j] = fmaf(mm, kt_[j], acc_A[i][j]);
          if (j > 0) mm *= eW_s[j * kW + c];
        }
      }
    }
    __syncthreads();
  }
  // A (scaled, zero above the diagonal) and the value tile, then O += A V.
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TM; ++j) {
      const int rr = ty + 16 * i, ss = tx + 16 * j;
      x_s[rr * LDC + ss] = ss <= rr ? scale * acc_A[i][j] : 0.f;
    }
  load_tokens<Tin, C, kW>(h_s, v + vt * kW, rs, L);
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc_o[i][j] *= scale;
  __syncthreads();
#pragma unroll 4
  for (int ss = 0; ss < C; ++ss) {
    float av[TM], vv[4];
#pragma unroll
    for (int i = 0; i < TM; ++i) av[i] = x_s[(ty + 16 * i) * LDC + ss];
#pragma unroll
    for (int j = 0; j < 4; ++j) vv[j] = h_s[ss * kLD + tx + 16 * j];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc_o[i][j] = fmaf(av[i], vv[j], acc_o[i][j]);
  }
  Tin* o = static_cast<Tin*>(a.o) + base + vt * kW;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int rr = ty + 16 * i;
    if (rr < L)
#pragma unroll
      for (int j = 0; j < 4; ++j) stg(o, rr * rs + tx + 16 * j, acc_o[i][j]);
  }
}

namespace tck {

// ---------------------------------------------------------------------------------------
// Forward output on tensor cores. grid (D/64 value tiles, NT, B*H) as rwkv6_fwd_output:
// loop over key tiles (A accumulated over the full key dim, O_inter = R(Q e^Ge) R(h[n])),
// then O = scale O_inter + R(scale A) V.
template <int C>
struct FwdLayout {
  using S = Shape<C>;
  static constexpr int q = 0, k = q + S::TOK_BYTES, qt = k + S::TOK_BYTES, kt = qt + S::TOK_BYTES;
  static constexpr int kh = kt + S::TOK_BYTES, qe = kh + S::TOK_BYTES, h = qe + S::TOK_BYTES;
  static constexpr int qf = h + S::ST_BYTES, G = qf + S::QF_BYTES, v = G + S::G_BYTES;
  static constexpr int vec = v + S::TOK_BYTES;
  // floats at vec: gam[64], u[64], gs, ge, eW, invW [NB][64], bonus[C]
  static constexpr int bytes = vec + (128 + 4 * S::NB * 64 + C) * 4;
};

template <int C>
__global__ void __launch_bounds__(256, 2) rwkv6_fwd_output_tc(const FusedArgs a) {
  ::lt::pdl_enter();  // launched with LT_LAUNCH_PDL (kernels/cuda/pdl.cuh)
  using S = Shape<C>;
  using Lay = FwdLayout<C>;
  constexpr int NB = S::NB;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem + Lay::q);
  bf16* k_s = reinterpret_cast<bf16*>(smem + Lay::k);
  bf16* qt_s = reinterpret_cast<bf16*>(smem + Lay::qt);
  bf16* kt_s = reinterpret_cast<bf16*>(smem + Lay::kt);
  bf16* kh_s = reinterpret_cast<bf16*>(smem + Lay::kh);
  bf16* qe_s = reinterpret_cast<bf16*>(smem + Lay::qe);
  bf16* h_s = reinterpret_cast<bf16*>(smem + Lay::h);
  bf16* qf_s = reinterpret_cast<bf16*>(smem + Lay::qf);
  float* vec = reinterpret_cast<float*>(smem + Lay::vec);
  float* u_s = vec + 64;
  float* bonus_s = vec + 128 + 4 * NB * 64;
  const Gates<C> gts{reinterpret_cast<float*>(smem + Lay::G),
                     vec,
                     vec + 128,
                     vec + 128 + NB * 64,
                     vec + 128 + 2 * NB * 64,
                     vec + 128 + 3 * NB * 64};
  bf16* v_s = reinterpret_cast<bf16*>(smem + Lay::v);  // own value tile, by cp.async from the start
  bf16* w_stage = kt_s;                                // w, until the operands are built
  bf16* A_s = qt_s;                                    // after the key loop

  const int64_t T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int vt = blockIdx.x;
  const int64_t n = blockIdx.y, bh = blockIdx.z, b = bh / H, h = bh % H;
  const int64_t NT = gridDim.y;
  const int L = rows_in_chunk(C, T, n);
  const int nK = static_cast<int>(D / 64);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rb = warp % NB, part = warp / NB, col0 = part * S::COLS;
  const int64_t rs = H * D, base = ((b * T + n * C) * H + h) * D;
  const float scale = a.scale;
  const bf16* rp = static_cast<const bf16*>(a.r) + base;
  const bf16* kp = static_cast<const bf16*>(a.k) + base;
  const bf16* vp = static_cast<const bf16*>(a.v) + base;
  const bf16* wp = static_cast<const bf16*>(a.w) + base;
  const float* hn = a.h + (bh * NT + n) * D * D;

  float accA[S::NC8][4] = {};
  float accO[S::NT8][4] = {};
  float bonus = 0.f;
  async_tile<C>(v_s, vp + vt * 64, rs, L);  // needed only at the end: in flight meanwhile
  tc::cp_async_commit();

  for (int kt = 0; kt < nK; ++kt) {
    {
      TokTile<C> tq, tk, tw;
      StateTile th;
      tq.load(rp + kt * 64, rs, L);
      tk.load(kp + kt * 64, rs, L);
      tw.load(wp + kt * 64, rs, L);
      th.load(hn + static_cast<int64_t>(kt) * 64 * D + vt * 64, D);
      tq.store(q_s);
      tk.store(k_s);
      tw.store(w_stage);
      th.store(h_s);
      if (tid < 64) u_s[tid] = a.u[h * D + kt * 64 + tid];
    }
    __syncthreads();
    const bool unsafe = build_gates<C>(w_stage, gts);
    for (int idx = tid; idx < C * 32; idx += 256) {
      const int r = idx >> 5, c = (idx & 31) * 2, blk = r >> 4;
      float qv[2], kv[2], qx[2], kx[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) tilde<C>(gts, q_s, k_s, r, c + e, qv[e], kv[e], qx[e], kx[e]);
      st_pair(qt_s + r * kLDB + c, qx[0], qx[1]);
      st_pair(kt_s + r * kLDB + c, kx[0], kx[1]);
      st_pair(kh_s + r * kLDB + c, kx[0] * gts.invW[blk * 64 + c], kx[1] * gts.invW[blk * 64 + c + 1]);
      st_pair(qe_s + r * kLDB + c, qv[0] * __expf(gts.G[r * kLDG + c]), qv[1] * __expf(gts.G[r * kLDG + c + 1]));
      if constexpr (S::NF > 0) {
        float m0 = 1.f, m1 = 1.f;
        for (int j = blk - 2; j >= 0; --j) {
          m0 *= gts.eW[(j + 1) * 64 + c];
          m1 *= gts.eW[(j + 1) * 64 + c + 1];
          st_pair(qf_s + (fold_index(blk, j) * 16 + (r & 15)) * kLDB + c, qx[0] * m0, qx[1] * m1);
        }
      }
    }
    bonus += bonus_rows<C>(q_s, k_s, u_s);
    __syncthreads();
    mma_attention<C>(accA, qt_s, kt_s, kh_s, qf_s, rb, part);
    if (unsafe) attention_unsafe<C>(accA, q_s, k_s, gts, rb, part);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t af[4];
      tc::load_a(af, qe_s, kLDB, 16 * rb, 16 * ks);
#pragma unroll
      for (int np = 0; np < S::NT8 / 2; ++np) {
        uint32_t b0[2], b1[2];
        tc::load_b_trans_2n(b0, b1, h_s, kLDB, 16 * ks, col0 + 16 * np);
        tc::mma(accO[2 * np], af, b0);
        tc::mma(accO[2 * np + 1], af, b1);
      }
    }
    __syncthreads();
  }
  if (tid % S::NTPR == 0) bonus_s[tid / S::NTPR] = bonus;
  tc::cp_async_wait<0>();
  __syncthreads();
  store_attention<C>(A_s, accA, bonus_s, scale, rb, part);
  __syncthreads();
#pragma unroll
  for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) accO[nt][e] *= scale;
#pragma unroll
  for (int ks = 0; ks < NB; ++ks) {
    if (ks > rb) break;
    uint32_t af[4];
    tc::load_a(af, A_s, S::LDP, 16 * rb, 16 * ks);
#pragma unroll
    for (int np = 0; np < S::NT8 / 2; ++np) {
      uint32_t b0[2], b1[2];
      tc::load_b_trans_2n(b0, b1, v_s, kLDB, 16 * ks, col0 + 16 * np);
      tc::mma(accO[2 * np], af, b0);
      tc::mma(accO[2 * np + 1], af, b1);
    }
  }
  bf16* op = static_cast<bf16*>(a.o) + base + vt * 64 + col0;
#pragma unroll
  for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int r = 16 * rb + g + 8 * h2;
      if (r < L) st_pair(op + r * rs + 8 * nt + 2 * t, accO[nt][2 * h2], accO[nt][2 * h2 + 1]);
    }
}

}  // namespace tck
}  // namespace

template <class T, int C>
void launch_fwd_output(const FusedArgs& a, cudaStream_t stream) {
  const size_t smem = fwd_output_smem_floats<C>() * sizeof(float);
  auto kernel = rwkv6_fwd_output<T, C>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  dim3 grid(static_cast<unsigned>(a.dims.D / kW), static_cast<unsigned>(a.dims.NT()),
            static_cast<unsigned>(a.dims.B * a.dims.H));
  LT_LAUNCH_PDL(kernel, grid, kThreads, smem, stream, a);
}

template <int C>
void launch_fwd_output_tc(const FusedArgs& a, cudaStream_t stream) {
  const size_t smem = tck::FwdLayout<C>::bytes;
  auto kernel = tck::rwkv6_fwd_output_tc<C>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  dim3 grid(static_cast<unsigned>(a.dims.D / kW), static_cast<unsigned>(a.dims.NT()),
            static_cast<unsigned>(a.dims.B * a.dims.H));
  LT_LAUNCH_PDL(kernel, grid, kThreads, smem, stream, a);
}

template void launch_fwd_output<float, 16>(const FusedArgs&, cudaStream_t);
template void launch_fwd_output<float, 32>(const FusedArgs&, cudaStream_t);
template void launch_fwd_output<float, 64>(const FusedArgs&, cudaStream_t);
template void launch_fwd_output<bfloat16, 16>(const FusedArgs&, cudaStream_t);
template void launch_fwd_output<bfloat16, 32>(const FusedArgs&, cudaStream_t);
template void launch_fwd_output<bfloat16, 64>(const FusedArgs&, cudaStream_t);
template void launch_fwd_output_tc<32>(const FusedArgs&, cudaStream_t);
template void launch_fwd_output_tc<64>(const FusedArgs&, cudaStream_t);

}  // namespace lt::rwkv6
