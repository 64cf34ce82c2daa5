/* tests/sim/cuda_sim.h — the CUDA built-ins that dpc's CUDA dialect uses,
 * for compiling that exact source for the host as C++ (g++ or clang++) and
 * running it under tests/sim/sim.cpp. Include it before the .cu text, and
 * put SIM_KERNEL(name) after it for each kernel to launch (sim.h).
 *
 * Thread and block indices are thread_local globals (one launch per OS
 * thread may run at once) that the runner sets before it resumes a thread's
 * fiber; every built-in that synchronises (barrier, warp shuffle, vote) is an
 * out-of-line call into the runner, so the compiler reloads them (and any
 * shared data) after it. Shared memory is `static thread_local`: blocks run
 * one after another, so one copy per OS thread serves them all (like on a
 * GPU, a block must not rely on what the previous one left there), and two
 * threads that launch at once do not share it.
 *
 * Shared arrays are declared DPC_SHARED_ARRAY(type, name, n) (codegen's
 * prelude defines it as plain `__shared__ type name[n]` unless it is defined
 * already): here it is an object whose every element access is bounds-checked
 * and checked for races within one barrier interval (sim.h). */
#ifndef DPC_CUDA_SIM_H
#define DPC_CUDA_SIM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>
#include <utility>

#include "sim.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__    __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static thread_local
/* __restrict__ is already a g++ / clang++ keyword. */

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
};
extern thread_local uint3 threadIdx, blockIdx;
extern thread_local dim3 blockDim, gridDim;
static const int warpSize = 32;

/* ---- bit casts ---------------------------------------------------------- */
template <typename To, typename From> static inline To sim_bits_(From f) {
    static_assert(sizeof(To) == sizeof(From), "bit cast between sizes");
    To t;
    memcpy(&t, &f, sizeof t);
    return t;
}
static inline float __int_as_float(int v) { return sim_bits_<float>(v); }
static inline float __uint_as_float(unsigned v) { return sim_bits_<float>(v); }
static inline int __float_as_int(float v) { return sim_bits_<int>(v); }
static inline unsigned __float_as_uint(float v) { return sim_bits_<unsigned>(v); }
static inline double __longlong_as_double(long long v) { return sim_bits_<double>(v); }
static inline long long __double_as_longlong(double v) { return sim_bits_<long long>(v); }

/* ---- math: <math.h> gives sqrtf, sqrt, exp, expf, log, ... as on the device
 * (glibc declares __expf and __logf itself);
 * CUDA's overloaded min/max and the fast intrinsics the dialect may use. */
#define SIM_MINMAX_(T)                                      \
    static inline T min(T a, T b) { return a < b ? a : b; } \
    static inline T max(T a, T b) { return a > b ? a : b; }
SIM_MINMAX_(int)
SIM_MINMAX_(unsigned)
SIM_MINMAX_(long long)
SIM_MINMAX_(unsigned long long)
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
#undef SIM_MINMAX_
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }

/* ---- checked shared arrays ------------------------------------------------
 * a[i] checks i against n (a launch error naming the array, the index and
 * its size) and gives a reference whose reads (conversion to T) and writes
 * (=, +=, -=, *=, /=) sim_shared_access records for race detection. The
 * raw pointer (&a[i], or a itself where a T * is wanted, e.g. for atomicAdd)
 * escapes the checks. */
template <typename T, size_t N> struct sim_shared;
template <typename T, size_t N> struct sim_ref {
    sim_shared<T, N> *a;
    size_t i;
    operator T() const {
        a->touch(i, 0);
        return a->v[i];
    }
    T operator=(T x) const {
        a->touch(i, 1);
        return a->v[i] = x;
    }
    T operator=(const sim_ref &o) const { return *this = (T)o; }
#define SIM_OPASSIGN_(op)                               \
    template <typename U> T operator op##=(U x) const { \
        T r = (T) * this op x;                          \
        return *this = r;                               \
    }
    SIM_OPASSIGN_(+)
    SIM_OPASSIGN_(-)
    SIM_OPASSIGN_(*)
    SIM_OPASSIGN_(/)
