// Inclusive cumulative sum along one dim, CPU backend (twin: kernels/cuda/scan.cu).
//   forward: out[j] = sum_{i<=j} in[i];  reverse: out[j] = sum_{i>=j} in[i]
// Sequential per line; the running sum is kept in the compute type (f64 for f64, f32
// otherwise) and rounded on each store. it: 0 out, 1 in; iterates over lines. out may
// alias in exactly.
#include "kernels/elementwise_ops.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class T>
void scan_loop(const ScanParams& p) {
  using C = compute_t<T>;
  T* out = static_cast<T*>(p.it.data[0]);
  const T* in = static_cast<const T*>(p.it.data[1]);
  iter_for_each<2>(p.it, [&](const int64_t(&o)[2]) {
    C acc = C(0);
    for (int64_t s = 0; s < p.len; ++s) {
      const int64_t j = p.reverse ? p.len - 1 - s : s;
      acc += load_as_compute(in[o[1] + j * p.in_stride]);
      out[o[0] + j * p.out_stride] = store_from_compute<T>(acc);
    }
  });
}

}  // namespace

void cumsum(DType dtype, const ScanParams& p, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "cumsum", [&](auto t) { scan_loop<decltype(t)>(p); });
}

}  // namespace lt::kern::cpu
