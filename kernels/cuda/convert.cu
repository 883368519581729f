// dtype conversion and strided copy, CUDA backend (twin: kernels/cpu/convert.cpp; the
// element conversions are the shared functions of kernels/half.h, so both backends round
// identically). Same dtype: a bit copy.
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

template <class Out, class In>
__global__ void convert_kernel(IterParams p) {
  Out* out = static_cast<Out*>(p.data[0]);
  const In* in = static_cast<const In*>(p.data[1]);
  for (int64_t i = global_thread(); i < p.numel; i += grid_threads()) {
    int64_t o[2];
    iter_offsets<2>(p, i, o);
    if constexpr (std::is_same_v<Out, In>) {
      out[o[0]] = in[o[1]];
    } else if constexpr (std::is_same_v<In, float> && is_half_v<Out>) {
      out[o[0]] = Out(in[o[1]]);
    } else {
      out[o[0]] = element_from_double<Out>(element_to_double(in[o[1]]));
    }
  }
}

}  // namespace

void convert(DType out_dtype, DType in_dtype, const IterParams& p, uintptr_t stream) {
  if (p.numel == 0) return;
  visit_dtype(out_dtype, [&](auto o) {
    visit_dtype(in_dtype, [&](auto i) {
      auto kernel = convert_kernel<decltype(o), decltype(i)>;
      LT_LAUNCH(kernel, grid_for(p.numel), kThreads, 0, as_stream(stream), p);
    });
  });
}

}  // namespace lt::kern::cuda
