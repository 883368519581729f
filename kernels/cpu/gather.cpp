// Row gather with a fill, CPU backend (twin: kernels/cuda/gather.cu; contract: kernels/gather.h).
#include "kernels/gather.h"
#include "kernels/table.h"

namespace lt::kern::cpu {

void gather_rows(DType dtype, const GatherRowsParams& p, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "gather_rows", [&](auto t) {
    using T = decltype(t);
    const T fill = store_from_compute<T>(static_cast<compute_t<T>>(p.fill));
    for (int64_t i = 0; i < p.rows_out * p.width; ++i) gather_rows_element<T>(p, i, fill);
  });
}

}  // namespace lt::kern::cpu
