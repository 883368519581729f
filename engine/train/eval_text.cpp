// Evaluation over whole documents (eval_text.h): windows, batches, figures, and reading PATH
// the way the run reads its data.
#include "engine/train/eval_text.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>

#include "engine/data/documents.h"
#include "engine/data/tokenizer.h"
#include "engine/train/prompt.h"
#include "kernels/launch.h"

namespace lt::train {
namespace {

namespace fs = std::filesystem;

// Bad input unless every id of a document is < vocab; `what` says where the ids came from.
void check_vocab(const std::vector<int32_t>& tokens, const std::string& file, int64_t vocab, const std::string& what) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= vocab)
      throw ConfigError("--data: '" + file + "': " + what + " " + std::to_string(tokens[i]) + " at index " +
                        std::to_string(i) + " is >= the model's vocab_size " + std::to_string(vocab));
}

std::string read_bytes(const data::MappedFile& f) {
  return f.size() ? std::string(reinterpret_cast<const char*>(f.data()), f.size()) : std::string();
}

// Rethrows a shared reader's error (documents.h) as bad input naming --data.
template <class F>
auto on_data(F&& f) {
  try {
    return f();
  } catch (const ConfigError&) { throw; } catch (const std::exception& e) {
    throw ConfigError(std::string("--data: ") + e.what());
  }
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60));
  else std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  return buf;
}

}  // namespace

std::vector<EvalWindow> eval_windows(const std::vector<int64_t>& document_tokens, int64_t T) {
  if (T < 1) throw std::invalid_argument("eval_windows: T " + std::to_string(T) + " must be >= 1");
  std::vector<EvalWindow> out;
  for (size_t d = 0; d < document_tokens.size(); ++d)
    for (int64_t begin = 0; begin + 1 < document_tokens[d]; begin += T)
      out.push_back({static_cast<int64_t>(d), begin, std::min(T + 1, document_tokens[d] - begin)});
  return out;
}

void fill_eval_row(const std::vector<int32_t>& document, const EvalWindow& w, int64_t T, int32_t* tokens,
                   int32_t* targets) {
  const int32_t* src = document.data() + w.begin;
  for (int64_t t = 0; t < T; ++t) {
    const bool scored = t + 1 < w.length;
    tokens[t] = t < w.length ? src[t] : 0;
    targets[t] = scored ? src[t + 1] : -100;
  }
}

DocumentEvalResult evaluate_documents(model::Model& m, const RunConfig& rc,
                                      const std::vector<std::vector<int32_t>>& documents,
                                      const std::vector<int64_t>& token_bytes, const EvalProgressFn& progress) {
  StageScope stage("eval");
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t B = rc.train.batch_size, T = rc.train.seq_len;
  DocumentEvalResult r;
  std::vector<int64_t> lengths;
  for (const auto& d : documents) {
    lengths.push_back(static_cast<int64_t>(d.size()));
    r.tokens += static_cast<int64_t>(d.size());
  }
  r.documents = static_cast<int64_t>(documents.size());
  const std::vector<EvalWindow> windows = eval_windows(lengths, T);
  const int64_t total = static_cast<int64_t>(windows.size());
  const bool has_bytes = !token_bytes.empty();
  int64_t bytes = 0, correct = 0;
  const Device dev = m.device();
  std::vector<int32_t> tokens, targets;
  for (int64_t first = 0; first < total; first += B) {
    const int64_t rows = std::min(B, total - first);
    tokens.assign(static_cast<size_t>(rows * T), 0);
    targets.assign(static_cast<size_t>(rows * T), -100);
    int64_t valid = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const EvalWindow& w = windows[static_cast<size_t>(first + i)];
      int32_t* tg = targets.data() + i * T;
      fill_eval_row(documents[static_cast<size_t>(w.document)], w, T, tokens.data() + i * T, tg);
      for (int64_t t = 0; t + 1 < w.length; ++t) {
        ++valid;
        if (has_bytes) bytes += token_bytes[static_cast<size_t>(tg[t])];
      }
    }
    Tensor host_tokens = Tensor::empty({rows, T}, DType::i32, Device::cpu());
    Tensor host_targets = Tensor::empty({rows, T}, DType::i32, Device::cpu());
    std::memcpy(host_tokens.data<int32_t>(), tokens.data(), tokens.size() * sizeof(int32_t));
    std::memcpy(host_targets.data<int32_t>(), targets.data(), targets.size() * sizeof(int32_t));
    Tensor loss = Tensor::zeros({}, DType::f32, dev);                // Σ nats of this batch
    Tensor flags = Tensor::full({rows * T}, -1.0, DType::i32, dev);  // [rows*T] 1 right, 0 wrong, -1 ignored
    m.evaluate(host_tokens.to(dev), host_targets.to(dev), 1.0, loss, flags);
    for (double f : flags.to_vector()) correct += f > 0.5 ? 1 : 0;
    r.nats += loss.item();
    r.targets += valid;
    if (progress) {
      EvalProgress p;
      p.windows_done = first + rows;
      p.windows_total = total;
      p.targets_done = r.targets;
      p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      progress(p);
    }
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double n = static_cast<double>(r.targets);
  r.loss = r.targets ? r.nats / n : nan;
  r.perplexity = std::exp(r.loss);
  r.bits_per_token = r.loss / std::log(2.0);
  r.bytes = has_bytes ? bytes : -1;
  r.bits_per_byte = has_bytes && bytes > 0 ? r.nats / std::log(2.0) / static_cast<double>(bytes) : nan;
  r.accuracy = r.targets ? static_cast<double>(correct) / n : nan;
  return r;
}

