#include "engine/train/report.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "allocator/caching_allocator.h"

namespace lt::train {

MemoryStats memory_stats(Device device) {
  alloc::Stats s = device.is_cuda() ? alloc::cuda_allocator(device.index).stats() : alloc::host_allocator().stats();
  return {s.allocated_bytes.current, s.reserved_bytes.current, s.allocated_bytes.peak};
}

std::string human_bytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2fG", static_cast<double>(b) / (1 << 30));
  else std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(b) / (1 << 20));
  return buf;
}

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  else std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

double peak_flops(Device device, model::Precision p) {
  if (const char* env = std::getenv("LINTRAIN_PEAK_TFLOPS")) return std::atof(env) * 1e12;
  if (!device.is_cuda()) return 0.0;
  switch (p) {
    case model::Precision::fp32: return 67e12;
    case model::Precision::tf32: return 495e12;
    case model::Precision::bf16: return 989e12;
    case model::Precision::fp64: return 0.0;  // CPU only
  }
  return 0.0;
}

}  // namespace lt::train
