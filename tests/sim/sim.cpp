/* tests/sim/sim.cpp — runs a CUDA kernel compiled for the host (sim.h).
 *
 * Design: one ucontext fiber per thread of a block (HIP-CPU's approach), not
 * loop fission at barriers (CuPBoP's). A fiber needs no transformation of the
 * kernel source, so what runs is exactly the text NVRTC compiles, and it
 * works for any control flow: a barrier inside a loop, a branch or a helper
 * function. Fission would need a compiler pass over our source and cannot
 * even express the divergent barrier we want to report. The price is a
 * context switch per thread per barrier, which the tests can afford. On
 * x86-64 the switch is six pushes and a stack swap (sim_switch below):
 * glibc's swapcontext saves the signal mask with a system call on every
 * switch, which was half of a simulated training step's time.
 *
 * Scheduling is deterministic: the threads of a block run in order of their
 * linear id, each until it exits or blocks (at __syncthreads or a warp
 * operation). A warp operation completes as soon as every lane its mask names
 * has arrived at one; only the 32 threads of that warp take part. When no
 * thread can run, either every thread waits at the barrier (all go on), or
 * every thread has exited (the block is done), or the kernel is wrong and
 * the launch fails with a message. Blocks run one after another.
 *
 * All of the runner's state is thread_local, so OS threads can run launches
 * at the same time (tests/fake drives each replica from its own thread).
 *
 * Race detection (DPC_SHARED_ARRAY, sim.h): every element of a checked
 * shared array remembers its last write and, per thread, its last read in
 * the current barrier interval (an epoch: a new one at each block start and
 * each barrier), each with the number of warp operations completed by then.
 * Two accesses of different threads in one epoch are ordered only when both
 * are lanes of one warp and a warp operation that both took part in
 * completed in between: a thread's pair[l] holds the number of the last
 * such operation it shared with lane l. */
#include "sim.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <new>
#include <vector>
#include <ucontext.h>
#include <unistd.h>

#include "cuda_sim.h"

#if defined(__SANITIZE_ADDRESS__)
#define SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_ASAN 1
#endif
#endif
#ifdef SIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

thread_local uint3 threadIdx, blockIdx;
thread_local dim3 blockDim, gridDim;

namespace {

enum { READY, BARRIER, WARP, EXITED };
const char *const op_names[SIM_NOPS] = {"__shfl_sync",     "__shfl_up_sync", "__shfl_down_sync",
                                        "__shfl_xor_sync", "__ballot_sync",  "__syncwarp"};

/* A suspended execution context: where to switch back to. */
#if defined(__x86_64__)
struct Context {
    void *sp; /* the saved stack pointer; callee-saved registers lie above it */
};
/* Saves the callee-saved registers and the x87 / SSE control words on the
 * current stack, stores the stack pointer in *from, and continues on `to`
 * (a context saved the same way, or a fresh stack from make_context). */
extern "C" void sim_switch(void **from, void *to);
asm(".text\n"
    ".globl sim_switch\n"
    ".type sim_switch, @function\n"
    "sim_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    subq $8, %rsp\n"
    "    stmxcsr (%rsp)\n"
    "    fnstcw 4(%rsp)\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    ldmxcsr (%rsp)\n"
    "    fldcw 4(%rsp)\n"
    "    addq $8, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size sim_switch, .-sim_switch\n");
static void switch_to(Context *from, Context *to) { sim_switch(&from->sp, to->sp); }
/* A context that starts entry() on [stack, stack + size): the frame
 * sim_switch pops (control words, six registers, then entry as the return
 * address), placed so that entry starts as if called (rsp = 8 mod 16). */
static void make_context(Context *c, char *stack, size_t size, void (*entry)()) {
    uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
    void **sp = (void **)(top - 16); /* entry's own return slot above: never used */
    sp[1] = nullptr;
    sp[0] = (void *)entry;
    sp -= 6;
    memset(sp, 0, 6 * sizeof *sp);
    sp -= 1;
    unsigned words[2];
    __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(words[0]), "=m"(words[1]));
    memcpy(sp, words, sizeof words);
    c->sp = sp;
}
#else
struct Context {
    ucontext_t uc;
};
static void switch_to(Context *from, Context *to) { swapcontext(&from->uc, &to->uc); }
static void make_context(Context *c, char *stack, size_t size, void (*entry)()) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, entry, 0);
}
#endif

