#include "engine/train/prompt.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <spdlog/spdlog.h>

#include "engine/data/tokenizer.h"

namespace lt::train {
namespace fs = std::filesystem;

bool byte_vocab(const RunConfig& rc) {
  return rc.data.source == "text" || (rc.data.source == "synthetic" && rc.data.task == "bytes");
}

// tokenizer.json beside the token shards (the folder of data.path, or of its glob).
std::string tokenizer_path(const RunConfig& rc) {
  if (rc.data.source != "tokens") return "";
  fs::path p(rc.data.path);
  fs::path dir = fs::is_directory(p) ? p : p.parent_path();
  fs::path t = dir / "tokenizer.json";
  return fs::exists(t) ? t.string() : "";
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
      return data::Tokenizer::from_file(tok).decode(tokens);
    } catch (const std::exception& e) {
      spdlog::warn("tokenizer {} could not be read ({}): printing token ids", tok, e.what());
    }
  }
  std::string s;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) s += ' ';
    s += std::to_string(tokens[i]);
  }
  return s;
}

std::vector<int32_t> encode_prompt(const RunConfig& rc, const std::string& prompt) {
  std::vector<int32_t> out;
  if (byte_vocab(rc)) {
    for (unsigned char c : prompt) out.push_back(c);
    return out;
  }
  if (std::string tok = tokenizer_path(rc); !tok.empty()) {
    try {
      out = data::Tokenizer::from_file(tok).encode(prompt);
    } catch (const std::exception& e) { throw ConfigError("--prompt: " + std::string(e.what())); }
    for (int32_t t : out)
      if (t >= rc.model.vocab_size)
        throw ConfigError("--prompt: " + tok + " gives token id " + std::to_string(t) + ", outside the model's vocab " +
                          std::to_string(rc.model.vocab_size));
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

}  // namespace lt::train
