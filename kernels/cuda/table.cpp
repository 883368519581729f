// The CUDA backend's op table (see kernels/table.h).
#include "kernels/table.h"

namespace lt::kern {

const KernelTable& cuda_kernels() {
#define LT_KERNEL_TABLE_ENTRY(name, Kernel) cuda::name,
  static const KernelTable table{"cuda", LT_KERNEL_FAMILIES(LT_KERNEL_TABLE_ENTRY)};
#undef LT_KERNEL_TABLE_ENTRY
  return table;
}

}  // namespace lt::kern