struct Fiber {
    Context ctx;
    char *stack; /* usable part, above a guard page */
    int state;
    int op, arg, width;
    unsigned mask;
    unsigned long long value, result;
    void *fake_stack;            /* ASan's fake stack while switched out */
    unsigned long long pair[32]; /* the last warp operation shared with each lane */
};

struct Sim {
    bool active, failed;
    char msg[512];
    const char *name;
    sim_entry fn;
    void **args;
    Fiber *f;
    unsigned n, cur;
    Context sched;
    const void *sched_bottom; /* the scheduler's stack, for ASan */
    size_t sched_size;
    unsigned long long seq; /* warp operations completed */
};
thread_local Sim S;
/* Barrier intervals, never reset: shared-array shadows outlive a launch. */
thread_local unsigned long long epoch = 1;

const size_t stack_size = 256 * 1024;

void start_switch(void **fake, const void *bottom, size_t size) {
#ifdef SIM_ASAN
    __sanitizer_start_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}
void finish_switch(void *fake, const void **bottom, size_t *size) {
#ifdef SIM_ASAN
    __sanitizer_finish_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}

void set_thread(unsigned t) {
    threadIdx.x = t % blockDim.x;
    threadIdx.y = t / blockDim.x % blockDim.y;
    threadIdx.z = t / (blockDim.x * blockDim.y);
}

/* Called on the running fiber: the launch fails with this message. */
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char *fmt, ...) {
    if (S.failed) return;
    S.failed = true;
    int k = snprintf(S.msg, sizeof S.msg, "%s: block (%u,%u,%u): ", S.name, blockIdx.x, blockIdx.y,
                     blockIdx.z);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < sizeof S.msg) vsnprintf(S.msg + k, sizeof S.msg - k, fmt, ap);
    va_end(ap);
}

/* From the running fiber back to the scheduler. */
void yield(bool exiting) {
    Fiber &f = S.f[S.cur];
    start_switch(exiting ? nullptr : &f.fake_stack, S.sched_bottom, S.sched_size);
    switch_to(&f.ctx, &S.sched);
    finish_switch(f.fake_stack, &S.sched_bottom, &S.sched_size);
}

void fiber_main() {
    finish_switch(nullptr, &S.sched_bottom, &S.sched_size);
    S.fn(S.args);
    S.f[S.cur].state = EXITED;
    yield(true);
}

void resume(unsigned t) {
    S.cur = t;
    set_thread(t);
    Fiber &f = S.f[t];
    void *fake = nullptr;
    start_switch(&fake, f.stack, stack_size);
    switch_to(&S.sched, &f.ctx);
    finish_switch(fake, nullptr, nullptr);
}

const char *thread_str(unsigned t, char *buf, size_t len) {
    snprintf(buf, len, "thread %u (%u,%u,%u)", t, t % blockDim.x, t / blockDim.x % blockDim.y,
             t / (blockDim.x * blockDim.y));
    return buf;
}

const char *waits_at(const Fiber &f) {
    return f.state == BARRIER ? "__syncthreads()" : f.state == WARP ? op_names[f.op] : "exit";
}

/* No thread can run and not all of them exited: say why, in the order the
 * brief asks: inactive lanes first, then the divergent barrier, then warp
 * operations that never match up. */
