/* A few threads of our own beside MLX's CPU stream thread, for our CPU primitives' larger loops
 * (the 4-bit GEMV's output columns, the dequantized tiles, a recurrence step's panels): a task on
 * the stream thread hands out parts of a range and takes the first itself (cpu_parallel_for).
 *
 * The threads start on first use (cpu_pool_start, called where a primitive is built, so a failure
 * is the bridge's error rather than a task's), one fewer than the cores the process may run on and
 * at most 7, and are never stopped (the library is linked -z nodelete: they outlive sessions). One
 * range is shared at a time; a forked child, which has none of the threads, computes alone. */
#include "mlx/bridge_internal.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <sched.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define POOL_PAUSE() _mm_pause()
#else
#define POOL_PAUSE() ((void)0)
#endif

namespace mlxb_detail {

namespace {

/* The pool: the caller takes the first share and waits for the rest, one range at a time (a
 * mutex). The work is a plain function and a pointer to a context the pool does not own
 * (column_fn, not std::function): nothing to allocate inside a task.
 *
 * Both sides spin a little before they sleep: a decode step runs about 60 products of 20-50 us
 * each, a few microseconds apart, and waking a sleeping thread through the kernel took 5-20 us of
 * each on this project's 2-core machines (with the wakeups, 15% of a step's samples). A helper
 * spins up to HELPER_SPIN_NS for the next product (then sleeps on cv_), the caller up to
 * CALLER_SPIN_NS for the helpers' shares (then on done_cv_); both yield the core while they spin. */
class column_pool {
 public:
  static column_pool &get() {
    static column_pool *pool = new column_pool(); /* never destroyed: threads outlive static teardown */
    return *pool;
  }

  void run(int64_t n, column_fn fn, const void *ctx) {
    int helpers = static_cast<int>(workers_.size());
    /* a forked child has none of the helpers (fork copies the calling thread only) */
    if (helpers == 0 || n < 256 || getpid() != owner_pid_) {
      fn(ctx, 0, n);
      return;
    }
    std::lock_guard<std::mutex> one(run_mutex_);
    int64_t parts = helpers + 1, step = (n + parts - 1) / parts;
    bool wake;
    {
      std::lock_guard<std::mutex> lk(m_);
      fn_ = fn;
      ctx_ = ctx;
      step_ = step;
      n_ = n;
      pending_.store(helpers, std::memory_order_relaxed);
      caller_cpu_.store(sched_getcpu(), std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      wake = sleepers_ > 0;
    }
    if (wake) cv_.notify_all();
    fn(ctx, 0, std::min(n, step));
    if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; }, CALLER_SPIN_NS)) {
      std::unique_lock<std::mutex> lk(m_);
      caller_sleeps_ = true;
      done_cv_.wait(lk, [&] { return pending_.load(std::memory_order_acquire) == 0; });
      caller_sleeps_ = false;
    }
    std::lock_guard<std::mutex> lk(m_);
    fn_ = nullptr;
    ctx_ = nullptr;
  }

 private:
  enum : int64_t { HELPER_SPIN_NS = 200000, CALLER_SPIN_NS = 2000000 };

  column_pool() : owner_pid_(getpid()) {
    int helpers = std::min(usable_cores(), 8) - 1;
    for (int i = 0; i < helpers; i++) {
      try {
        workers_.emplace_back([this, i] { loop(i + 1); });
      } catch (...) {
        break; /* fewer helpers: the product still completes */
      }
    }
    for (auto &t : workers_) t.detach();
  }

  /* The cores this process may run on (its affinity mask), not the machine's. */
  static int usable_cores() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }

  /* true once done() holds, false after about ns nanoseconds of asking */
  template <typename Done>
  static bool spin_until(Done done, int64_t ns) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0;; i++) {
      if (done()) return true;
      if ((i & 63) != 63) {
        POOL_PAUSE();
        continue;
      }
      if (std::chrono::steady_clock::now() - start > std::chrono::nanoseconds(ns)) return false;
      sched_yield(); /* a core's other thread (ORT's, MLX's) may need it more */
    }
  }

  void loop(int part) {
    uint64_t seen = 0;
    for (;;) {
      bool woken = false;
      if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; }, HELPER_SPIN_NS)) {
        std::unique_lock<std::mutex> lk(m_);
        sleepers_++;
        cv_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        sleepers_--;
        woken = true;
      }
      column_fn fn;
      const void *ctx;
      int64_t lo, hi;
      {
        std::lock_guard<std::mutex> lk(m_);
        seen = generation_.load(std::memory_order_acquire);
        fn = fn_;
        ctx = ctx_;
        lo = std::min(n_, part * step_);
        hi = std::min(n_, lo + step_);
      }
      if (fn && lo < hi) {
        if (woken) leave_cpu_of_caller();
        fn(ctx, lo, hi);
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
      std::lock_guard<std::mutex> lk(m_); /* the caller sleeps only after checking pending_ under m_ */
      if (caller_sleeps_) done_cv_.notify_one();
    }
  }

  /* A helper woken from its sleep by the caller may be placed on the caller's core (the kernel puts a wakee near
   * its waker while the other cores look busy: the host's thread that just asked for the product is
   * still running there). The two then share one core for milliseconds, until the kernel balances
   * them, and every product of those Runs takes twice as long (an LSTM's Runs right after a pause
   * on the 2-core Xeon: 1.5 ms, against 0.8 once apart). So a helper woken on the caller's core
   * moves itself off it: its affinity for a moment without that core (the kernel migrates it then),
   * then as it was. Only after a sleep: checked before every product, the moves cost a decode step
   * (60 products, three threads busy on two cores) more than they saved. */
  void leave_cpu_of_caller() {
    const int caller = caller_cpu_.load(std::memory_order_relaxed);
    if (caller < 0 || caller >= CPU_SETSIZE || sched_getcpu() != caller) return;
    cpu_set_t allowed, others;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    others = allowed;
    CPU_CLR(caller, &others);
    if (CPU_COUNT(&others) == 0 || sched_setaffinity(0, sizeof others, &others) != 0) return;
    sched_setaffinity(0, sizeof allowed, &allowed);
  }

  const pid_t owner_pid_;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_, m_;
  std::condition_variable cv_, done_cv_;
  column_fn fn_ = nullptr;
  const void *ctx_ = nullptr;
  int64_t step_ = 0, n_ = 0;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> caller_cpu_{-1}; /* where the caller of the current range runs (sched_getcpu) */
  int sleepers_ = 0;          /* under m_ */
  bool caller_sleeps_ = false; /* under m_ */
};

} // namespace

void cpu_pool_start() { column_pool::get(); }

void cpu_parallel_for(int64_t n, column_fn fn, const void *ctx) { column_pool::get().run(n, fn, ctx); }

} // namespace mlxb_detail
