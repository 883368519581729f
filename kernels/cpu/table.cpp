// The CPU backend's op table (see kernels/table.h).
#include <stdexcept>
#include <string>

#include "kernels/table.h"

namespace lt::kern {

const KernelTable& cpu_kernels() {
#define LT_KERNEL_TABLE_ENTRY(name, Kernel) cpu::name,
  static const KernelTable table{"cpu", LT_KERNEL_FAMILIES(LT_KERNEL_TABLE_ENTRY)};
#undef LT_KERNEL_TABLE_ENTRY
  return table;
}

void unsupported_dtype(const char* backend, const char* family, DType dtype) {
  throw std::invalid_argument(std::string(backend) + " " + family + ": dtype " + dtype_name(dtype) +
                              " is not supported");
}

}  // namespace lt::kern
