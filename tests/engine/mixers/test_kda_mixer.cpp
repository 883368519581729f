// The KDA mixer's Tensor API (engine/mixers/kda.h) on the CPU: the ops path against the
// naive recurrence, the three paths against each other, and the one-backward rule of a fused
// saved state. Inputs are fresh random draws each run (seed printed; LINTRAIN_TEST_SEED=<n>
// replays one).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/mixers/kda.h"
#include "tests/support/kda_testing.h"

using namespace lt;
using namespace lt::kda;
using namespace lt::kda::testing;

TEST_CASE("KDA ops path (CPU) matches the naive recurrence", "[kda][ops]") {
  const uint64_t seed = test_seed() + 3;
  struct Row {
    Dims d;
    bool h0, dht, lb;
    DType dt;
    double tol;
  };
  const std::vector<Row> rows = {
      {{2, 37, 2, 16, 16}, true, true, false, DType::f64, 1e-10},  // f64: the chunk algorithm itself
      {{1, 45, 2, 8, 8}, false, true, true, DType::f64, 1e-10},    // lower-bound gate, C = 8
      {{2, 50, 1, 32, 32}, true, false, false, DType::f64, 1e-10},
      {{2, 37, 2, 16, 16}, true, true, false, DType::f32, 1e-5},
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const Case c = make_case(r.d, r.h0, r.dht, r.lb, r.dt);
    const Data x = make_data(c, seed + i);
    const Result ref = run_naive(c, x);
    const Result got = run_mixer(c, to_tensors(c, x, c.dtype), mixers::KdaPath::ops);
    const ErrReport e = compare(got, ref, false, true, c.h0);
    // f32 rows: the adaptive gate (kda_testing.h) against what naive f32 itself costs
    const ErrReport e32 = c.dtype == DType::f64 ? ErrReport{} : compare(run_naive_f32(c, x), ref, false, true, c.h0);
    const Gated gt = gate_errors(e, e32, rows[i].tol);
    std::printf("[kda] ops (CPU) vs naive %-34s worst %.2e, %.3f of allowed:%s%s\n", c.name().c_str(), e.worst(),
                gt.worst_ratio, e.str().c_str(), gt.adapted.c_str());
    INFO(c.name() << " seed " << seed + i << e.str() << gt.adapted << replay_hint());
    CHECK(gt.pass);
  }
}

TEST_CASE("KDA Tensor API: fused (CPU twins) and naive paths agree with ops", "[kda][ops]") {
  const uint64_t seed = test_seed() + 4;
  Case c;
  c.dims = {1, 40, 2, 64, 16};
  c.h0 = true;
  c.dht = true;
  const Data x = make_data(c, seed);
  const TensorCase t = to_tensors(c, x, DType::f32);
  const Result ops_r = run_mixer(c, t, mixers::KdaPath::ops);
  const Result fused_r = run_mixer(c, t, mixers::KdaPath::fused);
  const Result naive_r = run_mixer(c, t, mixers::KdaPath::naive);
  const ErrReport ef = compare(fused_r, ops_r, false, true, true);
  const ErrReport en = compare(naive_r, ops_r, false, true, true);
  const ErrReport e32 = compare(run_naive_f32(c, x), ops_r, false, true, true);  // fp32's own cost
  const Gated gf = gate_errors(ef, e32, 1e-5), gn = gate_errors(en, e32, 1e-5);
  std::printf("[kda] tensor API fused(twin) vs ops %s worst %.2e, %.3f of allowed:%s%s\n", c.name().c_str(), ef.worst(),
              gf.worst_ratio, ef.str().c_str(), gf.adapted.c_str());
  std::printf("[kda] tensor API naive vs ops %s worst %.2e, %.3f of allowed:%s%s\n", c.name().c_str(), en.worst(),
              gn.worst_ratio, en.str().c_str(), gn.adapted.c_str());
  INFO("seed " << seed << replay_hint());
  CHECK(gf.pass);
  CHECK(gn.pass);
}

