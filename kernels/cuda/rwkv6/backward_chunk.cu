// RWKV6 backward chunk kernel, SIMT fp32 (stage `chunk_fused`, or `chunk_intra` + `chunk_inter`,
// of the backward): the intra- and inter-chunk adjoints dq, dk, dv, dw and the du partials of
// one chunk and one 64-wide own tile; the du reduction (stage `du_reduce`); their launchers.
// The tensor-core chunk kernel: rwkv6/backward_chunk_tc.cu.
#include "kernels/cuda/rwkv6/common.cuh"

namespace lt::rwkv6 {
namespace {

// =======================================================================================
// Backward chunk kernel. grid (D/64 own tiles, NT, B*H). kPart:
//   all    all of dq, dk, dv, dw and the du partials, intra and inter parts in registers,
//          each gradient written once in the input dtype;
//   intra  only the intra-chunk dq', dk' of the own key tile -> fp32 dq_tmp, dk_tmp;
//   inter  everything else, reading dq_tmp, dk_tmp back (the fallback's second half).
// Phases: (1) value-tile loop: dP = dO V^T (full), dO h^T and V dh^T for the own key rows,
//         sum_v h . dh (own rows); (2) key-tile loop, own tile last: gates, A, K' dh for
//         the own value columns; the own tile's q, k, Gi, Ge stay in shared memory;
//         (3) dV = A^T dO + K' dh; intra dq'/dk' (Horner over block decays + diagonal
//         blocks); glue: dgamma, dw by a column reverse scan, u terms, du partials.
template <int C>
constexpr int bwd_smem_floats() {
  return 6 * ChunkSmem::tile(C) + 2 * ChunkSmem::state() + ChunkSmem::cc(C) + ChunkSmem::vecs(C);
}

template <class Tin, int C, ChunkBwdTerms kPart>
__global__ void __launch_bounds__(kThreads) rwkv6_bwd_chunk(const FusedArgs a) {
  ::lt::pdl_enter();  // launched with LT_LAUNCH_PDL (kernels/cuda/pdl.cuh)
  constexpr bool kIntra = kPart != ChunkBwdTerms::inter, kInter = kPart != ChunkBwdTerms::intra;
  constexpr int TM = C / 16, NB = C / kBC, LDC = C + 1;
  extern __shared__ float smem[];
  float* t0 = smem;                       // dO | q        (own tile at the end)
  float* t1 = t0 + ChunkSmem::tile(C);    // V  | k
  float* t2 = t1 + ChunkSmem::tile(C);    // w -> Gi
  float* t3 = t2 + ChunkSmem::tile(C);    // Ge
  float* t4 = t3 + ChunkSmem::tile(C);    // k e^{g-Gi}, then k~ ; x = q dq' at the end
  float* t5 = t4 + ChunkSmem::tile(C);    // q~ ; y = k dk' at the end
  float* s0 = t5 + ChunkSmem::tile(C);    // h rows | dh block | dO own | z
  float* s1 = s0 + ChunkSmem::state();    // dh rows | A [C][C+1] | p
  float* p_s = s1 + ChunkSmem::state();   // dP [C][C+1], scaled, zero above the diagonal
  float* gam_s = p_s + ChunkSmem::cc(C);  // [64]
  float* u_s = gam_s + kW;                // [64]
  float* dgs_s = u_s + kW;                // [64] sum_v h . dh of the own key rows
  float* gs_s = dgs_s + 2 * kW;           // [NB][64]
  float* gend_s = gs_s + NB * kW;
  float* eW_s = gend_s + NB * kW;
  float* as_s = s1;

  const int64_t T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int jt = blockIdx.x;
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
  const Tin* dO = static_cast<const Tin*>(a.dO) + base;
  const float* hn = a.h + (bh * NT + n) * D * D;
  const float* dhn = a.dh + (bh * NT + n) * D * D;

  float acc_dP[TM][TM] = {};
  float acc_dqS[TM][4] = {};  // (dO h^T)[r, own key col]
  float acc_dkS[TM][4] = {};  // (V dh^T)[r, own key col]
  float acc_A[TM][TM] = {};
  float acc_dv[TM][4] = {};  // rows s, own value cols
  float dgs = 0.f;

  // ---- phase 1: value-tile loop
  for (int vt = 0; vt < nK; ++vt) {
    load_tokens<Tin, C, kW>(t0, dO + vt * kW, rs, L);
    load_tokens<Tin, C, kW>(t1, v + vt * kW, rs, L);
    if constexpr (kInter) {
      load_state<kW, kW>(s0, hn + (int64_t)jt * kW * D + vt * kW, D);
      load_state<kW, kW>(s1, dhn + (int64_t)jt * kW * D + vt * kW, D);
    }
    __syncthreads();
#pragma unroll 4
    for (int c = 0; c < kW; ++c) {
      float dor[TM], vs[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        dor[i] = t0[(ty + 16 * i) * kLD + c];
        vs[i] = t1[(tx + 16 * i) * kLD + c];
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j <= i; ++j) acc_dP[i][j] = fmaf(dor[i], vs[j], acc_dP[i][j]);
      if constexpr (kInter) {
        float vr[TM], sd[4], sp[4];
#pragma unroll
        for (int i = 0; i < TM; ++i) vr[i] = t1[(ty + 16 * i) * kLD + c];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          sd[j] = s0[(tx + 16 * j) * kLD + c];
          sp[j] = s1[(tx + 16 * j) * kLD + c];
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc_dqS[i][j] = fmaf(dor[i], sd[j], acc_dqS[i][j]);
            acc_dkS[i][j] = fmaf(vr[i], sp[j], acc_dkS[i][j]);
          }
      }
    }
    if constexpr (kInter) {
      const int row = tid / 4, seg = tid % 4;
#pragma unroll
      for (int c = 0; c < 16; ++c) dgs += s0[row * kLD + seg * 16 + c] * s1[row * kLD + seg * 16 + c];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TM; ++j) {
      const int rr = ty + 16 * i, ss = tx + 16 * j;
      p_s[rr * LDC + ss] = ss <= rr ? scale * acc_dP[i][j] : 0.f;
    }
  if constexpr (kInter) {
    dgs += __shfl_xor_sync(0xffffffffu, dgs, 1);
    dgs += __shfl_xor_sync(0xffffffffu, dgs, 2);
    if (tid % 4 == 0) dgs_s[tid / 4] = dgs;
  }

  // ---- phase 2: key-tile loop, own tile last
  const int nIter = kInter ? nK : 1;
  for (int it = 0; it < nIter; ++it) {
    const int kt = kInter ? (jt + 1 + it) % nK : jt;
    load_tokens<Tin, C, kW>(t0, r + kt * kW, rs, L);
    load_tokens<Tin, C, kW>(t1, k + kt * kW, rs, L);
    load_tokens<Tin, C, kW>(t2, w + kt * kW, rs, L);
    if constexpr (kInter) {
      load_state<kW, kW>(s0, dhn + (int64_t)kt * kW * D + jt * kW, D);
      if (tid < kW) u_s[tid] = a.u[h * D + kt * kW + tid];
    }
    __syncthreads();
    column_cumsum<C, kW>(t2, [&](int rr, int c, float gi, float wv, float gamma) {
      t2[rr * kLD + c] = gi;
      t3[rr * kLD + c] = gi - wv;
      if (rr == C - 1) gam_s[c] = gamma;
    });
    __syncthreads();
    block_refs<C>(t2, gs_s, gend_s, eW_s);
    if constexpr (kInter) {
      for (int idx = tid; idx < C * kW; idx += kThreads) {
        const int rr = idx / kW, c = idx % kW, o = rr * kLD + c;
        t4[o] = t1[o] * __expf(gam_s[c] - t2[o]);
      }
    }
    __syncthreads();
    if constexpr (kInter) {
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int rr = 16 * i + ty, ss = 16 * i + tx;
        float acc = 0.f;
        if (tx < ty) {
#pragma unroll 8
          for (int c = 0; c < kW; ++c)
            acc += t0[rr * kLD + c] * t1[ss * kLD + c] * __expf(t3[rr * kLD + c] - t2[ss * kLD + c]);
        } else if (tx == ty) {
#pragma unroll 8
          for (int c = 0; c < kW; ++c) acc += t0[rr * kLD + c] * u_s[c] * t1[rr * kLD + c];
        }
        acc_A[i][i] += acc;
      }
#pragma unroll 4
      for (int c = 0; c < kW; ++c) {
        float kd[TM], sp[4];
#pragma unroll
        for (int i = 0; i < TM; ++i) kd[i] = t4[(ty + 16 * i) * kLD + c];
#pragma unroll
        for (int j = 0; j < 4; ++j) sp[j] = s0[c * kLD + tx + 16 * j];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc_dv[i][j] = fmaf(kd[i], sp[j], acc_dv[i][j]);
      }
      __syncthreads();
    }
    for (int idx = tid; idx < C * kW; idx += kThreads) {
      const int rr = idx / kW, c = idx % kW, blk = rr / kBC, o = rr * kLD + c;
      t5[o] = t0[o] * __expf(t3[o] - gs_s[blk * kW + c]);
      t4[o] = t1[o] * __expf(gend_s[blk * kW + c] - t2[o]);
    }
    __syncthreads();
    if constexpr (kInter) {
#pragma unroll 4
      for (int c = 0; c < kW; ++c) {
        float qt[TM], kt_[TM];
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          qt[i] = t5[(ty + 16 * i) * kLD + c];
          kt_[i] = t4[(tx + 16 * i) * kLD + c];
        }
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
  }

  // ---- phase 3
  const int own = jt * kW;
  if constexpr (kInter) {
    // dV[s, own] = sum_r A[r, s] dO[r, own] + (K e^{g-Gi} dh)[s, own]
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TM; ++j) {
        const int rr = ty + 16 * i, ss = tx + 16 * j;
        as_s[rr * LDC + ss] = ss <= rr ? scale * acc_A[i][j] : 0.f;
      }
    load_tokens<Tin, C, kW>(s0, dO + own, rs, L);
    __syncthreads();
#pragma unroll 4
    for (int rr = 0; rr < C; ++rr) {
      float av[TM], dv[4];
#pragma unroll
      for (int i = 0; i < TM; ++i) av[i] = as_s[rr * LDC + ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) dv[j] = s0[rr * kLD + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc_dv[i][j] = fmaf(av[i], dv[j], acc_dv[i][j]);
    }
    Tin* dvp = static_cast<Tin*>(a.dv) + base + own;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int ss = ty + 16 * i;
      if (ss < L)
#pragma unroll
        for (int j = 0; j < 4; ++j) stg(dvp, ss * rs + tx + 16 * j, acc_dv[i][j]);
    }
  }

