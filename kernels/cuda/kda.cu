// KDA fused CUDA path: the entry points. The __global__ wrappers around the block programs of
// kernels/kda_blocks.h (the CPU twins in kernels/cpu/kda/twin.h run the same programs) and the
// launch sequences are in kernels/cuda/kda/{forward,backward}.cuh, compiled one configuration of
// kernels/kda/instances.def and pass a file.
//
//   forward : intra (grid NT*B*H) -> inter (grid NV*B*H, or the two-level scan's
//             items: kernels/kda/block_products.h, fwd_groups)                      2 launches
//   backward: aqk_dO (NT*B*H) -> inter_adjoint (B*H, or NV*B*H as clusters of NV blocks
//             where B*H leaves SMs idle, or the two-level scan's (D/16 + NG)*B*H)
//             -> intra_adjoint (NT*B*H)                                           3 launches
//             (the forward's W, U, scale Q~, Kbar, A_qk and gamma are saved, not recomputed;
//             the intra adjoint runs beside the scan, each block waiting for its chunk's
//             scan progress: kernels/kda/block_products.h, scan_progress)
// Accumulation: fp32 everywhere (inputs f32 or bf16 are converted on load; outputs and
// input-shaped gradients are rounded once on store). State, trajectory and scratch: fp32.
// Every output and scratch buffer is fully overwritten (no zero-fills); the only counters
// (intra adjoint's last-block reduction, the scan's progress) are zeroed by the aqk_dO kernel.
#include <cuda_runtime.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kda/launch.h"
#include "kernels/kda.h"
#include "kernels/kda/instances.h"

