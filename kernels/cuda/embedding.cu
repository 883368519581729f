// Token embedding, CUDA backend (twin: kernels/cpu/embedding.cpp; contract:
// kernels/embedding.h). f32 W / dW; activations f32, bf16 (f64 and f16 too).
//
// Forward: one thread per output element, out[n, c] = W[idx[n], c].
//
// Backward (deterministic, no float atomics), three launches over the tokens:
//   1. reset: for each token's row v, first[v] = INT_MAX, count[v] = 0 (the scratch, [2 V]
//      i32, arrives with any contents; only the occurring rows are touched);
//   2. index: first[v] = min t (atomicMin), count[v] = number of its tokens (atomicAdd):
//      integer atomics, so the results do not depend on the order;
//   3. sum: one warp per (token t, tile of kColsBwd columns); the owner of row v is the warp
//      of t = first[v]. It walks the tokens from t on in order, 32 kScanUnroll a step, adds the dy
//      rows of v's tokens into registers until it has seen count[v] of them, then adds the
//      sums into dW[v] once.
// Each dW element therefore gets acc = sum of its dy values in token order, then one +=: the
// CPU's rule, bit for bit. A row seen once costs its owner one window of indices.
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

constexpr int kWarpsBwd = 8;                 // warps (tokens) per sum block
constexpr int kColsPerLane = 8;              // columns lane, lane + 32, ... of the warp's tile
constexpr int kColsBwd = 32 * kColsPerLane;  // 256 columns per warp
constexpr int kScanUnroll = 4;               // index loads in flight per lane while walking
constexpr int kNoToken = 0x7fffffff;         // first[v] before any token of v

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

// Pass 1: the scratch rows of the occurring rows to their empty state.
template <class I>
__global__ void embedding_reset_kernel(EmbeddingParams p) {
  const I* idx = static_cast<const I*>(p.idx);
  int* first = static_cast<int*>(p.scratch);
  int* count = first + p.V;
  for (int64_t t = global_thread(); t < p.n; t += grid_threads()) {
    const int64_t v = static_cast<int64_t>(idx[t]);
    if (v < 0 || v >= p.V) continue;
    first[v] = kNoToken;
    count[v] = 0;
  }
}

// Pass 2: each occurring row's first token and token count; bad indices recorded and skipped.
template <class I>
__global__ void embedding_index_kernel(EmbeddingParams p, BadIndex* bad) {
  const I* idx = static_cast<const I*>(p.idx);
  int* first = static_cast<int*>(p.scratch);
  int* count = first + p.V;
  for (int64_t t = global_thread(); t < p.n; t += grid_threads()) {
    const int64_t v = static_cast<int64_t>(idx[t]);
    if (v < 0 || v >= p.V) {
      record_bad_index(bad, v, p.V);
      continue;
    }
    atomicMin(first + v, static_cast<int>(t));
    atomicAdd(count + v, 1);
  }
}

// Pass 3: the owner warp of each row sums its dy rows in token order and adds them into dW.
template <class I, class A>
__global__ void __launch_bounds__(kWarpsBwd * 32) embedding_backward_kernel(EmbeddingParams p) {
  const I* idx = static_cast<const I*>(p.idx);
  const A* dy = static_cast<const A*>(p.dy);
  float* dW = static_cast<float*>(p.dW);
  const int* first = static_cast<const int*>(p.scratch);
  const int* count = first + p.V;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsBwd + (threadIdx.x >> 5);
  if (t >= p.n) return;  // warp-uniform, as every exit below
  const int64_t v = static_cast<int64_t>(idx[t]);
  if (v < 0 || v >= p.V || first[v] != static_cast<int>(t)) return;  // bad, or not the owner
  int remaining = count[v];
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kColsBwd;
  float acc[kColsPerLane];
#pragma unroll
  for (int e = 0; e < kColsPerLane; ++e) acc[e] = 0.0f;
  for (int64_t base = t; remaining > 0; base += 32 * kScanUnroll) {
    bool match[kScanUnroll];
#pragma unroll
    for (int u = 0; u < kScanUnroll; ++u) {
      const int64_t s = base + u * 32 + lane;
      match[u] = s < p.n && static_cast<int64_t>(idx[s]) == v;
    }
#pragma unroll
    for (int u = 0; u < kScanUnroll; ++u) {
      uint32_t hits = __ballot_sync(0xffffffffu, match[u]);
      remaining -= __popc(hits);
      while (hits != 0u) {  // matches in increasing token order
        const int j = __ffs(static_cast<int>(hits)) - 1;
        hits &= hits - 1u;
        const A* row = dy + (base + u * 32 + j) * p.d;
#pragma unroll
        for (int e = 0; e < kColsPerLane; ++e) {
          const int64_t c = c0 + e * 32 + lane;
          if (c < p.d) acc[e] += static_cast<float>(load_as_compute(row[c]));
        }
      }
    }
  }
#pragma unroll
  for (int e = 0; e < kColsPerLane; ++e) {
    const int64_t c = c0 + e * 32 + lane;
    if (c < p.d) dW[v * p.d + c] += acc[e];
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
      if (p.scratch == nullptr) throw std::invalid_argument("embedding backward (cuda): no scratch (2 V i32)");
      if (p.n > kNoToken) throw std::invalid_argument("embedding backward (cuda): more than 2^31 - 1 tokens");
      LT_LAUNCH(embedding_reset_kernel<I>, grid_for(p.n), kThreads, 0, stream, p);
      LT_LAUNCH(embedding_index_kernel<I>, grid_for(p.n), kThreads, 0, stream, p, bad);
      const dim3 grid(static_cast<unsigned>((p.n + kWarpsBwd - 1) / kWarpsBwd),
                      static_cast<unsigned>((p.d + kColsBwd - 1) / kColsBwd));
      auto kernel = embedding_backward_kernel<I, A>;
      LT_LAUNCH(kernel, grid, kWarpsBwd * 32, 0, stream, p);
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