  float dqI[TM][4] = {}, dkI[TM][4] = {};
  if constexpr (kIntra) {
    // dq' intra, off-diagonal: R_jb = R_{jb-1} e^{W_jb} + sum_{s in jb} dP[r,s] k~_s, then x e^{Ge_r - gs_i}.
#pragma unroll
    for (int jb = 0; jb < NB - 1; ++jb) {
      if (jb > 0) {
#pragma unroll
        for (int i = jb + 1; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) dqI[i][j] *= eW_s[jb * kW + tx + 16 * j];
      }
#pragma unroll 4
      for (int q = 0; q < kBC; ++q) {
        const int ss = jb * kBC + q;
        float kt_[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) kt_[j] = t4[ss * kLD + tx + 16 * j];
#pragma unroll
        for (int i = jb + 1; i < TM; ++i) {
          const float pr = p_s[(ty + 16 * i) * LDC + ss];
#pragma unroll
          for (int j = 0; j < 4; ++j) dqI[i][j] = fmaf(pr, kt_[j], dqI[i][j]);
        }
      }
    }
#pragma unroll
    for (int i = 1; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int rr = ty + 16 * i, c = tx + 16 * j;
        dqI[i][j] *= __expf(t3[rr * kLD + c] - gs_s[i * kW + c]);
      }
      // dk' intra, off-diagonal: Q_ib = Q_{ib+1} e^{W_ib} + sum_{r in ib} dP[r,s] q~_r (top down),
      // then x e^{gend_j - Gi_s}.
#pragma unroll
    for (int ib = NB - 1; ib >= 1; --ib) {
#pragma unroll
      for (int i = 0; i < ib; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) dkI[i][j] *= eW_s[ib * kW + tx + 16 * j];
#pragma unroll 4
      for (int q = 0; q < kBC; ++q) {
        const int rr = ib * kBC + q;
        float qt[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) qt[j] = t5[rr * kLD + tx + 16 * j];
#pragma unroll
        for (int i = 0; i < ib; ++i) {
          const float pr = p_s[rr * LDC + ty + 16 * i];
#pragma unroll
          for (int j = 0; j < 4; ++j) dkI[i][j] = fmaf(pr, qt[j], dkI[i][j]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < TM - 1; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int ss = ty + 16 * i, c = tx + 16 * j;
        dkI[i][j] *= __expf(gend_s[i * kW + c] - t2[ss * kLD + c]);
      }
      // Diagonal blocks, elementwise.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int rr = 16 * i + ty;
      for (int q = 0; q < ty; ++q) {
        const int ss = 16 * i + q;
        const float pr = p_s[rr * LDC + ss];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = tx + 16 * j;
          dqI[i][j] += pr * t1[ss * kLD + c] * __expf(t3[rr * kLD + c] - t2[ss * kLD + c]);
        }
      }
      const int ss = 16 * i + ty;
      for (int q = ty + 1; q < kBC; ++q) {
        const int r2 = 16 * i + q;
        const float pr = p_s[r2 * LDC + ss];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = tx + 16 * j;
          dkI[i][j] += pr * t0[r2 * kLD + c] * __expf(t3[r2 * kLD + c] - t2[ss * kLD + c]);
        }
      }
    }
  }
  if constexpr (kPart == ChunkBwdTerms::intra) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int rr = ty + 16 * i;
      if (rr < L)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t o = base + rr * rs + own + tx + 16 * j;
          a.dq_tmp[o] = dqI[i][j];
          a.dk_tmp[o] = dkI[i][j];
        }
    }
    return;
  }
  if constexpr (kPart == ChunkBwdTerms::inter) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int rr = ty + 16 * i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t o = base + rr * rs + own + tx + 16 * j;
        dqI[i][j] = rr < L ? a.dq_tmp[o] : 0.f;
        dkI[i][j] = rr < L ? a.dk_tmp[o] : 0.f;
      }
    }
  }
  if constexpr (kInter) {
    __syncthreads();  // t4, t5, s0, s1 are reused below
    Tin* dqp = static_cast<Tin*>(a.dr) + base + own;
    Tin* dkp = static_cast<Tin*>(a.dk) + base + own;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int rr = ty + 16 * i, c = tx + 16 * j, o = rr * kLD + c;
        const float qv = t0[o], kv = t1[o], gi = t2[o], ge = t3[o];
        const float ekd = __expf(gam_s[c] - gi);
        const float dqp_ = scale * acc_dqS[i][j] * __expf(ge) + dqI[i][j];
        const float dkp_ = acc_dkS[i][j] * ekd + dkI[i][j];
        const float pd = p_s[rr * LDC + rr];
        const float pdu = pd * u_s[c];
        t4[o] = qv * dqp_;                 // x
        t5[o] = kv * dkp_;                 // y
        s0[o] = kv * acc_dkS[i][j] * ekd;  // z (dgamma's inter term)
        s1[o] = pd * qv * kv;              // p (du)
        if (rr < L) {
          stg(dqp, rr * rs + c, dqp_ + pdu * kv);
          stg(dkp, rr * rs + c, dkp_ + pdu * qv);
        }
      }
    __syncthreads();
    // Column reverse scan: dw_j = sum_{r>j} x_r - sum_{r>=j} y_r + dgamma.
    constexpr int P = 4, R = C / P;
    const int c = tid / P, seg = tid % P;
    float sx = 0.f, sy = 0.f, sz = 0.f, sp = 0.f;
