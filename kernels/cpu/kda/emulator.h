// The CPU executor of the KDA block programs (kernels/kda/cfg.h states the contract
// a Blk fulfils): an emulated thread block of NTHR fibers (fibers.h), warps of 32 emulated lanes,
// tensor-core products computed from gathered fragments, and grids run block after block
// (clusters: their blocks at once) with NaN-filled shared memory.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/kda/fibers.h"
#include "kernels/half.h"

namespace lt::kda::emu {

// An emulated CUDA thread block: NTHR fibers run the same block program;
// sync() is a FiberBarrier over all of them, warp_sum() exchanges through a per-warp
// buffer between two per-warp barriers (every lane sums the 32 values in lane order).
struct WarpExchange {
  static constexpr int kSlot = 10;  // floats per lane: mma a[4], b[2], c[4]
  explicit WarpExchange(int nwarps) : vals(static_cast<size_t>(nwarps) * 32 * kSlot) {
    for (int w = 0; w < nwarps; ++w) bars.push_back(std::make_unique<FiberBarrier>(32));
  }
  std::vector<float> vals;
  std::vector<std::unique_ptr<FiberBarrier>> bars;
};

class EmuBlock {
 public:
  EmuBlock(int tid, FiberBarrier* bar, WarpExchange* wx) : tid_(tid), bar_(bar), wx_(wx) {}
  // A block of a cluster: cluster_bar spans all the cluster's threads; smem_bases[r] is the
  // shared memory of the cluster's block r (this block is `rank`).
  EmuBlock(int tid, FiberBarrier* bar, WarpExchange* wx, FiberBarrier* cluster_bar, float* const* smem_bases, int rank)
      : tid_(tid), bar_(bar), wx_(wx), cluster_bar_(cluster_bar), smem_bases_(smem_bases), rank_(rank) {}
  int tid() const { return tid_; }
  void sync() { bar_->arrive_and_wait(); }
  void cluster_sync() { cluster_bar_->arrive_and_wait(); }
  float* peer(float* p, int rank) { return smem_bases_[rank] + (p - smem_bases_[rank_]); }
  float warp_sum(float v) {
    const int w = tid_ / 32;
    float* x = &wx_->vals[static_cast<size_t>(w) * 32 * WarpExchange::kSlot];
    x[(tid_ % 32) * WarpExchange::kSlot] = v;
    wx_->bars[w]->arrive_and_wait();
    float s = 0.0f;
    for (int l = 0; l < 32; ++l) s += x[l * WarpExchange::kSlot];
    wx_->bars[w]->arrive_and_wait();
    return s;
  }
  // __shfl_xor_sync over the full warp: every lane gets the value of lane ^ mask.
  float shfl_xor(float v, int mask) {
    const int w = tid_ / 32, lane = tid_ % 32;
    float* x = &wx_->vals[static_cast<size_t>(w) * 32 * WarpExchange::kSlot];
    x[lane * WarpExchange::kSlot] = v;
    wx_->bars[w]->arrive_and_wait();
    const float got = x[(lane ^ mask) * WarpExchange::kSlot];
    wx_->bars[w]->arrive_and_wait();
    return got;
  }
  // mma.sync.m16n8k8 tf32 of the warp: every lane deposits its fragments, then computes
  // its own four accumulator elements from the gathered A (16x8) and B (8x8).
  void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    const int w = tid_ / 32, lane = tid_ % 32;
    constexpr int S = WarpExchange::kSlot;
    float* x = &wx_->vals[static_cast<size_t>(w) * 32 * S];
    // The tensor core reads the TF32 part of each operand: the low 13 bits are ignored.
    constexpr uint32_t kTf32 = 0xffffe000u;
    for (int i = 0; i < 4; ++i) x[lane * S + i] = bits_float(a[i] & kTf32);
    x[lane * S + 4] = bits_float(b[0] & kTf32);
    x[lane * S + 5] = bits_float(b[1] & kTf32);
    wx_->bars[w]->arrive_and_wait();
    float A[16][8], Bm[8][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      A[g][t] = x[l * S + 0];
      A[g + 8][t] = x[l * S + 1];
      A[g][t + 4] = x[l * S + 2];
      A[g + 8][t + 4] = x[l * S + 3];
      Bm[t][g] = x[l * S + 4];
      Bm[t + 4][g] = x[l * S + 5];
    }
    wx_->bars[w]->arrive_and_wait();
    accumulate(d, lane, A, Bm);
  }
  // mma.sync.m16n8k16 bf16 of the warp: each b32 fragment register holds two bf16 (low half
  // first); the fragments are gathered as mma_tf32's, the products summed in fp32 in k order.
  void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    const int w = tid_ / 32, lane = tid_ % 32;
    constexpr int S = WarpExchange::kSlot;
    float* x = &wx_->vals[static_cast<size_t>(w) * 32 * S];
    std::memcpy(x + lane * S, a, sizeof a);  // the bits, moved as they are
    std::memcpy(x + lane * S + 4, b, sizeof b);
    wx_->bars[w]->arrive_and_wait();
    float A[16][16], Bm[16][8];
    auto lo = [](uint32_t u) { return bits_float(u << 16); };
    auto hi = [](uint32_t u) { return bits_float(u & 0xffff0000u); };
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      uint32_t f[6];
      std::memcpy(f, x + l * S, sizeof f);
      const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
      for (int i = 0; i < 4; ++i) {
        A[rows[i]][cols[i]] = lo(f[i]);
        A[rows[i]][cols[i] + 1] = hi(f[i]);
      }
      Bm[2 * t][g] = lo(f[4]);
      Bm[2 * t + 1][g] = hi(f[4]);
      Bm[2 * t + 8][g] = lo(f[5]);
      Bm[2 * t + 9][g] = hi(f[5]);
    }
    wx_->bars[w]->arrive_and_wait();
    accumulate(d, lane, A, Bm);
  }
  // The fragments ldmatrix gives lane (g, t) of a row-major bf16 tile (kernels/kda/tiles.h):
  // A 16 x 16 at (m0, k0); B 16 x 8 at (k0, n0), stored N x K.
  void frag_a(uint32_t (&a)[4], const uint16_t* tile, int ld, int m0, int k0) const {
    const int lane = tid_ % 32, g = lane >> 2, t = lane & 3;
    a[0] = pair(tile, ld, m0 + g, k0 + 2 * t);
    a[1] = pair(tile, ld, m0 + g + 8, k0 + 2 * t);
    a[2] = pair(tile, ld, m0 + g, k0 + 2 * t + 8);
    a[3] = pair(tile, ld, m0 + g + 8, k0 + 2 * t + 8);
  }
  // A 16 x 16 at (m0, k0), stored K x M (ldmatrix .trans)
  void frag_a_t(uint32_t (&a)[4], const uint16_t* tile, int ld, int m0, int k0) const {
    const int lane = tid_ % 32, g = lane >> 2, t = lane & 3;
    a[0] = column_pair(tile, ld, k0 + 2 * t, m0 + g);
    a[1] = column_pair(tile, ld, k0 + 2 * t, m0 + g + 8);
    a[2] = column_pair(tile, ld, k0 + 2 * t + 8, m0 + g);
    a[3] = column_pair(tile, ld, k0 + 2 * t + 8, m0 + g + 8);
  }
  void frag_b(uint32_t (&b)[2], const uint16_t* tile, int ld, int k0, int n0) const {
    const int lane = tid_ % 32, g = lane >> 2, t = lane & 3;
    b[0] = pair(tile, ld, n0 + g, k0 + 2 * t);
    b[1] = pair(tile, ld, n0 + g, k0 + 2 * t + 8);
  }
  // B 16 x 8 at (k0, n0), stored K x N (ldmatrix .trans)
  void frag_b_t(uint32_t (&b)[2], const uint16_t* tile, int ld, int k0, int n0) const {
    const int lane = tid_ % 32, g = lane >> 2, t = lane & 3;
    b[0] = column_pair(tile, ld, k0 + 2 * t, n0 + g);
    b[1] = column_pair(tile, ld, k0 + 2 * t + 8, n0 + g);
  }
  void fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
  uint32_t arrive(uint32_t* counter) { return std::atomic_ref<uint32_t>(*counter).fetch_add(1); }
  void acquire() { std::atomic_thread_fence(std::memory_order_seq_cst); }
  float load_cg(const float* p) { return *p; }
  // Scan progress: the twin runs the scan's blocks before the intra adjoint's, so a wait that
  // finds the count short is a bug in the count, not a race.
  void publish(uint32_t* counter) { std::atomic_ref<uint32_t>(*counter).fetch_add(1, std::memory_order_release); }
  void wait_progress(const uint32_t* counter, uint32_t target) {
    const uint32_t v = std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(counter)).load(std::memory_order_acquire);
    if (v < target)
      throw std::logic_error("kda twin: scan progress " + std::to_string(v) + " short of " + std::to_string(target));
  }
  void allow_dependents() {}  // grids run one after the other
  void wait_prior_grid() {}
  void prefetch_l2(const void*) {}  // a cache hint: nothing to emulate
  void copy16_async(float* dst, const float* src) { std::memcpy(dst, src, 4 * sizeof(float)); }  // lands at once
  void wait_copies() {}

 private:
  // d += this lane's four C-fragment elements of A (16 x K) B (K x 8), summed in k order
  template <int K>
  static void accumulate(float (&d)[4], int lane, const float (&A)[16][K], const float (&Bm)[K][8]) {
    const int g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; ++e) {
      const int r = g + ((e & 2) ? 8 : 0), c = 2 * t + (e & 1);
      float s = 0.0f;
      for (int k = 0; k < K; ++k) s += A[r][k] * Bm[k][c];
      d[e] += s;
    }
  }
  // elements (r, c) and (r, c + 1) of a bf16 tile as one b32, (r, c) in the low half
  static uint32_t pair(const uint16_t* tile, int ld, int r, int c) {
    return static_cast<uint32_t>(tile[r * ld + c]) | (static_cast<uint32_t>(tile[r * ld + c + 1]) << 16);
  }
  // elements (r, c) and (r + 1, c) as one b32, (r, c) in the low half
  static uint32_t column_pair(const uint16_t* tile, int ld, int r, int c) {
    return static_cast<uint32_t>(tile[r * ld + c]) | (static_cast<uint32_t>(tile[(r + 1) * ld + c]) << 16);
  }
  int tid_;
  FiberBarrier* bar_;
  WarpExchange* wx_;
  FiberBarrier* cluster_bar_ = nullptr;
  float* const* smem_bases_ = nullptr;
  int rank_ = 0;
};

