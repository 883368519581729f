// Evaluation of a checkpoint over whole documents (`trainer eval --data PATH`): every token of
// every document scored once, not random validation windows.
//
//   auto in = lt::train::load_eval_documents(rc, "book.txt");      // tokens per file, bytes per id
//   auto r  = lt::train::evaluate_documents(model, rc, in.documents, in.token_bytes, progress);
//
// Windowing: each document (one file) of n tokens is cut into consecutive windows of T + 1
// tokens (T = train.seq_len) overlapping by one token, window k covering tokens
// [k T, k T + T + 1) ∩ [0, n); so every token but the document's first is a target exactly
// once. A row is tokens [T] and targets [T] (targets = tokens shifted by one); the last
// window of a document is padded with token 0 and target -100. Windows never cross
// documents, and the model's recurrent state starts from zero in every window (each row is an
// independent sequence), so a target sees at most T tokens of context.
// Rows go B = train.batch_size at a time (the last batch may hold fewer) through
// Model::evaluate; the nats of each batch are read back and summed in f64 on the host.
//
// Figures: loss = nats / targets; perplexity = exp(loss); bits_per_token = loss / ln 2;
// bits_per_byte = nats / ln 2 / bytes, bytes = Σ over targets of the byte length of the
// target token (1 for byte vocabularies; a BPE token's decoded length), unknown (NaN) when
// no byte lengths are given; accuracy = (argmax == target) / targets.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/train/config.h"

namespace lt::train {

// One evaluation window: tokens [begin, begin + length) of document `document`, 2 <= length <= T + 1.
struct EvalWindow {
  int64_t document = 0, begin = 0, length = 0;
};

// The windows of documents of the given token counts, in document order.
std::vector<EvalWindow> eval_windows(const std::vector<int64_t>& document_tokens, int64_t T);

// Row of window w: tokens [T] and targets [T] (padding: token 0, target -100).
void fill_eval_row(const std::vector<int32_t>& document, const EvalWindow& w, int64_t T, int32_t* tokens,
                   int32_t* targets);

struct EvalProgress {
  int64_t windows_done = 0, windows_total = 0;
  int64_t targets_done = 0;
  double seconds = 0.0;  // since the evaluation began
};
using EvalProgressFn = std::function<void(const EvalProgress&)>;

struct DocumentEvalResult {
  int64_t documents = 0;
  int64_t tokens = 0;   // all tokens of all documents
  int64_t targets = 0;  // scored tokens: tokens - (documents with at least one token)
  int64_t bytes = -1;   // byte length of the targets; -1 unknown
  double nats = 0.0;    // summed loss
  double loss = 0.0, perplexity = 0.0, bits_per_token = 0.0;
  double bits_per_byte = 0.0;  // NaN when bytes are unknown
  double accuracy = 0.0;
};

// Scores every target of `documents` (token ids < the model's vocab). token_bytes: byte
// length per id (size >= every id + 1), or empty when unknown. progress (may be empty) is
// called after every batch.
DocumentEvalResult evaluate_documents(model::Model& m, const RunConfig& rc,
                                      const std::vector<std::vector<int32_t>>& documents,
                                      const std::vector<int64_t>& token_bytes, const EvalProgressFn& progress);

// The documents of PATH read the way the run's data are (ConfigError naming --data, the file
// and the value otherwise):
//   byte vocabularies (data.source text, synthetic bytes): a text file or a folder of text
//     files (engine/data/documents.h text_file_paths); tokens = bytes, 1 byte each;
//   token data: llm.c token shards (a file starting with the shard magic, or a glob), or text
//     (a file or folder) encoded with the tokenizer.json beside the run's shards; byte
//     lengths from that tokenizer (none when it is missing: shards only);
//   synthetic MQAR: an error (no text vocabulary).
// Every token is checked < model.vocab_size. Each file is one document.
struct EvalDocuments {
  std::vector<std::vector<int32_t>> documents;
  std::vector<std::string> files;  // one per document
  std::vector<int64_t> token_bytes;
  std::string tokenizer;  // the tokenizer.json used; "" for bytes and for shards without one
  bool shards = false;    // read as token shards
};
EvalDocuments load_eval_documents(const RunConfig& rc, const std::string& path);

// A progress printer writing to stderr: on a terminal one line redrawn with '\r' (windows
// done / total, percent, targets/s, ETA); otherwise a plain line at every further ~10 %.
EvalProgressFn stderr_progress_printer();

}  // namespace lt::train
