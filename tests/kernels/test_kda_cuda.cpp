// KDA fused CUDA kernels on the GPU against the float64 naive recurrence on the CPU, on
// fresh random inputs (seed printed; LINTRAIN_TEST_SEED replays), with every output, gradient and
// scratch buffer NaN-poisoned before each run (allocator poison mode + explicit 0xFF fill),
// so an element a kernel fails to write fails the test. Tolerance on ||x - ref|| / ||ref||:
// 1e-5 for f32 inputs, 1e-2 for bf16 inputs. Skipped (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <vector>

#include <cuda_runtime.h>

#include "allocator/caching_allocator.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/kda.h"
#include "kernels/launch.h"
#include "tests/support/kda_testing.h"

using namespace lt;
using namespace lt::kda;
using namespace lt::kda::testing;

namespace {

// Device buffers from the CUDA caching allocator, poisoned with 0xFF (NaN) on allocation.
struct Dev {
  alloc::CachingAllocator& A = alloc::cuda_allocator(0);
  std::vector<alloc::Buffer> keep;
  void* get(size_t bytes) {
    keep.push_back(alloc::alloc_buffer(A, bytes));
    LT_CUDA_CHECK(cudaMemset(keep.back().data(), 0xFF, bytes));
    return keep.back().data();
  }
  void* up(const void* host, size_t bytes) {
    void* p = get(bytes);
    LT_CUDA_CHECK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
    return p;
  }
  template <class V>
  void* up(V& v) {
    return up(v.data(), v.size() * sizeof(v[0]));
  }
};

std::vector<double> down_typed(DType dt, const void* p, size_t n) {
  Typed t(dt, n);
  LT_CUDA_CHECK(cudaMemcpy(t.data(), p, t.bytes(), cudaMemcpyDeviceToHost));
  return t.to_double();
}
std::vector<double> down_f32(const float* p, size_t n) {
  std::vector<float> h(n);
  LT_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return to_f64(h);
}

Result run_fused_cuda(const Case& c, const Data& x) {
  const Dims& d = c.dims;
  const size_t n = x.q.size(), nb = x.b.size(), ns = static_cast<size_t>(d.B * d.H * d.D * d.D);
  alloc::cuda_allocator(0).set_poison(true);
  Dev dev;
  Typed q(c.dtype, x.q), k(c.dtype, x.k), v(c.dtype, x.v), f(c.dtype, x.f), b(c.dtype, x.b), dO(c.dtype, x.dO);
  std::vector<float> A_log = to_f32(x.A_log), dt_bias = to_f32(x.dt_bias), h0 = to_f32(x.h0), dht = to_f32(x.dht);
  const size_t es = c.dtype == DType::bf16 ? 2 : 4;
  FusedArgs a;
  a.dims = d;
  a.dtype = c.dtype;
  a.gate = c.gate;
  a.tensor_cores = !c.simt;
  a.scan_split = c.split;
  a.scan_group = c.group;
  a.fwd_group = c.fwd_group;
  a.scan_first = c.first;
  a.lean_scan = c.lean;
  a.q = dev.up(q.data(), q.bytes());
  a.k = dev.up(k.data(), k.bytes());
  a.v = dev.up(v.data(), v.bytes());
  a.f = dev.up(f.data(), f.bytes());
  a.b = dev.up(b.data(), b.bytes());
  a.A_log = static_cast<float*>(dev.up(A_log));
  a.dt_bias = static_cast<float*>(dev.up(dt_bias));
  a.h0 = c.h0 ? static_cast<float*>(dev.up(h0)) : nullptr;
  a.o = dev.get(n * es);
  a.ht = static_cast<float*>(dev.get(ns * 4));
  a.h = static_cast<float*>(dev.get(trajectory_bytes(d)));
  const WorkspaceBytes wb = workspace_bytes(d, c.dtype);
  // Forward workspace (every buffer NaN-poisoned by Dev::get); the backward keeps the
  // forward's saved tiles (W, Delta over U, sQ, Kbar, Aqk, gamma: kernels/kda.h) and rewrites
  // them in place as the engine runs it (Xw over W, Xq over sQ, Xk over Kbar), and gets
  // a fresh poisoned AqkT_dO (= dDelta) / dgamma_s / partials / counters; Qp / Ob are unused.
  ForwardWorkspace fw;
  fw.W = dev.get(wb.tile);
  fw.U = static_cast<float*>(dev.get(wb.tile_f32));
  fw.sQ = dev.get(wb.tile);
  fw.Kbar = static_cast<float*>(dev.get(wb.tile_f32));
  fw.Aqk = dev.get(wb.aqk);
  fw.gamma = static_cast<float*>(dev.get(wb.gamma));
  fw.Qp = dev.get(wb.tile);
  fw.Ob = dev.get(wb.tile);
  fw.counters = static_cast<uint32_t*>(dev.get(wb.counters));  // poisoned: the intra zeroes them
  fused_forward_cuda(a, fw, nullptr);
  void* aqkT_dO = dev.get(wb.tile);
  float* dgamma_s = static_cast<float*>(dev.get(wb.gamma));
  float* partials = static_cast<float*>(dev.get(wb.partials));
  uint32_t* counters = static_cast<uint32_t*>(dev.get(wb.counters));
  const BackwardWorkspace bw = backward_workspace(fw, aqkT_dO, dgamma_s, partials, counters);
  a.dO = dev.up(dO.data(), dO.bytes());
  a.dht = c.dht ? static_cast<float*>(dev.up(dht)) : nullptr;
  a.dq = dev.get(n * es);
  a.dk = dev.get(n * es);
  a.dv = dev.get(n * es);
  a.df = dev.get(n * es);
  a.db = dev.get(nb * es);
  a.dA_log = static_cast<float*>(dev.get(d.H * 4));
  a.ddt_bias = static_cast<float*>(dev.get(d.H * d.D * 4));
  a.dh0 = static_cast<float*>(dev.get(ns * 4));
  fused_backward_cuda(a, bw, nullptr);
  LT_CUDA_CHECK(cudaDeviceSynchronize());
  Result r;
  r.o = down_typed(c.dtype, a.o, n);
  r.ht = down_f32(a.ht, ns);
  r.dq = down_typed(c.dtype, a.dq, n);
  r.dk = down_typed(c.dtype, a.dk, n);
  r.dv = down_typed(c.dtype, a.dv, n);
  r.df = down_typed(c.dtype, a.df, n);
  r.db = down_typed(c.dtype, a.db, nb);
  r.dA_log = down_f32(a.dA_log, d.H);
  r.ddt_bias = down_f32(a.ddt_bias, d.H * d.D);
  r.dh0 = down_f32(a.dh0, ns);
  return r;
}

// Naive references are expensive at the seed shape: computed once per (shape, dtype, flags),
// i.e. keyed by the case without its chunk size and variant. `f64`: the float64 ground truth;
// otherwise the float32 recurrence on the same inputs (what fp32 itself costs).
const Result& cached_naive(const Case& c, const Data& x, bool f64) {
  static std::map<std::string, Result> cache[2];
  Case key = c;
  key.dims.C = 0;
  key.simt = false;
  key.split = 0;
  key.group = 0;
  key.fwd_group = 0;
  key.first = ScanFirst::pick;
  key.lean = LeanScan::pick;
  auto& m = cache[f64 ? 1 : 0];
  auto it = m.find(key.name());
  if (it != m.end()) return it->second;
  const auto t0 = std::chrono::steady_clock::now();
  Result r = f64 ? run_naive(c, x) : run_naive_f32(c, x);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (f64) std::printf("[kda] naive f64 reference %s: %.1f s\n", key.name().c_str(), s);
  return m.emplace(key.name(), std::move(r)).first->second;
}
// The references are cached by the case's name without its chunk and scan variant, so every
// test that draws data for such a key draws it from this seed: the same data for every C.
uint64_t data_seed(const Case& c, uint64_t base) {
  Case key = c;
  key.dims.C = 0;
  key.simt = false;
  key.split = 0;
  key.group = 0;
  key.fwd_group = 0;
  key.first = ScanFirst::pick;
  key.lean = LeanScan::pick;
  return base + std::hash<std::string>{}(key.name()) % 1000;
}

const Result& reference(const Case& c, const Data& x) { return cached_naive(c, x, true); }
const Result& reference_f32(const Case& c, const Data& x) { return cached_naive(c, x, false); }

// Case c on the GPU against the naive float64 reference `ref`, gated by fp32's own error e32
// (bf16: 1e-2 at least), one line printed; `what` names the scan form in that line. Returns the
// GPU's result.
Result check_against_naive(const Case& c, const Data& x, uint64_t seed, const Result& ref, const ErrReport& e32,
                           const char* what) {
  Result got = run_fused_cuda(c, x);
  const ErrReport e = compare(got, ref, false, true, true);
  const Gated gt = gate_errors(e, e32, c.dtype == DType::bf16 ? 1e-2 : 1e-5);
  std::printf("[kda] cuda %s vs naive %-40s worst %.2e, %.3f of allowed:%s%s\n", what, c.name().c_str(), e.worst(),
              gt.worst_ratio, e.str().c_str(), gt.adapted.c_str());
  INFO(c.name() << " seed " << seed << e.str() << gt.adapted << replay_hint());
  CHECK(gt.pass);
  return got;
}

// A shape with the group sizes a two-level scan test runs it at (0: NT, the one-level scan).
struct GroupCase {
  Dims d;
  bool h0, dht;
  DType dt;
  std::vector<int> groups;
};

// fn(c, x, seed, ref, e32, group) for every compiled case and each of its groups, on data drawn
// once a shape, with the naive references it is gated against (check_against_naive).
template <class Fn>
void for_each_group(const std::vector<GroupCase>& cases, uint64_t seed, Fn fn) {
  for (const GroupCase& sc : cases) {
    Case c = make_case(sc.d, sc.h0, sc.dht, false, sc.dt, false);
    if (skip_uncompiled(c)) continue;
    const uint64_t s = data_seed(c, seed);
    const Data x = make_data(c, s);
    const Result& ref = reference(c, x);
    const ErrReport e32 = compare(reference_f32(c, x), ref, false, true, true);
    for (int group : sc.groups) fn(c, x, s, ref, e32, group);
  }
}

// A scan form (split, two-level) against the naive recurrence and, bit for bit, against `one`:
// the single-block lean scan on the same data (they form every product alike).
void check_scan_form(const Case& c, const Data& x, uint64_t seed, const Result& one, const char* form,
                     const char* base) {
  const Result& ref = reference(c, x);
  const ErrReport e32 = compare(reference_f32(c, x), ref, false, true, true);
  const Result got = check_against_naive(c, x, seed, ref, e32, form);
  for (const BitDiff& b : output_bit_diffs(got, one)) {
    INFO(b.name << ": " << b.differ << " of " << b.total << " elements differ from " << base);
    CHECK(b.differ == 0);
  }
}

}  // namespace