void diagnose() {
    char a[64], b[64];
    for (unsigned t = 0; t < S.n; t++) {
        const Fiber &f = S.f[t];
        if (f.state != WARP) continue;
        unsigned base = t / 32 * 32;
        for (unsigned l = 0; l < 32; l++) {
            if (!(f.mask >> l & 1)) continue;
            unsigned u = base + l;
            if (u >= S.n) {
                fail(
                    "%s with mask 0x%08x in %s names lane %u, which does not exist (block of %u threads)",
                    op_names[f.op], f.mask, thread_str(t, a, sizeof a), l, S.n);
                return;
            }
            if (S.f[u].state == EXITED) {
                fail("%s with mask 0x%08x in %s names inactive lane %u (%s has exited)",
                     op_names[f.op], f.mask, thread_str(t, a, sizeof a), l,
                     thread_str(u, b, sizeof b));
                return;
            }
        }
    }
    for (unsigned t = 0; t < S.n; t++) {
        if (S.f[t].state != BARRIER) continue;
        for (unsigned u = 0; u < S.n; u++) {
            if (S.f[u].state == BARRIER) continue;
            fail("__syncthreads() in %s is not reached by every thread of the block: %s %s%s",
                 thread_str(t, a, sizeof a), thread_str(u, b, sizeof b),
                 S.f[u].state == EXITED ? "has exited" : "waits at ",
                 S.f[u].state == EXITED ? "" : waits_at(S.f[u]));
            return;
        }
    }
    for (unsigned t = 0; t < S.n; t++) {
        const Fiber &f = S.f[t];
        if (f.state != WARP) continue;
        unsigned base = t / 32 * 32;
        for (unsigned l = 0; l < 32; l++) {
            unsigned u = base + l;
            if (!(f.mask >> l & 1) || S.f[u].state == WARP) continue;
            break;
        }
        for (unsigned l = 0; l < 32; l++) {
            unsigned u = base + l;
            if (!(f.mask >> l & 1) || u == t) continue;
            const Fiber &g = S.f[u];
            fail("%s with mask 0x%08x in %s never completes: lane %u waits at %s with mask 0x%08x",
                 op_names[f.op], f.mask, thread_str(t, a, sizeof a), l, waits_at(g), g.mask);
            return;
        }
    }
    fail("no thread can run (internal error)");
}

/* Out of line: getcontext "returns twice" as far as the compiler knows. */
__attribute__((noinline)) void init_fiber(Fiber &f) {
#ifdef SIM_ASAN
    /* An abandoned fiber (a failed launch) leaves its frames poisoned. */
    __asan_unpoison_memory_region(f.stack, stack_size);
#endif
    make_context(&f.ctx, f.stack, stack_size, fiber_main);
    f.state = READY;
    f.fake_stack = nullptr;
    memset(f.pair, 0, sizeof f.pair);
}

int run_block() {
    for (unsigned t = 0; t < S.n; t++) init_fiber(S.f[t]);
    epoch++;
    for (;;) {
        bool ran = false;
        for (unsigned t = 0; t < S.n && !S.failed; t++)
            if (S.f[t].state == READY) {
                resume(t);
                ran = true;
            }
        if (S.failed) return -1;
        if (ran) continue;
        unsigned exited = 0, barrier = 0;
        for (unsigned t = 0; t < S.n; t++) {
            exited += S.f[t].state == EXITED;
            barrier += S.f[t].state == BARRIER;
        }
        if (exited == S.n) return 0;
        if (barrier == S.n) {
            epoch++;
            for (unsigned t = 0; t < S.n; t++) S.f[t].state = READY;
            continue;
        }
        diagnose();
        return -1;
    }
}

/* The source lane of lane l for a shuffle, or -1 for its own value. */
int shfl_src(int op, unsigned l, int arg, int width) {
    unsigned seg = l / width * width, in = l % width;
    switch (op) {
    case SIM_SHFL: return (int)(seg + (unsigned)arg % width);
    case SIM_SHFL_UP: return in >= (unsigned)arg ? (int)(l - arg) : -1;
    case SIM_SHFL_DOWN: return in + (unsigned)arg < (unsigned)width ? (int)(l + arg) : -1;
    case SIM_SHFL_XOR: {
        unsigned s = l ^ (unsigned)arg;
        return s / width * width == seg ? (int)s : -1;
    }
    }
    return -1;
}

