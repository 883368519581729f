#include "engine/train/config.h"

#include <glob.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/data/tokenizer.h"
#include "engine/model/arch.h"

namespace lt::train {
namespace {

using ojson = nlohmann::ordered_json;
constexpr double kInf = 1e300;

SchemaEntry integer(std::string path, int64_t def, double lo, double hi, std::string desc,
                    std::vector<std::string> choices = {}) {
  return SchemaEntry{std::move(path), ValueType::integer, ojson(def), lo, hi, std::move(choices), std::move(desc)};
}
SchemaEntry number(std::string path, double def, double lo, double hi, std::string desc) {
  return SchemaEntry{std::move(path), ValueType::number, ojson(def), lo, hi, {}, std::move(desc)};
}
SchemaEntry boolean(std::string path, bool def, std::string desc) {
  return SchemaEntry{std::move(path), ValueType::boolean, ojson(def), -kInf, kInf, {}, std::move(desc)};
}
SchemaEntry string(std::string path, std::string def, std::vector<std::string> choices, std::string desc) {
  return SchemaEntry{std::move(path),    ValueType::string, ojson(std::move(def)), -kInf, kInf,
                     std::move(choices), std::move(desc)};
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  std::string p;
  while (std::getline(ss, p, '.')) parts.push_back(p);
  return parts;
}

std::string range_text(const SchemaEntry& e) {
  std::ostringstream os;
  if (!e.choices.empty()) {
    os << "one of ";
    for (size_t i = 0; i < e.choices.size(); ++i)
      os << (i ? ", " : "") << (e.type == ValueType::string ? "\"" : "") << e.choices[i]
         << (e.type == ValueType::string ? "\"" : "");
    return os.str();
  }
  if (e.type == ValueType::integer || e.type == ValueType::number) {
    bool has_lo = e.min > -kInf, has_hi = e.max < kInf;
    auto num = [&](double v) {
      std::ostringstream s;
      if (e.type == ValueType::integer) s << static_cast<long long>(v);
      else s << v;
      return s.str();
    };
    if (has_lo && has_hi) os << "in [" << num(e.min) << ", " << num(e.max) << "]";
    else if (has_lo) os << ">= " << num(e.min);
    else if (has_hi) os << "<= " << num(e.max);
  }
  return os.str();
}

std::string expected_form(const SchemaEntry& e) {
  std::string r = range_text(e);
  return std::string(value_type_name(e.type)) + (r.empty() ? "" : " " + r);
}

[[noreturn]] void fail_value(const SchemaEntry& e, const std::string& got) {
  throw ConfigError("config key '" + e.path + "': expected " + expected_form(e) + ", got " + got);
}

// Checks one value against its schema row; returns it normalised (integers as int64).
ojson check_value(const SchemaEntry& e, const ojson& v) {
  switch (e.type) {
    case ValueType::integer: {
      if (!v.is_number_integer()) {
        if (v.is_number_float()) {
          double d = v.get<double>();
          if (!std::isfinite(d)) fail_value(e, "a non-finite number");
          fail_value(e, "the non-integer number " + v.dump());
        }
        fail_value(e, v.type_name() + std::string(" ") + v.dump());
      }
      double d =
          v.is_number_unsigned() ? static_cast<double>(v.get<uint64_t>()) : static_cast<double>(v.get<int64_t>());
      if (d < e.min || d > e.max) fail_value(e, v.dump());
      if (!e.choices.empty()) {
        std::string s = v.dump();
        bool ok = false;
        for (const auto& c : e.choices) ok |= (c == s);
        if (!ok) fail_value(e, s);
      }
      return v.is_number_unsigned() ? ojson(v.get<uint64_t>()) : ojson(v.get<int64_t>());
    }
    case ValueType::number: {
      if (!v.is_number()) fail_value(e, v.type_name() + std::string(" ") + v.dump());
      double d = v.get<double>();
      if (!std::isfinite(d)) fail_value(e, "a non-finite number (NaN or inf)");
      if (d < e.min || d > e.max) fail_value(e, v.dump());
      return ojson(d);
    }
    case ValueType::boolean:
      if (!v.is_boolean()) fail_value(e, v.type_name() + std::string(" ") + v.dump());
      return v;
    case ValueType::string: {
      if (!v.is_string()) fail_value(e, v.type_name() + std::string(" ") + v.dump());
      if (!e.choices.empty()) {
        bool ok = false;
        for (const auto& c : e.choices) ok |= (c == v.get<std::string>());
        if (!ok) fail_value(e, v.dump());
      }
      return v;
    }
  }
  return v;
}

// Closest schema key to an unknown one (shared suffix or prefix), for "did you mean".
std::string suggestion(const std::string& path) {
  std::string leaf = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
  for (const auto& e : config_schema()) {
    std::string eleaf = e.path.substr(e.path.rfind('.') == std::string::npos ? 0 : e.path.rfind('.') + 1);
    if (eleaf == leaf) return e.path;
  }
  for (const auto& e : config_schema()) {
    std::string eleaf = e.path.substr(e.path.rfind('.') == std::string::npos ? 0 : e.path.rfind('.') + 1);
    if (leaf.size() >= 3 && (eleaf.find(leaf) != std::string::npos || leaf.find(eleaf) != std::string::npos))
      return e.path;
  }
  return "";
}

[[noreturn]] void fail_unknown(const std::string& path) {
  std::string s = suggestion(path);
  throw ConfigError("config key '" + path + "' is unknown" + (s.empty() ? "" : " (did you mean '" + s + "'?)") +
                    "; `trainer --help` lists every key");
}

bool is_section(const std::string& prefix) {
  for (const auto& e : config_schema())
    if (e.path.size() > prefix.size() && e.path.compare(0, prefix.size(), prefix) == 0 && e.path[prefix.size()] == '.')
      return true;
  return false;
}

// Walks the user's JSON: every leaf must be a schema key, every object a section.
void check_tree(const ojson& node, const std::string& prefix, ojson& out) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (const SchemaEntry* e = config_find(path)) {
      config_set(out, path, check_value(*e, it.value()));
    } else if (is_section(path)) {
      if (!it.value().is_object())
        throw ConfigError("config key '" + path + "': expected an object (a section of keys), got " +
                          std::string(it.value().type_name()));
      check_tree(it.value(), path, out);
    } else {
      fail_unknown(path);
    }
  }
}