EvalDocuments load_eval_documents(const RunConfig& rc, const std::string& path) {
  const data::DataConfig& dc = rc.data;
  const int64_t vocab = rc.model.vocab_size;
  const bool bytes_vocab = byte_vocab(rc);
  if (!bytes_vocab && dc.source != "tokens")
    throw ConfigError("--data '" + path + "': this run's data are synthetic " + dc.task +
                      " sequences, which have no text vocabulary to read a file with");
  EvalDocuments out;
  std::error_code ec;
  if (dc.source == "tokens") {
    // Shards: a glob, or a file whose first int32 is the shard magic.
    if (data::has_glob_chars(path) && !fs::exists(path, ec)) out.shards = true;
    else if (fs::is_regular_file(path, ec)) out.shards = on_data([&] { return data::is_shard_file(path); });
    out.tokenizer = tokenizer_path(rc);
  }
  std::unique_ptr<data::Tokenizer> tok;
  if (!out.tokenizer.empty())
    tok = on_data([&] { return std::make_unique<data::Tokenizer>(data::Tokenizer::from_file(out.tokenizer)); });
  if (out.shards) {
    out.files = on_data([&] { return data::shard_paths(path); });
    for (const std::string& f : out.files) {
      const auto file = on_data([&] { return std::make_unique<data::MappedFile>(f); });
      const int64_t n = on_data([&] { return data::shard_token_count(*file); });
      if (n == 0 && out.files.size() == 1) throw ConfigError("--data: token shard '" + f + "' holds no tokens");
      std::vector<int32_t> tokens(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        tokens[static_cast<size_t>(i)] = static_cast<int32_t>(data::shard_token(*file, i));
      check_vocab(tokens, f, vocab, "token");
      out.documents.push_back(std::move(tokens));
    }
  } else {
    if (dc.source == "tokens" && !tok)
      throw ConfigError(
          "--data '" + path + "' is text, and this token run has no tokenizer.json to encode it with (" +
          ((fs::is_directory(dc.path, ec) ? fs::path(dc.path) : fs::path(dc.path).parent_path()) / "tokenizer.json")
              .string() +
          " is missing): give llm.c token shards, or put the run's tokenizer.json beside its shards");
    out.files = on_data([&] { return data::text_file_paths(path); });
    for (const std::string& f : out.files) {
      const auto file = on_data([&] { return std::make_unique<data::MappedFile>(f); });
      if (file->size() == 0 && out.files.size() == 1) throw ConfigError("--data: text file '" + f + "' is empty");
      std::vector<int32_t> tokens;
      if (tok) {
        try {
          tokens = tok->encode(read_bytes(*file));
        } catch (const std::exception& e) {
          throw ConfigError("--data: '" + f + "' cannot be encoded with " + out.tokenizer + ": " + e.what());
        }
        check_vocab(tokens, f, vocab, out.tokenizer + " gives token");
      } else {
        tokens.assign(file->data(), file->data() + file->size());
        check_vocab(tokens, f, vocab, "byte");
      }
      out.documents.push_back(std::move(tokens));
    }
  }
  int64_t tokens = 0, targets = 0;
  for (const auto& d : out.documents) {
    tokens += static_cast<int64_t>(d.size());
    targets += std::max<int64_t>(0, static_cast<int64_t>(d.size()) - 1);
  }
  if (targets == 0)
    throw ConfigError("--data '" + path + "': nothing to score: " + std::to_string(tokens) + " token(s) in " +
                      std::to_string(out.files.size()) + " file(s) (a file needs 2 tokens or more)");
  if (bytes_vocab) {
    out.token_bytes.assign(static_cast<size_t>(std::max<int64_t>(vocab, 256)), 1);
  } else if (tok) {
    // Byte length of each id's decoding (ids the tokenizer lacks decode to nothing).
    out.token_bytes.assign(static_cast<size_t>(std::max(vocab, tok->vocab_size())), 0);
    for (int64_t id = 0; id < tok->vocab_size(); ++id)
      out.token_bytes[static_cast<size_t>(id)] = static_cast<int64_t>(tok->decode({static_cast<int32_t>(id)}).size());
  }
  return out;
}

EvalProgressFn stderr_progress_printer() {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  // When the last line went out: the tenth of the way (plain lines), the time (redraws, at
  // most ten a second).
  struct Shown {
    int64_t tenth = 0;
    double seconds = -1.0;
  };
  auto shown = std::make_shared<Shown>();
  return [tty, shown](const EvalProgress& p) {
    const double frac =
        p.windows_total ? static_cast<double>(p.windows_done) / static_cast<double>(p.windows_total) : 1.0;
    const bool done = p.windows_done == p.windows_total;
    const auto tenth = static_cast<int64_t>(frac * 10.0 + 1e-9);
    if (!done && (tty ? p.seconds - shown->seconds < 0.1 : tenth <= shown->tenth)) return;
    shown->tenth = tenth;
    shown->seconds = p.seconds;
    const double rate = p.seconds > 0 ? static_cast<double>(p.targets_done) / p.seconds : 0.0;
    const double eta = frac > 0 ? p.seconds * (1.0 - frac) / frac : std::numeric_limits<double>::quiet_NaN();
    std::fprintf(stderr, "%seval: %lld / %lld windows (%5.1f%%), %.0f tokens/s, ETA %s%s", tty ? "\r" : "",
                 static_cast<long long>(p.windows_done), static_cast<long long>(p.windows_total), 100.0 * frac, rate,
                 format_duration(eta).c_str(), tty && !done ? "  " : "\n");
    std::fflush(stderr);
  };
}

}  // namespace lt::train
