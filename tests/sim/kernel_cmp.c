/* tests/sim/kernel_cmp.c — every CUDA kernel call of a plan's program under
 * the simulator (tests/sim), or on a GPU, against the C-dialect kernel of
 * the same name (tests/sim_models_test.sh and tests/gpu/check.sh run it):
 *     kernel_cmp PLAN train|eval DIR [--drop-one] [--shrink KERNEL]
 *                [--per-step] [--device]
 * DIR caches the compiled modules by content hash; $KCMP_CC and $KCMP_CXX
 * are the compile commands (flags included) for the C module and for the
 * CUDA text as host C++ against cuda_sim.h ($KCMP_CXX unused with
 * --device).
 *
 * For every kernel call (GEMMs are the BLAS's, skipped) each argument gets a
 * buffer of its own holding exactly the elements its slot has from the
 * call's offset on, flush against a PROT_NONE page after its end (and one
 * before), filled from a seed: uniform in [-2, 2]; labels (i32) in
 * [0, classes); positive in [0.25, 2] for a buffer read as a variance (the
 * variance input of bn_apply, bn_grad_gamma and bn_grad_data, and a state
 * that ema updates from a bn_var: the running variance); the scratch area's
 * words are two bf16 halves in [-2, 2], so both readings are finite. The C
 * kernel runs on one copy, the CUDA kernel on two others; every buffer the
 * kernel writes (not `const` in its signature) is compared, NaN equal to
 * NaN; const buffers must be left as they were.
 *  - A kernel with one iteration per thread (the grid-stride loop head)
 *    does what the C text does in the same order: bit-identical.
 *  - A cooperative kernel (one block per iteration) sums in f32 partials
 *    and a butterfly where C sums in double: for a sum of n terms in f32,
 *    |err| <= gamma_n * sum|x_i|, gamma_n = n*u / (1 - n*u), u = 2^-24,
 *    n = ceil(L / block) (the per-thread loop over the L elements of an
 *    iteration) + 10 (two 32-lane butterflies) + 4 (the epilogue's few
 *    roundings). sum|x_i| is measured: the C kernel on the absolute values
 *    of the inputs (for a sum exactly sum|x_i|). An element passes when
 *    |cuda - c| <= 2 * gamma_n * scale + u * |c| (+ one bf16 ulp for a bf16
 *    output), scale = max(|c on |x||, |c|, rms of the C buffer); the
 *    factor 2 covers an epilogue that scales a sum by a value of at most
 *    about 2 (xhat, 1/sqrt(var) for var >= 0.25).
 *  - Each cooperative CUDA call runs twice on the same inputs: bit-identical
 *    (shared memory outlives a block here, so a read of what another block
 *    left there shows; a kernel without shared memory or warp operations
 *    runs the same code path every time, so it runs once: the simulator's
 *    fiber switches are most of the test's time).
 *
 * Steps whose calls differ between the dialects (a CUDA channel group whose
 * reduction passes are kernels of their own, partial sums through the
 * scratch slot, where C has one kernel), and with --per-step every step
 * with a kernel call, run whole: every CUDA kernel call of the step in
 * order on the CUDA copies, every C call in order on the C copies, from
 * the same inputs. Each buffer of the step (the union of the slots both
 * programs' calls name, one per storage: a view or an assign shares its
 * target's) is one guarded buffer of the slot's full size, the calls'
 * offsets applied to the pointers; each dialect has its own scratch area
 * of its program's size, filled as above and never compared (private
 * working space). Every other buffer is compared (one neither side writes
 * must be unchanged on both); a buffer no CUDA call writes must be left as
 * it was by the CUDA calls, one no C call writes by the C calls. GEMMs are
 * skipped on both sides, which must then have the same GEMMs. A step whose
 * calls differ, or with a cooperative or another-count call, is held to
 * the tolerance above with n = the longest per-thread loop of its CUDA
 * calls + the merge length (scratch elements the step uses per iteration
 * of a CUDA call that takes the scratch slot: partials a merge may add one
 * after another) + 10 per cooperative CUDA call (its butterflies) + 4;
 * other steps must be bit-identical. Cooperative steps run twice on the
 * CUDA copies, as above.
 *
 * --device runs the CUDA side on GPU 0 through the driver API (libcuda by
 * runtime/cuda/loader.h, so $DPC_LIBCUDA names another file, e.g. the fake
 * driver): the module compiled by NVRTC for the device's architecture
 * (runtime/cuda/nvrtc.h, through $DPC_CACHE_DIR), every call's buffers
 * copied to device memory between two 256-byte poisoned margins, launched
 * with its recorded geometry, synchronised, copied back; a margin byte
 * changed is reported as a write out of bounds naming the kernel and the
 * argument (device memory has no guard pages). The comparison is the
 * same, except that a kernel calling a math function (expf, logf, sqrtf,
 * rsqrtf, tanhf, ...: the device's are not glibc's) is held to the
 * tolerance instead of the bits; pure arithmetic stays bit-identical
 * (NVRTC compiles with --fmad=false).
 *
 * --drop-one (the check that the tolerance is tight) sets element 0 of the
 * largest read buffer to 0 in the CUDA copies only, in cooperative kernels
 * (in a step run whole: the largest buffer no call of the step writes): the
 * run must then fail. --shrink KERNEL (the call-by-call path) gives that
 * kernel's first written argument one element too few: the guard page's
 * SIGSEGV is reported as one line naming the kernel, the argument and the
 * simulator's block/thread.
 * Prints one line: the program, calls compared, bit-identical, within
 * tolerance, steps run whole and the worst error of the loose kernels
 * against its tolerance; exits 0, or 1 with one line per failure on
 * stderr. */
#include <ctype.h>
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/program.h"
#include "format/plan.h"
#include "tests/sim/sim.h"
#ifdef DPC_HAVE_CUDA
#include "runtime/cuda/loader.h"
#include "runtime/cuda/nvrtc.h"
#endif

extern const char *sim_where(void) __attribute__((weak));

static const char *prog_label = "";
/* One line on stderr: "kernel_cmp: PROGRAM: message". */
static void vreport(const char *fmt, va_list ap) {
    fprintf(stderr, "kernel_cmp: %s: ", prog_label);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
    exit(1);
}

/* ---- guarded buffers --------------------------------------------------------- */
typedef struct {
    unsigned char *map, *p; /* mapping, data (flush against the end guard) */
    size_t maplen, bytes;
} gbuf;

static size_t page;

static gbuf gb_alloc(size_t bytes) {
    gbuf b;
    size_t body = (bytes + page - 1) / page * page;
    b.maplen = body + 2 * page;
    b.map = mmap(NULL, b.maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b.map == MAP_FAILED) die("cannot map %zu bytes", b.maplen);
    if (mprotect(b.map, page, PROT_NONE) || mprotect(b.map + page + body, page, PROT_NONE))
        die("mprotect failed");
    b.bytes = bytes;
    b.p = b.map + page + body - bytes;
    return b;
}
static void gb_free(gbuf *b) { munmap(b->map, b->maplen); }

/* What the SIGSEGV handler names: the buffers of the run in progress. */
enum { COPIES = 4 }; /* C, CUDA, CUDA again, C on |inputs| */
static const char *copy_name[COPIES] = {"C", "CUDA", "CUDA (second run)", "C on |inputs|"};
static struct {
    const char *kernel;
    int nargs, copy;
    gbuf *buf[CG_MAX_ARGS][COPIES];
    size_t esize[CG_MAX_ARGS];
    int64_t off[CG_MAX_ARGS]; /* where the argument starts in its buffer */
} cur;

