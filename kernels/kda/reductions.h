// KDA block programs: warp-parallel column scans, row / column reductions over slices, L2 prefetch.
#pragma once
#include "kernels/kda/block_products.h"

namespace lt::kda::KDA_BLOCKS_NS {

// ---- warp-parallel column scans and row / column reductions over slices -----------------
// Column work on a slice [C][LS] (KS = 32 columns) is spread over all warps: a column is
// covered by kLanes = 8 lanes holding kRows = C / 8 consecutive rows each, so a warp covers
// kCols = 4 columns at once and the KS columns take kPasses = 8 warp passes (one per warp at
// 256 threads). The dependent chain is kRows adds and 3 shuffles, where a thread per column
// walking all C rows would be a C-long chain with 7 of 8 warps idle (one warp per column,
// 32 lanes and 4 passes per warp, is slower than both: docs/notes-kda.md, "Measurements
// behind the kernel constants").
template <class G>
struct ColLanes {
  static constexpr int kLanes = 8;               // lanes per column
  static constexpr int kRows = G::C / kLanes;    // consecutive rows per lane
  static constexpr int kCols = 32 / kLanes;      // columns per warp pass
  static constexpr int kPasses = G::KS / kCols;  // warp passes per slice
  static_assert(G::C % kLanes == 0 && G::KS % kCols == 0);
};
// Recursive doubling over the kLanes lanes of a segment (seg = lane % kLanes): returns the
// sum of `tot` over the lanes before this one in scan order (kReverse: the later lanes) and
// leaves the segment's total in tot. Every lane of the warp must call it.
template <int kLanes, bool kReverse, class Blk>
KDA_DEV float segment_prefix(Blk& blk, float& tot, int seg) {
  float pre = 0.0f;
  KDA_UNROLL
  for (int o = 1; o < kLanes; o <<= 1) {
    const float t = blk.shfl_xor(tot, o);
    if (kReverse ? !(seg & o) : (seg & o)) pre += t;  // the partner precedes in scan order
    tot += t;
  }
  return pre;
}
// N row sums of one warp at once (N a power of two, at most 32): v[k] is this lane's partial
// of row k. Returns the full sum (over the 32 lanes) of row `row`, which this lane holds. A
// reduce-scatter: at offset o (16, 8, ...) while more than one row is left, a lane keeps half
// of its rows (the upper half where lane & o) and adds its partner's partials of them; the
// rest is a butterfly on the one row left. So `row` is set by the lane's high bits, and the
// 32 / N lanes that differ only in the low log2(32 / N) bits hold the same row (the one with
// those bits zero may store it). N - 1 + log2(32 / N) shuffles, where a butterfly a row takes
// 5 N. Every sum is formed as the butterfly over xor offsets 16, 8, 4, 2, 1 forms it (own
// value + partner's), so on the GPU the result equals warp_sum (a butterfly) of each row bit for
// bit. Every lane of the warp must call it.
template <int N, class Blk>
KDA_DEV float warp_sum_rows(Blk& blk, float (&v)[N], int lane, int& row) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0);
  row = 0;
  KDA_UNROLL
  for (int o = 16, n = N; o > 0; o >>= 1) {
    if (n > 1) {
      const int half = n / 2;
      const bool up = (lane & o) != 0;
      KDA_UNROLL
      for (int k = 0; k < half; ++k) {
        const float keep = up ? v[k + half] : v[k], send = up ? v[k] : v[k + half];
        v[k] = keep + blk.shfl_xor(send, o);
      }
      if (up) row += half;
      n = half;
    } else {
      v[0] += blk.shfl_xor(v[0], o);
    }
  }
  return v[0];
}
// In place: x[r][c] = sum_{s <= r} x[s][c]; with kToBlockStart, in the same pass sq and sk
// brought to their sub-block's first row into xq and xk (either may be null): x'_r = x_r
// e^{Gamma_r - Gamma_n(r)} with x the gate (Gamma), n(r) the first row of r's sub-block. A lane's
// kRows rows lie in one sub-block, and the lane whose first row is n(r) holds Gamma_n(r), so the
// factor is formed once for both outputs from registers (one shuffle), where row_to_block_start
// loads Gamma_r and Gamma_n(r) and forms it once an output. The same operations on the same values
// as row_to_block_start. No sync.
template <class G, bool kToBlockStart, class Blk>
KDA_DEV void scan_columns(Blk& blk, float* x, const float* sq, const float* sk, float* xq, float* xk) {
  using L = ColLanes<G>;
  static_assert(kSub % L::kRows == 0, "a lane's rows lie in one sub-block");
  const int lane = blk.tid() & 31, seg = lane % L::kLanes;
  for (int p = blk.tid() >> 5; p < L::kPasses; p += G::NTHR / 32) {  // warp-uniform
    const int c = p * L::kCols + lane / L::kLanes, r0 = seg * L::kRows;
    float v[L::kRows], tot = 0.0f;
    KDA_UNROLL
    for (int i = 0; i < L::kRows; ++i) v[i] = tot += x[(r0 + i) * G::LS + c];
    const float pre = segment_prefix<L::kLanes, false>(blk, tot, seg);
    KDA_UNROLL
    for (int i = 0; i < L::kRows; ++i) x[(r0 + i) * G::LS + c] = v[i] += pre;
    if constexpr (kToBlockStart) {
      const int seg0 = ((r0 / kSub) * kSub) / L::kRows;  // the lane of this column holding row n(r0)
      const float g0 = blk.shfl_xor(v[0], seg ^ seg0);
      KDA_UNROLL
      for (int i = 0; i < L::kRows; ++i) {
        const int at = (r0 + i) * G::LS + c;
        const float f = exp2_fast(v[i] - g0);
        if (xq) xq[at] = sq[at] * f;
        if (xk) xk[at] = sk[at] * f;
      }
    }
  }
}
// dst[r] += sum_{c < N} f(r, c) for r < M: 8 lanes per row (N / 8 columns each, strided so a
// row's lanes read consecutive columns), 4 rows per warp pass. f is evaluated at every c < N.
template <int M, int N, int NTHR, class Blk, class F>
KDA_DEV void add_row_sums(Blk& blk, float* dst, F f) {
  constexpr int kLanes = 8, kRowsPerPass = 32 / kLanes;
  static_assert(N % kLanes == 0 && M % kRowsPerPass == 0);
  const int lane = blk.tid() & 31, seg = lane % kLanes;
  for (int p = blk.tid() >> 5; p < M / kRowsPerPass; p += NTHR / 32) {  // warp-uniform
    const int r = p * kRowsPerPass + lane / kLanes;
    float v = 0.0f;
    KDA_UNROLL
    for (int c = seg; c < N; c += kLanes) v += f(r, c);
    segment_prefix<kLanes, false>(blk, v, seg);
    if (seg == 0) dst[r] += v;
  }
}

