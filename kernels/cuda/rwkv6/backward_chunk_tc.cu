// RWKV6 backward chunk kernel on tensor cores (bf16, chunk 32 / 64; stage `chunk_fused`, or
// `chunk_intra` + `chunk_inter`, of the backward): rwkv6_bwd_chunk_tc and its launcher. The
// SIMT chunk kernel and the du reduction: rwkv6/backward_chunk.cu.
#include "kernels/cuda/rwkv6/tc_common.cuh"

namespace lt::rwkv6 {
namespace {
namespace tck {

// ---------------------------------------------------------------------------------------
// Backward chunk kernel on tensor cores. grid (D/64 own tiles, NT, B*H), modes as
// rwkv6_bwd_chunk (fused | intra -> fp32 dq'/dk' scratch | inter reads them back).
//   phase 1, value tiles: dP = dO V^T (blocks on or below the diagonal), dO h^T and V dh^T
//            for the own key rows, sum_v h . dh (fp32);
//   phase 2, key tiles, own last: gates, operands, A (MMA + unsafe columns), dV_inter = K' dh;
//   phase 3: dV += R(scale A)^T dO; dq'/dk' intra (Horner over blocks on the accumulator
//            fragments + the diagonal block on k^ / q^ + unsafe columns elementwise); glue
//            (dgamma, dw by a column reverse scan, u terms, du partials).
constexpr int kLDX = 66;  // fp32 x, y tiles of the dw scan (floats)

// dw_j = sum_{r>j} x_r - sum_{r>=j} y_r (+ dgam[c] when dgam is given): a column reverse scan
// of the fp32 x, y tiles [C][kLDX] (4 lanes per column, C/4 rows each), written over x, then
// stored as bf16 with 16-byte row stores; kAddDw: add the bf16 dw already in the output (the
// intra part left there by the fallback's intra kernel). Starts and ends with the caller's
// barrier discipline: x, y must be complete; the tile is reused only after this returns.
template <int C, bool kAddDw>
__device__ __forceinline__ void dw_scan_store(const FusedArgs& a, float* sx, const float* sy, const float* dgam,
                                              int64_t base, int own, int L, int64_t n, int64_t b, int64_t h) {
  constexpr int P = 4, R = C / P;
  (void)n, (void)b, (void)h;
  {
    const int c = threadIdx.x / P, seg = threadIdx.x % P;
    float sxs = 0.f, sys = 0.f;
#pragma unroll
    for (int q = 0; q < R; ++q) {
      const int o = (seg * R + q) * kLDX + c;
      sxs += sx[o];
      sys += sy[o];
    }
    float ix = sxs, iy = sys;  // inclusive suffix sums over segments
#pragma unroll
    for (int off = 1; off < P; off <<= 1) {
      const float yx = __shfl_down_sync(0xffffffffu, ix, off, P);
      const float yy = __shfl_down_sync(0xffffffffu, iy, off, P);
      if (seg + off < P) ix += yx, iy += yy;
    }
    const float dg = dgam ? dgam[c] : 0.f;
    float xa = ix - sxs, ya = iy - sys;
#pragma unroll
    for (int q = R - 1; q >= 0; --q) {
      const int o = (seg * R + q) * kLDX + c;
      const float xv = sx[o];
      ya += sy[o];
      sx[o] = xa - ya + dg;
      xa += xv;
    }
  }
  __syncthreads();
  const int64_t rs = a.dims.H * a.dims.D;
  bf16* dwp = static_cast<bf16*>(a.dw) + base + own;
  for (int idx = threadIdx.x; idx < C * 8; idx += 256) {
    const int r = idx >> 3, c8 = (idx & 7) * 8;
    if (r >= L) continue;
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = sx[r * kLDX + c8 + i];
    uint4* dst = reinterpret_cast<uint4*>(dwp + r * rs + c8);
    if constexpr (kAddDw) {
      const uint4 old = *dst;
      const uint32_t w4[4] = {old.x, old.y, old.z, old.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = tc::unpack_bf16(w4[i]);
        x[2 * i] += f.x, x[2 * i + 1] += f.y;
      }
    }
    *dst = make_uint4(tc::pack_bf16(x[0], x[1]), tc::pack_bf16(x[2], x[3]), tc::pack_bf16(x[4], x[5]),
                      tc::pack_bf16(x[6], x[7]));
  }
}

template <int C>
struct BwdLayout {
  using S = Shape<C>;
  static constexpr int P = 0, q = P + S::TOK_BYTES, k = q + S::TOK_BYTES, G = k + S::TOK_BYTES;
  static constexpr int qt = G + S::G_BYTES, kt = qt + S::TOK_BYTES, kh = kt + S::TOK_BYTES;
  static constexpr int kd = kh + S::TOK_BYTES, dhk = kd + S::TOK_BYTES, qf = dhk + S::ST_BYTES;
  static constexpr int vec = qf + S::QF_BYTES;
  // floats at vec: gam, u, dgs [64]; gs, ge, eW, invW [NB][64]; pd[C], bonus[C]; zp, pp [NB][64]
  static constexpr int bytes = vec + (3 * 64 + 6 * S::NB * 64 + 2 * C) * 4;
  // phase-1 aliases over [qt, vec): dO_vt, V_vt [C][kLDB], h, dh [64][kLDB]
  static constexpr int p1_do = qt, p1_v = qt + S::TOK_BYTES, p1_h = qt + 2 * S::TOK_BYTES, p1_dh = p1_h + S::ST_BYTES;
  static_assert(p1_dh + S::ST_BYTES <= vec, "phase-1 tiles fit");
  // phase-3 aliases: A over kd, dO_own over dhk; then x, y fp32 [C][kLDX] over [kh, vec)
  static constexpr int sx = kh, sy = kh + C * kLDX * 4;
  static_assert(sy + C * kLDX * 4 <= vec, "x, y fit");
  static_assert(C * S::LDP * 2 <= S::TOK_BYTES, "A fits over kd");
};

template <int C, ChunkBwdTerms kPart>
__global__ void __launch_bounds__(256, 2) rwkv6_bwd_chunk_tc(const FusedArgs a) {
  ::lt::pdl_enter();  // launched with LT_LAUNCH_PDL (kernels/cuda/pdl.cuh)
  constexpr bool kIntra = kPart != ChunkBwdTerms::inter, kInter = kPart != ChunkBwdTerms::intra;
  using S = Shape<C>;
  using Lay = BwdLayout<C>;
  constexpr int NB = S::NB;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* P_s = reinterpret_cast<bf16*>(smem + Lay::P);
  bf16* q_s = reinterpret_cast<bf16*>(smem + Lay::q);
  bf16* k_s = reinterpret_cast<bf16*>(smem + Lay::k);
  bf16* qt_s = reinterpret_cast<bf16*>(smem + Lay::qt);
  bf16* kt_s = reinterpret_cast<bf16*>(smem + Lay::kt);
  bf16* kh_s = reinterpret_cast<bf16*>(smem + Lay::kh);
  bf16* kd_s = reinterpret_cast<bf16*>(smem + Lay::kd);
  bf16* dhk_s = reinterpret_cast<bf16*>(smem + Lay::dhk);
  bf16* qf_s = reinterpret_cast<bf16*>(smem + Lay::qf);
  float* vec = reinterpret_cast<float*>(smem + Lay::vec);
  float* u_s = vec + 64;
  float* dgs_s = vec + 128;
  float* ref = vec + 192;  // gs, ge, eW, invW
  float* pd_s = ref + 4 * NB * 64;
  float* bonus_s = pd_s + C;
  float* zp_s = bonus_s + C;
  float* pp_s = zp_s + NB * 64;
  const Gates<C> gts{
      reinterpret_cast<float*>(smem + Lay::G), vec, ref, ref + NB * 64, ref + 2 * NB * 64, ref + 3 * NB * 64};
  bf16* w_stage = kd_s;
  bf16* A_s = kd_s;
  bf16* do3_s = dhk_s;

  const int64_t T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int jt = blockIdx.x;
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
  const bf16* dop = static_cast<const bf16*>(a.dO) + base;
  const float* hn = a.h + (bh * NT + n) * D * D;
  const float* dhn = a.dh + (bh * NT + n) * D * D;

  float accQS[S::NT8][4] = {};  // (dO h^T)[r, own key col]
  float accKS[S::NT8][4] = {};  // (V dh^T)[r, own key col]
  float accA[S::NC8][4] = {};
  float accV[S::NT8][4] = {};  // dV[s, own value col]
  float bonus = 0.f;

  // ---- phase 1: value tiles
  {
    bf16* do_s = reinterpret_cast<bf16*>(smem + Lay::p1_do);
    bf16* v_s = reinterpret_cast<bf16*>(smem + Lay::p1_v);
    bf16* hh_s = reinterpret_cast<bf16*>(smem + Lay::p1_h);
    bf16* dh_s = reinterpret_cast<bf16*>(smem + Lay::p1_dh);
    float accP[S::NC8][4] = {};
    float dgs = 0.f;
    for (int vt = 0; vt < nK; ++vt) {
      TokTile<C> tdo, tv;
      tdo.load(dop + vt * 64, rs, L);
      tv.load(vp + vt * 64, rs, L);
      if constexpr (kInter) {
        StateTile th, tdh;
        th.load(hn + static_cast<int64_t>(jt) * 64 * D + vt * 64, D);
        tdh.load(dhn + static_cast<int64_t>(jt) * 64 * D + vt * 64, D);
        dgs += th.dot(tdh);
        th.store(hh_s);
        tdh.store(dh_s);
      }
      tdo.store(do_s);
      tv.store(v_s);
      __syncthreads();
#pragma unroll
      for (int nt = 0; nt < S::NC8; ++nt) {
        const int s0 = part * S::CCOLS + 8 * nt;
        if ((s0 >> 4) > rb) continue;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          uint32_t af[4], bfr[2];
          tc::load_a(af, do_s, kLDB, 16 * rb, 16 * ks);
          tc::load_b(bfr, v_s, kLDB, 16 * ks, s0);
          tc::mma(accP[nt], af, bfr);
        }
      }
      if constexpr (kInter) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          uint32_t ad[4], av[4];
          tc::load_a(ad, do_s, kLDB, 16 * rb, 16 * ks);
          tc::load_a(av, v_s, kLDB, 16 * rb, 16 * ks);
#pragma unroll
          for (int np = 0; np < S::NT8 / 2; ++np) {
            uint32_t b0[2], b1[2];
            tc::load_b_2n(b0, b1, hh_s, kLDB, 16 * ks, col0 + 16 * np);
            tc::mma(accQS[2 * np], ad, b0);
            tc::mma(accQS[2 * np + 1], ad, b1);
            tc::load_b_2n(b0, b1, dh_s, kLDB, 16 * ks, col0 + 16 * np);
            tc::mma(accKS[2 * np], av, b0);
            tc::mma(accKS[2 * np + 1], av, b1);
          }
        }
      }
      __syncthreads();
    }
    // dP -> P_s: R(scale dP) strictly below the diagonal, 0 elsewhere; pd = scale dP[r, r] (fp32).
#pragma unroll
    for (int nt = 0; nt < S::NC8; ++nt) {
      const int s0 = part * S::CCOLS + 8 * nt + 2 * t;
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int r = 16 * rb + g + 8 * h2;
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float val = scale * accP[nt][2 * h2 + e];
          if (s0 + e == r) pd_s[r] = val;
          x[e] = s0 + e < r ? val : 0.f;
        }
        st_pair(P_s + r * S::LDP + s0, x[0], x[1]);
      }
    }
    if constexpr (kInter) {
      dgs += __shfl_xor_sync(0xffffffffu, dgs, 1);
      dgs += __shfl_xor_sync(0xffffffffu, dgs, 2);
      if ((tid & 3) == 0) dgs_s[tid >> 2] = dgs;
    }
  }

  // ---- phase 2: key tiles, own tile last
  bool unsafe = false;
  const int nIter = kInter ? nK : 1;
  for (int it = 0; it < nIter; ++it) {
    const int kt = kInter ? (jt + 1 + it) % nK : jt;
    {
      TokTile<C> tq, tk, tw;
      tq.load(rp + kt * 64, rs, L);
      tk.load(kp + kt * 64, rs, L);
      tw.load(wp + kt * 64, rs, L);
      if constexpr (kInter) {
        StateTile tdh;
        tdh.load(dhn + static_cast<int64_t>(kt) * 64 * D + jt * 64, D);
        tdh.store(dhk_s);
        if (tid < 64) u_s[tid] = a.u[h * D + kt * 64 + tid];
      }
      tq.store(q_s);
      tk.store(k_s);
      tw.store(w_stage);
    }
    __syncthreads();
    unsafe = build_gates<C>(w_stage, gts);
    for (int idx = tid; idx < C * 32; idx += 256) {
      const int r = idx >> 5, c = (idx & 31) * 2, blk = r >> 4;
      float qv[2], kv[2], qx[2], kx[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) tilde<C>(gts, q_s, k_s, r, c + e, qv[e], kv[e], qx[e], kx[e]);
      st_pair(qt_s + r * kLDB + c, qx[0], qx[1]);
      st_pair(kt_s + r * kLDB + c, kx[0], kx[1]);
      st_pair(kh_s + r * kLDB + c, kx[0] * gts.invW[blk * 64 + c], kx[1] * gts.invW[blk * 64 + c + 1]);
      if constexpr (kInter) {
        const float* Gi = gts.G + (r + 1) * kLDG + c;
        st_pair(kd_s + r * kLDB + c, kv[0] * __expf(gts.gam[c] - Gi[0]), kv[1] * __expf(gts.gam[c + 1] - Gi[1]));
        if constexpr (S::NF > 0) {
          float m0 = 1.f, m1 = 1.f;
          for (int j = blk - 2; j >= 0; --j) {
            m0 *= gts.eW[(j + 1) * 64 + c];
            m1 *= gts.eW[(j + 1) * 64 + c + 1];
            st_pair(qf_s + (fold_index(blk, j) * 16 + (r & 15)) * kLDB + c, qx[0] * m0, qx[1] * m1);
          }
        }
      }
    }
    if constexpr (kInter) bonus += bonus_rows<C>(q_s, k_s, u_s);
    __syncthreads();
    if constexpr (kInter) {
      mma_attention<C>(accA, qt_s, kt_s, kh_s, qf_s, rb, part);
      if (unsafe) attention_unsafe<C>(accA, q_s, k_s, gts, rb, part);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        uint32_t af[4];
        tc::load_a(af, kd_s, kLDB, 16 * rb, 16 * ks);
#pragma unroll
        for (int np = 0; np < S::NT8 / 2; ++np) {
          uint32_t b0[2], b1[2];
          tc::load_b_trans_2n(b0, b1, dhk_s, kLDB, 16 * ks, col0 + 16 * np);
          tc::mma(accV[2 * np], af, b0);
          tc::mma(accV[2 * np + 1], af, b1);
        }
      }
      if (it + 1 < nIter) __syncthreads();
    }
  }

  // ---- phase 3
  const int own = jt * 64;
  __syncthreads();  // phase-2 MMAs done: kd, dhk, qf are free
  if constexpr (kInter) {
    if (tid % S::NTPR == 0) bonus_s[tid / S::NTPR] = bonus;
    TokTile<C> tdo;
    tdo.load(dop + own, rs, L);
    tdo.store(do3_s);
    __syncthreads();
    store_attention<C>(A_s, accA, bonus_s, scale, rb, part);
    __syncthreads();
    // dV = K' dh (accumulated) + R(scale A)^T dO_own
#pragma unroll
    for (int ks = 0; ks < NB; ++ks) {
      if (ks < rb) continue;
      uint32_t af[4];
      tc::load_a_trans(af, A_s, S::LDP, 16 * rb, 16 * ks);
#pragma unroll
      for (int np = 0; np < S::NT8 / 2; ++np) {
        uint32_t b0[2], b1[2];
        tc::load_b_trans_2n(b0, b1, do3_s, kLDB, 16 * ks, col0 + 16 * np);
        tc::mma(accV[2 * np], af, b0);
        tc::mma(accV[2 * np + 1], af, b1);
      }
    }
    bf16* dvp = static_cast<bf16*>(a.dv) + base + own + col0;
#pragma unroll
    for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int r = 16 * rb + g + 8 * h2;
        if (r < L) st_pair(dvp + r * rs + 8 * nt + 2 * t, accV[nt][2 * h2], accV[nt][2 * h2 + 1]);
      }
  }

  float dqI[S::NT8][4] = {}, dkI[S::NT8][4] = {};
  float* sx = reinterpret_cast<float*>(smem + Lay::sx);
  float* sy = reinterpret_cast<float*>(smem + Lay::sy);
  if constexpr (kIntra) {
    if constexpr (kInter) __syncthreads();  // A_s, do3_s reads done: x, y may overwrite kh..qf
    // Per-column scale before the diagonal step: e^{W_rb} in safe columns, 1 in unsafe ones.
    auto diag_scale = [&](int c) { return gts.invW[rb * 64 + c] != 0.f ? gts.eW[rb * 64 + c] : 1.f; };
    // dq' intra, rows of block rb: Horner over column blocks j < rb on R(k~) (x e^{W_j} before
    // block j), then the diagonal block on R(k~) after x diag_scale: acc = sc Off + Dg.
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      if (j > rb) break;
      if (j > 0) {
#pragma unroll
        for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = col0 + 8 * nt + 2 * t + (e & 1);
            dqI[nt][e] *= j < rb ? gts.eW[j * 64 + c] : diag_scale(c);
          }
      }
      uint32_t af[4];
      tc::load_a(af, P_s, S::LDP, 16 * rb, 16 * j);