bool path_exists_or_glob(const std::string& p) {
  std::error_code ec;
  if (std::filesystem::exists(p, ec)) return true;
  glob_t g{};
  bool found = ::glob(p.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
  globfree(&g);
  return found;
}

// The id of <|endoftext|> in the tokenizer.json beside token shards (the folder of `path`, or
// of its glob), or -1 when there is no tokenizer.json or no such token.
int64_t eot_from_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  const fs::path file = (fs::is_directory(p, ec) ? p : p.parent_path()) / "tokenizer.json";
  if (!fs::exists(file, ec)) return -1;
  try {
    const std::vector<int32_t> ids = data::Tokenizer::from_file(file.string()).encode("<|endoftext|>");
    return ids.size() == 1 ? ids[0] : -1;
  } catch (const std::exception& e) {
    throw ConfigError("config key 'data.eot_token' (-1: from the tokenizer): '" + file.string() +
                      "' could not be read (" + e.what() +
                      "); set data.eot_token to the end-of-text id, or data.reset_state_at_eot to false");
  }
}

// auto | cpu | cuda | cuda:N
bool device_spec_ok(const std::string& d) {
  if (d == "auto" || d == "cpu" || d == "cuda") return true;
  if (d.size() <= 5 || d.compare(0, 5, "cuda:") != 0) return false;
  for (size_t i = 5; i < d.size(); ++i)
    if (d[i] < '0' || d[i] > '9') return false;
  return true;
}

template <class T>
T get(const ojson& eff, const std::string& path) {
  return config_get(eff, path)->get<T>();
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::integer: return "an integer";
    case ValueType::number: return "a number";
    case ValueType::boolean: return "true or false";
    case ValueType::string: return "a string";
  }
  return "?";
}

