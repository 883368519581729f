// KDA on the CPU: the naive recurrence (ground truth, forward + BPTT backward) and the
// CPU twins of the fused CUDA kernels (the block programs of kernels/kda_blocks.h run on
// an emulated thread block). Math, shapes and layouts: kernels/kda.h.
//
// Accumulation: the naive path computes and accumulates in Real (double for the ground
// truth). The twins compute exactly like the kernels (fp32, same order per thread).
#include "kernels/kda.h"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/kda_blocks.h"

namespace lt::kda {

// ======================================================================================
// Naive recurrence
// ======================================================================================
namespace {

template <class Real>
Real sigmoid_r(Real x) {
  return x >= 0 ? Real(1) / (Real(1) + std::exp(-x)) : std::exp(x) / (Real(1) + std::exp(x));
}

// Gate value and its derivatives with respect to x = f + dt_bias and a = A_log.
template <class Real>
struct GateEval {
  Real g, dg_dx, dg_da;
};
template <class Real>
GateEval<Real> gate_eval(Real x, Real a, const Gate& gate) {
  const Real ea = std::exp(a);
  if (gate.use_lower_bound) {
    const Real lb = static_cast<Real>(gate.lower_bound);
    const Real z = ea * x;
    const Real s = sigmoid_r(z);
    const Real dg_dz = lb * s * (Real(1) - s);
    return {lb * s, dg_dz * ea, dg_dz * ea * x};
  }
  const Real sp = x > Real(20) ? x : std::log1p(std::exp(x));
  const Real dsp = x > Real(20) ? Real(1) : sigmoid_r(x);
  const Real g = -ea * sp;
  return {g, -ea * dsp, g};
}

template <class Real>
Real l2_rstd(const Real* x, int D) {
  Real ss = 0;
  for (int d = 0; d < D; ++d) ss += x[d] * x[d];
  return Real(1) / std::sqrt(ss + Real(1e-6));
}

// Per-token quantities of one (b, h) sequence, in Real.
template <class Real>
struct SeqTokens {
  std::vector<Real> qh, kh, rq, rk, g, dgdx, dgda, beta, v;  // qh,kh,g,..: [T][D]; rq,rk,beta: [T]
};

template <class Real>
SeqTokens<Real> seq_tokens(const NaiveInputs<Real>& in, int64_t b, int64_t h) {
  const auto& dm = in.dims;
  const int D = dm.D;
  const int64_t T = dm.T, H = dm.H;
  SeqTokens<Real> s;
  s.qh.resize(T * D);
  s.kh.resize(T * D);
  s.g.resize(T * D);
  s.dgdx.resize(T * D);
  s.dgda.resize(T * D);
  s.v.resize(T * D);
  s.rq.resize(T);
  s.rk.resize(T);
  s.beta.resize(T);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t row = ((b * T + t) * H + h) * D;
    const Real* q = in.q + row;
    const Real* k = in.k + row;
    s.rq[t] = l2_rstd(q, D);
    s.rk[t] = l2_rstd(k, D);
    s.beta[t] = sigmoid_r(in.b[(b * T + t) * H + h]);
    for (int d = 0; d < D; ++d) {
      s.qh[t * D + d] = q[d] * s.rq[t];
      s.kh[t * D + d] = k[d] * s.rk[t];
      s.v[t * D + d] = in.v[row + d];
      const Real x = in.f[row + d] + in.dt_bias[h * D + d];
      const GateEval<Real> ge = gate_eval(x, in.A_log[h], in.gate);
      s.g[t * D + d] = ge.g;
      s.dgdx[t * D + d] = ge.dg_dx;
      s.dgda[t * D + d] = ge.dg_da;
    }
  }
  return s;
}

template <class Real>
Real resolve_scale(Real scale, int D) {
  return scale != Real(0) ? scale : Real(1) / std::sqrt(static_cast<Real>(D));
}

// Runs the recurrence of one sequence; if traj is non-null stores S_{t-1} for every t and
// the final state at index T ([T+1][D][D]).
template <class Real>
void seq_forward(const NaiveInputs<Real>& in, const SeqTokens<Real>& s, int64_t b, int64_t h, Real* o, Real* ht,
                 std::vector<Real>* traj) {
  const auto& dm = in.dims;
  const int D = dm.D;
  const int64_t T = dm.T, H = dm.H;
  const Real scale = resolve_scale(in.scale, D);
  std::vector<Real> S(static_cast<size_t>(D) * D, Real(0)), p(D), delta(D);
  if (in.h0) std::copy_n(in.h0 + (b * H + h) * D * D, D * D, S.begin());
  if (traj) traj->resize(static_cast<size_t>(T + 1) * D * D);
  for (int64_t t = 0; t < T; ++t) {
    if (traj) std::copy(S.begin(), S.end(), traj->begin() + t * D * D);
    const Real* kh = &s.kh[t * D];
    const Real* qh = &s.qh[t * D];
    for (int i = 0; i < D; ++i) {
      const Real e = std::exp(s.g[t * D + i]);
      for (int j = 0; j < D; ++j) S[i * D + j] *= e;
    }
    std::fill(p.begin(), p.end(), Real(0));
    for (int i = 0; i < D; ++i)
      for (int j = 0; j < D; ++j) p[j] += S[i * D + j] * kh[i];
    for (int j = 0; j < D; ++j) delta[j] = s.beta[t] * (s.v[t * D + j] - p[j]);
    for (int i = 0; i < D; ++i)
      for (int j = 0; j < D; ++j) S[i * D + j] += kh[i] * delta[j];
    if (!o) continue;
    Real* ot = o + ((b * T + t) * H + h) * D;
    for (int j = 0; j < D; ++j) {
      Real acc = 0;
      for (int i = 0; i < D; ++i) acc += S[i * D + j] * qh[i];
      ot[j] = scale * acc;
    }
  }
  if (traj) std::copy(S.begin(), S.end(), traj->begin() + T * D * D);
  if (ht) std::copy(S.begin(), S.end(), ht + (b * H + h) * D * D);
}

// Heads are independent (every output, dA_log[h] and ddt_bias[h] included): one host
// thread per group of heads; each head's work is sequential, so results do not depend on
// the thread count.
template <class Fn>
void for_each_head(int64_t H, Fn fn) {
  const int64_t nthreads = std::min<int64_t>(H, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (int64_t t = 0; t < nthreads; ++t)
    threads.emplace_back([&, t] {
      for (int64_t h = t; h < H; h += nthreads) fn(h);
    });
  for (auto& th : threads) th.join();
}

}  // namespace

template <class Real>
void naive_forward(const NaiveInputs<Real>& in, Real* o, Real* ht) {
  for_each_head(in.dims.H, [&](int64_t h) {
    for (int64_t b = 0; b < in.dims.B; ++b) {
      SeqTokens<Real> s = seq_tokens(in, b, h);
      seq_forward<Real>(in, s, b, h, o, ht, nullptr);
    }
  });
}

template <class Real>
void naive_backward(const NaiveInputs<Real>& in, const Real* dO, const Real* dht, const NaiveGrads<Real>& gr) {
  const auto& dm = in.dims;
  const int D = dm.D;
  const int64_t T = dm.T, H = dm.H, B = dm.B;
  const Real scale = resolve_scale(in.scale, D);
  std::fill_n(gr.dA_log, H, Real(0));
  std::fill_n(gr.ddt_bias, H * D, Real(0));
  for_each_head(H, [&](int64_t h) {
    std::vector<Real> traj, dS(static_cast<size_t>(D) * D), Sa(static_cast<size_t>(D) * D);
    std::vector<Real> p(D), delta(D), ddelta(D), dp(D), dqh(D), dkh(D), dg(D);
    for (int64_t b = 0; b < B; ++b) {
      SeqTokens<Real> s = seq_tokens(in, b, h);
      seq_forward<Real>(in, s, b, h, nullptr, nullptr, &traj);
      if (dht) std::copy_n(dht + (b * H + h) * D * D, D * D, dS.begin());
      else std::fill(dS.begin(), dS.end(), Real(0));
      for (int64_t t = T - 1; t >= 0; --t) {
        const int64_t row = ((b * T + t) * H + h) * D;
        const Real* kh = &s.kh[t * D];
        const Real* qh = &s.qh[t * D];
        const Real* St = &traj[(t + 1) * D * D];
        const Real* Sp = &traj[t * D * D];
        const Real* dot = dO + row;
        const Real beta = s.beta[t];
        for (int i = 0; i < D; ++i) {
          const Real e = std::exp(s.g[t * D + i]);
          for (int j = 0; j < D; ++j) Sa[i * D + j] = e * Sp[i * D + j];
        }
        std::fill(p.begin(), p.end(), Real(0));
        for (int i = 0; i < D; ++i)
          for (int j = 0; j < D; ++j) p[j] += Sa[i * D + j] * kh[i];
        for (int j = 0; j < D; ++j) delta[j] = beta * (s.v[t * D + j] - p[j]);
        // o = scale S_t^T qh
        for (int i = 0; i < D; ++i) {
          Real acc = 0;
          for (int j = 0; j < D; ++j) {
            acc += St[i * D + j] * dot[j];
            dS[i * D + j] += scale * qh[i] * dot[j];
          }
          dqh[i] = scale * acc;
        }
        // S_t = Sa + kh delta^T
        std::fill(ddelta.begin(), ddelta.end(), Real(0));
        for (int i = 0; i < D; ++i) {
          Real acc = 0;
          for (int j = 0; j < D; ++j) {
            acc += dS[i * D + j] * delta[j];
            ddelta[j] += dS[i * D + j] * kh[i];
          }
          dkh[i] = acc;
        }
        Real dbeta = 0;
        for (int j = 0; j < D; ++j) {
          dbeta += ddelta[j] * (s.v[t * D + j] - p[j]);
          gr.dv[row + j] = beta * ddelta[j];
          dp[j] = -beta * ddelta[j];
        }
        // p = Sa^T kh;  Sa = e^g * S_{t-1}
        for (int i = 0; i < D; ++i) {
          Real acc_k = 0, acc_g = 0;
          const Real e = std::exp(s.g[t * D + i]);
          for (int j = 0; j < D; ++j) {
            acc_k += Sa[i * D + j] * dp[j];
            const Real dsa = dS[i * D + j] + kh[i] * dp[j];
            acc_g += Sa[i * D + j] * dsa;
            dS[i * D + j] = e * dsa;
          }
          dkh[i] += acc_k;
          dg[i] = acc_g;
        }
        // L2 norm, gate and beta backward.
        Real dotq = 0, dotk = 0;
        for (int d = 0; d < D; ++d) {
          dotq += dqh[d] * qh[d];
          dotk += dkh[d] * kh[d];
        }
        for (int d = 0; d < D; ++d) {
          gr.dq[row + d] = s.rq[t] * (dqh[d] - dotq * qh[d]);
          gr.dk[row + d] = s.rk[t] * (dkh[d] - dotk * kh[d]);
          const Real df = dg[d] * s.dgdx[t * D + d];
          gr.df[row + d] = df;
          gr.ddt_bias[h * D + d] += df;
          gr.dA_log[h] += dg[d] * s.dgda[t * D + d];
        }
        gr.db[(b * T + t) * H + h] = dbeta * beta * (Real(1) - beta);
      }
      if (gr.dh0) std::copy(dS.begin(), dS.end(), gr.dh0 + (b * H + h) * D * D);
    }
  });
}

template void naive_forward<double>(const NaiveInputs<double>&, double*, double*);
template void naive_forward<float>(const NaiveInputs<float>&, float*, float*);
template void naive_backward<double>(const NaiveInputs<double>&, const double*, const double*,
                                     const NaiveGrads<double>&);
template void naive_backward<float>(const NaiveInputs<float>&, const float*, const float*, const NaiveGrads<float>&);

}  // namespace lt::kda

