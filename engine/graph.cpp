// CUDA graphs of one stream's work (engine/graph.h); CUDA half compiled with
// LINTRAIN_WITH_CUDA only.
#include "engine/graph.h"

#include <stdexcept>
#include <string>

#include "allocator/caching_allocator.h"
#include "engine/detail.h"
#include "kernels/launch.h"

#if LINTRAIN_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#endif

namespace lt {

CudaGraph::CudaGraph(Device device) : device_(device) {
  if (!device.is_cuda()) throw std::runtime_error("CudaGraph on " + device.str() + ": CUDA graphs need a CUDA device");
  stream_ = Stream::create(device);
}

CudaGraph::~CudaGraph() {
#if LINTRAIN_WITH_CUDA
  if (exec_) {
    // The last replay may still run: the graph's memory goes back to the pools only after it.
    cudaDeviceSynchronize();
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  }
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  alloc::cuda_allocator(device_.index).set_stream_private(stream_.id(), false);
#endif
}

void CudaGraph::capture(const std::function<void()>& body) {
  if (graph_ || exec_) throw std::logic_error("CudaGraph::capture: already captured");
#if LINTRAIN_WITH_CUDA
  detail::DeviceScope scope(device_);
  alloc::cuda_allocator(device_.index).set_stream_private(stream_.id(), true);
  auto s = static_cast<cudaStream_t>(stream_.handle());
  const int64_t before = total_launches();
  {
    StreamGuard guard(stream_);
    LT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    try {
      body();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(s, &broken);  // ends the (possibly invalidated) capture
      if (broken) cudaGraphDestroy(broken);
      cudaGetLastError();  // the capture's error is reported by the exception, not kept
      throw;
    }
    cudaGraph_t g = nullptr;
    LT_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    graph_ = g;
  }
  launches_ = total_launches() - before;
  size_t n = 0;
  LT_CUDA_CHECK(cudaGraphGetNodes(static_cast<cudaGraph_t>(graph_), nullptr, &n));
  nodes_ = static_cast<int64_t>(n);
  cudaGraphExec_t exec = nullptr;
  LT_CUDA_CHECK(cudaGraphInstantiate(&exec, static_cast<cudaGraph_t>(graph_), 0));
  exec_ = exec;
#else
  (void)body;
  throw std::runtime_error("CudaGraph::capture: built without CUDA");
#endif
}

void CudaGraph::replay(const Stream& stream) {
  if (!exec_) throw std::logic_error("CudaGraph::replay: nothing captured");
#if LINTRAIN_WITH_CUDA
  detail::DeviceScope scope(device_);
  note_device_work();
  LT_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream.handle())));
#else
  (void)stream;
#endif
}

}  // namespace lt