#pragma unroll
    for (int q = 0; q < R; ++q) {
      const int o = (seg * R + q) * kLD + c;
      sx += t4[o];
      sy += t5[o];
      sz += s0[o];
      sp += s1[o];
    }
    float ix = sx, iy = sy, iz = sz, ip = sp;  // inclusive suffix sums over segments
#pragma unroll
    for (int off = 1; off < P; off <<= 1) {
      const float yx = __shfl_down_sync(0xffffffffu, ix, off, P);
      const float yy = __shfl_down_sync(0xffffffffu, iy, off, P);
      const float yz = __shfl_down_sync(0xffffffffu, iz, off, P);
      const float yp = __shfl_down_sync(0xffffffffu, ip, off, P);
      if (seg + off < P) ix += yx, iy += yy, iz += yz, ip += yp;
    }
    const float ztot = __shfl_sync(0xffffffffu, iz, 0, P);
    const float ptot = __shfl_sync(0xffffffffu, ip, 0, P);
    const float dgam = __expf(gam_s[c]) * dgs_s[c] + ztot;
    float xa = ix - sx, ya = iy - sy;
    Tin* dwp = static_cast<Tin*>(a.dw) + base + own;
#pragma unroll
    for (int q = R - 1; q >= 0; --q) {
      const int rr = seg * R + q, o = rr * kLD + c;
      ya += t5[o];
      if (rr < L) stg(dwp, rr * rs + c, xa - ya + dgam);
      xa += t4[o];
    }
    if (seg == 0) a.du_part[((b * NT + n) * H + h) * D + own + c] = ptot;
  }
}

