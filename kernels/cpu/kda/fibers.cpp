// Cooperative fibers of the KDA emulator (fibers.h): one stack a fiber, a hand-written context
// switch on x86-64 (callee-saved registers, MXCSR and the x87 control word: no system call, and
// no ASan swapcontext interceptor clearing a whole stack's shadow each switch), ucontext
// elsewhere; AddressSanitizer is told of every stack switch.
#include "kernels/cpu/kda/fibers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) && !defined(LINTRAIN_EMU_UCONTEXT)
#define LT_EMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define LT_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LT_EMU_ASAN 1
#endif
#endif
#ifdef LT_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#ifdef LT_EMU_ASM_SWITCH
// lt_emu_switch(save_sp, new_sp): pushes the callee-saved registers and the floating-point
// control words on the current stack, stores its pointer in *save_sp, and resumes the context
// whose stack pointer is new_sp (saved by an earlier switch or laid out by new_fiber_stack).
extern "C" void lt_emu_switch(void** save_sp, void* new_sp);
asm(R"(
  .text
  .globl lt_emu_switch
  .type lt_emu_switch, @function
lt_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lt_emu_switch, .-lt_emu_switch
)");
#endif

namespace lt::kda::emu {
namespace {

// 1 MiB a fiber (the block programs keep register tiles of a few KiB, ASan's redzones a few
// times that; pages are committed only when touched) above one guard page, so an overflow
// faults instead of writing a neighbour.
constexpr size_t kStackBytes = size_t{1} << 20;
#ifdef LT_EMU_ASAN
constexpr size_t kTopBytes = size_t{64} << 10;  // holds fiber_main's frames, ASan's included
#endif

struct Stack {
  char* base = nullptr;  // the guard page; usable memory is [base + page, base + page + kStackBytes)
  char* bottom() const { return base + page(); }
  static size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
};

// Stacks are kept for the thread's next run_fibers (a twin launches thousands of grids).
struct StackCache {
  std::vector<Stack> stacks;
  ~StackCache() {
    for (const Stack& s : stacks) munmap(s.base, Stack::page() + kStackBytes);
  }
  void ensure(size_t n) {
    while (stacks.size() < n) {
      const size_t bytes = Stack::page() + kStackBytes;
      void* p =
          mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      mprotect(p, Stack::page(), PROT_NONE);
      stacks.push_back(Stack{static_cast<char*>(p)});
    }
  }
};
thread_local StackCache tl_stacks;

// A suspended execution context: its stack pointer (or ucontext) and ASan's fake stack.
struct Context {
#ifdef LT_EMU_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t uc{};
#endif
#ifdef LT_EMU_ASAN
  void* fake_stack = nullptr;
#endif
};

struct Fiber {
  Stack stack;
  bool done = false;
  Context ctx;
};

struct Scheduler {
  const std::function<void(int)>* body = nullptr;
  std::vector<Fiber> fibers;
  int current = -1;
  int live = 0;
  uint64_t arrivals = 0;  // barrier arrivals and fiber ends: a round without any is a deadlock
  std::exception_ptr error;
  Context main;  // the scheduler's (run_fibers' caller's stack)
  const void* main_bottom = nullptr;
  size_t main_size = 0;  // that stack's bounds, for ASan (learnt at a fiber's first start)
};
thread_local Scheduler* tl_sched = nullptr;

void fiber_main();

#ifdef LT_EMU_ASM_SWITCH
// The first switch to a fiber pops the seven words below off its stack and returns into
// fiber_main with the stack aligned as at a call (rsp = 8 mod 16).
void* new_fiber_stack(const Stack& s) {
  auto top = reinterpret_cast<uintptr_t>(s.bottom() + kStackBytes) & ~uintptr_t{15};
  auto* w = reinterpret_cast<uint64_t*>(top);
  uint32_t mxcsr = 0;
  uint16_t fpucw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  w[-1] = 0;                                        // fiber_main's return address: none
  w[-2] = reinterpret_cast<uint64_t>(&fiber_main);  // where the first switch returns to
  for (int r = 3; r <= 8; ++r) w[-r] = 0;           // rbp, rbx, r12-r15
  w[-9] = uint64_t{mxcsr} | (uint64_t{fpucw} << 32);
  return &w[-9];
}
#endif

// Saves the running context in `from` and resumes `to`, whose stack is [to_bottom, + to_size);
// returns when `from` is resumed. `from_dies`: it never will be (ASan drops its fake stack).
void switch_context(Context& from, const Context& to, const void* to_bottom, size_t to_size, bool from_dies) {
#ifdef LT_EMU_ASAN
  __sanitizer_start_switch_fiber(from_dies ? nullptr : &from.fake_stack, to_bottom, to_size);
#else
  (void)to_bottom, (void)to_size, (void)from_dies;
#endif
#ifdef LT_EMU_ASM_SWITCH
  lt_emu_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
#ifdef LT_EMU_ASAN
  __sanitizer_finish_switch_fiber(from.fake_stack, nullptr, nullptr);
#endif
}

// The running fiber yields to the scheduler (`dying`: it has ended).
void to_scheduler(Scheduler& s, bool dying) {
  switch_context(s.fibers[static_cast<size_t>(s.current)].ctx, s.main, s.main_bottom, s.main_size, dying);
}

// The scheduler runs fiber i until it yields or ends.
void to_fiber(Scheduler& s, int i) {
  Fiber& f = s.fibers[static_cast<size_t>(i)];
  s.current = i;
  switch_context(s.main, f.ctx, f.stack.bottom(), kStackBytes, false);
}

void fiber_main() {
  Scheduler& s = *tl_sched;
#ifdef LT_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &s.main_bottom, &s.main_size);
#endif
  const int i = s.current;
  try {
    (*s.body)(i);
  } catch (...) {
    if (!s.error) s.error = std::current_exception();
  }
  s.fibers[static_cast<size_t>(i)].done = true;
  --s.live;
  ++s.arrivals;
  to_scheduler(s, true);
  __builtin_unreachable();  // a finished fiber is never resumed
}

}  // namespace

void run_fibers(int n, const std::function<void(int)>& body) {
  if (tl_sched != nullptr) throw std::logic_error("run_fibers: called from a fiber");
  if (n <= 0) return;
  tl_stacks.ensure(static_cast<size_t>(n));
  Scheduler s;
  s.body = &body;
  s.fibers.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Fiber& f = s.fibers[static_cast<size_t>(i)];
    f.stack = tl_stacks.stacks[static_cast<size_t>(i)];
#ifdef LT_EMU_ASAN
    // A finished fiber never returns from fiber_main: its last frames' redzones, at the top of
    // the stack, are still poisoned when the stack is reused.
    ASAN_UNPOISON_MEMORY_REGION(f.stack.bottom() + kStackBytes - kTopBytes, kTopBytes);
#endif
#ifdef LT_EMU_ASM_SWITCH
    f.ctx.sp = new_fiber_stack(f.stack);
#else
    getcontext(&f.ctx.uc);
    f.ctx.uc.uc_stack.ss_sp = f.stack.bottom();
    f.ctx.uc.uc_stack.ss_size = kStackBytes;
    f.ctx.uc.uc_link = nullptr;
    makecontext(&f.ctx.uc, &fiber_main, 0);
#endif
  }
  s.live = n;
  tl_sched = &s;
  bool ascending = true;
  while (s.live > 0 && !s.error) {
    const uint64_t before = s.arrivals;
    for (int k = 0; k < n && !s.error; ++k) {
      const int i = ascending ? k : n - 1 - k;
      if (!s.fibers[static_cast<size_t>(i)].done) to_fiber(s, i);
    }
    ascending = !ascending;
    if (s.live > 0 && !s.error && s.arrivals == before)
      s.error = std::make_exception_ptr(std::logic_error("emulator: deadlock: " + std::to_string(s.live) + " of " +
                                                         std::to_string(n) +
                                                         " emulated threads wait at barriers that cannot complete"));
  }
  tl_sched = nullptr;
  if (s.live > 0) {
    // Abandoned fibers never unwound: their frames' redzones would poison the reused stacks.
#ifdef LT_EMU_ASAN
    for (const Fiber& f : s.fibers) ASAN_UNPOISON_MEMORY_REGION(f.stack.bottom(), kStackBytes);
#endif
  }
  if (s.error) std::rethrow_exception(s.error);
}

void FiberBarrier::arrive_and_wait() {
  Scheduler* s = tl_sched;
  if (s == nullptr) throw std::logic_error("FiberBarrier: used outside run_fibers");
  ++s->arrivals;
  if (++arrived_ == count_) {
    arrived_ = 0;
    ++phase_;
    return;
  }
  const uint64_t phase = phase_;
  while (phase_ == phase) to_scheduler(*s, false);
}

}  // namespace lt::kda::emu
