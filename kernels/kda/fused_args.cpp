// KDA fused path, host side shared by the CUDA kernels and their CPU twins: the workspace
// sizes, the argument checks and the launch policy measured on the H200 (kernels/kda.h
// documents each; the figures: docs/notes-kda.md, "The figures behind the code's choices").
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/kda.h"
#include "kernels/kda/instances.h"

namespace lt::kda {

WorkspaceBytes workspace_bytes(const Dims& dm, DType dtype) {
  WorkspaceBytes w;
  w.tile = static_cast<size_t>(dm.B * dm.H * dm.Tp() * dm.D) * dtype_size(dtype);
  w.tile_f32 = static_cast<size_t>(dm.B * dm.H * dm.Tp() * dm.D) * sizeof(float);
  w.aqk = static_cast<size_t>(dm.B * dm.H * dm.Tp() * dm.C) * dtype_size(dtype);
  w.gamma = static_cast<size_t>(dm.B * dm.H * dm.NT() * dm.D) * sizeof(float);
  w.partials = static_cast<size_t>(dm.B * dm.NT() * dm.H * (dm.D + 1)) * sizeof(float);
  w.counters = static_cast<size_t>(dm.H + 2 * dm.B * dm.H * dm.NT() + 1) * sizeof(uint32_t);
  return w;
}

bool two_level_scan(const FusedArgs& a) { return a.scan_group > 0 && a.scan_group < a.dims.NT(); }

namespace {
int scan_states(ScanFirst first) { return first == ScanFirst::affine ? 3 : 1; }
bool scan_states_fit(int D, int C, int group, DType dtype, int states) {
  return static_cast<int64_t>(states) * D * (dtype == DType::f32 ? 1 : 2) <= 4 * static_cast<int64_t>(group) * C;
}
}  // namespace

bool scan_states_fit(int D, int C, int group, DType dtype, ScanFirst first) {
  return scan_states_fit(D, C, group, dtype, scan_states(first));
}

ScanFirst scan_first_pick(int64_t bh, int64_t nt, int sms, int D, DType dtype) {
  if (dtype == DType::f32 || D != 64) return ScanFirst::serial;
  const bool affine = 32 * bh <= sms || (16 * bh <= sms && nt >= 256);
  return affine ? ScanFirst::affine : ScanFirst::serial;
}

int scan_group_pick(int64_t bh, int64_t nt, int C, int sms, int D, DType dtype) {
  if (dtype == DType::f32 || (D == 64 ? 8 : 16) * bh > sms) return static_cast<int>(nt);
  auto group = [&](int states) {
    int g = static_cast<int>(std::clamp<int64_t>(nt / 16, 2, 8));
    // D128 (serial first level): at least NT B*H / 64 chunks, up to 32 (about 64 / B*H groups a
    // sequence: its first level's steps balanced against the second level's)
    if (D == 128) g = std::max(g, static_cast<int>(std::min<int64_t>(nt * bh / 64, 32)));
    while (!scan_states_fit(D, C, g, dtype, states)) g *= 2;
    return g;
  };
  // the affine first level's three states where it is picked and they fit below NT, else one
  int g = group(scan_states(scan_first_pick(bh, nt, sms, D, dtype)));
  if (g >= nt) g = group(1);
  return g < nt ? g : static_cast<int>(nt);
}

int64_t bwd_two_level_blocks(const FusedArgs& a) {
  const int64_t NT = a.dims.NT(), NG = (NT + a.scan_group - 1) / a.scan_group, BH = a.dims.B * a.dims.H;
  const int64_t NV = a.dims.D / 16, NVM = a.dims.D / (a.dims.D == 128 ? 32 : 16);  // StateAdjCfg
  const int64_t first = a.scan_first == ScanFirst::affine ? (NG - 1) * NVM + NV : NV;
  return (first + NG) * BH;
}

bool two_level_forward(const FusedArgs& a) { return a.fwd_group > 0 && a.fwd_group < a.dims.NT(); }

int fwd_group_pick(int64_t bh, int64_t nt, int sms, int D, DType dtype) {
  if (dtype == DType::f32 || (D == 64 ? 8 : 16) * bh > sms || nt < 64) return static_cast<int>(nt);
  if (nt < 128) return bh <= 4 ? 16 : 8;
  return static_cast<int>(std::clamp<int64_t>(nt / 16, 16, 64));
}

int64_t fwd_two_level_blocks(const FusedArgs& a) {
  const int64_t NT = a.dims.NT(), NG = (NT + a.fwd_group - 1) / a.fwd_group, BH = a.dims.B * a.dims.H;
  const int64_t NV = forward_scan_tiles(static_cast<int>(a.dims.D), static_cast<int>(a.dims.C));
  return ((NG - 1) + 1 + NG) * NV * BH;  // first level, chains, full scans
}

int inter_adjoint_split(int64_t bh, int sms, int D, DType dtype) {
  const int64_t share = D == 128 && dtype != DType::f32 ? 8 : 16;
  return share * bh <= sms ? 4 : 1;
}
LeanScan lean_scan_pick(int64_t bh, int sms, int split, int D, DType dtype) {
  if (split > 1) return LeanScan::lean;
  const bool lean = dtype != DType::f32 ? 8 * bh <= 3 * static_cast<int64_t>(sms)
                    : D == 64           ? 4 * bh <= sms
                                        : 2 * bh <= sms;
  return lean ? LeanScan::lean : LeanScan::full;
}

// The fastest chunk per dtype and head dim from the sweep configs/bench-kda-chunks.json (figures:
// docs/notes-kda.md, "The figures behind the code's choices"):
//   bf16 D64     32: the intra adjoint's C^2 D products double from 32 to 64, and 16 doubles
//                the scan steps; also at few sequences, where the two-level backward scan
//                shortens the serial chain (docs/notes-kda.md, "2026-12-06 (night): the two-level
//                backward scan")
//   bf16 D128    32: with the row-ownership chunk programs also at B*H <= 4, where 64 won
//                before (docs/notes-kda.md, "2026-12-07: the row-ownership chunk programs at D = 128")
//   fp32 D64     16
//   fp32 D128    32
// and never longer than the sequence needs: T <= 16 takes 16, T <= 32 at most 32 (the rows
// past T of the one chunk are computed and thrown away).
int fused_chunk([[maybe_unused]] int64_t bh, int64_t T, int D, DType dtype) {  // no entry depends on B*H now
  int c = 32;
  if (dtype == DType::f32 && D == 64) c = 16;
  if (T <= 16) return 16;
  if (T <= 32) return c < 32 ? c : 32;
  return c;
}

size_t trajectory_bytes(const Dims& dm) {
  return static_cast<size_t>(dm.B * dm.H * dm.NT()) * dm.D * dm.D * sizeof(float);
}

namespace {

void check_common(const FusedArgs& a) {
  const Dims& d = a.dims;
  auto fail = [](const std::string& what) { throw std::invalid_argument("kda fused: " + what); };
  if (d.B <= 0 || d.T <= 0 || d.H <= 0) fail("B, T, H must be positive");
  if (d.D != 64 && d.D != 128) fail("head dim D must be 64 or 128, got " + std::to_string(d.D));
  if (d.C != 16 && d.C != 32 && d.C != 64) fail("chunk must be 16, 32 or 64, got " + std::to_string(d.C));
  if (a.dtype != DType::f32 && a.dtype != DType::bf16)
    fail(std::string("dtype must be f32 or bf16, got ") + dtype_name(a.dtype));
  if (a.gate.use_lower_bound && !(a.gate.lower_bound < 0.0f)) fail("lower_bound must be < 0");
  if (!a.q || !a.k || !a.v || !a.f || !a.b || !a.A_log || !a.dt_bias) fail("missing input pointer");
  if (!a.h) fail("missing state trajectory h");
  // the chunk programs load four adjacent columns of an input row (and of dt_bias) at once
  struct Aligned {
    const void* p;
    const char* name;
    size_t bytes;
  };
  const size_t quad = 4 * dtype_size(a.dtype);
  for (const Aligned& x : {Aligned{a.q, "q", quad}, Aligned{a.k, "k", quad}, Aligned{a.v, "v", quad},
                           Aligned{a.f, "f", quad}, Aligned{a.dt_bias, "dt_bias", 16}})
    if (reinterpret_cast<uintptr_t>(x.p) % x.bytes != 0)
      fail(std::string(x.name) + " must be aligned to " + std::to_string(x.bytes) + " bytes");
  if (a.scan_split != 0 && a.scan_split != 1 && a.scan_split != 2 && a.scan_split != 4)
    fail("scan_split must be 0, 1, 2 or 4, got " + std::to_string(a.scan_split));
  if (a.lean_scan != LeanScan::pick && a.lean_scan != LeanScan::full && a.lean_scan != LeanScan::lean)
    fail("lean_scan must be pick (0), full (1) or lean (2), got " + std::to_string(static_cast<int>(a.lean_scan)));
  if (a.lean_scan == LeanScan::full && a.scan_split > 1)
    fail("a split scan is always lean (lean_scan full with scan_split > 1)");
  if (a.fwd_group < 0) fail("fwd_group must be >= 0, got " + std::to_string(a.fwd_group));
  if (a.fwd_group > 0 && a.fwd_group < d.NT()) {
    if (!a.tensor_cores) fail("the two-level forward scan (fwd_group < NT) needs tensor_cores");
    if (a.fwd_group < 2)
      fail(
          "the two-level forward scan keeps a group's transition in its second chunk's state: fwd_group must be >= 2, "
          "got " +
          std::to_string(a.fwd_group));
  }
  if (a.scan_group < 0) fail("scan_group must be >= 0, got " + std::to_string(a.scan_group));
  if (a.scan_group > 0 && a.scan_group < d.NT()) {
    if (!a.tensor_cores) fail("the two-level scan (scan_group < NT) needs tensor_cores");
    if (a.scan_split > 1) fail("the two-level scan (scan_group < NT) runs unsplit (scan_split > 1 given)");
    if (a.lean_scan == LeanScan::full)
      fail("the two-level scan (scan_group < NT) is always lean (lean_scan full given)");
    const bool affine = a.scan_first == ScanFirst::affine;
    if (!scan_states_fit(d.D, d.C, a.scan_group, a.dtype, scan_states(a.scan_first)))
      fail(std::string(affine ? "the affine first level (three states a group)" : "the two-level scan") +
           " needs scan_group * chunk >= " +
           (a.dtype == DType::f32 ? (affine ? "3 D / 4" : "D / 4") : (affine ? "3 D / 2" : "D / 2")) + " (scan_group " +
           std::to_string(a.scan_group) + ", chunk " + std::to_string(d.C) + ", D " + std::to_string(d.D) + ")");
  }
  if (a.scan_first != ScanFirst::pick && a.scan_first != ScanFirst::serial && a.scan_first != ScanFirst::affine)
    fail("scan_first must be pick (0), serial (1) or affine (2), got " +
         std::to_string(static_cast<int>(a.scan_first)));
}

}  // namespace

void check_fused_args(const FusedArgs& a) {
  check_common(a);
  if (!a.o) throw std::invalid_argument("kda fused: missing output o");
}

void check_fused_args(const FusedArgs& a, BackwardLaunches part) {
  check_common(a);
  if (!a.dO) throw std::invalid_argument("kda fused: missing backward input dO");
  if (part != BackwardLaunches::aqk_dO && (!a.dq || !a.dk || !a.dv || !a.df || !a.db || !a.dA_log || !a.ddt_bias))
    throw std::invalid_argument("kda fused: missing gradient pointer (dq, dk, dv, df, db, dA_log or ddt_bias)");
}

void check_workspace(const ForwardWorkspace& ws) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("kda fused: forward workspace " + what); };
  if (!ws.W || !ws.U || !ws.sQ || !ws.Kbar || !ws.Aqk || !ws.gamma)
    fail("saved tile missing (W, U, sQ, Kbar, Aqk or gamma)");
  if (!ws.Qp || !ws.Ob || !ws.counters) fail("forward-only tile missing (Qp, Ob or counters)");
}

