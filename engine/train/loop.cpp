#include "engine/train/loop.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "allocator/caching_allocator.h"
#include "engine/data/loader.h"
#include "engine/model/decode.h"
#include "engine/ops.h"
#include "engine/optim/adamw.h"
#include "engine/optim/schedule.h"
#include "engine/parallel/grad_sync.h"
#include "engine/staging.h"
#include "kernels/adamw.h"
#include "kernels/launch.h"

namespace lt::train {
namespace fs = std::filesystem;
namespace {

std::atomic<int64_t> g_step{0};
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  // A second signal ends the process the default way.
  std::signal(sig, SIG_DFL);
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}
double bits_double(uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

// Host batch -> device tensors [B, T] i32.
Tensor to_device_i32(const std::vector<int32_t>& v, int64_t B, int64_t T, Device device) {
  Tensor host = Tensor::empty({B, T}, DType::i32, Device::cpu());
  std::memcpy(host.data<int32_t>(), v.data(), v.size() * sizeof(int32_t));
  return host.to(device);
}

struct MemoryStats {
  int64_t in_use = 0, reserved = 0, peak = 0;
};
MemoryStats memory_stats(Device device) {
  alloc::Stats s = device.is_cuda() ? alloc::cuda_allocator(device.index).stats() : alloc::host_allocator().stats();
  return {s.allocated_bytes.current, s.reserved_bytes.current, s.allocated_bytes.peak};
}

std::string human_bytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2fG", static_cast<double>(b) / (1 << 30));
  else std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(b) / (1 << 20));
  return buf;
}

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  else std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

// Dense peak FLOP/s for MFU: LINTRAIN_PEAK_TFLOPS, else an H100/H200-class figure for the
// precision; 0 (MFU not shown) on the CPU.
double peak_flops(Device device, model::Precision p) {
  if (const char* env = std::getenv("LINTRAIN_PEAK_TFLOPS")) return std::atof(env) * 1e12;
  if (!device.is_cuda()) return 0.0;
  switch (p) {
    case model::Precision::fp32: return 67e12;
    case model::Precision::tf32: return 495e12;
    case model::Precision::bf16: return 989e12;
  }
  return 0.0;
}

// Keeps lines of metrics.jsonl whose step is <= `step` (a resumed run rewrites what came after
// its checkpoint); drops a torn last line.
void metrics_truncate(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::ostringstream kept;
  std::string line;
  while (std::getline(in, line)) {
    try {
      auto j = nlohmann::json::parse(line);
      if (j.value("step", int64_t{0}) <= step) kept << line << "\n";
    } catch (const std::exception&) {}
  }
  in.close();
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept.str();
  }
  fs::rename(tmp, path);
}

// Offset of a parameter's view inside the parameter arena (arena order = spec order).
int64_t arena_offset(model::Model& m, const std::string& name) {
  return m.param(name).offset() - m.arenas().params.offset();
}

// The moments of every parameter under its checkpoint name, as views of the full [P] moment
// tensors m_full, v_full (the model's arenas, or GradSync's gathered ones).
std::vector<io::NamedTensor> moment_tensors(model::Model& m, const Tensor& m_full, const Tensor& v_full) {
  std::vector<io::NamedTensor> out;
  for (const auto& s : m.specs()) {
    int64_t off = arena_offset(m, s.name);
    int64_t n = shape_numel(s.shape);
    out.push_back({"m." + s.name, m_full.narrow(0, off, n).view(s.shape)});
    out.push_back({"v." + s.name, v_full.narrow(0, off, n).view(s.shape)});
  }
  return out;
}

// Reads the checkpoint's moments into the full [P] tensors m_full, v_full.
void load_moments(model::Model& m, const io::SafetensorsFile& f, Tensor& m_full, Tensor& v_full) {
  for (const auto& s : m.specs()) {
    int64_t off = arena_offset(m, s.name);
    int64_t n = shape_numel(s.shape);
    for (const char* which : {"m.", "v."}) {
      Tensor src = f.get(which + s.name);
      if (src.shape() != s.shape)
        throw std::runtime_error("checkpoint state '" + f.path + "': " + which + s.name + " has shape " +
                                 shape_str(src.shape()) + ", the model wants " + shape_str(s.shape));
      Tensor dst = (which[0] == 'm' ? m_full : v_full).narrow(0, off, n).view(s.shape);
      dst.copy_(src);
    }
  }
}

// Mean and standard deviation of the loss window.
std::pair<double, double> window_stats(const std::deque<double>& w) {
  double mean = 0.0;
  for (double x : w) mean += x;
  mean /= static_cast<double>(w.size());
  double var = 0.0;
  for (double x : w) var += (x - mean) * (x - mean);
  var /= static_cast<double>(w.size() > 1 ? w.size() - 1 : 1);
  return {mean, std::sqrt(var)};
}

