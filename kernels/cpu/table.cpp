// The CPU backend's op table (see kernels/table.h).
#include <stdexcept>
#include <string>

#include "kernels/table.h"

namespace lt::kern {

const KernelTable& cpu_kernels() {
  static const KernelTable table{
      "cpu",        cpu::binary,   cpu::unary,  cpu::where,    cpu::fill,     cpu::convert,
      cpu::reduce,  cpu::cumsum,   cpu::matmul, cpu::tri_mask, cpu::trisolve, cpu::random,
  };
  return table;
}

void unsupported_dtype(const char* backend, const char* family, DType dtype) {
  throw std::invalid_argument(std::string(backend) + " " + family + ": dtype " + dtype_name(dtype) +
                              " is not supported");
}

}  // namespace lt::kern