#pragma unroll
      for (int np = 0; np < S::NT8 / 2; ++np) {
        uint32_t b0[2], b1[2];
        tc::load_b_trans_2n(b0, b1, kt_s, kLDB, 16 * j, col0 + 16 * np);
        tc::mma(dqI[2 * np], af, b0);
        tc::mma(dqI[2 * np + 1], af, b1);
      }
    }
    // dk' intra, rows (s) of block rb: Horner over row blocks i > rb from the last one down on
    // R(q~) (x e^{W_i} before block i, except the first), then the diagonal block likewise.
#pragma unroll
    for (int i = NB - 1; i >= 0; --i) {
      if (i < rb) break;
      if (i < NB - 1) {
#pragma unroll
        for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = col0 + 8 * nt + 2 * t + (e & 1);
            dkI[nt][e] *= i > rb ? gts.eW[i * 64 + c] : diag_scale(c);
          }
      }
      uint32_t af[4];
      tc::load_a_trans(af, P_s, S::LDP, 16 * rb, 16 * i);
#pragma unroll
      for (int np = 0; np < S::NT8 / 2; ++np) {
        uint32_t b0[2], b1[2];
        tc::load_b_trans_2n(b0, b1, qt_s, kLDB, 16 * i, col0 + 16 * np);
        tc::mma(dkI[2 * np], af, b0);
        tc::mma(dkI[2 * np + 1], af, b1);
      }
    }
    // D = e^{-W} acc (safe) or acc - Dg (unsafe, plus the exact diagonal sum fb);
    // dq'_intra = e^{Ge - gs} Dq + fbq, x_intra = R(q~) Dq + q fbq (and dk', y likewise).