void check_workspace(const BackwardWorkspace& ws, BackwardLaunches part) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("kda fused: backward workspace " + what); };
  if (!ws.AqkT_dO || !ws.counters) fail("AqkT_dO or counters missing");
  if (part != BackwardLaunches::adjoints && !ws.Aqk) fail("Aqk (A_qk, read by the aqk_dO launch) missing");
  if (part != BackwardLaunches::aqk_dO && (!ws.W || !ws.sQ || !ws.Kbar || !ws.gamma))
    fail("saved tile missing (W, sQ, Kbar or gamma)");
  if (part != BackwardLaunches::aqk_dO &&
      (!ws.Xw || !ws.Delta || !ws.Xq || !ws.Xk || !ws.dDelta || !ws.dgamma_s || !ws.partials))
    fail("adjoint tile or scratch missing (Xw, Delta, Xq, Xk, dDelta, dgamma_s or partials)");
}

void check_compiled(const FusedArgs& a) {
  if (instance_compiled(static_cast<int>(a.dims.D), static_cast<int>(a.dims.C), a.dtype, a.tensor_cores)) return;
  throw std::invalid_argument(std::string("kda fused: the ") + (a.tensor_cores ? "tensor-core" : "simt") +
                              " variant at D " + std::to_string(a.dims.D) + ", chunk " + std::to_string(a.dims.C) +
                              ", " + dtype_name(a.dtype) + " is not compiled into this build" +
                              (a.tensor_cores ? "" : " (configure with -DLINTRAIN_KDA_SIMT=ON)"));
}

}  // namespace lt::kda
