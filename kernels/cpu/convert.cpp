// dtype conversion and strided copy, CPU backend (twin: kernels/cuda/convert.cu).
//   out[i] = convert<Out>(in[i])     it: 0 out (dtype out), 1 in (dtype in)
// Same dtype: a bit copy (NaN payloads and large i64 preserved). Otherwise through
// double, with the rounding rules of kernels/half.h (float -> bf16/f16 round to nearest
// even; f64 -> bf16/f16 via f32; float -> int truncates).
#include <cstring>

#include "kernels/elementwise_ops.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class Out, class In>
void convert_loop(const IterParams& p) {
  Out* out = static_cast<Out*>(p.data[0]);
  const In* in = static_cast<const In*>(p.data[1]);
  if constexpr (std::is_same_v<Out, In>) {
    if (p.ndim == 1 && p.strides[0][0] == 1 && p.strides[1][0] == 1) {
      std::memmove(out, in, static_cast<size_t>(p.numel) * sizeof(Out));
      return;
    }
    iter_for_each<2>(p, [&](const int64_t(&o)[2]) { out[o[0]] = in[o[1]]; });
  } else if constexpr (std::is_same_v<In, float> && is_half_v<Out>) {
    iter_for_each<2>(p, [&](const int64_t(&o)[2]) { out[o[0]] = Out(in[o[1]]); });
  } else {
    iter_for_each<2>(p,
                     [&](const int64_t(&o)[2]) { out[o[0]] = element_from_double<Out>(element_to_double(in[o[1]])); });
  }
}

}  // namespace

void convert(DType out_dtype, DType in_dtype, const IterParams& p, uintptr_t) {
  visit_dtype(out_dtype,
              [&](auto o) { visit_dtype(in_dtype, [&](auto i) { convert_loop<decltype(o), decltype(i)>(p); }); });
}

}  // namespace lt::kern::cpu
