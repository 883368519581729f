// The TCP rendezvous and the "tcp" communicator (engine/parallel/comm.h), on POSIX sockets.
//
// Connections. Each rank r > 0 opens two connections to rank 0: "control" (the handshake,
// broadcast_blob, barrier, the liveness watch) and "data" (the tcp communicator's frames), so
// collectives never interleave with control traffic. Rank 0 accepts until every rank has both,
// then answers each control connection with an ack (empty, or the error every rank throws).
//
// Wire format: the hello is 5 x u32 {magic, version, kind (0 control, 1 data), rank, world};
// everything after it is frames {u32 tag, u32 0, u64 length, length bytes}. Host byte order:
// the hosts of one job share it.
//
// The tcp communicator's call, star through rank 0: rank r > 0 sends CALL (its CallDesc) and
// DATA (its contribution: the whole tensor for the sums, its shard for all_gather, the tensor
// for broadcast's root, else nothing); rank 0 reads them in rank order 1..N-1, checks that
// every rank made the same call, computes, and answers each rank with DONE (empty, or the
// error) and, when empty, DATA (its result: the tensor, its shard, or the shards of all_gather
// concatenated in rank order).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "engine/log.h"
#include "engine/parallel/comm.h"
#include "engine/parallel/host_collective.h"

namespace lt::dist {

namespace {

using Clock = std::chrono::steady_clock;
using detail::CallDesc;
using detail::Op;

constexpr uint32_t kMagic = 0x4c545256;  // "LTRV"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kControl = 0, kData = 1;
constexpr uint32_t tag(const char (&s)[5]) {
  return uint32_t(uint8_t(s[0])) | uint32_t(uint8_t(s[1])) << 8 | uint32_t(uint8_t(s[2])) << 16 |
         uint32_t(uint8_t(s[3])) << 24;
}
constexpr uint32_t kAck = tag("ACKN"), kBlob = tag("BLOB"), kBarrier = tag("BARR");
constexpr uint32_t kCall = tag("CALL"), kDataFrame = tag("DATA"), kDone = tag("DONE");

std::string errno_str() { return std::strerror(errno); }

// "1", "0.5", "60": a time-out as the user wrote it.
std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  ~Socket() { reset(); }
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left + 1, 1 << 30));
}

// Transport errors carry `who` ("tcp all_reduce_sum: rank 2") first.
void send_all(int fd, const void* p, size_t n, const std::string& who) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (errno == EPIPE || errno == ECONNRESET)
        throw std::runtime_error(who + " closed its connection (its process ended?)");
      throw std::runtime_error(who + ": send failed: " + errno_str());
    }
    c += k;
    n -= static_cast<size_t>(k);
  }
}

// Reads exactly n bytes; with a deadline, gives up when it passes.
void recv_all(int fd, void* p, size_t n, const std::string& who, std::optional<Clock::time_point> deadline = {}) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    if (deadline) {
      pollfd pfd{fd, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, ms_until(*deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) throw std::runtime_error(who + " did not answer in time");
    }
    const ssize_t k = ::recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0 || (k < 0 && errno == ECONNRESET))
      throw std::runtime_error(who + " closed its connection (its process ended?)");
    if (k < 0) throw std::runtime_error(who + ": recv failed: " + errno_str());
    c += k;
    n -= static_cast<size_t>(k);
  }
}

struct FrameHeader {
  uint32_t tag = 0, zero = 0;
  uint64_t length = 0;
};

void send_frame(int fd, uint32_t t, const void* p, size_t n, const std::string& who) {
  const FrameHeader h{t, 0, n};
  send_all(fd, &h, sizeof h, who);
  if (n > 0) send_all(fd, p, n, who);
}
void send_frame(int fd, uint32_t t, const std::string& s, const std::string& who) {
  send_frame(fd, t, s.data(), s.size(), who);
}