const std::vector<SchemaEntry>& config_schema() {
  static const std::vector<SchemaEntry> schema = {
      string("description", "", {}, "what this config is for (free text)"),
      string("out", "runs/default", {}, "output folder: checkpoints (step-NNNNNNNN/), metrics.jsonl, config.json"),
      string("device", "auto", {}, "auto (CUDA when present, else the CPU) | cpu | cuda | cuda:N"),
      // model
      string("model.arch", "kda", {"kda", "rwkv6"}, "token mixer of both blocks"),
      integer("model.vocab_size", 256, 2, 1 << 24, "vocabulary size (embedding rows, LM head outputs)"),
      integer("model.hidden_size", 64, 8, 65536, "model width d"),
      integer("model.num_layers", 2, 1, 64, "number of blocks"),
      integer("model.num_heads", 2, 1, 1024, "mixer heads"),
      integer("model.head_dim", 32, 8, 256, "key/value width per head (RWKV6: hidden_size * expand_k / num_heads)"),
      integer("model.intermediate_size", 0, 0, 1 << 20, "MLP width; 0: fla's rule from hidden_size"),
      number("model.norm_eps", 0.0, 0.0, 1.0, "norm epsilon; 0: fla's default (KDA 1e-6, RWKV6 1e-5)"),
      boolean("model.tie_embeddings", false, "share the embedding with the LM head"),
      string("model.precision", "fp32", {"fp32", "tf32", "bf16", "fp64"},
             "fp32 reference | tf32 GEMMs | bf16 activations with fp32 master weights | fp64 everything "
             "(CPU only: the reference of trajectory checks)"),
      string("model.mixer_path", "auto", {"auto", "naive", "ops", "fused"},
             "mixer implementation; auto: fused on CUDA, ops on the CPU"),
      integer("model.chunk", 0, 0, 64,
              "mixer chunk length; 0: auto (KDA fused: the fastest for the shape, from a table measured on the H200; "
              "otherwise 64)",
              {"0", "16", "32", "64"}),
      // data
      string("data.source", "synthetic", {"synthetic", "text", "tokens"},
             "synthetic (generated, no files) | text (UTF-8 bytes, vocab 256) | tokens (llm.c shards)"),
      string("data.path", "", {}, "text: a file or folder; tokens: a shard file or a glob"),
      string("data.task", "mqar", {"mqar", "bytes"},
             "synthetic: mqar (multi-query associative recall) | bytes (structured byte stream)"),
      integer("data.vocab_size", 0, 0, 1 << 24, "synthetic vocabulary; 0: model.vocab_size"),
      integer("data.mqar_pairs", 16, 1, 4096, "mqar: key-value pairs per sequence (every validation sequence)"),
      integer("data.mqar_min_pairs", 0, 0, 4096,
              "mqar: 0, or training on a mixture: half the sequences with this many pairs, the rest spread "
              "over 2x, 4x, ... up to data.mqar_pairs (Zoology's recipe for the hard settings)"),
      number("data.val_fraction", 0.05, 0.0, 0.5, "text / tokens: tail fraction held out for validation"),
      integer("data.prefetch", 2, 0, 64, "batches prepared ahead by the loader thread (0: inline)"),
      integer("data.eot_token", -1, -1, (1 << 24) - 1,
              "text / tokens: the end-of-text token that starts each document; -1: tokens: the id of "
              "<|endoftext|> in the tokenizer.json beside the shards (none without one); text: none"),
      boolean("data.reset_state_at_eot", true,
              "packed documents: the mixers' state, short convolutions and token shifts restart at every "
              "end-of-text token, and the target across it is not scored (on where the data have one)"),
      // train
      integer("train.batch_size", 8, 1, 1 << 20,
              "sequences per micro-batch (B), over all data-parallel ranks (each takes B / ranks rows)"),
      integer("train.seq_len", 256, 1, 1 << 20, "tokens per sequence (T)"),
      integer("train.grad_accum", 1, 1, 4096, "micro-batches per optimizer step"),
      integer("train.steps", 1000, 1, 1e12, "optimizer steps of the whole run"),
      number("train.lr", 3e-4, 0.0, 10.0, "peak learning rate"),
      integer("train.warmup_steps", 0, 0, 1e12, "linear warm-up steps"),
      string("train.lr_decay", "cosine", {"constant", "cosine", "linear"}, "decay after warm-up"),
      number("train.min_lr_ratio", 0.1, 0.0, 1.0, "final learning rate / peak"),
      number("train.beta1", 0.9, 0.0, 0.999999, "AdamW beta1"),
      number("train.beta2", 0.95, 0.0, 0.999999, "AdamW beta2"),
      number("train.eps", 1e-8, 1e-30, 1.0, "AdamW epsilon"),
      number("train.weight_decay", 0.1, 0.0, 10.0, "AdamW decoupled weight decay (matrices and embeddings)"),
      number("train.max_grad_norm", 1.0, 0.0, 1e6, "global gradient-norm clip; 0: off"),
      integer("train.seed", 1234, 0, 9.0e15, "seed of the weights and the data order"),
      string("train.init_from", "", {},
             "a folder with fla's config.json + model.safetensors (trainer export, fla's save_pretrained): the "
             "initial weights instead of the seed's; the optimizer starts fresh; \"\": none"),
      integer("train.eval_every", 100, 0, 1e12, "validation every N steps (and at the end); 0: only at the end"),
      integer("train.eval_batches", 4, 1, 1e6, "validation micro-batches per evaluation"),
      integer("train.checkpoint_every", 500, 0, 1e12, "checkpoint every N steps (and at the end); 0: only at the end"),
      integer("train.keep_checkpoints", 3, 1, 1e6, "checkpoints kept (oldest deleted)"),
      integer("train.log_every", 10, 1, 1e12, "progress line and metrics record every N steps"),
      integer("train.sample_every", 0, 0, 1e12, "text / tokens: print a sample every N steps; 0: never"),
      integer("train.sample_tokens", 64, 1, 1e6, "tokens per sample"),
      integer("train.max_consecutive_skips", 10, 1, 1e9, "stop after N skipped updates in a row"),
      number("train.spike_zscore", 0.0, 0.0, 1e6,
             "skip the update when the loss is this many standard deviations above the recent mean; 0: off"),
      integer("train.spike_window", 100, 2, 1e6, "steps in the loss-spike window"),
      boolean("train.cuda_graph", true,
              "CUDA: capture the step (forward, backward, gradient norm) once as a CUDA graph and replay it, "
              "bit-identical to eager steps; timed, packed-document and data-parallel steps run eagerly"),
      // data parallel (trainer --nproc N, or a launcher's RANK / WORLD_SIZE)
      number("dist.bucket_mb", 25.0, 0.001, 65536.0, "gradient bucket size (MiB) of the data-parallel reduction"),
      string("dist.reduce_dtype", "fp32", {"fp32", "bf16"}, "dtype the gradients are reduced in across ranks"),
      boolean("dist.overlap", true, "reduce each bucket as soon as its gradients are final, under the backward"),
      boolean("dist.zero1", false, "shard the AdamW state over the ranks (ZeRO stage 1)"),
      number("dist.timeout_s", 600.0, 1.0, 1e7, "a rank that finishes no step for this long ends the job"),
      number("dist.rendezvous_timeout_s", 120.0, 1.0, 1e6, "how long the ranks wait for each other at the start"),
  };
  return schema;
}

