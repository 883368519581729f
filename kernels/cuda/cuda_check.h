// CUDA error checking. Every runtime call goes through LT_CUDA_CHECK; every launch
// through LT_LAUNCH (kernels/launch.h), which calls cuda_check_launch.
#pragma once
#include <cuda_runtime.h>
#include <stdexcept>
#include <string>

namespace lt {

[[noreturn]] inline void cuda_fail(cudaError_t err, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) +
                           ") in " + what + " at " + file + ":" + std::to_string(line));
}

inline void cuda_check_launch(const char* kernel, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) cuda_fail(err, (std::string("launch of ") + kernel).c_str(), file, line);
}

}  // namespace lt

#define LT_CUDA_CHECK(expr)                                                          \
  do {                                                                               \
    cudaError_t lt_err_ = (expr);                                                    \
    if (lt_err_ != cudaSuccess) ::lt::cuda_fail(lt_err_, #expr, __FILE__, __LINE__); \
  } while (0)
