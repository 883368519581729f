// dist::GradSync on the CPU with threads as ranks (make_thread_group): N ranks (2, 3, 8) on B/N rows each
// give the one-rank gradients and updates of all B rows (plain, ZeRO-1, bf16 reduction, with and
// without overlap); the buckets tile the arena, each is reduced once per step, during the
// backward stage that finishes it when overlapping and in finish() otherwise; ZeRO-1 keeps
// 1/N of the moments and gathers them whole for checkpoints.
#include <catch2/catch.hpp>

#include <cmath>
#include <mutex>
#include <thread>

#include "engine/model/model.h"
#include "engine/ops.h"
#include "engine/parallel/comm.h"
#include "engine/parallel/grad_sync.h"
#include "kernels/launch.h"
#include "tests/support/model_testing.h"

namespace {

using lt::DType;
using lt::Tensor;
namespace dist = lt::dist;

// A communicator that records each call (its kind, the arena offset of its tensor, its size and
// the caller's stage) and forwards it.
struct Recorded {
  std::string kind, stage;
  int64_t offset = -1, count = 0;
};
class RecordingComm : public dist::Communicator {
 public:
  RecordingComm(dist::Communicator& inner, const Tensor& arena) : inner_(inner), arena_(arena) {}
  int rank() const override { return inner_.rank(); }
  int world() const override { return inner_.world(); }
  const char* backend() const override { return inner_.backend(); }
  lt::Device device() const override { return inner_.device(); }
  void all_reduce_sum(Tensor& t, const lt::Stream& s) override {
    note("all_reduce", t);
    inner_.all_reduce_sum(t, s);
  }
  void reduce_scatter_sum(Tensor& t, const std::vector<dist::Shard>& shards, const lt::Stream& s) override {
    note("reduce_scatter", t);
    inner_.reduce_scatter_sum(t, shards, s);
  }
  void all_gather(Tensor& t, const std::vector<dist::Shard>& shards, const lt::Stream& s) override {
    note("all_gather", t);
    inner_.all_gather(t, shards, s);
  }
  void broadcast(Tensor& t, int root, const lt::Stream& s) override {
    note("broadcast", t);
    inner_.broadcast(t, root, s);
  }
  std::vector<Recorded> calls;

