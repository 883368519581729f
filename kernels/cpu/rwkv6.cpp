// RWKV6 on the CPU: the naive recurrence (ground truth, float64 capable) and the CPU twins
// of the fused CUDA stages (kernels/cuda/rwkv6/). Math, shapes and accumulation rules:
// kernels/rwkv6.h. The twins mirror the CUDA kernels' factorisation (16-row blocks,
// references at block edges, Horner products of block decays, elementwise exponentials on
// the diagonal blocks) so a mistake in that algebra shows up here, on the CPU, first.
#include "kernels/rwkv6.h"

#include "kernels/half.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace lt::rwkv6 {
namespace {

constexpr int64_t kBlock = 16;  // BC: rows per sub-block (the factorisation's granularity)

// check_chunk = false: the naive recurrence, which has no chunks.
void check_dims(const Dims& d, bool check_chunk = true) {
  if (d.B < 1 || d.T < 1 || d.H < 1 || d.D < 1)
    throw std::invalid_argument("rwkv6: bad dims B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) +
                                " H=" + std::to_string(d.H) + " D=" + std::to_string(d.D));
  if (check_chunk && d.C != 16 && d.C != 32 && d.C != 64)
    throw std::invalid_argument("rwkv6: chunk must be 16, 32 or 64, got " + std::to_string(d.C));
}

// Index of element (b, t, h, i) in a [B, T, H, D] tensor.
inline int64_t tok(const Dims& d, int64_t b, int64_t t, int64_t h, int64_t i) {
  return ((b * d.T + t) * d.H + h) * d.D + i;
}
// Offset of the [D, D] state of chunk n of (b, h) in a [B, H, NT, D, D] tensor.
inline int64_t st(const Dims& d, int64_t b, int64_t h, int64_t n) { return ((b * d.H + h) * d.NT() + n) * d.D * d.D; }

// One chunk's gates and operand tiles, rows [0, C) with rows >= L zero-padded (w by 0).
template <class F>
struct ChunkGates {
  int64_t C, D, L, NB;
  std::vector<F> w, gi, ge;     // [C, D]
  std::vector<F> gamma;         // [D]
  std::vector<F> gs, gend, eW;  // [NB, D]: block start reference, block end, e^{block decay}

  // Tensor-core variant only: invW = e^{gs - gend} (= 1 / eW) in safe columns, 0 in columns
  // whose block decay exceeds kSafeRange (there the diagonal block is summed elementwise).
  std::vector<F> invW;  // [NB, D]

  ChunkGates(const Dims& d, const F* wp, int64_t b, int64_t h, int64_t n, Variant var = Variant::simt)
      : C(d.C), D(d.D), L(std::min<int64_t>(d.C, d.T - n * d.C)), NB(d.C / kBlock), w(C * D, F(0)), gi(C * D),
        ge(C * D), gamma(D), gs(NB * D), gend(NB * D), eW(NB * D), invW(NB * D) {
    const bool tc = var == Variant::tensor_core;
    for (int64_t r = 0; r < L; ++r)
      for (int64_t i = 0; i < D; ++i) w[r * D + i] = wp[tok(d, b, n * C + r, h, i)];
    for (int64_t i = 0; i < D; ++i) {
      F g = 0;
      for (int64_t r = 0; r < C; ++r) {  // sequential fp32 (or f64) cumsum, chunk-local
        const F prev = g;
        g += w[r * D + i];
        gi[r * D + i] = g;
        ge[r * D + i] = tc ? prev : g - w[r * D + i];
      }
      gamma[i] = g;
      for (int64_t blk = 0; blk < NB; ++blk) {
        gs[blk * D + i] = blk == 0 ? F(0) : gi[(blk * kBlock - 1) * D + i];
        gend[blk * D + i] = gi[(blk * kBlock + kBlock - 1) * D + i];
        eW[blk * D + i] = std::exp(gend[blk * D + i] - gs[blk * D + i]);
        invW[blk * D + i] = safe(blk, i) ? std::exp(gs[blk * D + i] - gend[blk * D + i]) : F(0);
      }
    }
  }
  bool safe(int64_t blk, int64_t c) const { return gend[blk * D + c] - gs[blk * D + c] >= -F(kSafeRange); }
  // m_ij = prod_{j<b<i} e^{W_b} (1 for j = i-1).
  F m(int64_t i, int64_t j, int64_t c) const {
    F p = 1;
    for (int64_t blk = j + 1; blk < i; ++blk) p *= eW[blk * D + c];
    return p;
  }
};

template <class F>
void load_tile(const Dims& d, const F* x, int64_t b, int64_t h, int64_t n, int64_t L, std::vector<F>& out) {
  const int64_t C = d.C, D = d.D;
  out.assign(C * D, F(0));
  for (int64_t r = 0; r < L; ++r)
    for (int64_t i = 0; i < D; ++i) out[r * D + i] = x[tok(d, b, n * C + r, h, i)];
}

// R(x): x rounded to bf16 (round to nearest even, through fp32), as the tensor-core kernels
// round their MMA operands.
template <class F>
inline F rb16(F x) {
  return static_cast<F>(static_cast<float>(bfloat16(static_cast<float>(x))));
}

}  // namespace