TEST_CASE("KDA Tensor API: a fused saved state serves one backward, a second one throws", "[kda]") {
  // The fused backward rewrites the forward's saved tiles in place (kernels/kda.h): a second
  // backward on the same saved state must fail loudly, not return wrong gradients.
  Case c;
  c.dims = {1, 20, 1, 64, 16};
  const Data x = make_data(c, test_seed() + 5);
  const TensorCase t = to_tensors(c, x, DType::f32);
  mixers::KdaConfig cfg;
  cfg.chunk = c.dims.C;
  cfg.path = mixers::KdaPath::fused;
  auto out = mixers::kda_forward({t.q, t.k, t.v, t.f, t.b, t.A_log, t.dt_bias, t.h0, Tensor()}, cfg);
  auto saved = out.saved;  // a second reference, as a careless caller would keep
  const mixers::KdaGrads g1 = mixers::kda_backward(saved, t.dO);
  const std::vector<double> dq1 = g1.dq.to_vector();
  bool finite = true;
  for (double v : dq1) finite = finite && std::isfinite(v);
  CHECK(finite);
  try {
    (void)mixers::kda_backward(saved, t.dO);
    FAIL("second backward on a consumed saved state did not throw");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK(msg.find("consumed") != std::string::npos);
  }
}

TEST_CASE("KDA scan form pick: a split scan is lean, and lean gives way to full as B*H grows", "[kda]") {
  // The bounds (kernels/kda.h lean_scan_pick) are a measurement; what holds for every entry:
  // the form is full or lean, a split scan is always lean, and for a fixed SM count, head dim and
  // dtype there is one boundary (lean below it, full above), with lean on at least one SM's
  // worth of heads (B*H = 1) and full once every SM has a head.
  for (DType dt : {DType::f32, DType::bf16})
    for (int D : {64, 128})
      for (int sms : {8, 78, 132, 144}) {
        INFO("D " << D << " " << dtype_name(dt) << " sms " << sms);
        CHECK(lean_scan_pick(1, sms, 1, D, dt) == LeanScan::lean);
        CHECK(lean_scan_pick(sms, sms, 1, D, dt) == LeanScan::full);
        LeanScan prev = LeanScan::lean;
        for (int64_t bh = 1; bh <= 4 * sms; ++bh) {
          const LeanScan form = lean_scan_pick(bh, sms, 1, D, dt);
          CHECK((form == LeanScan::full || form == LeanScan::lean));
          CHECK((form == prev || prev == LeanScan::lean));  // lean, then full: one boundary
          prev = form;
          CHECK(lean_scan_pick(bh, sms, 2, D, dt) == LeanScan::lean);
          CHECK(lean_scan_pick(bh, sms, 4, D, dt) == LeanScan::lean);
        }
      }
}

TEST_CASE("KDA scan split pick: 4 while the split blocks leave SMs idle, then 1, never 2", "[kda]") {
  // The bounds (kernels/kda.h inter_adjoint_split) are a measurement; what holds for every entry:
  // the split is 1 or 4, there is one boundary (4 below it, 1 above), a single sequence splits on
  // a full-size GPU, and the split blocks never outnumber the SMs.
  for (DType dt : {DType::f32, DType::bf16})
    for (int D : {64, 128})
      for (int sms : {8, 78, 132, 144}) {
        INFO("D " << D << " " << dtype_name(dt) << " sms " << sms);
        if (sms >= 16) CHECK(inter_adjoint_split(1, sms, D, dt) == 4);
        int prev = 4;
        for (int64_t bh = 1; bh <= 2 * sms; ++bh) {
          const int split = inter_adjoint_split(bh, sms, D, dt);
          CHECK((split == 1 || split == 4));
          CHECK((split == prev || prev == 4));  // 4, then 1: one boundary
          if (split == 4) CHECK(4 * bh <= sms);
          prev = split;
        }
      }
  // bf16 D128 splits up to 16 sequences on 132 SMs, where D64 and f32 stop at 8 (the figures:
  // docs/notes-kda.md, "2026-12-06 (evening): the sweep against fla")
  CHECK(inter_adjoint_split(16, 132, 128, DType::bf16) == 4);
  CHECK(inter_adjoint_split(17, 132, 128, DType::bf16) == 1);
  CHECK(inter_adjoint_split(16, 132, 64, DType::bf16) == 1);
  CHECK(inter_adjoint_split(8, 132, 64, DType::bf16) == 4);
  CHECK(inter_adjoint_split(16, 132, 128, DType::f32) == 1);
}