// Asks L2 for every 128-byte line of the chunk's rows of the arrays a program will read, at
// its start: the loads of each later phase then wait on L2 instead of DRAM.
// Ranges are dealt to consecutive threads, continuing where the previous range stopped.
template <int NTHR>
struct L2Prefetch {
  int next = 0;  // thread that takes the next range's first line
  // rows r < L of a [B,T,H,D] input (row r at in(r, 0), D elements each)
  template <class T, class Blk>
  KDA_DEV void in_rows(Blk& blk, const ChunkPos& cp, const T* src) {
    const int per_row = (cp.D * static_cast<int>(sizeof(T)) + 127) / 128;
    range(blk, cp.L * per_row, [&](int i) {
      return reinterpret_cast<const char*>(src + cp.in_base + (i / per_row) * cp.in_rstride) + 128 * (i % per_row);
    });
  }
  // `bytes` contiguous bytes from p (e.g. the chunk's C x D block of a [B,H,Tp,D] tile)
  template <class Blk>
  KDA_DEV void bytes(Blk& blk, const void* p, int n) {
    range(blk, (n + 127) / 128, [&](int i) { return static_cast<const char*>(p) + 128 * i; });
  }
  template <class T, class Blk>
  KDA_DEV void tile(Blk& blk, const ChunkPos& cp, int C, const void* t) {
    bytes(blk, static_cast<const T*>(t) + cp.ws_base, C * cp.D * static_cast<int>(sizeof(T)));
  }
  template <class Blk, class F>
  KDA_DEV void range(Blk& blk, int n, F addr) {
    for (int i = (blk.tid() - next + NTHR) % NTHR; i < n; i += NTHR) blk.prefetch_l2(addr(i));
    next = (next + n) % NTHR;
  }
};

}  // namespace lt::kda::KDA_BLOCKS_NS
