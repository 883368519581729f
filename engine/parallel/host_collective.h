// What the host backends ("threads", "tcp") share: the description of one collective call
// as each rank made it (validated locally, compared across ranks before any data moves) and
// the one summation both use, so their results agree bit for bit.
//
// Summation rule: dst[i] = src_0[i] + src_1[i] + ... + src_{N-1}[i], left to right in rank
// order, accumulated in float for f32 and bf16 (bf16 rounded to nearest even once, at the
// end) and in double for f64.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/parallel/comm.h"

namespace lt::dist::detail {

enum class Op : uint8_t { all_reduce_sum, reduce_scatter_sum, all_gather, broadcast };
const char* op_name(Op op);

// One rank's view of a call. `error` is non-empty when the call was invalid on that rank
// (the message names the call, the rank and the bad argument); the others then fail too.
struct CallDesc {
  Op op = Op::all_reduce_sum;
  DType dtype = DType::f32;
  Shape shape;
  std::vector<Shard> shards;  // reduce_scatter_sum / all_gather: one per rank; else empty
  int root = -1;              // broadcast only
  std::string error;

  int64_t numel() const { return shape_numel(shape); }
  std::string str() const;                  // "f32 [4, 3]", "f32 [10] shards {0+4, 4+3, 7+3}", "f64 [2] root 1"
  bool same_call(const CallDesc& o) const;  // everything but `error`
};

// Rank `rank`'s call on t; `shards` is null for the calls without shards, root is -1 for the
// calls without a root. Never throws for a bad argument: it lands in CallDesc::error.
CallDesc describe_call(Op op, const Tensor& t, const std::vector<Shard>* shards, int root, int rank, int world,
                       Device device);
// "" when every rank made the same valid call; else the message to throw on every rank.
std::string check_agreement(const std::vector<CallDesc>& calls);

// dst[i] = sum over r of srcs[r][i] for i < count (rule above); dst may be one of srcs.
void host_sum(DType dtype, int64_t count, const std::vector<const void*>& srcs, void* dst);

// A host backend's communicator: on the CPU, every collective one call of run(op, t, shards,
// root) (shards null and root -1 where the collective has none).
class HostCommunicator : public Communicator {
 public:
  Device device() const override { return Device::cpu(); }
  void all_reduce_sum(Tensor& t, const Stream&) final { run(Op::all_reduce_sum, t, nullptr, -1); }
  void reduce_scatter_sum(Tensor& t, const std::vector<Shard>& shards, const Stream&) final {
    run(Op::reduce_scatter_sum, t, &shards, -1);
  }
  void all_gather(Tensor& t, const std::vector<Shard>& shards, const Stream&) final {
    run(Op::all_gather, t, &shards, -1);
  }
  void broadcast(Tensor& t, int root, const Stream&) final { run(Op::broadcast, t, nullptr, root); }

 protected:
  virtual void run(Op op, Tensor& t, const std::vector<Shard>* shards, int root) = 0;
};

// Byte encoding of a CallDesc for the tcp backend (same-endian hosts).
std::string encode_call(const CallDesc& c);
// Throws std::runtime_error naming `from` on a malformed encoding.
CallDesc decode_call(const std::string& bytes, const std::string& from);

}  // namespace lt::dist::detail