TEST_CASE("KDA two-level forward scan pick: bf16 while few sequences, from NT 64, groups of 8..64, args it accepts",
          "[kda]") {
  // What holds for every entry: one level (NT) or a group of 8..64 chunks, at least 4 groups a
  // sequence below NT 128 and 8 up to NT 1024 (so the group grows with NT); one boundary in B*H
  // and one in NT; f32 always one level (not measured).
  for (int D : {64, 128})
    for (int sms : {8, 78, 132}) {
      bool two_seen_below = false;
      for (int64_t nt : {1, 2, 16, 32, 63, 64, 100, 128, 256, 512, 1024, 4096}) {
        bool one_level_seen = false, two_seen = false;
        for (int64_t bh = 1; bh <= 64; ++bh) {
          const int g = fwd_group_pick(bh, nt, sms, D, DType::bf16);
          INFO("D " << D << " sms " << sms << " nt " << nt << " bh " << bh << " -> " << g);
          const bool two = g < nt;
          CHECK((!two || (D == 64 ? 8 : 16) * bh <= sms));
          CHECK((!two || nt >= 64));
          CHECK((two || g == nt));
          if (two) {
            CHECK(g >= 8);
            CHECK(g <= 64);
            CHECK(nt / g >= (nt < 128 ? 4 : nt <= 1024 ? 8 : 2));
            Dims dm{bh, nt * 32, 1, D, 32};
            FusedArgs a;
            a.dims = dm;
            a.fwd_group = g;
            CHECK(two_level_forward(a));
          }
          CHECK((!one_level_seen || !two));  // two-level, then one level: one boundary
          one_level_seen = one_level_seen || !two;
          two_seen = two_seen || two;
          CHECK(fwd_group_pick(bh, nt, sms, D, DType::f32) == nt);
        }
        CHECK((!two_seen_below || two_seen));  // a longer sequence never turns it off
        two_seen_below = two_seen_below || two_seen;
      }
    }
  // the measured points (H100, docs/notes-kda.md, "2026-12-07 (late): the two-level forward scan, measured")
  CHECK(fwd_group_pick(4, 64, 132, 64, DType::bf16) == 16);
  CHECK(fwd_group_pick(8, 64, 132, 128, DType::bf16) == 8);
  CHECK(fwd_group_pick(16, 64, 132, 64, DType::bf16) == 8);
  CHECK(fwd_group_pick(4, 128, 132, 128, DType::bf16) == 16);
  CHECK(fwd_group_pick(4, 256, 132, 128, DType::bf16) == 16);
  CHECK(fwd_group_pick(4, 512, 132, 128, DType::bf16) == 32);
  CHECK(fwd_group_pick(8, 1024, 132, 128, DType::bf16) == 64);
  CHECK(fwd_group_pick(16, 256, 132, 128, DType::bf16) == 256);
  CHECK(fwd_group_pick(32, 256, 132, 64, DType::bf16) == 256);
  CHECK(fwd_group_pick(4, 32, 132, 64, DType::bf16) == 32);
}