TEST_CASE("KDA fused CUDA matches the naive recurrence (f64)", "[kda][cuda]") {
  const uint64_t seed = test_seed();
  std::vector<Case> cases;
  auto add = [&](Dims d, bool h0, bool dht, bool lb, DType dt) { cases.push_back(make_case(d, h0, dht, lb, dt)); };
  add({8, 512, 12, 64, 16}, false, false, false, DType::f32);  // the seed shape, chunk 16
  add({8, 512, 12, 64, 64}, false, false, false, DType::f32);  // chunk 64
  add({8, 512, 12, 64, 32}, false, false, false, DType::f32);
  add({8, 512, 12, 64, 64}, false, false, false, DType::bf16);  // bf16 inputs
  add({8, 512, 12, 64, 16}, false, false, false, DType::bf16);
  add({2, 300, 3, 64, 64}, true, true, false, DType::f32);   // T % C != 0, h0, dht
  add({2, 300, 3, 64, 16}, true, true, true, DType::f32);    // lower-bound gate
  add({2, 200, 2, 128, 64}, true, true, false, DType::f32);  // D = 128
  add({2, 200, 2, 128, 32}, true, true, false, DType::f32);
  add({2, 200, 2, 128, 16}, true, false, false, DType::f32);
  add({2, 200, 2, 128, 64}, true, true, false, DType::bf16);
  add({2, 200, 2, 128, 32}, true, true, false, DType::bf16);  // the row programs at D = 128
  add({2, 200, 2, 128, 16}, false, true, true, DType::bf16);
  for (int i : {0, 1, 3, 5, 7, 9}) {  // the fp32 CUDA-core variant of the scan kernels
    Case c = cases[i];
    c.simt = true;
    cases.push_back(c);
  }
  double worst_f32 = 0, worst_bf16 = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (skip_uncompiled(c)) continue;
    const uint64_t s = data_seed(c, seed);
    const Data x = make_data(c, s);
    const Result& ref = reference(c, x);
    const Result got = run_fused_cuda(c, x);
    const ErrReport e = compare(got, ref, false, true, true);
    const ErrReport e32 = compare(reference_f32(c, x), ref, false, true, true);
    const double tol = c.dtype == DType::bf16 ? 1e-2 : 1e-5;
    const Gated gt = gate_errors(e, e32, tol);
    std::printf("[kda] cuda fused vs naive %-36s worst %.2e, %.3f of allowed:%s%s\n", c.name().c_str(), e.worst(),
                gt.worst_ratio, e.str().c_str(), gt.adapted.c_str());
    (c.dtype == DType::bf16 ? worst_bf16 : worst_f32) =
        std::max(c.dtype == DType::bf16 ? worst_bf16 : worst_f32, e.worst());
    INFO(c.name() << " seed " << s << e.str() << gt.adapted << replay_hint());
    CHECK(gt.pass);
  }
  std::printf("[kda] cuda fused vs naive: worst f32 %.2e (tol 1e-5), worst bf16 %.2e (tol 1e-2), seed %llu\n",
              worst_f32, worst_bf16, (unsigned long long)seed);
}

