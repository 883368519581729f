// Token embedding kernels (engine: engine/nn/embedding.h; CPU: kernels/cpu/embedding.cpp,
// CUDA: kernels/cuda/embedding.cu).
//
//   forward:  out[n, :] = W[idx[n], :]                  (converted W dtype -> out dtype)
//   backward: dW[v, :] += sum_{n : idx[n] == v} dy[n, :]
//
// idx [n] i32/i64 contiguous, W / dW [V, d] contiguous, out / dy [n, d] contiguous.
// Backward accumulation rule, the same on both backends so they agree bit for bit: for each
// row v that occurs in idx, acc = 0 (dW's dtype: f32, f64 on the CPU); acc += dy[n, :] for
// the n with idx[n] == v in increasing n; then dW[v, :] += acc. Rows that do not occur are
// not touched. No float atomics: the result does not depend on the launch shape.
// Index range: every idx[n] must lie in [0, V). The CPU kernel checks all of them before
// writing anything and throws std::invalid_argument naming the value; the CUDA kernels
// record a bad value in a host-mapped flag, write 0 (forward) / skip the token (backward),
// and the next CUDA embedding call throws (kernels/cuda/embedding.cu explains why lazily).
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace lt::kern {

enum class EmbeddingPass : uint8_t { forward, backward };

struct EmbeddingParams {
  int64_t n = 0;              // tokens
  int64_t V = 0;              // vocabulary rows
  int64_t d = 0;              // embedding width
  const void* idx = nullptr;  // [n]
  DType idx_dtype = DType::i64;
  // forward
  const void* W = nullptr;  // [V, d], w_dtype
  void* out = nullptr;      // [n, d], act_dtype
  // backward
  const void* dy = nullptr;      // [n, d], act_dtype
  void* dW = nullptr;            // [V, d], w_dtype
  void* scratch = nullptr;       // CUDA backward: [2 V] i32, any contents (embedding_scratch_ints)
  DType w_dtype = DType::f32;    // f32 (f64 on the CPU)
  DType act_dtype = DType::f32;  // f32, bf16 (f64 on the CPU)
};

// The CUDA backward's scratch: per vocabulary row its first token and its token count.
inline int64_t embedding_scratch_ints(int64_t V) { return 2 * V; }

}  // namespace lt::kern
