// The "nccl" backend (engine/parallel/comm.h). NCCL is loaded at run time (dlopen) so that the
// build needs only nccl.h and the binary runs, without this backend, where libnccl is absent.
// Library search: $LINTRAIN_NCCL_LIB, then libnccl.so.2 on the loader's path, then the lib
// folders beside nccl.h and the CUDA toolkit's (LINTRAIN_NCCL_LIB_DIRS), then /usr/local/cuda.
//
// Collectives are enqueued on the caller's stream and return at once; the tensors must stay
// alive (and be record_stream'ed when the stream is not their allocation stream) until that
// stream passes them. Uneven shards: reduce-scatter is one NCCL group of ncclReduce(root r)
// over shard r, in place; all-gather one group of ncclBroadcast(root r) of shard r, in place.
// Nothing here asks for NVLink SHARP / multicast; the GPU machines still need
// NCCL_NVLS_ENABLE=0 in the environment (NCCL would otherwise probe for it at init).
#if LINTRAIN_WITH_NCCL

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "engine/parallel/comm.h"
#include "engine/parallel/host_collective.h"

namespace lt::dist {

namespace {

// The entry points the backend uses, resolved from the loaded library.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclReduce) reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
};

struct NcclLibrary {
  NcclApi api;
  std::string path;   // the file that loaded
  int version = 0;    // ncclGetVersion: major * 10000 + minor * 100 + patch
  std::string error;  // why it cannot be used; "" when loaded
};

NcclLibrary load_nccl() {
  NcclLibrary L;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("LINTRAIN_NCCL_LIB"); env != nullptr && *env != '\0') candidates.push_back(env);
  candidates.push_back("libnccl.so.2");
#ifdef LINTRAIN_NCCL_LIB_DIRS
  for (std::string dirs = LINTRAIN_NCCL_LIB_DIRS; !dirs.empty();) {
    const size_t colon = dirs.find(':');
    const std::string dir = dirs.substr(0, colon);
    if (!dir.empty()) candidates.push_back(dir + "/libnccl.so.2");
    dirs = colon == std::string::npos ? "" : dirs.substr(colon + 1);
  }
#endif
  candidates.push_back("/usr/local/cuda/lib64/libnccl.so.2");
  candidates.push_back("/usr/local/cuda/lib/libnccl.so.2");
  void* handle = nullptr;
  std::string tried;
  for (const std::string& c : candidates) {
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      L.path = c;
      break;
    }
    const char* e = dlerror();
    tried += (tried.empty() ? "" : "; ") + c + (e ? std::string(" (") + e + ")" : std::string());
  }
  if (handle == nullptr) {
    L.error = "libnccl.so.2 could not be loaded: tried " + tried + " (set LINTRAIN_NCCL_LIB to its path)";
    return L;
  }
  std::string missing;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  sym(L.api.get_unique_id, "ncclGetUniqueId");
  sym(L.api.comm_init_rank, "ncclCommInitRank");
  sym(L.api.comm_destroy, "ncclCommDestroy");
  sym(L.api.comm_abort, "ncclCommAbort");
  sym(L.api.comm_get_async_error, "ncclCommGetAsyncError");
  sym(L.api.all_reduce, "ncclAllReduce");
  sym(L.api.reduce, "ncclReduce");
  sym(L.api.broadcast, "ncclBroadcast");
  sym(L.api.group_start, "ncclGroupStart");
  sym(L.api.group_end, "ncclGroupEnd");
  sym(L.api.get_error_string, "ncclGetErrorString");
  sym(L.api.get_version, "ncclGetVersion");
  if (!missing.empty()) {
    L.error = L.path + " has no " + missing;
    return L;
  }
  if (L.api.get_version(&L.version) != ncclSuccess) {
    L.error = L.path + ": ncclGetVersion failed";
    return L;
  }
  if (L.version < 21000) L.error = L.path + " is NCCL " + std::to_string(L.version) + "; 2.10 or newer is needed";
  return L;
}

