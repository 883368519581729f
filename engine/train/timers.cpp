#include "engine/train/timers.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "allocator/caching_allocator.h"
#include "engine/train/kernel_trace.h"
#include "kernels/launch.h"

#if LINTRAIN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace lt::train {

const char* const kTimerGrammar = "off | all | step%N | step=N | step=A..B";

namespace {

[[noreturn]] void bad_spec(const std::string& text, const std::string& why) {
  throw std::invalid_argument("--timers '" + text + "': " + why + " (expected " + kTimerGrammar +
                              "; steps count from 0, the first step after warm-up)");
}

int64_t parse_count(const std::string& text, const std::string& digits) {
  if (digits.empty() || digits.size() > 15 || digits.find_first_not_of("0123456789") != std::string::npos)
    bad_spec(text, "'" + digits + "' is not a step number");
  return std::stoll(digits);
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool is_bucket(const std::string& c) { return c == "fwd" || c == "bwd" || c == "optim"; }

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    out.push_back(path.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return out;
}

// The first of fwd / bwd / optim that the path names, or "".
std::string bucket_of(const std::string& path) {
  if (path.empty()) return "";
  for (const std::string& c : split_path(path))
    if (is_bucket(c)) return c;
  return "";
}

}  // namespace

TimerSpec TimerSpec::parse(const std::string& text) {
  TimerSpec s;
  if (text == "off" || text.empty()) return s;
  if (text == "all") {
    s.kind = Kind::all;
    return s;
  }
  if (text.rfind("step%", 0) == 0) {
    s.kind = Kind::every;
    s.a = parse_count(text, text.substr(5));
    if (s.a < 1) bad_spec(text, "N in step%N must be >= 1");
    return s;
  }
  if (text.rfind("step=", 0) == 0) {
    const std::string rest = text.substr(5);
    const size_t dots = rest.find("..");
    if (dots == std::string::npos) {
      s.kind = Kind::one;
      s.a = parse_count(text, rest);
      return s;
    }
    s.kind = Kind::range;
    s.a = parse_count(text, rest.substr(0, dots));
    s.b = parse_count(text, rest.substr(dots + 2));
    if (s.a > s.b) bad_spec(text, "A > B in step=A..B");
    return s;
  }
  bad_spec(text, "unknown form");
}

bool TimerSpec::timed(int64_t step) const {
  if (step < 0) return false;
  switch (kind) {
    case Kind::off: return false;
    case Kind::all: return true;
    case Kind::every: return step % a == 0;
    case Kind::one: return step == a;
    case Kind::range: return step >= a && step <= b;
  }
  return false;
}

std::string TimerSpec::str() const {
  switch (kind) {
    case Kind::off: return "off";
    case Kind::all: return "all";
    case Kind::every: return "step%" + std::to_string(a);
    case Kind::one: return "step=" + std::to_string(a);
    case Kind::range: return "step=" + std::to_string(a) + ".." + std::to_string(b);
  }
  return "off";
}

// ---- StepTiming ------------------------------------------------------------------------

std::string StepTiming::table() const {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line,
                "timers: step %lld  %.3f ms/step  (fwd %.3f  bwd %.3f  optim %.3f ms)  %lld launches\n",
                static_cast<long long>(step), step_ms, fwd_ms, bwd_ms, optim_ms, static_cast<long long>(launches));
  os << line;
  std::snprintf(line, sizeof line, "  %-48s %6s %8s %10s %10s %7s\n", "stage", "calls", "launches", "incl ms",
                "self ms", "share");
  os << line;
  for (const StageTime& s : stages) {
    const std::string name = std::string(static_cast<size_t>(2 * s.depth), ' ') + (s.label.empty() ? s.stage : s.label);
    std::snprintf(line, sizeof line, "  %-48s %6lld %8lld %10.3f %10.3f %6.1f%%\n", name.c_str(),
                  static_cast<long long>(s.calls), static_cast<long long>(s.launches), s.inclusive_ms, s.self_ms,
                  100.0 * s.share);
    os << line;
  }
  return os.str();
}

