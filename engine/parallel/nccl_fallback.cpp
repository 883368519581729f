// nccl_available / make_nccl for builds without the NCCL backend (no CUDA, or no nccl.h):
// the symbols exist everywhere and say why NCCL cannot be used. The backend itself is
// engine/parallel/cuda/nccl_comm.cpp.
#if !LINTRAIN_WITH_CUDA || !defined(LINTRAIN_WITH_NCCL) || !LINTRAIN_WITH_NCCL

#include <stdexcept>

#include "engine/parallel/comm.h"

namespace lt::dist {

namespace {
const char* no_nccl_reason() {
  return LINTRAIN_WITH_CUDA ? "this build has no NCCL (nccl.h was not found)" : "this build has no NCCL (no CUDA)";
}
}  // namespace

bool nccl_available(std::string* why) {
  if (why != nullptr) *why = no_nccl_reason();
  return false;
}

std::unique_ptr<Communicator> make_nccl(Rendezvous&, Device device) {
  throw std::runtime_error("make_nccl (" + device.str() + "): " + no_nccl_reason());
}

}  // namespace lt::dist

#endif
