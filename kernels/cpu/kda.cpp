// KDA on the CPU: the naive recurrence (ground truth, forward + BPTT backward). Math, shapes
// and layouts: kernels/kda.h. The CPU twins of the fused kernels: kernels/cpu/kda/twin.cpp.
//
// Accumulation: computes and accumulates in Real (double for the ground truth).
#include "kernels/kda.h"

#include "kernels/cpu/kda_gate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace lt::kda {

// ======================================================================================
// Naive recurrence
// ======================================================================================
namespace {

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

// Runs the recurrence of one sequence; if traj is non-null stores S_{t-1} for every t and
// the final state at index T ([T+1][D][D]).
template <class Real>
void seq_forward(const NaiveInputs<Real>& in, const SeqTokens<Real>& s, int64_t b, int64_t h, Real* o, Real* ht,
                 std::vector<Real>* traj) {
  const auto& dm = in.dims;
  const int D = dm.D;
  const int64_t T = dm.T, H = dm.H;
  const Real scale = mixer::resolved_scale(in.scale, D);
  std::vector<Real> S(static_cast<size_t>(D) * D, Real(0)), p(D), delta(D);
  if (in.h0) std::copy_n(in.h0 + (b * H + h) * D * D, D * D, S.begin());
  if (traj) traj->resize(static_cast<size_t>(T + 1) * D * D);
  for (int64_t t = 0; t < T; ++t) {
    if (traj) std::copy(S.begin(), S.end(), traj->begin() + t * D * D);  // S_{t-1} before a restart
    if (in.seg_start && in.seg_start[b * T + t]) std::fill(S.begin(), S.end(), Real(0));
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
  const Real scale = mixer::resolved_scale(in.scale, D);
  std::fill_n(gr.dA_log, H, Real(0));
  std::fill_n(gr.ddt_bias, H * D, Real(0));
  for_each_head(H, [&](int64_t h) {
    std::vector<Real> traj, dS(static_cast<size_t>(D) * D), Sa(static_cast<size_t>(D) * D);
    std::vector<Real> p(D), delta(D), ddelta(D), dp(D), dqh(D), dkh(D), dg(D);
    const std::vector<Real> zeros(static_cast<size_t>(D) * D, Real(0));  // the state at a document start
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
        const bool restart = in.seg_start && in.seg_start[b * T + t];
        const Real* Sp = restart ? zeros.data() : &traj[t * D * D];
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
        // a document starts at t: S_{t-1} was replaced by zero, nothing flows back past it
        if (restart) std::fill(dS.begin(), dS.end(), Real(0));
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
