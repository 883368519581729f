// Packed documents for the token mixers and the layers around them (KDA, RWKV6).
//
// A row of a batch may hold several documents (segments); the recurrent state restarts at
// zero at each segment start (fla's cu_seqlens semantics), and so do the short convolutions'
// taps and the token shifts (Segments::positions). How each mixer restarts:
//   KDA    at any token: KdaInputs::seg_start (Segments::start_flags), through the gate
//          kda::kSegmentStartGate at the document's first token (kernels/kda.h); no layout.
//   RWKV6  on chunk boundaries only (FusedArgs::chunk_reset in kernels/rwkv6.h: its bonus
//          term reads the state before a token, which no gate reaches), so the block lays the
//          batch out for it (SegmentLayout): every segment moved to start on a chunk boundary,
//          padding rows zero in r, k, v and the log decay,
//          so that they change nothing. ops::gather_rows moves a tensor into the layout
//          (to_padded) and back (from_padded; the map is one to one, so gradients go back by a
//          gather too).
//
// Layout of row b: p = 0; for each token t: if a segment starts at t > 0, p = the first
// multiple of C at or after p; token t goes to padded row p; p += 1. Tp = the longest row's p.
// Padding costs about C / 2 rows a document (figures: docs/notes-rwkv6.md).
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "engine/device.h"
#include "engine/tensor.h"

namespace lt::mixers {

struct SegmentLayout {
  int64_t B = 0, T = 0;  // the batch's rows and tokens a row
  int64_t Tp = 0;        // rows a row in the padded layout (the longest padded row)
  int C = 0;
  Tensor to_padded;    // [B * Tp] i32: token b * T + t of padded row b * Tp + p, -1 for padding
  Tensor from_padded;  // [B * T] i32: padded row b * Tp + p of token b * T + t
  Tensor chunk_reset;  // [B, ceil(Tp / C)] i32: 1 where a chunk starts a segment
  int64_t padding_rows() const { return B * Tp - B * T; }
};

// The layout on `device` for starts [B * T] (1 where a segment starts at token t of row b; a
// start at t = 0 marks chunk 0 and drops an initial state) and chunk C >= 1.
SegmentLayout build_segment_layout(const std::vector<uint8_t>& starts, int64_t B, int64_t T, int C, Device device);

// x [B, T, ...] into the layout: [B, Tp, ...], `fill` on padding rows.
Tensor to_layout(const Tensor& x, const SegmentLayout& layout, double fill);
// x [B, Tp, ...] back: [B, T, ...] (padding rows dropped).
Tensor from_layout(const Tensor& x, const SegmentLayout& layout);

// The documents of one batch: where they start, and the layouts built from that (once per
// chunk; the blocks of a step share them).
class Segments {
 public:
  // starts: [B * T], 1 where a document starts.
  Segments(std::vector<uint8_t> starts, int64_t B, int64_t T, Device device);
  int64_t B() const { return B_; }
  int64_t T() const { return T_; }
  const std::vector<uint8_t>& starts() const { return starts_; }
  // A document starts past t = 0 in some row (else every row is one document: no layout).
  bool any() const { return any_; }
  // [B * T] i32 on the device: 1 where a document starts (KDA's mixer).
  const Tensor& start_flags() const;
  // [B * T] i32 on the device: each token's position in its document (0 at a start; t where no
  // start precedes it in the row): the short convolutions' and token shifts' restarts.
  const Tensor& positions() const;
  const SegmentLayout& layout(int C) const;

 private:
  std::vector<uint8_t> starts_;
  int64_t B_ = 0, T_ = 0;
  Device device_;
  bool any_ = false;
  mutable Tensor flags_, positions_;
  mutable std::map<int, SegmentLayout> layouts_;  // by chunk
};

// ---- what the mixers share (engine/mixers/kda.cpp, rwkv6.cpp) ----------------------------
// Throws std::invalid_argument ("<mixer>: chunk_reset must be [B, NT] i32 ...") unless
// chunk_reset is undefined or [B, NT] i32 on `device`.
void check_chunk_reset(const Tensor& chunk_reset, int64_t B, int64_t NT, Device device, const char* mixer);
// The ops paths' scan factor: [B, NT, 1, 1, 1] in ct, 0 where a chunk starts a segment, 1
// elsewhere; undefined for an undefined chunk_reset.
Tensor keep_mask(const Tensor& chunk_reset, DType ct);

// chunk_reset on the host, for the CPU paths: as chunk flags [B * NT] (the CPU twins) and as
// token starts [B * T] at t = n * C (the naive recurrences). Pointers null when undefined.
class SegmentFlags {
 public:
  SegmentFlags(const Tensor& chunk_reset, int64_t T, int64_t C);
  const int32_t* chunk_resets() const { return chunk_.empty() ? nullptr : chunk_.data(); }
  const uint8_t* token_starts() const { return token_.empty() ? nullptr : token_.data(); }

 private:
  std::vector<int32_t> chunk_;
  std::vector<uint8_t> token_;
};

}  // namespace lt::mixers
