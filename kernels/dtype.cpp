#include "kernels/dtype.h"

#include <stdexcept>

namespace lt {

DType parse_dtype(const std::string& name) {
  struct Row {
    const char* name;
    DType dtype;
  };
  static const Row rows[] = {
      {"f32", DType::f32},     {"float32", DType::f32}, {"float", DType::f32}, {"f64", DType::f64},
      {"float64", DType::f64}, {"double", DType::f64},  {"bf16", DType::bf16}, {"bfloat16", DType::bf16},
      {"f16", DType::f16},     {"float16", DType::f16}, {"half", DType::f16},  {"i32", DType::i32},
      {"int32", DType::i32},   {"i64", DType::i64},     {"int64", DType::i64}, {"u16", DType::u16},
      {"uint16", DType::u16},
  };
  for (const Row& r : rows)
    if (name == r.name) return r.dtype;
  throw std::invalid_argument("unknown dtype '" + name + "' (expected f32, f64, bf16, f16, i32, i64 or u16)");
}

}  // namespace lt
