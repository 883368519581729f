// Learning-rate schedules: linear warm-up, then constant, cosine or linear decay to
// min_lr_ratio * lr. Pure host functions of the step (no state), so resume is exact.
#pragma once
#include <cstdint>
#include <string>

namespace lt::optim {

enum class LrDecay : uint8_t { constant, cosine, linear };
LrDecay parse_lr_decay(const std::string& name);  // "constant" | "cosine" | "linear"; throws naming it
const char* lr_decay_name(LrDecay d);

struct LrSchedule {
  double lr = 3e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  LrDecay decay = LrDecay::cosine;
  double min_lr_ratio = 0.1;
};

// step is 0-based: step 0 is the first update. warm-up: lr * (step + 1) / warmup_steps.
double lr_at(const LrSchedule& s, int64_t step);

}  // namespace lt::optim