// =======================================================================================
// 1. Naive recurrence
template <class F>
void naive_forward(const NaiveInputs<F>& in, F* o, F* ht) {
  const Dims& d = in.dims;
  check_dims(d, false);
  const F scale = mixer::resolved_scale(in.scale, d.D);
  const F *r = in.r, *k = in.k, *v = in.v, *w = in.w, *u = in.u, *h0 = in.h0;
  const int64_t D = d.D;
  std::vector<F> S(D * D);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      for (int64_t i = 0; i < D * D; ++i) S[i] = h0 ? h0[(b * d.H + h) * D * D + i] : F(0);
      for (int64_t t = 0; t < d.T; ++t) {
        if (in.seg_start && in.seg_start[b * d.T + t]) std::fill(S.begin(), S.end(), F(0));
        const F* rt = r + tok(d, b, t, h, 0);
        const F* kt = k + tok(d, b, t, h, 0);
        const F* vt = v + tok(d, b, t, h, 0);
        const F* wt = w + tok(d, b, t, h, 0);
        F bonus = 0;
        for (int64_t i = 0; i < D; ++i) bonus += rt[i] * u[h * D + i] * kt[i];
        for (int64_t j = 0; j < D; ++j) {
          F acc = bonus * vt[j];
          for (int64_t i = 0; i < D; ++i) acc += rt[i] * S[i * D + j];
          o[tok(d, b, t, h, j)] = scale * acc;
        }
        for (int64_t i = 0; i < D; ++i) {
          const F decay = std::exp(wt[i]);
          for (int64_t j = 0; j < D; ++j) S[i * D + j] = decay * S[i * D + j] + kt[i] * vt[j];
        }
      }
      if (ht)
        for (int64_t i = 0; i < D * D; ++i) ht[(b * d.H + h) * D * D + i] = S[i];
    }
}

template <class F>
void naive_backward(const NaiveInputs<F>& in, const F* dO, const F* dht, const NaiveGrads<F>& grads) {
  const Dims& d = in.dims;
  check_dims(d, false);
  const F scale = mixer::resolved_scale(in.scale, d.D);
  const F *r = in.r, *k = in.k, *v = in.v, *w = in.w, *u = in.u, *h0 = in.h0;
  F *dr = grads.dr, *dk = grads.dk, *dv = grads.dv, *dw = grads.dw, *du = grads.du, *dh0 = grads.dh0;
  const int64_t D = d.D, T = d.T;
  std::vector<F> states((T + 1) * D * D);  // states[t] = S_{t-1}
  std::vector<F> dS(D * D);
  for (int64_t i = 0; i < d.H * D; ++i) du[i] = 0;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      for (int64_t i = 0; i < D * D; ++i) states[i] = h0 ? h0[(b * d.H + h) * D * D + i] : F(0);
      for (int64_t t = 0; t < T; ++t) {
        const F* kt = k + tok(d, b, t, h, 0);
        const F* vt = v + tok(d, b, t, h, 0);
        const F* wt = w + tok(d, b, t, h, 0);
        if (in.seg_start && in.seg_start[b * T + t]) std::fill_n(&states[t * D * D], D * D, F(0));
        const F* Sp = &states[t * D * D];
        F* Sn = &states[(t + 1) * D * D];
        for (int64_t i = 0; i < D; ++i) {
          const F decay = std::exp(wt[i]);
          for (int64_t j = 0; j < D; ++j) Sn[i * D + j] = decay * Sp[i * D + j] + kt[i] * vt[j];
        }
      }
      for (int64_t i = 0; i < D * D; ++i) dS[i] = dht ? dht[(b * d.H + h) * D * D + i] : F(0);
      for (int64_t t = T - 1; t >= 0; --t) {
        const F* rt = r + tok(d, b, t, h, 0);
        const F* kt = k + tok(d, b, t, h, 0);
        const F* vt = v + tok(d, b, t, h, 0);
        const F* wt = w + tok(d, b, t, h, 0);
        const F* dot = dO + tok(d, b, t, h, 0);
        const F* Sp = &states[t * D * D];
        F bonus = 0, dov = 0;
        for (int64_t i = 0; i < D; ++i) bonus += rt[i] * u[h * D + i] * kt[i];
        for (int64_t j = 0; j < D; ++j) dov += dot[j] * vt[j];
        for (int64_t i = 0; i < D; ++i) {
          F dki = 0, dwi = 0, dri = 0;
          for (int64_t j = 0; j < D; ++j) {
            dki += dS[i * D + j] * vt[j];
            dwi += Sp[i * D + j] * dS[i * D + j];
            dri += Sp[i * D + j] * dot[j];
          }
          const F ui = u[h * D + i];
          dk[tok(d, b, t, h, i)] = dki + scale * dov * ui * rt[i];
          dw[tok(d, b, t, h, i)] = std::exp(wt[i]) * dwi;
          dr[tok(d, b, t, h, i)] = scale * dri + scale * dov * ui * kt[i];
          du[h * D + i] += scale * dov * rt[i] * kt[i];
        }
        for (int64_t j = 0; j < D; ++j) {
          F dvj = scale * bonus * dot[j];
          for (int64_t i = 0; i < D; ++i) dvj += dS[i * D + j] * kt[i];
          dv[tok(d, b, t, h, j)] = dvj;
        }
        for (int64_t i = 0; i < D; ++i) {
          const F decay = std::exp(wt[i]);
          for (int64_t j = 0; j < D; ++j) dS[i * D + j] = decay * dS[i * D + j] + scale * rt[i] * dot[j];
        }
        // a document starts at t: S_{t-1} was replaced by zero, nothing flows back past it
        if (in.seg_start && in.seg_start[b * T + t]) std::fill(dS.begin(), dS.end(), F(0));
      }
      if (dh0)
        for (int64_t i = 0; i < D * D; ++i) dh0[(b * d.H + h) * D * D + i] = dS[i];
    }
}

// =======================================================================================
// 2. CPU twins of the CUDA stages
namespace {
// One chunk step of either state scan: S[i][j] <- e^{gamma_i} S[i][j] + sum_r x[r][i] y[r][j].
template <class F>
void decay_and_add(const ChunkGates<F>& g, const std::vector<F>& x, const std::vector<F>& y, std::vector<F>& S) {
  const int64_t C = g.C, D = g.D;
  for (int64_t i = 0; i < D; ++i) {
    const F decay = std::exp(g.gamma[i]);
    for (int64_t j = 0; j < D; ++j) {
      F acc = 0;
      for (int64_t r = 0; r < C; ++r) acc += x[r * D + i] * y[r * D + j];
      S[i * D + j] = decay * S[i * D + j] + acc;
    }
  }
}
}  // namespace

