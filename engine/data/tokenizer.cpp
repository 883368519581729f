#include "engine/data/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace lt::data {
namespace {

struct CodeRange {
  char32_t lo, hi;
};
#include "engine/data/unicode_classes.inc"

template <size_t N>
bool in_ranges(const CodeRange (&table)[N], char32_t c) {
  auto it =
      std::upper_bound(std::begin(table), std::end(table), c, [](char32_t v, const CodeRange& r) { return v < r.lo; });
  return it != std::begin(table) && c <= (it - 1)->hi;
}

bool is_letter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return in_ranges(kLetterRanges, c);
}
bool is_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_ranges(kNumberRanges, c);
}
// Oniguruma's Unicode \s: U+0009..U+000D, U+0085 and the separators Zs, Zl, Zp.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_other(char32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); }

// Text as code points with the byte offset of each (offsets has one more entry: the end).
struct CodePoints {
  std::vector<char32_t> cps;
  std::vector<size_t> offsets;
};

CodePoints decode_utf8(std::string_view s) {
  CodePoints out;
  out.cps.reserve(s.size());
  out.offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    auto bad = [&] { return std::invalid_argument("text is not valid UTF-8 at byte " + std::to_string(i)); };
    if (len == 0 || i + len > s.size()) throw bad();
    char32_t c = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) throw bad();
      c = (c << 6) | (b & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    const char32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min_for_len[len] || (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) throw bad();
    out.cps.push_back(c);
    out.offsets.push_back(i);
    i += len;
  }
  out.offsets.push_back(s.size());
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Length in code points of the match of the pre-tokenizer pattern at `i` (always >= 1): the
// first alternative that matches, each quantifier greedy, as the backtracking engine does.
size_t match_at(const std::vector<char32_t>& cp, size_t i) {
  const size_t n = cp.size();
  auto at = [&](size_t k) -> char32_t { return k < n ? cp[k] : 0; };
  // 's|'t|'re|'ve|'m|'ll|'d
  if (cp[i] == '\'') {
    const char32_t a = at(i + 1), b = at(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  // ` ?X+` for X = \p{L}, \p{N}, [^\s\p{L}\p{N}]: the optional space is taken when X follows it.
  for (bool (*cls)(char32_t) : {is_letter, is_number, is_other}) {
    size_t j = i;
    if (cp[j] == ' ' && j + 1 < n && cls(cp[j + 1])) ++j;
    if (!cls(cp[j])) continue;
    while (j < n && cls(cp[j])) ++j;
    return j - i;
  }
  // \s+(?!\S): the whitespace run, less its last character when a non-space follows it;
  // else (a single space before a non-space) \s+.
  size_t j = i;
  while (j < n && is_space(cp[j])) ++j;
  if (j == n || j - i == 1) return j - i;
  return j - i - 1;
}

[[noreturn]] void unsupported(const std::string& name, const std::string& key, const nlohmann::json& value) {
  throw std::runtime_error("tokenizer " + name + ": " + key + " " + value.dump() +
                           " is not supported (byte-level BPE as scripts/prepare_tokens.py writes it is)");
}

std::string show(const nlohmann::json& v) { return v.dump(); }

// The component's "type", or "none" when the component is null / absent.
std::string type_of(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "none";
  const auto& c = j[key];
  if (!c.is_object() || !c.contains("type") || !c["type"].is_string()) return "(no type)";
  return c["type"].get<std::string>();
}

}  // namespace

std::vector<std::string> byte_level_alphabet() {
  // Printable bytes keep their code point; the rest take U+0100, U+0101, ... in byte order.
  std::vector<std::string> out(256);
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    append_utf8(out[static_cast<size_t>(b)], printable ? static_cast<char32_t>(b) : next++);
  }
  return out;
}

std::vector<std::string_view> byte_level_split(std::string_view text) {
  const CodePoints u = decode_utf8(text);
  std::vector<std::string_view> out;
  for (size_t i = 0; i < u.cps.size();) {
    const size_t len = match_at(u.cps, i);
    out.push_back(text.substr(u.offsets[i], u.offsets[i + len] - u.offsets[i]));
    i += len;
  }
  return out;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("tokenizer " + path + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), path);
}