// LINTRAIN_INJECT_NONFINITE: step numbers and ranges ("3,7,10..12"; commas or spaces),
// sorted, read once per process; ConfigError naming the variable on a bad list.
const std::vector<int64_t>& inject_nonfinite_steps() {
  static const std::vector<int64_t> steps = [] {
    std::vector<int64_t> out;
    const char* env = std::getenv("LINTRAIN_INJECT_NONFINITE");
    if (!env) return out;
    const std::string text = env;
    auto bad = [&](const std::string& item) {
      return ConfigError("LINTRAIN_INJECT_NONFINITE '" + text + "': bad item '" + item +
                         "' (expected step numbers >= 1 or ranges A..B, separated by commas)");
    };
    auto number = [&](const std::string& t, const std::string& item) {
      if (t.empty() || t.size() > 12 || t.find_first_not_of("0123456789") != std::string::npos) throw bad(item);
      const int64_t v = std::stoll(t);
      if (v < 1) throw bad(item);
      return v;
    };
    std::string item;
    std::istringstream is(text);
    while (std::getline(is, item, ',')) {
      std::istringstream words(item);
      for (std::string w; words >> w;) {
        const size_t dots = w.find("..");
        if (dots == std::string::npos) {
          out.push_back(number(w, w));
          continue;
        }
        const int64_t a = number(w.substr(0, dots), w), b = number(w.substr(dots + 2), w);
        if (a > b || b - a > 1000000) throw bad(w);
        for (int64_t s = a; s <= b; ++s) out.push_back(s);
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }();
  return steps;
}

bool byte_vocab(const RunConfig& rc) {
  return rc.data.source == "text" || (rc.data.source == "synthetic" && rc.data.task == "bytes");
}

// GPT-2 byte-level BPE: the printable stand-in characters for each byte.
std::vector<std::string> byte_level_alphabet() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(256 + n++);
    }
  std::vector<std::string> out(256);
  for (size_t i = 0; i < bs.size(); ++i) {
    int c = cs[i];
    std::string u;
    if (c < 0x80) u += static_cast<char>(c);
    else {
      u += static_cast<char>(0xC0 | (c >> 6));
      u += static_cast<char>(0x80 | (c & 0x3F));
    }
    out[static_cast<size_t>(bs[i])] = u;
  }
  return out;
}

// tokenizer.json beside the token shards (the folder of data.path, or of its glob).
std::string tokenizer_path(const RunConfig& rc) {
  if (rc.data.source != "tokens") return "";
  fs::path p(rc.data.path);
  fs::path dir = fs::is_directory(p) ? p : p.parent_path();
  fs::path t = dir / "tokenizer.json";
  return fs::exists(t) ? t.string() : "";
}

}  // namespace

int64_t current_train_step() { return g_step.load(std::memory_order_relaxed); }

Device resolve_device(const std::string& spec) {
  if (spec == "auto") return default_device();
  Device d;
  try {
    d = Device::parse(spec);
  } catch (const std::exception&) { throw ConfigError("device '" + spec + "': expected auto, cpu, cuda or cuda:N"); }
  if (d.is_cuda()) {
    if (!cuda_available())
      throw ConfigError("device '" + spec + "': CUDA is not usable here (see the line above); use cpu or auto");
    if (d.index >= cuda_device_count())
      throw ConfigError("device '" + spec + "': only " + std::to_string(cuda_device_count()) + " CUDA device(s)");
  }
  return d;
}

EvalResult evaluate(model::Model& m, const RunConfig& rc, int64_t batches) {
  StageScope stage("eval");
  const int64_t B = rc.train.batch_size, T = rc.train.seq_len;
  data::Loader val(rc.data, data::Split::val, B, T, rc.train.seed);
  std::vector<data::Batch> bs;
  int64_t valid = 0;
  for (int64_t i = 0; i < batches; ++i) {
    bs.push_back(val.next());
    valid += bs.back().valid_targets;
  }
  EvalResult r;
  if (valid == 0) return r;
  Device dev = m.device();
  Tensor loss = Tensor::zeros({}, DType::f32, dev);
  int64_t correct = 0;
  for (const auto& b : bs) {
    Tensor tokens = to_device_i32(b.tokens, B, T, dev);
    Tensor targets = to_device_i32(b.targets, B, T, dev);
    Tensor flags = Tensor::full({B * T}, -1.0, DType::i32, dev);
    m.evaluate(tokens, targets, 1.0 / static_cast<double>(valid), loss, flags);
    for (double f : flags.to_vector()) correct += f > 0.5 ? 1 : 0;
  }
  r.loss = loss.item();
  r.targets = valid;
  r.accuracy = static_cast<double>(correct) / static_cast<double>(valid);
  return r;
}

