// The training step's device work as one CUDA graph (train.cuda_graph, CUDA, default on):
// zero_grad, every micro-batch's forward and backward, and the gradient norm, captured once
// and replayed at every later step whose shapes and scalars are the captured ones. The steps
// stay bit-identical to eager ones (the same kernels with the same arguments, in the same
// order); what a replay saves is the host's launch work and the gaps between launches.
//
// Which steps replay (Trainer::enqueue_step): one process (not data parallel), on CUDA, a
// step with no packed-document restarts (their layout changes from batch to batch), not a
// timed step (--timers: its stages are enqueued as they run, with their events). The first
// kWarmupSteps steps that qualify run eagerly (one-time set-up: cuBLAS, the pools); the next
// is captured and replayed. Any other step runs eagerly, on the same parameters and
// gradients. A capture that fails (an operation that cannot be captured) is reported once
// and the run goes on without a graph.
// Inputs: each micro-batch's tokens and targets are copied into fixed buffers before a
// replay (the graph reads those addresses); the loss scale 1 / (scored targets), which
// changes from step to step, is read on the device from the trainer's scalar (eager steps
// read it the same way, so both compute the same bits). Memory: the graph's activations live
// in its own private pool (engine/graph.h); right after the capture the eager warm-up steps'
// cached segments are returned (empty_cache), so a run that replays every step reserves the
// step's activations once. Later eager steps (timed, packed) grow the shared pools again.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/data/loader.h"
#include "engine/graph.h"
#include "engine/tensor.h"

namespace lt::train {

class StepGraph {
 public:
  static constexpr int64_t kWarmupSteps = 2;

  explicit StepGraph(Device device) : device_(device), graph_(device) {}

  // Whether a step that qualifies (see above) runs from the graph; counts the warm-up steps.
  bool use_now() { return graph_.captured() || ++warmup_seen_ > kWarmupSteps; }
  bool captured() const { return graph_.captured(); }
  // Copies the micro-batches into the fixed input buffers (made on first use, on the current
  // stream).
  void stage_inputs(const std::vector<data::DeviceBatch>& batches);
  const std::vector<data::DeviceBatch>& inputs() const { return inputs_; }
  // Captures `body` (which reads inputs() and returns the gradient norm tensor). Throws what
  // the capture throws.
  void capture(const std::function<Tensor()>& body);
  // Runs the recorded step on `stream`; the norm tensor it rewrites.
  const Tensor& replay(const Stream& stream);
  int64_t launches() const { return graph_.launches(); }
  int64_t nodes() const { return graph_.nodes(); }

 private:
  Device device_;
  CudaGraph graph_;
  std::vector<data::DeviceBatch> inputs_;
  Tensor norm_;
  int64_t warmup_seen_ = 0;
};

}  // namespace lt::train
