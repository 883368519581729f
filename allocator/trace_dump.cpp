// Trace dumps of the caching allocator (formats documented in docs/ALLOCATOR.md):
//   1. memory snapshot in the schema of torch.cuda.memory._snapshot(): "segments" (state
//      now, i.e. at the end of the trace) and "device_traces" (the ring buffer, oldest first);
//      written as JSON or as a protocol-2 pickle (pickle.h);
//   2. Chrome trace (Perfetto, chrome://tracing): counter tracks in_use / reserved and
//      instant events for segment allocs/frees, empty_cache, OOM and step changes.
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "allocator/detail/allocator_impl.h"

namespace lt::alloc {

namespace {

nlohmann::json frames_for(const std::string& stage) {
  const std::string& name = stage.empty() ? std::string("(no stage)") : stage;
  return nlohmann::json::array({{{"filename", name}, {"line", 0}, {"name", name}}});
}

std::string hex(uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, v);
  return buf;
}

}  // namespace

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("lt::alloc: cannot open " + path + " for writing");
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) throw std::runtime_error("lt::alloc: error writing " + path);
}

nlohmann::json snapshot_json_locked(const CachingAllocator::Impl& impl, int device) {
  using nlohmann::json;
  // torch's viewers index device_traces by device; the host allocator appears as device 0.
  const int dev = device < 0 ? 0 : device;

  json segments = json::array();
  for (const auto& [base, seg] : impl.segments) {
    json blocks = json::array();
    uint64_t allocated = 0, active = 0, requested = 0;
    for (const Block* b = seg->head; b; b = b->next) {
      bool is_active = b->allocated || b->event_count > 0;
      const char* state = b->allocated ? "active_allocated" : (is_active ? "active_pending_free" : "inactive");
      json jb = {{"address", b->ptr},
                 {"size", b->size},
                 {"requested_size", is_active ? b->requested : 0},
                 {"state", state},
                 {"frames", is_active ? frames_for(impl.stage_names[b->stage_id]) : json::array()}};
      if (b->allocated) {
        allocated += b->size;
        requested += b->requested;
      }
      if (is_active) active += b->size;
      blocks.push_back(std::move(jb));
    }
    segments.push_back({{"device", dev},
                        {"address", base},
                        {"total_size", seg->size},
                        {"allocated_size", allocated},
                        {"active_size", active},
                        {"requested_size", requested},
                        {"stream", seg->stream},
                        {"segment_type", seg->is_large ? "large" : "small"},
                        {"segment_pool_id", json::array({0, 0})},
                        {"is_expandable", false},
                        {"frames", json::array()},
                        {"blocks", std::move(blocks)}});
  }

  json trace = json::array();
  for (const RawTraceEvent& e : impl.ordered_trace()) {
    const std::string& stage = impl.stage_names[e.stage_id];
    json je = {{"action", trace_action_name(e.action)}};
    if (e.action == TraceAction::oom) je["device_free"] = e.device_free < 0 ? 0 : e.device_free;
    else je["addr"] = e.addr;
    je["size"] = e.size;
    je["stream"] = e.stream;
    je["time_us"] = e.time_us;
    je["frames"] = frames_for(stage);
    // lintrain extras (ignored by torch's viewers):
    je["requested_size"] = e.requested_size;
    je["step"] = e.step;
    je["stage"] = stage;
    trace.push_back(std::move(je));
  }
  json device_traces = json::array();
  for (int d = 0; d < dev; ++d) device_traces.push_back(json::array());
  device_traces.push_back(std::move(trace));

  json out;
  out["segments"] = std::move(segments);
  out["device_traces"] = std::move(device_traces);
  out["allocator_settings"] = {{"PYTORCH_CUDA_ALLOC_CONF", ""},
                               {"max_split_size", impl.max_split_size},
                               {"garbage_collection_threshold", 0.0},
                               {"expandable_segments", false},
                               {"roundup_power2_divisions", json::object()}};
  out["external_annotations"] = json::array();
  out["lintrain"] = {{"backend", impl.backend->name()},
                     {"device", device},
                     {"tracing", impl.tracing},
                     {"trace_capacity", impl.trace_capacity},
                     {"trace_dropped", impl.trace_dropped},
                     {"min_block_size", kMinBlockSize},
                     {"small_size", kSmallSize},
                     {"small_buffer", kSmallBuffer},
                     {"min_large_alloc", kMinLargeAlloc},
                     {"large_buffer", kLargeBuffer},
                     {"round_large", kRoundLarge},
                     {"max_split_size", impl.max_split_size}};
  return out;
}

nlohmann::json chrome_trace_locked(const CachingAllocator::Impl& impl, int device, const char* backend) {
  using nlohmann::json;
  const int pid = device < 0 ? 0 : device;
  std::string label = std::string("lt::alloc ") + backend;
  if (device >= 0) label.append(1, ':').append(std::to_string(device));
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", label}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", "allocator"}}}});

  std::vector<RawTraceEvent> trace = impl.ordered_trace();
  const int64_t t0 = trace.empty() ? 0 : trace.front().time_us;
  int64_t last_in_use = -1, last_reserved = -1, last_step = INT64_MIN;
  for (const RawTraceEvent& e : trace) {
    const int64_t ts = e.time_us - t0;
    const std::string& stage = impl.stage_names[e.stage_id];
    if (e.step != last_step) {
      events.push_back({{"name", "step " + std::to_string(e.step)},
                        {"ph", "i"},
                        {"s", "p"},
                        {"ts", ts},
                        {"pid", pid},
                        {"tid", 0},
                        {"args", {{"step", e.step}}}});
      last_step = e.step;
    }
    if (e.allocated_bytes != last_in_use) {
      events.push_back(
          {{"name", "in_use"}, {"ph", "C"}, {"ts", ts}, {"pid", pid}, {"args", {{"bytes", e.allocated_bytes}}}});
      last_in_use = e.allocated_bytes;
    }
    if (e.reserved_bytes != last_reserved) {
      events.push_back(
          {{"name", "reserved"}, {"ph", "C"}, {"ts", ts}, {"pid", pid}, {"args", {{"bytes", e.reserved_bytes}}}});
      last_reserved = e.reserved_bytes;
    }
    switch (e.action) {
      case TraceAction::segment_alloc:
      case TraceAction::segment_free:
      case TraceAction::empty_cache:
        events.push_back(
            {{"name", trace_action_name(e.action)},
             {"ph", "i"},
             {"s", "t"},
             {"ts", ts},
             {"pid", pid},
             {"tid", 0},
             {"args",
              {{"addr", hex(e.addr)}, {"size", e.size}, {"stream", e.stream}, {"step", e.step}, {"stage", stage}}}});
        break;
      case TraceAction::oom:
        events.push_back({{"name", "oom"},
                          {"ph", "i"},
                          {"s", "g"},
                          {"ts", ts},
                          {"pid", pid},
                          {"tid", 0},
                          {"args",
                           {{"size", e.size},
                            {"requested_size", e.requested_size},
                            {"stream", e.stream},
                            {"device_free", e.device_free},
                            {"step", e.step},
                            {"stage", stage}}}});
        break;
      default: break;
    }
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"allocator", label}, {"time_origin_us", t0}, {"trace_dropped", impl.trace_dropped}}}};
}

}  // namespace lt::alloc
