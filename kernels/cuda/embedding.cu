// Token embedding, CUDA backend (twin: kernels/cpu/embedding.cpp; contract:
// kernels/embedding.h). f32 W / dW; activations f32, bf16 (f64 and f16 too).
//
// Forward: one thread per output element, out[n, c] = W[idx[n], c].
//
// Backward (deterministic, no float atomics): one block per group of kRows vocabulary rows
// and kCols columns. The block walks the whole index list in stages of kStage tokens; in
// each stage its threads test their kPerThread consecutive tokens against the group's rows
// and compact the matches, in token order, into shared memory (a block-wide exclusive
// scan of the per-thread match counts); then every thread adds the matched dy values of its
// columns into the group's accumulators (shared memory, [kRows, kCols] f32) in that order.
// At the end each occurring row is added into dW once. Each dW element therefore gets
// acc = sum of its dy values in token order, then one +=: the CPU's rule, bit for bit.
// Every block reads the whole index list (n * V / kRows * d / kCols index reads, from L2):
// cheap for the token counts of one step (n <= 64K) and simpler than a device sort.
//
// Index range: the kernels cannot throw. A bad index writes 0 (forward) or is skipped
// (backward), and the kernel records the value in a host-mapped flag (pinned, zero-copy);
// the next CUDA embedding call checks the flag on the host, without synchronising, and
// throws naming the value. So an error surfaces at the first embedding call made after the
// bad launch has completed (in training: the next step's embedding at the latest).
#include <stdexcept>
#include <string>

#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/embedding.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

constexpr int kThreadsBwd = 128;  // one thread per column pair ...
constexpr int kColsPerThread = 2;
constexpr int kCols = kThreadsBwd * kColsPerThread;  // ... 256 columns per block
constexpr int kRows = 32;                            // vocabulary rows per block
constexpr int kPerThread = 16;                       // consecutive tokens tested per thread
constexpr int kStage = kThreadsBwd * kPerThread;     // 2048 tokens per stage
constexpr int kPrefetch = 8;                         // dy loads in flight before their adds
// shared memory: acc 32 * 256 * 4 = 32 KiB, match lists 2048 * (2 + 1) = 6 KiB
static_assert(kStage <= 65536, "match positions are stored as uint16");

// The host-mapped bad-index record (pinned memory, visible to host and device).
struct BadIndex {
  long long value;
  long long V;
  int set;
};

BadIndex* bad_index_record() {
  static BadIndex* record = [] {
    void* p = nullptr;
    LT_CUDA_CHECK(cudaHostAlloc(&p, sizeof(BadIndex), cudaHostAllocMapped | cudaHostAllocPortable));
    auto* r = static_cast<BadIndex*>(p);
    r->value = 0;
    r->V = 0;
    r->set = 0;
    return r;
  }();
  return record;
}

// Throws if an earlier launch recorded a bad index (and clears the record).
void raise_recorded_bad_index() {
  volatile BadIndex* r = bad_index_record();
  if (!r->set) return;
  const long long value = r->value, V = r->V;
  r->set = 0;
  throw std::invalid_argument("embedding: index " + std::to_string(value) + " is out of range [0, " +
                              std::to_string(V) + ") (found by an earlier CUDA embedding launch)");
}

__device__ void record_bad_index(BadIndex* r, long long value, long long V) {
  volatile BadIndex* vr = r;
  vr->value = value;
  vr->V = V;
  __threadfence_system();
  vr->set = 1;
}

template <class I, class W, class A>
__global__ void embedding_forward_kernel(EmbeddingParams p, BadIndex* bad) {
  const I* idx = static_cast<const I*>(p.idx);
  const W* w = static_cast<const W*>(p.W);
  A* out = static_cast<A*>(p.out);
  const int64_t total = p.n * p.d;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t n = i / p.d, c = i - n * p.d;
    const int64_t v = static_cast<int64_t>(idx[n]);
    if (v < 0 || v >= p.V) {
      if (c == 0) record_bad_index(bad, v, p.V);
      out[i] = store_from_compute<A>(0.0f);
    } else {
      out[i] = store_from_compute<A>(load_as_compute(w[v * p.d + c]));
    }
  }
}