nlohmann::json StepTiming::to_json() const {
  nlohmann::json j;
  j["kind"] = "timers";
  j["step"] = step;
  j["step_ms"] = step_ms;
  j["fwd_ms"] = fwd_ms;
  j["bwd_ms"] = bwd_ms;
  j["optim_ms"] = optim_ms;
  j["launches"] = launches;
  nlohmann::json arr = nlohmann::json::array();
  for (const StageTime& s : stages)
    arr.push_back({{"stage", s.stage},
                   {"depth", s.depth},
                   {"calls", s.calls},
                   {"launches", s.launches},
                   {"ms", s.inclusive_ms},
                   {"self_ms", s.self_ms},
                   {"share", s.share}});
  j["stages"] = std::move(arr);
  return j;
}

// ---- StageTimer -----------------------------------------------------------------------

struct StageTimer::Impl {
  // One stage boundary: which stage, entering or leaving, and when (an event of the pool
  // on CUDA, a steady-clock reading on the CPU), with the allocator's bytes at that point.
  struct Mark {
    const StageNode* node = nullptr;  // nullptr: the step's start or end
    bool entering = false;
    int event = -1;       // index into `events` (CUDA)
    int64_t host_ns = 0;  // steady clock (every mark on the CPU; the step's start and end on CUDA)
    uintptr_t stream = 0;
    int64_t in_use = 0, reserved = 0;
  };
  struct Slice {
    std::string stage;
    uintptr_t stream = 0;
    double begin_us = 0.0, dur_us = 0.0;
  };
  struct Sample {
    double ts_us = 0.0;
    int64_t in_use = 0, reserved = 0;
  };

  Device device;
  std::vector<void*> events;  // cudaEvent_t, created in the constructor (more only if a step needs more)
  int next_event = 0;
  uint64_t last_work = 0;     // device_work_count() at the last recorded event
  int64_t last_event_ns = 0;  // steady clock at the last recorded event
  static constexpr int64_t kShareNs = 2000;
  std::thread::id owner;
  KernelRecorder* kernels = nullptr;  // CUPTI kernel activity of the timed steps (optional)
  std::vector<KernelRecord> step_kernels;
  bool active = false;
  int64_t step = 0;
  int64_t start_ns = 0;
  int start_event = -1;
  std::vector<Mark> marks;
  std::map<std::string, int64_t> atlas_before;
  // chrome trace, over all timed steps
  int64_t trace_origin_ns = -1;
  std::vector<Slice> slices;
  std::vector<Sample> samples;
  std::vector<std::pair<double, int64_t>> step_launches;

  bool sample_memory = true;
  Impl(Device d, bool sample) : device(d), sample_memory(sample) {
#if LINTRAIN_WITH_CUDA
    if (device.is_cuda()) grow_pool(512);
#endif
  }
  ~Impl() {
#if LINTRAIN_WITH_CUDA
    for (void* e : events) cudaEventDestroy(static_cast<cudaEvent_t>(e));
#endif
  }

  void grow_pool(size_t n) {
#if LINTRAIN_WITH_CUDA
    set_device(device);
    while (events.size() < n) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) throw std::runtime_error("timers: cudaEventCreate failed");
      events.push_back(e);
    }
#else
    (void)n;