/* Every lane of f's mask has arrived: compute all their results. */
void complete_warp(unsigned base, unsigned mask) {
    char a[64];
    const Fiber &me = S.f[S.cur];
    unsigned ballot = 0;
    for (unsigned l = 0; l < 32; l++) {
        if (!(mask >> l & 1)) continue;
        const Fiber &g = S.f[base + l];
        if (g.op != me.op || g.mask != mask || g.width != me.width) {
            fail("%s with mask 0x%08x in %s meets %s with mask 0x%08x in lane %u", op_names[me.op],
                 mask, thread_str(S.cur, a, sizeof a), op_names[g.op], g.mask, l);
            return;
        }
        if (g.value) ballot |= 1u << l;
    }
    S.seq++;
    for (unsigned l = 0; l < 32; l++)
        if (mask >> l & 1)
            for (unsigned m = 0; m < 32; m++)
                if (mask >> m & 1) S.f[base + l].pair[m] = S.seq;
    for (unsigned l = 0; l < 32; l++) {
        if (!(mask >> l & 1)) continue;
        Fiber &g = S.f[base + l];
        if (me.op == SIM_BALLOT)
            g.result = ballot;
        else if (me.op == SIM_SYNCWARP)
            g.result = 0;
        else {
            int s = shfl_src(me.op, l, g.arg, g.width);
            if (s >= 0 && !(mask >> s & 1)) {
                fail("%s with mask 0x%08x in %s: lane %u reads lane %d, which is not in the mask",
                     op_names[me.op], mask, thread_str(S.cur, a, sizeof a), l, s);
                return;
            }
            g.result = s < 0 ? g.value : S.f[base + s].value;
        }
        if (base + l != S.cur) g.state = READY;
    }
    S.f[S.cur].state = READY;
}

} // namespace

extern "C" unsigned long long sim_warp_op(int op, unsigned mask, unsigned long long value, int arg,
                                          int width) {
    char a[64];
    Fiber &f = S.f[S.cur];
    if (!S.active) return value;
    if (width <= 0 || width > 32 || (width & (width - 1))) {
        fail("%s in %s: width %d is not a power of two up to 32", op_names[op],
             thread_str(S.cur, a, sizeof a), width);
        yield(false);
    }
    unsigned base = S.cur / 32 * 32, lane = S.cur % 32;
    if (!(mask >> lane & 1)) {
        fail("%s in %s: mask 0x%08x does not name the calling lane %u", op_names[op],
             thread_str(S.cur, a, sizeof a), mask, lane);
        yield(false);
    }
    f.op = op, f.mask = mask, f.value = value, f.arg = arg, f.width = width;
    f.state = WARP;
    bool all = true;
    for (unsigned l = 0; l < 32 && all; l++)
        if (mask >> l & 1) all = base + l < S.n && S.f[base + l].state == WARP;
    if (all) complete_warp(base, mask);
    while (f.state != READY && !S.failed) yield(false);
    if (S.failed) yield(false); /* never resumed */
    return f.result;
}

extern "C" void sim_syncthreads(void) {
    if (!S.active) return;
    S.f[S.cur].state = BARRIER;
    yield(false);
}

extern "C" unsigned sim_activemask(void) {
    if (!S.active) return 1;
    unsigned base = S.cur / 32 * 32, m = 0;
    for (unsigned l = 0; l < 32 && base + l < S.n; l++)
        if (S.f[base + l].state != EXITED) m |= 1u << l;
    return m;
}

/* ---- shared arrays ----------------------------------------------------------- */

namespace {
struct Read {
    unsigned tid;
    unsigned long long seq;
};
struct Elem {
    unsigned long long w_epoch, w_seq, r_epoch;
    unsigned w_tid;
    std::vector<Read> reads; /* of r_epoch, one per thread */
};
/* An access of thread u when seq was s happened before the running thread's now. */
bool ordered(unsigned u, unsigned long long s) {
    return u == S.cur || (u / 32 == S.cur / 32 && S.f[S.cur].pair[u % 32] > s);
}
void race(const char *name, long long i, bool write, unsigned u, bool u_wrote) {
    char a[64], b[64];
    fail("shared array %s: %s %s %s[%lld], which %s %s in the same barrier interval with no "
         "barrier or warp operation of both between them (a %s-%s race)",
         name, thread_str(S.cur, a, sizeof a), write ? "writes" : "reads", name, i,
         thread_str(u, b, sizeof b), u_wrote ? "wrote" : "read", u_wrote ? "write" : "read",
         write ? "write" : "read");
}
} // namespace

struct sim_shadow {
    size_t n;
    Elem *e;
};

extern "C" void sim_shadow_free(sim_shadow *sh) {
    if (!sh) return;
    delete[] sh->e;
    delete sh;
}