// ======================================================================================
// Fused path: shared helpers and the CPU twins
// ======================================================================================
namespace lt::kda {

WorkspaceBytes workspace_bytes(const Dims& dm, DType dtype) {
  WorkspaceBytes w;
  w.tile = static_cast<size_t>(dm.B * dm.H * dm.Tp() * dm.D) * dtype_size(dtype);
  w.tile_f32 = static_cast<size_t>(dm.B * dm.H * dm.Tp() * dm.D) * sizeof(float);
  w.aqk = static_cast<size_t>(dm.B * dm.H * dm.Tp() * dm.C) * dtype_size(dtype);
  w.gamma = static_cast<size_t>(dm.B * dm.H * dm.NT() * dm.D) * sizeof(float);
  w.partials = static_cast<size_t>(dm.B * dm.NT() * dm.H * (dm.D + 1)) * sizeof(float);
  w.counters = static_cast<size_t>(dm.H + dm.B * dm.H) * sizeof(uint32_t);
  return w;
}

int inter_adjoint_split(int64_t bh, int sms) { return 16 * bh <= sms ? 4 : 1; }
int lean_scan_pick(int64_t bh, int sms, int split, int D, DType dtype) {
  if (split > 1) return 2;
  const bool lean = dtype != DType::f32 ? 8 * bh <= 3 * static_cast<int64_t>(sms)
                    : D == 64           ? 4 * bh <= sms
                                        : 2 * bh <= sms;
  return lean ? 2 : 1;
}

// Measured on the H200 (2026-12-02, kbench kda fwd+bwd at chunk 16 / 32 / 64, configs/
// bench-kda-chunks.json; figures in docs/BENCHMARKS.md, "KDA chunk table"):
//   bf16 D64     32 at every shape (B8 T512 0.608 ms against 0.648 at 16 and 0.895 at 64; B1
//                T16384 5.89 against 6.76 at 64): the intra adjoint's C^2 D products double
//                from 32 to 64, and 16 doubles the scan steps
//   bf16 D128    32 (B2 T16384 H16 22.30 ms against 24.61 at 64), except at B*H <= 8, where the
//                backward scan runs split over V and 64 is faster (B1 T32768 H8 25.24 against
//                25.78 at 32)
//   fp32 D64     16 (B8 T2048 2.57 ms against 2.65 at 32; T512 0.681 against 0.687)
//   fp32 D128    32 (B2 T4096 H16 7.13 ms against 7.47 at 16 and 7.63 at 64)
// and never longer than the sequence needs: T <= 16 takes 16, T <= 32 at most 32 (the rows
// past T of the one chunk are computed and thrown away).
int fused_chunk(int64_t bh, int64_t T, int D, DType dtype) {
  int c = 32;
  if (dtype == DType::f32 && D == 64) c = 16;
  else if (dtype != DType::f32 && D == 128 && bh <= 8) c = 64;
  if (T <= 16) return 16;
  if (T <= 32) return c < 32 ? c : 32;
  return c;
}

size_t trajectory_bytes(const Dims& dm) {
  return static_cast<size_t>(dm.B * dm.H * dm.NT()) * dm.D * dm.D * sizeof(float);
}

namespace {

void check_common(const FusedArgs& a) {
  const Dims& d = a.dims;
  auto fail = [](const std::string& what) { throw std::invalid_argument("kda fused: " + what); };
  if (d.B <= 0 || d.T <= 0 || d.H <= 0) fail("B, T, H must be positive");
  if (d.D != 64 && d.D != 128) fail("head dim D must be 64 or 128, got " + std::to_string(d.D));
  if (d.C != 16 && d.C != 32 && d.C != 64) fail("chunk must be 16, 32 or 64, got " + std::to_string(d.C));
  if (a.dtype != DType::f32 && a.dtype != DType::bf16)
    fail(std::string("dtype must be f32 or bf16, got ") + dtype_name(a.dtype));
  if (a.gate.use_lower_bound && !(a.gate.lower_bound < 0.0f)) fail("lower_bound must be < 0");
  if (!a.q || !a.k || !a.v || !a.f || !a.b || !a.A_log || !a.dt_bias) fail("missing input pointer");
  if (!a.h) fail("missing state trajectory h");
  if (a.scan_split != 0 && a.scan_split != 1 && a.scan_split != 2 && a.scan_split != 4)
    fail("scan_split must be 0, 1, 2 or 4, got " + std::to_string(a.scan_split));
  if (a.lean_scan != 0 && a.lean_scan != 1 && a.lean_scan != 2)
    fail("lean_scan must be 0, 1 or 2, got " + std::to_string(a.lean_scan));
  if (a.lean_scan == 1 && a.scan_split > 1) fail("a split scan is always lean (lean_scan 1 with scan_split > 1)");
}

}  // namespace

void check_fused_args(const FusedArgs& a) {
  check_common(a);
  if (!a.o) throw std::invalid_argument("kda fused: missing output o");
}

void check_fused_args(const FusedArgs& a, BackwardPart part) {
  check_common(a);
  if (!a.dO) throw std::invalid_argument("kda fused: missing backward input dO");
  if (part != BackwardPart::aqk_dO && (!a.dq || !a.dk || !a.dv || !a.df || !a.db || !a.dA_log || !a.ddt_bias))
    throw std::invalid_argument("kda fused: missing gradient pointer (dq, dk, dv, df, db, dA_log or ddt_bias)");
}

void check_workspace(const ForwardWorkspace& ws) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("kda fused: forward workspace " + what); };
  if (!ws.W || !ws.U || !ws.sQ || !ws.Kbar || !ws.Aqk || !ws.gamma)
    fail("saved tile missing (W, U, sQ, Kbar, Aqk or gamma)");
  if (!ws.Qp || !ws.Ob) fail("forward-only tile missing (Qp or Ob)");
}

