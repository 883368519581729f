// Element types shared by the kernels and the tensor runtime (engine/tensor.h).
// The 16-bit float types and their conversions are in kernels/half.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace lt {

// Most dims a tensor (and a kernel's strided view) may have.
inline constexpr int kMaxDims = 8;

//            bytes  kind
//   f32      4      float (the reference precision)
//   f64      8      double (CPU references, finite differences; CUDA supported too)
//   bf16     2      bfloat16, round-to-nearest-even from f32
//   f16      2      IEEE half, round-to-nearest-even from f32
//   i32, i64        signed integers (token ids, indices)
//   u16             unsigned 16-bit (token shards)
enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, u16 };
inline constexpr int kNumDTypes = 7;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32: return 4;
    case DType::f64:
    case DType::i64: return 8;
    case DType::bf16:
    case DType::f16:
    case DType::u16: return 2;
  }
  return 0;
}
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u16: return "u16";
  }
  return "?";
}
// Parses "f32", "float32", "bf16", "bfloat16", ...; throws std::invalid_argument.
DType parse_dtype(const std::string& name);
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace lt
