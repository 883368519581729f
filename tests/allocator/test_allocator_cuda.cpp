// The caching allocator on a real CUDA device: cudaMalloc backend alloc/free/reuse and
// stats, poison fills read back from device memory, two real streams with record_stream
// (the other stream is held busy by a host function until the test releases it), device
// OOM message, and the process-wide cuda_allocator accessor.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "allocator/caching_allocator.h"

using namespace lt::alloc;

namespace {

constexpr size_t MiB = 1024 * 1024;

#define CUDA_OK(expr) REQUIRE((expr) == cudaSuccess)

StreamId sid(cudaStream_t s) { return reinterpret_cast<StreamId>(s); }

// Blocks the stream it is enqueued on until `release` is set (or 20 s pass, so a failing
// test cannot hang the suite).
struct StreamGate {
  std::atomic<bool> release{false};
  static void CUDART_CB wait(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!gate->release.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
};

}  // namespace

TEST_CASE("cuda: cudaMalloc backend allocates, frees and reuses with exact stats", "[allocator]") {
  CachingAllocator a(make_cuda_backend(0));
  a.set_poison(false);
  void* p = a.allocate(3 * MiB + 5);
  REQUIRE(p != nullptr);
  cudaPointerAttributes attr{};
  CUDA_OK(cudaPointerGetAttributes(&attr, p));
  CHECK(attr.type == cudaMemoryTypeDevice);
  CHECK(attr.device == 0);
  // The memory is usable: write on the device, read back.
  CUDA_OK(cudaMemset(p, 0x5A, 3 * MiB + 5));
  std::vector<unsigned char> host(3 * MiB + 5);
  CUDA_OK(cudaMemcpy(host.data(), p, host.size(), cudaMemcpyDeviceToHost));
  CHECK(host.front() == 0x5A);
  CHECK(host.back() == 0x5A);
  Stats st = a.stats();
  CHECK(st.num_device_alloc == 1);
  CHECK(st.reserved_bytes.current == int64_t(20 * MiB));
  CHECK(st.allocated_bytes.current == int64_t(3 * MiB + 512));
  CHECK(st.requested_bytes.current == int64_t(3 * MiB + 5));
  a.free(p);
  void* q = a.allocate(3 * MiB + 5);
  CHECK(q == p);  // served from the cache
  void* r = a.allocate(1000);
  st = a.stats();
  CHECK(st.num_device_alloc == 2);  // the small pool has its own 2 MiB segment
  CHECK(st.num_cache_hits == 1);
  CHECK(st.allocation.current == 2);
  CHECK(st.allocation.peak == 2);
  a.free(q);
  a.free(r);
  a.empty_cache();
  st = a.stats();
  CHECK(st.reserved_bytes.current == 0);
  CHECK(st.num_device_free == 2);
  CHECK(st.reserved_bytes.peak == int64_t(22 * MiB));
}

TEST_CASE("cuda: poison mode fills device blocks with 0xFF (NaN) on the allocation stream", "[allocator]") {
  CachingAllocator a(make_cuda_backend(0));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Dirty a block first, so the poison is visible on reuse too.
  void* d = a.allocate(1 * MiB, sid(s));
  CUDA_OK(cudaMemsetAsync(d, 0, 1 * MiB, s));
  a.free(d);
  a.set_poison(true);
  for (size_t bytes : {size_t(1 * MiB), size_t(4096), size_t(5 * MiB + 3)}) {
    void* p = a.allocate(bytes, sid(s));
    const size_t block = a.block_size(p);
    std::vector<unsigned char> host(block, 0);
    CUDA_OK(cudaMemcpyAsync(host.data(), p, block, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    size_t bad = 0;
    for (unsigned char c : host) bad += c != 0xFF;
    CHECK(bad == 0);
    float f;
    std::memcpy(&f, host.data(), sizeof f);
    CHECK(std::isnan(f));
    a.free(p);
  }
  CUDA_OK(cudaStreamSynchronize(s));
  a.empty_cache();
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_CASE("cuda: record_stream holds a block until the other stream's work is done", "[allocator]") {
  CachingAllocator a(make_cuda_backend(0));
  a.set_poison(false);
  cudaStream_t s1, s2;
  CUDA_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  void* p = a.allocate(256 * 1024, sid(s1));
  CUDA_OK(cudaMemsetAsync(p, 1, 256 * 1024, s1));
  CUDA_OK(cudaStreamSynchronize(s1));
  // s2 "uses" p: a copy out of p queued behind a gate that keeps s2 busy.
  StreamGate gate;
  void* sink = nullptr;
  CUDA_OK(cudaMalloc(&sink, 256 * 1024));
  CUDA_OK(cudaLaunchHostFunc(s2, &StreamGate::wait, &gate));
  CUDA_OK(cudaMemcpyAsync(sink, p, 256 * 1024, cudaMemcpyDeviceToDevice, s2));
  a.record_stream(p, sid(s2));
  a.free(p);
  Stats st = a.stats();
  CHECK(st.allocation.current == 0);
  CHECK(st.active.current == 1);  // waiting for s2's event
  // While s2 is held, an equal request on s1 must not get p.
  void* q = a.allocate(256 * 1024, sid(s1));
  CHECK(q != p);
  CHECK(a.stats().active.current == 2);
  gate.release.store(true);
  CUDA_OK(cudaStreamSynchronize(s2));
  // The event has completed: the next allocation processes it and reuses p.
  void* r = a.allocate(256 * 1024, sid(s1));
  CHECK(r == p);
  CHECK(a.stats().active.current == 2);
  a.free(q);
  a.free(r);
  CUDA_OK(cudaFree(sink));
  a.empty_cache();
  CHECK(a.stats().reserved_bytes.current == 0);
  CUDA_OK(cudaStreamDestroy(s1));
  CUDA_OK(cudaStreamDestroy(s2));
}

TEST_CASE("cuda: an impossible request throws OutOfMemoryError with the device figures", "[allocator]") {
  CachingAllocator a(make_cuda_backend(0));
  void* keep = a.allocate(1 * MiB);
  size_t free_b = 0, total_b = 0;
  CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  std::string msg;
  try {
    a.allocate(total_b * 2);
    FAIL("expected OutOfMemoryError");
  } catch (const OutOfMemoryError& e) { msg = e.what(); }
  INFO(msg);
  CHECK_THAT(msg, Catch::Contains("cuda:0 out of memory. Tried to allocate"));
  CHECK_THAT(msg, Catch::Contains("total capacity of"));
  CHECK_THAT(msg, Catch::Contains("segments; largest free block"));
  Stats st = a.stats();
  CHECK(st.num_ooms == 1);
  CHECK(st.num_alloc_retries == 1);
  CHECK(cudaGetLastError() == cudaSuccess);  // the failed cudaMalloc left no sticky error
  a.free(keep);
}

TEST_CASE("cuda: process-wide cuda_allocator and its errors", "[allocator]") {
  CachingAllocator& a = cuda_allocator(0);
  CHECK(&a == &cuda_allocator(0));
  CHECK(a.device() == 0);
  CHECK(std::string(a.backend_name()) == "cuda");
  Buffer b = alloc_buffer(a, 12345);
  CHECK(a.owns(b.data()));
  int count = 0;
  CUDA_OK(cudaGetDeviceCount(&count));
  CHECK_THROWS_WITH(cuda_allocator(count), Catch::Contains("device(s) are visible"));
  // A device pointer freed on the host allocator is an error, not corruption.
  CHECK_THROWS_WITH(host_allocator().free(b.data()), Catch::Contains("not allocated by this allocator"));
}
