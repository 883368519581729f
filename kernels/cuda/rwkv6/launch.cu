// RWKV6 chunked forward and backward on CUDA. Math, shapes and accumulation rules:
// kernels/rwkv6.h (top comment); CPU twins of every kernel: kernels/cpu/rwkv6.cpp.
//
// Launches
//   forward   rwkv6_state_scan (z=0: h[n], ht)  |  rwkv6_fwd_output (o)                  2
//   backward  rwkv6_state_scan (z=0: h again, z=1: dh reverse; both in one grid)
//             | rwkv6_bwd_chunk<all>                        | rwkv6_du_reduce         3
//   fallback  rwkv6_state_scan | rwkv6_bwd_chunk<intra> (fp32 dq'/dk' intra to scratch)
//             | rwkv6_bwd_chunk<inter> (reads them back) | rwkv6_du_reduce               4
//
// Two kernel families with the same launches and grids: the tensor-core kernels (namespace
// tck: bf16 at chunk 32 / 64; mma.m16n8k16, Variant::tensor_core; rwkv6/tc_common.cuh) and the
// SIMT fp32 kernels (fp32 inputs, bf16 at chunk 16, or LINTRAIN_RWKV6_KERNELS=simt; tiling in
// rwkv6/common.cuh).
//
// This file: the launch sequences (forward_seq / backward_seq, each launch under its
// StageScope) over either family (SimtKernels / TensorCoreKernels), the choice of the family,
// and the entry points of kernels/rwkv6.h. The kernels, one file per stage:
//   rwkv6/state_scan.cu         rwkv6_state_scan, rwkv6_state_scan_tc
//   rwkv6/forward_output.cu     rwkv6_fwd_output, rwkv6_fwd_output_tc
//   rwkv6/backward_chunk.cu     rwkv6_bwd_chunk<part>, rwkv6_du_reduce
//   rwkv6/backward_chunk_tc.cu  rwkv6_bwd_chunk_tc<part>
// and what they share: rwkv6/common.cuh (SIMT tiling and helpers, the launchers'
// declarations), rwkv6/tc_common.cuh (tensor-core tiles and helpers).
#include <cuda_runtime.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda/rwkv6/common.cuh"
#include "kernels/launch.h"
#include "kernels/rwkv6.h"

