#include "kernels/launch.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "allocator/stage_tag.h"

namespace lt {
namespace {

struct Atlas {
  std::mutex mutex;
  // std::map nodes never move, so a thread may cache a pointer to its counter.
  std::map<std::string, std::unique_ptr<std::atomic<int64_t>>> counters;
  StageListener listener;
  // Set while a listener is installed: a stage scope without a listener reads this flag
  // and nothing else (no lock, no copy), so untimed steps pay one relaxed load per scope.
  std::atomic<bool> has_listener{false};
};
Atlas& atlas() {
  static Atlas a;
  return a;
}

struct ThreadStage {
  std::string path;
  std::atomic<int64_t>* counter = nullptr;  // counter of `path`, cached until the path changes
};
thread_local ThreadStage t_stage;

std::atomic<int64_t>* counter_for(const std::string& path) {
  Atlas& a = atlas();
  std::lock_guard<std::mutex> lock(a.mutex);
  auto& slot = a.counters[path.empty() ? std::string("(none)") : path];
  if (!slot) slot = std::make_unique<std::atomic<int64_t>>(0);
  return slot.get();
}

void notify(const std::string& path, bool entering) {
  Atlas& a = atlas();
  if (!a.has_listener.load(std::memory_order_acquire)) return;
  StageListener l;
  {
    std::lock_guard<std::mutex> lock(a.mutex);
    l = a.listener;
  }
  if (l) l(path, entering);
}

}  // namespace

const std::string& current_stage() { return t_stage.path; }

StageScope::StageScope(std::string_view name) : previous_length_(t_stage.path.size()) {
  if (!t_stage.path.empty()) t_stage.path += '/';
  t_stage.path.append(name.data(), name.size());
  t_stage.counter = nullptr;
  alloc::set_stage_tag(t_stage.path.c_str());
  notify(t_stage.path, true);
}

StageScope::~StageScope() {
  notify(t_stage.path, false);
  t_stage.path.resize(previous_length_);
  t_stage.counter = nullptr;
  alloc::set_stage_tag(t_stage.path.c_str());
}

void count_launch(int64_t n) {
  if (t_stage.counter == nullptr) t_stage.counter = counter_for(t_stage.path);
  t_stage.counter->fetch_add(n, std::memory_order_relaxed);
}

std::vector<StageLaunches> launch_atlas() {
  Atlas& a = atlas();
  std::lock_guard<std::mutex> lock(a.mutex);
  std::vector<StageLaunches> out;
  for (auto& [name, c] : a.counters) {
    int64_t n = c->load(std::memory_order_relaxed);
    if (n != 0) out.push_back({name, n});
  }
  return out;
}

// Counters are zeroed, never erased, so pointers cached by threads stay valid.
void reset_launch_atlas() {
  Atlas& a = atlas();
  std::lock_guard<std::mutex> lock(a.mutex);
  for (auto& [name, c] : a.counters) c->store(0, std::memory_order_relaxed);
}

int64_t total_launches() {
  int64_t total = 0;
  for (auto& s : launch_atlas()) total += s.launches;
  return total;
}

void set_stage_listener(StageListener listener) {
  Atlas& a = atlas();
  std::lock_guard<std::mutex> lock(a.mutex);
  a.listener = std::move(listener);
  a.has_listener.store(static_cast<bool>(a.listener), std::memory_order_release);
}

}  // namespace lt