uint64_t recv_frame_header(int fd, uint32_t expected, const std::string& who,
                           std::optional<Clock::time_point> deadline = {}) {
  FrameHeader h;
  recv_all(fd, &h, sizeof h, who, deadline);
  if (h.tag != expected || h.zero != 0 || h.length > (uint64_t(1) << 44))
    throw std::runtime_error(who + ": protocol error (an unexpected frame; do all ranks make the same calls?)");
  return h.length;
}
std::string recv_frame(int fd, uint32_t expected, const std::string& who,
                       std::optional<Clock::time_point> deadline = {}) {
  std::string s(recv_frame_header(fd, expected, who, deadline), '\0');
  if (!s.empty()) recv_all(fd, s.data(), s.size(), who, deadline);
  return s;
}
// A frame of exactly n bytes, read into p.
void recv_frame_into(int fd, uint32_t expected, void* p, size_t n, const std::string& who) {
  const uint64_t len = recv_frame_header(fd, expected, who);
  if (len != n)
    throw std::runtime_error(who + ": protocol error (" + std::to_string(len) + " bytes where " + std::to_string(n) +
                             " were expected)");
  if (n > 0) recv_all(fd, p, n, who);
}

struct Hello {
  uint32_t magic = kMagic, version = kVersion, kind = 0;
  int32_t rank = 0, world = 0;
};

addrinfo* resolve(const WorldInfo& w, bool passive, const std::string& where) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const std::string port = std::to_string(w.master_port);
  const int rc = ::getaddrinfo(w.master_addr.c_str(), port.c_str(), &hints, &res);
  if (rc != 0)
    throw std::runtime_error("rendezvous at " + where + ": cannot resolve MASTER_ADDR '" + w.master_addr +
                             "': " + ::gai_strerror(rc));
  return res;
}

Socket listen_on(const WorldInfo& w, const std::string& where) {
  addrinfo* res = resolve(w, true, where);
  std::string last = "no address";
  Socket out;
  for (addrinfo* a = res; a != nullptr && !out.valid(); a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) {
      last = errno_str();
      continue;
    }
    const int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(s.fd(), 2 * w.world + 16) != 0) {
      last = errno_str();
      continue;
    }
    out = std::move(s);
  }
  ::freeaddrinfo(res);
  if (!out.valid())
    throw std::runtime_error("rendezvous at " + where + ": rank 0 cannot listen: " + last +
                             " (is another job's rank 0 on this port?)");
  return out;
}

// One connection attempt to rank 0, bounded by `deadline`; invalid Socket and *why on failure.
Socket try_connect(const WorldInfo& w, const std::string& where, Clock::time_point deadline, std::string* why) {
  addrinfo* res = resolve(w, false, where);
  Socket out;
  for (addrinfo* a = res; a != nullptr && !out.valid(); a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!s.valid()) {
      *why = errno_str();
      continue;
    }
    int rc = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pfd{s.fd(), POLLOUT, 0};
      rc = ::poll(&pfd, 1, std::min(ms_until(deadline), 2000));
      if (rc == 0) {
        *why = "connect timed out";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (rc < 0 || err != 0) {
        *why = std::strerror(rc < 0 ? errno : err);
        continue;
      }
    } else if (rc != 0) {
      *why = errno_str();
      continue;
    }
    const int flags = ::fcntl(s.fd(), F_GETFL);
    ::fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK);
    set_nodelay(s.fd());
    out = std::move(s);
  }
  ::freeaddrinfo(res);
  return out;
}