TEST_CASE("KDA two-level scan first level pick: affine at bf16 D64 with few sequences, serial elsewhere", "[kda]") {
  for (int D : {64, 128})
    for (int sms : {8, 78, 132})
      for (int64_t nt : {1, 64, 255, 256, 1024})
        for (int64_t bh = 1; bh <= 64; ++bh) {
          INFO("D " << D << " sms " << sms << " nt " << nt << " bh " << bh);
          const bool affine = scan_first_pick(bh, nt, sms, D, DType::bf16) == ScanFirst::affine;
          CHECK((!affine || (D == 64 && 16 * bh <= sms)));  // few sequences, D64 only
          CHECK((!affine || 32 * bh <= sms || nt >= 256));  // more of them only on long sequences
          CHECK((affine || D != 64 || 32 * bh > sms));      // the fewest always
          CHECK((!affine || scan_first_pick(bh, 2 * nt, sms, D, DType::bf16) == ScanFirst::affine));  // longer: still
          CHECK(scan_first_pick(bh, nt, sms, D, DType::f32) == ScanFirst::serial);
        }
  // the measured points (H100, docs/notes-kda.md, "2026-12-07 (late): the affine first level")
  CHECK(scan_first_pick(4, 64, 132, 64, DType::bf16) == ScanFirst::affine);    // B1 T2048 H4: -5 %
  CHECK(scan_first_pick(4, 256, 132, 64, DType::bf16) == ScanFirst::affine);   // B1 T8192 H4: -13 %
  CHECK(scan_first_pick(8, 256, 132, 64, DType::bf16) == ScanFirst::affine);   // B2 T8192 H4: -5 %
  CHECK(scan_first_pick(8, 64, 132, 64, DType::bf16) == ScanFirst::serial);    // B2 T2048 H4: +7 % affine
  CHECK(scan_first_pick(4, 256, 132, 128, DType::bf16) == ScanFirst::serial);  // B1 T8192 H4 D128: +7 % affine
  // its groups hold three states: bf16 D64 C32 at B*H 4 needs 3 chunks, so 4 from NT 32
  CHECK(scan_group_pick(4, 64, 32, 132, 64, DType::bf16) == 4);
  CHECK(scan_group_pick(4, 32, 32, 132, 64, DType::bf16) == 4);
  CHECK(scan_group_pick(8, 32, 32, 132, 64, DType::bf16) == 2);
}

TEST_CASE("KDA two-level scan pick: bf16 while 8 B*H <= SMs, groups of NT / 16 in [2, 8], args it accepts", "[kda]") {
  // What holds for every entry: one level (NT) or a group of 2..8 chunks (D128: up to 32, at
  // least NT B*H / 64; more only where a boundary state needs the room) below NT; one boundary
  // in B*H; the group the argument checks accept; f32 always one level (not measured).
  for (int D : {64, 128})
    for (int C : {16, 32, 64})
      for (int sms : {8, 78, 132})
        for (int64_t nt : {1, 2, 3, 16, 32, 64, 128, 512}) {
          bool one_level_seen = false;
          for (int64_t bh = 1; bh <= 64; ++bh) {
            const int g = scan_group_pick(bh, nt, C, sms, D, DType::bf16);
            INFO("D " << D << " C " << C << " sms " << sms << " nt " << nt << " bh " << bh << " -> " << g);
            const bool two = g < nt;
            CHECK((!two || (D == 64 ? 8 : 16) * bh <= sms));
            CHECK((two || g == nt));
            if (two) {  // the boundary state fits, and the affine first level's two more where it is picked
              // and fits (resolve_scan_first_cuda takes serial where they do not)
              const bool aff = scan_first_pick(bh, nt, sms, D, DType::bf16) == ScanFirst::affine &&
                               scan_states_fit(D, C, g, DType::bf16, ScanFirst::affine);
              const int st = aff ? 3 : 1;
              CHECK(g >= 2);
              CHECK(st * 2 * D <= 4 * g * C);
              CHECK((g <= (D == 128 ? 32 : 8) || st * 2 * D > 4 * (g / 2) * C));
              if (D == 128) CHECK(g >= std::min<int64_t>(nt * bh / 64, 32));
            }
            CHECK((!one_level_seen || !two));  // two-level, then one level: one boundary
            one_level_seen = one_level_seen || !two;
            CHECK(scan_group_pick(bh, nt, C, sms, D, DType::f32) == nt);
          }
        }
  // the measured points (docs/notes-kda.md, "2026-12-06 (night): the two-level backward scan";
  // D128: "2026-12-07: the row-ownership chunk programs at D = 128")
  CHECK(scan_group_pick(4, 32, 64, 132, 64, DType::bf16) == 2);
  CHECK(scan_group_pick(4, 128, 64, 132, 64, DType::bf16) == 8);
  CHECK(scan_group_pick(16, 256, 32, 132, 64, DType::bf16) == 8);
  // D128 (H100, "2026-12-07 (evening): the D128 backward scan's groups")
  CHECK(scan_group_pick(4, 64, 32, 132, 128, DType::bf16) == 4);     // B1 T2048 H4: 8 is +2 %
  CHECK(scan_group_pick(8, 64, 32, 132, 128, DType::bf16) == 8);     // B2 T2048 H4: -4 % against 4
  CHECK(scan_group_pick(4, 256, 32, 132, 128, DType::bf16) == 16);   // B1 T8192 H4: -6 % against 8
  CHECK(scan_group_pick(8, 1024, 32, 132, 128, DType::bf16) == 32);  // B1 T32768 H8: -3 % against 8
  CHECK(scan_group_pick(8, 512, 32, 132, 128, DType::bf16) == 32);
  CHECK(scan_group_pick(16, 256, 32, 132, 128, DType::bf16) == 256);
  CHECK(scan_group_pick(17, 256, 32, 132, 64, DType::bf16) == 256);
  CHECK(scan_group_pick(96, 16, 32, 132, 64, DType::bf16) == 16);
}

