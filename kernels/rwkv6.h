// RWKV6 token mixer ("chunk RWKV6"): naive recurrence, chunked CPU twins of the fused CUDA
// stages, and the CUDA launchers. Math: docs/MATH.md (RWKV6).
//
// Operator, per (batch b, head h), rows t = 0..T-1, state S in R^{D x D} (row = key dim d,
// column = value dim v):
//     o_t = scale * r_t^T (S_{t-1} + diag(u) k_t v_t^T)
//     S_t = diag(exp(w_t)) S_{t-1} + k_t v_t^T,           S_{-1} = h0 (or 0)
// Shapes (row-major, contiguous):
//     r, k, v, w, o, and their gradients   [B, T, H, D]    (w: log decay, w <= 0)
//     u, du                                [H, D]          (fp32)
//     h0, ht, dht, dh0                     [B, H, D, D]    (fp32, S[d][v])
// Chunked form (chunk C in {16, 32, 64}; NT = ceil(T / C); the last chunk may be partial and
// is handled exactly by zero-padding rows >= L inside the kernels, with w padded by 0 so the
// cumulative gate stops at the last valid row). Within chunk n, rows r, s in [0, C):
//     Gi_r = sum_{j<=r} w_j (fp32, chunk-local, sequential per column),  Ge_r = Gi_r - w_r,
//     gamma = Gi_{C-1}
//     A[r,s] = scale sum_d q_rd k_sd e^{Ge_rd - Gi_sd}  (s < r),  A[r,r] = scale sum_d q u k
//     O = scale (Q . e^Ge) h[n] + A V;   h[n+1] = e^gamma . h[n] + (K . e^{gamma - Gi})^T V
// Backward (primes: without the u bonus), with dh[n] = dL/d(state after chunk n):
//     dP = scale (dO V^T) . M_<=,   dV = A^T dO + (K . e^{gamma-Gi}) dh[n]
//     dh[n-1] = e^gamma . dh[n] + scale (Q . e^Ge)^T dO          (reverse scan; dh0 = dh[-1])
//     dq'_r = scale (dO h[n]^T)_r . e^{Ge_r} + sum_{s<r} dP[r,s] k_s . e^{Ge_r - Gi_s}
//     dk'_s = (V dh[n]^T)_s . e^{gamma-Gi_s} + sum_{r>s} dP[r,s] q_r . e^{Ge_r - Gi_s}
//     dgamma = e^gamma . sum_v (h[n] . dh[n]) + sum_s k_s . (V dh[n]^T)_s e^{gamma - Gi_s}
//     dw_j = sum_{r>j} q_r . dq'_r - sum_{r>=j} k_r . dk'_r + dgamma
//     dq = dq' + dP[r,r] u . k_r;  dk = dk' + dP[s,s] u . q_s;  du = sum dP[r,r] q_r . k_r
// Safe exponentials (every exp argument <= 0). Rows are grouped in 16-row blocks i
// (BC = 16). With gs_i = Gi_{16i-1} (0 for i = 0; the reference at the block start) and
// ge_j = Gi_{16j+15} (the block end):
//     q~_r = q_r e^{Ge_r - gs_i(r)},   k~_s = k_s e^{ge_j(s) - Gi_s},
//     m_ij = e^{gs_i - ge_j} = prod_{j<b<i} e^{W_b}   (W_b = ge_b - gs_b, block total decay)
//     off-diagonal blocks (j < i):  q_r k_s e^{Ge_r - Gi_s} = q~_r m_ij k~_s   (all <= 1)
//     diagonal blocks: e^{Ge_r - Gi_s} elementwise, masked before use.
// Accumulation: all chunk math in fp32 (double in the CPU twins instantiated with double);
// gates, A, states and every accumulator fp32; outputs rounded once to the input dtype.
// Gradient outputs are written (=), never accumulated; du is a deterministic sum of
// per-chunk partials du_part [B, NT, H, D].
//
// Tensor-core variant (Variant::tensor_core; the CUDA path for bf16 inputs at chunk 32 / 64;
// docs/notes-rwkv6.md "Tensor-core version"). Same gates (fp32, exact chunk-local cumsum;
// here Ge_r = Gi_{r-1}, Ge_0 = 0, the stored previous row), same block factorisation, but
// every GEMM-shaped product runs on bf16 operands with fp32 accumulation (R(x) = x rounded
// to bf16; inputs r, k, v, w, dO are bf16 already, so R is exact on them):
//   A, off-diagonal block pair (i, j < i):  R(q~_i . m_ij) R(k~_j)^T     (m_ij folded into q~)
//   A, diagonal block i:  R(q~_i) R(k^_i)^T, k^_s = k_s e^{gs_i - Gi_s} = k~_s / e^{W_i} (>= 1),
//       used only in "safe" columns, W_i = ge_i - gs_i >= -kSafeRange; in the other columns
//       k^ = 0 and the exact elementwise sum over those columns is added instead. So the
//       diagonal blocks run on tensor cores for any gate and stay exact for any w <= 0.
//   A V and A^T dO with R(scale A);  Q e^Ge h, dO h^T, V dh^T, K e^{g-Gi} dh with R(h), R(dh);
//   dq' intra, block i, on R(dP) and R(k~) only: acc = Horner_j<i (R(dP_ij) R(k~_j), x e^{W_j}),
//       then acc = sc acc + R(dP_ii) R(k~_i) with sc = e^{W_i} (safe columns) or 1; D = e^{-W_i} acc
//       (safe) or acc - (the same diagonal product, elementwise) + the exact diagonal sum fb
//       (unsafe); dq'_intra = e^{Ge - gs_i} D + fb. dk' intra mirrors it on R(dP)^T and R(q~)
//       (Horner from the last block down), dk'_intra = e^{ge_j - Gi} D + fb.
//   dw's x = q dq', y = k dk' cancel pairwise (dw_j keeps only the pairs straddling j), so
//       their intra parts are built from the same rounded pair products: x_intra = R(q~) D_q +
//       q fb_q, y_intra = R(k~) D_k + k fb_k (both = sum R(q~_r) m R(dP_rs) R(k~_s) e^{...});
//       rounding q~ and k~ independently instead would cost 10x in dw (measured 1.4e-2).
//   scans: S <- e^g S + R(K e^{g-Gi})^T V,  S' <- e^g S' + R(scale Q e^Ge)^T dO.
// States, gates, dP's diagonal, the u terms, dgamma, dw and du stay fp32. In the two-kernel
// fallback the intra kernel also finishes dw's intra part (only it has x_intra, y_intra) and
// leaves it in dw (rounded to bf16); the inter kernel adds the rest.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/dtype.h"
#include "kernels/mixer.h"

