// The launch atlas: every kernel launch is counted against a named stage.
//
//   { lt::StageScope s("fwd/L0/kda/intra");  ... LT_LAUNCH(kernel, grid, block, smem, stream, args...); }
//
// Stages nest: a StageScope("intra") inside StageScope("fwd/L0/kda") names the stage
// "fwd/L0/kda/intra". Launches outside any scope count against "(none)".
// The atlas is process-wide and thread-safe; counting costs one mutex-free thread-local
// lookup plus an atomic increment. The timers (engine) build CUDA events on the stage
// hooks below; the allocator's trace carries the current stage name as its tag.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lt {

struct StageLaunches {
  std::string stage;     // full stage path, e.g. "bwd/L1/kda/inter_adjoint"
  int64_t launches = 0;  // kernel launches counted since the last reset
};

// Current full stage path of this thread ("" outside any scope).
const std::string& current_stage();

// RAII scope: pushes `name` onto this thread's stage path; pops on destruction.
class StageScope {
 public:
  explicit StageScope(std::string_view name);
  ~StageScope();
  StageScope(const StageScope&) = delete;
  StageScope& operator=(const StageScope&) = delete;

 private:
  size_t previous_length_;
};

// Counts one launch against the current stage. Called by LT_LAUNCH; call it yourself
// for launches made by libraries (cuBLAS) that you want in the atlas.
void count_launch(int64_t n = 1);

// Snapshot of the atlas, sorted by stage name; and a reset (e.g. after warm-up).
std::vector<StageLaunches> launch_atlas();
void reset_launch_atlas();
int64_t total_launches();

// Hooks called when a stage scope is entered / left (engine's timers record events here).
// At most one listener; pass nullptr to remove it.
using StageListener = std::function<void(const std::string& stage, bool entering)>;
void set_stage_listener(StageListener listener);

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