template <class F>
void chunk_state_scan(const Dims& d, const F* k, const F* v, const F* w, const F* h0, F* h, F* ht, Variant var,
                      const int32_t* chunk_reset) {
  check_dims(d);
  const bool tc = var == Variant::tensor_core;
  const int64_t D = d.D, C = d.C, NT = d.NT();
  std::vector<F> S(D * D), kd, vt;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t hh = 0; hh < d.H; ++hh) {
      for (int64_t i = 0; i < D * D; ++i) S[i] = h0 ? h0[(b * d.H + hh) * D * D + i] : F(0);
      for (int64_t n = 0; n < NT; ++n) {
        if (chunk_reset && chunk_reset[b * NT + n]) std::fill(S.begin(), S.end(), F(0));  // a segment starts
        ChunkGates<F> g(d, w, b, hh, n, var);
        std::copy(S.begin(), S.end(), h + st(d, b, hh, n));
        load_tile(d, k, b, hh, n, g.L, kd);
        load_tile(d, v, b, hh, n, g.L, vt);
        for (int64_t r = 0; r < C; ++r)  // k . e^{gamma - Gi}  (<= 1 factors)
          for (int64_t i = 0; i < D; ++i) {
            kd[r * D + i] *= std::exp(g.gamma[i] - g.gi[r * D + i]);
            if (tc) kd[r * D + i] = rb16(kd[r * D + i]), vt[r * D + i] = rb16(vt[r * D + i]);
          }
        decay_and_add(g, kd, vt, S);
      }
      if (ht) std::copy(S.begin(), S.end(), ht + (b * d.H + hh) * D * D);
    }
}

template <class F>
void chunk_dstate_scan(const Dims& d, F scale, const F* r, const F* w, const F* dO, const F* dht, F* dh, F* dh0,
                       Variant var, const int32_t* chunk_reset) {
  check_dims(d);
  scale = mixer::resolved_scale(scale, d.D);
  const bool tc = var == Variant::tensor_core;
  const int64_t D = d.D, C = d.C, NT = d.NT();
  std::vector<F> S(D * D), qe, dot;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t hh = 0; hh < d.H; ++hh) {
      for (int64_t i = 0; i < D * D; ++i) S[i] = dht ? dht[(b * d.H + hh) * D * D + i] : F(0);
      for (int64_t n = NT - 1; n >= 0; --n) {
        ChunkGates<F> g(d, w, b, hh, n, var);
        std::copy(S.begin(), S.end(), dh + st(d, b, hh, n));
        load_tile(d, r, b, hh, n, g.L, qe);
        load_tile(d, dO, b, hh, n, g.L, dot);
        for (int64_t rr = 0; rr < C; ++rr)
          for (int64_t i = 0; i < D; ++i) {
            qe[rr * D + i] *= scale * std::exp(g.ge[rr * D + i]);
            if (tc) qe[rr * D + i] = rb16(qe[rr * D + i]), dot[rr * D + i] = rb16(dot[rr * D + i]);
          }
        decay_and_add(g, qe, dot, S);
        if (chunk_reset && chunk_reset[b * NT + n]) std::fill(S.begin(), S.end(), F(0));  // S_in(n) = 0
      }
      if (dh0) std::copy(S.begin(), S.end(), dh0 + (b * d.H + hh) * D * D);
    }
}

namespace {
// A (C x C, scale and the u bonus included; zero above the diagonal) of one chunk.
template <class F>
void chunk_attention(const ChunkGates<F>& g, F scale, const std::vector<F>& q, const std::vector<F>& k, const F* u,
                     std::vector<F>& A) {
  const int64_t C = g.C, D = g.D;
  std::vector<F> qt(C * D), kt(C * D);
  for (int64_t r = 0; r < C; ++r)
    for (int64_t i = 0; i < D; ++i) {
      const int64_t blk = r / kBlock;
      qt[r * D + i] = q[r * D + i] * std::exp(g.ge[r * D + i] - g.gs[blk * D + i]);
      kt[r * D + i] = k[r * D + i] * std::exp(g.gend[blk * D + i] - g.gi[r * D + i]);
    }
  A.assign(C * C, F(0));
  for (int64_t r = 0; r < C; ++r)
    for (int64_t s = 0; s <= r; ++s) {
      const int64_t bi = r / kBlock, bj = s / kBlock;
      F acc = 0;
      if (s == r) {
        for (int64_t i = 0; i < D; ++i) acc += q[r * D + i] * u[i] * k[r * D + i];
      } else if (bi == bj) {
        for (int64_t i = 0; i < D; ++i)
          acc += q[r * D + i] * k[s * D + i] * std::exp(g.ge[r * D + i] - g.gi[s * D + i]);
      } else {
        for (int64_t i = 0; i < D; ++i) acc += qt[r * D + i] * g.m(bi, bj, i) * kt[s * D + i];
      }
      A[r * C + s] = scale * acc;
    }
}
}  // namespace

