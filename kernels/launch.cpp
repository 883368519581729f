#include "kernels/launch.h"

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "allocator/stage_tag.h"

namespace lt {
namespace {

// A StageNode with what only this file needs: the launch counter of its path (shared by
// nodes of the same path, looked up the first time the node counts a launch) and its
// children (touched only by the thread that owns the tree).
struct Node : StageNode {
  std::atomic<int64_t>* counter = nullptr;
  std::vector<Node*> children;
};

struct Hook {
  StageHook fn = nullptr;
  void* context = nullptr;
};

struct Atlas {
  std::mutex mutex;
  // std::map nodes never move, so a node may cache a pointer to its counter.
  std::map<std::string, std::unique_ptr<std::atomic<int64_t>>> counters;
  std::deque<Node> nodes;  // every thread's tree; deque elements never move
  uint32_t next_id = 1;
  // The installed hook, read without a lock: a hook object is never freed (one per distinct
  // hook and context; they are few), so a scope that read the pointer can still call it.
  std::atomic<const Hook*> hook{nullptr};
  std::deque<Hook> hooks;
  // The std::function listener behind set_stage_listener; old ones are kept for the same reason.
  std::deque<StageListener> listeners;
};
Atlas& atlas() {
  static Atlas a;
  return a;
}

Node* new_node(Node* parent, std::string_view name) {
  Atlas& a = atlas();
  std::lock_guard<std::mutex> lock(a.mutex);
  Node& n = a.nodes.emplace_back();
  n.parent = parent;
  n.name.assign(name.data(), name.size());
  if (parent != nullptr) {
    n.id = a.next_id++;
    n.path = parent->path.empty() ? n.name : parent->path + "/" + n.name;
  }
  return &n;
}

thread_local Node* t_node = nullptr;
thread_local uint64_t t_device_work =
    0;  // launches and other device work enqueued by this thread  // this thread's current scope (its root outside every scope)

Node* current() {
  if (t_node == nullptr) t_node = new_node(nullptr, "");
  return t_node;
}

Node* child_of(Node* parent, std::string_view name) {
  for (Node* c : parent->children)
    if (c->name == name) return c;
  Node* c = new_node(parent, name);
  parent->children.push_back(c);
  return c;
}

std::atomic<int64_t>* counter_for(const std::string& path) {
  Atlas& a = atlas();
  std::lock_guard<std::mutex> lock(a.mutex);
  auto& slot = a.counters[path.empty() ? std::string("(none)") : path];
  if (!slot) slot = std::make_unique<std::atomic<int64_t>>(0);
  return slot.get();
}

inline void notify([[maybe_unused]] const Node& node, [[maybe_unused]] bool entering) {
#if LINTRAIN_STAGE_TIMERS
  const Hook* h = atlas().hook.load(std::memory_order_acquire);
  if (h != nullptr) h->fn(h->context, node, entering);
#endif
}

void call_listener(void* context, const StageNode& node, bool entering) {
  (*static_cast<const StageListener*>(context))(node.path, entering);
}

}  // namespace

const std::string& current_stage() { return current()->path; }
const StageNode& current_stage_node() { return *current(); }

StageScope::StageScope(std::string_view name) : previous_(current()) {
  Node* n = child_of(static_cast<Node*>(previous_), name);
  t_node = n;
  alloc::set_stage_tag(n->path.c_str());
  notify(*n, true);
}

StageScope::~StageScope() {
  notify(*t_node, false);
  t_node = static_cast<Node*>(previous_);
  alloc::set_stage_tag(t_node->path.c_str());
}

void note_device_work() { ++t_device_work; }

uint64_t device_work_count() { return t_device_work; }

void count_launch(int64_t n) {
  t_device_work += static_cast<uint64_t>(n);
  Node* node = current();
  if (node->counter == nullptr) node->counter = counter_for(node->path);
  node->counter->fetch_add(n, std::memory_order_relaxed);
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

// Counters are zeroed, never erased, so pointers cached by nodes stay valid.
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

void set_stage_hook(StageHook hook, void* context) {
  Atlas& a = atlas();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (hook == nullptr) {
    a.hook.store(nullptr, std::memory_order_release);
    return;
  }
  const Hook* h = nullptr;
  for (const Hook& k : a.hooks)  // a timer sets the same hook at every timed step: reuse it
    if (k.fn == hook && k.context == context) h = &k;
  if (h == nullptr) h = &a.hooks.emplace_back(Hook{hook, context});
  a.hook.store(h, std::memory_order_release);
}

bool stage_hook_installed() { return atlas().hook.load(std::memory_order_acquire) != nullptr; }

void set_stage_listener(StageListener listener) {
  if (!listener) {
    set_stage_hook(nullptr, nullptr);
    return;
  }
  StageListener* kept = nullptr;
  {
    Atlas& a = atlas();
    std::lock_guard<std::mutex> lock(a.mutex);
    kept = &a.listeners.emplace_back(std::move(listener));
  }
  set_stage_hook(&call_listener, kept);
}

}  // namespace lt
