// RWKV6 token mixer on Tensors: one entry point per direction, four implementations.
//
//   auto fwd = lt::mixers::rwkv6_forward(r, k, v, w, u, h0, {.chunk = 64, .path = Rwkv6Path::fused});
//   auto g   = lt::mixers::rwkv6_backward(r, k, v, w, u, h0, dout, dht, opt, fwd.h);
//
// Math and shapes: kernels/rwkv6.h. r, k, v, w: [B, T, H, D] (w: log decay <= 0), u: [H, D],
// h0 / ht / dht / dh0: [B, H, D, D] (fp32; h0 and dht may be undefined Tensors = zero).
// Outputs o, dr, dk, dv, dw have the dtype of r; ht, dh0 fp32; du the dtype of u.
//
// Paths
//   naive     the recurrence on the CPU in float64 (any float dtype in, CPU tensors only);
//   ops       the chunk algorithm composed from engine ops (engine/ops.h), CPU and CUDA,
//             computing in f32 (f64 for f64 inputs): chunk-local cumsum gates, the
//             intra-chunk block with exponentials taken elementwise after masking (exact,
//             no factorisation), the inter-chunk state scan as a host loop over chunks,
//             the u bonus on the diagonal; backward by the hand-derived chunk adjoint;
//   fused     CUDA: kernels/cuda/rwkv6.cu (fwd 2 launches, bwd 3); on the CPU the CPU
//             twins of those stages (kernels/cpu/rwkv6.cpp);
//   fallback  as fused, but the backward uses the unfused intra | inter kernel pair (4);
//   autotune  backward: fused or fallback, whichever was faster when this shape
//             (B, T, H, D, chunk, dtype) was first seen (both timed on the real inputs,
//             the winner cached for the process); forward = fused.
// Every output and scratch buffer is a Tensor from the device's caching allocator, on the
// current stream: the fused backward's extra peak is h, dh [B,H,NT,D,D] and du_part
// [B,NT,H,D] fp32; the fallback's adds the two fp32 [B,T,H,D] intra dq'/dk' buffers.
#pragma once
#include <cstdint>
#include <string>

#include "engine/tensor.h"
#include "kernels/rwkv6.h"

namespace lt::mixers {

enum class Rwkv6Path : uint8_t { naive, ops, fused, fallback, autotune };
const char* rwkv6_path_name(Rwkv6Path p);
Rwkv6Path parse_rwkv6_path(const std::string& name);  // throws std::invalid_argument

struct Rwkv6Options {
  int64_t chunk = 64;                 // 16, 32 or 64
  double scale = 0.0;                 // 0: D^-1/2 (the op's default); the fla layer passes 1
  Rwkv6Path path = Rwkv6Path::fused;
  bool keep_states = false;           // forward returns h (the chunk states) for the backward
};

struct Rwkv6Out {
  Tensor o;   // [B,T,H,D]
  Tensor ht;  // [B,H,D,D] fp32
  Tensor h;   // [B,H,NT,D,D] fp32 when keep_states (fused/fallback paths), else undefined
};

struct Rwkv6Grads {
  Tensor dr, dk, dv, dw;  // [B,T,H,D]
  Tensor du;              // [H,D]
  Tensor dh0;             // [B,H,D,D] fp32
};

Rwkv6Out rwkv6_forward(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w,
                       const Tensor& u, const Tensor& h0, const Rwkv6Options& opt);

// saved_h: the forward's h (keep_states) to skip recomputing the state scan; may be undefined.
Rwkv6Grads rwkv6_backward(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w,
                          const Tensor& u, const Tensor& h0, const Tensor& dout, const Tensor& dht,
                          const Rwkv6Options& opt, const Tensor& saved_h = Tensor());

// The backward implementation autotune picked (or would pick) for these inputs' shape:
// kFused / kFallback. Runs the measurement when the shape is new (CUDA tensors only).
rwkv6::BwdImpl rwkv6_autotune_choice(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w,
                                     const Tensor& u, const Tensor& h0, const Tensor& dout,
                                     const Tensor& dht, const Rwkv6Options& opt);

}  // namespace lt::mixers