TEST_CASE(
    "KDA fused CUDA: the inter adjoint split over V tiles (clusters of 2 and 4 blocks) is bit-identical "
    "to the single-block scan and matches the naive recurrence",
    "[kda][cuda][split]") {
  // (The cases above run with the default split: 4 at their B*H <= 33, 1 at B8 H12.)
  const uint64_t seed = test_seed();
  std::vector<Case> cases;
  auto add = [&](Dims d, bool h0, bool dht, DType dt, bool simt) {
    cases.push_back(make_case(d, h0, dht, false, dt, simt));
  };
  add({2, 300, 3, 64, 32}, true, true, DType::f32, false);
  add({2, 300, 3, 64, 16}, true, true, DType::bf16, false);
  add({1, 250, 2, 128, 64}, true, true, DType::f32, false);
  add({1, 250, 2, 128, 32}, false, true, DType::bf16, false);
  add({2, 300, 3, 64, 64}, true, true, DType::f32, true);
  for (size_t i = 0; i < cases.size(); ++i) {
    Case c = cases[i];
    if (skip_uncompiled(c)) continue;
    const uint64_t s = data_seed(c, seed);
    const Data x = make_data(c, s);
    c.split = 1;
    c.lean = LeanScan::lean;                  // a split scan is lean: the single-block scan in the same form
    c.group = static_cast<int>(c.dims.NT());  // one level (the pick may take the affine first level here)
    const Result one = run_fused_cuda(c, x);
    for (int nv : {2, 4}) {
      c.split = nv;
      check_scan_form(c, x, s, one, "split", "split 1");
    }
  }
}