namespace {
// ---------------------------------------------------------------------------------------
// Tensor-core variant (kernels/rwkv6.h, "Tensor-core variant"): the algebra of the bf16
// tensor-core kernels with their rounding points, accumulation in F.
template <class F>
struct TcOperands {
  std::vector<F> qraw;    // q~ = q e^{Ge - gs_i} before rounding (folded operands start here)
  std::vector<F> qt, kt;  // R(q~), R(k~ = k e^{gend_j - Gi})
  std::vector<F> kh;      // R(k^ = k~ / e^{W}) in safe columns, 0 in the others (A's diagonal blocks)
  TcOperands(const ChunkGates<F>& g, const std::vector<F>& q, const std::vector<F>& k)
      : qraw(g.C * g.D), qt(g.C * g.D), kt(g.C * g.D), kh(g.C * g.D) {
    const int64_t D = g.D;
    for (int64_t r = 0; r < g.C; ++r)
      for (int64_t i = 0; i < D; ++i) {
        const int64_t blk = r / kBlock, o = r * D + i;
        const F qx = q[o] * std::exp(g.ge[o] - g.gs[blk * D + i]);
        const F kx = k[o] * std::exp(g.gend[blk * D + i] - g.gi[o]);
        qraw[o] = qx;
        qt[o] = rb16(qx);
        kt[o] = rb16(kx);
        kh[o] = rb16(kx * g.invW[blk * D + i]);
      }
  }
};

// R(scale A) with the u bonus on the diagonal, zero above it (C x C).
template <class F>
void chunk_attention_tc(const ChunkGates<F>& g, F scale, const std::vector<F>& q, const std::vector<F>& k, const F* u,
                        const TcOperands<F>& op, std::vector<F>& A) {
  const int64_t C = g.C, D = g.D;
  A.assign(C * C, F(0));
  for (int64_t r = 0; r < C; ++r)
    for (int64_t s = 0; s <= r; ++s) {
      const int64_t bi = r / kBlock, bj = s / kBlock;
      F acc = 0;
      if (s == r) {
        for (int64_t i = 0; i < D; ++i) acc += q[r * D + i] * u[i] * k[r * D + i];
      } else if (bi == bj) {
        for (int64_t i = 0; i < D; ++i) {
          if (g.safe(bi, i)) acc += op.qt[r * D + i] * op.kh[s * D + i];
          else acc += q[r * D + i] * k[s * D + i] * std::exp(g.ge[r * D + i] - g.gi[s * D + i]);
        }
      } else {
        for (int64_t i = 0; i < D; ++i) acc += rb16(op.qraw[r * D + i] * g.m(bi, bj, i)) * op.kt[s * D + i];
      }
      A[r * C + s] = rb16(scale * acc);
    }
}

template <class F>
void chunk_output_tc(const Dims& d, F scale, const F* r, const F* k, const F* v, const F* w, const F* u, const F* h,
                     F* o) {
  const int64_t D = d.D, C = d.C, NT = d.NT();
  std::vector<F> q, kk, vv, A, Sr(D * D);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t hh = 0; hh < d.H; ++hh)
      for (int64_t n = 0; n < NT; ++n) {
        ChunkGates<F> g(d, w, b, hh, n, Variant::tensor_core);
        load_tile(d, r, b, hh, n, g.L, q);
        load_tile(d, k, b, hh, n, g.L, kk);
        load_tile(d, v, b, hh, n, g.L, vv);
        for (auto* x : {&q, &kk, &vv})
          for (auto& e : *x) e = rb16(e);
        TcOperands<F> op(g, q, kk);
        chunk_attention_tc(g, scale, q, kk, u + hh * D, op, A);
        const F* S = h + st(d, b, hh, n);
        for (int64_t i = 0; i < D * D; ++i) Sr[i] = rb16(S[i]);
        for (int64_t rr = 0; rr < g.L; ++rr)
          for (int64_t j = 0; j < D; ++j) {
            F inter = 0, intra = 0;
            for (int64_t i = 0; i < D; ++i) inter += rb16(q[rr * D + i] * std::exp(g.ge[rr * D + i])) * Sr[i * D + j];
            for (int64_t s = 0; s <= rr; ++s) intra += A[rr * C + s] * vv[s * D + j];
            o[tok(d, b, n * C + rr, hh, j)] = scale * inter + intra;
          }
      }
}

// ---------------------------------------------------------------------------------------
// Backward chunk glue shared by both variants (chunk_bwd, chunk_bwd_tc), per chunk n of (b, hh).
// State products: dqS = dO S^T, dkS = V Sp^T ([C][D]; S, Sp the row-major [D][D] states as the
// variant reads them: h[n], dh[n] or their bf16 roundings).
template <class F>
void chunk_state_products(int64_t C, int64_t D, const std::vector<F>& dOc, const std::vector<F>& vv, const F* S,
                          const F* Sp, std::vector<F>& dqS, std::vector<F>& dkS) {
  for (int64_t rr = 0; rr < C; ++rr)
    for (int64_t i = 0; i < D; ++i) {
      F a1 = 0, a2 = 0;
      for (int64_t j = 0; j < D; ++j) {
        a1 += dOc[rr * D + j] * S[i * D + j];
        a2 += vv[rr * D + j] * Sp[i * D + j];
      }
      dqS[rr * D + i] = a1;
      dkS[rr * D + i] = a2;
    }
}
// dgamma_i = e^{gamma_i} sum_j S_ij Sp_ij + sum_s k_si dkS_si e^{gamma_i - Gi_si}; the full
// dq' = scale dqS e^{Ge} + dq'_intra and dk' = dkS e^{gamma - Gi} + dk'_intra.
template <class F>
void chunk_combine_adjoints(const ChunkGates<F>& g, F scale, const F* S, const F* Sp, const std::vector<F>& kk,
                            const std::vector<F>& dqS, const std::vector<F>& dkS, const std::vector<F>& dqI,
                            const std::vector<F>& dkI, std::vector<F>& dg, std::vector<F>& dq, std::vector<F>& dkk) {
  const int64_t C = g.C, D = g.D;
  for (int64_t i = 0; i < D; ++i) {
    F acc = 0;
    for (int64_t j = 0; j < D; ++j) acc += S[i * D + j] * Sp[i * D + j];
    F acc2 = 0;
    for (int64_t s = 0; s < C; ++s) acc2 += kk[s * D + i] * dkS[s * D + i] * std::exp(g.gamma[i] - g.gi[s * D + i]);
    dg[i] = std::exp(g.gamma[i]) * acc + acc2;
  }
  for (int64_t rr = 0; rr < C; ++rr)
    for (int64_t i = 0; i < D; ++i) {
      dq[rr * D + i] = scale * dqS[rr * D + i] * std::exp(g.ge[rr * D + i]) + dqI[rr * D + i];
      dkk[rr * D + i] = dkS[rr * D + i] * std::exp(g.gamma[i] - g.gi[rr * D + i]) + dkI[rr * D + i];
    }
}
// The du partials of the chunk (sum_j dP_jj q_j k_j) and dr, dk: dq', dk' plus the bonus terms.
template <class F>
void chunk_store_grads(const Dims& d, int64_t b, int64_t hh, int64_t n, int64_t L, const std::vector<F>& dP,
                       const std::vector<F>& q, const std::vector<F>& kk, const F* uh, const std::vector<F>& dq,
                       const std::vector<F>& dkk, F* dr, F* dk, F* du_part) {
  const int64_t C = d.C, D = d.D, NT = d.NT();
  for (int64_t i = 0; i < D; ++i) {
    F dus = 0;
    for (int64_t j = 0; j < C; ++j) dus += dP[j * C + j] * q[j * D + i] * kk[j * D + i];
    du_part[((b * NT + n) * d.H + hh) * D + i] = dus;
  }
  for (int64_t rr = 0; rr < L; ++rr)
    for (int64_t i = 0; i < D; ++i) {
      const F pd = dP[rr * C + rr];
      dr[tok(d, b, n * C + rr, hh, i)] = dq[rr * D + i] + pd * uh[i] * kk[rr * D + i];
      dk[tok(d, b, n * C + rr, hh, i)] = dkk[rr * D + i] + pd * uh[i] * q[rr * D + i];
    }
}

