// This process's part in a data-parallel job: its device, the rendezvous, the communicator,
// and the two guards that end a job whose ranks can no longer all make progress.
//
//   if (auto world = lt::dist::world_from_env()) {
//     lt::dist::Job job(*world, "auto", 120.0, 600.0);   // returns once every rank has arrived
//     ... train with job.comm(); call job.progress() after every step ...
//   }
//
// Device: "auto" or "cuda" -> cuda:LOCAL_RANK with the NCCL backend when CUDA is usable
// (auto without CUDA: the CPU); "cpu" -> the CPU with the tcp backend. cuda:N names one GPU,
// which several ranks cannot share: refused. NCCL_NVLS_ENABLE is set to 0 when it is unset
// (NVLink multicast stays off unless the environment asks for it).
// Faults. (1) A rank whose process ends (crash, kill -9, an error exit) closes its connections:
// the rendezvous's watch on every other rank sees it at once and ends that rank with exit code
// 1 and a line naming the lost rank (rank 0 watches every rank; the others watch rank 0, which
// in turn ends). (2) A rank that stops making progress (hung, or waiting on a rank that hangs)
// is ended by the watchdog after step_timeout_s without a progress() call, with a line naming
// this rank and the time-out. Either way the last complete checkpoint stays as it was
// (checkpoints are written atomically) and the job can be resumed.
#pragma once
#include <memory>
#include <string>

#include "engine/parallel/comm.h"

namespace lt::dist {

class Job {
 public:
  // std::invalid_argument for a device that does not fit (naming it); std::runtime_error from
  // the rendezvous or the backend.
  Job(const WorldInfo& world, const std::string& device_spec, double rendezvous_timeout_s, double step_timeout_s);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int rank() const;
  int world() const;
  Device device() const;
  Communicator& comm();
  Rendezvous& rendezvous();
  // Feeds the watchdog: the loop calls it after every step and around long host work.
  void progress();
  // The job's orderly end, collective: after it no rank treats another's exit as a fault.
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The device a rank of `world` uses for device_spec (see Job); std::invalid_argument naming
// the spec when it does not fit.
Device rank_device(const WorldInfo& world, const std::string& device_spec);

}  // namespace lt::dist
