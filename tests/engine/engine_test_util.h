// Helpers for the engine tests: random inputs (never zeros), host references on
// row-major std::vector<double>, index arithmetic.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/ops.h"
#include "engine/tensor.h"
#include "tests/support/compare.h"  // rel_err, rel_err_l2

namespace lt::test {

// Byte-for-byte equality of two tensors' logical contents: same dtype and shape, any devices
// and strides.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ha = a.to(Device::cpu()).contiguous(), hb = b.to(Device::cpu()).contiguous();
  return std::memcmp(ha.data_ptr(), hb.data_ptr(), ha.nbytes()) == 0;
}

// CUDA tests: fresh device blocks hold NaN (0xFF bytes) for the scope, so an element a kernel
// fails to write shows.
struct PoisonScope {
  alloc::CachingAllocator& a = alloc::cuda_allocator(0);
  bool was = a.poison();
  PoisonScope() { a.set_poison(true); }
  ~PoisonScope() { a.set_poison(was); }
  PoisonScope(const PoisonScope&) = delete;
  PoisonScope& operator=(const PoisonScope&) = delete;
};

// Normal(0,1) values shifted away from 0: |v| >= 0.05, so no input is ever zero.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::f32,
                            Device device = Device::cpu()) {
  Tensor t = ops::randn(shape, seed, 0, DType::f64, Device::cpu());
  std::vector<double> v = t.to_vector();
  for (double& x : v) x = x >= 0 ? x + 0.05 : x - 0.05;
  return Tensor::from_vector(v, shape, dtype, device);
}
// Uniform in [lo, hi].
inline Tensor uniform_tensor(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype = DType::f32,
                             Device device = Device::cpu()) {
  Tensor t = ops::rand(shape, seed, 0, DType::f64, Device::cpu());
  std::vector<double> v = t.to_vector();
  for (double& x : v) x = lo + (hi - lo) * x;
  return Tensor::from_vector(v, shape, dtype, device);
}

// Row-major multi-index of linear index i.
inline std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}
// Linear index in `shape` of the multi-index `out_idx` of a broadcast shape (numpy rules).
inline int64_t broadcast_index(const std::vector<int64_t>& out_idx, const Shape& shape) {
  int64_t lin = 0;
  const size_t lead = out_idx.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) lin = lin * shape[d] + (shape[d] == 1 ? 0 : out_idx[lead + d]);
  return lin;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}
// Reference bf16 / f16 rounding: nearest representable value by exhaustive neighbour
// comparison in double (ties to the even bit pattern). Independent of kernels/half.h.
inline uint16_t ref_round_to_16(float f, bool bf16) {
  auto decode = [&](uint32_t h) -> double {
    if (bf16) {
      uint32_t u = h << 16;
      float r;
      std::memcpy(&r, &u, 4);
      return r;
    }
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double s = (h & 0x8000) ? -1 : 1;
    if (e == 0) return s * std::ldexp(m, -24);
    if (e == 31) return m ? NAN : s * INFINITY;
    return s * std::ldexp(1024 + m, e - 25);
  };
  if (std::isnan(f)) return bf16 ? 0x7fc0 : 0x7e00;
  const double x = f;
  const uint32_t sign = std::signbit(f) ? 0x8000 : 0;
  const uint32_t max_finite = bf16 ? 0x7f7f : 0x7bff;
  const double ax = std::fabs(x);
  // largest magnitude pattern <= ax by scanning (patterns are monotonic in magnitude)
  uint32_t lo = 0, hi = max_finite;
  if (ax >= decode(max_finite)) {
    // beyond the largest finite: round to inf iff ax >= max + half ulp
    const double half_ulp = (decode(max_finite) - decode(max_finite - 1)) / 2;
    return static_cast<uint16_t>(sign | (ax >= decode(max_finite) + half_ulp ? max_finite + 1 : max_finite));
  }
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (decode(mid) <= ax) lo = mid;
    else hi = mid;
  }
  if (decode(hi) <= ax) lo = hi;
  const uint32_t up = lo + 1;
  const double dlo = ax - decode(lo), dup = decode(up) - ax;
  uint32_t r = dlo < dup ? lo : (dup < dlo ? up : ((lo & 1) ? up : lo));
  return static_cast<uint16_t>(sign | r);
}

}  // namespace lt::test
