// Random fills (engine/ops.h): Philox4x32-10, identical on the CPU and CUDA
// (kernels/philox.h). Element i is the row-major logical index of the (possibly strided)
// tensor, so filling a view gives the same numbers as filling a contiguous tensor of the
// same shape with the same seed and offset.
#include <stdexcept>

#include "engine/detail.h"
#include "engine/ops.h"

namespace lt::ops {
namespace {

void random_fill(kern::RandomKind kind, Tensor& x, uint64_t seed, uint64_t offset, double a, double b,
                 const char* name) {
  detail::check_float(x, name);
  if (x.numel() == 0) return;
  const Tensor* operands[1] = {&x};
  kern::RandomParams p;
  p.it = detail::make_iter(x.shape(), operands, 1, name);
  p.seed = seed;
  p.offset = offset;
  p.a = a;
  p.b = b;
  detail::Exec ex(x.device());
  ex.k.random(kind, x.dtype(), p, ex.stream);
}

}  // namespace

void uniform_(Tensor& x, uint64_t seed, uint64_t offset, double lo, double hi) {
  if (!(lo <= hi)) throw std::invalid_argument("uniform_: lo " + std::to_string(lo) + " > hi " + std::to_string(hi));
  random_fill(kern::RandomKind::uniform, x, seed, offset, lo, hi, "uniform_");
}

void normal_(Tensor& x, uint64_t seed, uint64_t offset, double mean, double std) {
  if (!(std >= 0)) throw std::invalid_argument("normal_: std " + std::to_string(std) + " < 0");
  random_fill(kern::RandomKind::normal, x, seed, offset, mean, std, "normal_");
}

Tensor rand(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  uniform_(t, seed, offset, 0.0, 1.0);
  return t;
}

Tensor randn(const Shape& shape, uint64_t seed, uint64_t offset, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  normal_(t, seed, offset, 0.0, 1.0);
  return t;
}

}  // namespace lt::ops
