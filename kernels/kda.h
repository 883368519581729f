// KDA (Kimi Delta Attention, the per-channel gated delta rule): kernels-layer API.
//
// Math (per sequence b and head h; K = V = D; S is a K x V matrix in fp32):
//   q^ = q / sqrt(sum q^2 + 1e-6), k^ likewise                       (L2 norm inside the op)
//   x = f + dt_bias[h,:];  g = -exp(A_log[h]) * softplus(x)           (softplus(x) = x for x > 20)
//        or, with a lower bound lb < 0:  g = lb * sigmoid(exp(A_log[h]) * x)
//   beta = sigmoid(b)
//   S_t = (I - beta_t k^_t k^_t^T) diag(e^{g_t}) S_{t-1} + beta_t k^_t v_t^T,  S_{-1} = h0 (or 0)
//   o_t = scale * S_t^T q^_t                                           (scale default D^-1/2)
// Gradients: dq, dk (through the L2 norm), dv, df, db, dA_log, ddt_bias, dh0; an optional
// dht (gradient of the final state) is accepted.
//
// Three implementations (docs/notes-kda.md has the derivations and the measurements):
//   naive_*       the recurrence above on the CPU, Real = double (ground truth) or float;
//                 backward by BPTT over stored states.
//   fused_* (CPU) the CPU twins of the fused CUDA kernels: the *same* block programs
//                 (kernels/kda_blocks.h) run by an emulated thread block (std::barrier),
//                 so the kernels' index arithmetic and barriers are tested without a GPU.
//   fused_* (CUDA) kernels/cuda/kda.cu: forward = 2 launches (intra, inter), backward =
//                 3 launches (aqk_dO, inter adjoint, intra adjoint).
// The ops path (chunk algorithm from runtime ops) lives in engine/mixers/kda.cpp.
//
// Layouts (row-major, int64 index arithmetic):
//   q, k, v, f, dq, dk, dv, df, o, dO : [B, T, H, D]   (dtype f32 or bf16)
//   b, db                              : [B, T, H]      (same dtype)
//   A_log, dA_log                      : [H]            fp32
//   dt_bias, ddt_bias                  : [H, D]         fp32
//   h0, ht, dh0, dht                   : [B, H, D, D]   fp32, state S[k][v]
//   h (saved state trajectory)         : [B, H, NT, D, D] fp32: S before each chunk
// Chunk-local scratch is head-major and padded to Tp = NT * C rows: [B, H, Tp, D] fp32.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace lt::kda {

struct Gate {
  bool use_lower_bound = false;  // false: g = -e^{A_log} softplus(x); true: g = lb sigmoid(e^{A_log} x)
  float lower_bound = -5.0f;     // lb < 0, used only when use_lower_bound
};

struct Dims {
  int64_t B = 0, T = 0, H = 0;
  int D = 64;      // head dim, K = V = D: 64 or 128 in the fused path (any D in naive)
  int C = 64;      // chunk length: 16, 32 or 64 in the fused path
  // constexpr so device code may call them (--expt-relaxed-constexpr)
  constexpr int64_t NT() const { return (T + C - 1) / C; }
  constexpr int64_t Tp() const { return NT() * C; }
  constexpr int64_t tokens() const { return B * T * H; }  // rows of [B, T, H, D]
};

