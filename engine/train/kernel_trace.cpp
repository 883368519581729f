#include "engine/train/kernel_trace.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#if LINTRAIN_WITH_CUPTI
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#endif

namespace lt::train {
namespace {

nlohmann::json records_json(std::vector<KernelRecord> records, bool copies) {
  std::stable_sort(records.begin(), records.end(),
                   [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  nlohmann::json arr = nlohmann::json::array();
  for (const KernelRecord& k : records) {
    nlohmann::json j = {{"name", k.name},
                        {"stage", k.stages.empty() ? std::string() : k.stages.back()},
                        {"stages", k.stages},
                        {"start_ns", k.start_ns},
                        {"end_ns", k.end_ns},
                        {"stream", k.stream},
                        {"correlation", k.correlation}};
    if (copies) j["bytes"] = k.bytes;
    arr.push_back(std::move(j));
  }
  return arr;
}

}  // namespace

nlohmann::json kernel_trace_line(int64_t step, int64_t train_step, std::vector<KernelRecord> kernels, int64_t dropped,
                                 std::vector<KernelRecord> copies) {
  return {{"kind", "kernel-trace"},
          {"version", 1},
          {"step", step},
          {"train_step", train_step},
          {"dropped", dropped},
          {"kernels", records_json(std::move(kernels), false)},
          {"copies", records_json(std::move(copies), true)}};
}

#if LINTRAIN_WITH_CUPTI

namespace {

std::string demangled(const std::string& name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (d == nullptr || status != 0) return name;
  std::string out(d);
  std::free(d);
  return out;
}

// The CUPTI entry points the recorder uses, resolved from the loaded library.
struct Cupti {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped_records = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push_external = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop_external = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiGetVersion) get_version = nullptr;
};

constexpr size_t kBufferBytes = 8u << 20;
constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

}  // namespace

struct KernelRecorder::Impl {
  void* handle = nullptr;
  std::string path;
  Cupti api;
  uint32_t version = 0;
  std::mutex mutex;  // CUPTI completes buffers on its own thread
  struct Raw {
    std::string name;
    int64_t start = 0, end = 0;
    uint64_t stream = 0;
    uint32_t correlation = 0;
    int64_t bytes = 0;
  };
  std::vector<Raw> kernels, raw_copies;
  std::vector<KernelRecord> copies;
  std::unordered_map<uint32_t, uint64_t> external;  // correlation id -> stage node id
  int64_t dropped = 0;
  std::vector<const StageNode*> nodes_by_id;
  int pushed = 0;

  static Impl* instance;

  void check(CUptiResult r, const char* what) const {
    if (r == CUPTI_SUCCESS) return;
    const char* s = nullptr;
    if (api.result_string != nullptr) api.result_string(r, &s);
    throw std::runtime_error(std::string("kernel trace: ") + what + " failed: " + (s ? s : "CUPTI error ") +
                             " (libcupti: " + path + ")");
  }

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer != nullptr ? kBufferBytes : 0;
    *max_records = 0;
  }

  static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    Impl* I = instance;
    if (I != nullptr && buffer != nullptr) {
      std::lock_guard<std::mutex> lock(I->mutex);
      CUpti_Activity* record = nullptr;
      while (I->api.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          I->kernels.push_back({k->name != nullptr ? std::string(k->name) : std::string("?"),
                                static_cast<int64_t>(k->start), static_cast<int64_t>(k->end), k->streamId,
                                k->correlationId, 0});
        } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
          const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          I->raw_copies.push_back({"memcpy", static_cast<int64_t>(c->start), static_cast<int64_t>(c->end), c->streamId,
                                   c->correlationId, static_cast<int64_t>(c->bytes)});
        } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
          const auto* c = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          I->raw_copies.push_back({"memset", static_cast<int64_t>(c->start), static_cast<int64_t>(c->end), c->streamId,
                                   c->correlationId, static_cast<int64_t>(c->bytes)});
        } else if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
          const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
          if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) I->external[e->correlationId] = e->externalId;
        }
      }
    }
    std::free(buffer);
  }
};

KernelRecorder::Impl* KernelRecorder::Impl::instance = nullptr;

bool KernelRecorder::compiled() { return true; }

KernelRecorder::KernelRecorder(Device device) : impl_(std::make_unique<Impl>()) {
  if (!device.is_cuda())
    throw std::runtime_error("kernel trace: needs a CUDA device (the run is on " + device.str() + ")");
  if (Impl::instance != nullptr) throw std::logic_error("kernel trace: one KernelRecorder per process");
  Impl& I = *impl_;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("LINTRAIN_CUPTI_LIB"); env != nullptr && *env != '\0') candidates.push_back(env);
  for (const char* name : {"libcupti.so.13", "libcupti.so", "libcupti.so.12"}) candidates.push_back(name);
#ifdef LINTRAIN_CUDA_LIB_DIR
  candidates.push_back(std::string(LINTRAIN_CUDA_LIB_DIR) + "/libcupti.so");
