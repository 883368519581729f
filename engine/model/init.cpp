// fla's initialisations (engine/model/init.h).
#include "engine/model/init.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "engine/ops.h"

namespace lt::model {

namespace {

// Host f64 values, row-major, copied into p (converted to its dtype and device).
void write_host(Tensor& p, const std::vector<double>& values) {
  p.copy_(Tensor::from_vector(values, p.shape(), DType::f64, Device::cpu()));
}

std::vector<double> host_uniform(const Shape& shape, uint64_t seed, uint64_t offset) {
  return ops::rand(shape, seed, offset, DType::f64, Device::cpu()).to_vector();
}

// rows = shape[0], cols = product of the rest. Returns scale * Q as row-major [rows, cols]
// with Q's rows (rows <= cols) or columns (rows > cols) orthonormal.
std::vector<double> orthogonal_values(const Shape& shape, double scale, uint64_t seed, uint64_t offset) {
  if (shape.size() < 2)
    throw std::invalid_argument("init: orthogonal needs a parameter of >= 2 dims, got " + shape_str(shape));
  const int64_t rows = shape[0], cols = shape_numel(shape) / rows;
  const std::vector<double> a = ops::randn({rows, cols}, seed, offset, DType::f64, Device::cpu()).to_vector();
  // Work on the taller orientation: m >= n, orthonormalise the n columns of an [m, n] matrix.
  const bool transposed = rows < cols;
  const int64_t m = transposed ? cols : rows, n = transposed ? rows : cols;
  // col[j][i] = element (i, j) of the [m, n] matrix
  std::vector<std::vector<double>> col(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(m)));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double x = a[static_cast<size_t>(i * cols + j)];
      if (transposed) col[static_cast<size_t>(i)][static_cast<size_t>(j)] = x;
      else col[static_cast<size_t>(j)][static_cast<size_t>(i)] = x;
    }
  // Modified Gram-Schmidt: Q's column j = (a_j - sum_{l<j} (q_l . a_j) q_l) / r_jj with
  // r_jj > 0, i.e. Q R with diag(R) positive: the sign fix torch applies after its QR.
  // A second pass (re-orthogonalisation) keeps Q orthonormal to f64 rounding.
  for (int64_t j = 0; j < n; ++j) {
    auto& cj = col[static_cast<size_t>(j)];
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t l = 0; l < j; ++l) {
        const auto& cl = col[static_cast<size_t>(l)];
        double dot = 0.0;
        for (int64_t i = 0; i < m; ++i) dot += cl[static_cast<size_t>(i)] * cj[static_cast<size_t>(i)];
        for (int64_t i = 0; i < m; ++i) cj[static_cast<size_t>(i)] -= dot * cl[static_cast<size_t>(i)];
      }
    double norm = 0.0;
    for (double x : cj) norm += x * x;
    norm = std::sqrt(norm);
    if (!(norm > 0.0)) throw std::runtime_error("init: orthogonal: rank-deficient random matrix");
    for (double& x : cj) x /= norm;
  }
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[static_cast<size_t>(i * cols + j)] =
          scale * (transposed ? col[static_cast<size_t>(i)][static_cast<size_t>(j)]
                              : col[static_cast<size_t>(j)][static_cast<size_t>(i)]);
  return out;
}

}  // namespace

void init_param(Tensor& p, const ParamSpec& spec, uint64_t seed, uint64_t index) {
  if (p.shape() != spec.shape)
    throw std::invalid_argument("init: parameter " + spec.name + " has shape " + shape_str(p.shape()) +
                                ", its spec says " + shape_str(spec.shape));
  const uint64_t offset = index * kInitStreamStride;
  switch (spec.init) {
    case Init::zeros: p.fill_(0.0); return;
    case Init::ones: p.fill_(1.0); return;
    case Init::normal: ops::normal_(p, seed, offset, 0.0, spec.scale); return;
    case Init::xavier_uniform: {
      if (spec.shape.size() < 2)
        throw std::invalid_argument("init: xavier_uniform needs >= 2 dims: " + spec.name + " " + shape_str(spec.shape));
      const int64_t receptive = shape_numel(spec.shape) / (spec.shape[0] * spec.shape[1]);
      const double fan_in = static_cast<double>(spec.shape[1] * receptive);
      const double fan_out = static_cast<double>(spec.shape[0] * receptive);
      const double a = spec.scale * std::sqrt(6.0 / (fan_in + fan_out));
      ops::uniform_(p, seed, offset, -a, a);
      return;
    }
    case Init::orthogonal: write_host(p, orthogonal_values(spec.shape, spec.scale, seed, offset)); return;
    case Init::kda_a_log: {
      std::vector<double> u = host_uniform(spec.shape, seed, offset);
      for (double& x : u) x = std::log(1.0 + 15.0 * x);
      write_host(p, u);
      return;
    }
    case Init::kda_dt_bias: {
      const double lo = std::log(1e-3), hi = std::log(0.1), floor = 1e-4;
      std::vector<double> u = host_uniform(spec.shape, seed, offset);
      for (double& x : u) {
        const double dt = std::max(std::exp(lo + (hi - lo) * x), floor);
        x = dt + std::log(-std::expm1(-dt));  // softplus^-1(dt)
      }
      write_host(p, u);
      return;
    }
  }
  throw std::invalid_argument("init: unknown Init kind for " + spec.name);
}

}  // namespace lt::model