static void on_segv(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)uc;
    unsigned char *a = si->si_addr;
    char msg[512];
    int n = snprintf(msg, sizeof msg, "kernel_cmp: %s: SIGSEGV in %s (%s) at %p", prog_label,
                     cur.kernel ? cur.kernel : "?", copy_name[cur.copy], (void *)a);
    for (int j = 0; j < cur.nargs; j++)
        for (int c = 0; c < COPIES; c++) {
            gbuf *b = cur.buf[j][c];
            if (!b || a < b->map || a >= b->map + b->maplen) continue;
            long long e = (long long)((a - b->p) / (long long)cur.esize[j]) - cur.off[j];
            long long len = (long long)(b->bytes / cur.esize[j]) - cur.off[j];
            n = snprintf(
                msg, sizeof msg,
                "kernel_cmp: %s: SIGSEGV in %s (%s): argument %d, element %lld of %lld (%s)",
                prog_label, cur.kernel, copy_name[cur.copy], j, e, len,
                e < 0 ? "before its start" : "past its end");
        }
    if (cur.copy == 1 || cur.copy == 2) {
        const char *w = sim_where ? sim_where() : NULL;
        if (w && n < (int)sizeof msg) snprintf(msg + n, sizeof msg - (size_t)n, "; %s", w);
    }
    size_t len = strlen(msg);
    msg[len++] = '\n';
    if (write(2, msg, len) < 0) _exit(1);
    _exit(1);
}

/* ---- random fills (a fixed 64-bit LCG) ----------------------------------------- */
static uint64_t rng;
static double urand(void) { /* [0, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static uint16_t f2bf(float f) { /* values here are exact enough: truncate */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef enum { T_F32, T_BF16, T_I32 } etype;
static size_t esize(etype t) { return t == T_BF16 ? 2 : 4; }

/* fill kinds */
enum { FILL_ANY, FILL_POS, FILL_LABEL, FILL_SCRATCH };

static void fill(unsigned char *p, size_t bytes, etype t, int kind, int64_t classes) {
    if (kind == FILL_SCRATCH) {
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            uint16_t h = f2bf((float)(urand() * 4 - 2));
            memcpy(p + i, &h, 2);
        }
        return;
    }
    size_t n = bytes / esize(t);
    for (size_t i = 0; i < n; i++) {
        double v = kind == FILL_POS ? 0.25 + urand() * 1.75 : urand() * 4 - 2;
        if (t == T_I32) {
            int l = (int)(urand() * (double)(classes > 0 ? classes : 1));
            memcpy(p + 4 * i, &l, 4);
        } else if (t == T_BF16) {
            uint16_t h = f2bf((float)v);
            memcpy(p + 2 * i, &h, 2);
        } else {
            float f = (float)v;
            memcpy(p + 4 * i, &f, 4);
        }
    }
}

static double elem(const unsigned char *p, size_t i, etype t) {
    if (t == T_BF16) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return bf2f(h);
    }
    if (t == T_I32) {
        int v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    float f;
    memcpy(&f, p + 4 * i, 4);
    return f;
}
static void set_abs(unsigned char *p, size_t n, etype t) {
    if (t == T_I32) return;
    for (size_t i = 0; i < n; i++) {
        if (t == T_BF16) {
            p[2 * i + 1] &= 0x7f;
        } else {
            p[4 * i + 3] &= 0x7f;
        }
    }
}

/* ---- the module compilers, cached by content hash ---------------------------- */
static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) die("cannot write %s", path);
}

/* DIR/KIND-HASH.so for source (compiled once): returns the dlopen handle. */
static void *compile(const char *dir, const char *kind, const char *cmd, const char *text,
                     const char *ext) {
    uint64_t h = plan_checksum(text, strlen(text)) ^ plan_checksum(cmd, strlen(cmd)) * 31;
    char src[4096], so[4096], tmp[4200], line[12000];
    snprintf(src, sizeof src, "%s/%s-%016llx.%s", dir, kind, (unsigned long long)h, ext);
    snprintf(so, sizeof so, "%s/%s-%016llx.so", dir, kind, (unsigned long long)h);
    struct stat st;
    if (stat(so, &st)) {
        write_file(src, text);
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", so, (long)getpid());
        snprintf(line, sizeof line, "%s -fPIC -shared -o '%s' '%s'", cmd, tmp, src);
        if (system(line)) die("cannot compile %s: %s", src, line);
        if (rename(tmp, so)) die("cannot rename %s", tmp);
    }
    void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!dl) die("cannot load %s: %s", so, dlerror());
    return dl;
}

/* ---- the CUDA text of a kernel: its parameters and its loop head ------------- */
typedef struct {
    int nargs;
    etype type[CG_MAX_ARGS];
    int writes[CG_MAX_ARGS];
    int coop;
    int math;         /* calls a math function (the device's differ from glibc's) */
    const char *body; /* from the signature to the next kernel */
    size_t body_len;
} ksig;

static const char *grid_stride =
    "for (idx_t i = (idx_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;";
static const char *coop_head = "for (idx_t i = blockIdx.x; i < count; i += gridDim.x)";
/* a channel split over blocks (codegen/dialect.c split_loop_head) */
static const char *split_head = "for (idx_t i = blockIdx.x / ";

/* Whether text calls a math function whose result may differ in the last
 * bits between a GPU's library and glibc (fabsf, fmaxf and the like are
 * exact everywhere). */
static int calls_math(const char *s, size_t n) {
    static const char *const fns[] = {"expf",   "exp",    "logf",   "log",   "sqrtf", "sqrt",
                                      "rsqrtf", "tanhf",  "tanh",   "powf",  "pow",   "erff",
                                      "erf",    "log1pf", "expm1f", "exp2f", "log2f", "sinf",
                                      "cosf",   "__expf", "__logf", "cbrtf", NULL};
    for (size_t i = 0; i < n; i++) {
        if (!(isalpha((unsigned char)s[i]) || s[i] == '_') ||
            (i > 0 && (isalnum((unsigned char)s[i - 1]) || s[i - 1] == '_')))
            continue;
        size_t e = i;
        while (e < n && (isalnum((unsigned char)s[e]) || s[e] == '_')) e++;
        size_t q = e;
        while (q < n && s[q] == ' ') q++;
        if (q < n && s[q] == '(')
            for (int f = 0; fns[f]; f++)
                if (strlen(fns[f]) == e - i && !strncmp(s + i, fns[f], e - i)) return 1;
        i = e;
    }
    return 0;
}

