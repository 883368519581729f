// Byte-level BPE (GPT-2 style) from a Hugging Face tokenizer.json, giving the ids the Python
// `tokenizers` package gives for the files scripts/prepare_tokens.py writes:
//
//   text ──split on added tokens (leftmost-longest)──▶ pieces and added-token ids
//   piece ──(" " prefix if add_prefix_space)──▶ GPT-2 pre-tokenizer split ──▶ words
//   word ──bytes──▶ one symbol per byte (byte_level_alphabet) ──merges, lowest rank first──▶ ids
//
// Supported, and checked on load: model BPE (no dropout, unk token, subword prefix / suffix,
// byte fallback or ignore_merges), no normalizer, the ByteLevel pre-tokenizer with its regex,
// no post-processor or a ByteLevel one (offsets only), the ByteLevel decoder, no truncation or
// padding, added tokens without lstrip / rstrip / single_word. Anything else is an error that
// names the file and the component.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lt::data {

// GPT-2's byte-to-unicode map: the UTF-8 of the printable stand-in character of each byte
// (bytes 0..255; printable ones stand for themselves, the others for U+0100 upwards).
std::vector<std::string> byte_level_alphabet();

// GPT-2's pre-tokenizer split of UTF-8 text, by hand over code points:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// The pieces concatenate to `text`. Throws std::invalid_argument on invalid UTF-8.
std::vector<std::string_view> byte_level_split(std::string_view text);

class Tokenizer {
 public:
  // Reads and validates tokenizer.json; errors (std::runtime_error) name `path` and the key.
  static Tokenizer from_file(const std::string& path);
  // The same from the file's text; `name` stands for the file in errors.
  static Tokenizer from_json_text(const std::string& text, const std::string& name);

  // Ids of UTF-8 text (added tokens in it included). Throws std::invalid_argument on invalid UTF-8.
  std::vector<int32_t> encode(std::string_view text) const;
  // Bytes of the tokens (the ByteLevel decoder; added tokens as their text). Unknown ids are
  // skipped; the result may be invalid UTF-8 where a token sequence ends inside a character.
  std::string decode(const std::vector<int32_t>& ids) const;

  // One more than the largest id (model vocab and added tokens).
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool normalized = false;  // matched after normalisation; without a normalizer, only the order differs
  };
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_added(std::string_view text, bool normalized_pass, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;  // model vocabulary: token text → id
  // Merge (left id, right id) packed as left << 32 | right → (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::vector<AddedToken> added_;
  std::vector<std::string> id_to_token_;  // token text by id ("" where no token has the id)
  std::vector<bool> id_known_;
  int32_t byte_id_[256] = {};  // the initial symbol of each byte; -1 when the vocab lacks it
  bool add_prefix_space_ = false;
};

}  // namespace lt::data