// Connects (retrying, backing off from 10 ms to 200 ms) and sends the hello. Between attempts,
// `early_answer` (rank 0's answer on the control connection, when it already sent one: a
// failed rendezvous closes the listener) may throw.
Socket connect_to_rank0(const WorldInfo& w, const std::string& where, uint32_t kind, Clock::time_point deadline,
                        double timeout_s, const std::function<void()>& early_answer = {}) {
  std::string why = "no attempt";
  auto backoff = std::chrono::milliseconds(10);
  while (true) {
    if (early_answer) early_answer();
    Socket s = try_connect(w, where, deadline, &why);
    if (s.valid()) {
      const Hello h{kMagic, kVersion, kind, w.rank, w.world};
      send_all(s.fd(), &h, sizeof h, "rendezvous at " + where + ": rank 0");
      return s;
    }
    if (Clock::now() + backoff >= deadline)
      throw std::runtime_error("rendezvous at " + where + ": rank 0 of " + std::to_string(w.world) +
                               " did not arrive within " + seconds_str(timeout_s) + " s (last attempt: " + why + ")");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

// The data connections, shared by the rendezvous and its tcp communicators.
struct DataChannel {
  int rank = 0, world = 1;
  std::vector<Socket> peers;  // rank 0: index = rank (entry 0 unused); other ranks: [0] = rank 0
  std::mutex mutex;           // one collective at a time
};

class TcpCommunicator final : public detail::HostCommunicator {
 public:
  explicit TcpCommunicator(std::shared_ptr<DataChannel> ch) : ch_(std::move(ch)) {}
  int rank() const override { return ch_->rank; }
  int world() const override { return ch_->world; }
  const char* backend() const override { return "tcp"; }

 private:
  // Bytes rank r contributes to / receives from a call described by c (r's own description).
  static size_t contribution_bytes(const CallDesc& c, int r) {
    if (!c.error.empty()) return 0;
    const size_t item = dtype_size(c.dtype);
    switch (c.op) {
      case Op::all_reduce_sum:
      case Op::reduce_scatter_sum: return c.numel() * item;
      case Op::all_gather: return c.shards[r].count * item;
      case Op::broadcast: return r == c.root ? c.numel() * item : 0;
    }
    return 0;
  }

  void run(Op op, Tensor& t, const std::vector<Shard>* shards, int root) override {
    const int me = ch_->rank, world = ch_->world;
    CallDesc mine = detail::describe_call(op, t, shards, root, me, world, Device::cpu());
    char* base = mine.error.empty() ? static_cast<char*>(t.data_ptr()) : nullptr;
    const size_t item = dtype_size(mine.dtype);
    std::lock_guard<std::mutex> lock(ch_->mutex);
    if (me != 0) {
      const int fd = ch_->peers[0].fd();
      const std::string who = std::string("tcp ") + detail::op_name(op) + ": rank 0";
      send_frame(fd, kCall, detail::encode_call(mine), who);
      const char* contrib = base;
      if (base != nullptr && op == Op::all_gather) contrib = base + mine.shards[me].offset * item;
      send_frame(fd, kDataFrame, contrib, contribution_bytes(mine, me), who);
      const std::string error = recv_frame(fd, kDone, who);
      if (!error.empty()) throw std::invalid_argument(error);
      switch (op) {
        case Op::all_reduce_sum: recv_frame_into(fd, kDataFrame, base, mine.numel() * item, who); break;
        case Op::reduce_scatter_sum: {
          const Shard s = mine.shards[me];
          recv_frame_into(fd, kDataFrame, base + s.offset * item, s.count * item, who);
          break;
        }
        case Op::all_gather: {
          size_t total = 0;
          for (const Shard& s : mine.shards) total += s.count * item;
          std::string all(total, '\0');
          recv_frame_into(fd, kDataFrame, all.data(), total, who);
          size_t pos = 0;
          for (const Shard& s : mine.shards) {
            std::memcpy(base + s.offset * item, all.data() + pos, s.count * item);
            pos += s.count * item;
          }
          break;
        }
        case Op::broadcast:
          recv_frame_into(fd, kDataFrame, base, me == mine.root ? 0 : mine.numel() * item, who);
          break;
      }
      return;
    }

    // Rank 0: gather every rank's call and contribution, in rank order.
    std::vector<CallDesc> calls(world);
    std::vector<std::string> in(world);
    calls[0] = std::move(mine);
    auto who = [&](int r) { return std::string("tcp ") + detail::op_name(op) + ": rank " + std::to_string(r); };
    for (int r = 1; r < world; ++r) {
      const int fd = ch_->peers[r].fd();
      calls[r] = detail::decode_call(recv_frame(fd, kCall, who(r)), "rank " + std::to_string(r));
      in[r] = recv_frame(fd, kDataFrame, who(r));
      if (in[r].size() != contribution_bytes(calls[r], r))
        throw std::runtime_error(who(r) + ": protocol error (" + std::to_string(in[r].size()) + " bytes of data for " +
                                 calls[r].str() + ")");
    }
    const std::string error = detail::check_agreement(calls);
    if (!error.empty()) {
      for (int r = 1; r < world; ++r) send_frame(ch_->peers[r].fd(), kDone, error, who(r));
      throw std::invalid_argument(error);
    }
    const CallDesc& c = calls[0];
    const int64_t n = c.numel();
    std::vector<std::string> out(world);  // out[r]: rank r's result, r >= 1
    switch (op) {
      case Op::all_reduce_sum: {
        std::vector<const void*> srcs{base};
        for (int r = 1; r < world; ++r) srcs.push_back(in[r].data());
        detail::host_sum(c.dtype, n, srcs, base);  // in place: reads element i before writing it
        for (int r = 1; r < world; ++r) out[r].assign(base, n * item);
        break;
      }
      case Op::reduce_scatter_sum: {
        for (int r = 0; r < world; ++r) {
          const Shard s = c.shards[r];
          std::vector<const void*> srcs{base + s.offset * item};
          for (int q = 1; q < world; ++q) srcs.push_back(in[q].data() + s.offset * item);
          if (r == 0) {
            detail::host_sum(c.dtype, s.count, srcs, base + s.offset * item);
          } else {
            out[r].resize(s.count * item);
            detail::host_sum(c.dtype, s.count, srcs, out[r].data());
          }
        }
        break;
      }
      case Op::all_gather: {
        std::string all;
        for (int r = 0; r < world; ++r) {
          const Shard s = c.shards[r];
          if (r > 0) std::memcpy(base + s.offset * item, in[r].data(), s.count * item);
          all.append(base + s.offset * item, s.count * item);
        }
        for (int r = 1; r < world; ++r) out[r] = all;
        break;
      }
      case Op::broadcast: {
        if (c.root != 0) std::memcpy(base, in[c.root].data(), n * item);
        for (int r = 1; r < world; ++r)
          if (r != c.root) out[r].assign(base, n * item);
        break;
      }
    }
    for (int r = 1; r < world; ++r) {
      send_frame(ch_->peers[r].fd(), kDone, std::string(), who(r));
      send_frame(ch_->peers[r].fd(), kDataFrame, out[r], who(r));
    }
  }

  std::shared_ptr<DataChannel> ch_;
};

}  // namespace

struct Rendezvous::Impl {
  WorldInfo world;
  std::string where;            // "MASTER_ADDR:MASTER_PORT"
  std::vector<Socket> control;  // rank 0: index = rank (entry 0 unused); other ranks: [0] = rank 0
  std::shared_ptr<DataChannel> data = std::make_shared<DataChannel>();
  std::thread watcher;
  int wake[2] = {-1, -1};  // self-pipe: a byte on wake[1] ends the watcher

  void rank0_accept(double timeout_s);
  void connect_peer(double timeout_s);
  void stop_watch() {
    if (!watcher.joinable()) return;
    const char byte = 1;
    while (::write(wake[1], &byte, 1) < 0 && errno == EINTR) {}
    watcher.join();
    ::close(wake[0]);
    ::close(wake[1]);
    wake[0] = wake[1] = -1;
  }
};

void Rendezvous::Impl::rank0_accept(double timeout_s) {
  const int n = world.world;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  Socket listener = listen_on(world, where);
  std::vector<Socket> ctrl(n), dat(n);
  std::vector<Socket> strays;  // control connections to tell about a failure: duplicates, bad worlds
  auto fail = [&](const std::string& msg) {
    const std::string full = "rendezvous at " + where + ": " + msg;
    for (auto* list : {&ctrl, &strays})
      for (Socket& s : *list)
        if (s.valid()) {
          try {
            send_frame(s.fd(), kAck, full, "rendezvous");
          } catch (const std::exception&) {  // that rank is gone already: nothing to tell it
          }
        }
    throw std::runtime_error(full);
  };
  auto arrived = [&](int r) { return ctrl[r].valid() && dat[r].valid(); };
  auto all_arrived = [&] {
    for (int r = 1; r < n; ++r)
      if (!arrived(r)) return false;
    return true;
  };
  while (!all_arrived()) {
    pollfd pfd{listener.fd(), POLLIN, 0};
    const int ready = ::poll(&pfd, 1, ms_until(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      std::string missing;
      for (int r = 1; r < n; ++r)
        if (!arrived(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      fail("rank " + missing + " of " + std::to_string(n) + " did not arrive within " + seconds_str(timeout_s) + " s");
    }
    Socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!s.valid()) continue;
    set_nodelay(s.fd());
    Hello h;
    try {
      recv_all(s.fd(), &h, sizeof h, "a connecting rank", deadline);
    } catch (const std::exception& e) {
      spdlog::warn("rendezvous at {}: dropped a connection that sent no hello ({})", where, e.what());
      continue;
    }
    if (h.magic != kMagic || h.version != kVersion || h.kind > kData) {
      spdlog::warn("rendezvous at {}: dropped a connection that is not a lintrain rank", where);
      continue;
    }
    const bool is_control = h.kind == kControl;
    Socket* held = &s;
    if (is_control) {  // held in strays until accepted (moved to ctrl[r] below)
      strays.push_back(std::move(s));
      held = &strays.back();
    }
    if (h.world != n)
      fail("rank " + std::to_string(h.rank) + " says the world has " + std::to_string(h.world) + " ranks, rank 0 " +
           std::to_string(n));
    if (h.rank < 1 || h.rank >= n)
      fail("a peer says it is rank " + std::to_string(h.rank) + ", not one of 1.." + std::to_string(n - 1));
    std::vector<Socket>& slot = is_control ? ctrl : dat;
    if (slot[h.rank].valid()) fail("rank " + std::to_string(h.rank) + " arrived twice");
    slot[h.rank] = std::move(*held);
    if (is_control) strays.pop_back();
  }
  for (int r = 1; r < n; ++r)
    send_frame(ctrl[r].fd(), kAck, std::string(), "rendezvous at " + where + ": rank " + std::to_string(r));
  control = std::move(ctrl);
  data->peers = std::move(dat);
}

void Rendezvous::Impl::connect_peer(double timeout_s) {
  const auto span = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  const Clock::time_point deadline = Clock::now() + span;
  Socket ctrl = connect_to_rank0(world, where, kControl, deadline, timeout_s);
  bool answered = false;  // rank 0's answer frame read (its error, if any, already thrown)
  auto read_answer = [&](Clock::time_point until) {
    const std::string error = recv_frame(ctrl.fd(), kAck, "rendezvous at " + where + ": rank 0", until);
    answered = true;
    if (!error.empty()) throw std::runtime_error(error + " (reported by rank 0)");
  };
  Socket dat;
  try {
    dat = connect_to_rank0(world, where, kData, deadline, timeout_s, [&] {
      pollfd pfd{ctrl.fd(), POLLIN, 0};
      if (::poll(&pfd, 1, 0) > 0) read_answer(Clock::now() + std::chrono::seconds(2));
    });
  } catch (const std::runtime_error&) {
    // A rank 0 that refuses this rank sends its reason on the control connection before it closes
    // the listener, which can reset the data connection between its connect and its hello: the
    // reason, when there is one, is the error to report. (Already read: that error is this one.)
    if (answered) throw;
    std::string reason;
    try {
      reason =
          recv_frame(ctrl.fd(), kAck, "rendezvous at " + where + ": rank 0", Clock::now() + std::chrono::seconds(1));
    } catch (const std::runtime_error&) {  // no reason came: the connect's own error stands
    }
    if (!reason.empty()) throw std::runtime_error(reason + " (reported by rank 0)");
    throw;
  }
  // Rank 0 answers once every rank has arrived, which can take up to its own time-out from now.
  read_answer(Clock::now() + span + std::chrono::seconds(2));
  control.push_back(std::move(ctrl));
  data->peers.push_back(std::move(dat));
}

Rendezvous::Rendezvous(const WorldInfo& world, double timeout_s) : impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  I.world = world;
  I.where = world.master_addr + ":" + std::to_string(world.master_port);
  I.data->rank = world.rank;
  I.data->world = world.world;
  if (world.world < 1 || world.rank < 0 || world.rank >= world.world)
    throw std::invalid_argument("rendezvous: rank " + std::to_string(world.rank) + " is not in a world of " +
                                std::to_string(world.world));
  if (!(timeout_s > 0) || !std::isfinite(timeout_s))
    throw std::invalid_argument("rendezvous: time-out " + seconds_str(timeout_s) + " s must be > 0");
  if (world.world == 1) return;  // nobody to meet
  if (world.master_port < 1 || world.master_port > 65535)
    throw std::invalid_argument("rendezvous: MASTER_PORT " + std::to_string(world.master_port) +
                                " is not a port (1..65535)");
  if (world.rank == 0) I.rank0_accept(timeout_s);
  else I.connect_peer(timeout_s);
}

Rendezvous::~Rendezvous() { impl_->stop_watch(); }

const WorldInfo& Rendezvous::world() const { return impl_->world; }

std::string Rendezvous::broadcast_blob(const std::string& blob) {
  Impl& I = *impl_;
  if (I.world.world == 1) return blob;
  if (I.world.rank != 0) return recv_frame(I.control[0].fd(), kBlob, "broadcast_blob: rank 0");
  for (int r = 1; r < I.world.world; ++r)
    send_frame(I.control[r].fd(), kBlob, blob, "broadcast_blob: rank " + std::to_string(r));
  return blob;
}

void Rendezvous::barrier() {
  Impl& I = *impl_;
  if (I.world.world == 1) return;
  if (I.world.rank != 0) {
    send_frame(I.control[0].fd(), kBarrier, nullptr, 0, "barrier: rank 0");
    recv_frame(I.control[0].fd(), kBarrier, "barrier: rank 0");
    return;
  }
  for (int r = 1; r < I.world.world; ++r) recv_frame(I.control[r].fd(), kBarrier, "barrier: rank " + std::to_string(r));
  for (int r = 1; r < I.world.world; ++r)
    send_frame(I.control[r].fd(), kBarrier, nullptr, 0, "barrier: rank " + std::to_string(r));
}

void Rendezvous::watch(std::function<void(int)> on_lost) {
  Impl& I = *impl_;
  if (I.watcher.joinable()) throw std::logic_error("Rendezvous::watch: already watching");
  if (!on_lost) {
    const int me = I.world.rank;
    on_lost = [me](int peer) {
      spdlog::error("rank {}: lost contact with rank {} (its process ended); ending this rank", me, peer);
      spdlog::default_logger()->flush();
      ::_exit(1);
    };
  }
  if (::pipe2(I.wake, O_CLOEXEC) != 0) throw std::runtime_error("Rendezvous::watch: pipe2 failed: " + errno_str());
  // POLLRDHUP (the peer shut its side) without POLLIN: the watcher never reads, so it can run
  // beside broadcast_blob / barrier on the same connections.
  std::vector<pollfd> fds{{I.wake[0], POLLIN, 0}};
  std::vector<int> ranks{-1};
  for (size_t i = 0; i < I.control.size(); ++i)
    if (I.control[i].valid()) {
      fds.push_back({I.control[i].fd(), POLLRDHUP, 0});
      ranks.push_back(I.world.rank == 0 ? static_cast<int>(i) : 0);
    }
  I.watcher = std::thread([fds, ranks, on_lost = std::move(on_lost)]() mutable {
    while (true) {
      const int ready = ::poll(fds.data(), fds.size(), -1);
      if (ready < 0) {
        if (errno == EINTR) continue;
        spdlog::error("Rendezvous::watch: poll failed: {}; no longer watching", errno_str());
        return;
      }
      if (fds[0].revents != 0) return;
      for (size_t i = 1; i < fds.size(); ++i) {
        if ((fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) continue;
        fds[i].fd = -1;  // poll skips negative descriptors: each loss is reported once
        try {
          on_lost(ranks[i]);
        } catch (const std::exception& e) {
          spdlog::error("Rendezvous::watch: on_lost({}) threw: {}", ranks[i], e.what());
        }
      }
    }
  });
}

void Rendezvous::unwatch() { impl_->stop_watch(); }

std::unique_ptr<Communicator> Rendezvous::tcp_communicator() { return std::make_unique<TcpCommunicator>(impl_->data); }

}  // namespace lt::dist