static ksig parse_sig(const char *src, const char *name) {
    ksig k = {0};
    /* `__global__ void [__launch_bounds__(N) ]NAME(` */
    const char *gv = "__global__ void ", *lb = "__launch_bounds__(", *s = src, *p = NULL;
    size_t nl = strlen(name);
    for (; (s = strstr(s, gv)); s++) {
        const char *nm = s + strlen(gv), *e;
        if (!strncmp(nm, lb, strlen(lb)) && (e = strstr(nm, ") "))) nm = e + 2;
        if (!strncmp(nm, name, nl) && nm[nl] == '(') {
            p = nm + nl + 1;
            break;
        }
    }
    if (!p) die("%s: no CUDA signature", name);
    const char *next = strstr(s + 1, gv);
    k.body = s;
    k.body_len = next ? (size_t)(next - s) : strlen(s);
    for (;;) {
        while (*p == ' ') p++;
        if (!strncmp(p, "idx_t count)", 12)) break;
        if (k.nargs == CG_MAX_ARGS) die("%s: too many parameters", name);
        int c = !strncmp(p, "const ", 6);
        const char *t = p + (c ? 6 : 0);
        k.type[k.nargs] =
            !strncmp(t, "float ", 6)    ? T_F32
            : !strncmp(t, "bf16_t ", 7) ? T_BF16
            : !strncmp(t, "int ", 4)
                ? T_I32
                : (die("%s: parameter %d: unknown type '%.20s'", name, k.nargs, t), T_F32);
        k.writes[k.nargs++] = !c;
        p = strchr(p, ',');
        if (!p) die("%s: unterminated parameter list", name);
        p++;
    }
    char *head = strndup(k.body, k.body_len);
    if (!head) die("out of memory");
    if (strstr(head, coop_head) || strstr(head, split_head))
        k.coop = 1;
    else if (!strstr(head, grid_stride))
        die("%s: neither the grid-stride nor the cooperative loop head", name);
    free(head);
    k.math = calls_math(k.body, k.body_len);
    return k;
}

/* ---- the variance rule -------------------------------------------------------- */
static unsigned char *variance_nodes(const ir_graph *g) {
    unsigned char *v = calloc((size_t)g->n, 1);
    if (!v) die("out of memory");
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        int var = -1;
        if (n->op == IR_OP_BN_APPLY) var = n->input[2]; /* (x, mean, var, gamma, beta) */
        if (n->op == IR_OP_BN_GRAD_GAMMA || n->op == IR_OP_BN_GRAD_DATA) var = n->input[3];
        if (n->op == IR_OP_EMA && g->nodes[n->input[1]].op == IR_OP_BN_VAR) var = n->input[0];
        if (var >= 0) {
            v[var] = 1;
            v[ir_storage_of(g, var)] = 1;
        }
    }
    return v;
}

/* A hash of a call's argument lengths, offsets and fills. */
static const unsigned char *var;
static uint64_t shape_of(const cg_program *p, const ir_graph *g, const cg_step *st,
                         const cg_call *cl) {
    int64_t v[3 * CG_MAX_ARGS];
    for (int j = 0; j < cl->nargs; j++) {
        int node = st->buf[cl->arg[j]];
        v[3 * j] = cg_slot_size(p, g, st, cl->arg[j]);
        v[3 * j + 1] = cl->off[j];
        const ir_node *n = node >= 0 ? &g->nodes[node] : NULL;
        v[3 * j + 2] =
            !n ? -1
               : n->type.dtype * 2 + var[node] + (n->type.dtype == IR_I32 ? 8 * n->iattr[0] : 0);
    }
    return plan_checksum(v, sizeof v[0] * 3 * (size_t)cl->nargs);
}

/* The C text of a kernel: "void NAME(void *const *arg, ...) {" and one
 * "    [const ]TYPE *restrict bJ = (...)arg[J];" line per argument. */
static void parse_c_sig(const char *src, const char *name, int nargs, etype *type, int *writes) {
    char pat[CG_NAME_MAX + 40];
    snprintf(pat, sizeof pat, "\nvoid %s(void *const *arg,", name);
    const char *p = strstr(src, pat);
    if (!p) die("%s: no C signature", name);
    p = strchr(p + 1, '\n');
    for (int j = 0; j < nargs; j++) {
        if (!p || strncmp(p, "\n    ", 5)) die("%s: C argument %d not unpacked", name, j);
        p += 5;
        int c = !strncmp(p, "const ", 6);
        const char *t = p + (c ? 6 : 0);
        type[j] = !strncmp(t, "float ", 6)    ? T_F32
                  : !strncmp(t, "bf16_t ", 7) ? T_BF16
                  : !strncmp(t, "int ", 4)
                      ? T_I32
                      : (die("%s: C argument %d: unknown type '%.20s'", name, j, t), T_F32);
        writes[j] = !c;
        p = strchr(p, '\n');
    }
}

/* The element type of a node's buffer. */
static etype node_type(const ir_node *n) {
    return n->type.dtype == IR_BF16 ? T_BF16 : n->type.dtype == IR_I32 ? T_I32 : T_F32;
}
static const char *node_name(const ir_node *n) { return n->name[0] ? n->name : ir_ops[n->op].name; }

/* ---- the CUDA side: the simulator, or a GPU through the driver API ------------ */
static int on_device;
static void *cu_module_host; /* the simulator's module (dlopen) */

typedef struct {
    sim_entry fu; /* the simulator's entry */
    void *f;      /* CUfunction on a device */
} ufn;

#ifdef DPC_HAVE_CUDA
enum { MARGIN = 256, MAX_MIRRORS = 4 * CG_MAX_BUFS };
static CUmodule dev_mod;
static CUstream dev_stream;
static unsigned char poison[MARGIN];
/* The device copies of the host buffers of the run in progress. */
static struct {
    gbuf *h;
    const char *name;
    CUdeviceptr d; /* MARGIN poisoned bytes, the data, MARGIN more */
} mir[MAX_MIRRORS];
static int nmir;

static void cu_do(CUresult r, const char *what) {
    if (r != CUDA_SUCCESS)
        die("--device: %s: %s: %s", what, rt_cu_error_name(r), rt_cu_error_string(r));
}

