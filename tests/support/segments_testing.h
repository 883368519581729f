// Packed-document test helpers shared by the CPU and CUDA tests of the mixers and the model:
// random segment starts and chunk resets, one RWKV6 mixer run with chunk resets against the
// naive recurrence, and one model step over packed rows or over their documents one by one.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/mixers/rwkv6.h"
#include "engine/mixers/segments.h"
#include "engine/model/model.h"
#include "tests/kernels/rwkv6_test_util.h"
#include "tests/support/model_testing.h"

namespace lt::test {

// [B, NT] chunk flags: every row but the last resets at random chunks and at its last chunk;
// row 0 also at chunk 0 (drops h0). Drawn from `seed`.
inline std::vector<int32_t> random_resets(int64_t B, int64_t NT, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> f(static_cast<size_t>(B * NT), 0);
  for (int64_t b = 0; b + 1 < B; ++b) {
    for (int64_t n = 0; n < NT; ++n) f[b * NT + n] = rng() % 3 == 0 ? 1 : 0;
    f[b * NT + NT - 1] = 1;
  }
  if (B > 1) f[0] = 1;
  return f;
}

// [B, T] token starts (any position): t = 0 in every other row, two adjacent starts, a start on
// the last token, the rest random (on and off chunk boundaries); the last row has none.
inline std::vector<uint8_t> random_starts(int64_t B, int64_t T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> f(static_cast<size_t>(B * T), 0);
  for (int64_t b = 0; b + 1 < B; ++b) {
    for (int64_t t = 0; t < T; ++t) f[b * T + t] = rng() % 23 == 0 ? 1 : 0;
    f[b * T] = b % 2 == 0 ? 1 : 0;
    f[b * T + T - 1] = 1;
    f[b * T + T / 3] = f[b * T + T / 3 + 1] = 1;
  }
  return f;
}

// The RWKV6 mixer on p's inputs (dtype dt on `dev`; u and states f32, f64 for f64) with the
// chunk resets `resets` ([B, NT] at cfg.chunk = p.d.C): relative errors of o, ht, dr, dk, dv,
// dw, du, dh0 against ref (the naive recurrence with p.seg_start set from the same resets).
inline std::array<double, 8> rwkv6_packed_errors(const rwkv6::test::Problem& p, const std::vector<int32_t>& resets,
                                                 DType dt, Device dev, mixers::Rwkv6Config cfg,
                                                 const rwkv6::test::Grads& ref) {
  using rwkv6::test::rel_err_l2;
  const rwkv6::Dims& d = p.d;
  const Shape tok{d.B, d.T, d.H, d.D}, st{d.B, d.H, d.D, d.D};
  const DType sdt = dt == DType::f64 ? DType::f64 : DType::f32;
  const mixers::Rwkv6Inputs in{
      Tensor::from_vector(p.r, tok, dt, dev),
      Tensor::from_vector(p.k, tok, dt, dev),
      Tensor::from_vector(p.v, tok, dt, dev),
      Tensor::from_vector(p.w, tok, dt, dev),
      Tensor::from_vector(p.u, {d.H, d.D}, sdt, dev),
      Tensor::from_vector(p.h0, st, sdt, dev),
      Tensor::from_vector(std::vector<double>(resets.begin(), resets.end()), {d.B, d.NT()}, DType::i32, dev)};
  cfg.chunk = static_cast<int>(d.C);
  cfg.scale = p.scale;
  cfg.output_final_state = true;
  auto out = mixers::rwkv6_forward(in, cfg);
  auto g = mixers::rwkv6_backward(std::move(out.saved), Tensor::from_vector(p.dO, tok, dt, dev),
                                  Tensor::from_vector(p.dht, st, sdt, dev));
  return {rel_err_l2(out.o.to_vector(), ref.o), rel_err_l2(out.ht.to_vector(), ref.ht),
          rel_err_l2(g.dr.to_vector(), ref.dr), rel_err_l2(g.dk.to_vector(), ref.dk),
          rel_err_l2(g.dv.to_vector(), ref.dv), rel_err_l2(g.dw.to_vector(), ref.dw),
          rel_err_l2(g.du.to_vector(), ref.du), rel_err_l2(g.dh0.to_vector(), ref.dh0)};
}

// p.seg_start as token starts at the chunks that `resets` flags.
inline void set_starts_from_resets(rwkv6::test::Problem& p, const std::vector<int32_t>& resets) {
  const rwkv6::Dims& d = p.d;
  p.seg_start.assign(static_cast<size_t>(d.B * d.T), 0);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t n = 0; n < d.NT(); ++n)
      if (resets[b * d.NT() + n]) p.seg_start[b * d.T + n * d.C] = 1;
}