extern "C" void sim_shared_access(sim_shadow **shadow, const char *name, size_t n, long long i,
                                  int write) {
    if (!S.active) return;
    char a[64];
    if (write < 0) {
        fail("%s: index %lld is outside shared array %s[%zu]", thread_str(S.cur, a, sizeof a), i,
             name, n);
        yield(false); /* never resumed */
    }
    sim_shadow *sh = *shadow;
    if (!sh) {
        sh = new sim_shadow{n, new Elem[n]()};
        *shadow = sh;
    }
    Elem &e = sh->e[i];
    if (e.w_epoch == epoch && !ordered(e.w_tid, e.w_seq)) {
        race(name, i, write, e.w_tid, true);
        yield(false);
    }
    if (e.r_epoch != epoch) e.reads.clear(), e.r_epoch = epoch;
    if (write) {
        for (const Read &r : e.reads)
            if (!ordered(r.tid, r.seq)) {
                race(name, i, true, r.tid, false);
                yield(false);
            }
        e.w_epoch = epoch, e.w_seq = S.seq, e.w_tid = S.cur;
        return;
    }
    for (Read &r : e.reads)
        if (r.tid == S.cur) {
            r.seq = S.seq;
            return;
        }
    e.reads.push_back({S.cur, S.seq});
}

extern "C" const char *sim_where(void) {
    static thread_local char buf[256];
    if (!S.active) return "";
    snprintf(buf, sizeof buf, "kernel %s block (%u,%u,%u) thread (%u,%u,%u)", S.name, blockIdx.x,
             blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
    return buf;
}

/* This OS thread's fibers and their stacks, each above a guard page, kept
 * from launch to launch (mapping them anew costs more than a small kernel). */
namespace {
struct Pool {
    char *mem = nullptr;
    Fiber *f = nullptr;
    unsigned long long n = 0;
    size_t bytes = 0;
    Fiber *get(unsigned long long want) {
        if (want <= n) return f;
        release();
        size_t page = (size_t)sysconf(_SC_PAGESIZE), each = stack_size + page;
        char *m = (char *)mmap(nullptr, each * want, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) return nullptr;
        Fiber *fs = new (std::nothrow) Fiber[want];
        if (!fs) {
            munmap(m, each * want);
            return nullptr;
        }
        for (unsigned long long t = 0; t < want; t++) {
            mprotect(m + t * each, page, PROT_NONE); /* a stack overflow faults */
            fs[t].stack = m + t * each + page;
        }
        mem = m, f = fs, n = want, bytes = each * want;
        return f;
    }
    void release() {
        delete[] f;
        if (mem) munmap(mem, bytes);
        mem = nullptr, f = nullptr, n = 0;
    }
    ~Pool() { release(); }
};
thread_local Pool pool;
} // namespace

static int sim_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int sim_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

extern "C" int sim_launch(const char *name, sim_entry fn, sim_dim3 grid, sim_dim3 block,
                          size_t shared_bytes, void **args, char *err, size_t errlen) {
    if (S.active) return sim_fail(err, errlen, "%s: launched from inside a simulated kernel", name);
    unsigned long long n = (unsigned long long)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || grid.y > 65535 || grid.z > 65535)
        return sim_fail(err, errlen, "%s: bad grid (%u,%u,%u)", name, grid.x, grid.y, grid.z);
    if (!n || n > 1024 || block.z > 64)
        return sim_fail(err, errlen, "%s: bad block (%u,%u,%u): 1 to 1024 threads", name, block.x,
                        block.y, block.z);
    if (shared_bytes)
        return sim_fail(err, errlen, "%s: dynamic shared memory (%zu bytes) is not simulated yet",
                        name, shared_bytes);
    Fiber *fibers = pool.get(n);
    if (!fibers) return sim_fail(err, errlen, "%s: cannot map %llu fiber stacks", name, n);
    S = Sim{};
    S.active = true, S.name = name, S.fn = fn, S.args = args, S.f = fibers, S.n = (unsigned)n;
    gridDim = {grid.x, grid.y, grid.z};
    blockDim = {block.x, block.y, block.z};
    int rc = 0;
    for (unsigned z = 0; z < grid.z && !rc; z++)
        for (unsigned y = 0; y < grid.y && !rc; y++)
            for (unsigned x = 0; x < grid.x && !rc; x++) {
                blockIdx = {x, y, z};
                rc = run_block();
            }
    if (rc) sim_fail(err, errlen, "%s", S.msg);
    S.active = false;
    return rc;
}