#endif
  }

  alloc::CachingAllocator& allocator() {
    return device.is_cuda() ? alloc::cuda_allocator(device.index) : alloc::host_allocator();
  }

  // One stage boundary on a timed step: an event record on CUDA (shared with the previous
  // boundary when this thread enqueued no device work since it, in the last 2 us), a clock
  // read on the CPU (and at the step's start on both), the allocator's bytes when sampling; appended to
  // `marks`, whose capacity stays from step to step. No string is copied: the node holds the
  // stage's path.
  void mark(const StageNode* node, bool entering) {
    Mark& m = marks.emplace_back();
    m.node = node;
    m.entering = entering;
    if (!device.is_cuda() || node == nullptr) m.host_ns = steady_ns();
    if (sample_memory) {
      const alloc::Stats st = allocator().stats();
      m.in_use = st.allocated_bytes.current;
      m.reserved = st.reserved_bytes.current;
    }
#if LINTRAIN_WITH_CUDA
    if (device.is_cuda()) {
      const Stream s = current_stream(device);
      m.stream = s.id();
      const uint64_t work = device_work_count();
      const int64_t now = steady_ns();
      // Nothing enqueued on this stream since the previous boundary, and under kShareNs of
      // host time since its event (a leave followed by an enter, nested enters): that
      // boundary's event marks this one too. Whether the stream is busy (both events would
      // complete together) or idle (the host's time between them is the stage's), the
      // difference is below kShareNs; a boundary after longer host work (a host-only stage
      // such as "report") records its own event.
      if (marks.size() > 1 && node != nullptr) {
        const Mark& prev = marks[marks.size() - 2];
        if (prev.node != nullptr && prev.stream == m.stream && work == last_work && now - last_event_ns < kShareNs) {
          m.event = prev.event;
          return;
        }
      }
      last_work = work;
      last_event_ns = now;
      if (static_cast<size_t>(next_event) >= events.size()) grow_pool(events.size() * 2);
      m.event = next_event++;
      cudaEventRecord(static_cast<cudaEvent_t>(events[static_cast<size_t>(m.event)]),
                      static_cast<cudaStream_t>(s.handle()));
    }
#endif
  }

  // The stage hook of a timed step (kernels/launch.h): called on the thread that enters or
  // leaves a scope; stages entered on other threads (a data prefetch thread) are not part of
  // the step. Only the owner thread touches the marks, so no lock is taken.
  static void on_stage(void* context, const StageNode& node, bool entering) {
    Impl& I = *static_cast<Impl*>(context);
    if (std::this_thread::get_id() != I.owner) return;
    if (I.kernels != nullptr && !entering) I.kernels->leave();
    I.mark(&node, entering);
    if (I.kernels != nullptr && entering) I.kernels->enter(node);
  }

  static const std::string& path_of(const Mark& m) {
    static const std::string none;
    return m.node == nullptr ? none : m.node->path;
  }

  // Milliseconds from the step's start mark to `m`.
  double ms_of(const Mark& m) const {
#if LINTRAIN_WITH_CUDA
    if (device.is_cuda()) {
      float ms = 0.0f;
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(events[static_cast<size_t>(start_event)]),
                           static_cast<cudaEvent_t>(events[static_cast<size_t>(m.event)]));
      return static_cast<double>(ms);
    }
#endif
    return static_cast<double>(m.host_ns - start_ns) / 1e6;
  }
};

StageTimer::StageTimer(Device device, bool sample_memory) : impl_(std::make_unique<Impl>(device, sample_memory)) {}

StageTimer::~StageTimer() {
  if (impl_ && impl_->active) set_stage_hook(nullptr, nullptr);
}

bool StageTimer::active() const { return impl_->active; }

void StageTimer::begin_step(int64_t step) {
  Impl& I = *impl_;
  if (I.active) throw std::logic_error("StageTimer::begin_step: step " + std::to_string(I.step) + " is still open");
  I.active = true;
  I.step = step;
  I.owner = std::this_thread::get_id();
  I.marks.clear();
  if (I.marks.capacity() < 1024) I.marks.reserve(1024);
  I.next_event = 0;
  I.step_kernels.clear();
  I.atlas_before.clear();
  for (const StageLaunches& s : launch_atlas()) I.atlas_before[s.stage] = s.launches;
  if (I.kernels != nullptr) I.kernels->begin_step();
  I.mark(nullptr, true);
  I.start_event = I.marks.back().event;
  I.start_ns = I.marks.back().host_ns;
  if (I.trace_origin_ns < 0) I.trace_origin_ns = I.start_ns;
  set_stage_hook(&Impl::on_stage, &I);
}