std::vector<int32_t> sample_tokens(model::Model& m, const std::vector<int32_t>& prompt, int64_t n, double temperature,
                                   int64_t top_k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> seq = prompt;
  if (seq.empty()) seq.push_back(0);
  std::vector<int32_t> out;
  if (n <= 0) return out;
  // Recurrent decoding: the prompt once through the state, then one O(1) step per token.
  model::DecodeState state(m, 1);
  Tensor next_logits = model::prefill(m, state, to_device_i32(seq, 1, static_cast<int64_t>(seq.size()), m.device()));
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) next_logits = model::decode_step(m, state, to_device_i32({seq.back()}, 1, 1, m.device()).view({1}));
    std::vector<double> logits = next_logits.to_vector();
    int32_t next = 0;
    if (temperature <= 0.0) {
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      std::vector<int32_t> idx(logits.size());
      for (size_t j = 0; j < idx.size(); ++j) idx[j] = static_cast<int32_t>(j);
      size_t k = top_k > 0 ? std::min<size_t>(static_cast<size_t>(top_k), idx.size()) : idx.size();
      std::partial_sort(idx.begin(), idx.begin() + static_cast<int64_t>(k), idx.end(), [&](int32_t a, int32_t b) {
        return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
      });
      double mx = logits[static_cast<size_t>(idx[0])];
      std::vector<double> p(k);
      double sum = 0.0;
      for (size_t j = 0; j < k; ++j) sum += p[j] = std::exp((logits[static_cast<size_t>(idx[j])] - mx) / temperature);
      double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
      size_t j = 0;
      for (; j + 1 < k && u >= p[j]; ++j) u -= p[j];
      next = idx[j];
    }
    seq.push_back(next);
    out.push_back(next);
  }
  return out;
}

std::string decode_tokens(const RunConfig& rc, const std::vector<int32_t>& tokens) {
  if (byte_vocab(rc)) {
    std::string s;
    for (int32_t t : tokens) s += static_cast<char>(t & 0xFF);
    return s;
  }
  std::string tok = tokenizer_path(rc);
  if (!tok.empty()) {
    try {
      std::ifstream f(tok);
      auto j = nlohmann::json::parse(f);
      std::unordered_map<int64_t, std::string> inv;
      for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it)
        inv[it.value().get<int64_t>()] = it.key();
      if (j.contains("added_tokens"))
        for (const auto& a : j["added_tokens"]) inv[a["id"].get<int64_t>()] = a["content"].get<std::string>();
      auto alphabet = byte_level_alphabet();
      std::unordered_map<std::string, char> back;
      for (int b = 0; b < 256; ++b) back[alphabet[static_cast<size_t>(b)]] = static_cast<char>(b);
      std::string out;
      for (int32_t t : tokens) {
        auto it = inv.find(t);
        if (it == inv.end()) continue;
        const std::string& s = it->second;
        for (size_t i = 0; i < s.size();) {
          size_t len = (static_cast<uint8_t>(s[i]) & 0x80) == 0      ? 1
                       : (static_cast<uint8_t>(s[i]) & 0xE0) == 0xC0 ? 2
                                                                     : 3;
          auto b = back.find(s.substr(i, len));
          if (b != back.end()) out += b->second;
          else out += s.substr(i, len);
          i += len;
        }
      }
      return out;
    } catch (const std::exception& e) {
      spdlog::warn("tokenizer {} could not be read ({}): printing token ids", tok, e.what());
    }
  }
  std::string s;
  for (size_t i = 0; i < tokens.size(); ++i) s += (i ? " " : "") + std::to_string(tokens[i]);
  return s;
}

