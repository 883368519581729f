// A CUDA graph of one stream's work: captured once, replayed many times (the training step
// when its shapes are static: engine/train/step_graph.h).
//
//   lt::CudaGraph g(device);
//   g.capture([&] { ... ops ... });   // enqueued on g's own stream, recorded, not run
//   g.replay(lt::current_stream(device));   // runs the recorded work, in that stream's order
//
// Memory: the capture runs with g's stream current, so every tensor the ops allocate comes
// from that stream's pools of the caching allocator, which g marks private
// (CachingAllocator::set_stream_private): a replay writes the addresses the capture was given,
// and those stay reserved for the graph until g goes. Blocks freed inside the capture are
// reused inside it (one stream: the recorded order is the execution order); tensors that
// outlive the capture keep their blocks, and a replay rewrites them. Nothing outside the
// graph may allocate on its stream, and what the captured work reads must stay at its address
// (parameters, gradients, fixed input buffers).
// The capture mode is relaxed (other threads may use CUDA meanwhile; the capturing thread may
// call cudaMalloc). A captured body must not synchronise with the device: an operation that
// does fails the capture with a CUDA error, which capture() rethrows after ending it; so does
// an upload of host memory (Tensor::from_vector to the device, copy_ from a CPU tensor): the
// graph would keep the host address and read it, freed, at every replay.
// Launch counts: the capture counts its launches against their stages as usual (the atlas);
// launches() is that number, which a replay reports with count_launch.
// On the CPU backend, or built without CUDA, capture() throws std::runtime_error.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/device.h"

namespace lt {

class CudaGraph {
 public:
  explicit CudaGraph(Device device);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Records what `body` enqueues on the current stream (this graph's stream during the call)
  // and instantiates it. Called once.
  void capture(const std::function<void()>& body);
  bool captured() const { return exec_ != nullptr; }
  // Enqueues one run of the recorded work on `stream` (any stream of the device).
  void replay(const Stream& stream);
  int64_t launches() const { return launches_; }  // kernel launches recorded by the capture
  int64_t nodes() const { return nodes_; }        // the graph's nodes (kernels, memsets, copies)
  const Stream& stream() const { return stream_; }

 private:
  Device device_;
  Stream stream_;          // the capture stream: its allocator pools are the graph's
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  int64_t launches_ = 0, nodes_ = 0;
};

}  // namespace lt