// du[h, d] = sum_{b, n} du_part[b, n, h, d] in a fixed order (deterministic). grid (H, D/32),
// 256 threads = 32 columns x 8 row groups: group j sums the partials i = j, j + 8, ... (two
// accumulators), then the 8 group sums are added in order. Coalesced 128-byte rows, 16x the
// threads in flight of one thread per column.
__global__ void __launch_bounds__(256) rwkv6_du_reduce(const FusedArgs a) {
  ::lt::pdl_enter();  // launched with LT_LAUNCH_PDL (kernels/cuda/pdl.cuh)
  __shared__ float part[8][33];
  const int64_t H = a.dims.H, D = a.dims.D;
  const int64_t BN = a.dims.B * ((a.dims.T + a.dims.C - 1) / a.dims.C);
  const int64_t h = blockIdx.x;
  const int cl = threadIdx.x & 31, grp = threadIdx.x >> 5;
  const int64_t c = blockIdx.y * 32 + cl;
  float acc0 = 0.f, acc1 = 0.f;
  int64_t i = grp;
  for (; i + 8 < BN; i += 16) {
    acc0 += a.du_part[(i * H + h) * D + c];
    acc1 += a.du_part[((i + 8) * H + h) * D + c];
  }
  if (i < BN) acc0 += a.du_part[(i * H + h) * D + c];
  part[grp][cl] = acc0 + acc1;
  __syncthreads();
  if (grp == 0) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) s += part[j][cl];
    a.du[h * D + c] = s;
  }
}

}  // namespace

