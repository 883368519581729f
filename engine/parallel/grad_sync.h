// Data-parallel gradient synchronisation over the model's flat arenas (engine/model/model.h).
//
//   dist::GradSync sync(comm, model, cfg);              // once
//   per step:  sync.begin_step();
//              model.forward_backward(..., &sync.hook()) on the step's last micro-batch
//              sync.finish(step_scalars);               // the rest of the buckets, the scalars
//              norm = sync.grad_norm();                 // identical on every rank
//              optim::adamw_step(sync.update_arenas(), ...);  then sync.after_update()
//
// Semantics. Every rank's loss is its rows' token losses times 1 / (valid targets of the whole
// global batch), so the sum over ranks of the ranks' gradients is the global batch's gradient:
// the reductions are sums, with no division by the world size.
//
// Buckets. The gradient arena [P] is cut into contiguous buckets of about bucket_bytes (a
// bucket ends at the first parameter end at or past that size; a larger parameter is a bucket
// of its own). A bucket is reduced once all of its parameters' gradients are final: the model's
// GradsReadyHook reports parameters in the order the backward finishes them, and with
// `overlap` each bucket's reduction is enqueued on the communication stream the moment its
// last parameter is reported, after an event on the compute stream, so it runs under the rest
// of the backward. Without `overlap` (or when a step has no hook) every bucket is reduced in
// finish(), in arena order. All ranks run the same program, so they issue the same collectives
// in the same order.
// Reduction dtype. f32: the gradients are reduced in place. bf16: each bucket is converted
// into a persistent bf16 buffer on the communication stream, reduced there and converted back
// (half the bytes on the wire; bf16 rounding of the summands and the sum).
// ZeRO stage 1 (`zero1`). The arena is split into world even shards (dist::even_shards);
// each bucket is reduce-scattered instead of all-reduced, so rank r holds the summed
// gradient of its shard only; the AdamW moments are allocated for the shard alone (the model's
// full m / v arenas are released); grad_norm() sums the shards' squared norms over the ranks;
// update_arenas() is the shard's view of the arenas, and after_update() all-gathers the
// parameters (and refreshes the bf16 shadow) so every rank holds the whole updated model.
// moments_full() gathers the moments for a checkpoint (every rank calls it; the result is the
// same as the unsharded run's layout), load_moments_full() keeps the shard of full moments.
// Streams and memory. The communication stream is GradSync's own; buffers it uses are
// allocated while it is current (the allocator's per-stream pools), the gradient arena is
// permanent. finish() makes the compute stream wait for the communication stream, so every
// later op (norm, update) sees the reduced gradients.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/model/model.h"
#include "engine/optim/adamw.h"
#include "engine/parallel/comm.h"

namespace lt::dist {

struct GradSyncConfig {
  int64_t bucket_bytes = int64_t{25} << 20;
  DType reduce_dtype = DType::f32;  // f32 | bf16
  bool overlap = true;
  bool zero1 = false;
};

// The communication time of one step (CUDA; zeros on the CPU): comm_ms, the time the
// communication stream spent in the step's reductions (the sum of an event pair around each:
// bucket conversions, the collectives, the scalars; not its waits for the compute stream);
// exposed_ms, how long the compute stream waited for it in finish(). The rest, comm - exposed,
// ran under the backward.
struct CommTiming {
  double comm_ms = 0.0, exposed_ms = 0.0;
};

class GradSync {
 public:
  GradSync(Communicator& comm, model::Model& model, const GradSyncConfig& cfg);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  struct Bucket {
    int64_t begin = 0, end = 0;  // elements of the arena
    int params = 0;              // parameters whose gradients it holds
  };
  const std::vector<Bucket>& buckets() const;
  const Shard& shard() const;  // this rank's shard (zero1), else the whole arena
  Stream comm_stream() const;

  // Starts a step: no bucket reduced yet. timed: record the step's CommTiming events.
  void begin_step(bool timed = false);
  // The hook for the step's last micro-batch (valid for the GradSync's lifetime).
  const model::GradsReadyHook& hook() const;
  // Reduces what is left, then all-reduces `step_scalars` (a contiguous f32 tensor on the
  // compute stream's device: the loss and the loop's flags; sums over ranks), and makes the
  // compute stream wait for all of it. Throws std::logic_error if the hook reported a
  // parameter twice or missed one.
  void finish(Tensor& step_scalars);
  // The global gradient's norm as a f32 scalar {} on the device (the same value on every rank).
  Tensor grad_norm();
  // The arenas the update works on: the whole model's, or the shard's (zero1).
  optim::AdamWArenas& update_arenas();
  // After adamw_step on update_arenas(): all-gathers the parameters (zero1); no-op otherwise.
  void after_update();
  // The oldest timed step's figures not yet taken (waits for its events); nullopt when none.
  // The loop takes them one step late, with the step's result; a few steps are kept.
  std::optional<CommTiming> take_timing();

  // Checkpoints: the full [P] moments (zero1: gathered; else the model's arenas).
  std::pair<Tensor, Tensor> moments_full();
  // Loads the full [P] moments m and v (zero1: keeps this rank's shard).
  void load_moments_full(const Tensor& m, const Tensor& v);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lt::dist
