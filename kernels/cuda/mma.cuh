// Warp-level tensor-core primitives shared by the mixer kernels (kernels/cuda/rwkv6/*.cu,
// kernels/cuda/kda/ through kernels/kda_blocks.h), CUDA only. Each wrapper is one PTX
// instruction (or a fixed address computation feeding one); inlined, they emit the same PTX as
// the asm written in place. Lane = 4 g + t (g = lane / 4, t = lane % 4) throughout.
//
// mma.sync.aligned.m16n8k16, bf16 x bf16 -> fp32 (RWKV6)       mma(d, a, b)
//   PTX ISA, "Matrix fragments for mma.m16n8k16" (each b32 holds two bf16, low half first):
//   A (16 x 16, row-major), 4 x b32:  a0 = A[g][2t..2t+1],   a1 = A[g+8][2t..2t+1],
//                                     a2 = A[g][2t+8..+9],   a3 = A[g+8][2t+8..+9]
//   B (16 x 8, K x N), 2 x b32:       b0 = B[2t..2t+1][g],   b1 = B[2t+8..2t+9][g]
//   C/D (16 x 8, fp32), 4 x f32:      c0, c1 = D[g][2t], D[g][2t+1];  c2, c3 = D[g+8][2t], D[g+8][2t+1]
//
// mma.sync.aligned.m16n8k8, tf32 x tf32 -> fp32 (KDA)           mma_tf32(d, a, b)
//   PTX ISA, "Matrix fragments for mma.m16n8k8" (.tf32; each b32 one TF32 operand, the tensor
//   core reads its upper 19 bits):
//   A (16 x 8, row-major), 4 x b32:   a0 = A[g][t],  a1 = A[g+8][t],  a2 = A[g][t+4],  a3 = A[g+8][t+4]
//   B (8 x 8, K x N), 2 x b32:        b0 = B[t][g],  b1 = B[t+4][g]
//   C/D (16 x 8, fp32), 4 x f32:      as m16n8k16
//
// ldmatrix fragment loads for m16n8k16 from bf16 shared-memory tiles. Tiles are row-major bf16
// with a row stride `ld` (elements, a multiple of 8 so that every ldmatrix row address is
// 16-byte aligned; ld = 72 or 40 makes the eight rows of one 8x8 matrix hit distinct banks).
//   load_a        A[m][k] = tile[(m0 + m) * ld + k0 + k]           (A stored as is)
//   load_a_trans  A[m][k] = tile[(k0 + k) * ld + m0 + m]           (A stored transposed)
//   load_b        B[k][n] = tile[(n0 + n) * ld + k0 + k]           (B stored N x K, e.g. V for V^T)
//   load_b_trans  B[k][n] = tile[(k0 + k) * ld + n0 + n]           (B stored K x N)
// load_b / load_b_trans fetch one n8 tile of B (ldmatrix .x2), the _2n variants two adjacent
// n8 tiles (n0, n0 + 8; .x4).
//
// Also: cp.async 16-byte global -> shared copies that stage the tiles, and the fp32 <-> bf16
// packing of fragments (pack_bf16 / unpack_bf16, bf16_bits_rn, pack_bf16x2_rn).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace lt::tc {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t (&r)[2], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p))
               : "memory");
}

// D += A B, m16n8k16, bf16 operands, fp32 accumulators.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// D += A B, m16n8k8, TF32 operands (fp32 bit patterns; the low 13 bits are ignored), fp32
// accumulators.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) & 31; }

// 16 x 16 A fragment at (m0, k0).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int ld, int m0, int k0) {
  const int l = lane_id();
  ldsm_x4(a, tile + (m0 + (l & 15)) * ld + k0 + (l >> 4) * 8);
}
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const bf16* tile, int ld, int m0, int k0) {
  const int l = lane_id(), i = l >> 3;
  ldsm_x4_t(a, tile + (k0 + (i >> 1) * 8 + (l & 7)) * ld + m0 + (i & 1) * 8);
}
// 16 x 8 B fragment at (k0, n0).
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const bf16* tile, int ld, int k0, int n0) {
  const int l = lane_id();
  ldsm_x2(b, tile + (n0 + (l & 7)) * ld + k0 + ((l >> 3) & 1) * 8);
}
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[2], const bf16* tile, int ld, int k0, int n0) {
  const int l = lane_id();
  ldsm_x2_t(b, tile + (k0 + ((l >> 3) & 1) * 8 + (l & 7)) * ld + n0);
}
// Two adjacent n8 tiles (n0 and n0 + 8): b0 for n0, b1 for n0 + 8.
__device__ __forceinline__ void load_b_2n(uint32_t (&b0)[2], uint32_t (&b1)[2], const bf16* tile, int ld, int k0,
                                          int n0) {
  const int l = lane_id(), i = l >> 3;
  uint32_t r[4];
  ldsm_x4(r, tile + (n0 + (i >> 1) * 8 + (l & 7)) * ld + k0 + (i & 1) * 8);
  b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}
__device__ __forceinline__ void load_b_trans_2n(uint32_t (&b0)[2], uint32_t (&b1)[2], const bf16* tile, int ld, int k0,
                                                int n0) {
  const int l = lane_id(), i = l >> 3;
  uint32_t r[4];
  ldsm_x4_t(r, tile + (k0 + (i & 1) * 8 + (l & 7)) * ld + n0 + (i >> 1) * 8);
  b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}

// 16-byte asynchronous global -> shared copy; src_bytes < 16 zero-fills the rest (0: no read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Two fp32 values -> one b32 of two bf16 (round to nearest even), low half = x.
__device__ __forceinline__ uint32_t pack_bf16(float x, float y) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ float2 unpack_bf16(uint32_t v) {
  __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&v);
  return __bfloat1622float2(b);
}
// The bf16 bits of v, round to nearest even: one cvt.rn.bf16.f32.
__device__ __forceinline__ uint16_t bf16_bits_rn(float v) {
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
// Two fp32 values -> one b32 of two bf16 (round to nearest even), low half = lo: one
// cvt.rn.bf16x2.f32 (which puts its first source operand in the upper half).
__device__ __forceinline__ uint32_t pack_bf16x2_rn(float lo, float hi) {
  uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

}  // namespace lt::tc