#endif
  candidates.push_back("/usr/local/cuda/lib64/libcupti.so");
  candidates.push_back("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so");
  std::string tried;
  for (const std::string& c : candidates) {
    I.handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (I.handle != nullptr) {
      I.path = c;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + c;
  }
  if (I.handle == nullptr)
    throw std::runtime_error("kernel trace: cannot load libcupti (tried " + tried +
                             "; set LINTRAIN_CUPTI_LIB to its path)");
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(I.handle, name));
    if (fn == nullptr) throw std::runtime_error(std::string("kernel trace: ") + I.path + " has no " + name);
  };
  sym(I.api.register_callbacks, "cuptiActivityRegisterCallbacks");
  sym(I.api.enable, "cuptiActivityEnable");
  sym(I.api.disable, "cuptiActivityDisable");
  sym(I.api.flush_all, "cuptiActivityFlushAll");
  sym(I.api.next_record, "cuptiActivityGetNextRecord");
  sym(I.api.dropped_records, "cuptiActivityGetNumDroppedRecords");
  sym(I.api.push_external, "cuptiActivityPushExternalCorrelationId");
  sym(I.api.pop_external, "cuptiActivityPopExternalCorrelationId");
  sym(I.api.result_string, "cuptiGetResultString");
  sym(I.api.get_version, "cuptiGetVersion");
  I.check(I.api.get_version(&I.version), "cuptiGetVersion");
  Impl::instance = &I;
  I.check(I.api.register_callbacks(&Impl::buffer_requested, &Impl::buffer_completed), "cuptiActivityRegisterCallbacks");
}

KernelRecorder::~KernelRecorder() {
  Impl& I = *impl_;
  if (Impl::instance == &I) {
    for (CUpti_ActivityKind k : kKinds) I.api.disable(k);
    I.api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    Impl::instance = nullptr;
  }
  // libcupti stays loaded: CUPTI keeps its own threads and hooks in the CUDA driver.
}

std::string KernelRecorder::library() const {
  return impl_->path + " (CUPTI API version " + std::to_string(impl_->version) + ", built against " +
         std::to_string(CUPTI_API_VERSION) + ")";
}

void KernelRecorder::begin_step() {
  Impl& I = *impl_;
  while (I.pushed > 0) leave();
  {
    std::lock_guard<std::mutex> lock(I.mutex);
    I.kernels.clear();
    I.raw_copies.clear();
    I.external.clear();
  }
  I.copies.clear();
  for (CUpti_ActivityKind k : kKinds) I.check(I.api.enable(k), "cuptiActivityEnable");
}

void KernelRecorder::enter(const StageNode& node) {
  Impl& I = *impl_;
  if (node.id >= I.nodes_by_id.size()) I.nodes_by_id.resize(std::max<size_t>(node.id + 1, 2 * I.nodes_by_id.size()));
  I.nodes_by_id[node.id] = &node;
  I.api.push_external(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, node.id);
  ++I.pushed;
}

void KernelRecorder::leave() {
  Impl& I = *impl_;
  if (I.pushed == 0) return;
  I.api.pop_external(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr);
  --I.pushed;
}

std::vector<KernelRecord> KernelRecorder::end_step() {
  Impl& I = *impl_;
  for (CUpti_ActivityKind k : kKinds) I.check(I.api.disable(k), "cuptiActivityDisable");
  I.check(I.api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  size_t dropped = 0;
  if (I.api.dropped_records(nullptr, 0, &dropped) == CUPTI_SUCCESS) I.dropped += static_cast<int64_t>(dropped);
  std::lock_guard<std::mutex> lock(I.mutex);
  auto attributed = [&](const Impl::Raw& r, bool kernel) {
    KernelRecord k;
    k.name = kernel ? demangled(r.name) : r.name;
    k.start_ns = r.start;
    k.end_ns = r.end;
    k.stream = r.stream;
    k.correlation = r.correlation;
    k.bytes = r.bytes;
    auto it = I.external.find(r.correlation);
    if (it != I.external.end() && it->second < I.nodes_by_id.size()) {
      for (const StageNode* n = I.nodes_by_id[it->second]; n != nullptr && n->parent != nullptr; n = n->parent)
        k.stages.push_back(n->path);
      std::reverse(k.stages.begin(), k.stages.end());
    }
    return k;
  };
  std::vector<KernelRecord> out;
  out.reserve(I.kernels.size());
  for (const Impl::Raw& r : I.kernels) out.push_back(attributed(r, true));
  I.copies.clear();
  for (const Impl::Raw& r : I.raw_copies) I.copies.push_back(attributed(r, false));
  I.kernels.clear();
  I.raw_copies.clear();
  I.external.clear();
  return out;
}

const std::vector<KernelRecord>& KernelRecorder::copies() const { return impl_->copies; }

int64_t KernelRecorder::dropped() const { return impl_->dropped; }

#else  // no cupti.h at build time

struct KernelRecorder::Impl {};

bool KernelRecorder::compiled() { return false; }

KernelRecorder::KernelRecorder(Device) {
  throw std::runtime_error(
      "kernel trace: this build has no CUPTI recorder (cupti.h was not found when it was built; build with the "
      "CUDA toolkit's CUPTI headers)");
}
KernelRecorder::~KernelRecorder() = default;
std::string KernelRecorder::library() const { return ""; }
void KernelRecorder::begin_step() {}
void KernelRecorder::enter(const StageNode&) {}
void KernelRecorder::leave() {}
std::vector<KernelRecord> KernelRecorder::end_step() { return {}; }
const std::vector<KernelRecord>& KernelRecorder::copies() const {
  static const std::vector<KernelRecord> none;
  return none;
}
int64_t KernelRecorder::dropped() const { return 0; }

#endif

}  // namespace lt::train