// Runs body(blk, block_index, smem) for every block of a 1-D grid, blocks one after the
// other. Shared memory is refilled with NaN before each block, so a read of a shared
// location the block did not write first poisons its results.
template <class Body>
void emulate_grid(int64_t grid, int nthr, int smem_floats, Body body) {
  std::vector<float> smem(static_cast<size_t>(smem_floats));
  FiberBarrier bar(nthr);
  WarpExchange wx(nthr / 32);
  run_fibers(nthr, [&](int t) {
    EmuBlock blk(t, &bar, &wx);
    for (int64_t g = 0; g < grid; ++g) {
      if (t == 0) std::fill(smem.begin(), smem.end(), std::numeric_limits<float>::quiet_NaN());
      bar.arrive_and_wait();
      body(blk, g, smem.data());
      bar.arrive_and_wait();
    }
  });
}

// As emulate_grid for a grid of clusters of nv blocks (block g = cluster * nv + rank): the
// blocks of one cluster run together (nv * nthr fibers), each with its own shared
// memory (NaN-filled before each cluster), block barrier and warps; clusters one after the
// other. body(blk, cluster, rank, smem).
template <class Body>
void emulate_cluster_grid(int64_t clusters, int nv, int nthr, int smem_floats, Body body) {
  std::vector<std::vector<float>> smem(static_cast<size_t>(nv), std::vector<float>(static_cast<size_t>(smem_floats)));
  std::vector<float*> bases;
  std::vector<std::unique_ptr<FiberBarrier>> bars;
  std::vector<std::unique_ptr<WarpExchange>> wxs;
  for (int r = 0; r < nv; ++r) {
    bases.push_back(smem[r].data());
    bars.push_back(std::make_unique<FiberBarrier>(nthr));
    wxs.push_back(std::make_unique<WarpExchange>(nthr / 32));
  }
  FiberBarrier cluster_bar(nv * nthr);
  run_fibers(nv * nthr, [&](int i) {
    const int r = i / nthr, t = i % nthr;
    EmuBlock blk(t, bars[r].get(), wxs[r].get(), &cluster_bar, bases.data(), r);
    for (int64_t g = 0; g < clusters; ++g) {
      if (t == 0) std::fill(smem[r].begin(), smem[r].end(), std::numeric_limits<float>::quiet_NaN());
      cluster_bar.arrive_and_wait();
      body(blk, g, r, bases[r]);
      cluster_bar.arrive_and_wait();
    }
  });
}

}  // namespace lt::kda::emu
