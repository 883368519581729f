// The batch loader (engine/data/loader.h): a source, the generator, the position, and a
// prefetch thread.
//
// Position. The consumer's position is (generator state after the last batch returned,
// batches returned). Batch i is made from the generator state after batch i - 1, so the
// sequence of batches depends only on the seed, never on prefetching or on when next() is
// called. With prefetch > 0 a worker thread runs its own copy of the generator from the
// consumer's position and queues up to `prefetch` batches, each with the generator state
// after it; next() takes the front batch and adopts that state. restore() stops the worker,
// drops the queue, sets the position and starts a fresh worker from there.
// Staging. With a Staging, make_batch takes a slot of the staging ring and writes the rows
// into it (on the worker thread when prefetching); the slot travels with the Batch.
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "engine/data/source.h"

namespace lt::data {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

constexpr int kStateVersion = 1;

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t parse_hex64(const std::string& s) {
  if (s.empty() || s.size() > 16) throw std::runtime_error("data state: bad rng word '" + s + "'");
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else throw std::runtime_error("data state: bad rng word '" + s + "'");
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& w : s_) w = splitmix64(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t Rng::below(uint64_t n) {
  // Values below 2^64 mod n would make the low residues likelier: draw again.
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t r = next();
    if (r >= threshold) return r % n;
  }
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

const char* split_name(Split split) { return split == Split::train ? "train" : "val"; }

struct Loader::Impl {
  DataConfig cfg;
  Split split;
  int64_t B, T;
  RowSlice rows;  // resolved: 0 <= begin, begin + count <= B
  uint64_t seed;
  std::unique_ptr<Source> source;
  std::unique_ptr<HostStaging> staging;

  // Consumer position.
  Rng rng{0};
  int64_t batches = 0;
  std::exception_ptr failed;  // a batch that could not be made; every later next() rethrows it

  // Prefetch worker.
  struct Item {
    Batch batch;
    Rng::State after{};
    std::exception_ptr error;
  };
  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> queue;
  bool stop = false;

  Batch make_batch(Rng& r) const {
    Batch b;
    b.B = rows.count;
    b.T = T;
    const int64_t rB = rows.count;
    int32_t *tokens = nullptr, *targets = nullptr;
    if (staging) {
      b.staged = staging->acquire();
      tokens = static_cast<int32_t*>(b.staged.data());
      targets = tokens + rB * T;
    } else {
      b.tokens.resize(static_cast<size_t>(rB * T));
      b.targets.resize(static_cast<size_t>(rB * T));
      tokens = b.tokens.data();
      targets = b.targets.data();
    }
    // Rows outside the slice are drawn into scratch (the generator steps as for all B rows).
    std::vector<int32_t> scratch(rB == B ? 0 : static_cast<size_t>(2 * T));
    for (int64_t row = 0; row < B; ++row) {
      const int64_t k = row - rows.begin;
      if (k >= 0 && k < rB) {
        const int64_t n = source->fill_row(r, tokens + k * T, targets + k * T);
        b.valid_targets += n;
        b.global_valid_targets += n;
      } else {
        b.global_valid_targets += source->fill_row(r, scratch.data(), scratch.data() + T);
      }
    }
    return b;
  }

  void start_worker() {
    if (cfg.prefetch == 0) return;
    stop = false;
    worker = std::thread([this, gen = rng]() mutable { produce(gen); });
  }

  void stop_worker() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
    queue.clear();
  }

  void produce(Rng gen) {
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || queue.size() < static_cast<size_t>(cfg.prefetch); });
        if (stop) return;
      }
      Item item;
      try {
        item.batch = make_batch(gen);
      } catch (...) { item.error = std::current_exception(); }
      item.after = gen.state();
      const bool failed_here = item.error != nullptr;
      {
        std::lock_guard<std::mutex> lk(mu);
        if (stop) return;
        queue.push_back(std::move(item));
      }
      cv.notify_all();
      if (failed_here) return;
    }
  }

  nlohmann::json identity() const {
    nlohmann::json id = source->identity();
    id["source"] = cfg.source;
    id["split"] = split_name(split);
    id["B"] = B;
    id["T"] = T;
    return id;
  }
};

Loader::Loader(const DataConfig& cfg, Split split, int64_t B, int64_t T, uint64_t seed, std::optional<Staging> staging,
               RowSlice rows)
    : impl_(std::make_unique<Impl>()) {
  if (B < 1) throw std::runtime_error("data: batch size B " + std::to_string(B) + " must be >= 1");
  if (rows.count < 0) rows = {0, B};
  if (rows.begin < 0 || rows.count < 1 || rows.begin + rows.count > B)
    throw std::runtime_error("data: row slice [" + std::to_string(rows.begin) + ", " +
                             std::to_string(rows.begin + rows.count) + ") is not within the batch of " +
                             std::to_string(B) + " rows");
  if (T < 1) throw std::runtime_error("data: sequence length T " + std::to_string(T) + " must be >= 1");
  if (cfg.prefetch < 0) throw std::runtime_error("data: prefetch " + std::to_string(cfg.prefetch) + " must be >= 0");
  Impl& m = *impl_;
  m.cfg = cfg;
  m.split = split;
  m.B = B;
  m.T = T;
  m.rows = rows;
  m.seed = seed;
  if (cfg.source == "synthetic") m.source = make_synthetic_source(cfg, split, T);
  else if (cfg.source == "text") m.source = make_text_source(cfg, split, T);
  else if (cfg.source == "tokens") m.source = make_token_source(cfg, split, T);
  else throw std::runtime_error("data: unknown source '" + cfg.source + "' (data.source: synthetic | text | tokens)");
  if (staging) {
    const int slots = staging->slots > 0 ? staging->slots : cfg.prefetch + 4;
    m.staging = std::make_unique<HostStaging>(staging->device,
                                              static_cast<size_t>(2 * rows.count * T) * sizeof(int32_t), slots);
  }
  // Train and validation draw from different streams of the same seed.
  uint64_t x = seed;
  const uint64_t stream = splitmix64(x) ^ (split == Split::train ? 0x7261696eull : 0x76616c00ull);
  m.rng = Rng(stream);
  m.start_worker();
}

