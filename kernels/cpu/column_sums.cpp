// Column sums added into gradients, CPU backend (twin: kernels/cuda/column_sums.cu; contract:
// kernels/column_sums.h). Each column is summed over the rows in ascending order in f64, then
// added to the accumulator once.
#include <algorithm>
#include <vector>

#include "kernels/column_sums.h"
#include "kernels/table.h"

namespace lt::kern::cpu {

void column_sums(DType dtype, const ColumnSumParams& p, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "column_sums", [&](auto t) {
    using T = decltype(t);
    using A = compute_t<T>;
    std::vector<double> sum(static_cast<size_t>(p.cols));
    for (int s = 0; s < p.nsets; ++s) {
      const T* x = static_cast<const T*>(p.x[s]);
      const T* y = static_cast<const T*>(p.y[s]);
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t r = 0; r < p.rows; ++r)
        for (int64_t c = 0; c < p.cols; ++c) {
          const int64_t i = r * p.cols + c;
          const double v = static_cast<double>(load_as_compute(x[i]));
          sum[c] += y ? v * static_cast<double>(load_as_compute(y[i])) : v;
        }
      A* acc = static_cast<A*>(p.acc[s]);
      for (int64_t c = 0; c < p.cols; ++c) acc[c] = static_cast<A>(static_cast<double>(acc[c]) + sum[c]);
    }
  });
}

}  // namespace lt::kern::cpu