 private:
  void note(const char* kind, const Tensor& t) {
    Recorded r{kind, lt::current_stage(), -1, t.numel()};
    if (t.shares_storage(arena_)) r.offset = t.offset() - arena_.offset();
    calls.push_back(r);
  }
  dist::Communicator& inner_;
  Tensor arena_;
};

struct Setup {
  lt::model::ModelConfig cfg = lt::test::small_model_config(lt::model::Arch::kda);
  int64_t B = 24, T = 24;  // rows split evenly over 2, 3 and 8 ranks
  Tensor tokens = lt::test::random_ids(24, 24, 64, 101);
  Tensor targets = lt::test::random_ids(24, 24, 64, 202, 5);
  lt::optim::AdamWConfig adamw{0.9, 0.95, 1e-8, 0.1, 0.5};
  int64_t valid() const {
    int64_t n = 0;
    for (double v : targets.to_vector()) n += v != -100;
    return n;
  }
};

// The gradients of one process over all rows (first step) and its loss.
std::pair<std::vector<double>, double> reference_grads(const Setup& s) {
  lt::model::Model m(s.cfg, lt::Device::cpu());
  m.init_weights(5);
  lt::test::perturb_params(m, {});
  m.zero_grad();
  Tensor loss = Tensor::zeros({}, DType::f32);
  m.forward_backward(s.tokens, s.targets, 1.0 / static_cast<double>(s.valid()), loss);
  return {m.arenas().grads.to_vector(), loss.item()};
}

struct RankResult {
  std::vector<double> grads1;  // the reduced gradients of step 1
  std::vector<double> params, m_full, v_full;
  double loss = 0, norm = 0;
  int64_t moment_elems = 0;
  std::vector<Recorded> calls;
  std::vector<dist::GradSync::Bucket> buckets;
};

// `world` threads, each a rank with its own model on rows [r B/N, (r+1) B/N).
std::vector<RankResult> run_ranks(const Setup& s, int world, int steps, const dist::GradSyncConfig& gc) {
  auto comms = dist::make_thread_group(world);
  std::vector<RankResult> out(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  std::mutex error_mu;
  std::string error;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        lt::model::Model m(s.cfg, lt::Device::cpu());
        m.init_weights(5);
        lt::test::perturb_params(m, {});
        RecordingComm comm(*comms[static_cast<size_t>(r)], m.arenas().grads);
        dist::GradSync sync(comm, m, gc);
        const int64_t rows = s.B / world;
        Tensor tok = s.tokens.narrow(0, r * rows, rows).contiguous();
        Tensor tgt = s.targets.narrow(0, r * rows, rows).contiguous();
        Tensor skipped = Tensor::zeros({}, DType::i32);
        RankResult& res = out[static_cast<size_t>(r)];
        for (int t = 1; t <= steps; ++t) {
          comm.calls.clear();
          m.zero_grad();
          Tensor scalars = Tensor::zeros({2}, DType::f32);
          Tensor loss = scalars.narrow(0, 0, 1).view({});
          sync.begin_step();
          {
            lt::StageScope bwd("step");
            m.forward_backward(tok, tgt, 1.0 / static_cast<double>(s.valid()), loss, &sync.hook());
            lt::StageScope fin("finish");
            sync.finish(scalars);
          }
          if (t == 1) {
            res.grads1 = m.arenas().grads.to_vector();
            if (gc.zero1)  // outside the shard the reduced values are unspecified: the shard only
              for (size_t i = 0; i < res.grads1.size(); ++i)
                if (static_cast<int64_t>(i) < sync.shard().offset ||
                    static_cast<int64_t>(i) >= sync.shard().offset + sync.shard().count)
                  res.grads1[i] = 0;
          }
          Tensor norm = sync.grad_norm();
          lt::optim::adamw_step(sync.update_arenas(), s.adamw, 1e-2, t, norm, skipped);
          sync.after_update();
          res.loss = loss.item();
          res.norm = norm.item();
        }
        res.params = m.arenas().params.to_vector();
        res.moment_elems = sync.update_arenas().m.numel();
        auto [mf, vf] = sync.moments_full();
        res.m_full = mf.to_vector();
        res.v_full = vf.to_vector();
        res.calls = comm.calls;
        res.buckets = sync.buckets();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lk(error_mu);
        error = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  for (auto& t : threads) t.join();
  if (!error.empty()) FAIL(error);
  return out;
}

double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (a[i] - b[i]) * (a[i] - b[i]), n += b[i] * b[i];
  return std::sqrt(d / std::max(n, 1e-300));
}

}  // namespace