// The chunk's four input tiles (r, k, v, dO rows of chunk n of (b, hh); zero past L).
template <class F>
void load_bwd_tiles(const Dims& d, const F* r, const F* k, const F* v, const F* dO, int64_t b, int64_t hh, int64_t n,
                    int64_t L, std::vector<F>& q, std::vector<F>& kk, std::vector<F>& vv, std::vector<F>& dOc) {
  load_tile(d, r, b, hh, n, L, q);
  load_tile(d, k, b, hh, n, L, kk);
  load_tile(d, v, b, hh, n, L, vv);
  load_tile(d, dO, b, hh, n, L, dOc);
}
// dP = scale (dO V^T) . M_<= (C x C, zero above the diagonal).
template <class F>
void chunk_dP(int64_t C, int64_t D, F scale, const std::vector<F>& dOc, const std::vector<F>& vv, std::vector<F>& dP) {
  for (int64_t rr = 0; rr < C; ++rr)
    for (int64_t s = 0; s < C; ++s) {
      F acc = 0;
      if (s <= rr)
        for (int64_t j = 0; j < D; ++j) acc += dOc[rr * D + j] * vv[s * D + j];
      dP[rr * C + s] = scale * acc;
    }
}
// The intra part's hand-over between the split backward's two launches: dq'_intra and
// dk'_intra of the chunk's L valid rows to dq_tmp / dk_tmp, and back (zero past L).
template <class F>
void store_intra(const Dims& d, int64_t b, int64_t hh, int64_t n, int64_t L, const std::vector<F>& dqI,
                 const std::vector<F>& dkI, F* dq_tmp, F* dk_tmp) {
  for (int64_t rr = 0; rr < L; ++rr)
    for (int64_t i = 0; i < d.D; ++i) {
      dq_tmp[tok(d, b, n * d.C + rr, hh, i)] = dqI[rr * d.D + i];
      dk_tmp[tok(d, b, n * d.C + rr, hh, i)] = dkI[rr * d.D + i];
    }
}
template <class F>
void load_intra(const Dims& d, int64_t b, int64_t hh, int64_t n, int64_t L, const F* dq_tmp, const F* dk_tmp,
                std::vector<F>& dqI, std::vector<F>& dkI) {
  for (int64_t rr = 0; rr < d.C; ++rr)
    for (int64_t i = 0; i < d.D; ++i) {
      const bool ok = rr < L;
      dqI[rr * d.D + i] = ok ? dq_tmp[tok(d, b, n * d.C + rr, hh, i)] : F(0);
      dkI[rr * d.D + i] = ok ? dk_tmp[tok(d, b, n * d.C + rr, hh, i)] : F(0);
    }
}
// dV = A^T dO + round(K . e^{gamma - Gi}) Sp for the chunk's L valid rows; `round` is where the
// tensor-core variant rounds its operand to bf16 (identity for the fp32 variant).
template <class F, class Round>
void chunk_dv(const Dims& d, const ChunkGates<F>& g, int64_t b, int64_t hh, int64_t n, const std::vector<F>& A,
              const std::vector<F>& dOc, const std::vector<F>& kk, const F* Sp, Round round, F* dv) {
  const int64_t C = d.C, D = d.D;
  for (int64_t s = 0; s < g.L; ++s)
    for (int64_t j = 0; j < D; ++j) {
      F acc = 0;
      for (int64_t rr = s; rr < C; ++rr) acc += A[rr * C + s] * dOc[rr * D + j];
      for (int64_t i = 0; i < D; ++i)
        acc += round(kk[s * D + i] * std::exp(g.gamma[i] - g.gi[s * D + i])) * Sp[i * D + j];
      dv[tok(d, b, n * C + s, hh, j)] = acc;
    }
}