TEST_CASE("KDA Tensor API: chunk 0 runs the chunk the shape's table names", "[kda]") {
  // The table (kernels/kda.h fused_chunk) is a measurement; what holds for every entry: a chunk
  // the fused path takes, never longer than the sequence needs, and an explicit chunk wins.
  for (DType dt : {DType::f32, DType::bf16})
    for (int D : {64, 128})
      for (int64_t bh : {1, 8, 9, 96, 384})
        for (int64_t T : {1, 15, 16, 17, 32, 33, 64, 65, 512, 16384}) {
          const int c = fused_chunk(bh, T, D, dt);
          INFO("bh " << bh << " T " << T << " D " << D << " " << dtype_name(dt) << " -> " << c);
          CHECK((c == 16 || c == 32 || c == 64));
          if (T <= 16) CHECK(c == 16);
          if (T <= 32) CHECK(c <= 32);
        }
  mixers::KdaConfig cfg;
  CHECK(cfg.chunk == 0);  // auto by default
  const Shape q{2, 512, 12, 64};
  cfg.path = mixers::KdaPath::fused;
  CHECK(mixers::kda_chunk(cfg, q, DType::bf16) == fused_chunk(24, 512, 64, DType::bf16));
  // the measured points (docs/notes-kda.md, "2026-12-06 (night): the two-level backward scan";
  // D128: "2026-12-07: the row-ownership chunk programs at D = 128")
  CHECK(fused_chunk(4, 2048, 64, DType::bf16) == 32);
  CHECK(fused_chunk(8, 8192, 64, DType::bf16) == 32);
  CHECK(fused_chunk(4, 8192, 128, DType::bf16) == 32);
  CHECK(fused_chunk(8, 32768, 128, DType::bf16) == 32);
  cfg.path = mixers::KdaPath::ops;
  CHECK(mixers::kda_chunk(cfg, q, DType::bf16) == 64);
  cfg.chunk = 16;
  CHECK(mixers::kda_chunk(cfg, q, DType::bf16) == 16);

  // The forward and backward at chunk 0 are the explicit run at the resolved chunk, bit for bit
  // (fused path on the CPU twins).
  Case c;
  c.dims = {1, 40, 2, 64, 0};
  c.h0 = true;
  c.dht = true;
  cfg.chunk = 0;
  cfg.path = mixers::KdaPath::fused;
  const int resolved = mixers::kda_chunk(cfg, {1, 40, 2, 64}, DType::f32);
  Case explicit_c = c;
  explicit_c.dims.C = resolved;
  const Data x = make_data(explicit_c, test_seed() + 6);
  const TensorCase t = to_tensors(explicit_c, x, DType::f32);
  const Result a = run_mixer(c, t, mixers::KdaPath::fused);
  const Result b = run_mixer(explicit_c, t, mixers::KdaPath::fused);
  INFO("resolved chunk " << resolved);
  using Field = std::vector<double> Result::*;
  const std::pair<const char*, Field> fields[] = {
      {"o", &Result::o},    {"ht", &Result::ht},         {"dq", &Result::dq},
      {"dk", &Result::dk},  {"dv", &Result::dv},         {"df", &Result::df},
      {"db", &Result::db},  {"dA_log", &Result::dA_log}, {"ddt_bias", &Result::ddt_bias},
      {"dh0", &Result::dh0}};
  for (const auto& [name, field] : fields) {
    INFO(name);
    CHECK(!(a.*field).empty());
    CHECK(a.*field == b.*field);
  }
}
