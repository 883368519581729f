// The local launcher behind `trainer --nproc N`: N copies of this program, one per rank (one per
// GPU), on this host, with the environment contract of torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT = a free port).
//
// Signals. The ranks run in a process group of their own, so a terminal's Ctrl-C reaches only
// the launcher, which forwards each SIGINT / SIGTERM it receives to every live rank once (the
// first asks the ranks to stop after a checkpoint; a second ends them, as with one process).
// Faults. When a rank ends with a non-zero code or by a signal while others still run, the
// launcher says which rank and how, and ends the rest: they normally end on their own at once
// (engine/parallel/job.h: a lost peer ends every rank); whatever is left after grace_s gets SIGKILL.
// Exit code: 0 when every rank exited 0; otherwise 2 if any rank exited 2 (bad input), else 3
// if any exited 3 (too many skipped updates), else 1.
#pragma once
#include <string>
#include <vector>

namespace lt::dist {

// Runs `argv` (argv[0]: the program, found through /proc/self/exe when it is this program) as
// ranks 0..nproc-1 and waits for all of them. Returns the job's exit code (above).
int launch_local(int nproc, const std::vector<std::string>& argv, double grace_s = 10.0);

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
int free_local_port();

}  // namespace lt::dist