template <class F>
void chunk_bwd_tc(const Dims& d, ChunkBwdTerms part, F scale, const F* r, const F* k, const F* v, const F* w,
                  const F* u, const F* h, const F* dh, const F* dO, F* dq_tmp, F* dk_tmp, F* dr, F* dk, F* dv, F* dw,
                  F* du_part) {
  const int64_t D = d.D, C = d.C, NT = d.NT();
  const bool intra = part != ChunkBwdTerms::inter;
  std::vector<F> q, kk, vv, dOc, A, dP(C * C), P(C * C), Sr(D * D), Spr(D * D);
  std::vector<F> dqI(C * D), dkI(C * D), xI(C * D), yI(C * D), dqS(C * D), dkS(C * D), dq(C * D), dkk(C * D), dg(D);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t hh = 0; hh < d.H; ++hh)
      for (int64_t n = 0; n < NT; ++n) {
        ChunkGates<F> g(d, w, b, hh, n, Variant::tensor_core);
        const int64_t L = g.L, NB = g.NB;
        load_bwd_tiles(d, r, k, v, dO, b, hh, n, L, q, kk, vv, dOc);
        for (auto* x : {&q, &kk, &vv, &dOc})
          for (auto& e : *x) e = rb16(e);
        const F* uh = u + hh * D;
        // dP in fp32; its strictly lower part rounded is the MMA operand P.
        chunk_dP(C, D, scale, dOc, vv, dP);
        for (int64_t rr = 0; rr < C; ++rr)
          for (int64_t s = 0; s < C; ++s) P[rr * C + s] = s < rr ? rb16(dP[rr * C + s]) : F(0);
        TcOperands<F> op(g, q, kk);
        if (intra) {
          // dq' intra, block bi: Horner over column blocks jb < bi on R(k~); the diagonal block
          // on R(k~) too, after scaling the accumulator by sc = e^{W_bi} (safe columns; 1 in
          // unsafe ones): acc = sc Off + Dg. Safe: D = e^{-W} acc = Off + e^{-W} Dg; unsafe:
          // D = acc - Dg (Dg recomputed elementwise) and the exact diagonal sum fb is added.
          // dq'_intra = e^{Ge - gs} D + fb; x_intra = R(q~) D + q fb (dw's x, consistent with y).
          for (int64_t rr = 0; rr < C; ++rr) {
            const int64_t bi = rr / kBlock;
            for (int64_t i = 0; i < D; ++i) {
              const bool safe = g.safe(bi, i);
              F R = 0;
              for (int64_t jb = 0; jb < bi; ++jb) {
                if (jb > 0) R *= g.eW[jb * D + i];
                for (int64_t s = jb * kBlock; s < (jb + 1) * kBlock; ++s) R += P[rr * C + s] * op.kt[s * D + i];
              }
              if (bi > 0 && safe) R *= g.eW[bi * D + i];
              F dg = 0;
              for (int64_t s = bi * kBlock; s < (bi + 1) * kBlock; ++s) dg += P[rr * C + s] * op.kt[s * D + i];
              R += dg;
              F Dq = 0, fb = 0;
              if (safe) {
                Dq = g.invW[bi * D + i] * R;
              } else {
                Dq = R - dg;
                for (int64_t s = bi * kBlock; s < rr; ++s)
                  fb += P[rr * C + s] * kk[s * D + i] * std::exp(g.ge[rr * D + i] - g.gi[s * D + i]);
              }
              dqI[rr * D + i] = std::exp(g.ge[rr * D + i] - g.gs[bi * D + i]) * Dq + fb;
              xI[rr * D + i] = op.qt[rr * D + i] * Dq + q[rr * D + i] * fb;
            }
          }
          // dk' intra, block bj: Horner over row blocks ib > bj (from the last) on R(q~), then
          // the diagonal block the same way. dk'_intra = e^{ge - Gi} D + fb; y_intra = R(k~) D + k fb.
          for (int64_t s = 0; s < C; ++s) {
            const int64_t bj = s / kBlock;
            for (int64_t i = 0; i < D; ++i) {
              const bool safe = g.safe(bj, i);
              F Q = 0;
              for (int64_t ib = NB - 1; ib > bj; --ib) {
                Q *= g.eW[ib * D + i];
                for (int64_t rr = ib * kBlock; rr < (ib + 1) * kBlock; ++rr) Q += P[rr * C + s] * op.qt[rr * D + i];
              }
              if (bj < NB - 1 && safe) Q *= g.eW[bj * D + i];
              F dg = 0;
              for (int64_t rr = bj * kBlock; rr < (bj + 1) * kBlock; ++rr) dg += P[rr * C + s] * op.qt[rr * D + i];
              Q += dg;
              F Dk = 0, fb = 0;
              if (safe) {
                Dk = g.invW[bj * D + i] * Q;
              } else {
                Dk = Q - dg;
                for (int64_t rr = s + 1; rr < (bj + 1) * kBlock; ++rr)
                  fb += P[rr * C + s] * q[rr * D + i] * std::exp(g.ge[rr * D + i] - g.gi[s * D + i]);
              }
              dkI[s * D + i] = std::exp(g.gend[bj * D + i] - g.gi[s * D + i]) * Dk + fb;
              yI[s * D + i] = op.kt[s * D + i] * Dk + kk[s * D + i] * fb;
            }
          }
          if (part == ChunkBwdTerms::intra) {
            // The fallback's intra kernel also finishes dw's intra part (the consistent x, y
            // exist only here) and leaves it in dw, rounded to the output dtype (bf16).
            for (int64_t i = 0; i < D; ++i) {
              F sq = 0, sk = 0;
              for (int64_t j = C - 1; j >= 0; --j) {
                sk += yI[j * D + i];
                if (j < L) dw[tok(d, b, n * C + j, hh, i)] = rb16(sq - sk);
                sq += xI[j * D + i];
              }
            }
            store_intra(d, b, hh, n, L, dqI, dkI, dq_tmp, dk_tmp);
            continue;
          }
        } else {
          load_intra(d, b, hh, n, L, dq_tmp, dk_tmp, dqI, dkI);
          std::fill(xI.begin(), xI.end(), F(0));  // dw's intra part is in dw already
          std::fill(yI.begin(), yI.end(), F(0));
        }
        chunk_attention_tc(g, scale, q, kk, uh, op, A);
        const F* S = h + st(d, b, hh, n);
        const F* Sp = dh + st(d, b, hh, n);
        for (int64_t i = 0; i < D * D; ++i) Sr[i] = rb16(S[i]), Spr[i] = rb16(Sp[i]);
        chunk_state_products(C, D, dOc, vv, Sr.data(), Spr.data(), dqS, dkS);
        chunk_dv(
            d, g, b, hh, n, A, dOc, kk, Spr.data(), [](F x) { return rb16(x); }, dv);
        chunk_combine_adjoints(g, scale, S, Sp, kk, dqS, dkS, dqI, dkI, dg, dq, dkk);
        for (int64_t i = 0; i < D; ++i) {
          // dw_j = sum_{r>j} x_r - sum_{r>=j} y_r + dgamma with x = q dq'_inter + x_intra,
          // y = k dk'_inter + y_intra (+ the intra part left in dw by the fallback's intra kernel).
          F sq = 0, sk = 0;
          for (int64_t j = C - 1; j >= 0; --j) {
            sk += kk[j * D + i] * dkS[j * D + i] * std::exp(g.gamma[i] - g.gi[j * D + i]) + yI[j * D + i];
            if (j < L) {
              F& out = dw[tok(d, b, n * C + j, hh, i)];
              out = sq - sk + dg[i] + (intra ? F(0) : out);
            }
            sq += q[j * D + i] * scale * dqS[j * D + i] * std::exp(g.ge[j * D + i]) + xI[j * D + i];
          }
        }
        chunk_store_grads(d, b, hh, n, L, dP, q, kk, uh, dq, dkk, dr, dk, du_part);
      }
}
}  // namespace