TEST_CASE(
    "KDA fused CUDA: the two-level backward scan is bit-identical to the single-block scan and matches the "
    "naive recurrence",
    "[kda][cuda][group]") {
  const uint64_t seed = test_seed();
  const std::vector<GroupCase> cases = {
      {{2, 300, 3, 64, 32}, true, true, DType::f32, {1, 3}},   // 10 chunks: groups of 1, 3 (the last of 1)
      {{2, 300, 3, 64, 16}, true, true, DType::bf16, {2, 5}},  // 19 chunks
      {{1, 700, 2, 64, 64}, false, true, DType::bf16, {2}},    // 11 chunks, 512-thread blocks
      {{1, 250, 2, 128, 64}, true, true, DType::f32, {2}},    {{1, 250, 2, 128, 32}, false, true, DType::bf16, {3}},
  };
  for (const GroupCase& sc : cases) {
    Case c = make_case(sc.d, sc.h0, sc.dht, false, sc.dt, false);
    if (skip_uncompiled(c)) continue;
    const uint64_t s = data_seed(c, seed);
    const Data x = make_data(c, s);
    c.split = 1;
    c.lean = LeanScan::lean;      // the two-level scan is lean: the single-block scan in the same form
    c.first = ScanFirst::serial;  // bit-identical to it (the affine first level is not)
    c.group = static_cast<int>(c.dims.NT());
    const Result one = run_fused_cuda(c, x);
    for (int group : sc.groups) {
      c.group = group;
      check_scan_form(c, x, s, one, "two-level", "the one-level scan");
    }
  }
}

TEST_CASE("KDA fused CUDA: the two-level forward scan and the one-level scan both match the naive recurrence",
          "[kda][cuda][fwdgroup]") {
  // Many groups a sequence and few sequences: the chain's waits and the tickets under load.
  const uint64_t seed = test_seed();
  const std::vector<GroupCase> cases = {
      {{2, 300, 3, 64, 32}, true, true, DType::f32, {0, 2, 3}},       // 10 chunks: groups of 2, 3 (the last of 1)
      {{2, 300, 3, 64, 16}, true, true, DType::bf16, {0, 2, 5}},      // 19 chunks
      {{1, 4096, 2, 64, 32}, true, true, DType::bf16, {0, 4, 16}},    // 128 chunks: 32 and 8 groups
      {{1, 250, 2, 128, 64}, true, true, DType::f32, {0, 2}},         // 4 chunks
      {{1, 4096, 2, 128, 32}, false, true, DType::bf16, {0, 8, 32}},  // 128 chunks, 32-column tiles
      {{2, 200, 2, 128, 16}, true, false, DType::bf16, {0, 3}},       // 8 V tiles
  };
  for_each_group(cases, seed, [](Case& c, const Data& x, uint64_t s, const Result& ref, const ErrReport& e32, int g) {
    c.fwd_group = g > 0 ? g : static_cast<int>(c.dims.NT());
    check_against_naive(c, x, s, ref, e32, "forward groups");
  });
}

