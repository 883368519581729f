// Data-parallel gradient synchronisation (engine/parallel/grad_sync.h).
#include "engine/parallel/grad_sync.h"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/ops.h"
#include "kernels/launch.h"

namespace lt::dist {

struct GradSync::Impl {
  Communicator& comm;
  model::Model& model;
  GradSyncConfig cfg;
  Device dev;
  Stream comm_stream;
  int64_t P = 0;  // arena elements
  std::vector<Bucket> buckets;
  std::vector<int64_t> param_begin;  // arena offsets of the parameters, ascending
  std::vector<int> bucket_of;        // bucket of param_begin[i]
  std::vector<int> pending;          // per bucket: parameters not reported yet this step
  std::vector<bool> reduced;         // per bucket: reduction enqueued this step
  std::vector<Shard> shards;         // zero1: one per rank; else one: the whole arena
  Shard own;
  Tensor wire;  // [P] bf16 on the communication stream when reducing in bf16
  optim::AdamWArenas shard_arenas;
  model::GradsReadyHook hook;

  // Timing: a few event sets in turn, so that a step's events are read (one step late, by the
  // loop) before a later step records into them again.
  struct TimingSet {
    std::vector<std::pair<Event, Event>> ops;  // around each reduction on the comm stream
    size_t used = 0;
    Event wait_start, wait_end;  // around the compute stream's wait in finish()
  };
  static constexpr size_t kTimingSets = 3;
  std::vector<TimingSet> sets;
  std::deque<size_t> recorded;  // sets holding a finished step's events, oldest first
  size_t next_set = 0;
  TimingSet* timing = nullptr;  // this step's set; nullptr when the step is not timed

  Impl(Communicator& c, model::Model& m, const GradSyncConfig& g) : comm(c), model(m), cfg(g), dev(m.device()) {}

  // Makes `comm_stream` wait for the compute stream's work so far.
  void comm_after_compute() {
    if (dev.is_cuda()) stream_wait(comm_stream, current_stream(dev));
  }

  // Shards of [begin, end) relative to its start (zero1): each rank's shard cut to the range.
  std::vector<Shard> local_shards(int64_t begin, int64_t end) const {
    std::vector<Shard> out;
    for (const Shard& s : shards) {
      const int64_t b = std::clamp(s.offset, begin, end), e = std::clamp(s.offset + s.count, begin, end);
      out.push_back({b - begin, e - b});
    }
    return out;
  }

  // The reduction of arena elements [begin, end), enqueued on the communication stream.
  void reduce_range(int64_t begin, int64_t end) {
    Tensor g = model.arenas().grads.narrow(0, begin, end - begin);
    StreamGuard guard(comm_stream);
    timed_op_begin();
    Tensor t = g;
    if (cfg.reduce_dtype == DType::bf16) {
      t = wire.narrow(0, begin, end - begin);
      t.copy_(g);
    }
    if (cfg.zero1) {
      const std::vector<Shard> local = local_shards(begin, end);
      comm.reduce_scatter_sum(t, local, comm_stream);
      const Shard& mine = local[static_cast<size_t>(comm.rank())];
      if (t.data_ptr() != g.data_ptr() && mine.count > 0)
        g.narrow(0, mine.offset, mine.count).copy_(t.narrow(0, mine.offset, mine.count));
    } else {
      comm.all_reduce_sum(t, comm_stream);
      if (t.data_ptr() != g.data_ptr()) g.copy_(t);
    }
    timed_op_end();
  }

  // An event pair on the communication stream around one reduction of a timed step.
  void timed_op_begin() {
    if (!timing) return;
    if (timing->used == timing->ops.size())
      timing->ops.emplace_back(Event::create(dev, true), Event::create(dev, true));
    timing->ops[timing->used].first.record(comm_stream);
  }
  void timed_op_end() {
    if (!timing) return;
    timing->ops[timing->used++].second.record(comm_stream);
  }

  void reduce_bucket(size_t b) {
    if (reduced[b]) throw std::logic_error("GradSync: bucket " + std::to_string(b) + " reduced twice in one step");
    reduced[b] = true;
    comm_after_compute();
    reduce_range(buckets[b].begin, buckets[b].end);
  }

  void on_ready(const std::vector<model::ParamRange>& ready) {
    for (const model::ParamRange& r : ready) {
      auto it = std::lower_bound(param_begin.begin(), param_begin.end(), r.offset);
      if (it == param_begin.end() || *it != r.offset)
        throw std::logic_error("GradSync: the model reported a parameter at " + std::to_string(r.offset) +
                               ", which starts no parameter");
      const int b = bucket_of[static_cast<size_t>(it - param_begin.begin())];
      if (--pending[static_cast<size_t>(b)] < 0)
        throw std::logic_error("GradSync: a parameter of bucket " + std::to_string(b) + " was reported twice");
      if (pending[static_cast<size_t>(b)] == 0 && cfg.overlap) reduce_bucket(static_cast<size_t>(b));
    }
  }

