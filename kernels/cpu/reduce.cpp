// Reductions along one dim, CPU backend (twin: kernels/cuda/reduce.cu).
//   sum: out = sum_{j<len} in[j * in_stride]   (accumulated in f64 for f64, f32 otherwise,
//        sequentially in j)
//   max: out = max_j in[...]; a NaN anywhere gives NaN. len >= 1 (the engine checks).
// it: 0 out, 1 in; iterates over the kept dims.
#include <cmath>

#include "kernels/elementwise_ops.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class T>
void reduce_loop(ReduceOp op, const ReduceParams& p) {
  using C = compute_t<T>;
  T* out = static_cast<T*>(p.it.data[0]);
  const T* in = static_cast<const T*>(p.it.data[1]);
  iter_for_each<2>(p.it, [&](const int64_t(&o)[2]) {
    const T* line = in + o[1];
    C acc;
    if (op == ReduceOp::sum) {
      acc = C(0);
      for (int64_t j = 0; j < p.len; ++j) acc += load_as_compute(line[j * p.in_stride]);
    } else {
      acc = load_as_compute(line[0]);
      for (int64_t j = 1; j < p.len; ++j) {
        const C v = load_as_compute(line[j * p.in_stride]);
        if (v > acc || std::isnan(v)) acc = v;  // a NaN wins, as on the GPU
        if (std::isnan(acc)) break;
      }
    }
    out[o[0]] = store_from_compute<T>(acc);
  });
}

}  // namespace

void reduce(ReduceOp op, DType dtype, const ReduceParams& p, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "reduce", [&](auto t) { reduce_loop<decltype(t)>(op, p); });
}

}  // namespace lt::kern::cpu
