// pdl_enabled() (kernels/cuda/pdl.cuh).
#include "kernels/cuda/pdl.cuh"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace lt {

bool pdl_enabled() {
  static const bool allowed = [] {
    const char* e = std::getenv("LINTRAIN_PDL");
    const std::string v = e ? e : "";
    if (!v.empty() && v != "0" && v != "1") throw std::invalid_argument("LINTRAIN_PDL must be 0 or 1, got '" + v + "'");
    return v != "0";
  }();
  if (!allowed) return false;
  int dev = 0, major = 0;
  LT_CUDA_CHECK(cudaGetDevice(&dev));
  LT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major >= 9;
}

}  // namespace lt