std::vector<int32_t> encode_prompt(const RunConfig& rc, const std::string& prompt) {
  std::vector<int32_t> out;
  if (byte_vocab(rc)) {
    for (unsigned char c : prompt) out.push_back(c);
    return out;
  }
  std::string cleaned = prompt;
  std::replace(cleaned.begin(), cleaned.end(), ',', ' ');
  std::istringstream is(cleaned);
  std::string w;
  while (is >> w) {
    char* end = nullptr;
    long long v = std::strtoll(w.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v >= rc.model.vocab_size)
      throw ConfigError("--prompt: this model's data are token ids (vocab " + std::to_string(rc.model.vocab_size) +
                        "): give ids separated by spaces, e.g. \"12 7 99\"; got '" + w + "'");
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

LoadedModel load_model_from_checkpoint(const std::string& dir, const std::string& device_spec, bool need_data) {
  LoadedModel lm;
  try {
    lm.checkpoint = checkpoint_load(dir);
  } catch (const std::exception& e) { throw ConfigError(e.what()); }
  // export and sample need no data files: the run's data may have moved.
  lm.config = config_resolve(lm.checkpoint.config, need_data);
  Device dev = resolve_device(device_spec);
  lm.model = std::make_unique<model::Model>(lm.config.model, dev);
  lm.model->load_params(lm.checkpoint.model);
  lm.model->refresh_shadow();
  return lm;
}

RunResult train_run(const RunConfig& rc, const RunOptions& options) {
  const TrainConfig& tc = rc.train;
  const int64_t B = tc.batch_size, T = tc.seq_len;
  dist::Job* const job = options.job;
  const int rank = job ? job->rank() : 0, world = job ? job->world() : 1;
  const bool writer = rank == 0;  // the rank that writes files, evaluates and samples
  Device dev = job ? job->device() : resolve_device(rc.device);
  if (B % world != 0)
    throw ConfigError("config key 'train.batch_size': " + std::to_string(B) + " rows cannot be split evenly over " +
                      std::to_string(world) + " data-parallel ranks (use a multiple of " + std::to_string(world) + ")");
  const data::RowSlice rows{rank * (B / world), B / world};

  // ---- everything that can be bad input is checked before the first write -------------
  const std::vector<int64_t>& inject = inject_nonfinite_steps();
  std::optional<Checkpoint> resume_from;
  if (options.resume != "auto" && options.resume != "none") {
    if (!fs::is_directory(options.resume))
      throw ConfigError("--resume '" + options.resume + "': no such checkpoint folder");
    try {
      resume_from = checkpoint_load(options.resume);
    } catch (const std::exception& e) { throw ConfigError(std::string("--resume: ") + e.what()); }
  } else if (options.resume == "auto") {
    if (auto dir = checkpoint_find_latest(rc.out_dir)) {
      try {
        resume_from = checkpoint_load(*dir);
      } catch (const std::exception& e) { throw ConfigError(std::string("--resume auto: ") + e.what()); }
    } else if (!checkpoint_list(rc.out_dir).empty()) {
      spdlog::warn("no checkpoint in {} verifies: starting from scratch", rc.out_dir);
    }
  }
  if (resume_from) {
    std::vector<std::string> broken, changed;
    const auto& shape_keys = config_shape_keys();
    for (const auto& k : config_diff(resume_from->config, rc.effective)) {
      if (std::find(shape_keys.begin(), shape_keys.end(), k) != shape_keys.end()) broken.push_back(k);
      else changed.push_back(k);
    }
    if (!broken.empty()) {
      std::string msg = "checkpoint " + resume_from->dir + " does not fit this config: ";
      for (size_t i = 0; i < broken.size(); ++i) {
        const auto* was = config_get(resume_from->config, broken[i]);
        msg += (i ? ", " : "") + broken[i] + " was " + (was ? was->dump() : "absent") + ", now " +
               config_get(rc.effective, broken[i])->dump();
      }
      throw ConfigError(msg + " (use --out for a new run, or --resume none to start over)");
    }
    if (!changed.empty()) {
      std::string list;
      for (const auto& k : changed) list += (list.empty() ? "" : ", ") + k;
      spdlog::warn("resuming with a config that differs from the checkpoint's in: {}", list);
    }
  }

  std::unique_ptr<model::Model> model;
  std::unique_ptr<data::Loader> train_loader;
  try {
    model = std::make_unique<model::Model>(rc.model, dev);
  } catch (const std::invalid_argument& e) { throw ConfigError(std::string("model: ") + e.what()); }
  try {
    // Staging slots: the prefetch queue, the step's micro-batches and the copies of up to two
    // steps in flight, plus the one being filled (the ring grows if that is not enough).
    const int slots = rc.data.prefetch + static_cast<int>(3 * tc.grad_accum) + 1;
    train_loader =
        std::make_unique<data::Loader>(rc.data, data::Split::train, B, T, tc.seed, data::Staging{dev, slots}, rows);
    data::Loader probe(rc.data, data::Split::val, B, T, tc.seed);
    if (probe.vocab_size() > rc.model.vocab_size)
      throw ConfigError("data vocabulary " + std::to_string(probe.vocab_size()) + " exceeds model.vocab_size " +
                        std::to_string(rc.model.vocab_size));
  } catch (const ConfigError&) { throw; } catch (const std::exception& e) {
    const std::string what = e.what();  // the sources' messages mostly start with "data: " already
    throw ConfigError(what.rfind("data: ", 0) == 0 ? what : "data: " + what);
  }
  if (resume_from) {
    try {
      train_loader->restore(resume_from->loop_state.at("data"));
    } catch (const std::exception& e) {
      throw ConfigError("checkpoint " + resume_from->dir + ": its data position does not fit this data: " + e.what());
    }
  }

  // The output folder must be writable before anything else happens in it (the writer's).
  if (writer) {
    std::error_code ec;
    fs::create_directories(rc.out_dir, ec);
    std::string probe = (fs::path(rc.out_dir) / (".write-test." + std::to_string(::getpid()))).string();
    FILE* f = ec ? nullptr : std::fopen(probe.c_str(), "w");
    if (!f)
      throw ConfigError("config key 'out': folder '" + rc.out_dir + "' cannot be written" +
                        (ec ? " (" + ec.message() + ")" : ""));
    std::fclose(f);
    fs::remove(probe, ec);
  }
  if (writer) {
    // Leftovers of checkpoints interrupted while being written.
    for (const auto& e : fs::directory_iterator(rc.out_dir)) {
      std::string n = e.path().filename().string();
      if (e.is_directory() && n.rfind(".step-", 0) == 0) fs::remove_all(e.path());
    }
    if (options.resume == "none") {
      for (const auto& d : checkpoint_list(rc.out_dir)) {
        spdlog::info("--resume none: removing the old checkpoint {}", d);
        fs::remove_all(d);
      }
    }
    std::ofstream f(fs::path(rc.out_dir) / "config.json", std::ios::trunc);
    f << rc.effective.dump(2) << "\n";
  }

  // ---- state -------------------------------------------------------------------------
  int64_t step = 0, applied = 0, skipped = 0, consecutive = 0;
  std::deque<double> window;
  model->init_weights(tc.seed);
  // Data parallel: the gradient reduction (and, under dist.zero1, the moments' shards).
  std::unique_ptr<dist::GradSync> sync;
  if (job) {
    dist::GradSyncConfig gc;
    gc.bucket_bytes = rc.dist.bucket_bytes;
    gc.reduce_dtype = rc.dist.reduce_bf16 ? DType::bf16 : DType::f32;
    gc.overlap = rc.dist.overlap;
    gc.zero1 = rc.dist.zero1;
    sync = std::make_unique<dist::GradSync>(job->comm(), *model, gc);
  }
  const std::string metrics_path = (fs::path(rc.out_dir) / "metrics.jsonl").string();
  if (resume_from) {
    StageScope stage("checkpoint");
    model->load_params(resume_from->model);
    model->refresh_shadow();
    if (sync) {
      const int64_t P = model->arenas().params.numel();
      Tensor m_full = Tensor::zeros({P}, model->arenas().params.dtype(), dev);
      Tensor v_full = Tensor::zeros({P}, model->arenas().params.dtype(), dev);
      load_moments(*model, resume_from->state, m_full, v_full);
      sync->load_moments_full(m_full, v_full);
    } else {
      load_moments(*model, resume_from->state, model->arenas().m, model->arenas().v);
    }
    const auto& s = resume_from->loop_state;
    step = s.at("step").get<int64_t>();
    applied = s.at("applied").get<int64_t>();
    skipped = s.at("skipped").get<int64_t>();
    consecutive = s.at("consecutive_skips").get<int64_t>();
    for (const auto& b : s.at("loss_window")) window.push_back(bits_double(b.get<uint64_t>()));
    if (writer) metrics_truncate(metrics_path, step);
    spdlog::info("resumed from {} at step {} of {}", resume_from->dir, step, tc.steps);
  } else if (writer) {
    std::ofstream(metrics_path, std::ios::trunc);
  }
  if (job) {
    // Every rank starts from rank 0's parameters and at rank 0's step.
    Tensor where = Tensor::full({1}, static_cast<double>(step), DType::f64, dev);
    job->comm().broadcast(where, 0, current_stream(dev));
    const auto root_step = static_cast<int64_t>(where.item());
    if (root_step != step)
      throw std::runtime_error("rank " + std::to_string(rank) + " resumed at step " + std::to_string(step) +
                               ", rank 0 at step " + std::to_string(root_step) +
                               ": the ranks do not see the same checkpoints in '" + rc.out_dir + "'");
    job->comm().broadcast(model->arenas().params, 0, current_stream(dev));
    model->refresh_shadow();
    job->progress();
  }
  const std::string config_text = rc.effective.dump();

  auto save_checkpoint = [&]() {
    StageScope stage("checkpoint");
    nlohmann::json s;
    s["step"] = step;
    s["applied"] = applied;
    s["skipped"] = skipped;
    s["consecutive_skips"] = consecutive;
    s["loss_window"] = nlohmann::json::array();
    for (double x : window) s["loss_window"].push_back(double_bits(x));
    s["data"] = train_loader->state();
    s["seed"] = tc.seed;
    // Data parallel: the moments as one [P] pair on every rank (gathered under zero1: a
    // collective, so every rank comes here); rank 0 writes.
    auto [m_full, v_full] = sync ? sync->moments_full() : std::pair{model->arenas().m, model->arenas().v};
    if (!writer) return std::string();
    std::string dir = checkpoint_write(rc.out_dir, step, model->named_params(), moment_tensors(*model, m_full, v_full),
                                       s, config_text, tc.keep_checkpoints);
    spdlog::info("checkpoint {}", dir);
    return dir;
  };

  if (step >= tc.steps) {
    spdlog::info(
        "nothing to do: the run in {} already reached step {} of {} (raise --steps, or --resume none to start over)",
        rc.out_dir, step, tc.steps);
    return RunResult::finished;
  }

  if (options.handle_signals) {
    g_stop_signal = 0;
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
  }

  std::ofstream metrics;
  if (writer) metrics.open(metrics_path, std::ios::app);
  const bool live = writer && ::isatty(::fileno(stderr)) != 0;
  const double flops_per_token = model->flops_per_token(T, B / world);
  const double peak = peak_flops(dev, rc.model.precision);
  const int64_t tokens_per_step = B * T * tc.grad_accum;
  if (!inject.empty()) {
    std::string list;
    for (int64_t s : inject) list += (list.empty() ? "" : ", ") + std::to_string(s);
    spdlog::warn("LINTRAIN_INJECT_NONFINITE: the loss of step(s) {} is made non-finite on the device (fault injection)",
                 list);
  }
  // The step's scalars [2] f32: the loss (accumulated over the micro-batches) and, data
  // parallel, this rank's stop request; summed over the ranks before the update.
  Tensor step_scalars = Tensor::zeros({2}, DType::f32, dev);
  Tensor loss_accum = step_scalars.narrow(0, 0, 1).view({});
  Tensor stop_flag = step_scalars.narrow(0, 1, 1);
  Tensor skipped_dev = Tensor::zeros({}, DType::i32, dev);
  Tensor report_dev = Tensor::zeros({3}, DType::f64, dev);  // loss, grad norm, skip code of the step
  // The reports on their way to the host: [3] f64, then the summed stop flag (f32).
  constexpr size_t kStopOffset = 3 * sizeof(double);
  HostStaging readback(dev, kStopOffset + sizeof(double), 4);
  bool agreed_stop = false;  // data parallel: a rank asked to stop (read one step late)
  double ema_ms = 0.0;
  const int64_t first_step = step;
  auto clear_live = [&] {
    if (live) std::fprintf(stderr, "\r\033[K");
  };

  spdlog::info("training {} ({} parameters) on {}: {} steps of {} tokens, mixer chunk {}{}, out {}",
               model::arch_name(rc.model.arch), model->num_params(), dev.str(), tc.steps, tokens_per_step,
               model->mixer_chunk(B / world, T), rc.model.chunk == 0 ? " (auto)" : "", rc.out_dir);
  if (job)
    spdlog::info("data parallel: {} ranks ({}), {} rows each; {} gradient buckets, {} reduction{}{}", world,
                 job->comm().backend(), B / world, sync->buckets().size(), rc.dist.reduce_bf16 ? "bf16" : "fp32",
                 rc.dist.overlap ? ", overlapped with the backward" : "",
                 rc.dist.zero1 ? ", AdamW state sharded (ZeRO-1)" : "");

  // A step whose result is on its way to the host.
  struct InFlight {
    StepStats st;
    HostStaging::Lease report;  // [3] f64: loss, grad norm, skip code; then the stop flag
    double spike_mean = 0.0, spike_sd = 0.0;
    size_t window_size = 0;
  };
  std::optional<InFlight> in_flight;

  // Reads the in-flight step's result (waiting for its copy if it is not there yet) and
  // does what the host does with it: counters, spike window, warning, progress, metrics.
  auto retire = [&]() {
    if (!in_flight) return;
    InFlight f = std::move(*in_flight);
    in_flight.reset();
    f.report.wait();
    double r[3];
    std::memcpy(r, f.report.data(), sizeof r);
    if (sync) {
      float stop_sum = 0.0f;
      std::memcpy(&stop_sum, static_cast<const char*>(f.report.data()) + kStopOffset, sizeof stop_sum);
      agreed_stop |= stop_sum > 0.0f;
    }
    f.report.reset();
    StepStats& st = f.st;
    st.has_result = true;
    // Every data-parallel step on CUDA is timed; the figures come in step order.
    if (sync)
      if (auto t = sync->take_timing()) {
        st.comm_ms = t->comm_ms;
        st.comm_exposed_ms = t->exposed_ms;
      }
    st.loss = r[0];
    st.grad_norm = r[1];
    switch (static_cast<kern::SkipCode>(static_cast<int32_t>(r[2]))) {
      case kern::SkipCode::applied: break;
      case kern::SkipCode::nonfinite_loss: st.skip_reason = "non-finite loss"; break;
      case kern::SkipCode::nonfinite_norm: st.skip_reason = "non-finite gradient norm"; break;
      case kern::SkipCode::loss_spike: {
        char buf[96];
        std::snprintf(buf, sizeof buf, "loss spike (%.4g, z = %.1f over the last %zu steps)", st.loss,
                      (st.loss - f.spike_mean) / f.spike_sd, f.window_size);
        st.skip_reason = buf;
        break;
      }
      default: throw std::runtime_error("step " + std::to_string(st.step) + ": bad skip code " + std::to_string(r[2]));
    }
    st.skipped = !st.skip_reason.empty();
    if (!st.skipped) {
      ++applied;
      consecutive = 0;
      window.push_back(st.loss);
      while (static_cast<int64_t>(window.size()) > tc.spike_window) window.pop_front();
    } else {
      ++skipped;
      ++consecutive;
    }
    ema_ms = st.step == first_step + 1 ? st.ms : 0.9 * ema_ms + 0.1 * st.ms;
    if (options.listener) options.listener->step_result(st);

    if (st.skipped && writer) {
      clear_live();
      spdlog::warn("step {}: update skipped: {} ({} in a row, {} in all)", st.step, st.skip_reason, consecutive,
                   skipped);
    }
    // The metrics record and the plain progress line every log_every steps; on a terminal
    // the live line is redrawn every step.
    const bool log_now = writer && (st.step % tc.log_every == 0 || st.step == tc.steps);
    if (log_now || live) {
      const double tok_s = static_cast<double>(tokens_per_step) / (ema_ms / 1000.0);  // all ranks'
      const double mfu = peak > 0 ? flops_per_token * tok_s / (peak * world) : 0.0;
      MemoryStats mem = memory_stats(dev);
      if (log_now) {
        nlohmann::ordered_json j;
        j["type"] = "train";
        j["step"] = st.step;
        j["loss"] = st.loss;
        j["lr"] = st.lr;
        j["grad_norm"] = st.grad_norm;
        j["skipped"] = st.skipped;
        j["skipped_total"] = skipped;
        j["tokens_per_s"] = tok_s;
        j["ms_per_step"] = st.ms;
        j["mfu"] = mfu;
        j["mem_in_use"] = mem.in_use;
        j["mem_reserved"] = mem.reserved;
        j["mem_peak"] = mem.peak;
        if (sync && dev.is_cuda()) {
          j["comm_ms"] = st.comm_ms;
          j["comm_exposed_ms"] = st.comm_exposed_ms;
        }
        metrics << j.dump() << "\n";
        metrics.flush();
      }
      const double eta = ema_ms / 1000.0 * static_cast<double>(tc.steps - st.step);
      char mfu_text[16] = "-";
      if (peak > 0) std::snprintf(mfu_text, sizeof mfu_text, "%.1f%%", mfu * 100.0);
      char line[320];
      std::snprintf(
          line, sizeof line,
          "step %lld/%lld | loss %.4f | lr %.3g | gnorm %.3f | %.0f tok/s | %.1f ms/step | MFU %s | mem %s/%s | ETA %s",
          static_cast<long long>(st.step), static_cast<long long>(tc.steps), st.loss, st.lr, st.grad_norm, tok_s,
          ema_ms, mfu_text, human_bytes(mem.in_use).c_str(), human_bytes(mem.reserved).c_str(),
          human_duration(eta).c_str());
      if (live) std::fprintf(stderr, "\r\033[K%s", line), std::fflush(stderr);
      else spdlog::info("{}", line);
    }
  };

  RunResult result = RunResult::finished;
  // After a retire: too many skips in a row end the run.
  auto stop_for_skips = [&]() {
    if (consecutive < tc.max_consecutive_skips) return false;
    clear_live();
    auto kept = checkpoint_list(rc.out_dir);
    spdlog::error(
        "stopping: {} updates skipped in a row (train.max_consecutive_skips = {}); the last good checkpoint "
        "is {}. Lower train.lr or raise train.max_grad_norm / train.spike_zscore, then resume.",
        consecutive, tc.max_consecutive_skips, kept.empty() ? std::string("(none)") : kept.front());
    result = RunResult::too_many_skips;
    return true;
  };

  while (step < tc.steps) {
    // One skip short of the limit: the previous step's result decides whether this step runs.
    if (in_flight && consecutive + 1 >= tc.max_consecutive_skips) {
      retire();
      if (stop_for_skips()) break;
    }
    const int64_t this_step = step + 1;
    g_step.store(this_step, std::memory_order_relaxed);
    if (options.listener) options.listener->before_step(this_step);
    auto t0 = Clock::now();
    InFlight f;
    StepStats& st = f.st;
    st.step = this_step;
    st.lr = optim::lr_at(tc.schedule, step);
    st.tokens = tokens_per_step;
    st.loss = st.grad_norm = std::numeric_limits<double>::quiet_NaN();

    std::vector<data::Batch> batches;
    int64_t valid = 0;
    {
      StageScope stage("data");
      for (int64_t i = 0; i < tc.grad_accum; ++i) {
        batches.push_back(train_loader->next());
        valid += batches.back().global_valid_targets;  // the whole global batch's
      }
    }
    {
      StageScope stage("zero_grad");
      model->zero_grad();
      step_scalars.zero_();
    }
    if (sync) sync->begin_step(/*timed=*/dev.is_cuda());
    {
      const double inv_count = valid > 0 ? 1.0 / static_cast<double>(valid) : 0.0;
      for (size_t i = 0; i < batches.size(); ++i) {
        data::DeviceBatch d;
        {
          StageScope stage("data/upload");
          d = data::upload(batches[i], dev);
        }
        // The last micro-batch completes the gradients: its backward starts their reduction.
        const bool last = i + 1 == batches.size();
        model->forward_backward(d.tokens, d.targets, inv_count, loss_accum, sync && last ? &sync->hook() : nullptr);
      }
    }
    if (sync) {
      StageScope stage("dist/sync");
      if (g_stop_signal != 0) stop_flag.fill_(1.0);
      sync->finish(step_scalars);
    }
    if (std::binary_search(inject.begin(), inject.end(), this_step))
      loss_accum.fill_(std::numeric_limits<double>::quiet_NaN());
    Tensor norm;
    {
      StageScope stage("optim/clip");
      norm = sync ? sync->grad_norm() : optim::grad_norm(model->arenas().grads);
    }
    // The previous step's result: the device has this step's forward and backward queued.
    {
      StageScope stage("report");
      retire();
    }
    {
      StageScope stage("optim/adamw");
      optim::StepGate gate;
      gate.loss = loss_accum;
      gate.report = report_dev;
      if (tc.spike_zscore > 0 && static_cast<int64_t>(window.size()) >= std::min<int64_t>(tc.spike_window, 10)) {
        auto [mean, sd] = window_stats(window);
        gate.spike_test = true;
        gate.spike_mean = f.spike_mean = mean;
        gate.spike_sd = f.spike_sd = sd;
        gate.spike_zscore = tc.spike_zscore;
        f.window_size = window.size();
      }
      optim::adamw_step(sync ? sync->update_arenas() : model->arenas(), tc.adamw, st.lr, applied + 1, norm, skipped_dev,
                        &gate);
      if (sync) sync->after_update();
      f.report = readback.acquire();
      copy_to_host_async(f.report, report_dev);
      if (sync) copy_to_host_async(f.report, stop_flag, kStopOffset);
    }
    step = this_step;
    st.ms = ms_since(t0);
    if (options.listener) options.listener->after_step(st);
    in_flight = std::move(f);
    if (job) job->progress();

    // Data parallel, the ranks stop together: after the step whose result showed a request.
    const bool stop = sync ? agreed_stop : g_stop_signal != 0;
    const bool eval_now =
        !options.measure_only && ((tc.eval_every > 0 && step % tc.eval_every == 0) || step == tc.steps);
    const bool sample_now =
        !options.measure_only && tc.sample_every > 0 && step % tc.sample_every == 0 && rc.data.source != "synthetic";
    const bool checkpoint_due =
        !options.measure_only &&
        ((tc.checkpoint_every > 0 && step % tc.checkpoint_every == 0) || step == tc.steps || stop);
    if (eval_now || sample_now || checkpoint_due || stop || step == tc.steps) {
      retire();
      if (stop_for_skips()) break;
    }

    if (eval_now && writer) {
      EvalResult ev = evaluate(*model, rc, tc.eval_batches);
      nlohmann::ordered_json j;
      j["type"] = "eval";
      j["step"] = step;
      j["val_loss"] = ev.loss;
      j[rc.data.source == "synthetic" && rc.data.task == "mqar" ? "mqar_accuracy" : "val_accuracy"] = ev.accuracy;
      j["val_targets"] = ev.targets;
      metrics << j.dump() << "\n";
      metrics.flush();
      clear_live();
      spdlog::info("eval step {}: val loss {:.4f}, {} {:.3f}", step, ev.loss,
                   rc.data.source == "synthetic" && rc.data.task == "mqar" ? "MQAR accuracy" : "accuracy", ev.accuracy);
    }
    if (sample_now && writer) {
      StageScope stage("sample");
      // Prompt: the start of the first validation window (the same every time).
      data::Loader val(rc.data, data::Split::val, 1, std::min<int64_t>(T, 16), tc.seed);
      std::vector<int32_t> prompt = val.next().tokens;
      auto out = sample_tokens(*model, prompt, tc.sample_tokens, 0.8, 40, tc.seed + static_cast<uint64_t>(step));
      clear_live();
      spdlog::info("sample step {}: [{}] -> {}", step, decode_tokens(rc, prompt), decode_tokens(rc, out));
    }

    // No periodic checkpoint in the middle of a run of skipped updates: the newest one stays
    // the last good state.
    if (checkpoint_due && (consecutive == 0 || stop)) {
      clear_live();
      save_checkpoint();
    }
    if (job) job->progress();
    if (stop) {
      clear_live();
      spdlog::info(
          "{} received: stopped after step {} with a checkpoint. Resume with: trainer --config {} --resume auto{}",
          g_stop_signal == SIGINT    ? "SIGINT"
          : g_stop_signal == SIGTERM ? "SIGTERM"
                                     : "a stop request (another rank)",
          step, options.config_path.empty() ? "<config>" : options.config_path, " --out " + rc.out_dir);
      result = RunResult::interrupted;
      break;
    }
  }
  retire();
  if (live) std::fprintf(stderr, "\n");
  if (options.handle_signals) {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
  g_step.store(0, std::memory_order_relaxed);
  if (result == RunResult::finished)
    spdlog::info("done: {} steps ({} updates skipped); checkpoints in {}", step, skipped, rc.out_dir);
  return result;
}

}  // namespace lt::train
