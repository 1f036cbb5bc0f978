// A CPU emulation of the CUDA C that jitdl generates (tests only; see _cuda_emu.py).
//
// Every CUDA thread of a block is a user-level fiber with its own stack; the fibers of a
// block run one after another on the calling OS thread, each until it finishes or waits
// (at __syncthreads() or a warp shuffle), and blocks run one after another. So:
//   - __shared__ is `static` (one copy, used by one block at a time), placed in its own
//     section, which is filled with 0xFF bytes (NaN, -1) before each block: a read of
//     shared memory this block did not write shows;
//   - __syncthreads() releases the block when every thread waits at the same barrier;
//     a thread that finishes while others wait, or waiting at different barriers, is a
//     reported error (CUDA: undefined behaviour; here never a hang);
//   - a warp shuffle waits for the lanes of its mask (lanes 32w..32w+31 of the linear
//     thread index), exchanges values, and waits again; the width must be a power of two;
//   - the scheduling order is fixed (threads in index order), so runs are reproducible,
//     and a missing barrier shows: thread 0 runs ahead of the others.
// With JD_EMU_CHECKED, kernel pointer parameters and local/shared arrays (rewritten by
// _cuda_emu.py into jd_ptr / jd_arr) check every index; an out-of-bounds access stops the
// launch with a message.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <limits>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static __attribute__((section("jd_emu_shared")))
#define JD_EMU_EXPORT extern "C" __attribute__((visibility("default")))

struct jd_dim3 { unsigned int x, y, z; };
static jd_dim3 threadIdx, blockIdx, blockDim, gridDim;
static const int warpSize = 32;

// ---- errors: the first one wins, the launch stops --------------------------------------
static char jd_emu_msg[2048];
static int jd_emu_failed;
static void jd_emu_abandon();            // leaves the current fiber for good

