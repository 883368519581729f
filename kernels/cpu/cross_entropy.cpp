// Cross-entropy rows, CPU backend (twin: kernels/cuda/cross_entropy.cu; contract:
// kernels/cross_entropy.h). One pass per row for the max and argmax, one for the sum of
// exponentials (accumulated in f64 for every dtype: the reference the CUDA kernel is
// compared with), one writing the gradient. Targets are all checked before anything is
// written.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cross_entropy.h"
#include "kernels/half.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class I>
int64_t target_at(const CrossEntropyParams& p, int64_t r) {
  return static_cast<int64_t>(static_cast<const I*>(p.targets)[r]);
}

template <class T, class I>
void rows(const CrossEntropyParams& p) {
  for (int64_t r = 0; r < p.n; ++r) {
    const int64_t t = target_at<I>(p, r);
    if (t != p.ignore_index && (t < 0 || t >= p.V))
      throw std::invalid_argument("cross_entropy: target " + std::to_string(t) + " at row " + std::to_string(r) +
                                  " is out of range [0, " + std::to_string(p.V) + ") and is not ignore_index " +
                                  std::to_string(p.ignore_index));
  }
  using A = compute_t<T>;  // f32 for bf16 logits
  A* loss = static_cast<A*>(p.row_loss);
  const A scale = static_cast<A>(p.inv_count_at ? *p.inv_count_at : p.inv_count);
  for (int64_t r = 0; r < p.n; ++r) {
    T* z = static_cast<T*>(p.logits) + r * p.ld;
    const int64_t t = target_at<I>(p, r);
    const bool ignored = t == p.ignore_index;
    A m = load_as_compute(z[0]);
    int64_t arg = 0;
    for (int64_t j = 1; j < p.V; ++j)
      if (load_as_compute(z[j]) > m) {
        m = load_as_compute(z[j]);
        arg = j;
      }
    double sum = 0.0;
    for (int64_t j = 0; j < p.V; ++j) sum += std::exp(static_cast<double>(load_as_compute(z[j]) - m));
    const A lse = m + static_cast<A>(std::log(sum));
    loss[r] = ignored ? A(0) : lse - load_as_compute(z[t]);
    if (p.correct) p.correct[r] = ignored ? -1 : (arg == t ? 1 : 0);
    if (p.write_grad) {
      if (ignored) {
        for (int64_t j = 0; j < p.V; ++j) z[j] = store_from_compute<T>(A(0));
      } else {
        const A inv_sum = static_cast<A>(1.0 / sum);
        for (int64_t j = 0; j < p.V; ++j)
          z[j] =
              store_from_compute<T>((std::exp(load_as_compute(z[j]) - m) * inv_sum - (j == t ? A(1) : A(0))) * scale);
      }
    }
  }
}

template <class T>
void dispatch_targets(const CrossEntropyParams& p) {
  if (p.target_dtype == DType::i32) rows<T, int32_t>(p);
  else if (p.target_dtype == DType::i64) rows<T, int64_t>(p);
  else unsupported_dtype("cpu", "cross_entropy", p.target_dtype);
}

}  // namespace

void cross_entropy(DType dtype, const CrossEntropyParams& p, uintptr_t) {
  if (dtype == DType::f32) dispatch_targets<float>(p);
  else if (dtype == DType::f64) dispatch_targets<double>(p);
  else if (dtype == DType::bf16) dispatch_targets<bfloat16>(p);
  else unsupported_dtype("cpu", "cross_entropy", dtype);
}

}  // namespace lt::kern::cpu
