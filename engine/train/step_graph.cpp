// The training step as a CUDA graph (engine/train/step_graph.h).
#include "engine/train/step_graph.h"

#include <stdexcept>

#include "allocator/caching_allocator.h"

namespace lt::train {

void StepGraph::stage_inputs(const std::vector<data::DeviceBatch>& batches) {
  if (inputs_.empty()) {
    for (const data::DeviceBatch& b : batches)
      inputs_.push_back({Tensor::empty(b.tokens.shape(), b.tokens.dtype(), b.tokens.device()),
                         Tensor::empty(b.targets.shape(), b.targets.dtype(), b.targets.device())});
  }
  if (inputs_.size() != batches.size()) throw std::logic_error("StepGraph: the number of micro-batches changed");
  for (size_t i = 0; i < batches.size(); ++i) {
    inputs_[i].tokens.copy_(batches[i].tokens);
    inputs_[i].targets.copy_(batches[i].targets);
  }
}

void StepGraph::capture(const std::function<Tensor()>& body) {
  graph_.capture([&] { norm_ = body(); });
  // The warm-up steps' activations are cached in the shared pools: the graph has its own now.
  alloc::cuda_allocator(device_.index).empty_cache();
}

const Tensor& StepGraph::replay(const Stream& stream) {
  graph_.replay(stream);
  return norm_;
}

}  // namespace lt::train