template <class F>
void chunk_output(const Dims& d, F scale, const F* r, const F* k, const F* v, const F* w, const F* u, const F* h, F* o,
                  Variant var) {
  check_dims(d);
  scale = mixer::resolved_scale(scale, d.D);
  if (var == Variant::tensor_core) return chunk_output_tc(d, scale, r, k, v, w, u, h, o);
  const int64_t D = d.D, C = d.C, NT = d.NT();
  std::vector<F> q, kk, vv, A;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t hh = 0; hh < d.H; ++hh)
      for (int64_t n = 0; n < NT; ++n) {
        ChunkGates<F> g(d, w, b, hh, n);
        load_tile(d, r, b, hh, n, g.L, q);
        load_tile(d, k, b, hh, n, g.L, kk);
        load_tile(d, v, b, hh, n, g.L, vv);
        chunk_attention(g, scale, q, kk, u + hh * D, A);
        const F* S = h + st(d, b, hh, n);
        for (int64_t rr = 0; rr < g.L; ++rr)
          for (int64_t j = 0; j < D; ++j) {
            F inter = 0, intra = 0;
            for (int64_t i = 0; i < D; ++i) inter += q[rr * D + i] * std::exp(g.ge[rr * D + i]) * S[i * D + j];
            for (int64_t s = 0; s <= rr; ++s) intra += A[rr * C + s] * vv[s * D + j];
            o[tok(d, b, n * C + rr, hh, j)] = scale * inter + intra;
          }
      }
}

template <class F>
void chunk_bwd(const Dims& d, ChunkBwdTerms part, F scale, const F* r, const F* k, const F* v, const F* w, const F* u,
               const F* h, const F* dh, const F* dO, F* dq_tmp, F* dk_tmp, F* dr, F* dk, F* dv, F* dw, F* du_part,
               Variant var) {
  check_dims(d);
  scale = mixer::resolved_scale(scale, d.D);
  if (var == Variant::tensor_core)
    return chunk_bwd_tc(d, part, scale, r, k, v, w, u, h, dh, dO, dq_tmp, dk_tmp, dr, dk, dv, dw, du_part);
  const int64_t D = d.D, C = d.C, NT = d.NT();
  const bool intra = part != ChunkBwdTerms::inter, inter = part != ChunkBwdTerms::intra;
  std::vector<F> q, kk, vv, dOc, A, dP(C * C), qt(C * D), kt(C * D);
  std::vector<F> dqI(C * D), dkI(C * D), dqS(C * D), dkS(C * D), dq(C * D), dkk(C * D), dg(D);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t hh = 0; hh < d.H; ++hh)
      for (int64_t n = 0; n < NT; ++n) {
        ChunkGates<F> g(d, w, b, hh, n);
        const int64_t L = g.L, NB = g.NB;
        load_bwd_tiles(d, r, k, v, dO, b, hh, n, L, q, kk, vv, dOc);
        const F* uh = u + hh * D;
        chunk_dP(C, D, scale, dOc, vv, dP);
        if (intra) {
          // intra dq', dk': off-diagonal blocks by the Horner recursion over block decays,
          // diagonal blocks elementwise.
          for (int64_t rr = 0; rr < C; ++rr)
            for (int64_t i = 0; i < D; ++i) {
              const int64_t blk = rr / kBlock;
              qt[rr * D + i] = q[rr * D + i] * std::exp(g.ge[rr * D + i] - g.gs[blk * D + i]);
              kt[rr * D + i] = kk[rr * D + i] * std::exp(g.gend[blk * D + i] - g.gi[rr * D + i]);
            }
          for (int64_t rr = 0; rr < C; ++rr) {
            const int64_t bi = rr / kBlock;
            for (int64_t i = 0; i < D; ++i) {
              // R_jb = R_{jb-1} e^{W_jb} + sum_{s in jb} dP[r,s] k~_s ; dq_off = q-factor * R_{bi-1}
              F R = 0;
              for (int64_t jb = 0; jb < bi; ++jb) {
                if (jb > 0) R *= g.eW[jb * D + i];
                for (int64_t s = jb * kBlock; s < (jb + 1) * kBlock; ++s) R += dP[rr * C + s] * kt[s * D + i];
              }
              F acc = R * std::exp(g.ge[rr * D + i] - g.gs[bi * D + i]);
              for (int64_t s = bi * kBlock; s < rr; ++s)
                acc += dP[rr * C + s] * kk[s * D + i] * std::exp(g.ge[rr * D + i] - g.gi[s * D + i]);
              dqI[rr * D + i] = acc;
            }
          }
          for (int64_t s = 0; s < C; ++s) {
            const int64_t bj = s / kBlock;
            for (int64_t i = 0; i < D; ++i) {
              // Q_ib = Q_{ib+1} e^{W_ib} + sum_{r in ib} dP[r,s] q~_r, ib from the top down
              F Q = 0;
              for (int64_t ib = NB - 1; ib > bj; --ib) {
                Q *= g.eW[ib * D + i];
                for (int64_t rr = ib * kBlock; rr < (ib + 1) * kBlock; ++rr) Q += dP[rr * C + s] * qt[rr * D + i];
              }
              F acc = Q * std::exp(g.gend[bj * D + i] - g.gi[s * D + i]);
              for (int64_t rr = s + 1; rr < (bj + 1) * kBlock; ++rr)
                acc += dP[rr * C + s] * q[rr * D + i] * std::exp(g.ge[rr * D + i] - g.gi[s * D + i]);
              dkI[s * D + i] = acc;
            }
          }
          if (part == ChunkBwdTerms::intra) {
            store_intra(d, b, hh, n, L, dqI, dkI, dq_tmp, dk_tmp);
            continue;
          }
        } else {
          load_intra(d, b, hh, n, L, dq_tmp, dk_tmp, dqI, dkI);
        }
        (void)inter;
        // ---- inter part and the glue
        chunk_attention(g, scale, q, kk, uh, A);
        const F* S = h + st(d, b, hh, n);
        const F* Sp = dh + st(d, b, hh, n);
        chunk_state_products(C, D, dOc, vv, S, Sp, dqS, dkS);
        chunk_dv(
            d, g, b, hh, n, A, dOc, kk, Sp, [](F x) { return x; }, dv);
        chunk_combine_adjoints(g, scale, S, Sp, kk, dqS, dkS, dqI, dkI, dg, dq, dkk);
        for (int64_t i = 0; i < D; ++i) {
          // dw_j = sum_{r>j} q dq' - sum_{r>=j} k dk' + dgamma (reverse scan over rows)
          F sq = 0, sk = 0;
          for (int64_t j = C - 1; j >= 0; --j) {
            sk += kk[j * D + i] * dkk[j * D + i];
            if (j < L) dw[tok(d, b, n * C + j, hh, i)] = sq - sk + dg[i];
            sq += q[j * D + i] * dq[j * D + i];
          }
        }
        chunk_store_grads(d, b, hh, n, L, dP, q, kk, uh, dq, dkk, dr, dk, du_part);
      }
}