void check_workspace(const BackwardWorkspace& ws, BackwardPart part) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("kda fused: backward workspace " + what); };
  if (!ws.AqkT_dO || !ws.counters) fail("AqkT_dO or counters missing");
  if (part != BackwardPart::adjoints && !ws.Aqk) fail("Aqk (A_qk, read by the aqk_dO launch) missing");
  if (part != BackwardPart::adjoints && (!ws.W || !ws.U || !ws.Delta))
    fail("W, U or Delta (read and written by the aqk_dO launch of the lean scan) missing");
  if (part != BackwardPart::aqk_dO && (!ws.W || !ws.U || !ws.sQ || !ws.Kbar || !ws.gamma))
    fail("saved tile missing (W, U, sQ, Kbar or gamma)");
  if (part != BackwardPart::aqk_dO &&
      (!ws.Xw || !ws.Delta || !ws.Xq || !ws.Xk || !ws.dDelta || !ws.dgamma_s || !ws.partials))
    fail("adjoint tile or scratch missing (Xw, Delta, Xq, Xk, dDelta, dgamma_s or partials)");
}

namespace {

// An emulated CUDA thread block: NTHR host threads run the same block program;
// sync() is a std::barrier over all of them, warp_sum() exchanges through a per-warp
// buffer between two per-warp barriers (every lane sums the 32 values in lane order).
struct WarpExchange {
  static constexpr int kSlot = 10;  // floats per lane: mma a[4], b[2], c[4]
  explicit WarpExchange(int nwarps) : vals(static_cast<size_t>(nwarps) * 32 * kSlot) {
    for (int w = 0; w < nwarps; ++w) bars.push_back(std::make_unique<std::barrier<>>(32));
  }
  std::vector<float> vals;
  std::vector<std::unique_ptr<std::barrier<>>> bars;
};

class EmuBlock {
 public:
  EmuBlock(int tid, std::barrier<>* bar, WarpExchange* wx) : tid_(tid), bar_(bar), wx_(wx) {}
  // A block of a cluster: cluster_bar spans all the cluster's threads; smem_bases[r] is the
  // shared memory of the cluster's block r (this block is `rank`).
  EmuBlock(int tid, std::barrier<>* bar, WarpExchange* wx, std::barrier<>* cluster_bar, float* const* smem_bases,
           int rank)
      : tid_(tid), bar_(bar), wx_(wx), cluster_bar_(cluster_bar), smem_bases_(smem_bases), rank_(rank) {}
  int tid() const { return tid_; }
  void sync() { bar_->arrive_and_wait(); }
  void cluster_sync() { cluster_bar_->arrive_and_wait(); }
  float* peer(float* p, int rank) { return smem_bases_[rank] + (p - smem_bases_[rank_]); }
  float warp_sum(float v) {
    const int w = tid_ / 32;
    float* x = &wx_->vals[static_cast<size_t>(w) * 32 * WarpExchange::kSlot];
    x[(tid_ % 32) * WarpExchange::kSlot] = v;
    wx_->bars[w]->arrive_and_wait();
    float s = 0.0f;
    for (int l = 0; l < 32; ++l) s += x[l * WarpExchange::kSlot];
    wx_->bars[w]->arrive_and_wait();
    return s;
  }
  // __shfl_xor_sync over the full warp: every lane gets the value of lane ^ mask.
  float shfl_xor(float v, int mask) {
    const int w = tid_ / 32, lane = tid_ % 32;
    float* x = &wx_->vals[static_cast<size_t>(w) * 32 * WarpExchange::kSlot];
    x[lane * WarpExchange::kSlot] = v;
    wx_->bars[w]->arrive_and_wait();
    const float got = x[(lane ^ mask) * WarpExchange::kSlot];
    wx_->bars[w]->arrive_and_wait();
    return got;
  }
  // mma.sync.m16n8k8 tf32 of the warp: every lane deposits its fragments, then computes
  // its own four accumulator elements from the gathered A (16x8) and B (8x8).
  void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    const int w = tid_ / 32, lane = tid_ % 32;
    constexpr int S = WarpExchange::kSlot;
    float* x = &wx_->vals[static_cast<size_t>(w) * 32 * S];
    // The tensor core reads the TF32 part of each operand: the low 13 bits are ignored.
    constexpr uint32_t kTf32 = 0xffffe000u;
    for (int i = 0; i < 4; ++i) x[lane * S + i] = bits_float(a[i] & kTf32);
    x[lane * S + 4] = bits_float(b[0] & kTf32);
    x[lane * S + 5] = bits_float(b[1] & kTf32);
    wx_->bars[w]->arrive_and_wait();
    float A[16][8], Bm[8][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      A[g][t] = x[l * S + 0];
      A[g + 8][t] = x[l * S + 1];
      A[g][t + 4] = x[l * S + 2];
      A[g + 8][t + 4] = x[l * S + 3];
      Bm[t][g] = x[l * S + 4];
      Bm[t + 4][g] = x[l * S + 5];
    }
    wx_->bars[w]->arrive_and_wait();
    const int g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; ++e) {
      const int r = g + ((e & 2) ? 8 : 0), c = 2 * t + (e & 1);
      float s = 0.0f;
      for (int k = 0; k < 8; ++k) s += A[r][k] * Bm[k][c];
      d[e] += s;
    }
  }
  void fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
  uint32_t arrive(uint32_t* counter) { return std::atomic_ref<uint32_t>(*counter).fetch_add(1); }
  void acquire() { std::atomic_thread_fence(std::memory_order_seq_cst); }
  float load_cg(const float* p) { return *p; }
  // Scan progress: the twin runs the scan's blocks before the intra adjoint's, so a wait that
  // finds the count short is a bug in the count, not a race.
  void publish(uint32_t* counter) { std::atomic_ref<uint32_t>(*counter).fetch_add(1, std::memory_order_release); }
  void wait_progress(const uint32_t* counter, uint32_t target) {
    const uint32_t v = std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(counter)).load(std::memory_order_acquire);
    if (v < target)
      throw std::logic_error("kda twin: scan progress " + std::to_string(v) + " short of " + std::to_string(target));
  }
  void allow_dependents() {}  // grids run one after the other
  void wait_prior_grid() {}
  void prefetch_l2(const void*) {}  // a cache hint: nothing to emulate
  void copy16_async(float* dst, const float* src) { std::memcpy(dst, src, 4 * sizeof(float)); }  // lands at once
  void wait_copies() {}

 private:
  int tid_;
  std::barrier<>* bar_;
  WarpExchange* wx_;
  std::barrier<>* cluster_bar_ = nullptr;
  float* const* smem_bases_ = nullptr;
  int rank_ = 0;
};

