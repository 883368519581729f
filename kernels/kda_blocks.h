// KDA fused path: every block program at once (the translation units include only the
// programs of their pass). One file a launch, in kernels/kda/:
//   cfg.h             the two executors and their rules, per-configuration constants (Cfg)
//   scalar.h          scalar helpers (exp2, the gate, bf16 pairs, element loads and stores)
//   tiles.h           warp-level tensor-core tiles (TF32 mma fragments)
//   block_products.h  block-level products over shared memory, chunk positions, scan progress
//   reductions.h      column scans, row / column reductions over slices, L2 prefetch
//   chunk_ops.h       the programs' shared building blocks (gates, norms, solve, state products)
//   intra.h           intra          (forward, chunk-parallel)
//   scan.h            inter          (forward state scan)
//   aqk_dO.h          aqk_dO         (backward, first launch)
//   state_adjoint.h   inter adjoint, first level of the two-level scan (S' alone, split over V)
//   inter_adjoint.h   inter adjoint  (backward reverse scan; one block, or a cluster split over V)
//   intra_adjoint.h   intra adjoint  (backward, chunk-parallel)
// (the compiled configurations and their dispatch: kernels/kda/instances.h).
//
// Chunk algorithm (per (b, h), chunk n of C rows r, s; L = valid rows of the chunk):
//   Gamma_r = sum_{s<=r} g_s (chunk-local, fp32; kept in log2 units inside the programs so
//   exp2 is one instruction; derivatives are taken w.r.t. natural Gamma)
//   P(x,y)[r,s] = sum_d x_rd y_sd e^{Gamma_rd - Gamma_sd}
//   A_qk = scale P(q^,k^) (s<=r);  A = diag(beta) P(k^,k^) (s<r);  Tm = (I + A)^{-1}
//   W = Tm diag(beta) K~,  U = Tm diag(beta) V,  K~ = K^ e^{Gamma},  Q~ = Q^ e^{Gamma},
//   Kbar = K^ e^{gamma - Gamma},  gamma = Gamma_last
//   state scan:  Delta = U - W S;  O = scale Q~ S + A_qk Delta;  S <- e^gamma S + Kbar^T Delta
// Safe exponentials (math doc F): pairs (r, s) in the same 16-row sub-block use
// e^{Gamma_r - Gamma_s} elementwise (computed only for s <= r, so <= 1); pairs in
// different sub-blocks factor through the first row n of r's sub-block:
// (x_r e^{Gamma_r - Gamma_n}) . (y_s e^{Gamma_n - Gamma_s}), both factors <= 1. Gates are
// <= 0, so nothing overflows for any gate value and any chunk size.
//
// Launches (grids are 1-D, block index = bh * NT + n or bh * NV + vt):
//   intra      (fwd)  grid NT*B*H   : Gamma, A_qk, Tm -> the ForwardWorkspace tiles W, U,
//                                     Qp = scale Q~ - A_qk W, Kbar, Ob = A_qk U, gamma, and,
//                                     kept for the backward, sQ = scale Q~ and Aqk
//   inter      (fwd)  grid NV*B*H   : per V tile of 16 columns, sequential over chunks:
//                                     h[n] = S; Delta = U - W S (saved over U);
//                                     O = Ob + Qp S; S <- e^gamma S + Kbar^T Delta; or the
//                                     two-level scan
//                                     (FusedArgs::fwd_group): every group's state map at
//                                     once, a chain of one product a group, then every
//                                     group's scan at once (kernels/kda/scan.h)
//   aqk_dO     (bwd)  grid NT*B*H   : AqkT_dO = A_qk^T dO from the saved Aqk (the forward's
//                                     W, Delta, scale Q~, Kbar and gamma are reused as saved:
//                                     the backward recomputes no intra-chunk product)
//   inter_adjoint     grid B*H      : reverse over chunks with S' (dS after the chunk):
//                                     dDelta = A_qk^T dO + Kbar S',
//                                     X_q = dO S^T, X_w = dDelta S^T (full scan),
//                                     X_k = Delta S'^T, dgamma_s = e^gamma sum_v S S',
//                                     S' <- e^gamma S' + scale Q~^T dO - W^T dDelta
//                                     (in place over the saved tiles; no dS trajectory).
//                                     The lean scan (FusedArgs::lean_scan, picked where the
//                                     scan runs on few SMs) forms only the products that
//                                     need S', the intra adjoint the other two
//                     or grid NV*B*H: clusters of NV = 2 or 4 blocks per (b, h) (4 where
//                                     B*H is small: kda.h inter_adjoint_split), each owning
//                                     D/NV state columns (dDelta, S') and D/NV K rows
//                                     (X_k, dgamma_s), exchanging columns through DSMEM
//                                     (inter_adjoint_split_program; FusedArgs::scan_split)
//                     or grid (D/16 + NG)*B*H: the two-level scan (FusedArgs::scan_group):
//                                     D/16 blocks per (b, h) scan S' alone over V tiles of
//                                     16 columns and save it at every group boundary
//                                     (state_adjoint_program), then NG one-block lean scans
//                                     per (b, h), one a group of chunks, start from it
//   intra_adjoint     grid NT*B*H   : everything chunk-local: (lean scan: X_q = dO S^T,
//                                     X_w = dDelta S^T over sQ, W), dA_qk = dO Delta^T, dTm,
//                                     dA = -Tm^T dTm Tm^T, dV, dbeta, the P adjoints, the
//                                     chunk-decay terms, reverse cumsum, gate / L2 / sigmoid
//                                     backward, and dA_log / ddt_bias by a deterministic
//                                     last-block reduction.
#pragma once

#include "kernels/kda/aqk_dO.h"
#include "kernels/kda/chunk_ops.h"
#include "kernels/kda/inter_adjoint.h"
#include "kernels/kda/intra.h"
#include "kernels/kda/intra_adjoint.h"
#include "kernels/kda/scan.h"