void StageTimer::record_kernels(KernelRecorder* recorder) {
  if (impl_->active) throw std::logic_error("StageTimer::record_kernels: a step is open");
  impl_->kernels = recorder;
}

const std::vector<KernelRecord>& StageTimer::step_kernels() const { return impl_->step_kernels; }

StepTiming StageTimer::end_step() {
  Impl& I = *impl_;
  if (!I.active) throw std::logic_error("StageTimer::end_step without begin_step");
  set_stage_hook(nullptr, nullptr);
  I.mark(nullptr, false);
  I.active = false;
#if LINTRAIN_WITH_CUDA
  if (I.device.is_cuda())
    cudaEventSynchronize(static_cast<cudaEvent_t>(I.events[static_cast<size_t>(I.marks.back().event)]));
#endif
  if (I.kernels != nullptr) I.step_kernels = I.kernels->end_step();
  StepTiming t;
  t.step = I.step;
  t.step_ms = I.ms_of(I.marks.back());

  // Scopes: match each leave with its enter (scopes nest, so a stack suffices). A stage's
  // parent is the scope it ran inside (the stack's top when it was entered), which is not
  // always a prefix of its name: "optim/clip" entered at the top level has no parent.
  struct Agg {
    int64_t calls = 0;
    double inclusive = 0.0;
    std::string parent;
  };
  std::map<std::string, Agg> agg;
  std::map<std::string, double> children_ms;
  double top_ms = 0.0;
  std::vector<std::pair<std::string, double>> stack;
  const double step_base_us = static_cast<double>(I.start_ns - I.trace_origin_ns) / 1e3;
  for (size_t i = 1; i + 1 < I.marks.size(); ++i) {
    const Impl::Mark& m = I.marks[i];
    const double at = I.ms_of(m);
    if (I.sample_memory) I.samples.push_back({step_base_us + at * 1e3, m.in_use, m.reserved});
    const std::string& stage = Impl::path_of(m);
    if (m.entering) {
      if (!agg.count(stage)) agg[stage].parent = stack.empty() ? std::string() : stack.back().first;
      stack.emplace_back(stage, at);
    } else if (!stack.empty() && stack.back().first == stage) {
      const double begin = stack.back().second;
      stack.pop_back();
      Agg& a = agg[stage];
      a.calls += 1;
      a.inclusive += at - begin;
      if (stack.empty()) top_ms += at - begin;
      else children_ms[stack.back().first] += at - begin;
      I.slices.push_back({stage, m.stream, step_base_us + begin * 1e3, (at - begin) * 1e3});
    }
  }

  // Launches over the step, per exact path.
  std::map<std::string, int64_t> launched;
  for (const StageLaunches& s : launch_atlas()) {
    auto it = I.atlas_before.find(s.stage);
    const int64_t d = s.launches - (it == I.atlas_before.end() ? 0 : it->second);
    if (d != 0) launched[s.stage] = d;
    t.launches += d;
  }
  I.step_launches.emplace_back(step_base_us, t.launches);

  auto parent_of = [&](const std::string& path) -> std::string {
    auto it = agg.find(path);
    return it == agg.end() ? std::string() : it->second.parent;
  };
  // Launches: a stage's own (the atlas counts by exact path) plus its children's.
  std::map<std::string, std::vector<std::string>> children;
  for (const auto& [path, a] : agg) children[a.parent].push_back(path);
  std::function<int64_t(const std::string&)> inclusive_launches = [&](const std::string& path) -> int64_t {
    auto it = launched.find(path);
    int64_t n = it == launched.end() ? 0 : it->second;
    for (const std::string& c : children[path]) n += inclusive_launches(c);
    return n;
  };
  // Depth-first order: std::map orders "a" < "a/b" < "a/c" < "b" when '/' sorts below the
  // name characters, which holds for stage names made of [A-Za-z0-9_].
  for (const auto& [path, a] : agg) {
    StageTime s;
    s.stage = path;
    int depth = 0;
    for (std::string p = parent_of(path); !p.empty(); p = parent_of(p)) ++depth;
    s.depth = depth;
    s.calls = a.calls;
    s.inclusive_ms = a.inclusive;
    s.self_ms = a.inclusive - children_ms[path];
    s.share = t.step_ms > 0.0 ? a.inclusive / t.step_ms : 0.0;
    s.launches = inclusive_launches(path);
    // A stage counts towards the fwd / bwd / optim bucket its path first names ("optim/clip"
    // counts towards optim), unless the scope it ran inside already does.
    const std::string bucket = bucket_of(path);
    if (!bucket.empty() && bucket_of(parent_of(path)).empty()) {
      if (bucket == "fwd") t.fwd_ms += a.inclusive;
      if (bucket == "bwd") t.bwd_ms += a.inclusive;
      if (bucket == "optim") t.optim_ms += a.inclusive;
    }
    // Shown under the scope it ran inside by the rest of its path ("optim/clip" at the top
    // level when it ran outside every other scope).
    const std::string parent = parent_of(path);
    const bool under = !parent.empty() && path.size() > parent.size() && path.compare(0, parent.size(), parent) == 0 &&
                       path[parent.size()] == '/';
    s.label = under ? path.substr(parent.size() + 1) : path;
    t.stages.push_back(std::move(s));
  }
  if (!agg.empty() || t.launches > 0) {
    StageTime outside;
    outside.stage = outside.label = "(outside stages)";
    outside.inclusive_ms = outside.self_ms = t.step_ms - top_ms;
    outside.share = t.step_ms > 0.0 ? outside.inclusive_ms / t.step_ms : 0.0;
    auto it = launched.find("(none)");
    outside.launches = it == launched.end() ? 0 : it->second;
    t.stages.push_back(std::move(outside));
  }
  return t;
}