#undef SIM_OPASSIGN_
    T *operator&() const { return &a->v[i]; }
};
template <typename T, size_t N> struct sim_shared {
    T v[N];
    const char *name;
    sim_shadow *shadow;
    explicit sim_shared(const char *nm) : v(), name(nm), shadow(nullptr) {}
    ~sim_shared() { sim_shadow_free(shadow); }
    sim_shared(const sim_shared &) = delete;
    sim_shared &operator=(const sim_shared &) = delete;
    void touch(size_t i, int write) { sim_shared_access(&shadow, name, N, (long long)i, write); }
    template <typename I> sim_ref<T, N> operator[](I i) {
        static_assert(std::is_integral<I>::value, "shared array index of integer type");
        long long k = (long long)i;
        if (k < 0 || (unsigned long long)k >= N) sim_shared_access(&shadow, name, N, k, -1);
        return sim_ref<T, N>{this, (size_t)k};
    }
    operator T *() { return v; }
};
template <typename T> struct sim_value_ { typedef T type; };
template <typename T, size_t N> struct sim_value_<sim_ref<T, N>> { typedef T type; };
#define DPC_SHARED_ARRAY(type, name, n) static thread_local sim_shared<type, (n)> name(#name)

/* ---- barriers, warp shuffles and votes ------------------------------------ */
static inline void __syncthreads(void) { sim_syncthreads(); }
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    sim_warp_op(SIM_SYNCWARP, mask, 0, 0, 32);
}
static inline unsigned __activemask(void) { return sim_activemask(); }
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)sim_warp_op(SIM_BALLOT, mask, pred != 0, 0, 32);
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) {
    return (__ballot_sync(mask, pred) & mask) == mask;
}
template <typename T> static inline T sim_shfl_(int op, unsigned mask, T v, int arg, int width) {
    static_assert(std::is_arithmetic<T>::value && sizeof(T) <= 8, "shuffle of a scalar");
    unsigned long long bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = sim_warp_op(op, mask, bits, arg, width);
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}
/* The value type of a shuffle: a shared-array element (sim_ref) is read. */
#define SIM_V_ typename sim_value_<T>::type
template <typename T>
static inline SIM_V_ __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return sim_shfl_<SIM_V_>(SIM_SHFL, mask, v, src, width);
}
template <typename T>
static inline SIM_V_ __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return sim_shfl_<SIM_V_>(SIM_SHFL_UP, mask, v, (int)delta, width);
}
template <typename T>
static inline SIM_V_ __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return sim_shfl_<SIM_V_>(SIM_SHFL_DOWN, mask, v, (int)delta, width);
}
template <typename T>
static inline SIM_V_ __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return sim_shfl_<SIM_V_>(SIM_SHFL_XOR, mask, v, lane_mask, width);
}
#undef SIM_V_

/* ---- atomics: blocks run one after another and threads switch only at the
 * built-ins above, so a plain read-modify-write is atomic here. */
template <typename T> static inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
template <typename T> static inline T atomicSub(T *p, T v) {
    T old = *p;
    *p = old - v;
    return old;
}
template <typename T> static inline T atomicExch(T *p, T v) {
    T old = *p;
    *p = v;
    return old;
}
template <typename T> static inline T atomicMin(T *p, T v) {
    T old = *p;
    *p = v < old ? v : old;
    return old;
}
template <typename T> static inline T atomicMax(T *p, T v) {
    T old = *p;
    *p = v > old ? v : old;
    return old;
}
template <typename T> static inline T atomicCAS(T *p, T cmp, T v) {
    T old = *p;
    if (old == cmp) *p = v;
    return old;
}
static inline unsigned atomicInc(unsigned *p, unsigned limit) {
    unsigned old = *p;
    *p = old >= limit ? 0 : old + 1;
    return old;
}

/* ---- the launch entry: SIM_KERNEL(name) after the kernel's definition ----- */
template <typename... A, size_t... I>
static inline void sim_call_(void (*f)(A...), void **args, std::index_sequence<I...>) {
    f(*static_cast<typename std::remove_cv<A>::type *>(args[I])...);
}
template <typename... A> static inline void sim_call(void (*f)(A...), void **args) {
    sim_call_(f, args, std::index_sequence_for<A...>{});
}
/* The byte size of each parameter, then 0: how many bytes of each
 * kernelParams entry a launch copies (tests/fake). */
template <typename... A> struct sim_sizes_ {
    static constexpr size_t v[] = {sizeof(A)..., 0};
};
template <typename... A> static inline const size_t *sim_sizes(void (*)(A...)) {
    return sim_sizes_<A...>::v;
}
#define SIM_KERNEL(name)                                                    \
    extern "C" void sim_entry_##name(void **args) { sim_call(name, args); } \
    extern "C" const size_t *sim_sizes_##name(void) { return sim_sizes(name); }

#endif
