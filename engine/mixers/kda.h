// KDA token mixer at the Tensor level: forward / backward with a selectable path.
//
//   lt::mixers::KdaConfig cfg;  cfg.path = lt::mixers::KdaPath::fused;  // chunk 0: auto
//   auto out = lt::mixers::kda_forward({q, k, v, f, b, A_log, dt_bias, h0}, cfg);  // out.o [B,T,H,D]
//   auto g = lt::mixers::kda_backward(std::move(out.saved), dO);                   // g.dq ... g.dh0
//
// Math, layouts and the three implementations: kernels/kda.h. Here:
//   naive  the CPU recurrence in float64 (inputs copied to the host; results converted back
//          to the inputs' device and dtype). Ground truth; slow.
//   ops    the chunk algorithm composed from runtime ops (engine/ops.h), CPU and CUDA,
//          forward and backward; computes in f64 for f64 inputs, else in f32. Materialises
//          everything (the [.., C, C, D] gate-ratio tensor included): a reference, not fast.
//   fused  kernels/cuda/kda.cu and kernels/cuda/kda/ on CUDA tensors (CPU tensors run the CPU twins). f32 / bf16.
//          Scratch and outputs come from the caching allocator (Tensor::empty), never zeroed.
// Inputs: q, k, v, f [B,T,H,D]; b [B,T,H] (all one float dtype); A_log [H]; dt_bias [H,D] or
// [H*D]; h0 [B,H,D,D] (optional, undefined Tensor = zero state). Parameters and states are
// converted to f32 (f64 for the naive / f64 ops paths) as needed.
// Outputs: o in the inputs' dtype; ht [B,H,D,D] f32 when cfg.output_final_state.
// Gradients are returned fresh (=, not accumulated): dq, dk, dv, df [B,T,H,D] and db [B,T,H]
// in the inputs' dtype, dA_log [H], ddt_bias (dt_bias's shape) and dh0 [B,H,D,D] in f32
// (f64 for f64 inputs). dh0 is defined when h0 was given.
#pragma once
#include <memory>
#include <string>

#include "engine/mixers/path.h"
#include "engine/tensor.h"
#include "kernels/kda.h"

namespace lt::mixers {

inline KdaPath parse_kda_path(const std::string& name) { return parse_mixer_path("kda", name); }
inline const char* kda_path_name(KdaPath p) { return mixer_path_name(p); }

struct KdaConfig {
  int chunk = 0;       // 0: auto (kda_chunk); else 16, 32 or 64 (ops path: any >= 1)
  double scale = 0.0;  // 0: D^-1/2 (kernels/mixer.h)
  kda::Gate gate;      // default gate, or fla's lower_bound form
  KdaPath path = KdaPath::fused;
  bool output_final_state = false;
  bool tensor_cores = true;  // fused: scan kernels on tensor cores (false: fp32 CUDA cores)
};

// seg_start (packed documents; optional): [B, T] i32, 1 where a segment starts at token t (any
// position); its state restarts at zero: exactly on the naive path, through the gate
// kda::kSegmentStartGate (e^-40) on the ops and fused paths (kernels/kda.h).
struct KdaInputs {
  Tensor q, k, v, f, b, A_log, dt_bias, h0;
  Tensor seg_start;
};

// What the backward needs; path-specific. Fused: the state trajectory h [B,H,NT,D,D] f32 and
// the forward's chunk tiles (W, U, sQ = scale Q~, Kbar, Aqk, gamma: ForwardWorkspace and
// BackwardWorkspace in kernels/kda.h), which the backward rewrites in place: one backward per
// saved state (a second one throws). Drop it (out.saved.reset()) after an eval-only forward.
struct KdaSaved;

struct KdaOutput {
  Tensor o;   // [B,T,H,D]
  Tensor ht;  // [B,H,D,D] when requested
  std::shared_ptr<KdaSaved> saved;
};

struct KdaGrads {
  Tensor dq, dk, dv, df, db, dA_log, ddt_bias, dh0;
};

// The chunk length kda_forward runs at for q of shape [B, T, H, D] and dtype: cfg.chunk, or
// for 0 (auto) on the fused path the measured best for the shape (kda::fused_chunk), 64 on
// the other paths.
int kda_chunk(const KdaConfig& cfg, const Shape& q_shape, DType dtype);

KdaOutput kda_forward(const KdaInputs& in, const KdaConfig& cfg);
// dht: optional gradient of the final state [B,H,D,D]. The saved state is released when
// the last reference goes (pass it with std::move to free it as soon as possible).
KdaGrads kda_backward(std::shared_ptr<KdaSaved> saved, const Tensor& dO, const Tensor& dht = Tensor());

}  // namespace lt::mixers