// ---- naive recurrence (CPU, kernels/cpu/kda.cpp) ---------------------------------------
// Dense row-major arrays in Real. Real = double (ground truth, fp64 accumulation) or float.
template <class Real>
struct NaiveInputs {
  Dims dims;                       // C unused
  const Real* q = nullptr;         // [B,T,H,D]
  const Real* k = nullptr;         // [B,T,H,D]
  const Real* v = nullptr;         // [B,T,H,D]
  const Real* f = nullptr;         // [B,T,H,D]  raw gate pre-activation
  const Real* b = nullptr;         // [B,T,H]    raw beta logit
  const Real* A_log = nullptr;     // [H]
  const Real* dt_bias = nullptr;   // [H,D]
  const Real* h0 = nullptr;        // [B,H,D,D] or nullptr (zero state)
  Real scale = 0;                  // 0: D^-1/2
  Gate gate;
};
template <class Real>
struct NaiveGrads {                // every pointer required except dh0 (may be nullptr)
  Real* dq = nullptr;              // [B,T,H,D]
  Real* dk = nullptr;
  Real* dv = nullptr;
  Real* df = nullptr;
  Real* db = nullptr;              // [B,T,H]
  Real* dA_log = nullptr;          // [H]
  Real* ddt_bias = nullptr;        // [H,D]
  Real* dh0 = nullptr;             // [B,H,D,D]
};
// o: [B,T,H,D]; ht: [B,H,D,D] or nullptr.
template <class Real>
void naive_forward(const NaiveInputs<Real>& in, Real* o, Real* ht);
// dO: [B,T,H,D]; dht: [B,H,D,D] or nullptr. Grads are written (=), not accumulated.
template <class Real>
void naive_backward(const NaiveInputs<Real>& in, const Real* dO, const Real* dht,
                    const NaiveGrads<Real>& grads);

// ---- fused path: one argument struct for every stage ----------------------------------
// Element pointers are untyped: `dtype` (f32 or bf16) gives the type of q, k, v, f, b, o,
// dO and of dq, dk, dv, df, db. Everything else is fp32.
struct FusedArgs {
  Dims dims;
  DType dtype = DType::f32;
  float scale = 0.0f;              // 0: D^-1/2
  Gate gate;
  // State-scan products (inter, inter adjoint) on tensor cores: mma.sync TF32 with the
  // 3xTF32 split for f32 inputs (fp32-level accuracy), one TF32 product for bf16 inputs.
  // false: the fp32 CUDA-core variant (kept, tested).
  bool tensor_cores = true;
  // inputs
  const void* q = nullptr;         // [B,T,H,D]
  const void* k = nullptr;
  const void* v = nullptr;
  const void* f = nullptr;
  const void* b = nullptr;         // [B,T,H]
  const float* A_log = nullptr;    // [H]
  const float* dt_bias = nullptr;  // [H,D]
  const float* h0 = nullptr;       // [B,H,D,D] or nullptr
  // forward outputs
  void* o = nullptr;               // [B,T,H,D]
  float* ht = nullptr;             // [B,H,D,D] or nullptr
  float* h = nullptr;              // [B,H,NT,D,D] saved trajectory (written by forward)
  // backward inputs / outputs
  const void* dO = nullptr;        // [B,T,H,D]
  const float* dht = nullptr;      // [B,H,D,D] or nullptr
  void* dq = nullptr;              // [B,T,H,D]
  void* dk = nullptr;
  void* dv = nullptr;
  void* df = nullptr;
  void* db = nullptr;              // [B,T,H]
  float* dA_log = nullptr;         // [H]
  float* ddt_bias = nullptr;       // [H,D]
  float* dh0 = nullptr;            // [B,H,D,D] or nullptr
};

