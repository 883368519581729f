// Token embedding, CPU backend (twin: kernels/cuda/embedding.cu; contract: kernels/embedding.h).
// Forward gathers rows. Backward keeps one accumulator row per vocabulary row that occurs,
// sums dy into it in token order, then adds each accumulator into its row of dW: the
// accumulation rule of kernels/embedding.h, so the CUDA kernel's result is bit-identical.
// All indices are checked before anything is written.
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/elementwise_ops.h"
#include "kernels/embedding.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class I>
void check_indices(const EmbeddingParams& p) {
  const I* idx = static_cast<const I*>(p.idx);
  for (int64_t i = 0; i < p.n; ++i) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    if (v < 0 || v >= p.V)
      throw std::invalid_argument("embedding: index " + std::to_string(v) + " at position " + std::to_string(i) +
                                  " is out of range [0, " + std::to_string(p.V) + ")");
  }
}

template <class I>
int64_t index_at(const EmbeddingParams& p, int64_t i) {
  return static_cast<int64_t>(static_cast<const I*>(p.idx)[i]);
}

template <class I, class W, class A>
void forward(const EmbeddingParams& p) {
  const W* w = static_cast<const W*>(p.W);
  A* out = static_cast<A*>(p.out);
  for (int64_t i = 0; i < p.n; ++i) {
    const W* row = w + index_at<I>(p, i) * p.d;
    A* o = out + i * p.d;
    for (int64_t c = 0; c < p.d; ++c) o[c] = store_from_compute<A>(load_as_compute(row[c]));
  }
}

// acc[slot[v]] collects the rows of dy for row v in token order (only the rows that occur
// are materialised); rows without a token are not touched.
template <class I, class W, class A>
void backward(const EmbeddingParams& p) {
  using Acc = W;  // f32 or f64: dW's dtype
  static_assert(std::is_same_v<W, float> || std::is_same_v<W, double>);
  const A* dy = static_cast<const A*>(p.dy);
  W* dW = static_cast<W*>(p.dW);
  std::vector<int64_t> slot(static_cast<size_t>(p.V), -1);  // row v -> its accumulator
  std::vector<Acc> acc;
  int64_t used = 0;
  for (int64_t i = 0; i < p.n; ++i) {
    const int64_t v = index_at<I>(p, i);
    if (slot[v] < 0) {
      slot[v] = used++;
      acc.resize(static_cast<size_t>(used * p.d), Acc(0));
    }
    Acc* a = acc.data() + slot[v] * p.d;
    const A* g = dy + i * p.d;
    for (int64_t c = 0; c < p.d; ++c) a[c] += static_cast<Acc>(load_as_compute(g[c]));
  }
  for (int64_t v = 0; v < p.V; ++v) {
    if (slot[v] < 0) continue;
    W* row = dW + v * p.d;
    const Acc* a = acc.data() + slot[v] * p.d;
    for (int64_t c = 0; c < p.d; ++c) row[c] += a[c];
  }
}

template <class I>
void run(EmbeddingPass pass, const EmbeddingParams& p) {
  check_indices<I>(p);
  if (p.w_dtype != DType::f32 && p.w_dtype != DType::f64) unsupported_dtype("cpu", "embedding", p.w_dtype);
  auto dispatch = [&](auto w) {
    using W = decltype(w);
    visit_float_dtype(p.act_dtype, "cpu", "embedding", [&](auto a) {
      using A = decltype(a);
      if (pass == EmbeddingPass::forward) forward<I, W, A>(p);
      else backward<I, W, A>(p);
    });
  };
  if (p.w_dtype == DType::f32) dispatch(float{});
  else dispatch(double{});
}

}  // namespace

void embedding(EmbeddingPass pass, const EmbeddingParams& p, uintptr_t) {
  if (p.idx_dtype == DType::i32) run<int32_t>(pass, p);
  else if (p.idx_dtype == DType::i64) run<int64_t>(pass, p);
  else unsupported_dtype("cpu", "embedding", p.idx_dtype);
}

}  // namespace lt::kern::cpu