  // Runs `fn` on the communication stream after the compute stream's work, then makes the
  // compute stream wait for it.
  template <class Fn>
  void on_comm_stream(Fn&& fn) {
    comm_after_compute();
    {
      StreamGuard guard(comm_stream);
      fn();
    }
    if (dev.is_cuda()) stream_wait(current_stream(dev), comm_stream);
  }
};

GradSync::GradSync(Communicator& comm, model::Model& model, const GradSyncConfig& cfg)
    : impl_(std::make_unique<Impl>(comm, model, cfg)) {
  Impl& m = *impl_;
  if (comm.device() != model.device())
    throw std::invalid_argument("GradSync: communicator on " + comm.device().str() + ", model on " +
                                model.device().str());
  if (cfg.reduce_dtype != DType::f32 && cfg.reduce_dtype != DType::bf16)
    throw std::invalid_argument(std::string("GradSync: reduce dtype must be f32 or bf16, got ") +
                                dtype_name(cfg.reduce_dtype));
  if (cfg.bucket_bytes < 1) throw std::invalid_argument("GradSync: bucket_bytes must be >= 1");
  optim::AdamWArenas& a = model.arenas();
  if (a.grads.dtype() != DType::f32) throw std::invalid_argument("GradSync: the arenas must be f32");
  m.P = a.grads.numel();
  m.comm_stream = m.dev.is_cuda() ? Stream::create(m.dev) : Stream();

  // Buckets over the parameters in arena order; padding goes with the parameter before it.
  std::vector<model::ParamRange> params;
  for (const auto& s : model.specs()) params.push_back(model.param_range(s.name));
  std::sort(params.begin(), params.end(), [](const auto& x, const auto& y) { return x.offset < y.offset; });
  const int64_t bucket_elems = std::max<int64_t>(1, cfg.bucket_bytes / static_cast<int64_t>(sizeof(float)));
  Bucket cur;
  for (size_t i = 0; i < params.size(); ++i) {
    m.param_begin.push_back(params[i].offset);
    m.bucket_of.push_back(static_cast<int>(m.buckets.size()));
    ++cur.params;
    const int64_t next = i + 1 < params.size() ? params[i + 1].offset : m.P;
    if (next - cur.begin >= bucket_elems || i + 1 == params.size()) {
      cur.end = next;
      m.buckets.push_back(cur);
      cur = Bucket{next, next, 0};
    }
  }
  m.pending.assign(m.buckets.size(), 0);
  m.reduced.assign(m.buckets.size(), false);

  if (cfg.zero1) {
    m.shards = even_shards(m.P, comm.world());
    m.own = m.shards[static_cast<size_t>(comm.rank())];
    // The shard's view of the arenas, with its own moments; the model's full moments go.
    optim::AdamWArenas& s = m.shard_arenas;
    s.params = a.params.narrow(0, m.own.offset, m.own.count);
    s.grads = a.grads.narrow(0, m.own.offset, m.own.count);
    s.m = Tensor::zeros({m.own.count}, a.m.dtype(), m.dev);
    s.v = Tensor::zeros({m.own.count}, a.v.dtype(), m.dev);
    s.decay_end = std::clamp<int64_t>(a.decay_end - m.own.offset, 0, m.own.count);
    a.m = Tensor();
    a.v = Tensor();
  } else {
    m.shards = {Shard{0, m.P}};
    m.own = m.shards[0];
  }
  if (cfg.reduce_dtype == DType::bf16) {
    StreamGuard guard(m.comm_stream);
    m.wire = Tensor::empty({m.P}, DType::bf16, m.dev);
  }
  m.hook = [this](const std::vector<model::ParamRange>& ready) { impl_->on_ready(ready); };
  if (m.dev.is_cuda())
    for (size_t i = 0; i < Impl::kTimingSets; ++i)
      m.sets.push_back({{}, 0, Event::create(m.dev, true), Event::create(m.dev, true)});
}

GradSync::~GradSync() = default;

const std::vector<GradSync::Bucket>& GradSync::buckets() const { return impl_->buckets; }
const Shard& GradSync::shard() const { return impl_->own; }
Stream GradSync::comm_stream() const { return impl_->comm_stream; }
const model::GradsReadyHook& GradSync::hook() const { return impl_->hook; }

void GradSync::begin_step(bool timed) {
  Impl& m = *impl_;
  for (size_t b = 0; b < m.buckets.size(); ++b) {
    m.pending[b] = m.buckets[b].params;
    m.reduced[b] = false;
  }
  m.timing = nullptr;
  if (timed && m.dev.is_cuda()) {
    const size_t k = m.next_set;
    m.next_set = (k + 1) % Impl::kTimingSets;
    std::erase(m.recorded, k);  // a set not read in time is dropped
    m.timing = &m.sets[k];
    m.timing->used = 0;
  }
}

void GradSync::finish(Tensor& step_scalars) {
  Impl& m = *impl_;
  if (step_scalars.dtype() != DType::f32 || !step_scalars.is_contiguous() || step_scalars.device() != m.dev)
    throw std::invalid_argument("GradSync::finish: step_scalars must be contiguous f32 on " + m.dev.str());
  // A step whose backward reported nothing (or without overlap) reduces every bucket now;
  // one that reported only some of them missed a parameter.
  bool any_reported = false;
  for (size_t b = 0; b < m.buckets.size(); ++b) any_reported |= m.pending[b] != m.buckets[b].params;
  for (size_t b = 0; b < m.buckets.size(); ++b) {
    if (any_reported && m.pending[b] != 0)
      throw std::logic_error("GradSync: " + std::to_string(m.pending[b]) + " parameter(s) of bucket " +
                             std::to_string(b) + " were never reported final");
    if (!m.reduced[b]) m.reduce_bucket(b);
  }
  m.comm_after_compute();
  {
    StreamGuard guard(m.comm_stream);
    m.timed_op_begin();
    m.comm.all_reduce_sum(step_scalars, m.comm_stream);
    m.timed_op_end();
  }
  if (m.dev.is_cuda()) {
    Stream compute = current_stream(m.dev);
    if (m.timing) m.timing->wait_start.record(compute);
    stream_wait(compute, m.comm_stream);
    if (m.timing) m.timing->wait_end.record(compute);
  }
  if (m.timing) m.recorded.push_back(static_cast<size_t>(m.timing - m.sets.data()));
  m.timing = nullptr;
}

Tensor GradSync::grad_norm() {
  Impl& m = *impl_;
  if (!m.cfg.zero1) return optim::grad_norm(m.model.arenas().grads);
  // |g|^2 = sum over the shards of |g_r|^2.
  Tensor sq = ops::square(optim::grad_norm(m.shard_arenas.grads));
  m.on_comm_stream([&] { m.comm.all_reduce_sum(sq, m.comm_stream); });
  return ops::sqrt(sq);
}

optim::AdamWArenas& GradSync::update_arenas() { return impl_->cfg.zero1 ? impl_->shard_arenas : impl_->model.arenas(); }

void GradSync::after_update() {
  Impl& m = *impl_;
  if (!m.cfg.zero1) return;
  Tensor& params = m.model.arenas().params;
  m.on_comm_stream([&] { m.comm.all_gather(params, m.shards, m.comm_stream); });
  m.model.refresh_shadow();
}

std::optional<CommTiming> GradSync::take_timing() {
  Impl& m = *impl_;
  if (m.recorded.empty()) return std::nullopt;
  Impl::TimingSet& set = m.sets[m.recorded.front()];
  m.recorded.pop_front();
  set.wait_end.synchronize();
  CommTiming t;
  for (size_t i = 0; i < set.used; ++i) t.comm_ms += Event::elapsed_ms(set.ops[i].first, set.ops[i].second);
  t.exposed_ms = Event::elapsed_ms(set.wait_start, set.wait_end);
  return t;
}

std::pair<Tensor, Tensor> GradSync::moments_full() {
  Impl& m = *impl_;
  if (!m.cfg.zero1) return {m.model.arenas().m, m.model.arenas().v};
  Tensor full_m = Tensor::zeros({m.P}, m.shard_arenas.m.dtype(), m.dev);
  Tensor full_v = Tensor::zeros({m.P}, m.shard_arenas.v.dtype(), m.dev);
  full_m.narrow(0, m.own.offset, m.own.count).copy_(m.shard_arenas.m);
  full_v.narrow(0, m.own.offset, m.own.count).copy_(m.shard_arenas.v);
  m.on_comm_stream([&] {
    // Allocated on the compute stream, used on the communication stream too.
    full_m.record_stream(m.comm_stream);
    full_v.record_stream(m.comm_stream);
    m.comm.all_gather(full_m, m.shards, m.comm_stream);
    m.comm.all_gather(full_v, m.shards, m.comm_stream);
  });
  return {full_m, full_v};
}

void GradSync::load_moments_full(const Tensor& full_m, const Tensor& full_v) {
  Impl& m = *impl_;
  if (full_m.numel() != m.P || full_v.numel() != m.P)
    throw std::invalid_argument("GradSync::load_moments_full: moments of " + std::to_string(full_m.numel()) + " / " +
                                std::to_string(full_v.numel()) + " elements, the arenas have " + std::to_string(m.P));
  if (!m.cfg.zero1) {
    m.model.arenas().m.copy_(full_m);
    m.model.arenas().v.copy_(full_v);
    return;
  }
  m.shard_arenas.m.copy_(full_m.narrow(0, m.own.offset, m.own.count));
  m.shard_arenas.v.copy_(full_v.narrow(0, m.own.offset, m.own.count));
}

}  // namespace lt::dist