static void jd_emu_fail_at(const char* what) {
  if (!jd_emu_failed) {
    jd_emu_failed = 1;
    snprintf(jd_emu_msg, sizeof jd_emu_msg, "%s (block (%u, %u, %u), thread (%u, %u, %u))",
             what, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
  }
  jd_emu_abandon();
}

// ---- bit casts and intrinsics -----------------------------------------------------------
template <typename To, typename From> static inline To jd_bits(From v) {
  static_assert(sizeof(To) == sizeof(From), "bit cast of different sizes");
  To t;
  memcpy(&t, &v, sizeof t);
  return t;
}
static inline float __int_as_float(int v) { return jd_bits<float>(v); }
static inline float __uint_as_float(unsigned v) { return jd_bits<float>(v); }
static inline int __float_as_int(float v) { return jd_bits<int>(v); }
static inline unsigned __float_as_uint(float v) { return jd_bits<unsigned>(v); }
static inline double __longlong_as_double(long long v) { return jd_bits<double>(v); }
static inline long long __double_as_longlong(double v) { return jd_bits<long long>(v); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
static inline double rsqrt(double a) { return 1.0 / sqrt(a); }
template <typename T> static inline T __ldg(const T* p) { return *p; }

// atomics: one OS thread runs every fiber and none switches inside these, so plain code
template <typename T> static inline T atomicCAS(T* p, T cmp, T val) {
  T old = *p;
  if (old == cmp) *p = val;
  return old;
}
template <typename T> static inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T> static inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T> static inline T atomicMax(T* p, T v) { T old = *p; if (v > old) *p = v; return old; }
template <typename T> static inline T atomicMin(T* p, T v) { T old = *p; if (v < old) *p = v; return old; }
static inline void __threadfence() {}
static inline void __threadfence_block() {}

// ---- conversions: a GPU converts float to integer saturating, NaN to 0 ------------------
// (x86 gives the "integer indefinite" value instead.) _cuda_emu.py rewrites each C cast
// "((T)x" to an integer type into "(jd_cvt<T>() ->* x": ->* binds tighter than every
// binary operator and looser than the unary ones, as the cast's operand does, so the
// expression keeps its meaning.
template <typename T> struct jd_cvt {};
template <typename T, typename U> static inline T operator->*(jd_cvt<T>, U v) {
  if constexpr (std::is_floating_point<U>::value && std::is_integral<T>::value &&
                !std::is_same<T, bool>::value) {
    if (v != v) return 0;
    if (v <= (U)std::numeric_limits<T>::min()) return std::numeric_limits<T>::min();
    if (v >= (U)std::numeric_limits<T>::max()) return std::numeric_limits<T>::max();
    return (T)v;
  } else {
    return (T)v;
  }
}

// ---- checked memory (JD_EMU_CHECKED) -----------------------------------------------------
template <typename T> static T& jd_emu_oob(const char* name, long long i, long long n) {
  char what[256];
  snprintf(what, sizeof what, "out-of-bounds access %s[%lld], %s has %lld element(s)",
           name, i, name, n);
  jd_emu_fail_at(what);
  static typename std::remove_const<T>::type dummy;
  return dummy;                          // (not reached)
}

template <typename T> struct jd_ptr {   // a kernel's pointer parameter
  T* p;
  long long n;
  const char* name;
  T& operator[](long long i) const {
    if ((unsigned long long)i >= (unsigned long long)n) return jd_emu_oob<T>(name, i, n);
    return p[i];
  }
  operator T*() const { return p; }
};

template <typename T, long long N> struct jd_sarr {   // a __shared__ array: no constructor
  T a[N];
  T& operator[](long long i) {
    if ((unsigned long long)i >= (unsigned long long)N) return jd_emu_oob<T>("a shared array", i, N);
    return a[i];
  }
};

template <typename T, long long N> struct jd_arr {    // a thread's local array, poisoned
  T a[N];
  jd_arr() { memset(a, 0xFF, sizeof a); }
  T& operator[](long long i) {
    if ((unsigned long long)i >= (unsigned long long)N) return jd_emu_oob<T>("a local array", i, N);
    return a[i];
  }
};

// ---- vector accesses (jitdl's VECTOR_HELPERS) -------------------------------------------
// CUDA's vector types as plain structs; a kernel's vector load or store of a checked pointer
// checks every element and the address's alignment (a GPU faults on a misaligned one).
struct uint2 { unsigned int x, y; };
struct uint4 { unsigned int x, y, z, w; };

template <typename T> static bool jd_aligned(const jd_ptr<T>& p, long long i, int bytes) {
  return ((unsigned long long)(p.p + i) & (unsigned long long)(bytes - 1)) == 0;
}
template <typename T> static void jd_emu_vcheck(const jd_ptr<T>& p, long long i, size_t bytes) {
  if ((unsigned long long)(p.p + i) % bytes != 0) {
    char what[256];
    snprintf(what, sizeof what, "misaligned vector access of %zu bytes at %s[%lld]", bytes,
             p.name, i);
    jd_emu_fail_at(what);
  }
}
template <typename V, typename T, long long N, typename U>
static void jd_vload(jd_arr<T, N>& lanes, const jd_ptr<U>& p, long long i) {
  static_assert(sizeof(V) == N * sizeof(T), "vector type and lanes of different sizes");
  jd_emu_vcheck(p, i, sizeof(V));
  for (long long k = 0; k < N; ++k) lanes[k] = p[i + k];
}
template <typename V, typename T, long long N>
static void jd_vstore(const jd_ptr<T>& p, long long i, jd_arr<T, N>& lanes) {
  static_assert(sizeof(V) == N * sizeof(T), "vector type and lanes of different sizes");
  jd_emu_vcheck(p, i, sizeof(V));
  for (long long k = 0; k < N; ++k) p[i + k] = lanes[k];
}

// ---- fibers -------------------------------------------------------------------------------
enum { JD_READY, JD_AT_BARRIER, JD_AT_WARP, JD_DONE };

struct jd_fiber {
  void* sp;
  int state;
  int line;                 // the source line of the barrier or shuffle it waits at
  unsigned mask;            // the shuffle's lane mask
  jd_dim3 tid;
};

static jd_fiber* jd_fibers;
static int jd_nthreads;
static int jd_cur;
static void* jd_sched_sp;
static void (*jd_body)(const void*);
static const void* jd_body_arg;
static unsigned long long jd_lane_slot[1024];   // values a shuffle exchanges

extern "C" __attribute__((visibility("hidden"))) void jd_emu_swap(void** save, void* to);
#if defined(__x86_64__)
asm(R"(
  .text
  .hidden jd_emu_swap
  .type jd_emu_swap,@function
jd_emu_swap:
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
  .size jd_emu_swap, .-jd_emu_swap
)");
#else
#error "the CUDA emulator's context switch is written for x86-64"
#endif

static void jd_emu_to_scheduler() { jd_emu_swap(&jd_fibers[jd_cur].sp, jd_sched_sp); }

static void jd_emu_abandon() {
  jd_fibers[jd_cur].state = JD_DONE;
  void* ignored;
  jd_emu_swap(&ignored, jd_sched_sp);    // never resumed
  __builtin_unreachable();
}

static void jd_emu_entry() {
  jd_body(jd_body_arg);
  jd_fibers[jd_cur].state = JD_DONE;
  void* ignored;
  jd_emu_swap(&ignored, jd_sched_sp);
  __builtin_unreachable();
}

static void jd_emu_start(jd_fiber* f, char* stack_top) {
  uintptr_t top = (uintptr_t)stack_top & ~(uintptr_t)15;
  void** sp = (void**)top;
  *--sp = 0;                                 // the entry's "return address"
  *--sp = (void*)&jd_emu_entry;              // where jd_emu_swap returns to
  for (int k = 0; k < 6; ++k) *--sp = 0;     // rbp rbx r12..r15
  --sp;
  unsigned mx = 0x1F80;
  unsigned short cw = 0x037F;
  memcpy(sp, &mx, 4);
  memcpy((char*)sp + 4, &cw, 2);
  f->sp = sp;
  f->state = JD_READY;
}

#define __syncthreads() jd_emu_syncthreads(__LINE__)
static void jd_emu_syncthreads(int line) {
  jd_fibers[jd_cur].state = JD_AT_BARRIER;
  jd_fibers[jd_cur].line = line;
  jd_emu_to_scheduler();
}
static inline void __syncwarp(unsigned = 0xffffffffu) {}

static void jd_emu_warp_wait(unsigned mask, int line) {
  jd_fibers[jd_cur].state = JD_AT_WARP;
  jd_fibers[jd_cur].mask = mask;
  jd_fibers[jd_cur].line = line;
  jd_emu_to_scheduler();
}

// one exchange: lane reads lane `src` of its warp (src < 0: its own value)
template <typename T> static T jd_emu_shuffle(int line, unsigned mask, T v, int src, int width) {
  static_assert(sizeof(T) <= 8, "shuffle of a value over 8 bytes");
  int lane = jd_cur & 31;
  if (width <= 0 || width > 32 || (width & (width - 1)))
    jd_emu_fail_at("warp shuffle with a width that is not a power of two up to 32");
  if (!(mask >> lane & 1)) jd_emu_fail_at("warp shuffle by a lane that is not in its mask");
  memcpy(&jd_lane_slot[jd_cur], &v, sizeof(T));
  jd_emu_warp_wait(mask, line);
  T r = v;
  if (src >= 0) {
    if (!(mask >> src & 1)) jd_emu_fail_at("warp shuffle reads a lane that is not in its mask");
    memcpy(&r, &jd_lane_slot[(jd_cur & ~31) + src], sizeof(T));
  }
  jd_emu_warp_wait(mask, line);         // everyone has read before the slots change
  return r;
}
template <typename T>
static T jd_emu_shfl(int line, unsigned mask, T v, int src, int width = 32) {
  int lane = jd_cur & 31;
  int w = width > 0 ? width : 1;
  return jd_emu_shuffle(line, mask, v, (lane / w) * w + ((src % w + w) % w), width);
}
template <typename T>
static T jd_emu_shfl_down(int line, unsigned mask, T v, unsigned delta, int width = 32) {
  int lane = jd_cur & 31;
  int w = width > 0 ? width : 1;
  int src = (lane % w) + (int)delta < w ? lane + (int)delta : -1;
  return jd_emu_shuffle(line, mask, v, src, width);
}
template <typename T>
static T jd_emu_shfl_up(int line, unsigned mask, T v, unsigned delta, int width = 32) {
  int lane = jd_cur & 31;
  int w = width > 0 ? width : 1;
  int src = (lane % w) >= (int)delta ? lane - (int)delta : -1;
  return jd_emu_shuffle(line, mask, v, src, width);
}
template <typename T>
static T jd_emu_shfl_xor(int line, unsigned mask, T v, int lane_mask, int width = 32) {
  int lane = jd_cur & 31;
  int w = width > 0 ? width : 1;
  int src = lane ^ lane_mask;
  if (src / w != lane / w) src = -1;
  return jd_emu_shuffle(line, mask, v, src, width);
}
#define __shfl_sync(...) jd_emu_shfl(__LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) jd_emu_shfl_down(__LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) jd_emu_shfl_up(__LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) jd_emu_shfl_xor(__LINE__, __VA_ARGS__)

// the bounds of every __shared__ variable of the module (absent when there is none)
extern "C" char __start_jd_emu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_jd_emu_shared[] __attribute__((weak, visibility("hidden")));

static int jd_emu_deadlock(const char* fmt, int a, int b, int c) {
  if (!jd_emu_failed) {
    jd_emu_failed = 1;
    char what[512];
    snprintf(what, sizeof what, fmt, a, b, c);
    snprintf(jd_emu_msg, sizeof jd_emu_msg, "%s (block (%u, %u, %u))", what, blockIdx.x,
             blockIdx.y, blockIdx.z);
  }
  return -1;
}

// every thread of the current block, to completion; 0, or -1 with jd_emu_msg
static int jd_emu_block(char* stacks, long long stack_bytes) {
  int n = jd_nthreads;
  for (int t = 0; t < n; ++t) {
    jd_fiber* f = &jd_fibers[t];
    f->tid.x = t % blockDim.x;
    f->tid.y = (t / blockDim.x) % blockDim.y;
    f->tid.z = t / (blockDim.x * blockDim.y);
    jd_emu_start(f, stacks + (long long)(t + 1) * stack_bytes);
  }
  if (__start_jd_emu_shared && __stop_jd_emu_shared > __start_jd_emu_shared)
    memset(__start_jd_emu_shared, 0xFF, __stop_jd_emu_shared - __start_jd_emu_shared);
  for (;;) {
    for (int t = 0; t < n; ++t) {
      if (jd_fibers[t].state != JD_READY) continue;
      jd_cur = t;
      threadIdx = jd_fibers[t].tid;
      jd_emu_swap(&jd_sched_sp, jd_fibers[t].sp);
      if (jd_emu_failed) return -1;
    }
    int done = 0, at_barrier = 0, at_warp = 0, barrier_line = -1, first_done = -1;
    for (int t = 0; t < n; ++t) {
      int s = jd_fibers[t].state;
      if (s == JD_DONE) { ++done; if (first_done < 0) first_done = t; }
      if (s == JD_AT_BARRIER) {
        if (at_barrier++ == 0) barrier_line = jd_fibers[t].line;
        else if (jd_fibers[t].line != barrier_line)
          return jd_emu_deadlock("threads wait at different __syncthreads() (source lines %d "
                                 "and %d, thread %d)", barrier_line, jd_fibers[t].line, t);
      }
      if (s == JD_AT_WARP) ++at_warp;
    }
    if (done == n) return 0;
    int released = 0;
    for (int w = 0; at_warp && w * 32 < n; ++w) {
      int waiting = -1;
      for (int l = 0; l < 32 && w * 32 + l < n; ++l)
        if (jd_fibers[w * 32 + l].state == JD_AT_WARP) { waiting = w * 32 + l; break; }
      if (waiting < 0) continue;
      unsigned mask = jd_fibers[waiting].mask;
      int line = jd_fibers[waiting].line;
      for (int l = 0; l < 32; ++l) {
        if (!(mask >> l & 1)) continue;
        int t = w * 32 + l;
        if (t >= n)
          return jd_emu_deadlock("a warp shuffle's mask names lane %d of warp %d, past the "
                                 "block's %d threads", l, w, n);
        const jd_fiber* f = &jd_fibers[t];
        if (f->state != JD_AT_WARP)
          return jd_emu_deadlock("thread %d waits at a warp shuffle (line %d) for thread %d, "
                                 "which finished or waits at __syncthreads()",
                                 waiting, line, t);
        if (f->mask != mask || f->line != line)
          return jd_emu_deadlock("threads %d and %d of a warp wait at different shuffles or "
                                 "masks (line %d)", waiting, t, line);
      }
      for (int l = 0; l < 32; ++l)
        if (mask >> l & 1) jd_fibers[w * 32 + l].state = JD_READY;
      released = 1;
    }
    if (released) continue;
    if (at_warp)
      return jd_emu_deadlock("threads wait at warp shuffles that cannot complete (%d at "
                             "shuffles, %d at __syncthreads(), %d done)", at_warp, at_barrier,
                             done);
    if (done)
      return jd_emu_deadlock("thread %d finished while %d thread(s) wait at __syncthreads() "
                             "(line %d): a barrier that not every thread reaches",
                             first_done, at_barrier, barrier_line);
    for (int t = 0; t < n; ++t) jd_fibers[t].state = JD_READY;
  }
}

// cfg: grid x y z, block x y z, stack bytes per thread
static int jd_emu_run(const long long* cfg, void (*body)(const void*), const void* arg,
                      char* msg, int msg_len) {
  static char* stacks;
  static long long stacks_bytes;
  static jd_fiber fibers[1024];
  long long n = cfg[3] * cfg[4] * cfg[5];
  long long stack_bytes = (cfg[6] + 4095) & ~4095LL;
  if (n < 1 || n > 1024) {
    snprintf(msg, msg_len, "a block of %lld threads", n);
    return -1;
  }
  if (stacks_bytes < n * stack_bytes) {
    if (stacks) munmap(stacks, stacks_bytes);
    stacks_bytes = n * stack_bytes;
    stacks = (char*)mmap(0, stacks_bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stacks == MAP_FAILED) {
      stacks = 0;
      stacks_bytes = 0;
      snprintf(msg, msg_len, "could not map %lld bytes of fiber stacks", n * stack_bytes);
      return -1;
    }
  }
  jd_fibers = fibers;
  jd_nthreads = (int)n;
  jd_body = body;
  jd_body_arg = arg;
  jd_emu_failed = 0;
  gridDim = jd_dim3{(unsigned)cfg[0], (unsigned)cfg[1], (unsigned)cfg[2]};
  blockDim = jd_dim3{(unsigned)cfg[3], (unsigned)cfg[4], (unsigned)cfg[5]};
  for (unsigned z = 0; z < gridDim.z; ++z)
    for (unsigned y = 0; y < gridDim.y; ++y)
      for (unsigned x = 0; x < gridDim.x; ++x) {
        blockIdx = jd_dim3{x, y, z};
        if (jd_emu_block(stacks, stack_bytes) != 0) {
          snprintf(msg, msg_len, "%s", jd_emu_msg);
          return -1;
        }
      }
  return 0;
}

// ---- launching a kernel from a table of argument slots ------------------------------------
struct jd_slot {
  unsigned long long bits;    // a pointer, or a scalar's bytes
  long long n;                // a pointer's element count
  const char* name;
};
template <typename T> struct jd_arg_of {
  static T get(const jd_slot* s) { T t; memcpy(&t, &s->bits, sizeof t); return t; }
};
template <typename T> struct jd_arg_of<jd_ptr<T>> {
  static jd_ptr<T> get(const jd_slot* s) { return jd_ptr<T>{(T*)s->bits, s->n, s->name}; }
};
template <typename... A, size_t... I>
static void jd_emu_call(void (*f)(A...), const jd_slot* s, std::index_sequence<I...>) {
  f(jd_arg_of<A>::get(s + I)...);
}
template <typename... A> static void jd_emu_call(void (*f)(A...), const jd_slot* s) {
  jd_emu_call(f, s, std::index_sequence_for<A...>{});
}
template <typename... A> static constexpr int jd_emu_arity(void (*)(A...)) {
  return sizeof...(A);
}
