// A rank's part in a data-parallel job (engine/parallel/job.h).
#include "engine/parallel/job.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

namespace lt::dist {

Device rank_device(const WorldInfo& world, const std::string& spec) {
  if (spec == "cpu") return Device::cpu();
  if (spec == "auto" && !cuda_available()) return Device::cpu();
  if (spec == "auto" || spec == "cuda") {
    if (!cuda_available())
      throw std::invalid_argument("device '" + spec + "': CUDA is not usable here; use cpu or auto");
    if (world.local_rank >= cuda_device_count())
      throw std::invalid_argument("device '" + spec + "': local rank " + std::to_string(world.local_rank) +
                                  " needs cuda:" + std::to_string(world.local_rank) + ", but this host has " +
                                  std::to_string(cuda_device_count()) + " CUDA device(s)");
    return Device::cuda(world.local_rank);
  }
  throw std::invalid_argument("device '" + spec + "': a data-parallel rank uses cuda:LOCAL_RANK; set device to " +
                              "auto or cuda (or cpu)");
}

struct Job::Impl {
  WorldInfo world;
  Device device;
  std::unique_ptr<Rendezvous> rv;
  std::unique_ptr<Communicator> comm;

  // Watchdog: ends the process when progress() has not been called for timeout_s.
  double timeout_s = 600.0;
  std::atomic<int64_t> last_progress_ns{0};
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread watchdog;

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void watch() {
    std::unique_lock<std::mutex> lk(mu);
    while (!stop) {
      cv.wait_for(lk, std::chrono::milliseconds(200));
      if (stop) break;
      const double idle = static_cast<double>(now_ns() - last_progress_ns.load()) * 1e-9;
      if (idle > timeout_s) {
        spdlog::error(
            "rank {}: no progress for {:.0f} s (dist.timeout_s = {:.0f}): a rank is hung or unreachable; ending "
            "this rank (the last checkpoint is intact; resume with the same command)",
            world.rank, idle, timeout_s);
        spdlog::default_logger()->flush();
        std::_Exit(1);
      }
    }
  }
};

Job::Job(const WorldInfo& world, const std::string& device_spec, double rendezvous_timeout_s, double step_timeout_s)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.world = world;
  m.device = rank_device(world, device_spec);
  m.timeout_s = step_timeout_s;
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  set_device(m.device);
  spdlog::info("rank {} of {}: joining the rendezvous at {}:{} on {}", world.rank, world.world, world.master_addr,
               world.master_port, m.device.str());
  m.rv = std::make_unique<Rendezvous>(world, rendezvous_timeout_s);
  m.comm = m.device.is_cuda() ? make_nccl(*m.rv, m.device) : m.rv->tcp_communicator();
  m.rv->watch([&m](int peer) {
    spdlog::error(
        "rank {}: lost contact with rank {} (its process ended); ending this rank (the last checkpoint is "
        "intact; resume with the same command)",
        m.world.rank, peer);
    spdlog::default_logger()->flush();
    std::_Exit(1);
  });
  m.last_progress_ns = Impl::now_ns();
  m.watchdog = std::thread([&m] { m.watch(); });
  spdlog::info("rank {} of {}: {} communicator ready", world.rank, world.world, m.comm->backend());
}

Job::~Job() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
}

int Job::rank() const { return impl_->world.rank; }
int Job::world() const { return impl_->world.world; }
Device Job::device() const { return impl_->device; }
Communicator& Job::comm() { return *impl_->comm; }
Rendezvous& Job::rendezvous() { return *impl_->rv; }
void Job::progress() { impl_->last_progress_ns = Impl::now_ns(); }
void Job::finish() {
  // Every rank stops watching before it enters the barrier, so once the barrier is passed no
  // rank takes another's exit for a loss.
  impl_->rv->unwatch();
  impl_->rv->barrier();
}

}  // namespace lt::dist
