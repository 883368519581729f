// The launch atlas: every kernel launch is counted against a named stage.
//
//   { lt::StageScope s("fwd/L0/kda/intra");  ... LT_LAUNCH(kernel, grid, block, smem, stream, args...); }
//
// Stages nest: a StageScope("intra") inside StageScope("fwd/L0/kda") names the stage
// "fwd/L0/kda/intra". Launches outside any scope count against "(none)".
// The atlas is process-wide and thread-safe. Each thread keeps a tree of the scopes it has
// entered (a StageNode per distinct enclosing scope and name, made the first time and kept
// for the life of the process), so entering a scope is a scan of the current node's few
// children and a pointer move: no string is built and nothing is allocated after the first
// time. Counting a launch is an atomic increment of the node's counter. The timers (engine)
// build CUDA events on the stage hooks below; the allocator's trace carries the current
// stage name as its tag.
//
// Build option LINTRAIN_STAGE_TIMERS (CMake, default ON): OFF compiles the stage hooks out of
// StageScope (no hook is ever called, stage_hooks_compiled() is false, and the per-stage
// timers cannot time stages). What stays: the stage path (the allocator's tags use it) and
// the launch counts (the bench's launches per step use them).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#ifndef LINTRAIN_STAGE_TIMERS
#define LINTRAIN_STAGE_TIMERS 1
#endif

namespace lt {

struct StageLaunches {
  std::string stage;     // full stage path, e.g. "bwd/L1/kda/inter_adjoint"
  int64_t launches = 0;  // kernel launches counted since the last reset
};

// One scope of a thread's stage tree. Immutable once made (except for its children, which
// only the owning thread touches), never freed: a pointer to it stays valid.
struct StageNode {
  const StageNode* parent = nullptr;  // the enclosing scope (nullptr for a thread's root)
  std::string name;                   // as given to StageScope ("" for the root)
  std::string path;                   // full path ("" for the root)
  uint32_t id = 0;                    // unique in the process; 0 only for roots
};

// Current full stage path of this thread ("" outside any scope), and its node.
const std::string& current_stage();
const StageNode& current_stage_node();

// RAII scope: pushes `name` onto this thread's stage path; pops on destruction.
class StageScope {
 public:
  explicit StageScope(std::string_view name);
  ~StageScope();
  StageScope(const StageScope&) = delete;
  StageScope& operator=(const StageScope&) = delete;

 private:
  StageNode* previous_;
};

// Counts one launch against the current stage. Called by LT_LAUNCH; call it yourself
// for launches made by libraries (cuBLAS) that you want in the atlas.
void count_launch(int64_t n = 1);

// Device work this thread has enqueued: kernel launches (count_launch) plus the copies and
// memsets reported with note_device_work. The timers compare it across two stage boundaries:
// when nothing was enqueued in between, both boundaries share one CUDA event.
void note_device_work();
uint64_t device_work_count();

// Snapshot of the atlas, sorted by stage name; and a reset (e.g. after warm-up).
std::vector<StageLaunches> launch_atlas();
void reset_launch_atlas();
int64_t total_launches();

// Hooks called when a stage scope is entered / left, on the thread that does it (engine's
// timers record events here). Leaving reports the node being left. At most one hook; a new
// one replaces the old; pass nullptr to remove it. A hook is a plain function and a context
// pointer, read without a lock: the context must outlive any scope entered while it is set.
using StageHook = void (*)(void* context, const StageNode& node, bool entering);
void set_stage_hook(StageHook hook, void* context);
// The same with a std::function of the path (convenient for tests and tools; costs a
// std::function call per boundary).
using StageListener = std::function<void(const std::string& stage, bool entering)>;
void set_stage_listener(StageListener listener);
// Whether a hook is installed now (a timed step is under way: its stages must be enqueued
// as they run, not replayed from a CUDA graph).
bool stage_hook_installed();
// False when built with LINTRAIN_STAGE_TIMERS=OFF: hooks are never called.
constexpr bool stage_hooks_compiled() { return LINTRAIN_STAGE_TIMERS != 0; }

}  // namespace lt

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#include "kernels/cuda/cuda_check.h"
// Launch `kernel<<<grid, block, smem, stream>>>(args...)`, check the launch error (with the
// kernel's name in the message) and count it against the current stage.
#define LT_LAUNCH(kernel, grid, block, smem, stream, ...)         \
  do {                                                            \
    (kernel)<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__); \
    ::lt::cuda_check_launch(#kernel, __FILE__, __LINE__);         \
    ::lt::count_launch();                                         \
  } while (0)
#endif