template <class I, class A>
__global__ void __launch_bounds__(kThreadsBwd) embedding_backward_kernel(EmbeddingParams p, BadIndex* bad) {
  __shared__ float acc[kRows][kCols];     // 32 KiB: the group's row sums
  __shared__ uint16_t match_pos[kStage];  // stage-relative token of each match
  __shared__ uint8_t match_row[kStage];   // group-relative row of each match
  __shared__ int warp_total[kThreadsBwd / 32];
  __shared__ int touched[kRows];
  const I* idx = static_cast<const I*>(p.idx);
  const A* dy = static_cast<const A*>(p.dy);
  float* dW = static_cast<float*>(p.dW);
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int64_t v0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t v_end = v0 + kRows < p.V ? v0 + kRows : p.V;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kCols;
  const bool reporter = blockIdx.x == 0 && blockIdx.y == 0;  // one block reports bad indices
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kColsPerThread; ++j) acc[r][tid + j * kThreadsBwd] = 0.0f;
  if (tid < kRows) touched[tid] = 0;

  for (int64_t t0 = 0; t0 < p.n; t0 += kStage) {
    // 1. test this thread's kPerThread consecutive tokens
    const int64_t first = t0 + static_cast<int64_t>(tid) * kPerThread;
    uint32_t hit_mask = 0;
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t t = first + k;
      if (t >= p.n) break;
      const int64_t v = static_cast<int64_t>(idx[t]);
      if (reporter && (v < 0 || v >= p.V)) record_bad_index(bad, v, p.V);
      if (v >= v0 && v < v_end) hit_mask |= 1u << k;
    }
    // 2. exclusive scan of the match counts over the block (warp scan, then warp totals)
    const int count = __popc(hit_mask);
    int inclusive = count;
    for (int s = 1; s < 32; s *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, inclusive, s);
      if (lane >= s) inclusive += other;
    }
    if (lane == 31) warp_total[warp] = inclusive;
    __syncthreads();
    int offset = inclusive - count, total = 0;
    for (int w = 0; w < kThreadsBwd / 32; ++w) {
      if (w < warp) offset += warp_total[w];
      total += warp_total[w];
    }
    // 3. write this thread's matches in token order
    for (int k = 0; k < kPerThread; ++k)
      if (hit_mask & (1u << k)) {
        const int64_t t = first + k;
        const int row = static_cast<int>(static_cast<int64_t>(idx[t]) - v0);
        match_pos[offset] = static_cast<uint16_t>(t - t0);
        match_row[offset] = static_cast<uint8_t>(row);
        touched[row] = 1;
        ++offset;
      }
    __syncthreads();
    // 4. add the matched dy values in order; kPrefetch loads are issued before their adds
    for (int m0 = 0; m0 < total; m0 += kPrefetch) {
      float val[kPrefetch][kColsPerThread];
      int row[kPrefetch];
#pragma unroll
      for (int u = 0; u < kPrefetch; ++u) {
        row[u] = -1;
        if (m0 + u < total) {
          row[u] = match_row[m0 + u];
          const A* g = dy + (t0 + match_pos[m0 + u]) * p.d;
#pragma unroll
          for (int j = 0; j < kColsPerThread; ++j) {
            const int64_t c = c0 + tid + j * kThreadsBwd;
            val[u][j] = c < p.d ? static_cast<float>(load_as_compute(g[c])) : 0.0f;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kPrefetch; ++u)
        if (row[u] >= 0)
#pragma unroll
          for (int j = 0; j < kColsPerThread; ++j) acc[row[u]][tid + j * kThreadsBwd] += val[u][j];
    }
    __syncthreads();  // the match lists and warp totals are rewritten by the next stage
  }

  for (int r = 0; r < kRows; ++r) {
    if (!touched[r]) continue;
    const int64_t v = v0 + r;
    for (int j = 0; j < kColsPerThread; ++j) {
      const int64_t c = c0 + tid + j * kThreadsBwd;
      if (c < p.d) dW[v * p.d + c] += acc[r][tid + j * kThreadsBwd];
    }
  }
}

template <class I>
void run(EmbeddingPass pass, const EmbeddingParams& p, cudaStream_t stream) {
  if (p.w_dtype != DType::f32) unsupported_dtype("cuda", "embedding", p.w_dtype);
  BadIndex* bad = bad_index_record();  // host-mapped: the same address on the device (UVA)
  visit_float_dtype(p.act_dtype, "cuda", "embedding", [&](auto a) {
    using A = decltype(a);
    if (pass == EmbeddingPass::forward) {
      auto kernel = embedding_forward_kernel<I, float, A>;
      LT_LAUNCH(kernel, grid_for(p.n * p.d), kThreads, 0, stream, p, bad);
    } else {
      const dim3 grid(static_cast<unsigned>((p.V + kRows - 1) / kRows),
                      static_cast<unsigned>((p.d + kCols - 1) / kCols));
      auto kernel = embedding_backward_kernel<I, A>;
      LT_LAUNCH(kernel, grid, kThreadsBwd, 0, stream, p, bad);
    }
  });
}

}  // namespace

void embedding(EmbeddingPass pass, const EmbeddingParams& p, uintptr_t stream) {
  raise_recorded_bad_index();
  if (p.n == 0 || p.d == 0) return;
  if (p.idx_dtype == DType::i32) run<int32_t>(pass, p, as_stream(stream));
  else if (p.idx_dtype == DType::i64) run<int64_t>(pass, p, as_stream(stream));
  else unsupported_dtype("cuda", "embedding", p.idx_dtype);
}

}  // namespace lt::kern::cuda