// Runs body(blk, block_index, smem) for every block of a 1-D grid, blocks one after the
// other. Shared memory is refilled with NaN before each block, so a read of a shared
// location the block did not write first poisons its results.
template <class Body>
void emulate_grid(int64_t grid, int nthr, int smem_floats, Body body) {
  std::vector<float> smem(static_cast<size_t>(smem_floats));
  std::barrier<> bar(nthr);
  WarpExchange wx(nthr / 32);
  std::vector<std::thread> threads;
  threads.reserve(nthr);
  for (int t = 0; t < nthr; ++t)
    threads.emplace_back([&, t] {
      EmuBlock blk(t, &bar, &wx);
      for (int64_t g = 0; g < grid; ++g) {
        if (t == 0) std::fill(smem.begin(), smem.end(), std::numeric_limits<float>::quiet_NaN());
        bar.arrive_and_wait();
        body(blk, g, smem.data());
        bar.arrive_and_wait();
      }
    });
  for (auto& th : threads) th.join();
}

// As emulate_grid for a grid of clusters of nv blocks (block g = cluster * nv + rank): the
// blocks of one cluster run concurrently (nv * nthr host threads), each with its own shared
// memory (NaN-filled before each cluster), block barrier and warps; clusters one after the
// other. body(blk, cluster, rank, smem).
template <class Body>
void emulate_cluster_grid(int64_t clusters, int nv, int nthr, int smem_floats, Body body) {
  std::vector<std::vector<float>> smem(static_cast<size_t>(nv), std::vector<float>(static_cast<size_t>(smem_floats)));
  std::vector<float*> bases;
  std::vector<std::unique_ptr<std::barrier<>>> bars;
  std::vector<std::unique_ptr<WarpExchange>> wxs;
  for (int r = 0; r < nv; ++r) {
    bases.push_back(smem[r].data());
    bars.push_back(std::make_unique<std::barrier<>>(nthr));
    wxs.push_back(std::make_unique<WarpExchange>(nthr / 32));
  }
  std::barrier<> cluster_bar(nv * nthr);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(nv) * nthr);
  for (int r = 0; r < nv; ++r)
    for (int t = 0; t < nthr; ++t)
      threads.emplace_back([&, r, t] {
        EmuBlock blk(t, bars[r].get(), wxs[r].get(), &cluster_bar, bases.data(), r);
        for (int64_t g = 0; g < clusters; ++g) {
          if (t == 0) std::fill(smem[r].begin(), smem[r].end(), std::numeric_limits<float>::quiet_NaN());
          cluster_bar.arrive_and_wait();
          body(blk, g, r, bases[r]);
          cluster_bar.arrive_and_wait();
        }
      });
  for (auto& th : threads) th.join();
}