const SchemaEntry* config_find(const std::string& path) {
  for (const auto& e : config_schema())
    if (e.path == path) return &e;
  return nullptr;
}

std::string config_schema_help() {
  std::ostringstream os;
  for (const auto& e : config_schema()) {
    std::string def = e.default_value.dump();
    std::string r = range_text(e);
    os << "  " << e.path;
    for (size_t i = e.path.size(); i < 26; ++i) os << ' ';
    os << e.description << "\n";
    os << "  " << std::string(26, ' ') << "(" << value_type_name(e.type) << (r.empty() ? "" : " " + r) << "; default "
       << def << ")\n";
  }
  return os.str();
}

ojson config_load_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError("config file '" + path + "' cannot be read (missing or not readable)");
  try {
    ojson j = ojson::parse(f);
    if (!j.is_object()) throw ConfigError("config file '" + path + "': expected a JSON object at the top level");
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("config file '" + path + "' is not valid JSON: " + e.what());
  }
}

void config_set(ojson& j, const std::string& path, const ojson& value) {
  if (!config_find(path)) fail_unknown(path);
  auto parts = split_path(path);
  ojson* node = &j;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    ojson& child = (*node)[parts[i]];
    if (!child.is_object()) child = ojson::object();
    node = &child;
  }
  (*node)[parts.back()] = value;
}

void config_apply_override(ojson& j, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set '" + assignment + "': expected key.path=value, e.g. --set train.lr=1e-3");
  std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  const SchemaEntry* e = config_find(path);
  if (!e) fail_unknown(path);
  ojson value;
  switch (e->type) {
    case ValueType::integer: {
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno == ERANGE) fail_value(*e, "'" + text + "'");
      value = static_cast<int64_t>(v);
      break;
    }
    case ValueType::number: {
      char* end = nullptr;
      double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0') fail_value(*e, "'" + text + "'");
      if (!std::isfinite(v)) fail_value(*e, "a non-finite number (NaN or inf) '" + text + "'");
      value = v;
      break;
    }
    case ValueType::boolean:
      if (text == "true") value = true;
      else if (text == "false") value = false;
      else fail_value(*e, "'" + text + "'");
      break;
    case ValueType::string: value = text; break;
  }
  config_set(j, path, check_value(*e, value));
}