nlohmann::json StageTimer::chrome_trace() const {
  const Impl& I = *impl_;
  nlohmann::json events = nlohmann::json::array();
  events.push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", {{"name", "lintrain " + I.device.str()}}}});
  std::map<uintptr_t, bool> streams;
  for (const Impl::Slice& s : I.slices) {
    streams[s.stream] = true;
    events.push_back({{"ph", "X"},
                      {"name", s.stage},
                      {"cat", "stage"},
                      {"pid", 0},
                      {"tid", s.stream},
                      {"ts", s.begin_us},
                      {"dur", s.dur_us}});
  }
  for (const auto& [id, unused] : streams) {
    (void)unused;
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", 0},
                      {"tid", id},
                      {"args", {{"name", id == 0 ? std::string("default stream") : "stream " + std::to_string(id)}}}});
  }
  for (const Impl::Sample& s : I.samples)
    events.push_back({{"ph", "C"},
                      {"name", "allocator bytes"},
                      {"pid", 0},
                      {"ts", s.ts_us},
                      {"args", {{"in_use", s.in_use}, {"reserved", s.reserved}}}});
  for (const auto& [ts, n] : I.step_launches)
    events.push_back({{"ph", "C"}, {"name", "launches per step"}, {"pid", 0}, {"ts", ts}, {"args", {{"launches", n}}}});
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

void StageTimer::write_chrome_trace(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw std::runtime_error("timers: cannot write the trace file '" + path + "'");
    f << chrome_trace().dump();
    if (!f) throw std::runtime_error("timers: writing the trace file '" + path + "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("timers: cannot rename '" + tmp + "' to '" + path + "'");
}

}  // namespace lt::train