TEST_CASE("KDA fused CUDA: the affine first level of the two-level backward scan matches the naive recurrence",
          "[kda][cuda][affine]") {
  // Group maps at once, then a chain across up to 32 groups a sequence: the chain's waits, the
  // map blocks counted on the boundary flags before the chain's, and the tickets under load;
  // the serial first level on the same data beside it.
  const uint64_t seed = test_seed();
  const std::vector<GroupCase> cases = {
      {{2, 300, 3, 64, 32}, true, true, DType::f32, {2, 3}},       // 10 chunks, the last group short
      {{1, 4096, 2, 64, 32}, true, true, DType::bf16, {4, 16}},    // 128 chunks: 32 and 8 groups
      {{1, 4096, 2, 128, 32}, false, true, DType::bf16, {8, 32}},  // 16 and 4 groups
      {{1, 250, 2, 128, 64}, true, true, DType::f32, {2}},         // 4 chunks
      {{2, 400, 2, 128, 16}, true, false, DType::bf16, {12}},      // 25 chunks, D128 at C16
  };
  for_each_group(cases, seed, [](Case& c, const Data& x, uint64_t s, const Result& ref, const ErrReport& e32, int g) {
    for (ScanFirst first : {ScanFirst::serial, ScanFirst::affine}) {
      c.group = g;
      c.first = first;
      check_against_naive(c, x, s, ref, e32, "backward first level");
    }
  });
}

TEST_CASE("KDA fused CUDA: the full and the lean backward scan both match the naive recurrence", "[kda][cuda][lean]") {
  // The default (lean_scan_pick) runs the lean scan at the small B*H of the cases above and the
  // full scan at B8 H12; here each shape runs the other form too.
  const uint64_t seed = test_seed();
  std::vector<Case> cases;
  auto add = [&](Dims d, bool h0, bool dht, bool lb, DType dt, bool simt, LeanScan lean) {
    Case c = make_case(d, h0, dht, lb, dt, simt);
    c.lean = lean;
    cases.push_back(c);
  };
  add({8, 512, 12, 64, 32}, false, false, false, DType::bf16, false, LeanScan::lean);  // the default there: full
  add({8, 512, 12, 64, 16}, false, false, false, DType::f32, false, LeanScan::lean);
  add({8, 512, 12, 64, 64}, false, false, false, DType::f32, true, LeanScan::lean);
  add({2, 300, 3, 64, 32}, true, true, true, DType::f32, false, LeanScan::full);  // the default there: lean
  add({2, 200, 2, 128, 16}, true, true, false, DType::f32, false, LeanScan::full);
  add({2, 200, 2, 128, 32}, true, true, false, DType::bf16, false, LeanScan::full);
  add({2, 200, 2, 128, 64}, true, true, false, DType::f32, true, LeanScan::full);
  add({2, 200, 2, 128, 32}, true, true, false, DType::bf16, false, LeanScan::lean);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (skip_uncompiled(c)) continue;
    const uint64_t s = data_seed(c, seed);
    const Data x = make_data(c, s);
    const Result& ref = reference(c, x);
    const Result got = run_fused_cuda(c, x);
    const GatedReport g = gate_against_reference("cuda fused vs naive", c, got, ref,
                                                 compare(reference_f32(c, x), ref, false, true, true));
    INFO(c.name() << " seed " << s << g.report.str() << g.gated.adapted << replay_hint());
    CHECK(g.gated.pass);
  }
}

TEST_CASE("KDA fused CUDA launches: 2 forward + 3 backward", "[kda][cuda]") {
  Case c;
  c.dims = {2, 100, 2, 64, 32};
  const Data x = make_data(c, test_seed() + 7);
  reset_launch_atlas();
  {
    StageScope st("kda");
    (void)run_fused_cuda(c, x);
  }
  std::map<std::string, int64_t> m;
  for (auto& s : launch_atlas()) m[s.stage] = s.launches;
  for (auto& [k, v] : m) std::printf("[kda] atlas %-24s %lld\n", k.c_str(), (long long)v);
  CHECK(m["kda/intra"] == 1);
  CHECK(m["kda/inter"] == 1);
  CHECK(m["kda/aqk_dO"] == 1);
  CHECK(m["kda/inter_adjoint"] == 1);
  CHECK(m["kda/intra_adjoint"] == 1);
  CHECK(total_launches() == 5);
}