const ojson* config_get(const ojson& j, const std::string& path) {
  const ojson* node = &j;
  for (const auto& p : split_path(path)) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(p);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

RunConfig config_resolve(const ojson& user, bool check_files) {
  if (!user.is_object()) throw ConfigError("config: expected a JSON object at the top level");
  ojson given = ojson::object();
  check_tree(user, "", given);
  ojson eff = ojson::object();
  for (const auto& e : config_schema()) {
    const ojson* v = config_get(given, e.path);
    config_set(eff, e.path, v ? *v : e.default_value);
  }

  RunConfig rc;
  rc.description = get<std::string>(eff, "description");
  rc.out_dir = get<std::string>(eff, "out");
  rc.device = get<std::string>(eff, "device");
  if (!device_spec_ok(rc.device))
    throw ConfigError("config key 'device': expected auto, cpu, cuda or cuda:N, got \"" + rc.device + "\"");
  if (rc.out_dir.empty()) throw ConfigError("config key 'out': expected a folder path, got an empty string");

  model::ModelConfig& m = rc.model;
  m.arch = model::parse_arch(get<std::string>(eff, "model.arch"));
  m.vocab_size = get<int64_t>(eff, "model.vocab_size");
  m.hidden_size = get<int64_t>(eff, "model.hidden_size");
  m.num_layers = get<int64_t>(eff, "model.num_layers");
  m.num_heads = get<int64_t>(eff, "model.num_heads");
  m.head_dim = get<int64_t>(eff, "model.head_dim");
  m.intermediate_size = get<int64_t>(eff, "model.intermediate_size");
  m.norm_eps = get<double>(eff, "model.norm_eps");
  m.tie_embeddings = get<bool>(eff, "model.tie_embeddings");
  std::string prec = get<std::string>(eff, "model.precision");
  m.precision = model::parse_precision(prec);
  m.mixer_path = get<std::string>(eff, "model.mixer_path");
  m.chunk = static_cast<int>(get<int64_t>(eff, "model.chunk"));
  try {
    model::arch_spec(m.arch).check_sizes(m);
  } catch (const std::invalid_argument& e) { throw ConfigError(e.what()); }

  data::DataConfig& d = rc.data;
  d.source = get<std::string>(eff, "data.source");
  d.path = get<std::string>(eff, "data.path");
  d.task = get<std::string>(eff, "data.task");
  d.vocab_size = get<int64_t>(eff, "data.vocab_size");
  d.mqar_pairs = get<int64_t>(eff, "data.mqar_pairs");
  d.mqar_min_pairs = get<int64_t>(eff, "data.mqar_min_pairs");
  if (d.mqar_min_pairs > d.mqar_pairs)
    throw ConfigError("config key 'data.mqar_min_pairs' (" + std::to_string(d.mqar_min_pairs) +
                      ") must be at most data.mqar_pairs (" + std::to_string(d.mqar_pairs) + ")");
  d.val_fraction = get<double>(eff, "data.val_fraction");
  d.prefetch = static_cast<int>(get<int64_t>(eff, "data.prefetch"));
  if (d.source == "synthetic") {
    if (d.vocab_size == 0) d.vocab_size = m.vocab_size;
    if (d.vocab_size > m.vocab_size)
      throw ConfigError("config key 'data.vocab_size' (" + std::to_string(d.vocab_size) +
                        ") must be <= 'model.vocab_size' (" + std::to_string(m.vocab_size) + ")");
  } else {
    if (d.path.empty())
      throw ConfigError("config key 'data.path': expected " +
                        std::string(d.source == "text" ? "a UTF-8 text file or folder" : "a token shard file or glob") +
                        " for data.source \"" + d.source + "\", got nothing");
    if (check_files && !path_exists_or_glob(d.path))
      throw ConfigError("config key 'data.path': '" + d.path + "' does not exist" +
                        (d.source == "tokens" ? " (and matches no file as a glob)" : ""));
    if (d.source == "text" && m.vocab_size < 256)
      throw ConfigError("config key 'model.vocab_size' (" + std::to_string(m.vocab_size) +
                        ") must be >= 256 for data.source \"text\" (bytes as tokens)");
    if (d.source == "tokens") d.vocab_size = m.vocab_size;
    if (d.source == "text") d.vocab_size = 256;
  }
  d.eot_token = get<int64_t>(eff, "data.eot_token");
  d.reset_state_at_eot = get<bool>(eff, "data.reset_state_at_eot");
  if (d.eot_token >= d.vocab_size && d.source != "synthetic")
    throw ConfigError("config key 'data.eot_token' (" + std::to_string(d.eot_token) + ") must be below the data's " +
                      "vocabulary (" + std::to_string(d.vocab_size) + ")");
  if (d.eot_token < 0 && d.source == "tokens" && d.reset_state_at_eot && check_files)
    d.eot_token = eot_from_tokenizer(d.path);

  TrainConfig& t = rc.train;
  t.batch_size = get<int64_t>(eff, "train.batch_size");
  t.seq_len = get<int64_t>(eff, "train.seq_len");
  t.grad_accum = get<int64_t>(eff, "train.grad_accum");
  t.steps = get<int64_t>(eff, "train.steps");
  t.schedule.lr = get<double>(eff, "train.lr");
  t.schedule.warmup_steps = get<int64_t>(eff, "train.warmup_steps");
  std::string decay = get<std::string>(eff, "train.lr_decay");
  t.schedule.decay = decay == "constant" ? optim::LrDecay::constant
                     : decay == "cosine" ? optim::LrDecay::cosine
                                         : optim::LrDecay::linear;
  t.schedule.min_lr_ratio = get<double>(eff, "train.min_lr_ratio");
  t.schedule.total_steps = t.steps;
  t.adamw.beta1 = get<double>(eff, "train.beta1");
  t.adamw.beta2 = get<double>(eff, "train.beta2");
  t.adamw.eps = get<double>(eff, "train.eps");
  t.adamw.weight_decay = get<double>(eff, "train.weight_decay");
  t.adamw.max_grad_norm = get<double>(eff, "train.max_grad_norm");
  t.seed = get<uint64_t>(eff, "train.seed");
  t.init_from = get<std::string>(eff, "train.init_from");
  if (check_files && !t.init_from.empty() && !std::filesystem::is_directory(t.init_from))
    throw ConfigError("config key 'train.init_from': '" + t.init_from + "' is not a folder");
  t.eval_every = get<int64_t>(eff, "train.eval_every");
  t.eval_batches = get<int64_t>(eff, "train.eval_batches");
  t.checkpoint_every = get<int64_t>(eff, "train.checkpoint_every");
  t.keep_checkpoints = get<int64_t>(eff, "train.keep_checkpoints");
  t.log_every = get<int64_t>(eff, "train.log_every");
  t.sample_every = get<int64_t>(eff, "train.sample_every");
  t.sample_tokens = get<int64_t>(eff, "train.sample_tokens");
  t.max_consecutive_skips = get<int64_t>(eff, "train.max_consecutive_skips");
  t.spike_zscore = get<double>(eff, "train.spike_zscore");
  t.cuda_graph = get<bool>(eff, "train.cuda_graph");
  t.spike_window = get<int64_t>(eff, "train.spike_window");
  DistConfig& dc = rc.dist;
  dc.bucket_bytes = static_cast<int64_t>(get<double>(eff, "dist.bucket_mb") * 1048576.0);
  dc.reduce_bf16 = get<std::string>(eff, "dist.reduce_dtype") == "bf16";
  dc.overlap = get<bool>(eff, "dist.overlap");
  dc.zero1 = get<bool>(eff, "dist.zero1");
  dc.timeout_s = get<double>(eff, "dist.timeout_s");
  dc.rendezvous_timeout_s = get<double>(eff, "dist.rendezvous_timeout_s");
  rc.effective = eff;
  return rc;
}

const std::vector<std::string>& config_shape_keys() {
  static const std::vector<std::string> keys = {
      "model.arch",      "model.vocab_size", "model.hidden_size",       "model.num_layers",
      "model.num_heads", "model.head_dim",   "model.intermediate_size", "model.tie_embeddings"};
  return keys;
}

std::vector<std::string> config_diff(const ojson& a, const ojson& b) {
  std::vector<std::string> diff;
  for (const auto& e : config_schema()) {
    const ojson* va = config_get(a, e.path);
    const ojson* vb = config_get(b, e.path);
    if ((va == nullptr) != (vb == nullptr) || (va && *va != *vb)) diff.push_back(e.path);
  }
  return diff;
}

}  // namespace lt::train
