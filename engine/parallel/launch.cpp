// trainer --nproc N (engine/parallel/launch.h).
#include "engine/parallel/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

namespace lt::dist {
namespace {

volatile std::sig_atomic_t g_signals = 0;  // signals received, not yet forwarded
volatile std::sig_atomic_t g_last_signal = 0;

extern "C" void on_launcher_signal(int sig) {
  g_last_signal = sig;
  g_signals = g_signals + 1;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "ended (status " + std::to_string(status) + ")";
}

}  // namespace

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("free_local_port: socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("free_local_port: " + err);
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

int launch_local(int nproc, const std::vector<std::string>& argv, double grace_s) {
  if (nproc < 1) throw std::invalid_argument("--nproc " + std::to_string(nproc) + ": expected at least 1");
  if (argv.empty()) throw std::invalid_argument("launch_local: no program");
  const int port = free_local_port();
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  const std::string program = n > 0 ? std::string(self, static_cast<size_t>(n)) : argv[0];
  spdlog::info("--nproc {}: starting ranks 0..{} on this host (rendezvous 127.0.0.1:{})", nproc, nproc - 1, port);

  g_signals = 0;
  struct sigaction sa {};
  sa.sa_handler = on_launcher_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  std::vector<pid_t> pids(static_cast<size_t>(nproc), -1);
  pid_t group = 0;
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("--nproc: fork failed: ") + std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, group);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigaction(SIGINT, &dfl, nullptr);
      sigaction(SIGTERM, &dfl, nullptr);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::unsetenv("SLURM_PROCID");
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(program.c_str(), args.data());
      std::fprintf(stderr, "trainer --nproc: exec %s failed: %s\n", program.c_str(), std::strerror(errno));
      std::_Exit(127);
    }
    if (group == 0) group = pid;
    ::setpgid(pid, group);  // also here: whichever of parent and child runs first
    pids[static_cast<size_t>(r)] = pid;
  }

  int live = nproc, failed_rank = -1;
  bool any_bad_input = false, any_skips = false, any_failure = false;
  auto rank_of = [&](pid_t pid) {
    for (int r = 0; r < nproc; ++r)
      if (pids[static_cast<size_t>(r)] == pid) return r;
    return -1;
  };
  auto send_all = [&](int sig) {
    for (pid_t p : pids)
      if (p > 0) ::kill(p, sig);
  };
  std::chrono::steady_clock::time_point kill_at{};
  bool killing = false;
  while (live > 0) {
    if (g_signals > 0) {
      g_signals = g_signals - 1;
      spdlog::info("--nproc: {} received: passing it to the ranks", g_last_signal == SIGINT ? "SIGINT" : "SIGTERM");
      send_all(g_last_signal);
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno != EINTR && errno != ECHILD)
      throw std::runtime_error(std::string("--nproc: waitpid: ") + std::strerror(errno));
    if (pid > 0) {
      const int r = rank_of(pid);
      if (r < 0) continue;
      pids[static_cast<size_t>(r)] = -1;
      --live;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok) {
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
        any_bad_input |= code == 2;
        any_skips |= code == 3;
        any_failure = true;
        if (failed_rank < 0) {
          failed_rank = r;
          if (live > 0) spdlog::error("--nproc: rank {} {}; ending the other ranks", r, describe(status));
          else spdlog::error("--nproc: rank {} {}", r, describe(status));
          if (live > 0 && !killing) {
            killing = true;
            kill_at =
                std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000.0));
          }
        } else {
          spdlog::info("--nproc: rank {} {}", r, describe(status));
        }
      }
      continue;
    }
    if (killing && std::chrono::steady_clock::now() >= kill_at) {
      spdlog::error("--nproc: {} rank(s) still running {:.0f} s after rank {} failed: killing them", live, grace_s,
                    failed_rank);
      send_all(SIGKILL);
      killing = false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return any_bad_input ? 2 : any_skips ? 3 : any_failure ? 1 : 0;
}

}  // namespace lt::dist
