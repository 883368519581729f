// Learning-rate schedules (engine/optim/schedule.h). With W = warmup_steps, N = total_steps,
// lo = min_lr_ratio * lr:
//   step < W:   lr * (step + 1) / W
//   otherwise:  progress = clamp((step - W) / (N - W), 0, 1)   (1 when N <= W)
//               constant  lr
//               cosine    lr - (lr - lo) * (1 - cos(pi * progress)) / 2   (= lr at progress 0)
//               linear    lr - (lr - lo) * progress
// Steps at or past N stay at the end value (lo; lr for constant).
#include "engine/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace lt::optim {

LrDecay parse_lr_decay(const std::string& name) {
  if (name == "constant") return LrDecay::constant;
  if (name == "cosine") return LrDecay::cosine;
  if (name == "linear") return LrDecay::linear;
  throw std::invalid_argument("unknown lr decay \"" + name + "\" (expected constant, cosine or linear)");
}

const char* lr_decay_name(LrDecay d) {
  switch (d) {
    case LrDecay::constant: return "constant";
    case LrDecay::cosine: return "cosine";
    case LrDecay::linear: return "linear";
  }
  return "?";
}

double lr_at(const LrSchedule& s, int64_t step) {
  if (!std::isfinite(s.lr) || s.lr < 0.0)
    throw std::invalid_argument("lr_at: lr " + std::to_string(s.lr) + " must be finite and >= 0");
  if (s.warmup_steps < 0) throw std::invalid_argument("lr_at: warmup_steps " + std::to_string(s.warmup_steps) + " < 0");
  if (s.total_steps < 1) throw std::invalid_argument("lr_at: total_steps " + std::to_string(s.total_steps) + " < 1");
  if (!(s.min_lr_ratio >= 0.0 && s.min_lr_ratio <= 1.0))
    throw std::invalid_argument("lr_at: min_lr_ratio " + std::to_string(s.min_lr_ratio) + " outside [0, 1]");
  if (step < 0) throw std::invalid_argument("lr_at: step " + std::to_string(step) + " < 0");

  if (step < s.warmup_steps) return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.decay == LrDecay::constant) return s.lr;
  const int64_t span = s.total_steps - s.warmup_steps;
  const double progress =
      span <= 0 ? 1.0 : std::clamp(static_cast<double>(step - s.warmup_steps) / static_cast<double>(span), 0.0, 1.0);
  const double lo = s.min_lr_ratio * s.lr;
  if (s.decay == LrDecay::cosine) return s.lr - (s.lr - lo) * 0.5 * (1.0 - std::cos(std::numbers::pi * progress));
  return s.lr - (s.lr - lo) * progress;
}

}  // namespace lt::optim
