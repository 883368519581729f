// world_from_env, even_shards and the "threads" backend (engine/parallel/comm.h).
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "engine/parallel/comm.h"
#include "engine/parallel/host_collective.h"

namespace lt::dist {

namespace {

const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

int env_int(const char* name, const char* value) {
  int out = 0;
  const char* end = value + std::strlen(value);
  auto [p, ec] = std::from_chars(value, end, out);
  if (ec != std::errc() || p != end)
    throw std::invalid_argument(std::string(name) + "='" + value + "' is not a number");
  return out;
}

}  // namespace

std::optional<WorldInfo> world_from_env() {
  // torchrun's set when RANK is there; else SLURM's. The two sets are never mixed.
  const bool torchrun = env_value("RANK") != nullptr;
  if (!torchrun && env_value("SLURM_PROCID") == nullptr) return std::nullopt;
  const char* rank_var = torchrun ? "RANK" : "SLURM_PROCID";
  const char* world_var = torchrun ? "WORLD_SIZE" : "SLURM_NTASKS";
  const char* local_var = torchrun ? "LOCAL_RANK" : "SLURM_LOCALID";
  WorldInfo w;
  w.rank = env_int(rank_var, env_value(rank_var));
  const char* world_s = env_value(world_var);
  if (world_s == nullptr)
    throw std::invalid_argument(std::string(world_var) + " is not set (" + rank_var + "=" + env_value(rank_var) +
                                " is)");
  w.world = env_int(world_var, world_s);
  if (w.world < 1) throw std::invalid_argument(std::string(world_var) + "=" + world_s + " must be >= 1");
  if (w.rank < 0 || w.rank >= w.world)
    throw std::invalid_argument(std::string(rank_var) + "=" + std::to_string(w.rank) + " is not in [0, " + world_var +
                                "=" + std::to_string(w.world) + ")");
  const char* local_s = env_value(local_var);
  w.local_rank = local_s != nullptr ? env_int(local_var, local_s) : w.rank;
  if (w.local_rank < 0) throw std::invalid_argument(std::string(local_var) + "=" + local_s + " must be >= 0");
  if (const char* addr = env_value("MASTER_ADDR")) w.master_addr = addr;
  if (const char* port = env_value("MASTER_PORT")) {
    w.master_port = env_int("MASTER_PORT", port);
    if (w.master_port < 1 || w.master_port > 65535)
      throw std::invalid_argument(std::string("MASTER_PORT=") + port + " is not a port (1..65535)");
  } else if (w.world > 1) {
    throw std::invalid_argument("MASTER_PORT is not set (" + std::string(world_var) + "=" + world_s +
                                " needs a rendezvous port)");
  }
  return w;
}

std::vector<Shard> even_shards(int64_t n, int world) {
  if (world < 1) throw std::invalid_argument("even_shards: world " + std::to_string(world) + " must be >= 1");
  if (n < 0) throw std::invalid_argument("even_shards: n " + std::to_string(n) + " must be >= 0");
  std::vector<Shard> out(world);
  const int64_t base = n / world, extra = n % world;
  int64_t offset = 0;
  for (int r = 0; r < world; ++r) {
    out[r].offset = offset;
    out[r].count = base + (r < extra ? 1 : 0);
    offset += out[r].count;
  }
  return out;
}

// ---- "threads" ---------------------------------------------------------------------------

namespace {

using detail::CallDesc;
using detail::Op;

// Shared by the n communicators of one group. A call is a generation of a barrier: each rank
// posts its description and data pointer; the last to arrive checks agreement, does the whole
// collective (it may read and write every rank's tensor: the others are blocked in the same
// call) and opens the next generation.
struct ThreadGroupState {
  explicit ThreadGroupState(int n) : world(n), calls(n), data(n) {}
  const int world;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<CallDesc> calls;
  std::vector<char*> data;  // each rank's tensor, element 0
  std::string error;        // of the last completed generation; "" = done
  std::vector<char> scratch;

  void run_collective() {
    const CallDesc& c = calls[0];
    const size_t item = dtype_size(c.dtype);
    const int64_t n = c.numel();
    switch (c.op) {
      case Op::all_reduce_sum: {
        scratch.resize(n * item);
        detail::host_sum(c.dtype, n, std::vector<const void*>(data.begin(), data.end()), scratch.data());
        for (char* d : data) std::memcpy(d, scratch.data(), n * item);
        break;
      }
      case Op::reduce_scatter_sum: {
        for (int r = 0; r < world; ++r) {
          const Shard s = c.shards[r];
          std::vector<const void*> srcs;
          for (char* d : data) srcs.push_back(d + s.offset * item);
          detail::host_sum(c.dtype, s.count, srcs, data[r] + s.offset * item);  // in place: reads i before writing i
        }
        break;
      }
      case Op::all_gather: {
        for (int r = 0; r < world; ++r) {
          const Shard s = c.shards[r];
          for (int q = 0; q < world; ++q)
            if (q != r) std::memcpy(data[q] + s.offset * item, data[r] + s.offset * item, s.count * item);
        }
        break;
      }
      case Op::broadcast: {
        for (int q = 0; q < world; ++q)
          if (q != c.root) std::memcpy(data[q], data[c.root], n * item);
        break;
      }
    }
  }

  void enter(int rank, CallDesc call, void* ptr) {
    std::unique_lock<std::mutex> lock(mutex);
    calls[rank] = std::move(call);
    data[rank] = static_cast<char*>(ptr);
    const uint64_t my_generation = generation;
    if (++arrived == world) {
      error = detail::check_agreement(calls);
      if (error.empty()) run_collective();
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != my_generation; });
    }
    // `error` stays until this rank enters the next call: no generation completes without it.
    if (!error.empty()) throw std::invalid_argument(error);
  }
};

class ThreadCommunicator final : public detail::HostCommunicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroupState> state, int rank) : state_(std::move(state)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return state_->world; }
  const char* backend() const override { return "threads"; }

 private:
  void run(Op op, Tensor& t, const std::vector<Shard>* shards, int root) override {
    CallDesc c = detail::describe_call(op, t, shards, root, rank_, state_->world, Device::cpu());
    void* ptr = c.error.empty() ? t.data_ptr() : nullptr;
    state_->enter(rank_, std::move(c), ptr);
  }

  std::shared_ptr<ThreadGroupState> state_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_group(int n) {
  if (n < 1) throw std::invalid_argument("make_thread_group: n " + std::to_string(n) + " must be >= 1");
  auto state = std::make_shared<ThreadGroupState>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadCommunicator>(state, r));
  return out;
}

}  // namespace lt::dist