#pragma unroll
    for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 16 * rb + g + 8 * (e >> 1), c = col0 + 8 * nt + 2 * t + (e & 1);
        const float Ge = gts.G[r * kLDG + c], Gi = gts.G[(r + 1) * kLDG + c];
        const float iw = gts.invW[rb * 64 + c];
        float Dq = iw * dqI[nt][e], Dk = iw * dkI[nt][e], fbq = 0.f, fbk = 0.f;
        if (unsafe && iw == 0.f) {
          float dgq = 0.f, dgk = 0.f;
          for (int s2 = 16 * rb; s2 < r; ++s2) {
            const float p = bf2f(P_s[r * S::LDP + s2]);
            dgq += p * bf2f(kt_s[s2 * kLDB + c]);
            fbq += p * bf2f(k_s[s2 * kLDB + c]) * __expf(Ge - gts.G[(s2 + 1) * kLDG + c]);
          }
          for (int r2 = r + 1; r2 < 16 * rb + 16; ++r2) {
            const float p = bf2f(P_s[r2 * S::LDP + r]);
            dgk += p * bf2f(qt_s[r2 * kLDB + c]);
            fbk += p * bf2f(q_s[r2 * kLDB + c]) * __expf(gts.G[r2 * kLDG + c] - Gi);
          }
          Dq = dqI[nt][e] - dgq;
          Dk = dkI[nt][e] - dgk;
        }
        dqI[nt][e] = __expf(Ge - gts.gs[rb * 64 + c]) * Dq + fbq;
        dkI[nt][e] = __expf(gts.ge[rb * 64 + c] - Gi) * Dk + fbk;
        sx[r * kLDX + c] = bf2f(qt_s[r * kLDB + c]) * Dq + bf2f(q_s[r * kLDB + c]) * fbq;
        sy[r * kLDX + c] = bf2f(kt_s[r * kLDB + c]) * Dk + bf2f(k_s[r * kLDB + c]) * fbk;
      }
    if constexpr (kPart == ChunkBwdTerms::intra) {
#pragma unroll
      for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2) {
          const int r = 16 * rb + g + 8 * h2;
          if (r < L) {
            const int64_t o = base + r * rs + own + col0 + 8 * nt + 2 * t;
            *reinterpret_cast<float2*>(a.dq_tmp + o) = make_float2(dqI[nt][2 * h2], dqI[nt][2 * h2 + 1]);
            *reinterpret_cast<float2*>(a.dk_tmp + o) = make_float2(dkI[nt][2 * h2], dkI[nt][2 * h2 + 1]);
          }
        }
      // The fallback's intra kernel finishes dw's intra part here (the consistent x, y exist
      // only here) and leaves it in dw (bf16); the inter kernel adds the rest.
      __syncthreads();
      dw_scan_store<C, false>(a, sx, sy, nullptr, base, own, L, n, b, h);
      return;
    }
  }
  if constexpr (kPart == ChunkBwdTerms::inter) {
#pragma unroll
    for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int r = 16 * rb + g + 8 * h2;
        const int64_t o = base + r * rs + own + col0 + 8 * nt + 2 * t;
        const float2 x = r < L ? *reinterpret_cast<const float2*>(a.dq_tmp + o) : make_float2(0.f, 0.f);
        const float2 y = r < L ? *reinterpret_cast<const float2*>(a.dk_tmp + o) : make_float2(0.f, 0.f);
        dqI[nt][2 * h2] = x.x, dqI[nt][2 * h2 + 1] = x.y;
        dkI[nt][2 * h2] = y.x, dkI[nt][2 * h2 + 1] = y.y;
      }
  }
  if constexpr (kInter) {
    // ---- glue: dq' = scale (dO h^T) e^Ge + dq'_intra, dk' = (V dh^T) e^{g - Gi} + dk'_intra,
    // u terms; x += q dq'_inter, y += k dk'_inter (dw); column sums of z = k (V dh^T) e^{g-Gi}
    // (dgamma) and p = pd q k (du).
    if constexpr (kPart == ChunkBwdTerms::inter) __syncthreads();  // phase-3 MMA reads done before x, y writes
    bf16* dqp = static_cast<bf16*>(a.dr) + base + own + col0;
    bf16* dkp = static_cast<bf16*>(a.dk) + base + own + col0;
    float zc[S::NT8][2] = {}, pc[S::NT8][2] = {};
#pragma unroll
    for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int r = 16 * rb + g + 8 * h2;
        float oq[2], ok[2];
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          const int e = 2 * h2 + e2, c = col0 + 8 * nt + 2 * t + e2;
          const float Ge = gts.G[r * kLDG + c], Gi = gts.G[(r + 1) * kLDG + c];
          const float dqS = scale * accQS[nt][e] * __expf(Ge);
          const float kz = accKS[nt][e] * __expf(gts.gam[c] - Gi);
          const float qv = bf2f(q_s[r * kLDB + c]), kv = bf2f(k_s[r * kLDB + c]);
          const float pd = pd_s[r], pu = pd * u_s[c];
          const float xi = kIntra ? sx[r * kLDX + c] : 0.f, yi = kIntra ? sy[r * kLDX + c] : 0.f;
          sx[r * kLDX + c] = qv * dqS + xi;
          sy[r * kLDX + c] = kv * kz + yi;
          zc[nt][e2] += kv * kz;
          pc[nt][e2] += pd * qv * kv;
          oq[e2] = dqS + dqI[nt][e] + pu * kv;
          ok[e2] = kz + dkI[nt][e] + pu * qv;
        }
        if (r < L) {
          st_pair(dqp + r * rs + 8 * nt + 2 * t, oq[0], oq[1]);
          st_pair(dkp + r * rs + 8 * nt + 2 * t, ok[0], ok[1]);
        }
      }
