// Fault injection for the skip machinery's tests and drills: LINTRAIN_INJECT_NONFINITE="3,7,10..12"
// names steps whose loss the loop makes NaN on the device after their backward, so that their
// update is skipped through the device-side gate exactly as for a real NaN (engine/train/loop.h).
#pragma once
#include <cstdint>
#include <vector>

namespace lt::train {

// The steps of LINTRAIN_INJECT_NONFINITE (1-based, sorted, unique; empty when unset), read once
// per process; ConfigError naming the variable and the bad item on a bad list.
const std::vector<int64_t>& inject_nonfinite_steps();

}  // namespace lt::train