Tokenizer Tokenizer::from_json_text(const std::string& text, const std::string& name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("tokenizer " + name + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw std::runtime_error("tokenizer " + name + ": not a JSON object");
  try {
    for (const char* key : {"truncation", "padding", "normalizer"})
      if (j.contains(key) && !j[key].is_null()) unsupported(name, key, j[key]);
    if (type_of(j, "model") != "BPE") unsupported(name, "model.type", type_of(j, "model"));
    const auto& m = j["model"];
    for (const char* key : {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(key) && !m[key].is_null() && !(m[key].is_string() && m[key].get<std::string>().empty()))
        unsupported(name, std::string("model.") + key, m[key]);
    for (const char* key : {"byte_fallback", "ignore_merges"})
      if (m.contains(key) && m[key] != false) unsupported(name, std::string("model.") + key, m[key]);
    if (type_of(j, "pre_tokenizer") != "ByteLevel")
      unsupported(name, "pre_tokenizer.type", type_of(j, "pre_tokenizer"));
    const auto& pre = j["pre_tokenizer"];
    if (pre.contains("use_regex") && pre["use_regex"] != true)
      unsupported(name, "pre_tokenizer.use_regex", pre["use_regex"]);
    const std::string post = type_of(j, "post_processor");
    if (post != "none" && post != "ByteLevel") unsupported(name, "post_processor.type", post);
    if (type_of(j, "decoder") != "ByteLevel") unsupported(name, "decoder.type", type_of(j, "decoder"));

    Tokenizer t;
    t.add_prefix_space_ = pre.value("add_prefix_space", false);
    int64_t max_id = -1;
    if (!m.contains("vocab") || !m["vocab"].is_object())
      throw std::runtime_error("tokenizer " + name + ": model.vocab is missing or not an object");
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
      const int64_t id = it.value().get<int64_t>();
      if (id < 0 || id > std::numeric_limits<int32_t>::max())
        throw std::runtime_error("tokenizer " + name + ": model.vocab['" + it.key() + "'] id " + std::to_string(id) +
                                 " is out of range");
      t.vocab_[it.key()] = static_cast<int32_t>(id);
      max_id = std::max(max_id, id);
    }
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      for (size_t k = 0; k < j["added_tokens"].size(); ++k) {
        const auto& a = j["added_tokens"][k];
        const std::string where = "added_tokens[" + std::to_string(k) + "]";
        for (const char* key : {"lstrip", "rstrip", "single_word"})
          if (a.value(key, false)) unsupported(name, where + "." + key, true);
        AddedToken at{a.at("content").get<std::string>(), a.at("id").get<int32_t>(), a.value("normalized", false)};
        if (at.content.empty()) throw std::runtime_error("tokenizer " + name + ": " + where + ".content is empty");
        if (at.id < 0) throw std::runtime_error("tokenizer " + name + ": " + where + ".id is negative");
        max_id = std::max<int64_t>(max_id, at.id);
        t.added_.push_back(std::move(at));
      }
    }
    t.id_to_token_.assign(static_cast<size_t>(max_id + 1), "");
    t.id_known_.assign(static_cast<size_t>(max_id + 1), false);
    for (const auto& [text, id] : t.vocab_) {
      t.id_to_token_[static_cast<size_t>(id)] = text;
      t.id_known_[static_cast<size_t>(id)] = true;
    }
    for (const auto& a : t.added_) {
      t.id_to_token_[static_cast<size_t>(a.id)] = a.content;
      t.id_known_[static_cast<size_t>(a.id)] = true;
    }
    const auto alphabet = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) {
      auto it = t.vocab_.find(alphabet[static_cast<size_t>(b)]);
      t.byte_id_[b] = it == t.vocab_.end() ? -1 : it->second;
    }
    // Merges: "a b" strings (older files) or ["a", "b"] pairs; rank = position in the list.
    static const nlohmann::json kNoMerges = nlohmann::json::array();
    const nlohmann::json& merges = m.contains("merges") ? m["merges"] : kNoMerges;
    for (size_t r = 0; r < merges.size(); ++r) {
      std::string a, b;
      if (merges[r].is_array() && merges[r].size() == 2) {
        a = merges[r][0].get<std::string>();
        b = merges[r][1].get<std::string>();
      } else if (merges[r].is_string()) {
        const std::string s = merges[r].get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos)
          throw std::runtime_error("tokenizer " + name + ": model.merges[" + std::to_string(r) + "] " + show(s) +
                                   " is not two tokens");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        throw std::runtime_error("tokenizer " + name + ": model.merges[" + std::to_string(r) + "] " + show(merges[r]) +
                                 " is not a pair of tokens");
      }
      auto ia = t.vocab_.find(a), ib = t.vocab_.find(b), iab = t.vocab_.find(a + b);
      if (ia == t.vocab_.end() || ib == t.vocab_.end() || iab == t.vocab_.end())
        throw std::runtime_error("tokenizer " + name + ": model.merges[" + std::to_string(r) + "] " + show(merges[r]) +
                                 " names a token missing from model.vocab");
      const uint64_t key =
          static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32 | static_cast<uint32_t>(ib->second);
      t.merges_[key] = {static_cast<int32_t>(r), iab->second};  // a repeated pair keeps its last rank, as the reference
    }
    return t;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("tokenizer " + name + ": unexpected layout (" + e.what() + ")");
  }
}

void Tokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  // One symbol per byte (a byte missing from the vocab is dropped, as the reference does
  // without an unk token), then the lowest-rank adjacent pair is merged, leftmost first,
  // until no pair has a merge.
  std::vector<int32_t> sym;
  sym.reserve(word.size());
  for (unsigned char c : word)
    if (byte_id_[c] >= 0) sym.push_back(byte_id_[c]);
  while (sym.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max(), best_id = -1;
    size_t best = 0;
    for (size_t k = 0; k + 1 < sym.size(); ++k) {
      const uint64_t key =
          static_cast<uint64_t>(static_cast<uint32_t>(sym[k])) << 32 | static_cast<uint32_t>(sym[k + 1]);
      auto it = merges_.find(key);
      if (it != merges_.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best_id = it->second.second;
        best = k;
      }
    }
    if (best_id < 0) break;
    sym[best] = best_id;
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && piece.front() != ' ') {
    prefixed.assign(1, ' ').append(piece);
    piece = prefixed;
  }
  for (std::string_view word : byte_level_split(piece)) encode_word(word, out);
}

void Tokenizer::encode_added(std::string_view text, bool normalized_pass, std::vector<int32_t>& out) const {
  // Leftmost-longest match over the added tokens of this pass (non-normalized ones first,
  // then normalized ones in the pieces between); the rest goes on to the pre-tokenizer.
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (const auto& a : added_)
      if (a.normalized == normalized_pass && text.compare(i, a.content.size(), a.content) == 0 &&
          (hit == nullptr || a.content.size() > hit->content.size()))
        hit = &a;
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (normalized_pass) encode_piece(text.substr(start, i - start), out);
    else encode_added(text.substr(start, i - start), true, out);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  if (normalized_pass) encode_piece(text.substr(start), out);
  else encode_added(text.substr(start), true, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  decode_utf8(text);  // invalid UTF-8 is an error before anything is split
  std::vector<int32_t> out;
  encode_added(text, false, out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  // The ByteLevel decoder: a token whose characters are all stand-ins gives their bytes;
  // any other token (an added token with other characters) gives its own UTF-8.
  static const std::unordered_map<char32_t, unsigned char> back = [] {
    std::unordered_map<char32_t, unsigned char> m;
    const auto alphabet = byte_level_alphabet();
    for (int b = 0; b < 256; ++b)
      m[decode_utf8(alphabet[static_cast<size_t>(b)]).cps[0]] = static_cast<unsigned char>(b);
    return m;
  }();
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_known_.size() || !id_known_[static_cast<size_t>(id)]) continue;
    const std::string& tok = id_to_token_[static_cast<size_t>(id)];
    std::string bytes;
    bool all_mapped = true;
    for (char32_t c : decode_utf8(tok).cps) {
      auto it = back.find(c);
      if (it == back.end()) {
        all_mapped = false;
        break;
      }
      bytes += static_cast<char>(it->second);
    }
    out += all_mapped ? bytes : tok;
  }
  return out;
}

}  // namespace lt::data
