// Packed documents for the chunked mixers: the padded layout and the helpers the mixers'
// paths share (engine/mixers/segments.h).
#include "engine/mixers/segments.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/ops.h"

namespace lt::mixers {

SegmentLayout build_segment_layout(const std::vector<uint8_t>& starts, int64_t B, int64_t T, int C, Device device) {
  if (B < 0 || T < 0 || static_cast<int64_t>(starts.size()) != B * T)
    throw std::invalid_argument("segment layout: starts must hold B * T = " + std::to_string(B * T) + " flags, got " +
                                std::to_string(starts.size()));
  if (C < 1) throw std::invalid_argument("segment layout: chunk " + std::to_string(C) + " must be >= 1");
  SegmentLayout L;
  L.B = B, L.T = T, L.C = C;
  std::vector<int64_t> pos(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    int64_t p = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0 && starts[b * T + t]) p = (p + C - 1) / C * C;
      pos[b * T + t] = p++;
    }
    L.Tp = std::max(L.Tp, p);
  }
  const int64_t NT = (L.Tp + C - 1) / C;
  std::vector<double> to(static_cast<size_t>(B * L.Tp), -1.0), from(static_cast<size_t>(B * T));
  std::vector<double> reset(static_cast<size_t>(B * NT), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = pos[b * T + t];
      to[b * L.Tp + p] = static_cast<double>(b * T + t);
      from[b * T + t] = static_cast<double>(b * L.Tp + p);
      if (starts[b * T + t]) reset[b * NT + p / C] = 1.0;
    }
  L.to_padded = Tensor::from_vector(to, {B * L.Tp}, DType::i32, device);
  L.from_padded = Tensor::from_vector(from, {B * T}, DType::i32, device);
  L.chunk_reset = Tensor::from_vector(reset, {B, NT}, DType::i32, device);
  return L;
}

namespace {
// x [B, rows, rest...] as [B * rows, rest...] gathered by index into [B * rows_out, rest...].
Tensor gather_layout(const Tensor& x, int64_t rows, int64_t rows_out, const SegmentLayout& L, const Tensor& index,
                     double fill) {
  if (x.dim() < 2 || x.size(0) != L.B || x.size(1) != rows)
    throw std::invalid_argument("segment layout: expected [" + std::to_string(L.B) + ", " + std::to_string(rows) +
                                ", ...], got " + shape_str(x.shape()));
  Shape flat = x.shape(), out = x.shape();
  flat.erase(flat.begin());
  flat[0] = L.B * rows;
  out[1] = rows_out;
  return ops::gather_rows(x.reshape(flat), index, fill).view(out);
}
}  // namespace

Tensor to_layout(const Tensor& x, const SegmentLayout& layout, double fill) {
  return gather_layout(x, layout.T, layout.Tp, layout, layout.to_padded, fill);
}

Tensor from_layout(const Tensor& x, const SegmentLayout& layout) {
  return gather_layout(x, layout.Tp, layout.T, layout, layout.from_padded, 0.0);
}

Segments::Segments(std::vector<uint8_t> starts, int64_t B, int64_t T, Device device)
    : starts_(std::move(starts)), B_(B), T_(T), device_(device) {
  if (static_cast<int64_t>(starts_.size()) != B * T)
    throw std::invalid_argument("segments: starts must hold B * T = " + std::to_string(B * T) + " flags, got " +
                                std::to_string(starts_.size()));
  for (int64_t b = 0; b < B && !any_; ++b)
    for (int64_t t = 1; t < T; ++t)
      if (starts_[b * T + t]) {
        any_ = true;
        break;
      }
}

const Tensor& Segments::start_flags() const {
  if (!flags_.defined())
    flags_ = Tensor::from_vector(std::vector<double>(starts_.begin(), starts_.end()), {B_ * T_}, DType::i32, device_);
  return flags_;
}

const Tensor& Segments::positions() const {
  if (!positions_.defined()) {
    std::vector<double> pos(starts_.size());
    for (int64_t b = 0; b < B_; ++b) {
      int64_t last = 0;
      for (int64_t t = 0; t < T_; ++t) {
        if (starts_[b * T_ + t]) last = t;
        pos[b * T_ + t] = static_cast<double>(t - last);
      }
    }
    positions_ = Tensor::from_vector(pos, {B_ * T_}, DType::i32, device_);
  }
  return positions_;
}

const SegmentLayout& Segments::layout(int C) const {
  auto it = layouts_.find(C);
  if (it == layouts_.end()) it = layouts_.emplace(C, build_segment_layout(starts_, B_, T_, C, device_)).first;
  return it->second;
}

void check_chunk_reset(const Tensor& chunk_reset, int64_t B, int64_t NT, Device device, const char* mixer) {
  if (!chunk_reset.defined()) return;
  if (chunk_reset.shape() != Shape{B, NT} || chunk_reset.dtype() != DType::i32 || !(chunk_reset.device() == device))
    throw std::invalid_argument(std::string(mixer) + ": chunk_reset must be [B, NT] = " + shape_str({B, NT}) +
                                " i32 on the inputs' device, got " + shape_str(chunk_reset.shape()) + " " +
                                dtype_name(chunk_reset.dtype()));
}

Tensor keep_mask(const Tensor& chunk_reset, DType ct) {
  if (!chunk_reset.defined()) return Tensor();
  Tensor keep = ops::rsub_scalar(chunk_reset.to(ct), 1.0);
  return keep.view({keep.size(0), keep.size(1), 1, 1, 1});
}

SegmentFlags::SegmentFlags(const Tensor& chunk_reset, int64_t T, int64_t C) {
  if (!chunk_reset.defined()) return;
  const int64_t B = chunk_reset.size(0), NT = chunk_reset.size(1);
  const std::vector<double> v = chunk_reset.contiguous().to_vector();
  chunk_.assign(v.begin(), v.end());
  token_.assign(static_cast<size_t>(B * T), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < NT; ++n)
      if (chunk_[b * NT + n] != 0 && n * C < T) token_[b * T + n * C] = 1;
}

}  // namespace lt::mixers
