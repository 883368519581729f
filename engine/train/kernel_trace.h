// The kernels of the timed steps from a profiler, to check the timers against it:
// `trainer --timers step%50 --kernel-trace FILE` (FILE: one JSON line per timed step) and
// scripts/timer_fidelity.py, which compares each stage's event time and launch count with
// the kernels recorded here.
//
// How. KernelRecorder records CUPTI's Activity API (CONCURRENT_KERNEL: name, start, end,
// stream, correlation id; MEMCPY and MEMSET as copies) between a timed step's begin and end only. libcupti is loaded at
// run time with dlopen, so the trainer has no link dependency on it and runs where it is
// absent; the recorder is compiled only when cupti.h was found at build time (compiled()).
// Attribution: at every stage boundary of a timed step the timer pushes (entering) or pops
// (leaving) the stage node's id as CUPTI's external correlation id (kind CUSTOM0); CUPTI then
// emits, for each runtime / driver API call (a kernel launch), a record joining the call's
// correlation id to the innermost stage's id, and the kernel record carries the same
// correlation id. So each kernel gets the chain of scopes it was launched inside (outermost
// first), whatever their names, and a stage's kernels are those whose chain holds it.
// Kernels launched outside every stage get an empty chain.
// Timestamps are CUPTI's (ns, GPU timestamps converted to the host's clock); only their
// differences are used. The API and correlation records cost host time on the steps that
// are recorded: those steps' event times carry that cost, their kernels do not.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "kernels/launch.h"

namespace lt::train {

// A kernel, or (in a step's copies) a memcpy / memset on the device.
struct KernelRecord {
  std::string name;                 // the kernel's name, demangled when possible; "memcpy" / "memset"
  std::vector<std::string> stages;  // paths of the scopes it was launched in, outermost first
  int64_t start_ns = 0, end_ns = 0;
  uint64_t stream = 0;       // CUPTI's stream id
  uint32_t correlation = 0;  // CUPTI's correlation id of the launch
  int64_t bytes = 0;         // copies: bytes moved or set
};

// The kernel-trace line of one timed step:
//   {"kind": "kernel-trace", "version": 1, "step": 0, "train_step": 21, "dropped": 0,
//    "kernels": [{"name": .., "stage": "fwd/L0/attn/kda", "stages": ["fwd", "fwd/L0/attn/kda"],
//                 "start_ns": .., "end_ns": .., "stream": .., "correlation": ..}, ...],
//    "copies": [{"name": "memcpy", "stage": .., "stages": [..], "start_ns": .., "end_ns": .., "stream": ..,
//                "correlation": .., "bytes": ..}, ...]}
// "stage" is the innermost scope ("" outside every stage); kernels and copies sorted by start.
// Copies (memcpy, memset) are not kernels and are not counted as launches; they are listed so
// that a stage whose event time holds a copy shows it.
// `step` counts like the timers' (0 = first after warm-up), `train_step` is the loop's step.
nlohmann::json kernel_trace_line(int64_t step, int64_t train_step, std::vector<KernelRecord> kernels, int64_t dropped,
                                 std::vector<KernelRecord> copies = {});

class KernelRecorder {
 public:
  // True when this build has the recorder (cupti.h was found when it was built).
  static bool compiled();
  // Loads libcupti and registers the activity buffers. Tries $LINTRAIN_CUPTI_LIB, then
  // libcupti.so.13, libcupti.so, libcupti.so.12 on the loader's path, then the CUDA
  // toolkit's lib64 and extras/CUPTI/lib64 folders. Throws std::runtime_error naming what
  // was tried, or saying that this build has no recorder. One recorder per process.
  explicit KernelRecorder(Device device);
  ~KernelRecorder();
  KernelRecorder(const KernelRecorder&) = delete;
  KernelRecorder& operator=(const KernelRecorder&) = delete;

  // Where libcupti was loaded from.
  std::string library() const;
  void begin_step();                  // enables the activity kinds
  void enter(const StageNode& node);  // pushes the node's id
  void leave();                       // pops it
  // After the device has finished the step: disables the kinds, flushes CUPTI's buffers and
  // returns the step's kernels (attributed); copies() then has its copies. dropped() counts
  // records CUPTI lost.
  std::vector<KernelRecord> end_step();
  const std::vector<KernelRecord>& copies() const;
  int64_t dropped() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lt::train
