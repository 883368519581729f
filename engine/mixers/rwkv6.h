// RWKV6 token mixer at the Tensor level: forward / backward with a selectable path.
//
//   lt::mixers::Rwkv6Config cfg;  cfg.chunk = 64;  cfg.scale = 1.0;  // the fla layer's scale
//   auto out = lt::mixers::rwkv6_forward({r, k, v, w, u, h0}, cfg);  // out.o [B,T,H,D]
//   auto g = lt::mixers::rwkv6_backward(std::move(out.saved), dO);   // g.dr ... g.dh0
//
// Math and shapes: kernels/rwkv6.h. r, k, v, w: [B, T, H, D] (one float dtype; w: log decay
// <= 0), u: [H, D], h0: [B, H, D, D] (optional: an undefined Tensor = zero state).
// Paths
//   naive  the recurrence on the CPU in float64 (CPU tensors only; any float dtype in,
//          results converted back). Ground truth; slow.
//   ops    the chunk algorithm composed from engine ops (engine/ops.h), CPU and CUDA,
//          computing in f32 (f64 for f64 inputs): chunk-local cumsum gates, the intra-chunk
//          block with exponentials taken elementwise after masking (exact, no
//          factorisation), the inter-chunk state scan as a host loop over chunks, the u
//          bonus on the diagonal; backward by the hand-derived chunk adjoint (recomputing
//          the forward's chunk tensors). Any chunk >= 1.
//   fused  CUDA tensors: kernels/cuda/rwkv6/ (forward 2 launches; backward 3 launches
//          (cfg.backward = fused) or the unfused intra | inter pair, 4 (fallback)); f32 /
//          bf16, D % 64 == 0. CPU tensors: the CPU twins of those stages
//          (kernels/cpu/rwkv6.cpp), f32 / f64. Chunk 16, 32 or 64.
// Which backward runs is the config's choice (cfg.backward), never measured here:
// `kbench rwkv6 --pick-backward` times both on a shape and prints the one to name.
// Every output and scratch buffer of the CUDA path is a Tensor from the device's caching
// allocator, on the current stream, never zeroed: the fused backward's extra peak is dh
// [B,H,NT,D,D] and du_part [B,NT,H,D] fp32 (h is the forward's, kept in `saved`); the
// fallback's adds the two fp32 [B,T,H,D] intra dq' / dk' buffers.
// Outputs: o in r's dtype; ht [B,H,D,D] when cfg.output_final_state, f32 (f64 for f64
// inputs). Gradients are returned fresh (=, not accumulated): dr, dk, dv, dw in r's dtype,
// du in u's dtype, dh0 [B,H,D,D] f32 (f64 for f64 inputs), defined when h0 was given.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/mixers/path.h"
#include "engine/tensor.h"
#include "kernels/rwkv6.h"

namespace lt::mixers {

inline const char* rwkv6_path_name(Rwkv6Path p) { return mixer_path_name(p); }
inline Rwkv6Path parse_rwkv6_path(const std::string& name) { return parse_mixer_path("rwkv6", name); }

struct Rwkv6Config {
  int chunk = 64;      // fused: 16, 32 or 64 (naive, ops: any >= 1)
  double scale = 0.0;  // 0: D^-1/2 (kernels/mixer.h); the fla layer passes 1
  Rwkv6Path path = Rwkv6Path::fused;
  bool output_final_state = false;
  rwkv6::BwdImpl backward = rwkv6::BwdImpl::fused;  // fused path: fused | fallback
};

// chunk_reset (packed documents; optional): [B, NT] i32 at cfg.chunk, 1 where chunk n of row
// b starts a segment whose state restarts at zero (kernels/rwkv6.h, FusedArgs::chunk_reset).
// Every path takes it (naive: as a start at token n * chunk).
struct Rwkv6Inputs {
  Tensor r, k, v, w, u, h0;
  Tensor chunk_reset;
};

// What the backward needs; path-specific. All paths keep the inputs (refcounted, no
// copies). Fused on CUDA: also the forward's chunk states h [B,H,NT,D,D] f32, so the
// backward's scan launch runs only the reverse dh scan; h is read, not rewritten, so one
// saved state serves any number of backwards. Drop it (out.saved.reset()) after an
// eval-only forward.
struct Rwkv6Saved;

struct Rwkv6Output {
  Tensor o;   // [B,T,H,D]
  Tensor ht;  // [B,H,D,D] when requested
  std::shared_ptr<Rwkv6Saved> saved;
};

struct Rwkv6Grads {
  Tensor dr, dk, dv, dw;  // [B,T,H,D]
  Tensor du;              // [H,D]
  Tensor dh0;             // [B,H,D,D] when h0 was given
};

Rwkv6Output rwkv6_forward(const Rwkv6Inputs& in, const Rwkv6Config& cfg);
// dO [B,T,H,D] (any float dtype; converted to r's); dht: optional gradient of the final
// state [B,H,D,D]. The saved state is released when the last reference goes (pass it with
// std::move to free it as soon as possible).
Rwkv6Grads rwkv6_backward(std::shared_ptr<Rwkv6Saved> saved, const Tensor& dO, const Tensor& dht = Tensor());

}  // namespace lt::mixers