TEST_CASE("GradSync: N ranks x B/N rows equal 1 rank x B rows (plain, overlap, ZeRO-1, bf16 reduction)",
          "[dist][grad_sync]") {
  Setup s;
  const auto [ref, ref_loss] = reference_grads(s);
  struct Case {
    int world;
    bool overlap, zero1, bf16;
    double tol;
  };
  for (const Case c :
       {Case{2, true, false, false, 1e-5}, Case{3, false, false, false, 1e-5}, Case{2, true, true, false, 1e-5},
        Case{3, true, true, false, 1e-5}, Case{2, true, false, true, 1e-2}, Case{8, true, false, false, 1e-5},
        Case{8, true, true, false, 1e-5}, Case{8, true, false, true, 1e-2}}) {
    dist::GradSyncConfig gc;
    gc.bucket_bytes = 4096;  // many buckets
    gc.overlap = c.overlap;
    gc.zero1 = c.zero1;
    gc.reduce_dtype = c.bf16 ? DType::bf16 : DType::f32;
    INFO("world " << c.world << " overlap " << c.overlap << " zero1 " << c.zero1 << " bf16 " << c.bf16);
    auto res = run_ranks(s, c.world, 2, gc);
    const auto shards = dist::even_shards(static_cast<int64_t>(ref.size()), c.world);
    std::vector<double> reduced(ref.size(), 0.0);  // zero1: each rank's shard, put together
    for (int r = 0; r < c.world; ++r) {
      INFO("rank " << r);
      const RankResult& x = res[static_cast<size_t>(r)];
      if (c.zero1)
        for (int64_t i = shards[r].offset; i < shards[r].offset + shards[r].count; ++i)
          reduced[static_cast<size_t>(i)] = x.grads1[static_cast<size_t>(i)];
      else CHECK(rel_diff(x.grads1, ref) < c.tol);
      CHECK(x.params == res[0].params);  // every rank holds the same model
      CHECK(x.norm == res[0].norm);
      CHECK(x.loss == res[0].loss);
    }
    if (c.zero1) {
      CHECK(rel_diff(reduced, ref) < c.tol);
      // Each rank keeps 1/N of the moments; gathered, they and the model equal the unsharded run's.
      for (int r = 0; r < c.world; ++r) CHECK(res[static_cast<size_t>(r)].moment_elems == shards[r].count);
      dist::GradSyncConfig plain = gc;
      plain.zero1 = false;
      auto unsharded = run_ranks(s, c.world, 2, plain);
      CHECK(rel_diff(res[0].m_full, unsharded[0].m_full) < 1e-5);
      CHECK(rel_diff(res[0].v_full, unsharded[0].v_full) < 1e-5);
      CHECK(rel_diff(res[0].params, unsharded[0].params) < 1e-5);
    }
  }
}

TEST_CASE("GradSync: the buckets tile the arena; each is reduced once, under the backward when overlapping",
          "[dist][grad_sync]") {
  Setup s;
  for (const bool overlap : {true, false}) {
    for (const bool zero1 : {false, true}) {
      INFO("overlap " << overlap << " zero1 " << zero1);
      dist::GradSyncConfig gc;
      gc.bucket_bytes = 8192;
      gc.overlap = overlap;
      gc.zero1 = zero1;
      auto res = run_ranks(s, 2, 1, gc);
      const auto& buckets = res[0].buckets;
      REQUIRE(buckets.size() > 3);
      CHECK(buckets.front().begin == 0);
      for (size_t b = 1; b < buckets.size(); ++b) CHECK(buckets[b].begin == buckets[b - 1].end);
      CHECK(buckets.back().end == static_cast<int64_t>(res[0].params.size()));
      // The step's calls: one reduction per bucket, then the step's scalars, then (ZeRO-1) the
      // norm and the parameters' all-gather; moments_full's two gathers came after the step.
      const char* kind = zero1 ? "reduce_scatter" : "all_reduce";
      std::vector<int> seen(buckets.size(), 0);
      size_t i = 0;
      std::vector<std::string> stages;
      for (; i < res[0].calls.size() && res[0].calls[i].offset >= 0 && res[0].calls[i].kind == kind; ++i) {
        const auto& c = res[0].calls[i];
        for (size_t b = 0; b < buckets.size(); ++b)
          if (buckets[b].begin == c.offset) {
            CHECK(c.count == buckets[b].end - buckets[b].begin);
            ++seen[b];
          }
        stages.push_back(c.stage);
      }
      for (size_t b = 0; b < buckets.size(); ++b) CHECK(seen[b] == 1);
      REQUIRE(i < res[0].calls.size());
      CHECK(res[0].calls[i].kind == "all_reduce");  // the step's scalars [2]
      CHECK(res[0].calls[i].count == 2);
      if (overlap) {
        // The first reductions start inside the backward (after the LM head), the last one
        // (the embedding's bucket) after the embedding backward; none waits for finish().
        CHECK(stages.front().find("step/bwd") == 0);
        for (const auto& st : stages) CHECK(st.find("step/finish") == std::string::npos);
        bool in_layer = false;
        for (const auto& st : stages) in_layer |= st.find("step/bwd/L") == 0;
        CHECK(in_layer);
      } else {
        for (const auto& st : stages) CHECK(st == "step/finish");
      }
    }
  }
}