static void device_open(const cg_program *pu, char *arch, size_t archlen) {
    char err[2048];
    if (rt_cu_load(err, sizeof err)) die("--device: %s", err);
    CUdevice dev;
    CUcontext ctx;
    int major = 0, minor = 0;
    cu_do(rt_cu.cuInit(0), "cuInit");
    cu_do(rt_cu.cuDeviceGet(&dev, 0), "cuDeviceGet");
    cu_do(rt_cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
          "cuDeviceGetAttribute");
    cu_do(rt_cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
          "cuDeviceGetAttribute");
    cu_do(rt_cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    cu_do(rt_cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    cu_do(rt_cu.cuStreamCreate(&dev_stream, 0), "cuStreamCreate");
    rt_cuda_image img;
    if (rt_cuda_compile_cached(pu->source, 10 * major + minor, &img, err, sizeof err))
        die("--device: NVRTC: %s", err);
    cu_do(rt_cu.cuModuleLoadDataEx(&dev_mod, img.data, 0, NULL, NULL), "cuModuleLoadDataEx");
    snprintf(arch, archlen, "%s", img.target);
    rt_cuda_image_free(&img);
    memset(poison, 0xa5, sizeof poison);
}

static void mirror_check(const char *kernel) {
    unsigned char m[2][MARGIN];
    for (int i = 0; i < nmir; i++) {
        cu_do(rt_cu.cuMemcpyDtoHAsync(m[0], mir[i].d, MARGIN, dev_stream), "cuMemcpyDtoH");
        cu_do(
            rt_cu.cuMemcpyDtoHAsync(m[1], mir[i].d + MARGIN + mir[i].h->bytes, MARGIN, dev_stream),
            "cuMemcpyDtoH");
        cu_do(rt_cu.cuStreamSynchronize(dev_stream), "cuStreamSynchronize");
        for (int s = 0; s < 2; s++)
            if (memcmp(m[s], poison, MARGIN))
                die("%s (CUDA on the device) wrote %s %s (its margin was overwritten)", kernel,
                    s ? "past the end of" : "before the start of", mir[i].name);
    }
}
#endif

static ufn cuda_fn(const char *name) {
    ufn u = {0};
    char sym[CG_NAME_MAX + 16];
#ifdef DPC_HAVE_CUDA
    if (on_device) {
        CUfunction f;
        char what[CG_NAME_MAX + 40];
        snprintf(what, sizeof what, "cuModuleGetFunction(%s)", name);
        cu_do(rt_cu.cuModuleGetFunction(&f, dev_mod, name), what);
        u.f = f;
        return u;
    }
#endif
    snprintf(sym, sizeof sym, "sim_entry_%s", name);
    u.fu = (sim_entry)(uintptr_t)dlsym(cu_module_host, sym);
    if (!u.fu) die("%s: not in the compiled CUDA module", name);
    return u;
}

/* Before the CUDA calls on copy c: on a device, every buffer gets its
 * device copy (names say which argument or buffer it is). */
static void cuda_begin(gbuf *const *bufs, const char *const *names, int n) {
#ifdef DPC_HAVE_CUDA
    if (!on_device) return;
    if (n > MAX_MIRRORS) die("%d buffers: too many", n);
    nmir = n;
    for (int i = 0; i < n; i++) {
        mir[i].h = bufs[i];
        mir[i].name = names[i];
        size_t b = bufs[i]->bytes;
        cu_do(rt_cu.cuMemAlloc(&mir[i].d, b + 2 * MARGIN), "cuMemAlloc");
        cu_do(rt_cu.cuMemcpyHtoDAsync(mir[i].d, poison, MARGIN, dev_stream), "cuMemcpyHtoD");
        cu_do(rt_cu.cuMemcpyHtoDAsync(mir[i].d + MARGIN + b, poison, MARGIN, dev_stream),
              "cuMemcpyHtoD");
        if (b)
            cu_do(rt_cu.cuMemcpyHtoDAsync(mir[i].d + MARGIN, bufs[i]->p, b, dev_stream),
                  "cuMemcpyHtoD");
    }
    cu_do(rt_cu.cuStreamSynchronize(dev_stream), "cuStreamSynchronize");
#else
    (void)bufs, (void)names, (void)n;
#endif
}

/* One launch on the CUDA copies; ptr[j] are host pointers into the
 * buffers (offsets applied). */
static void cuda_launch(const char *name, ufn fn, const cg_launch *l, int nargs, void *const *ptr,
                        long long count) {
    void *args[CG_MAX_ARGS + 1];
    char err[1024];
#ifdef DPC_HAVE_CUDA
    if (on_device) {
        CUdeviceptr d[CG_MAX_ARGS];
        for (int j = 0; j < nargs; j++) {
            int i = 0;
            const unsigned char *p = ptr[j];
            while (i < nmir && !(p >= mir[i].h->p && p <= mir[i].h->p + mir[i].h->bytes)) i++;
            if (i == nmir) die("%s: argument %d has no device copy", name, j);
            d[j] = mir[i].d + MARGIN + (CUdeviceptr)(p - mir[i].h->p);
            args[j] = &d[j];
        }
        args[nargs] = &count;
        snprintf(err, sizeof err, "cuLaunchKernel(%s)", name);
        cu_do(rt_cu.cuLaunchKernel((CUfunction)fn.f, l->grid, 1, 1, l->block, 1, 1, l->shared,
                                   dev_stream, args, NULL),
              err);
        snprintf(err, sizeof err, "%s: cuStreamSynchronize", name);
        cu_do(rt_cu.cuStreamSynchronize(dev_stream), err);
        mirror_check(name);
        return;
    }
#endif
    void *p[CG_MAX_ARGS];
    for (int j = 0; j < nargs; j++) {
        p[j] = ptr[j];
        args[j] = &p[j];
    }
    args[nargs] = &count;
    sim_dim3 grid = {l->grid, 1, 1}, block = {l->block, 1, 1};
    if (sim_launch(name, fn.fu, grid, block, l->shared, args, err, sizeof err)) die("%s", err);
}

/* After the CUDA calls: the device copies back into the host buffers. */
static void cuda_end(void) {
#ifdef DPC_HAVE_CUDA
    if (!on_device) return;
    for (int i = 0; i < nmir; i++) {
        if (mir[i].h->bytes)
            cu_do(rt_cu.cuMemcpyDtoHAsync(mir[i].h->p, mir[i].d + MARGIN, mir[i].h->bytes,
                                          dev_stream),
                  "cuMemcpyDtoH");
    }
    cu_do(rt_cu.cuStreamSynchronize(dev_stream), "cuStreamSynchronize");
    for (int i = 0; i < nmir; i++) cu_do(rt_cu.cuMemFree(mir[i].d), "cuMemFree");
    nmir = 0;
#endif
}

/* ---- comparing one buffer ---------------------------------------------------- */
static int nfail;
static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
    nfail++;
}

static int is_nan(double v) { return v != v; }

/* 2 * gamma_n (see the top). */
static double tol_of(double n) {
    double u = ldexp(1, -24);
    return 2 * n * u / (1 - n * u);
}

static double worst, worst_tol;
static char worst_who[CG_NAME_MAX + 32] = "";

/* Compares buffer `what` of `who` (a kernel, or a step): c and u the C and
 * CUDA results, a the C on |inputs| (loose only). Clears *same when the
 * bits differ, *within when an element fails. */
static void cmp_buf(const char *who, const char *what, const unsigned char *c,
                    const unsigned char *u, const unsigned char *a, size_t len, etype t, int loose,
                    double tol, int *same, int *within) {
    size_t es = esize(t);
    if (!memcmp(c, u, len * es)) return;
    double rms = 0;
    for (size_t i = 0; i < len; i++) {
        double v = elem(c, i, t);
        if (!is_nan(v) && !isinf(v)) rms += v * v;
    }
    rms = len ? sqrt(rms / (double)len) : 0;
    for (size_t i = 0; i < len; i++) {
        double vc = elem(c, i, t), vu = elem(u, i, t);
        if ((is_nan(vc) && is_nan(vu)) || !memcmp(c + i * es, u + i * es, es)) continue;
        *same = 0;
        if (!loose || t == T_I32 || is_nan(vc) || is_nan(vu) || isinf(vc) || isinf(vu)) {
            failf("%s: %s element %zu: %.9g (CUDA) vs %.9g (C), not bit-identical%s", who, what, i,
                  vu, vc, loose ? "" : " (one iteration per thread)");
            *within = 0;
            return;
        }
        double sa = fabs(elem(a, i, t));
        double scale = fmax(fmax(sa, fabs(vc)), rms);
        double allow = tol * scale + ldexp(fabs(vc), -24);
        if (t == T_BF16) allow += ldexp(fmax(fabs(vc), fabs(vu)), -7);
        double e = scale > 0 ? fabs(vu - vc) / scale : INFINITY;
        if (e / tol > (worst_tol > 0 ? worst / worst_tol : 0)) {
            worst = e;
            worst_tol = tol;
            snprintf(worst_who, sizeof worst_who, "%s", who);
        }
        if (fabs(vu - vc) > allow) {
            failf("%s: %s element %zu: %.9g (CUDA) vs %.9g (C): error %.3g of scale %.3g > "
                  "tolerance %.3g",
                  who, what, i, vu, vc, e, scale, tol);
            *within = 0;
            return;
        }
    }
}

/* ---- the programs and the tallies ------------------------------------------- */
static const ir_graph *g;
static const cg_program *pc, *pu;
static void *dc; /* the C module */
static int drop_one, per_step;
static const char *shrink;
static int shrink_seen;
static struct {
    int calls, bitid, tolok, gemms, coop, repeats, math;
    int steps, step_ucalls, step_ccalls, step_bitid, step_tolok, split, step_repeats;
} tally;

typedef void (*c_fn)(void *const *, long long, long long, long long);
static c_fn c_kernel(const char *name) {
    c_fn f = (c_fn)(uintptr_t)dlsym(dc, name);
    if (!f) die("%s: not in the compiled C module", name);
    return f;
}

/* ---- one call, by itself ------------------------------------------------------ */
enum { MAX_SEEN = 4096 };
static const cg_call *seen[MAX_SEEN];
static uint64_t seen_shape[MAX_SEEN];
static int nseen;

static void run_call(int s, int ci) {
    const cg_step *st = &pu->steps[s];
    const cg_call *cl = &pu->calls[st->first_call + ci];
    const cg_call *clc = &pc->calls[pc->steps[s].first_call + ci];
    const char *name = pu->kernels[cl->kernel].name;
    ksig k = parse_sig(pu->source, name);
    /* Cooperative kernels, kernels a dialect computes another way (another
     * count: codegen.h gather_pool_grad), and on a device kernels calling
     * a math function, are held to the tolerance, not to the bits. */
    int loose = k.coop || clc->count != cl->count || (on_device && k.math);
    if (k.nargs != cl->nargs)
        die("%s: %d parameters, the call passes %d", name, k.nargs, cl->nargs);
    ufn fu = cuda_fn(name);
    c_fn fc = c_kernel(name);

    /* a call like an earlier one (kernel, count, launch, every argument's
     * length and offset) would repeat its check exactly */
    int dup = 0;
    for (int e = 0; e < nseen && !dup; e++) {
        const cg_call *q = seen[e];
        dup = q->kernel == cl->kernel && q->count == cl->count && q->nargs == cl->nargs &&
              !memcmp(&q->launch, &cl->launch, sizeof q->launch) &&
              seen_shape[e] == shape_of(pu, g, st, cl);
    }
    if (dup && !shrink) {
        tally.repeats++;
        return;
    }
    if (nseen < MAX_SEEN) {
        seen_shape[nseen] = shape_of(pu, g, st, cl);
        seen[nseen++] = cl;
    }

    /* buffers */
    gbuf b[CG_MAX_ARGS][COPIES];
    size_t len[CG_MAX_ARGS];
    const char *slotname[CG_MAX_ARGS];
    char argname[CG_MAX_ARGS][CG_NAME_MAX + 40];
    memset(&cur, 0, sizeof cur);
    cur.kernel = name;
    cur.nargs = cl->nargs;
    rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(st->first_call + ci) * 0x100000001b3ull;
    int big = -1, shrunk = 0, ncopies = loose ? COPIES : COPIES - 1;
    for (int j = 0; j < cl->nargs; j++) {
        int slot = cl->arg[j], node = st->buf[slot];
        int64_t size = cg_slot_size(pu, g, st, slot);
        size_t bytes;
        int kind = FILL_ANY;
        int64_t classes = 0;
        if (node == CG_SCRATCH) {
            bytes = (size_t)(size - cl->off[j]) * 4;
            kind = FILL_SCRATCH;
            slotname[j] = "scratch";
        } else {
            const ir_node *n = &g->nodes[node];
            etype t = node_type(n);
            if (t != k.type[j])
                die("%s: argument %d: the slot's dtype is not the parameter's", name, j);
            bytes = (size_t)(size - cl->off[j]) * esize(t);
            if (t == T_I32) {
                kind = FILL_LABEL;
                classes = n->op == IR_OP_INPUT ? n->iattr[0] : 1;
            } else if (var[node]) {
                kind = FILL_POS;
            }
            slotname[j] = node_name(n);
        }
        snprintf(argname[j], sizeof argname[j], "argument %d (%s)", j, slotname[j]);
        if (shrink && !strcmp(shrink, name) && k.writes[j] && !shrunk &&
            bytes >= esize(k.type[j])) {
            bytes -= esize(k.type[j]); /* the first written argument */
            shrunk = shrink_seen = 1;
        }
        len[j] = bytes / esize(k.type[j]);
        cur.esize[j] = esize(k.type[j]);
        for (int c = 0; c < ncopies; c++) {
            b[j][c] = gb_alloc(bytes);
            cur.buf[j][c] = &b[j][c];
        }
        fill(b[j][0].p, bytes, k.type[j], kind, classes);
        for (int c = 1; c < ncopies; c++) memcpy(b[j][c].p, b[j][0].p, bytes);
        if (loose) set_abs(b[j][3].p, len[j], k.type[j]);
        if (!k.writes[j] && (big < 0 || len[j] > len[big])) big = j;
    }
    /* the original inputs, for the read-only check */
    unsigned char *orig[CG_MAX_ARGS];
    for (int j = 0; j < cl->nargs; j++) {
        orig[j] = malloc(b[j][0].bytes + 1);
        if (!orig[j]) die("out of memory");
        memcpy(orig[j], b[j][0].p, b[j][0].bytes);
    }
    int dropped = -1; /* its CUDA copies differ from orig by design */
    if (drop_one && loose && big >= 0 && len[big] > 0) {
        for (int c = 1; c <= 2; c++) memset(b[big][c].p, 0, esize(k.type[big]));
        dropped = big;
    }

    /* the runs */
    for (int c = 1; c <= 1 + loose; c++) {
        void *ptr[CG_MAX_ARGS];
        gbuf *bp[CG_MAX_ARGS];
        const char *bn[CG_MAX_ARGS];
        for (int j = 0; j < cl->nargs; j++) {
            ptr[j] = b[j][c].p;
            bp[j] = &b[j][c];
            bn[j] = argname[j];
        }
        cur.copy = c;
        cuda_begin(bp, bn, cl->nargs);
        cuda_launch(name, fu, &cl->launch, cl->nargs, ptr, (long long)cl->count);
        cuda_end();
    }
    for (int c = 0; c < COPIES; c += 3) {
        if (c == 3 && !loose) break;
        void *ptr[CG_MAX_ARGS];
        for (int j = 0; j < cl->nargs; j++) ptr[j] = b[j][c].p;
        cur.copy = c;
        fc(ptr, (long long)clc->count, 0, (long long)clc->count);
    }
    cur.kernel = NULL;

    /* the comparison */
    tally.calls++;
    tally.coop += k.coop;
    tally.math += on_device && k.math && !k.coop && clc->count == cl->count;
    int same = 1, within = 1;
    double tol = 0;
    if (loose) {
        int64_t l = 0;
        for (int j = 0; j < cl->nargs; j++)
            if (!k.writes[j] && (int64_t)len[j] > l) l = (int64_t)len[j];
        int64_t per = cl->count > 0 ? (l + cl->count - 1) / cl->count : 0;
        int64_t bl = cl->launch.block ? cl->launch.block : 1;
        tol = tol_of((double)((per + bl - 1) / bl + 10 + 4));
    }
    for (int j = 0; j < cl->nargs; j++) {
        if (loose && memcmp(b[j][1].p, b[j][2].p, b[j][1].bytes)) {
            failf("%s: %s: two CUDA runs on the same inputs differ", name, argname[j]);
            same = within = 0;
        }
        if (!k.writes[j]) {
            for (int c = 0; c <= (j == dropped ? 0 : 1); c++)
                if (memcmp(orig[j], b[j][c].p, b[j][c].bytes)) {
                    failf("%s: %s is const but the %s kernel wrote it", name, argname[j],
                          copy_name[c]);
                    same = within = 0;
                }
            continue;
        }
        cmp_buf(name, argname[j], b[j][0].p, b[j][1].p, loose ? b[j][3].p : NULL, len[j], k.type[j],
                loose, tol, &same, &within);
    }
    if (same)
        tally.bitid++;
    else if (within)
        tally.tolok++;
    for (int j = 0; j < cl->nargs; j++) {
        free(orig[j]);
        for (int c = 0; c < ncopies; c++) gb_free(&b[j][c]);
    }
}

/* ---- one step, whole ------------------------------------------------------------ */
enum { MAX_SB = 2 * CG_MAX_BUFS + 2 };
typedef struct {
    int store; /* ir_storage_of the slot's node, or CG_SCRATCH */
    int side;  /* the scratch area's dialect; -1 for a node's buffer */
    etype t;
    size_t len;
    int kind;
    int64_t classes;
    int writes[2]; /* by a call of dialect d */
    char name[CG_NAME_MAX + 16];
    gbuf b[COPIES];
    unsigned char *orig;
} sbuf;

typedef struct {
    const cg_call *cl;
    int d; /* dialect */
    const char *name;
    int sb[CG_MAX_ARGS]; /* the arguments' step buffers */
    etype type[CG_MAX_ARGS];
    int writes[CG_MAX_ARGS];
    int coop, loose;
} scall;

static int same_calls(int s) {
    const cg_step *su = &pu->steps[s], *sc = &pc->steps[s];
    if (su->ncalls != sc->ncalls) return 0;
    for (int ci = 0; ci < su->ncalls; ci++) {
        const cg_call *a = &pu->calls[su->first_call + ci], *b = &pc->calls[sc->first_call + ci];
        if (a->kind != b->kind || a->nargs != b->nargs) return 0;
        if (a->kind == CG_CALL_KERNEL &&
            strcmp(pu->kernels[a->kernel].name, pc->kernels[b->kernel].name))
            return 0;
    }
    return 1;
}

static int sb_get(sbuf *sb, int *n, const cg_program *p, const cg_step *st, int slot, int d) {
    int node = st->buf[slot];
    int store = node == CG_SCRATCH ? CG_SCRATCH : ir_storage_of(g, node);
    int side = node == CG_SCRATCH ? d : -1;
    int64_t size = cg_slot_size(p, g, st, slot);
    for (int i = 0; i < *n; i++)
        if (sb[i].store == store && sb[i].side == side) {
            if ((size_t)size > sb[i].len) sb[i].len = (size_t)size;
            return i;
        }
    if (*n == MAX_SB) die("step of node %d: more than %d buffers", st->node, MAX_SB);
    sbuf *b = &sb[(*n)++];
    memset(b, 0, sizeof *b);
    b->store = store;
    b->side = side;
    b->len = (size_t)size;
    if (node == CG_SCRATCH) {
        b->t = T_F32;
        b->kind = FILL_SCRATCH;
        snprintf(b->name, sizeof b->name, "scratch (%s)", cg_dialect_name((cg_dialect)d));
    } else {
        const ir_node *nd = &g->nodes[store];
        b->t = node_type(nd);
        if (b->t == T_I32) {
            b->kind = FILL_LABEL;
            b->classes = nd->op == IR_OP_INPUT ? nd->iattr[0] : 1;
        } else if (var[node] || var[store]) {
            b->kind = FILL_POS;
        }
        snprintf(b->name, sizeof b->name, "%s", node_name(&g->nodes[node]));
    }
    return (int)(b - sb);
}

/* A hash of a step's calls in both dialects (names, counts, launches, shapes). */
static uint64_t step_shape(int s) {
    uint64_t h = 0;
    for (int d = 0; d < 2; d++) {
        const cg_program *p = d ? pu : pc;
        const cg_step *st = &p->steps[s];
        for (int ci = 0; ci < st->ncalls; ci++) {
            const cg_call *cl = &p->calls[st->first_call + ci];
            uint64_t v[5] = {(uint64_t)cl->kind, (uint64_t)cl->count, 0, shape_of(p, g, st, cl),
                             (uint64_t)d};
            if (cl->kind == CG_CALL_CONV) {
                v[2] = plan_checksum(&cl->conv, sizeof cl->conv);
            } else if (cl->kind == CG_CALL_KERNEL) {
                const char *nm = p->kernels[cl->kernel].name;
                v[2] =
                    plan_checksum(nm, strlen(nm)) ^ plan_checksum(&cl->launch, sizeof cl->launch);
            } else {
                v[2] = plan_checksum(&cl->gemm, sizeof cl->gemm);
            }
            h = h * 1099511628211ull ^ plan_checksum(v, sizeof v);
        }
    }
    return h;
}

static void run_step(int s, int split) {
    enum { MAX_STEP_SEEN = 4096 };
    static uint64_t seen_step[MAX_STEP_SEEN];
    static int nseen_step;
    const cg_step *sts[2] = {&pc->steps[s], &pu->steps[s]};
    uint64_t shape = step_shape(s);
    for (int e = 0; e < nseen_step; e++)
        if (seen_step[e] == shape) {
            tally.step_repeats++;
            return;
        }
    if (nseen_step < MAX_STEP_SEEN) seen_step[nseen_step++] = shape;

    /* the calls and their buffers */
    sbuf sb[MAX_SB];
    int nsb = 0, ncall[2] = {0, 0}, ncoop = 0, loose = split;
    scall *sc = calloc((size_t)(sts[0]->ncalls + sts[1]->ncalls) + 1, sizeof *sc);
    if (!sc) die("out of memory");
    int nsc = 0;
    const cg_gemm *gm[2][64];
    int ngm[2] = {0, 0};
    for (int d = 1; d >= 0; d--) {
        const cg_program *p = d ? pu : pc;
        const cg_step *st = sts[d];
        for (int ci = 0; ci < st->ncalls; ci++) {
            const cg_call *cl = &p->calls[st->first_call + ci];
            /* a library convolution: the cuda backend runs its alternative,
             * the calls after it, which are compared as any others */
            if (cl->kind == CG_CALL_CONV) continue;
            if (cl->kind == CG_CALL_GEMM) {
                if (ngm[d] == 64) die("step %d: more than 64 GEMMs", s);
                gm[d][ngm[d]++] = &cl->gemm;
                continue;
            }
            scall *c = &sc[nsc++];
            c->cl = cl;
            c->d = d;
            c->name = p->kernels[cl->kernel].name;
            if (d) {
                ksig k = parse_sig(pu->source, c->name);
                if (k.nargs != cl->nargs)
                    die("%s: %d parameters, the call passes %d", c->name, k.nargs, cl->nargs);
                memcpy(c->type, k.type, sizeof c->type);
                memcpy(c->writes, k.writes, sizeof c->writes);
                c->coop = k.coop;
                c->loose = k.coop || (on_device && k.math);
                ncoop += k.coop;
            } else {
                parse_c_sig(pc->source, c->name, cl->nargs, c->type, c->writes);
            }
            ncall[d]++;
            for (int j = 0; j < cl->nargs; j++) {
                int i = sb_get(sb, &nsb, p, st, cl->arg[j], d);
                if (sb[i].t != c->type[j] && sb[i].kind != FILL_SCRATCH)
                    die("%s: argument %d: the slot's dtype is not the parameter's", c->name, j);
                c->sb[j] = i;
                sb[i].writes[d] |= c->writes[j];
            }
        }
    }
    /* another count (a dialect computing the kernel another way) is loose too */
    if (!split)
        for (int i = 0; i < ncall[1]; i++) {
            const cg_call *a = sc[i].cl, *b = sc[ncall[1] + i].cl;
            if (a->count != b->count) sc[i].loose = 1;
        }
    for (int i = 0; i < ncall[1]; i++) loose |= sc[i].loose;
    if (ngm[0] != ngm[1]) die("step %d: %d GEMMs in C, %d in CUDA", s, ngm[0], ngm[1]);
    for (int i = 0; i < ngm[0]; i++)
        if (memcmp(gm[0][i], gm[1][i], sizeof *gm[0][i]))
            die("step %d: GEMM %d differs between the dialects", s, i);
    tally.gemms += ngm[1];

    /* fills, from the step's seed; the two scratch areas start alike (a
     * skipped GEMM's output there reads the same on both sides) */
    rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(s + 1) * 0xc6a4a7935bd1e995ull;
    int ncopies = loose ? COPIES : COPIES - 1, big = -1, uscratch = -1;
    for (int i = 0; i < nsb; i++) {
        size_t bytes = sb[i].len * esize(sb[i].t);
        for (int c = 0; c < ncopies; c++) sb[i].b[c] = gb_alloc(bytes);
        fill(sb[i].b[0].p, bytes, sb[i].t, sb[i].kind, sb[i].classes);
        if (sb[i].kind == FILL_SCRATCH && sb[i].side == 1) uscratch = i;
        if (sb[i].kind == FILL_SCRATCH && sb[i].side == 0 && uscratch >= 0) {
            size_t ub = sb[uscratch].len * 4;
            memcpy(sb[i].b[0].p, sb[uscratch].b[0].p, ub < bytes ? ub : bytes);
        }
        for (int c = 1; c < ncopies; c++) memcpy(sb[i].b[c].p, sb[i].b[0].p, bytes);
        if (loose && sb[i].kind != FILL_SCRATCH) set_abs(sb[i].b[3].p, sb[i].len, sb[i].t);
        sb[i].orig = malloc(bytes + 1);
        if (!sb[i].orig) die("out of memory");
        memcpy(sb[i].orig, sb[i].b[0].p, bytes);
        if (sb[i].kind != FILL_SCRATCH && !sb[i].writes[0] && !sb[i].writes[1] &&
            (big < 0 || sb[i].len > sb[big].len))
            big = i;
    }
    int dropped = -1; /* its CUDA copies differ from orig by design */
    if (drop_one && loose && big >= 0 && sb[big].len > 0) {
        for (int c = 1; c <= 2; c++) memset(sb[big].b[c].p, 0, esize(sb[big].t));
        dropped = big;
    }

    /* the runs: the CUDA calls on copies 1 (and 2), the C calls on 0 (and 3) */
    char who[CG_NAME_MAX + 64];
    snprintf(who, sizeof who, "step %d (%s %s, %d CUDA and %d C calls)", s, ir_ops[sts[1]->op].name,
             node_name(&g->nodes[sts[1]->node]), ncall[1], ncall[0]);
    for (int c = 0; c < COPIES; c++) {
        int d = c == 1 || c == 2;
        if ((c == 2 || c == 3) && !loose) continue;
        if (d) {
            gbuf *bp[MAX_SB];
            const char *bn[MAX_SB];
            int nb = 0;
            for (int i = 0; i < nsb; i++)
                if (sb[i].side != 0) {
                    bp[nb] = &sb[i].b[c];
                    bn[nb++] = sb[i].name;
                }
            cuda_begin(bp, bn, nb);
        }
        for (int ci = 0; ci < nsc; ci++) {
            const scall *k = &sc[ci];
            if (k->d != d) continue;
            void *ptr[CG_MAX_ARGS];
            memset(&cur, 0, sizeof cur);
            cur.kernel = k->name;
            cur.nargs = k->cl->nargs;
            cur.copy = c;
            for (int j = 0; j < k->cl->nargs; j++) {
                sbuf *b = &sb[k->sb[j]];
                if (k->cl->off[j] < 0 || (size_t)k->cl->off[j] > b->len)
                    die("%s: argument %d: offset %lld outside its buffer of %zu", k->name, j,
                        (long long)k->cl->off[j], b->len);
                ptr[j] = b->b[c].p + (size_t)k->cl->off[j] * esize(b->t);
                cur.buf[j][c] = &b->b[c];
                cur.esize[j] = esize(b->t);
                cur.off[j] = k->cl->off[j];
            }
            if (d)
                cuda_launch(k->name, cuda_fn(k->name), &k->cl->launch, k->cl->nargs, ptr,
                            (long long)k->cl->count);
            else
                c_kernel(k->name)(ptr, (long long)k->cl->count, 0, (long long)k->cl->count);
        }
        if (d) cuda_end();
    }
    cur.kernel = NULL;

    /* the tolerance: n from the longest per-thread loop and the merge */
    double tol = 0;
    if (loose) {
        int64_t loop = 0, merge = 0;
        for (int ci = 0; ci < ncall[1]; ci++) {
            const cg_call *cl = sc[ci].cl;
            int64_t l = 0, bl = cl->launch.block ? cl->launch.block : 1;
            for (int j = 0; j < cl->nargs; j++) {
                const sbuf *b = &sb[sc[ci].sb[j]];
                int64_t n = (int64_t)b->len - cl->off[j];
                if (b->kind == FILL_SCRATCH) {
                    int64_t used = sts[1]->scratch > 0 ? sts[1]->scratch : n;
                    if (cl->count > 0 && (used + cl->count - 1) / cl->count > merge)
                        merge = (used + cl->count - 1) / cl->count;
                } else if (!sc[ci].writes[j] && n > l) {
                    l = n;
                }
            }
            int64_t per = cl->count > 0 ? (l + cl->count - 1) / cl->count : 0;
            if ((per + bl - 1) / bl > loop) loop = (per + bl - 1) / bl;
        }
        tol = tol_of((double)(loop + merge + 10 * (ncoop > 0 ? ncoop : 1) + 4));
    }

    /* the comparison */
    int same = 1, within = 1;
    for (int i = 0; i < nsb; i++) {
        sbuf *b = &sb[i];
        size_t bytes = b->len * esize(b->t);
        char what[CG_NAME_MAX + 40];
        snprintf(what, sizeof what, "buffer %s", b->name);
        if (loose && b->side != 0 && memcmp(b->b[1].p, b->b[2].p, bytes)) {
            failf("%s: %s: two CUDA runs on the same inputs differ", who, what);
            same = within = 0;
        }
        if (b->kind == FILL_SCRATCH) continue;
        for (int d = 0; d < 2; d++)
            if (!b->writes[d] && !(d && i == dropped) && memcmp(b->orig, b->b[d].p, bytes)) {
                failf("%s: %s: no %s call writes it, but the %s calls changed it", who, what,
                      d ? "CUDA" : "C", d ? "CUDA" : "C");
                same = within = 0;
            }
        if (b->writes[0] || b->writes[1])
            cmp_buf(who, what, b->b[0].p, b->b[1].p, loose ? b->b[3].p : NULL, b->len, b->t, loose,
                    tol, &same, &within);
    }
    tally.steps++;
    tally.split += split;
    tally.step_ucalls += ncall[1];
    tally.step_ccalls += ncall[0];
    if (same)
        tally.step_bitid++;
    else if (within)
        tally.step_tolok++;
    for (int i = 0; i < nsb; i++) {
        free(sb[i].orig);
        for (int c = 0; c < ncopies; c++) gb_free(&sb[i].b[c]);
    }
    free(sc);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: kernel_cmp PLAN train|eval DIR [--drop-one] [--shrink KERNEL] "
                        "[--per-step] [--device]\n");
        return 2;
    }
    for (int a = 4; a < argc; a++) {
        if (!strcmp(argv[a], "--drop-one"))
            drop_one = 1;
        else if (!strcmp(argv[a], "--per-step"))
            per_step = 1;
        else if (!strcmp(argv[a], "--device"))
            on_device = 1;
        else if (!strcmp(argv[a], "--shrink") && a + 1 < argc)
            shrink = argv[++a];
        else {
            fprintf(stderr, "kernel_cmp: unknown option %s\n", argv[a]);
            return 2;
        }
    }
    static char label[700];
    snprintf(label, sizeof label, "%s %s", argv[1], argv[2]);
    prog_label = label;
