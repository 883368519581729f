// Collective communication for data-parallel training: one rank per process (per GPU), or
// threads as ranks inside one process for tests.
//
//   auto world = lt::dist::world_from_env();              // RANK, WORLD_SIZE, ... (torchrun / SLURM)
//   lt::dist::Rendezvous rv(*world, 60.0);                // TCP on MASTER_ADDR:MASTER_PORT
//   auto comm = dev.is_cuda() ? lt::dist::make_nccl(rv, dev) : rv.tcp_communicator();
//   comm->all_reduce_sum(grads, stream);                  // in place, enqueued on `stream`
//
// Backends (Communicator::backend()):
//   "nccl"     CUDA tensors; NCCL loaded at run time (dlopen: LINTRAIN_NCCL_LIB, else
//              libnccl.so.2 on the loader's path, else the CUDA toolkit's lib64); each call is
//              enqueued on the given stream and returns at once. Built when nccl.h is found
//              (LINTRAIN_WITH_NCCL); otherwise make_nccl throws "this build has no NCCL".
//   "tcp"      CPU tensors of several processes, through rank 0 over loopback / the network
//              (star: rank 0 receives every rank's data, sums in rank order 0..N-1, sends the
//              result back); done when the call returns. Deterministic.
//   "threads"  CPU tensors, one communicator per thread of one process (make_thread_group);
//              each collective blocks until every rank has entered it; sums in rank order.
// Contract of every collective: every rank makes the same calls in the same order with the
// same shapes and dtypes; tensors are contiguous, on the communicator's device; dtypes f32,
// bf16 (summed in f32 and rounded once by the host backends; NCCL rounds per step) and f64
// (host backends; NCCL too). Violations throw std::invalid_argument naming the call.
// Errors of the transport (a peer gone, a time-out) throw std::runtime_error naming the rank.
//
// How the backends behave:
//   threads  a generation-counted barrier per call: the last rank to arrive compares every
//            rank's call (op, dtype, shape, shards, root), does the whole collective on the
//            ranks' tensors and releases the others; a mismatch or a bad argument on any rank
//            throws std::invalid_argument on every rank (the group stays usable).
//   tcp      a call is one round trip per rank to rank 0 over the data connection: the call's
//            description and the rank's contribution out, a status and the result back; rank 0
//            checks agreement as the threads backend does and uses the same summation, so the
//            two give bit-identical results. A peer gone mid-call: std::runtime_error naming it.
//   nccl     checks each rank's own arguments (device, contiguity, dtype, shards) only: ranks
//            that disagree are not detected (NCCL hangs or mixes data). Reduce-scatter and
//            all-gather over shards are grouped ncclReduce / ncclBroadcast (root r for shard
//            r, in place), so shards may be uneven. GPU machines with NVLink need
//            NCCL_NVLS_ENABLE=0 in the environment (no NVLink SHARP / multicast).
// Shards (reduce_scatter_sum / all_gather): world of them, in rank order, not overlapping,
// each within [0, t.numel()); elements between shards are left as they are.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/tensor.h"

namespace lt::dist {

// This process's place in the job, from the launcher's environment: RANK, WORLD_SIZE,
// LOCAL_RANK (default: RANK), MASTER_ADDR (default 127.0.0.1), MASTER_PORT; where RANK /
// WORLD_SIZE are unset, SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID. nullopt when neither
// RANK nor SLURM_PROCID is set (a single-process run). A bad value (not a number, rank >=
// world, a world with no MASTER_PORT) throws std::invalid_argument naming the variable.
struct WorldInfo {
  int rank = 0, world = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
};
std::optional<WorldInfo> world_from_env();

// A contiguous part of a flat tensor: elements [offset, offset + count).
struct Shard {
  int64_t offset = 0, count = 0;
};
// n elements over `world` ranks: contiguous, in rank order, the first n % world one larger.
std::vector<Shard> even_shards(int64_t n, int world);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual const char* backend() const = 0;  // "nccl", "tcp", "threads"
  virtual Device device() const = 0;

  // t (any shape, contiguous) = sum over ranks of t, on every rank.
  virtual void all_reduce_sum(Tensor& t, const Stream& stream) = 0;
  // t is flat [n] and `shards` (one per rank, in rank order, within [0, n)) need not be even:
  // afterwards rank r's shard of t holds the sum over ranks of that shard; the rest of t is
  // unspecified.
  virtual void reduce_scatter_sum(Tensor& t, const std::vector<Shard>& shards, const Stream& stream) = 0;
  // t is flat [n]: afterwards shard r of t, on every rank, equals rank r's shard r.
  virtual void all_gather(Tensor& t, const std::vector<Shard>& shards, const Stream& stream) = 0;
  // t = root's t, on every rank.
  virtual void broadcast(Tensor& t, int root, const Stream& stream) = 0;
};

// n communicators for n threads of this process (rank i = element i). CPU tensors only.
std::vector<std::unique_ptr<Communicator>> make_thread_group(int n);

// The job's rendezvous: rank 0 listens on MASTER_ADDR:MASTER_PORT; the other ranks connect
// (retrying until the time-out) and say their rank and world size. The constructor returns
// once every rank has arrived; otherwise it throws std::runtime_error naming the ranks that
// did not arrive ("rendezvous at 127.0.0.1:29500: rank 2, 3 of 4 did not arrive within 60 s"),
// a rank that arrived twice, or a world size that differs. The connections stay open for the
// job's lifetime: they carry broadcast_blob, the tcp communicator's data, and the liveness
// watch (two per rank > 0: control and data). A world of one opens no socket.
class Rendezvous {
 public:
  Rendezvous(const WorldInfo& world, double timeout_s);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;
  const WorldInfo& world() const;

  // Rank 0's `blob` on every rank (the argument is ignored on the others). Collective.
  std::string broadcast_blob(const std::string& blob);
  // Blocks until every rank has called it. Collective.
  void barrier();

  // Watches the connections (rank 0: every other rank's; the others: rank 0's) on a thread
  // of its own; when one closes (its process exited or died, or its Rendezvous was
  // destroyed), calls on_lost(peer rank) on that thread, once per peer. Without a callback:
  // logs "rank R: lost contact with rank K (its process ended); ending this rank" and ends
  // the process with exit code 1 (_exit: no destructors, no checkpoint; the last complete
  // checkpoint stays as it is). The watcher never reads (poll with POLLRDHUP), so
  // broadcast_blob / barrier keep working beside it. Throws std::logic_error while watching.
  void watch(std::function<void(int)> on_lost = {});
  // Stops the watch (no-op when not watching); the destructor does it too. A clean end of a
  // job: unwatch(); barrier(); then destroy, so no rank takes another's exit for a loss.
  void unwatch();

  // The "tcp" communicator over this rendezvous's ranks (its own connections, opened by the
  // constructor), for CPU tensors. Not collective; it may outlive the Rendezvous.
  // Communicators from one Rendezvous share those connections: one collective at a time.
  std::unique_ptr<Communicator> tcp_communicator();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True when NCCL can be used here; otherwise false with the reason in *why ("this build has
// no NCCL (nccl.h was not found)", "libnccl.so.2 could not be loaded: ...").
bool nccl_available(std::string* why = nullptr);
// An NCCL communicator of rv's world on `device` (cuda:i): rank 0 makes the unique id and
// hands it out through rv. Throws std::runtime_error with nccl_available's reason when NCCL
// cannot be used, or NCCL's error string.
std::unique_ptr<Communicator> make_nccl(Rendezvous& rv, Device device);

}  // namespace lt::dist
