// LT_LAUNCH on a real device: the kernel runs, the launch is counted, a bad launch throws
// with the kernel's name in the message.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "kernels/launch.h"

namespace {
__global__ void fill_iota(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 3 * i + 1;
}
}  // namespace

TEST_CASE("LT_LAUNCH runs, checks and counts", "[launch][cuda]") {
  lt::reset_launch_atlas();
  const int n = 1000;
  int* d = nullptr;
  LT_CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
  {
    lt::StageScope s("test/iota");
    LT_LAUNCH(fill_iota, dim3((n + 255) / 256), dim3(256), 0, cudaStream_t{0}, d, n);
  }
  int h[n];
  LT_CUDA_CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) REQUIRE(h[i] == 3 * i + 1);
  auto atlas = lt::launch_atlas();
  REQUIRE(atlas.size() == 1);
  CHECK(atlas[0].stage == "test/iota");
  CHECK(atlas[0].launches == 1);

  // 4096 threads per block is invalid: the launch error must surface, naming the kernel.
  bool threw = false;
  try {
    LT_LAUNCH(fill_iota, dim3(1), dim3(4096), 0, cudaStream_t{0}, d, n);
  } catch (const std::runtime_error& e) {
    threw = true;
    CHECK(std::string(e.what()).find("fill_iota") != std::string::npos);
  }
  CHECK(threw);
  LT_CUDA_CHECK(cudaFree(d));
  lt::reset_launch_atlas();
}