namespace lt::kda {
namespace cuda_launch {

// The split of the inter adjoint: 1 below compute capability 9.0 (no thread-block clusters);
// else FusedArgs::scan_split; else the environment variable LINTRAIN_KDA_SCAN_SPLIT = 1, 2 or 4
// (read once per process; same-binary comparisons in kbench); else chosen from B*H and the SM
// count (inter_adjoint_split).
int scan_split(const FusedArgs& a) {
  int dev = 0, major = 0;
  LT_CUDA_CHECK(cudaGetDevice(&dev));
  LT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 9) return 1;
  if (a.scan_split != 0) return a.scan_split;
  static const int forced = [] {
    const char* e = std::getenv("LINTRAIN_KDA_SCAN_SPLIT");
    const std::string v = e ? e : "";
    if (v.empty()) return 0;
    if (v != "1" && v != "2" && v != "4")
      throw std::invalid_argument("LINTRAIN_KDA_SCAN_SPLIT must be 1, 2 or 4, got '" + v + "'");
    return std::stoi(v);
  }();
  if (forced != 0) return forced;
  return inter_adjoint_split(a.dims.B * a.dims.H, device_sms(), static_cast<int>(a.dims.D), a.dtype);
}

// FusedArgs::lean_scan for a scan split `nv`: lean when nv > 1 (a split scan is always lean);
// else FusedArgs::lean_scan unless pick; else the environment variable LINTRAIN_KDA_LEAN_SCAN
// = 1 (full) or 2 (lean), LeanScan's numbers (read once per process; same-binary comparisons
// in kbench); else chosen from B*H and the SM count (lean_scan_pick).
LeanScan lean_scan(const FusedArgs& a, int nv) {
  if (nv > 1) return LeanScan::lean;
  if (a.lean_scan != LeanScan::pick) return a.lean_scan;
  static const LeanScan forced = [] {
    const char* e = std::getenv("LINTRAIN_KDA_LEAN_SCAN");
    const std::string v = e ? e : "";
    if (v.empty()) return LeanScan::pick;
    if (v != "1" && v != "2") throw std::invalid_argument("LINTRAIN_KDA_LEAN_SCAN must be 1 or 2, got '" + v + "'");
    return static_cast<LeanScan>(std::stoi(v));
  }();
  if (forced != LeanScan::pick) return forced;
  return lean_scan_pick(a.dims.B * a.dims.H, device_sms(), nv, a.dims.D, a.dtype);
}

int device_sms() {
  int dev = 0, sms = 0;
  LT_CUDA_CHECK(cudaGetDevice(&dev));
  LT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

}  // namespace cuda_launch

namespace {
// The environment variable `name` as a chunk count >= lo (a group size), or 0 where it is unset;
// anything else is an error that names it.
int env_chunk_count(const char* name, int lo) {
  const char* e = std::getenv(name);
  const std::string v = e ? e : "";
  if (v.empty()) return 0;
  size_t used = 0;
  int g = 0;
  try {
    g = std::stoi(v, &used);
  } catch (const std::exception&) { used = 0; }
  if (used != v.size() || g < lo)
    throw std::invalid_argument(std::string(name) + " must be a chunk count >= " + std::to_string(lo) + ", got '" + v +
                                "'");
  return g;
}
}  // namespace

int resolve_scan_group_cuda(const FusedArgs& a) {
  const int NT = static_cast<int>(a.dims.NT());
  if (a.scan_group != 0) return a.scan_group;
  if (a.scan_split > 1 || a.lean_scan == LeanScan::full || !a.tensor_cores) return NT;  // asked for a one-level form
  static const int forced = env_chunk_count("LINTRAIN_KDA_SCAN_GROUP", 1);
  if (forced != 0) return forced;
  return scan_group_pick(a.dims.B * a.dims.H, NT, static_cast<int>(a.dims.C), cuda_launch::device_sms(),
                         static_cast<int>(a.dims.D), a.dtype);
}

ScanFirst resolve_scan_first_cuda(const FusedArgs& a) {
  if (a.scan_first != ScanFirst::pick) return a.scan_first;
  static const ScanFirst forced = [] {
    const char* e = std::getenv("LINTRAIN_KDA_SCAN_FIRST");
    const std::string v = e ? e : "";
    if (v.empty()) return ScanFirst::pick;
    if (v != "serial" && v != "affine")
      throw std::invalid_argument("LINTRAIN_KDA_SCAN_FIRST must be serial or affine, got '" + v + "'");
    return v == "affine" ? ScanFirst::affine : ScanFirst::serial;
  }();
  if (forced != ScanFirst::pick) return forced;
  const ScanFirst pick =
      scan_first_pick(a.dims.B * a.dims.H, a.dims.NT(), cuda_launch::device_sms(), static_cast<int>(a.dims.D), a.dtype);
  const bool fits =
      scan_states_fit(static_cast<int>(a.dims.D), static_cast<int>(a.dims.C), a.scan_group, a.dtype, pick);
  return fits ? pick : ScanFirst::serial;
}

int resolve_fwd_group_cuda(const FusedArgs& a) {
  const int NT = static_cast<int>(a.dims.NT());
  if (a.fwd_group != 0) return a.fwd_group;
  if (!a.tensor_cores) return NT;
  static const int forced = env_chunk_count("LINTRAIN_KDA_FWD_GROUP", 2);
  if (forced != 0) return forced;
  return fwd_group_pick(a.dims.B * a.dims.H, NT, cuda_launch::device_sms(), static_cast<int>(a.dims.D), a.dtype);
}

void fused_forward_cuda(const FusedArgs& args, const ForwardWorkspace& ws, void* stream) {
  FusedArgs a = args;
  a.fwd_group = resolve_fwd_group_cuda(args);
  check_fused_args(a);
  check_workspace(ws);
  check_compiled(a);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  dispatch_instance(a.dims.D, a.dims.C, a.dtype, a.tensor_cores,
                    [&]<int D, int C, class T, bool kTC>() { cuda_launch::forward<D, C, T, kTC>(a, ws, s); });
}

void fused_backward_cuda(const FusedArgs& args, const BackwardWorkspace& ws, void* stream, BackwardLaunches part) {
  FusedArgs a = args;
  a.scan_group = resolve_scan_group_cuda(args);
  a.scan_first = resolve_scan_first_cuda(a);
  check_fused_args(a, part);
  check_workspace(ws, part);
  check_compiled(a);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  dispatch_instance(a.dims.D, a.dims.C, a.dtype, a.tensor_cores,
                    [&]<int D, int C, class T, bool kTC>() { cuda_launch::backward<D, C, T, kTC>(a, ws, s, part); });
}

}  // namespace lt::kda
