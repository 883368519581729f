// KDA fused path: the executor contract of the block programs, the namespaces and macros of the two
// executors, and the per-configuration constants (Cfg). The programs: kernels/kda_blocks.h; what
// they share, by job: cfg.h (this), scalar.h, tiles.h, block_products.h, reductions.h, chunk_ops.h.
// One definition serves two executors:
//   kernels/cuda/kda/     each program is the body of a __global__ kernel (Blk = CUDA block)
//   kernels/cpu/kda.cpp   the CPU twin runs the same program on an emulated block: NTHR fibers
//                         (kernels/cpu/kda/fibers.h), sync() = a fiber barrier, warp_sum over 32 lanes.
// So the twins test the kernels' own index arithmetic, masking and barriers without a GPU.
//
// A program sees: FusedArgs and its pass's workspace (ForwardWorkspace / BackwardWorkspace),
// a Blk, its block coordinates and a float* to its shared memory. Blk provides: tid(); sync()
// (block barrier); warp_sum(v) (sum over the 32 lanes, every lane gets it); shfl_xor(v, mask)
// (the value of lane ^ mask); fence() (device-scope fence of this thread's writes);
// arrive(counter) (atomic increment, returns the old value); acquire() (fence before reading
// other blocks' published data); load_cg(p) (load bypassing L1); prefetch_l2(p) (a hint: fetch
// p's line into L2; no-op on the CPU); mma_tf32 (one warp-wide m16n8k8 product); mma_bf16,
// frag_a, frag_b, frag_b_t (m16n8k16 bf16 products and their fragments from bf16 tiles: tiles.h);
// copy16_async(dst, src) (4 floats global -> shared, both 16-byte aligned: landed once this
// thread's wait_copies() returns, visible to the block after a later sync(); at once on the CPU).
// The split inter adjoint's Blk (a block of a thread-block cluster) also provides
// cluster_sync() and peer(p, rank) (see inter_adjoint_split_program).
// Rules that keep both executors equivalent: every sync(), warp_sum() and shfl_xor() is
// reached by all threads (the warp ones: all 32 lanes); shared memory is carved by byte counts below;
// global memory written by one block is read by another only across launches (or after
// arrive()/acquire() in the intra adjoint's last-block reduction).
#pragma once
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "kernels/half.h"
#include "kernels/kda.h"
#if defined(__CUDACC__)
#include "kernels/cuda/mma.cuh"  // bf16_bits_rn, pack_bf16x2_rn
#endif

// The CUDA and the CPU translation units both instantiate these programs. nvcc's host pass
// emits host stubs for __device__ functions under their own names, which would collide
// with the CPU twins' inline definitions at link time; so each side gets its namespace.
#if defined(__CUDACC__)
#define KDA_BLOCKS_NS blocks_dev
#define KDA_DEV __device__ __forceinline__
#define KDA_UNROLL _Pragma("unroll")
#define KDA_UNROLL_N(n) _Pragma("unroll 8")  // only n = 8 is used
#else
#define KDA_BLOCKS_NS blocks
#define KDA_DEV inline
#define KDA_UNROLL
#define KDA_UNROLL_N(n)
#endif

namespace lt::kda::KDA_BLOCKS_NS {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr int kSub = 16;  // sub-block rows of the safe factorisation and of the solve

// ---- per-configuration constants --------------------------------------------------------
template <int D_, int C_, int NT_ = 256>
struct Cfg {
  static constexpr int D = D_;         // head dim (K = V = D)
  static constexpr int C = C_;         // chunk length
  static constexpr int KS = 32;        // column slice of the chunk-parallel programs
  static constexpr int NKS = D / KS;   // slices per row
  static constexpr int NB = C / kSub;  // sub-blocks per chunk
  static constexpr int LS = KS + 1;    // slice row stride (odd: conflict-free columns)
  static constexpr int LC = C + 4;     // C x C row stride: 4 mod 32 makes the mma A-fragment
                                       // reads (g, t) of C x C tiles conflict-free (odd: up
                                       // to 4-way) and the transposed ones (t, g) 2-way
  static constexpr int LD = D + 1;     // D-wide row stride
  static constexpr int NTHR = NT_;     // threads of the chunk-parallel programs
  static constexpr int SLICE = C * LS;
  static constexpr int CC = C * LC;
  // inter (forward scan): V tiles of BV columns, NTHR_I threads. Not narrower: every block
  // loads the chunk's full C x D W / Qp / Kbar tiles, so more V tiles mean more per-chunk
  // loads (BV = 8 is slower: docs/notes-kda.md, "Measurements behind the kernel constants").
  // At D = 128, C = 64 the 16-column tile (128 threads) keeps 132 KB of shared memory a block
  // (one block an SM: the 8 V tiles of 32 heads are two waves of the whole sequential scan)
  // and 208 prefetch floats a thread (over the 128 of the register prefetch, so each chunk's
  // tiles load on the critical path); 32 columns on 256 threads halve the blocks and the
  // per-thread loads (docs/notes-kda.md, "2026-12-01: the D128 chunk programs"). At D = 128,
  // C = 32 (the chunk the engine picks at D = 128) the wide tile halves the per-chunk tile
  // loads and the A-fragment reads an SM makes
  // (docs/notes-kda.md, "2026-12-02: the chunk table").
  static constexpr bool kWideInter = D_ == 128 && C_ >= 32;
  static constexpr int BV = kWideInter ? 32 : 16;
  static constexpr int NV = D / BV;
  static_assert(NV == forward_scan_tiles(D_, C_), "kernels/kda.h names the forward scan's V tiles");
  static constexpr int LDA = D + 4;        // row stride of D-wide tiles read as mma A operands:
                                           // 4 mod 32 makes the (g, t) fragment pattern conflict-free
  static constexpr int LBV = BV + 8;       // (BV + 8) t + g = 8 t + g (mod 32), t < 4, g < 8: the
                                           // (k = t, n = g) B-fragment pattern is conflict-free
  static constexpr int LBV2 = 2 * BV + 8;  // the same for the two-level scan's 2 BV state columns
  static constexpr int NTHR_I = kWideInter ? 256 : 128;
  // inter adjoint: full V per block (one block per (b, h): 96 blocks at B8 H12, one per SM),
  // row blocks of RB rows, TPW adjacent 16x8 tiles of the row-block products per warp. At
  // D = 64 and C >= 32 the row block is 32 rows, so 16 warps share each chunk's work (8 warps
  // leave the SM's schedulers idle). At D = 128 a warp takes two tiles (8 warps): every A
  // fragment it loads then serves two mma and its S' tiles are one whole row of tiles, so a
  // step loads a third fewer shared-memory operands, and the cap of 255 registers (not 128 at
  // 512 threads, which spilled) holds the 64 S' accumulators (docs/notes-kda.md, "2026-12-01:
  // the D128 chunk programs").
  static constexpr int RB = (D == 64 && C >= 32) ? 2 * kSub : kSub;
  static constexpr int TPW = D == 128 ? 2 : 1;
  static constexpr int NTHR_A = (RB / 16) * (D / 8) / TPW * 32;  // S' accumulator: D*D/NTHR_A registers
  static_assert(D % KS == 0 && C % kSub == 0 && NTHR % 32 == 0);
  static_assert((C * KS) % (2 * NTHR) == 0, "slice loops (column pairs) are uniform over threads");
  static_assert((C * D) % NTHR == 0 && (C * C) % NTHR == 0);
  static_assert((C * BV) % NTHR_I == 0 && (D * BV) % NTHR_I == 0 && NTHR_I % BV == 0);
  static_assert((D * D) % NTHR_A == 0 && (RB * D) % (2 * NTHR_A) == 0);
  static_assert((C * D) % (2 * NTHR_I) == 0 && (C * BV) % (2 * NTHR_I) == 0, "scan loads: column pairs");