template <class F>
void du_reduce(const Dims& d, const F* du_part, F* du) {
  const int64_t NT = d.NT();
  for (int64_t hh = 0; hh < d.H; ++hh)
    for (int64_t i = 0; i < d.D; ++i) {
      F acc = 0;
      for (int64_t b = 0; b < d.B; ++b)
        for (int64_t n = 0; n < NT; ++n) acc += du_part[((b * NT + n) * d.H + hh) * d.D + i];
      du[hh * d.D + i] = acc;
    }
}

template <class F>
void chunk_forward_cpu(const Dims& d, F scale, const F* r, const F* k, const F* v, const F* w, const F* u, const F* h0,
                       F* o, F* ht, Variant var, const int32_t* chunk_reset) {
  std::vector<F> h(d.trajectory_numel());
  chunk_state_scan(d, k, v, w, h0, h.data(), ht, var, chunk_reset);
  chunk_output(d, scale, r, k, v, w, u, h.data(), o, var);
}

template <class F>
void chunk_backward_cpu(const Dims& d, BwdImpl impl, F scale, const F* r, const F* k, const F* v, const F* w,
                        const F* u, const F* h0, const F* dO, const F* dht, F* dr, F* dk, F* dv, F* dw, F* du, F* dh0,
                        Variant var, const int32_t* chunk_reset) {
  std::vector<F> h(d.trajectory_numel()), dh(d.trajectory_numel()), dup(du_part_numel(d));
  chunk_state_scan<F>(d, k, v, w, h0, h.data(), nullptr, var, chunk_reset);
  chunk_dstate_scan(d, scale, r, w, dO, dht, dh.data(), dh0, var, chunk_reset);
  if (impl == BwdImpl::fused) {
    chunk_bwd<F>(d, ChunkBwdTerms::all, scale, r, k, v, w, u, h.data(), dh.data(), dO, nullptr, nullptr, dr, dk, dv, dw,
                 dup.data(), var);
  } else {
    std::vector<F> dqt(d.token_numel()), dkt(d.token_numel());
    chunk_bwd<F>(d, ChunkBwdTerms::intra, scale, r, k, v, w, u, h.data(), dh.data(), dO, dqt.data(), dkt.data(),
                 nullptr, nullptr, nullptr, dw, nullptr, var);  // tensor-core variant: dw's intra part
    chunk_bwd<F>(d, ChunkBwdTerms::inter, scale, r, k, v, w, u, h.data(), dh.data(), dO, dqt.data(), dkt.data(), dr, dk,
                 dv, dw, dup.data(), var);
  }
  du_reduce(d, dup.data(), du);
}

// F names a type, which cannot be parenthesised: the check does not apply to this macro.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define LT_RWKV6_INSTANTIATE(F)                                                                                      \
  template void naive_forward<F>(const NaiveInputs<F>&, F*, F*);                                                     \
  template void naive_backward<F>(const NaiveInputs<F>&, const F*, const F*, const NaiveGrads<F>&);                  \
  template void chunk_state_scan<F>(const Dims&, const F*, const F*, const F*, const F*, F*, F*, Variant,            \
                                    const int32_t*);                                                                 \
  template void chunk_dstate_scan<F>(const Dims&, F, const F*, const F*, const F*, const F*, F*, F*, Variant,        \
                                     const int32_t*);                                                                \
  template void chunk_output<F>(const Dims&, F, const F*, const F*, const F*, const F*, const F*, const F*, F*,      \
                                Variant);                                                                            \
  template void chunk_bwd<F>(const Dims&, ChunkBwdTerms, F, const F*, const F*, const F*, const F*, const F*,        \
                             const F*, const F*, const F*, F*, F*, F*, F*, F*, F*, F*, Variant);                     \
  template void du_reduce<F>(const Dims&, const F*, F*);                                                             \
  template void chunk_forward_cpu<F>(const Dims&, F, const F*, const F*, const F*, const F*, const F*, const F*, F*, \
                                     F*, Variant, const int32_t*);                                                   \
  template void chunk_backward_cpu<F>(const Dims&, BwdImpl, F, const F*, const F*, const F*, const F*, const F*,     \
                                      const F*, const F*, const F*, F*, F*, F*, F*, F*, F*, Variant, const int32_t*);
// NOLINTEND(bugprone-macro-parentheses)

LT_RWKV6_INSTANTIATE(float)
LT_RWKV6_INSTANTIATE(double)
#undef LT_RWKV6_INSTANTIATE

const char* bwd_impl_name(BwdImpl impl) { return impl == BwdImpl::fallback ? "fallback" : "fused"; }

BwdImpl parse_bwd_impl(const std::string& name) {
  if (name == "fused") return BwdImpl::fused;
  if (name == "fallback") return BwdImpl::fallback;
  throw std::invalid_argument("rwkv6: unknown backward '" + name + "' (fused | fallback)");
}

}  // namespace lt::rwkv6