#pragma unroll
    for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
      for (int e2 = 0; e2 < 2; ++e2) {
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) {
          zc[nt][e2] += __shfl_xor_sync(0xffffffffu, zc[nt][e2], off);
          pc[nt][e2] += __shfl_xor_sync(0xffffffffu, pc[nt][e2], off);
        }
        if (g == 0) {
          const int c = col0 + 8 * nt + 2 * t + e2;
          zp_s[rb * 64 + c] = zc[nt][e2];
          pp_s[rb * 64 + c] = pc[nt][e2];
        }
      }
    __syncthreads();
    // dgamma = e^gamma sum_v h . dh + sum_s z_s;  du partial = sum_s p_s   (own key columns)
    if (tid < 64) {
      float ztot = 0.f, ptot = 0.f;
#pragma unroll
      for (int i = 0; i < NB; ++i) ztot += zp_s[i * 64 + tid], ptot += pp_s[i * 64 + tid];
      zp_s[tid] = __expf(gts.gam[tid]) * dgs_s[tid] + ztot;
      a.du_part[((b * NT + n) * H + h) * D + own + tid] = ptot;
    }
    __syncthreads();
    dw_scan_store<C, kPart == ChunkBwdTerms::inter>(a, sx, sy, zp_s, base, own, L, n, b, h);
  }
}

}  // namespace tck
}  // namespace

template <int C, ChunkBwdTerms kPart>
void launch_bwd_chunk_tc(const FusedArgs& a, cudaStream_t stream) {
  const size_t smem = tck::BwdLayout<C>::bytes;
  auto kernel = tck::rwkv6_bwd_chunk_tc<C, kPart>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  dim3 grid(static_cast<unsigned>(a.dims.D / kW), static_cast<unsigned>(a.dims.NT()),
            static_cast<unsigned>(a.dims.B * a.dims.H));
  LT_LAUNCH_PDL(kernel, grid, kThreads, smem, stream, a);
}

template void launch_bwd_chunk_tc<32, ChunkBwdTerms::all>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk_tc<32, ChunkBwdTerms::intra>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk_tc<32, ChunkBwdTerms::inter>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk_tc<64, ChunkBwdTerms::all>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk_tc<64, ChunkBwdTerms::intra>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk_tc<64, ChunkBwdTerms::inter>(const FusedArgs&, cudaStream_t);

}  // namespace lt::rwkv6