  // shared memory, in floats
  static constexpr int kIntraFloats = 3 * CC + kSub * LC + 11 * C + 6 * SLICE;
  // The chunk programs in row ownership (kernels/kda/intra_rows.h, intra_adjoint_rows.h) at
  // C <= 32: TPR = D / 8 threads a row, each holding 8 of the row's columns in registers from the
  // loads to the stores, so the gates, scores and elementwise tiles take no shared-memory round
  // trip a phase (D = 128: 16 threads a row, the same registers a thread as at D = 64).
  // Forward shared memory: Pq, Pk, Tm; Z; five [C][LR] tiles; three [C - 16][LR] tiles of the
  // off-diagonal scores; the warps' gate totals; beta; the segment offsets; the warps' start counts.
  static constexpr bool kIntraRows = C_ <= 32;
  static constexpr int TPR = D_ / 8;
  static constexpr int NTHR_R = C_ * TPR;
  static constexpr int NW_R = NTHR_R / 32;
  static constexpr int LR = D_ + 4;  // 16-byte rows; 4 mod 32: the mma fragment reads are conflict-free
  static constexpr int kIntraRowsFloats =
      3 * CC + kSub * LC + 5 * C * LR + 3 * (C - kSub) * LR + NW_R * D + 2 * C + NW_R;
  // The intra adjoint in row ownership, same rows and threads: Pk, Tm, dT, dQ; Gamma, k^, q^ and
  // five operand tiles [C][LR]; two warp-partial arrays; beta; the segment offsets; the warps'
  // start counts; the warp sums.
  static constexpr int kIntraAdjRowsFloats = 4 * CC + 8 * C * LR + 2 * NW_R * D + 2 * C + 2 * NW_R + 1;
  static constexpr int kAqkFloats = CC + SLICE;  // aqk_dO: A_qk and a dO slice
  static constexpr int kInterFloats = 3 * C * LDA + 3 * C * LBV + D * LBV + D;
  // the two-level forward scan (kernels/kda/scan.h): its first level (ScanRole::group_map, the
  // inter layout with Delta and S 2 BV columns wide) and its chain (M_g and two state tiles)
  static constexpr int kGroupMapFloats = 3 * C * LDA + 2 * C * LBV + C * LBV2 + D * LBV2 + D;
  static constexpr int kChainFloats = D * LDA + 2 * D * LBV;
  static constexpr int kFwdTwoLevelMax = kInterFloats > kGroupMapFloats ? kInterFloats : kGroupMapFloats;
  static constexpr int kFwdTwoLevelFloats = kFwdTwoLevelMax > kChainFloats ? kFwdTwoLevelMax : kChainFloats;
  static constexpr int kAdjFloats = 2 * D * LDA + 6 * RB * LDA + D;
  // The slice intra adjoint runs at C = 64 only, one block per SM (its shared memory): 512
  // threads hide more latency there (docs/notes-kda.md, "Measurements behind the kernel
  // constants"). The 256 of other chunks only keep the unused configurations well-formed.
  using Adj = Cfg<D_, C_, C_ == 64 ? 512 : 256>;
  // Blocks per SM the slice intra adjoint is compiled for. It runs at C = 64 only (C <= 32 runs
  // the row programs), one 512-thread block an SM; its 3-block cap at C = 32 (history:
  // docs/notes-kda.md, "The D128 intra adjoint at three blocks an SM") went with the row programs.
  static constexpr int kIntraAdjMinBlocks = 1;
  static constexpr int kIntraAdjFloats = 5 * CC + 14 * C + 12 * SLICE + D + KS + NTHR / 32 + 4;
};

}  // namespace lt::kda::KDA_BLOCKS_NS
