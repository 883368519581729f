// The pieces of a step's report (the progress line and its metrics.jsonl record): memory figures
// of the caching allocator, human-readable sizes and durations, the peak FLOP/s that MFU divides by.
#pragma once
#include <cstdint>
#include <string>

#include "engine/device.h"
#include "engine/model/config.h"

namespace lt::train {

struct MemoryStats {
  int64_t in_use = 0, reserved = 0, peak = 0;  // bytes of the device's caching allocator
};
MemoryStats memory_stats(Device device);

std::string human_bytes(int64_t b);          // "1.25G", "48.0M"
std::string human_duration(double seconds);  // "1h02m", "3m07s"; "?" when not finite

// Dense peak FLOP/s for MFU: LINTRAIN_PEAK_TFLOPS, else an H100/H200-class figure for the
// precision; 0 (MFU not shown) on the CPU.
double peak_flops(Device device, model::Precision p);

}  // namespace lt::train