namespace lt::rwkv6 {
namespace {

// State-scan tile width: 64 x 64 tiles, except D = 64 where 32 x 32 tiles give 4x the CTAs
// (B*H alone is below the SM count at the benchmark shapes; docs/notes-rwkv6.md).
bool scan_tile_32(int64_t D) { return D == 64; }

// The two kernel families as the launch sequences below see them: scan(a, nz, z_offset, s),
// output(a, s), chunk<part>(a, s), one launch each.
template <class T, int C>
struct SimtKernels {
  static void scan(const FusedArgs& a, int nz, int z_offset, cudaStream_t stream) {
    if (scan_tile_32(a.dims.D)) launch_scan<T, C, 32>(a, nz, z_offset, stream);
    else launch_scan<T, C, 64>(a, nz, z_offset, stream);
  }
  static void output(const FusedArgs& a, cudaStream_t stream) { launch_fwd_output<T, C>(a, stream); }
  template <ChunkBwdTerms kPart>
  static void chunk(const FusedArgs& a, cudaStream_t stream) {
    launch_bwd_chunk<T, C, kPart>(a, stream);
  }
};
template <int C>  // bf16, chunk 32 / 64
struct TensorCoreKernels {
  static void scan(const FusedArgs& a, int nz, int z_offset, cudaStream_t stream) {
    launch_scan_tc<C>(a, nz, z_offset, stream);
  }
  static void output(const FusedArgs& a, cudaStream_t stream) { launch_fwd_output_tc<C>(a, stream); }
  template <ChunkBwdTerms kPart>
  static void chunk(const FusedArgs& a, cudaStream_t stream) {
    launch_bwd_chunk_tc<C, kPart>(a, stream);
  }
};

template <class K>
void forward_seq(const FusedArgs& a, cudaStream_t stream) {
  {
    StageScope s("state_scan");
    K::scan(a, 1, 0, stream);
  }
  StageScope s("output");
  K::output(a, stream);
}

template <class K>
void backward_seq(const FusedArgs& a0, BwdImpl impl, bool h_is_valid, cudaStream_t stream) {
  FusedArgs a = a0;
  a.ht = nullptr;  // the recomputed forward scan must not touch the forward's outputs
  {
    StageScope s("scans");
    K::scan(a, h_is_valid ? 1 : 2, h_is_valid ? 1 : 0, stream);
  }
  if (impl == BwdImpl::fused) {
    StageScope s("chunk_fused");
    K::template chunk<ChunkBwdTerms::all>(a, stream);
  } else {
    {
      StageScope s("chunk_intra");
      K::template chunk<ChunkBwdTerms::intra>(a, stream);
    }
    StageScope s("chunk_inter");
    K::template chunk<ChunkBwdTerms::inter>(a, stream);
  }
  StageScope s("du_reduce");
  launch_du_reduce(a, stream);
}

// Environment variable LINTRAIN_RWKV6_KERNELS, read once per process:
//   simt   the SIMT fp32 kernels for bf16 too (same-run comparisons with the tensor-core
//          kernels; kbench rwkv6 reports which family ran);
//   unset or anything else: the default choice (tensor cores for bf16 at chunk 32 / 64).
bool simt_forced() {
  static const bool forced = [] {
    const char* e = std::getenv("LINTRAIN_RWKV6_KERNELS");
    return e && std::string(e) == "simt";
  }();
  return forced;
}

template <class T>
void forward_dispatch(const FusedArgs& a, cudaStream_t s) {
  switch (a.dims.C) {
    case 16: return forward_seq<SimtKernels<T, 16>>(a, s);
    case 32: return forward_seq<SimtKernels<T, 32>>(a, s);
    default: return forward_seq<SimtKernels<T, 64>>(a, s);
  }
}
template <class T>
void backward_dispatch(const FusedArgs& a, BwdImpl impl, bool hv, cudaStream_t s) {
  switch (a.dims.C) {
    case 16: return backward_seq<SimtKernels<T, 16>>(a, impl, hv, s);
    case 32: return backward_seq<SimtKernels<T, 32>>(a, impl, hv, s);
    default: return backward_seq<SimtKernels<T, 64>>(a, impl, hv, s);
  }
}

}  // namespace

size_t cuda_scratch_bytes_forward(const Dims& d) { return static_cast<size_t>(d.trajectory_numel()) * sizeof(float); }

size_t cuda_scratch_bytes_backward(const Dims& d, BwdImpl impl) {
  size_t bytes = 2 * static_cast<size_t>(d.trajectory_numel()) * sizeof(float) +
                 static_cast<size_t>(du_part_numel(d)) * sizeof(float);
  if (impl == BwdImpl::fallback) bytes += 2 * static_cast<size_t>(d.token_numel()) * sizeof(float);
  return bytes;
}

namespace {

void check_args(const FusedArgs& a, bool backward, BwdImpl impl) {
  const Dims& d = a.dims;
  auto fail = [](const std::string& why) { throw std::invalid_argument("rwkv6 cuda: " + why); };
  if (d.B < 1 || d.T < 1 || d.H < 1) fail("B, T, H must be >= 1");
  if (d.D < 64 || d.D % 64 != 0) fail("D must be a multiple of 64, got " + std::to_string(d.D));
  if (d.C != 16 && d.C != 32 && d.C != 64) fail("chunk must be 16, 32 or 64");
  if (a.dtype != DType::f32 && a.dtype != DType::bf16) fail("dtype must be f32 or bf16");
  if (d.B * d.H > 65535 || d.NT() > 65535) fail("B*H and T/chunk must be <= 65535");
  if (!a.r || !a.k || !a.v || !a.w || !a.u || !a.h) fail("r, k, v, w, u and the state scratch h are required");
  if (!backward && !a.o) fail("o is required");
  if (backward) {
    if (!a.dO || !a.dr || !a.dk || !a.dv || !a.dw || !a.du || !a.dh || !a.du_part)
      fail("dO, dr, dk, dv, dw, du and the scratch dh, du_part are required");
    if (impl == BwdImpl::fallback && (!a.dq_tmp || !a.dk_tmp)) fail("the fallback needs dq_tmp and dk_tmp");
  }
}

// The kernels read FusedArgs::scale as it is: 0 (D^-1/2) is resolved here, on the host.
FusedArgs with_scale_resolved(const FusedArgs& a) {
  FusedArgs r = a;
  r.scale = mixer::resolved_scale(a.scale, a.dims.D);
  return r;
}

}  // namespace

void check_fused_args(const FusedArgs& a) { check_args(a, false, BwdImpl::fused); }
void check_fused_args(const FusedArgs& a, BwdImpl impl) { check_args(a, true, impl); }

bool cuda_uses_tensor_cores(const Dims& d, DType dtype) {
  return dtype == DType::bf16 && (d.C == 32 || d.C == 64) && !simt_forced();
}

void cuda_forward(const FusedArgs& args, void* stream) {
  check_fused_args(args);
  const FusedArgs a = with_scale_resolved(args);
  auto s = static_cast<cudaStream_t>(stream);
  if (cuda_uses_tensor_cores(a.dims, a.dtype)) {
    if (a.dims.C == 64) forward_seq<TensorCoreKernels<64>>(a, s);
    else forward_seq<TensorCoreKernels<32>>(a, s);
  } else if (a.dtype == DType::bf16) forward_dispatch<bfloat16>(a, s);
  else forward_dispatch<float>(a, s);
}

void cuda_backward(const FusedArgs& args, BwdImpl impl, bool h_is_valid, void* stream) {
  check_fused_args(args, impl);
  const FusedArgs a = with_scale_resolved(args);
  auto s = static_cast<cudaStream_t>(stream);
  if (cuda_uses_tensor_cores(a.dims, a.dtype)) {
    if (a.dims.C == 64) backward_seq<TensorCoreKernels<64>>(a, impl, h_is_valid, s);
    else backward_seq<TensorCoreKernels<32>>(a, impl, h_is_valid, s);
  } else if (a.dtype == DType::bf16) backward_dispatch<bfloat16>(a, impl, h_is_valid, s);
  else backward_dispatch<float>(a, impl, h_is_valid, s);
}

}  // namespace lt::rwkv6