#ifndef DPC_HAVE_CUDA
    if (on_device) die("--device: this kernel_cmp was built without the CUDA toolkit");
#endif
    page = (size_t)sysconf(_SC_PAGESIZE);
    const char *cc = getenv("KCMP_CC"), *cxx = getenv("KCMP_CXX");
    if (!cc || (!cxx && !on_device)) die("KCMP_CC and KCMP_CXX must be set");

    static char alt[1 << 16];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
    struct sigaction sa = {0};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    if (sigaltstack(&ss, NULL) || sigaction(SIGSEGV, &sa, NULL) || sigaction(SIGBUS, &sa, NULL))
        die("cannot install the SIGSEGV handler");

    char err[1024];
    dpc_plan *plan = plan_read(argv[1], err, sizeof err);
    if (!plan) die("%s", err);
    g = !strcmp(argv[2], "train") ? plan->train : !strcmp(argv[2], "eval") ? plan->eval : NULL;
    if (!g) die("no %s program", argv[2]);
    cg_program *prog[2];
    for (int d = 0; d < 2; d++) {
        const plan_section *sec = plan_find_section(plan, cg_section_tag((cg_dialect)d));
        if (!sec) die("no %s section", cg_section_tag((cg_dialect)d));
        if (cg_section_find(sec->data, sec->len, g, &prog[d], err, sizeof err))
            die("%s: %s", cg_section_tag((cg_dialect)d), err[0] ? err : "no program for the graph");
    }
    pc = prog[CG_DIALECT_C];
    pu = prog[CG_DIALECT_CUDA];
    if (pc->nsteps != pu->nsteps) die("the C and CUDA programs differ in steps");
    for (int s = 0; s < pu->nsteps; s++)
        if (pc->steps[s].node != pu->steps[s].node)
            die("step %d: the C program computes node %d, the CUDA program node %d", s,
                pc->steps[s].node, pu->steps[s].node);

    /* the modules */
    dc = compile(argv[3], "c", cc, pc->source, "c");
    char *tu = NULL;
    if (on_device) {
#ifdef DPC_HAVE_CUDA
        char arch[24];
        device_open(pu, arch, sizeof arch);
        size_t o = strlen(label);
        snprintf(label + o, sizeof label - o, " (device %s)", arch);
#endif
    } else {
        size_t tulen = 200 + strlen(pu->source) + (size_t)pu->nkernels * (CG_NAME_MAX + 16);
        tu = malloc(tulen);
        if (!tu) die("out of memory");
        /* the TU includes the .cu text unchanged, from the same directory */
        uint64_t cu_hash = plan_checksum(pu->source, strlen(pu->source));
        char cu_path[4096];
        snprintf(cu_path, sizeof cu_path, "%s/cu-%016llx.cu", argv[3], (unsigned long long)cu_hash);
        write_file(cu_path, pu->source);
        size_t o =
            (size_t)snprintf(tu, tulen, "#include \"cuda_sim.h\"\n#include \"cu-%016llx.cu\"\n",
                             (unsigned long long)cu_hash);
        for (int k = 0; k < pu->nkernels; k++)
            o += (size_t)snprintf(tu + o, tulen - o, "SIM_KERNEL(%s)\n", pu->kernels[k].name);
        cu_module_host = compile(argv[3], "cu", cxx, tu, "cpp");
    }

    unsigned char *vars = variance_nodes(g);
    var = vars;
    for (int s = 0; s < pu->nsteps; s++) {
        const cg_step *st = &pu->steps[s];
        int split = !same_calls(s), kernels = 0;
        for (int d = 0; d < 2; d++) {
            const cg_program *p = d ? pu : pc;
            for (int ci = 0; ci < p->steps[s].ncalls; ci++)
                kernels += p->calls[p->steps[s].first_call + ci].kind == CG_CALL_KERNEL;
        }
        if ((split || per_step) && kernels) {
            run_step(s, split);
            continue;
        }
        for (int ci = 0; ci < st->ncalls; ci++) {
            if (pu->calls[st->first_call + ci].kind == CG_CALL_CONV)
                continue; /* its alternative follows it */
            if (pu->calls[st->first_call + ci].kind == CG_CALL_GEMM)
                tally.gemms++;
            else
                run_call(s, ci);
        }
    }
    if (shrink && !shrink_seen) die("--shrink %s: no call of that kernel", shrink);
    printf("%s: %d kernel calls compared (%d cooperative; %d repeats of a compared call and %d "
           "GEMMs skipped): %d bit-identical, %d within tolerance",
           label, tally.calls, tally.coop, tally.repeats, tally.gemms, tally.bitid, tally.tolok);
    if (on_device)
        printf("; %d held to the tolerance only for calling a math function", tally.math);
    if (tally.steps || tally.step_repeats)
        printf("; %d steps run whole (%d whose calls differ; %d CUDA and %d C kernel calls; %d "
               "repeats skipped): %d bit-identical, %d within tolerance",
               tally.steps, tally.split, tally.step_ucalls, tally.step_ccalls, tally.step_repeats,
               tally.step_bitid, tally.step_tolok);
    if (worst_tol > 0)
        printf("; worst loose error %.3g (tolerance %.3g, %s)", worst, worst_tol, worst_who);
    else if (tally.coop)
        printf("; cooperative kernels all bit-identical");
    printf("\n");
    free(vars);
    free(tu);
    cg_program_free(prog[0]);
    cg_program_free(prog[1]);
    plan_free(plan);
    return nfail ? 1 : 0;
}
