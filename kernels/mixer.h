// What the two token mixers' kernel layers (KDA: kernels/kda.h, RWKV6: kernels/rwkv6.h) share:
// the dims of a call, the meaning of `scale`, and the names of their entry points.
//
// Dim letters: B sequences of T tokens, H heads of head dim D (K = V = D), chunks of C tokens,
// NT = ceil(T / C) chunks, Tp = NT * C padded rows. Element counts are named `<what>_numel`.
//
// scale: the factor on the output, o_t = scale * (...); 0 means D^-1/2 (resolved_scale), in
// the naive, CPU-twin and fused paths of both mixers alike.
//
// Entry points, the same name in lt::kda and lt::rwkv6:
//   NaiveInputs / NaiveGrads   the CPU recurrence's arguments: dims, input pointers, scale / the
//                              gradient pointers
//   naive_forward(in, o, ht), naive_backward(in, dO, dht, grads)    ground truth on the CPU
//   FusedArgs                  the one argument struct of the fused path (pointers, dims, dtype)
//   check_fused_args(a) (forward), check_fused_args(a, <which backward>)
//                              throw std::invalid_argument naming the problem
#pragma once
#include <cmath>
#include <cstdint>

namespace lt::mixer {

// Int: the type of D and C (KDA's kernels index with int, RWKV6's with int64_t).
template <class Int>
struct Dims {
  int64_t B = 1, T = 1, H = 1;
  Int D = 64;  // head dim
  Int C = 64;  // chunk length (unused by the naive recurrence)
  // constexpr so device code may call them (--expt-relaxed-constexpr)
  constexpr int64_t NT() const { return (T + C - 1) / C; }
  constexpr int64_t Tp() const { return NT() * C; }
  constexpr int64_t tokens() const { return B * T; }                           // rows of [B, T, ...]
  constexpr int64_t token_numel() const { return B * T * H * D; }              // [B, T, H, D]
  constexpr int64_t state_numel() const { return B * H * D * D; }              // [B, H, D, D]
  constexpr int64_t trajectory_numel() const { return B * H * NT() * D * D; }  // [B, H, NT, D, D]
};

// `scale` as the kernels apply it: 0 means D^-1/2.
template <class F>
F resolved_scale(F scale, int64_t D) {
  return scale != F(0) ? scale : F(1) / std::sqrt(static_cast<F>(D));
}

}  // namespace lt::mixer
