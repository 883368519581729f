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
// Packed documents (NaiveInputs::seg_start, FusedArgs::seg_start): the state restarts at zero
// at each segment start (the naive recurrence exactly, the chunk paths by kSegmentStartGate).
// Three implementations (derivations: docs/MATH.md §1; measurements: docs/notes-kda.md):
//   naive_*       the recurrence above on the CPU, Real = double (ground truth) or float;
//                 backward by BPTT over stored states.
//   fused_* (CPU) the CPU twins of the fused CUDA kernels: the *same* block programs
//                 (kernels/kda_blocks.h, kernels/kda/) run by an emulated thread block (fibers),
//                 so the kernels' index arithmetic and barriers are tested without a GPU.
//   fused_* (CUDA) kernels/cuda/kda.cu, kernels/cuda/kda/: forward = 2 launches (intra, inter), backward =
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
#include "kernels/mixer.h"

namespace lt::kda {

// The natural-log gate added at a packed document's first token (FusedArgs::seg_start; the ops
// path too): e^-40 leaves 4e-18 of the previous document's state; 40 nats (58 in log2) keep
// the chunk-local cumsum's resolution at 4e-6 (fp32 in [32, 64)).
constexpr float kSegmentStartGate = -40.0f;

struct Gate {
  bool use_lower_bound = false;  // false: g = -e^{A_log} softplus(x); true: g = lb sigmoid(e^{A_log} x)
  float lower_bound = -5.0f;     // lb < 0, used only when use_lower_bound
};

// D: 64 or 128 in the fused path (any D in naive); C: 16, 32 or 64 in the fused path.
using Dims = mixer::Dims<int>;

// ---- naive recurrence (CPU, kernels/cpu/kda.cpp) ---------------------------------------
// Dense row-major arrays in Real. Real = double (ground truth, fp64 accumulation) or float.
template <class Real>
struct NaiveInputs {
  Dims dims;                      // C unused
  const Real* q = nullptr;        // [B,T,H,D]
  const Real* k = nullptr;        // [B,T,H,D]
  const Real* v = nullptr;        // [B,T,H,D]
  const Real* f = nullptr;        // [B,T,H,D]  raw gate pre-activation
  const Real* b = nullptr;        // [B,T,H]    raw beta logit
  const Real* A_log = nullptr;    // [H]
  const Real* dt_bias = nullptr;  // [H,D]
  const Real* h0 = nullptr;       // [B,H,D,D] or nullptr (zero state)
  Real scale = 0;                 // 0: D^-1/2 (kernels/mixer.h)
  Gate gate;
  // [B,T] or nullptr: 1 where a packed document starts; the state restarts at zero before
  // that token (fla's cu_seqlens semantics; a start at t = 0 drops h0 and gives dh0 = 0).
  const uint8_t* seg_start = nullptr;
};
template <class Real>
struct NaiveGrads {    // every pointer required except dh0 (may be nullptr)
  Real* dq = nullptr;  // [B,T,H,D]
  Real* dk = nullptr;
  Real* dv = nullptr;
  Real* df = nullptr;
  Real* db = nullptr;        // [B,T,H]
  Real* dA_log = nullptr;    // [H]
  Real* ddt_bias = nullptr;  // [H,D]
  Real* dh0 = nullptr;       // [B,H,D,D]
};
// o: [B,T,H,D]; ht: [B,H,D,D] or nullptr.
template <class Real>
void naive_forward(const NaiveInputs<Real>& in, Real* o, Real* ht);
// dO: [B,T,H,D]; dht: [B,H,D,D] or nullptr. Grads are written (=), not accumulated.
template <class Real>
void naive_backward(const NaiveInputs<Real>& in, const Real* dO, const Real* dht, const NaiveGrads<Real>& grads);

// ---- fused path: one argument struct for every stage ----------------------------------
// Element pointers are untyped: `dtype` (f32 or bf16) gives the type of q, k, v, f, b, o,
// dO and of dq, dk, dv, df, db. Everything else is fp32.
// The backward products that do not need the adjoint state S' (X_q = dO S^T, X_w = dDelta S^T;
// S = h[n]; Delta = U - W S is the forward scan's); the numbers are LINTRAIN_KDA_LEAN_SCAN's values:
//   full  the inter adjoint (the scan) forms all six products a row block;
//   lean  the intra adjoint forms X_q and X_w, on every SM, at the price of reading h[n] once
//         more from memory; the scan keeps four;
//   pick  lean where the scan runs split over V or on few enough SMs (lean_scan_pick), else full.
enum class LeanScan : int { pick = 0, full = 1, lean = 2 };
// The two-level backward scan's first level (FusedArgs::scan_first): pick (chosen on CUDA,
// serial on the CPU twin), serial (S' alone over all chunks), affine (group maps and a chain).
enum class ScanFirst : int { pick = 0, serial = 1, affine = 2 };

struct FusedArgs {
  Dims dims;
  DType dtype = DType::f32;
  float scale = 0.0f;  // 0: D^-1/2 (kernels/mixer.h)
  Gate gate;
  // State-scan products (inter, inter adjoint) on tensor cores: mma.sync TF32 with the
  // 3xTF32 split for f32 inputs (fp32-level accuracy), one TF32 product for bf16 inputs.
  // false: the fp32 CUDA-core variant (kept, tested).
  bool tensor_cores = true;
  // V tiles of the inter adjoint (the backward state scan): 1 (one block per (b, h)), 2 or 4
  // (a thread-block cluster of that many blocks per (b, h), each owning D / split state
  // columns; bit-identical results). 0: chosen from B*H and the device's SM count
  // (inter_adjoint_split); the CPU twin takes 0 as 1. CUDA below compute capability 9.0
  // (no clusters): always 1.
  int scan_split = 0;
  // The two-level backward scan (kernels/kda/state_adjoint.h): chunks per group. The first
  // level scans S' alone over all chunks, split over V (D / 16 blocks per (b, h), no
  // exchange), and saves S' at every group boundary (in gradient rows not yet written:
  // kernels/kda/block_products.h, scan_state_at; no memory of its own); the
  // second runs the single-block lean scan on every group at once from its boundary's S', so
  // the serial chain of full scan steps is one group long. Bit-identical to the one-block scan.
  // 0: the pick on CUDA (resolve_scan_group_cuda), one level on the CPU twin; a value >= NT: one
  // group, i.e. the one-level scan. A group below NT needs tensor_cores, scan_split 1, the lean
  // scan (it forces both) and D <= 2 scan_group C (bf16; f32: 4 scan_group C).
  int scan_group = 0;
  // The two-level backward scan's first level (kernels/kda/state_adjoint.h). serial: as above.
  // affine: S' crosses a group by an affine map (S' below = M'_g S' above + local'_g); every
  // group's local'_g and M'_g are scanned at once (4 blocks a sequence and group, each 2 x
  // D / 4 columns), then a chain of one product a group gives every boundary's S', so the first
  // level's serial chain is NG product steps, not NT scan steps. Not bit-identical to the
  // one-level scan. Its three states a group need 3 D <= 2 scan_group C (bf16; f32: 4
  // scan_group C). Used only where the two-level scan runs.
  ScanFirst scan_first = ScanFirst::pick;
  // The two-level forward scan (kernels/kda/scan.h): chunks per group. Every group's own state
  // contribution and transition are scanned at once, a chain of one product a group carries the
  // state across groups, then every group's full scan (h[n], O) runs at once from its start
  // state; the intermediate states live in rows of h not yet written. Not bit-identical to the
  // one-level scan (the state crosses a group by M_g S + local_g). 0: resolve_fwd_group_cuda on
  // CUDA, one level on the CPU twin; a value >= NT: one level. A group below NT needs
  // tensor_cores and at least 2 chunks.
  int fwd_group = 0;
  // Which launch forms the backward products that do not need the adjoint state S'
  // (LeanScan above); pick: chosen (lean_scan_pick) on CUDA, full on the CPU twin unless
  // scan_split > 1. A split scan is always lean.
  LeanScan lean_scan = LeanScan::pick;
  // inputs
  const void* q = nullptr;  // [B,T,H,D]
  const void* k = nullptr;
  const void* v = nullptr;
  const void* f = nullptr;
  const void* b = nullptr;         // [B,T,H]
  const float* A_log = nullptr;    // [H]
  const float* dt_bias = nullptr;  // [H,D]
  const float* h0 = nullptr;       // [B,H,D,D] or nullptr
  // Packed documents: [B, T] or nullptr; 1 where a segment starts at token t (anywhere in a
  // chunk). The gate of that token gets kSegmentStartGate added: the state before it decays by
  // e^-40 ~ 4e-18 (a restart at zero, to far below fp32's resolution; dg/df is unchanged).
  // The chunk form stays exact around it: every exponential is a factor <= 1 (intra.h).
  const int32_t* seg_start = nullptr;
  // forward outputs
  void* o = nullptr;    // [B,T,H,D]
  float* ht = nullptr;  // [B,H,D,D] or nullptr
  float* h = nullptr;   // [B,H,NT,D,D] saved trajectory (written by forward)
  // backward inputs / outputs
  const void* dO = nullptr;    // [B,T,H,D]
  const float* dht = nullptr;  // [B,H,D,D] or nullptr
  void* dq = nullptr;          // [B,T,H,D]
  void* dk = nullptr;
  void* dv = nullptr;
  void* df = nullptr;
  void* db = nullptr;         // [B,T,H]
  float* dA_log = nullptr;    // [H]
  float* ddt_bias = nullptr;  // [H,D]
  float* dh0 = nullptr;       // [B,H,D,D] or nullptr
};

// Scratch of the fused path, from the caller (the engine takes it from the caching
// allocator), as one struct of named views per pass. Every buffer is fully overwritten by
// the launch that produces it, so it may be handed over uninitialised. Chunk-local tiles are
// head-major and padded to Tp = NT * C rows; "dtype" tiles hold elements of FusedArgs::dtype
// (bf16 tiles halve the scratch, which sets the peak memory), the others are fp32. Sizes in
// bytes: workspace_bytes(dims, dtype).
//
// Forward: intra writes every tile below; inter reads W, U, Qp, Kbar, Ob and gamma, and writes
// Delta = U - W h[n] over U once it has read a chunk's rows. The backward does not recompute
// the intra-chunk products: it takes W, Delta, sQ, Kbar, Aqk and gamma as the forward left
// them (the engine keeps them in its saved state); Qp and Ob are forward-only.
struct ForwardWorkspace {
  void* W = nullptr;             // [B, H, Tp, D] dtype  W = Tm diag(beta) K~                 (saved)
  float* U = nullptr;            // [B, H, Tp, D] fp32   U = Tm diag(beta) V, then Delta      (saved)
  void* sQ = nullptr;            // [B, H, Tp, D] dtype  scale Q~                             (saved)
  float* Kbar = nullptr;         // [B, H, Tp, D] fp32   K^ e^{gamma - Gamma}                 (saved)
  void* Aqk = nullptr;           // [B, H, Tp, C] dtype  A_qk; row r of a chunk: A_qk[r][s], 0 for s > r (saved)
  float* gamma = nullptr;        // [B, H, NT, D] fp32   chunk gate totals (natural log)      (saved)
  void* Qp = nullptr;            // [B, H, Tp, D] dtype  scale Q~ - A_qk W                    (forward only)
  void* Ob = nullptr;            // [B, H, Tp, D] dtype  A_qk U                               (forward only)
  uint32_t* counters = nullptr;  // [2 B H NT + 1] the two-level scan's (zeroed by intra if it runs; forward only)
};

// Backward, three launches: aqk_dO -> inter adjoint -> intra adjoint (BackwardLaunches below).
// Each output tile may be the same buffer as the saved input of the same type and shape
// written beside it, and the engine passes exactly that (so one forward's tiles serve one
// backward, and the backward allocates no tile): a launch reads a chunk's rows of an input
// before it writes that chunk's rows of the output over it, and no later launch reads the
// input. S = h[n] (the saved trajectory); Delta = U - W S is the forward scan's. The full scan
// (LeanScan::full): the inter adjoint forms dDelta, X_q, X_w and X_k. The lean scan
// (LeanScan::lean): the inter adjoint dDelta over AqkT_dO and X_k over Kbar, and the intra
// adjoint X_q and X_w over sQ and W (which the scan still reads). Delta and X_k (= Delta S'^T) feed every
// gate gradient; they are fp32 because in bf16 they are the two largest sources of error in
// dA_log, a per-head sum of cancelling terms (docs/notes-kda.md, "bf16 dA_log"). The fp32
// Kbar / X_k tile is paid for by splitting the backward: Aqk is dead after aqk_dO, so the
// engine frees it before it allocates the gradients (memory-neutral at C = D = 64).
struct BackwardWorkspace {
  // the forward's saved tiles (ForwardWorkspace)
  const void* Aqk = nullptr;     // [B, H, Tp, C] dtype  read by aqk_dO only (null for adjoints)
  const void* W = nullptr;       // [B, H, Tp, D] dtype
  const void* sQ = nullptr;      // [B, H, Tp, D] dtype  scale Q~
  const float* Kbar = nullptr;   // [B, H, Tp, D] fp32
  const float* gamma = nullptr;  // [B, H, NT, D] fp32
  // formed tiles; last columns: the launch that writes it (full scan / lean scan), the input
  // buffer it may alias
  void* AqkT_dO = nullptr;    // [B, H, Tp, D] dtype  A_qk^T dO              aqk_dO
  float* Delta = nullptr;     // [B, H, Tp, D] fp32   Delta = U - W S        forward scan (saved)   U
  void* dDelta = nullptr;     // [B, H, Tp, D] dtype  A_qk^T dO + Kbar S'    inter adjoint          AqkT_dO
  float* Xk = nullptr;        // [B, H, Tp, D] fp32   X_k = Delta S'^T       inter adjoint          Kbar
  float* dgamma_s = nullptr;  // [B, H, NT, D] fp32   e^gamma sum_v S * S'   inter adjoint
  void* Xq = nullptr;         // [B, H, Tp, D] dtype  X_q = dO S^T           inter adj / intra adj  sQ
  void* Xw = nullptr;         // [B, H, Tp, D] dtype  X_w = dDelta S^T       inter adj / intra adj  W
  // intra adjoint. It also writes the pre-norm dq^ / dk^ of a chunk (fp32) over that chunk's
  // rows of Delta / Xk once it has read them (staging for the L2-norm backward).
  float* partials = nullptr;     // [B*NT, H, D+1] fp32  ddt_bias / dA_log partial sums
  uint32_t* counters = nullptr;  // [H + 2 B*H*NT + 1] blocks done per head; the scan's progress per
                                 // (sequence, group); the first level's boundary flags per
                                 // (sequence, group), the affine first level's map blocks
                                 // counted on them too; the two-level scan's block ticket
                                 // (zeroed by the aqk_dO launch)
};
struct WorkspaceBytes {
  size_t tile = 0;      // each dtype [B, H, Tp, D] tile: W, sQ, Qp, Ob; AqkT_dO
  size_t tile_f32 = 0;  // each fp32 [B, H, Tp, D] tile: U, Kbar
  size_t aqk = 0;       // Aqk (dtype elements, [B, H, Tp, C])
  size_t gamma = 0;     // gamma and dgamma_s each
  size_t partials = 0;
  size_t counters = 0;
};
WorkspaceBytes workspace_bytes(const Dims& dims, DType dtype);
// True where `a` runs the two-level backward scan: 0 < scan_group < NT.
bool two_level_scan(const FusedArgs& a);
// The two-level scan's group for B*H sequences of NT chunks of C, head dim D, on `sms` SMs:
// chunks per group, or NT (one level). bf16 while 8 B*H <= sms at D = 64, 16 B*H <= sms at
// D = 128 (the one-block scan leaves most SMs idle), groups of NT / 16 chunks within [2, 8],
// at D = 128 at least NT B*H / 64 up to 32; f32 (not measured) and more sequences: one level.
// Figures: docs/notes-kda.md, "2026-12-06 (night): the two-level backward scan" and "2026-12-07
// (evening): the D128 backward scan's groups".
int scan_group_pick(int64_t bh, int64_t nt, int C, int sms, int D, DType dtype);
// The two-level scan's first level for B*H sequences of NT chunks, head dim D, on `sms` SMs:
// affine at bf16 D = 64 while 32 B*H <= sms, or 16 B*H <= sms from NT = 256 (its group maps do
// about twice the serial first level's work, on the SMs that one leaves idle); else serial (at
// D = 128 the maps' work, eight 16-column tiles a sequence, outweighs the shorter chain).
// scan_group_pick makes its groups hold three states where it picks affine (and they fit below NT). Figures:
// docs/notes-kda.md, "2026-12-07 (late): the affine first level".
ScanFirst scan_first_pick(int64_t bh, int64_t nt, int sms, int D, DType dtype);
// The two-level scan's states fit in a group's rows of the four gradient outputs (4 group C rows
// of D elements: kernels/kda/block_products.h, scan_state_at): the boundary state, and with the
// affine first level its local' and M' besides.
bool scan_states_fit(int D, int C, int group, DType dtype, ScanFirst first);
// Blocks of the two-level backward scan's grid (kernels/kda/inter_adjoint.h,
// backward_scan_item): the first level's (serial: D / 16 a sequence; affine: 4 map blocks a
// sequence and group but the first, and D / 16 chain blocks a sequence), then one a sequence and group.
int64_t bwd_two_level_blocks(const FusedArgs& a);
// V tiles of the forward state scan at head dim D and chunk C (its blocks a sequence: Cfg::NV).
constexpr int forward_scan_tiles(int D, int C) { return D == 128 && C >= 32 ? 4 : D / 16; }
// True where `a` runs the two-level forward scan: 0 < fwd_group < NT.
bool two_level_forward(const FusedArgs& a);
// The two-level forward scan's group for B*H sequences of NT chunks, head dim D, on `sms` SMs:
// chunks per group, or NT (one level). bf16 while 8 B*H <= sms at D = 64 and 16 B*H <= sms at
// D = 128 (the scan's 4 B*H one-level blocks leave most SMs idle; the two-level scan does about
// three times their work on the idle ones), from NT = 64; below NT = 128 groups of 16 chunks at
// B*H <= 4 and 8 above, then NT / 16 within [16, 64]. f32 (not measured): one level. Figures: docs/notes-kda.md,
// "2026-12-07 (late): the two-level forward scan, measured".
int fwd_group_pick(int64_t bh, int64_t nt, int sms, int D, DType dtype);
// Blocks of the two-level forward scan's grid (kernels/kda/scan.h, forward_scan_item): per
// sequence, NV first-level blocks for each group but the last, NV chain blocks, NV full scans a group.
int64_t fwd_two_level_blocks(const FusedArgs& a);
// The inter adjoint's V split for B*H sequences of head dim D on `sms` SMs: 4 while the split
// blocks fill at most a quarter of the SMs (16 * B*H <= sms), and at bf16 D = 128 at most half
// of them (8 * B*H <= sms), else 1: a cluster step is only a little shorter than a single
// block's, so the split pays only while it fills idle SMs; 2 is never picked (the D128 split-2
// program spills). Figures: docs/notes-kda.md, "The figures behind the code's choices".
int inter_adjoint_split(int64_t bh, int sms, int D, DType dtype);
// FusedArgs::lean_scan's choice for B*H sequences on `sms` SMs with the given scan split:
// lean when split > 1 or B*H is at most a share of the SMs that depends on dtype and head
// dim, else full: bf16 8 * B*H <= 3 * sms, f32 D64 4 * B*H <= sms, f32 D128 2 * B*H <= sms.
// The lean form wins while the scan leaves SMs idle for the intra adjoint's extra work, the full form once
// the sequences fill the GPU; the thresholds are where the two cross on the H200 (figures:
// docs/notes-kda.md, "The figures behind the code's choices").
LeanScan lean_scan_pick(int64_t bh, int sms, int split, int D, DType dtype);
size_t trajectory_bytes(const Dims& dims);  // h: B*H*NT*D*D*4
// The chunk length (16, 32 or 64) the fused path runs a forward + backward fastest at, for
// bh = B*H sequences of T tokens, head dim D (64 or 128) and dtype (f32 or bf16): a table
// measured on the H200 (docs/notes-kda.md, "The chunk table"). The engine takes it where a
// caller asks for chunk 0 (auto).
int fused_chunk(int64_t bh, int64_t T, int D, DType dtype);

// Which launches of the backward run: it runs in two parts, so that the caller can free A_qk
// in between (the engine does):
//   aqk_dO    launch 1: AqkT_dO = A_qk^T dO, zeroes the counters. Reads Aqk, dO; writes
//             AqkT_dO and counters only (FusedArgs' gradient pointers may still be null).
//   adjoints  launches 2-3: inter adjoint, intra adjoint. Never reads Aqk (may be null).
//   all       both, in order.
enum class BackwardLaunches { all, aqk_dO, adjoints };

// Throw std::invalid_argument naming the problem (D, C, dtype, null pointers). Forward:
// check_fused_args(a) / check_workspace(ws); backward: pass the launches that will run.
void check_fused_args(const FusedArgs& a);
void check_fused_args(const FusedArgs& a, BackwardLaunches part);
void check_workspace(const ForwardWorkspace& ws);
void check_workspace(const BackwardWorkspace& ws, BackwardLaunches part);
// Throw std::invalid_argument when (D, C, dtype, tensor_cores) is not a compiled line of
// kernels/kda/instances.def (the simt variant without -DLINTRAIN_KDA_SIMT=ON).
void check_compiled(const FusedArgs& a);

// CPU twins (emulated thread blocks; slow: for tests at small shapes).
void fused_forward_cpu(const FusedArgs& a, const ForwardWorkspace& ws);
void fused_backward_cpu(const FusedArgs& a, const BackwardWorkspace& ws, BackwardLaunches part = BackwardLaunches::all);

// CUDA (kernels/cuda/kda.cu and kernels/cuda/kda/; present when LINTRAIN_WITH_CUDA). `stream` is a cudaStream_t.
// Stage scopes "intra", "inter" (forward) and "aqk_dO", "inter_adjoint",
// "intra_adjoint" (backward) name the launches in the launch atlas.
void fused_forward_cuda(const FusedArgs& a, const ForwardWorkspace& ws, void* stream);
void fused_backward_cuda(const FusedArgs& a, const BackwardWorkspace& ws, void* stream,
                         BackwardLaunches part = BackwardLaunches::all);
// FusedArgs::scan_group as the CUDA backward will run it: the argument unless 0; else the
// environment variable LINTRAIN_KDA_SCAN_GROUP (chunks per group, read once per process); else
// scan_group_pick on the current device; NT where the one-level scan runs. A caller that runs
// the backward in two parts passes it to both.
int resolve_scan_group_cuda(const FusedArgs& a);
// FusedArgs::scan_first as the CUDA backward will run it (`a` with scan_group resolved): the
// argument unless pick; else the environment variable LINTRAIN_KDA_SCAN_FIRST (serial |
// affine, read once per process); else scan_first_pick on the current device where the group
// holds its three states, serial where it does not (a group set by hand).
ScanFirst resolve_scan_first_cuda(const FusedArgs& a);
// FusedArgs::fwd_group as the CUDA forward will run it: the argument unless 0; else the
// environment variable LINTRAIN_KDA_FWD_GROUP (chunks per group >= 2, read once per process;
// a value >= NT forces one level); else fwd_group_pick on the current device (tensor cores
// only; NT where the one-level scan runs).
int resolve_fwd_group_cuda(const FusedArgs& a);

}  // namespace lt::kda
