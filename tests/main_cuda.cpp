// Catch2 main for the CUDA test executable. Without a usable device it prints why and
// exits 77, which CTest reports as "Skipped" (SKIP_RETURN_CODE), so a CPU-only machine
// shows the CUDA tests as skipped rather than passed. Catch2's implementation: tests/catch_impl.cpp.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "tests/support/catch_run.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--list", 6) == 0 || std::strcmp(argv[i], "-l") == 0) listing = true;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (!listing && (err != cudaSuccess || count == 0)) {
    std::printf("SKIPPED: lintrain_cuda_tests: no usable CUDA device (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "device count 0");
    return 77;
  }
  return lt::test::run_catch(argc, argv);
}
