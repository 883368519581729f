// IterParams: what an elementwise-style kernel sees. Up to kIterMaxOps operands (operand 0
// is the output) share one iteration shape; each operand has its own element strides
// (0 = broadcast). The engine builds it (make_iter, engine/detail.h and engine/iter.cpp): it
// broadcasts, drops size-1 dims and merges dims that are contiguous in every operand, so the
// common dense case arrives as ndim = 1. Merging keeps the row-major order, so the linear
// iteration index i is the logical row-major index of the output element (the random kernels
// rely on this).
#pragma once
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/half.h"

namespace lt::kern {

inline constexpr int kIterMaxOps = 4;

struct IterParams {
  int ndim = 0;  // 0..kMaxDims (0: a single element)
  int nops = 0;
  int64_t numel = 0;
  int64_t shape[kMaxDims] = {};                 // innermost dim last
  int64_t strides[kIterMaxOps][kMaxDims] = {};  // elements, per operand
  void* data[kIterMaxOps] = {};                 // element 0 of each operand
};

// Element offsets of linear index i (row-major over shape) for the first N operands.
template <int N>
LT_HD void iter_offsets(const IterParams& p, int64_t i, int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  if (p.ndim == 1) {
    for (int k = 0; k < N; ++k) off[k] = i * p.strides[k][0];
    return;
  }
  for (int d = p.ndim - 1; d >= 0; --d) {
    const int64_t n = p.shape[d];
    const int64_t idx = i % n;
    i /= n;
    for (int k = 0; k < N; ++k) off[k] += idx * p.strides[k][d];
  }
}

// Host loop over every element in row-major order without divisions: an odometer over
// the outer dims and a tight loop over the innermost one. fn(off) gets the N offsets.
template <int N, class Fn>
inline void iter_for_each(const IterParams& p, Fn&& fn) {
  if (p.numel == 0) return;
  int64_t off[N] = {};
  if (p.ndim == 0) {
    fn(off);
    return;
  }
  const int inner = p.ndim - 1;
  const int64_t n_inner = p.shape[inner];
  int64_t idx[kMaxDims] = {};
  int64_t base[N] = {};
  for (;;) {
    for (int64_t j = 0; j < n_inner; ++j) {
      for (int k = 0; k < N; ++k) off[k] = base[k] + j * p.strides[k][inner];
      fn(off);
    }
    int d = inner - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < p.shape[d]) {
        for (int k = 0; k < N; ++k) base[k] += p.strides[k][d];
        break;
      }
      for (int k = 0; k < N; ++k) base[k] -= (p.shape[d] - 1) * p.strides[k][d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace lt::kern