template <class G, class T, bool kTC>
void twin_forward(const FusedArgs& a, const ForwardWorkspace& ws) {
  const int64_t NT = a.dims.NT(), BH = a.dims.B * a.dims.H;
  emulate_grid(NT * BH, G::NTHR, G::kIntraFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
    blocks::intra_program<G, T, kTC>(a, ws, blk, g / NT, g % NT, sm);
  });
  emulate_grid(G::NV * BH, G::NTHR_I, G::kInterFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
    blocks::inter_program<G, T, kTC>(a, ws, blk, g / G::NV, static_cast<int>(g % G::NV), sm);
  });
}

template <class G, class T, bool kTC>
void twin_backward(const FusedArgs& a, const BackwardWorkspace& ws, BackwardPart part) {
  const int64_t NT = a.dims.NT(), BH = a.dims.B * a.dims.H;
  if (part != BackwardPart::adjoints)
    emulate_grid(NT * BH, G::NTHR, G::kAqkFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
      blocks::aqk_dO_program<G, T, kTC>(a, ws, blk, g / NT, g % NT, sm);
    });
  if (part == BackwardPart::aqk_dO) return;
  auto split = [&]<int NV>() {
    using SC = blocks::SplitCfg<G, NV>;
    emulate_cluster_grid(BH, NV, SC::NTHR, SC::kFloats, [&](EmuBlock& blk, int64_t g, int rank, float* sm) {
      blocks::inter_adjoint_split_program<G, T, kTC, NV>(a, ws, blk, g, rank, sm);
    });
  };
  if (a.scan_split == 4) split.template operator()<4>();
  else if (a.scan_split == 2) split.template operator()<2>();
  else if (a.lean_scan == 2)
    emulate_grid(BH, G::NTHR_A, G::kAdjFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
      blocks::inter_adjoint_program<G, T, kTC, true>(a, ws, blk, g, sm);
    });
  else
    emulate_grid(BH, G::NTHR_A, G::kAdjFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
      blocks::inter_adjoint_program<G, T, kTC, false>(a, ws, blk, g, sm);
    });
  using GA = typename G::Adj;
  emulate_grid(NT * BH, GA::NTHR, GA::kIntraAdjFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
    int64_t bh, n;
    blocks::intra_adjoint_chunk(g, NT, BH, bh, n);
    if (a.lean_scan == 2) blocks::intra_adjoint_program<GA, T, kTC, true>(a, ws, blk, bh, n, sm);
    else blocks::intra_adjoint_program<GA, T, kTC, false>(a, ws, blk, bh, n, sm);
  });
}

}  // namespace

void fused_forward_cpu(const FusedArgs& a, const ForwardWorkspace& ws) {
  check_fused_args(a);
  check_workspace(ws);
  blocks::dispatch_config(a.dims, a.dtype, [&]<class G, class T>() {
    if (a.tensor_cores) twin_forward<G, T, true>(a, ws);
    else twin_forward<G, T, false>(a, ws);
  });
}

void fused_backward_cpu(const FusedArgs& args, const BackwardWorkspace& ws, BackwardPart part) {
  check_fused_args(args, part);
  check_workspace(ws, part);
  FusedArgs a = args;  // lean_scan resolved: 0 is 1 on the CPU, and a split scan is lean
  if (a.scan_split > 1) a.lean_scan = 2;
  else if (a.lean_scan == 0) a.lean_scan = 1;
  blocks::dispatch_config(a.dims, a.dtype, [&]<class G, class T>() {
    if (a.tensor_cores) twin_backward<G, T, true>(a, ws, part);
    else twin_backward<G, T, false>(a, ws, part);
  });
}

}  // namespace lt::kda