namespace lt::rwkv6 {

// Tensor-core variant: a diagonal block's column is "safe" when its total decay is at most
// kSafeRange nats (e^{60} ~ 1.1e26: the >= 1 factors k^ and e^{-W} stay far inside bf16/fp32).
constexpr float kSafeRange = 60.0f;

// C: 16, 32 or 64 (the naive recurrence ignores it).
using Dims = mixer::Dims<int64_t>;
inline int64_t du_part_numel(const Dims& d) { return d.B * d.NT() * d.H * d.D; }  // [B,NT,H,D]

// ---------------------------------------------------------------------------------------
// 1. Naive recurrence (CPU), F = float or double: dense row-major arrays in F.
template <class F>
struct NaiveInputs {
  Dims dims;              // C unused
  const F* r = nullptr;   // [B,T,H,D]
  const F* k = nullptr;   // [B,T,H,D]
  const F* v = nullptr;   // [B,T,H,D]
  const F* w = nullptr;   // [B,T,H,D]  log decay, w <= 0
  const F* u = nullptr;   // [H,D]      bonus
  const F* h0 = nullptr;  // [B,H,D,D] or nullptr (zero state)
  F scale = 0;            // 0: D^-1/2 (kernels/mixer.h)
  // [B,T] or nullptr: 1 where a packed document starts; the state restarts at zero before
  // that token (fla's cu_seqlens semantics; a start at t = 0 drops h0 and gives dh0 = 0).
  const uint8_t* seg_start = nullptr;
};
template <class F>
struct NaiveGrads {  // every pointer required except dh0 (may be nullptr)
  F* dr = nullptr;   // [B,T,H,D]
  F* dk = nullptr;
  F* dv = nullptr;
  F* dw = nullptr;
  F* du = nullptr;   // [H,D]
  F* dh0 = nullptr;  // [B,H,D,D]
};
// o: [B,T,H,D]; ht: [B,H,D,D] or nullptr.
template <class F>
void naive_forward(const NaiveInputs<F>& in, F* o, F* ht);
// Backward by the reverse recurrence (stores every state of one (b, h) at a time). dO:
// [B,T,H,D]; dht: [B,H,D,D] or nullptr. Grads are written (=), not accumulated.
template <class F>
void naive_backward(const NaiveInputs<F>& in, const F* dO, const F* dht, const NaiveGrads<F>& grads);

// ---------------------------------------------------------------------------------------
// 2. CPU twins of the fused CUDA stages (same factorisation, same stage boundaries).
//    `scale`: 0 means D^-1/2 (kernels/mixer.h), as everywhere.
//    fwd:  chunk_state_scan (h [B,H,NT,D,D], ht)  ->  chunk_output (o)
//    bwd:  chunk_state_scan (h) + chunk_dstate_scan (dh [B,H,NT,D,D], dh0)
//          -> chunk_bwd(all)                                          (fused backward)
//          or chunk_bwd(intra) -> dq_tmp, dk_tmp fp32 -> chunk_bwd(inter)    (fallback)
//          -> du_reduce
// Which terms of the chunk backward (chunk_bwd, rwkv6_bwd_chunk) one call forms: the
// intra-chunk terms of dq', dk', the inter-chunk rest that finishes the gradients, or all.
enum class ChunkBwdTerms : int { all = 0, intra = 1, inter = 2 };
// simt: the fp32 algebra above (the CUDA path for fp32, and for bf16 at chunk 16).
// tensor_core: the bf16-operand algebra of the tensor-core kernels (top comment).
enum class Variant : int { simt = 0, tensor_core = 1 };
// The two backward implementations (CUDA and CPU twins alike); a config names one
// (kbench rwkv6 --pick-backward times both on a shape and prints the winner).
enum class BwdImpl : int {
  fused = 0,     // scans | fused chunk kernel (part all) | du reduce                (3 launches)
  fallback = 1,  // scans | intra (fp32 dq'/dk' out) | inter (reads them) | du reduce (4)
};
const char* bwd_impl_name(BwdImpl impl);          // "fused" | "fallback"
BwdImpl parse_bwd_impl(const std::string& name);  // throws std::invalid_argument naming it

// chunk_reset: [B, NT] or nullptr, FusedArgs::chunk_reset's meaning (packed documents).
template <class F>
void chunk_state_scan(const Dims& d, const F* k, const F* v, const F* w, const F* h0, F* h, F* ht,
                      Variant var = Variant::simt, const int32_t* chunk_reset = nullptr);
template <class F>
void chunk_dstate_scan(const Dims& d, F scale, const F* r, const F* w, const F* dO, const F* dht, F* dh, F* dh0,
                       Variant var = Variant::simt, const int32_t* chunk_reset = nullptr);
template <class F>
void chunk_output(const Dims& d, F scale, const F* r, const F* k, const F* v, const F* w, const F* u, const F* h, F* o,
                  Variant var = Variant::simt);
// all: writes dr, dk, dv, dw, du_part.  intra: writes only the intra-chunk parts of dq', dk'
// to dq_tmp, dk_tmp (tensor-core variant: and dw's intra part to dw).  inter: reads dq_tmp,
// dk_tmp, writes dr, dk, dv, dw, du_part.
template <class F>
void chunk_bwd(const Dims& d, ChunkBwdTerms part, F scale, const F* r, const F* k, const F* v, const F* w, const F* u,
               const F* h, const F* dh, const F* dO, F* dq_tmp, F* dk_tmp, F* dr, F* dk, F* dv, F* dw, F* du_part,
               Variant var = Variant::simt);
template <class F>
void du_reduce(const Dims& d, const F* du_part, F* du);

// Convenience: the whole chunked forward / backward through the twins (scratch inside).
template <class F>
void chunk_forward_cpu(const Dims& d, F scale, const F* r, const F* k, const F* v, const F* w, const F* u, const F* h0,
                       F* o, F* ht, Variant var = Variant::simt, const int32_t* chunk_reset = nullptr);
template <class F>
void chunk_backward_cpu(const Dims& d, BwdImpl impl, F scale, const F* r, const F* k, const F* v, const F* w,
                        const F* u, const F* h0, const F* dO, const F* dht, F* dr, F* dk, F* dv, F* dw, F* du, F* dh0,
                        Variant var = Variant::simt, const int32_t* chunk_reset = nullptr);

// ---------------------------------------------------------------------------------------
// 3. CUDA (kernels/cuda/rwkv6/, launches in launch.cu). Raw device pointers; every buffer below comes from the
//    caller (the Tensor-level API takes them from the CUDA caching allocator).
//    Requires D % 64 == 0 (64, 128, 256 tested), chunk in {16, 32, 64}, dtype f32 or bf16
//    for r, k, v, w, o, dO and the token gradients; u, du, states fp32.
struct FusedArgs {
  Dims dims;
  DType dtype = DType::f32;  // of r, k, v, w, o, dO, dr, dk, dv, dw
  float scale = 0.0f;        // 0: D^-1/2 (kernels/mixer.h); the fla layer passes 1
  // forward inputs / outputs
  const void* r = nullptr;    // [B,T,H,D]
  const void* k = nullptr;    // [B,T,H,D]
  const void* v = nullptr;    // [B,T,H,D]
  const void* w = nullptr;    // [B,T,H,D]
  const float* u = nullptr;   // [H,D]
  const float* h0 = nullptr;  // [B,H,D,D] or nullptr
  // Packed documents: [B, NT] or nullptr; 1 where chunk n of row b starts a segment, whose
  // state restarts at zero (h[n] = 0; dh[n - 1] = 0, dh0 = 0 for n = 0). Segments start on
  // chunk boundaries only: the engine lays documents out so (engine/mixers/segments.h).
  const int32_t* chunk_reset = nullptr;
  void* o = nullptr;    // [B,T,H,D]
  float* ht = nullptr;  // [B,H,D,D] or nullptr
  // backward inputs / outputs
  const void* dO = nullptr;    // [B,T,H,D]
  const float* dht = nullptr;  // [B,H,D,D] or nullptr
  void* dr = nullptr;          // [B,T,H,D]
  void* dk = nullptr;          // [B,T,H,D]
  void* dv = nullptr;          // [B,T,H,D]
  void* dw = nullptr;          // [B,T,H,D]
  float* du = nullptr;         // [H,D]
  float* dh0 = nullptr;        // [B,H,D,D] or nullptr
  // scratch (fp32)
  float* h = nullptr;        // [B,H,NT,D,D] inbound state of every chunk
  float* dh = nullptr;       // [B,H,NT,D,D] gradient of every chunk's outbound state (bwd)
  float* du_part = nullptr;  // [B,NT,H,D] (bwd)
  float* dq_tmp = nullptr;   // [B,T,H,D] fallback only: intra dq'
  float* dk_tmp = nullptr;   // [B,T,H,D] fallback only: intra dk'
};

// Which kernels run: the tensor-core kernels (Variant::tensor_core) for bf16 at chunk 32 or
// 64, the SIMT fp32 kernels otherwise (fp32 inputs: the exact path; bf16 at chunk 16).
// The environment variable LINTRAIN_RWKV6_KERNELS=simt (read in kernels/cuda/rwkv6/launch.cu, once
// per process) forces the SIMT kernels for bf16 too.
bool cuda_uses_tensor_cores(const Dims& d, DType dtype);

// Scratch bytes: forward needs h; backward needs h, dh, du_part (+ dq_tmp, dk_tmp for the
// fallback).
size_t cuda_scratch_bytes_forward(const Dims& d);
size_t cuda_scratch_bytes_backward(const Dims& d, BwdImpl impl);

// Check dims, dtype and pointers; throw std::invalid_argument with the reason. Forward:
// check_fused_args(a); backward: pass the implementation that will run.
void check_fused_args(const FusedArgs& a);
void check_fused_args(const FusedArgs& a, BwdImpl impl);

// 2 launches: state scan (writes h, ht) | chunk output (o).
void cuda_forward(const FusedArgs& a, void* stream);
// h_is_valid: a.h already holds the forward's states (kept from forward): the scan launch
// then runs only the reverse dh scan. Otherwise both scans run in one launch.
// Fused: 3 launches, fallback: 4.
void cuda_backward(const FusedArgs& a, BwdImpl impl, bool h_is_valid, void* stream);

}  // namespace lt::rwkv6