template <class T, int C, ChunkBwdTerms kPart>
void launch_bwd_chunk(const FusedArgs& a, cudaStream_t stream) {
  const size_t smem = bwd_smem_floats<C>() * sizeof(float);
  auto kernel = rwkv6_bwd_chunk<T, C, kPart>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  dim3 grid(static_cast<unsigned>(a.dims.D / kW), static_cast<unsigned>(a.dims.NT()),
            static_cast<unsigned>(a.dims.B * a.dims.H));
  LT_LAUNCH_PDL(kernel, grid, kThreads, smem, stream, a);
}

void launch_du_reduce(const FusedArgs& a, cudaStream_t stream) {
  LT_LAUNCH_PDL(rwkv6_du_reduce, dim3(static_cast<unsigned>(a.dims.H), static_cast<unsigned>(a.dims.D / 32)), 256, 0,
                stream, a);
}

template void launch_bwd_chunk<float, 16, ChunkBwdTerms::all>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<float, 16, ChunkBwdTerms::intra>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<float, 16, ChunkBwdTerms::inter>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<float, 32, ChunkBwdTerms::all>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<float, 32, ChunkBwdTerms::intra>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<float, 32, ChunkBwdTerms::inter>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<float, 64, ChunkBwdTerms::all>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<float, 64, ChunkBwdTerms::intra>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<float, 64, ChunkBwdTerms::inter>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<bfloat16, 16, ChunkBwdTerms::all>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<bfloat16, 16, ChunkBwdTerms::intra>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<bfloat16, 16, ChunkBwdTerms::inter>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<bfloat16, 32, ChunkBwdTerms::all>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<bfloat16, 32, ChunkBwdTerms::intra>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<bfloat16, 32, ChunkBwdTerms::inter>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<bfloat16, 64, ChunkBwdTerms::all>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<bfloat16, 64, ChunkBwdTerms::intra>(const FusedArgs&, cudaStream_t);
template void launch_bwd_chunk<bfloat16, 64, ChunkBwdTerms::inter>(const FusedArgs&, cudaStream_t);

}  // namespace lt::rwkv6