// Loaded once per process (the handle is never closed: NCCL's threads may outlive any owner).
const NcclLibrary& nccl_library() {
  static const NcclLibrary lib = load_nccl();
  return lib;
}

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f64: return ncclFloat64;
    default: break;
  }
  throw std::logic_error("nccl: dtype not validated");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclApi& api, ncclComm_t comm, int rank, int world, Device device)
      : api_(api), comm_(comm), rank_(rank), world_(world), device_(device) {}
  ~NcclCommunicator() override {
    ncclResult_t state = ncclSuccess;
    cudaSetDevice(device_.index);
    if (api_.comm_get_async_error(comm_, &state) == ncclSuccess && state == ncclSuccess) api_.comm_destroy(comm_);
    else api_.comm_abort(comm_);  // a failed communicator cannot be destroyed cleanly
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  const char* backend() const override { return "nccl"; }
  Device device() const override { return device_; }

  void all_reduce_sum(Tensor& t, const Stream& stream) override {
    const detail::CallDesc c = validate(detail::Op::all_reduce_sum, t, nullptr, -1, stream);
    if (c.numel() == 0) return;
    check(api_.all_reduce(t.data_ptr(), t.data_ptr(), c.numel(), nccl_dtype(c.dtype), ncclSum, comm_, cu(stream)),
          "all_reduce_sum", "ncclAllReduce");
  }

  void reduce_scatter_sum(Tensor& t, const std::vector<Shard>& shards, const Stream& stream) override {
    const detail::CallDesc c = validate(detail::Op::reduce_scatter_sum, t, &shards, -1, stream);
    char* base = static_cast<char*>(t.data_ptr());
    const size_t item = dtype_size(c.dtype);
    check(api_.group_start(), "reduce_scatter_sum", "ncclGroupStart");
    ncclResult_t first = ncclSuccess;
    const char* first_call = "ncclReduce";
    for (int r = 0; r < world_ && first == ncclSuccess; ++r) {
      const Shard s = shards[r];
      if (s.count == 0) continue;
      char* p = base + s.offset * item;  // on ranks other than r, the receive buffer is unused
      first = api_.reduce(p, p, s.count, nccl_dtype(c.dtype), ncclSum, r, comm_, cu(stream));
    }
    const ncclResult_t end = api_.group_end();  // always close the group, even after an error
    if (first == ncclSuccess) first_call = "ncclGroupEnd";
    check(first != ncclSuccess ? first : end, "reduce_scatter_sum", first_call);
  }

  void all_gather(Tensor& t, const std::vector<Shard>& shards, const Stream& stream) override {
    const detail::CallDesc c = validate(detail::Op::all_gather, t, &shards, -1, stream);
    char* base = static_cast<char*>(t.data_ptr());
    const size_t item = dtype_size(c.dtype);
    check(api_.group_start(), "all_gather", "ncclGroupStart");
    ncclResult_t first = ncclSuccess;
    const char* first_call = "ncclBroadcast";
    for (int r = 0; r < world_ && first == ncclSuccess; ++r) {
      const Shard s = shards[r];
      if (s.count == 0) continue;
      char* p = base + s.offset * item;
      first = api_.broadcast(p, p, s.count, nccl_dtype(c.dtype), r, comm_, cu(stream));
    }
    const ncclResult_t end = api_.group_end();
    if (first == ncclSuccess) first_call = "ncclGroupEnd";
    check(first != ncclSuccess ? first : end, "all_gather", first_call);
  }

  void broadcast(Tensor& t, int root, const Stream& stream) override {
    const detail::CallDesc c = validate(detail::Op::broadcast, t, nullptr, root, stream);
    if (c.numel() == 0) return;
    check(api_.broadcast(t.data_ptr(), t.data_ptr(), c.numel(), nccl_dtype(c.dtype), root, comm_, cu(stream)),
          "broadcast", "ncclBroadcast");
  }

 private:
  static cudaStream_t cu(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

  detail::CallDesc validate(detail::Op op, const Tensor& t, const std::vector<Shard>* shards, int root,
                            const Stream& stream) const {
    detail::CallDesc c = detail::describe_call(op, t, shards, root, rank_, world_, device_);
    if (c.error.empty() && stream.device() != device_)
      c.error = std::string(detail::op_name(op)) + " (rank " + std::to_string(rank_) + "): the stream is on " +
                stream.device().str() + ", the communicator on " + device_.str();
    if (!c.error.empty()) throw std::invalid_argument("nccl " + c.error);
    ncclResult_t state = ncclSuccess;
    check(api_.comm_get_async_error(comm_, &state), detail::op_name(op), "ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress)
      throw std::runtime_error(std::string("nccl ") + detail::op_name(op) + ": the communicator of rank " +
                               std::to_string(rank_) + " failed earlier: " + api_.get_error_string(state));
    return c;
  }

  void check(ncclResult_t r, const char* op, const char* call) const {
    if (r == ncclSuccess || r == ncclInProgress) return;
    throw std::runtime_error(std::string("nccl ") + op + ": " + call + " failed on rank " + std::to_string(rank_) +
                             " (" + device_.str() + "): " + api_.get_error_string(r));
  }

  const NcclApi& api_;
  ncclComm_t comm_;
  int rank_, world_;
  Device device_;
};

}  // namespace

bool nccl_available(std::string* why) {
  std::string reason;
  if (!cuda_available()) reason = "no usable CUDA device";
  else reason = nccl_library().error;
  if (why != nullptr) *why = reason;
  return reason.empty();
}

std::unique_ptr<Communicator> make_nccl(Rendezvous& rv, Device device) {
  if (!device.is_cuda()) throw std::invalid_argument("make_nccl: " + device.str() + " is not a CUDA device");
  const WorldInfo& w = rv.world();
  const std::string who =
      "make_nccl (rank " + std::to_string(w.rank) + " of " + std::to_string(w.world) + " on " + device.str() + ")";
  std::string why;
  const bool usable = nccl_available(&why);
  const NcclApi& api = nccl_library().api;
  // Rank 0 makes the id and hands it out; an empty blob tells the others it could not.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  std::string blob;
  if (w.rank == 0) {
    ncclResult_t r = ncclSuccess;
    if (usable) r = api.get_unique_id(&id);
    if (usable && r == ncclSuccess) blob.assign(id.internal, sizeof id.internal);
    rv.broadcast_blob(blob);
    if (!usable) throw std::runtime_error(who + ": " + why);
    if (r != ncclSuccess) throw std::runtime_error(who + ": ncclGetUniqueId failed: " + api.get_error_string(r));
  } else {
    blob = rv.broadcast_blob(blob);
    if (!usable) throw std::runtime_error(who + ": " + why);
    if (blob.size() != sizeof id.internal)
      throw std::runtime_error(who + ": rank 0 could not create the NCCL id (see rank 0's error)");
    std::memcpy(id.internal, blob.data(), sizeof id.internal);
  }
  const cudaError_t ce = cudaSetDevice(device.index);
  if (ce != cudaSuccess) throw std::runtime_error(who + ": cudaSetDevice failed: " + cudaGetErrorString(ce));
  ncclComm_t comm = nullptr;
  const ncclResult_t r = api.comm_init_rank(&comm, w.world, id, w.rank);
  if (r != ncclSuccess) throw std::runtime_error(who + ": ncclCommInitRank failed: " + api.get_error_string(r));
  return std::make_unique<NcclCommunicator>(api, comm, w.rank, w.world, device);
}

}  // namespace lt::dist

#endif  // LINTRAIN_WITH_NCCL