// Scratch of the fused path, from the caller (the engine takes it from the caching
// allocator). Every buffer is fully overwritten by the kernel that produces it, so it may be
// handed over uninitialised. Sizes in bytes from workspace_bytes(dims, dtype).
// The tiles t0, t2, t4, sq and aqk hold elements of `dtype` (fp32 for f32 inputs, bf16 for
// bf16 inputs: halves the scratch, which sets the peak memory); t1 (U, then Delta), t3 (Kbar,
// then X_k) and the rest are fp32 always. Delta and X_k = Delta S'^T feed every gate
// gradient; in bf16 they were the two largest sources of error in dA_log, a per-head sum of
// cancelling terms (docs/notes-kda.md, "bf16 dA_log"). The fp32 t3 is paid for by the
// backward's two parts: A_qk is dead after the first launch, so the engine frees it before
// it allocates the gradients (memory-neutral at C = D = 64).
//
// Forward -> backward contract (the backward does not recompute the intra-chunk products):
//   forward writes  t0 = W, t1 = U, t2 = Qp = scale Q~ - A_qk W, t3 = Kbar, t4 = Ob = A_qk U,
//                   sq = scale Q~, aqk = A_qk, gamma.  t2 and t4 are forward-only scratch.
//   backward reads  t0, t1, t3, aqk and gamma as the forward left them, and takes t2 = the
//                   forward's sq (so a backward Workspace has t2 = forward sq, a fresh t4,
//                   and needs neither sq nor the forward's t2 / t4). It rewrites t0..t4 in
//                   place (t0 W -> X_w, t1 U -> Delta, t2 scale Q~ -> X_q, t3 Kbar -> X_k,
//                   t4 = A_qk^T dO -> dDelta), so one forward's tiles serve one backward.
//                   Only its first launch (aqk_dO) reads aqk.
struct Workspace {
  // chunk-local tiles, [B, H, Tp, D]
  void* t0 = nullptr;
  void* t1 = nullptr;
  void* t2 = nullptr;
  void* t3 = nullptr;
  void* t4 = nullptr;
  void* sq = nullptr;         // forward: scale Q~ [B, H, Tp, D] (the backward's t2)
  void* aqk = nullptr;        // A_qk [B, H, Tp, C], row r of a chunk: A_qk[r][s], 0 for s > r
  float* gamma = nullptr;     // [B, H, NT, D] chunk gate totals (natural log)
  float* dgamma_s = nullptr;  // [B, H, NT, D] backward: e^gamma * sum_v S*S'
  float* partials = nullptr;  // [B*NT, H, D+1] backward: ddt_bias / dA_log partial sums
  uint32_t* counters = nullptr;  // [H] backward: blocks done per head (zeroed by the aqk_dO kernel)
};
struct WorkspaceBytes {
  size_t tile = 0;      // each of t0, t2, t4, sq (dtype elements)
  size_t tile_f32 = 0;  // each of t1, t3 (fp32 elements)
  size_t aqk = 0;       // aqk (dtype elements, [B, H, Tp, C])
  size_t gamma = 0;     // gamma and dgamma_s each
  size_t partials = 0;
  size_t counters = 0;
};
WorkspaceBytes workspace_bytes(const Dims& dims, DType dtype);
size_t trajectory_bytes(const Dims& dims);  // h: B*H*NT*D*D*4

// The backward in two parts, so that the caller can free A_qk in between (the engine does):
//   aqk_dO    launch 1: t4 = A_qk^T dO, zeroes the counters. Reads aqk, dO; writes t4 and
//             counters only (FusedArgs' gradient pointers may still be null).
//   adjoints  launches 2-3: inter adjoint, intra adjoint. Never reads aqk (ws.aqk may be null).
//   all       both, in order.
enum class BackwardPart { all, aqk_dO, adjoints };

// Throw std::invalid_argument naming the problem (D, C, dtype, null pointers). Forward:
// check_fused_args(a) / check_workspace(ws); backward: pass the part that will run.
void check_fused_args(const FusedArgs& a);
void check_fused_args(const FusedArgs& a, BackwardPart part);
void check_workspace(const Workspace& ws);
void check_workspace(const Workspace& ws, BackwardPart part);

// CPU twins (emulated thread blocks; slow: for tests at small shapes).
void fused_forward_cpu(const FusedArgs& a, const Workspace& ws);
void fused_backward_cpu(const FusedArgs& a, const Workspace& ws, BackwardPart part = BackwardPart::all);

// CUDA (kernels/cuda/kda.cu; present when LINTRAIN_WITH_CUDA). `stream` is a cudaStream_t.
// Stage scopes "intra", "inter" (forward) and "aqk_dO", "inter_adjoint",
// "intra_adjoint" (backward) name the launches in the launch atlas.
void fused_forward_cuda(const FusedArgs& a, const Workspace& ws, void* stream);
void fused_backward_cuda(const FusedArgs& a, const Workspace& ws, void* stream,
                         BackwardPart part = BackwardPart::all);

}  // namespace lt::kda