// Rows of T tokens; the documents of row b start at starts[b] (0 first). The targets drop each
// document's last target (the next document's first token), as the loader does.
struct PackedBatch {
  int64_t B = 0, T = 0;
  std::vector<std::vector<int64_t>> starts;
  std::vector<double> tok, tgt;
  std::vector<uint8_t> flags;
  double inv = 0;
  PackedBatch(int64_t T_, std::vector<std::vector<int64_t>> starts_, int64_t vocab)
      : B(static_cast<int64_t>(starts_.size())), T(T_), starts(std::move(starts_)) {
    tok = random_ids(B, T, vocab, 11).to_vector();
    tgt = random_ids(B, T, vocab, 12).to_vector();
    flags.assign(static_cast<size_t>(B * T), 0);
    int64_t valid = B * T;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s : starts[b]) {
        flags[b * T + s] = 1;
        if (s > 0) tgt[b * T + s - 1] = -100, --valid;
      }
    inv = 1.0 / static_cast<double>(valid);
  }
};

struct StepResult {
  double loss = 0;
  std::vector<std::vector<double>> grads;  // per parameter spec
};

inline StepResult step_result(model::Model& m, const Tensor& loss) {
  StepResult r{loss.item(), {}};
  for (const model::ParamSpec& s : m.specs()) r.grads.push_back(m.grad(s.name).to_vector());
  return r;
}

// One step over the packed rows (documents restarting) on the model's device.
inline StepResult run_packed(model::Model& m, const PackedBatch& pk, DType ldt) {
  const Device dev = m.device();
  m.zero_grad();
  Tensor loss = Tensor::zeros({}, ldt, dev);
  const mixers::Segments seg(pk.flags, pk.B, pk.T, dev);
  m.forward_backward(Tensor::from_vector(pk.tok, {pk.B, pk.T}, DType::i32, dev),
                     Tensor::from_vector(pk.tgt, {pk.B, pk.T}, DType::i32, dev), pk.inv, loss, nullptr, &seg);
  return step_result(m, loss);
}

// The same step over the documents one by one (rows of one document, gradients accumulated).
inline StepResult run_documents(model::Model& m, const PackedBatch& pk, DType ldt) {
  const Device dev = m.device();
  m.zero_grad();
  Tensor loss = Tensor::zeros({}, ldt, dev);
  for (int64_t b = 0; b < pk.B; ++b)
    for (size_t i = 0; i < pk.starts[b].size(); ++i) {
      const int64_t t0 = pk.starts[b][i], t1 = i + 1 < pk.starts[b].size() ? pk.starts[b][i + 1] : pk.T;
      const std::vector<double> dt(pk.tok.begin() + b * pk.T + t0, pk.tok.begin() + b * pk.T + t1);
      const std::vector<double> dg(pk.tgt.begin() + b * pk.T + t0, pk.tgt.begin() + b * pk.T + t1);
      m.forward_backward(Tensor::from_vector(dt, {1, t1 - t0}, DType::i32, dev),
                         Tensor::from_vector(dg, {1, t1 - t0}, DType::i32, dev), pk.inv, loss);
    }
  return step_result(m, loss);
}

// Worst over parameters of max |x - ref| / max |ref|, CHECKing each against tol (and every
// reference gradient non-zero).
inline double worst_rel(const model::Model& m, const StepResult& x, const StepResult& ref, double tol) {
  double worst = 0;
  for (size_t a = 0; a < ref.grads.size(); ++a) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < ref.grads[a].size(); ++i) {
      diff = std::max(diff, std::fabs(x.grads[a][i] - ref.grads[a][i]));
      scale = std::max(scale, std::fabs(ref.grads[a][i]));
    }
    INFO(m.specs()[a].name << ": max diff " << diff << ", max |g| " << scale);
    CHECK(scale > 0);
    CHECK(diff <= tol * scale);
    worst = std::max(worst, scale > 0 ? diff / scale : 0.0);
  }
  return worst;
}

}  // namespace lt::test