Loader::~Loader() {
  if (impl_) impl_->stop_worker();
}

Batch Loader::next() {
  Impl& m = *impl_;
  if (m.failed) std::rethrow_exception(m.failed);
  if (m.cfg.prefetch == 0) {
    Rng r = m.rng;
    Batch b = m.make_batch(r);
    m.rng = r;
    ++m.batches;
    return b;
  }
  Impl::Item item;
  {
    std::unique_lock<std::mutex> lk(m.mu);
    m.cv.wait(lk, [&] { return !m.queue.empty(); });
    item = std::move(m.queue.front());
    m.queue.pop_front();
  }
  m.cv.notify_all();
  if (item.error) {
    m.failed = item.error;
    std::rethrow_exception(item.error);
  }
  m.rng.set_state(item.after);
  ++m.batches;
  return std::move(item.batch);
}

nlohmann::json Loader::state() const {
  const Impl& m = *impl_;
  nlohmann::json rng = nlohmann::json::array();
  for (uint64_t w : m.rng.state()) rng.push_back(hex64(w));
  return {
      {"version", kStateVersion}, {"identity", m.identity()}, {"seed", m.seed}, {"batches", m.batches}, {"rng", rng}};
}

void Loader::restore(const nlohmann::json& state) {
  Impl& m = *impl_;
  if (!state.is_object()) throw std::runtime_error("data state: not a JSON object");
  for (const char* key : {"version", "identity", "batches", "rng"})
    if (!state.contains(key)) throw std::runtime_error(std::string("data state: missing key '") + key + "'");
  if (state["version"] != kStateVersion)
    throw std::runtime_error("data state: version " + state["version"].dump() + ", expected " +
                             std::to_string(kStateVersion));
  const nlohmann::json id = m.identity();
  const nlohmann::json& saved = state["identity"];
  if (!saved.is_object()) throw std::runtime_error("data state: 'identity' is not an object");
  for (const auto& [k, v] : id.items())
    if (!saved.contains(k) || saved[k] != v)
      throw std::runtime_error("data state: '" + k + "' is " + (saved.contains(k) ? saved[k].dump() : "absent") +
                               " in the saved state but " + v.dump() + " in this loader");
  for (const auto& [k, v] : saved.items()) {
    (void)v;
    if (!id.contains(k)) throw std::runtime_error("data state: saved '" + k + "' has no counterpart in this loader");
  }
  const nlohmann::json& rng = state["rng"];
  if (!rng.is_array() || rng.size() != 4) throw std::runtime_error("data state: 'rng' must be an array of 4 hex words");
  Rng::State s{};
  for (size_t i = 0; i < 4; ++i) {
    if (!rng[i].is_string()) throw std::runtime_error("data state: 'rng' must be an array of 4 hex words");
    s[i] = parse_hex64(rng[i].get<std::string>());
  }
  if (s == Rng::State{}) throw std::runtime_error("data state: 'rng' is all zeros (not a reachable generator state)");
  if (!state["batches"].is_number_integer() || state["batches"].get<int64_t>() < 0)
    throw std::runtime_error("data state: 'batches' must be a non-negative integer, got " + state["batches"].dump());

  m.stop_worker();
  m.rng.set_state(s);
  m.batches = state["batches"].get<int64_t>();
  if (state.contains("seed") && state["seed"].is_number_unsigned()) m.seed = state["seed"].get<uint64_t>();
  m.failed = nullptr;
  m.start_worker();
}

int64_t Loader::vocab_size() const { return impl_->source->vocab_size(); }

const HostStaging* Loader::staging() const { return impl_->staging.get(); }

const int32_t* Batch::token_data() const {
  return staged ? static_cast<const int32_t*>(staged.data()) : tokens.empty() ? nullptr : tokens.data();
}
const int32_t* Batch::target_data() const {
  return staged ? static_cast<const int32_t*>(staged.data()) + B * T : targets.empty() ? nullptr : targets.data();
}

DeviceBatch upload(Batch& batch, Device device) {
  const int64_t B = batch.B, T = batch.T;
  Tensor both = Tensor::empty({2, B, T}, DType::i32, device);  // [2, B, T]: tokens, targets
  if (batch.staged && batch.staged.device() == device) {
    copy_to_device_async(both, batch.staged);
    batch.staged.reset();
  } else {
    const int32_t* tok = batch.token_data();
    const int32_t* tgt = batch.target_data();
    if (!tok || !tgt) throw std::invalid_argument("data::upload: the batch holds no data (uploaded already?)");
    Tensor host = Tensor::empty({2, B, T}, DType::i32, Device::cpu());
    std::memcpy(host.data<int32_t>(), tok, static_cast<size_t>(B * T) * sizeof(int32_t));
    std::memcpy(host.data<int32_t>() + B * T, tgt, static_cast<size_t>(B * T) * sizeof(int32_t));
    both.copy_(host);
    batch.staged.reset();
  }
  return {both.select(0, 0), both.select(0, 1)};
}

}  // namespace lt::data
