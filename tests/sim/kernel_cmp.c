/* tests/sim/kernel_cmp.c — every CUDA kernel call of a plan's program under
 * the simulator (tests/sim) against the C-dialect kernel of the same name
 * (tests/sim_models_test.sh runs it):
 *     kernel_cmp PLAN train|eval DIR [--drop-one] [--shrink KERNEL]
 * DIR caches the compiled modules by content hash; $KCMP_CC and $KCMP_CXX
 * are the compile commands (flags included) for the C module and for the
 * CUDA text as host C++ against cuda_sim.h.
 *
 * For every kernel call (GEMMs are the BLAS's, skipped) each argument gets a
 * buffer of its own holding exactly the elements its slot has from the
 * call's offset on, flush against a PROT_NONE page after its end (and one
 * before), filled from a seed: uniform in [-2, 2]; labels (i32) in
 * [0, classes); positive in [0.25, 2] for a buffer read as a variance (the
 * variance input of bn_apply, bn_grad_gamma and bn_grad_data, and a state
 * that ema updates from a bn_var: the running variance); the scratch area's
 * words are two bf16 halves in [-2, 2], so both readings are finite. The C
 * kernel runs on one copy, the simulated CUDA kernel on two others; every
 * buffer the kernel writes (not `const` in its signature) is compared, NaN
 * equal to NaN; const buffers must be left as they were.
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
 * --drop-one (the check that the tolerance is tight) sets element 0 of the
 * largest read buffer to 0 in the CUDA copies only, in cooperative kernels:
 * the run must then fail. --shrink KERNEL gives that kernel's first written
 * argument one element too few: the guard page's SIGSEGV is reported as one
 * line naming the kernel, the argument and the simulator's block/thread.
 * Prints one line: the program, calls compared, bit-identical, within
 * tolerance and the worst error of the cooperative kernels against its
 * tolerance; exits 0, or 1 with one line per failure on stderr. */
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

#include "codegen/program.h"
#include "ir/plan.h"
#include "tests/sim/sim.h"

extern const char *sim_where(void) __attribute__((weak));

static const char *prog_label = "";
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kernel_cmp: %s: ", prog_label);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
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
            long long e = (long long)((a - b->p) / (long long)cur.esize[j]);
            long long len = (long long)(b->bytes / cur.esize[j]);
            n = snprintf(
                msg, sizeof msg,
                "kernel_cmp: %s: SIGSEGV in %s (%s): argument %d, element %lld of %lld (%s)",
                prog_label, cur.kernel, copy_name[cur.copy], j, e, len,
                a < b->p ? "before its start" : "past its end");
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
    const char *body; /* from the signature to the next kernel */
    size_t body_len;
} ksig;

static const char *grid_stride =
    "for (idx_t i = (idx_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;";
static const char *coop_head = "for (idx_t i = blockIdx.x; i < count; i += gridDim.x)";

static ksig parse_sig(const char *src, const char *name) {
    ksig k = {0};
    char pat[CG_NAME_MAX + 40];
    snprintf(pat, sizeof pat, "__global__ void %s(", name);
    const char *s = strstr(src, pat);
    if (!s) die("%s: no CUDA signature", name);
    const char *next = strstr(s + 1, "__global__ void ");
    k.body = s;
    k.body_len = next ? (size_t)(next - s) : strlen(s);
    const char *p = s + strlen(pat);
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
    if (strstr(head, coop_head))
        k.coop = 1;
    else if (!strstr(head, grid_stride))
        die("%s: neither the grid-stride nor the cooperative loop head", name);
    free(head);
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

/* ---- one program ------------------------------------------------------------ */
static int nfail;
static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kernel_cmp: %s: ", prog_label);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    nfail++;
}

static int is_nan(double v) { return v != v; }

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: kernel_cmp PLAN train|eval DIR [--drop-one] [--shrink KERNEL]\n");
        return 2;
    }
    int drop_one = 0;
    const char *shrink = NULL;
    for (int a = 4; a < argc; a++) {
        if (!strcmp(argv[a], "--drop-one"))
            drop_one = 1;
        else if (!strcmp(argv[a], "--shrink") && a + 1 < argc)
            shrink = argv[++a];
        else {
            fprintf(stderr, "kernel_cmp: unknown option %s\n", argv[a]);
            return 2;
        }
    }
    static char label[600];
    snprintf(label, sizeof label, "%s %s", argv[1], argv[2]);
    prog_label = label;
    page = (size_t)sysconf(_SC_PAGESIZE);
    const char *cc = getenv("KCMP_CC"), *cxx = getenv("KCMP_CXX");
    if (!cc || !cxx) die("KCMP_CC and KCMP_CXX must be set");

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
    const ir_graph *g = !strcmp(argv[2], "train")  ? plan->train
                        : !strcmp(argv[2], "eval") ? plan->eval
                                                   : NULL;
    if (!g) die("no %s program", argv[2]);
    cg_program *prog[2];
    for (int d = 0; d < 2; d++) {
        const plan_section *sec = plan_find_section(plan, cg_section_tag((cg_dialect)d));
        if (!sec) die("no %s section", cg_section_tag((cg_dialect)d));
        if (cg_section_find(sec->data, sec->len, g, &prog[d], err, sizeof err))
            die("%s: %s", cg_section_tag((cg_dialect)d), err[0] ? err : "no program for the graph");
    }
    cg_program *pc = prog[CG_DIALECT_C], *pu = prog[CG_DIALECT_CUDA];
    if (pc->nsteps != pu->nsteps || pc->ncalls != pu->ncalls)
        die("the C and CUDA programs differ in steps or calls");

    /* the modules */
    void *dc = compile(argv[3], "c", cc, pc->source, "c");
    size_t tulen = 200 + strlen(pu->source) + (size_t)pu->nkernels * (CG_NAME_MAX + 16);
    char *tu = malloc(tulen);
    if (!tu) die("out of memory");
    /* the TU includes the .cu text unchanged, from the same directory */
    uint64_t cu_hash = plan_checksum(pu->source, strlen(pu->source));
    char cu_path[4096];
    snprintf(cu_path, sizeof cu_path, "%s/cu-%016llx.cu", argv[3], (unsigned long long)cu_hash);
    write_file(cu_path, pu->source);
    size_t o = (size_t)snprintf(tu, tulen, "#include \"cuda_sim.h\"\n#include \"cu-%016llx.cu\"\n",
                                (unsigned long long)cu_hash);
    for (int k = 0; k < pu->nkernels; k++)
        o += (size_t)snprintf(tu + o, tulen - o, "SIM_KERNEL(%s)\n", pu->kernels[k].name);
    void *du = compile(argv[3], "cu", cxx, tu, "cpp");

    unsigned char *vars = variance_nodes(g);
    var = vars;
    int shrink_seen = 0, nseen = 0, repeats = 0;
    enum { MAX_SEEN = 4096 };
    static const cg_call *seen[MAX_SEEN];
    static uint64_t seen_shape[MAX_SEEN];
    int calls = 0, bitid = 0, tolok = 0, gemms = 0, coop_calls = 0;
    double worst = 0, worst_tol = 0;
    char worst_kernel[CG_NAME_MAX] = "";
    for (int s = 0; s < pu->nsteps; s++) {
        const cg_step *st = &pu->steps[s];
        for (int ci = 0; ci < st->ncalls; ci++) {
            const cg_call *cl = &pu->calls[st->first_call + ci];
            const cg_call *clc = &pc->calls[pc->steps[s].first_call + ci];
            if (cl->kind == CG_CALL_GEMM) {
                gemms++;
                continue;
            }
            const char *name = pu->kernels[cl->kernel].name;
            if (clc->kind != CG_CALL_KERNEL || strcmp(pc->kernels[clc->kernel].name, name) ||
                clc->nargs != cl->nargs)
                die("step %d call %d: the C call differs from the CUDA call (%s)", s, ci, name);
            ksig k = parse_sig(pu->source, name);
            /* Cooperative kernels, and kernels a dialect computes another way
             * (another count: codegen.h gather_pool_grad), sum in another
             * order: they are held to the tolerance, not to the bits. */
            int loose = k.coop || clc->count != cl->count;
            if (k.nargs != cl->nargs)
                die("%s: %d parameters, the call passes %d", name, k.nargs, cl->nargs);
            char sym[CG_NAME_MAX + 16];
            snprintf(sym, sizeof sym, "sim_entry_%s", name);
            sim_entry fu = (sim_entry)(uintptr_t)dlsym(du, sym);
            void (*fc)(void *const *, long long, long long, long long) =
                (void (*)(void *const *, long long, long long, long long))(uintptr_t)dlsym(dc,
                                                                                           name);
            if (!fu || !fc) die("%s: not in the compiled modules", name);

            /* a call like an earlier one (kernel, count, launch, every
             * argument's length and offset) would repeat its check exactly */
            int dup = 0;
            for (int e = 0; e < nseen && !dup; e++) {
                const cg_call *q = seen[e];
                dup = q->kernel == cl->kernel && q->count == cl->count && q->nargs == cl->nargs &&
                      !memcmp(&q->launch, &cl->launch, sizeof q->launch) &&
                      seen_shape[e] == shape_of(pu, g, st, cl);
            }
            if (dup && !shrink) {
                repeats++;
                continue;
            }
            if (nseen < MAX_SEEN) {
                seen_shape[nseen] = shape_of(pu, g, st, cl);
                seen[nseen++] = cl;
            }

            /* buffers */
            gbuf b[CG_MAX_ARGS][COPIES];
            size_t len[CG_MAX_ARGS];
            const char *slotname[CG_MAX_ARGS];
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
                    etype t = n->type.dtype == IR_BF16  ? T_BF16
                              : n->type.dtype == IR_I32 ? T_I32
                                                        : T_F32;
                    if (t != k.type[j])
                        die("%s: argument %d: the slot's dtype is not the parameter's", name, j);
                    bytes = (size_t)(size - cl->off[j]) * esize(t);
                    if (t == T_I32) {
                        kind = FILL_LABEL;
                        classes = n->op == IR_OP_INPUT ? n->iattr[0] : 1;
                    } else if (var[node]) {
                        kind = FILL_POS;
                    }
                    slotname[j] = n->name[0] ? n->name : ir_ops[n->op].name;
                }
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
            if (drop_one && loose && big >= 0 && len[big] > 0)
                for (int c = 1; c <= 2; c++) memset(b[big][c].p, 0, esize(k.type[big]));

            /* the runs */
            long long count = cl->count;
            for (int c = 1; c <= 1 + loose; c++) {
                void *ptr[CG_MAX_ARGS + 1], *args[CG_MAX_ARGS + 1];
                for (int j = 0; j < cl->nargs; j++) {
                    ptr[j] = b[j][c].p;
                    args[j] = &ptr[j];
                }
                args[cl->nargs] = &count;
                cur.copy = c;
                sim_dim3 grid = {cl->launch.grid, 1, 1}, block = {cl->launch.block, 1, 1};
                if (sim_launch(name, fu, grid, block, cl->launch.shared, args, err, sizeof err))
                    die("%s", err);
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
            calls++;
            coop_calls += k.coop;
            int same = 1, within = 1;
            double tol = 0;
            if (loose) {
                int64_t l = 0;
                for (int j = 0; j < cl->nargs; j++)
                    if (!k.writes[j] && (int64_t)len[j] > l) l = (int64_t)len[j];
                int64_t per = count > 0 ? (l + count - 1) / count : 0;
                int64_t bl = cl->launch.block ? cl->launch.block : 1;
                double n = (double)((per + bl - 1) / bl + 10 + 4), u = ldexp(1, -24);
                tol = 2 * n * u / (1 - n * u);
            }
            for (int j = 0; j < cl->nargs; j++) {
                const char *what = slotname[j];
                if (loose && memcmp(b[j][1].p, b[j][2].p, b[j][1].bytes)) {
                    failf("%s: argument %d (%s): two CUDA runs on the same inputs differ", name, j,
                          what);
                    same = within = 0;
                }
                if (!k.writes[j]) {
                    for (int c = 0; c <= 1; c++)
                        if (memcmp(orig[j], b[j][c].p, b[j][c].bytes)) {
                            failf("%s: argument %d (%s) is const but the %s kernel wrote it", name,
                                  j, what, copy_name[c]);
                            same = within = 0;
                        }
                    continue;
                }
                etype t = k.type[j];
                if (!memcmp(b[j][0].p, b[j][1].p, b[j][0].bytes)) continue;
                double rms = 0;
                for (size_t i = 0; i < len[j]; i++) {
                    double v = elem(b[j][0].p, i, t);
                    if (!is_nan(v) && !isinf(v)) rms += v * v;
                }
                rms = len[j] ? sqrt(rms / (double)len[j]) : 0;
                for (size_t i = 0; i < len[j]; i++) {
                    double vc = elem(b[j][0].p, i, t), vu = elem(b[j][1].p, i, t);
                    if ((is_nan(vc) && is_nan(vu)) ||
                        !memcmp(b[j][0].p + i * esize(t), b[j][1].p + i * esize(t), esize(t)))
                        continue;
                    same = 0;
                    if (!loose || t == T_I32 || is_nan(vc) || is_nan(vu) || isinf(vc) ||
                        isinf(vu)) {
                        failf(
                            "%s: argument %d (%s) element %zu: %.9g (CUDA) vs %.9g (C), not bit-identical%s",
                            name, j, what, i, vu, vc, loose ? "" : " (one iteration per thread)");
                        within = 0;
                        break;
                    }
                    double sa = fabs(elem(b[j][3].p, i, t));
                    double scale = fmax(fmax(sa, fabs(vc)), rms);
                    double allow = tol * scale + ldexp(fabs(vc), -24);
                    if (t == T_BF16) allow += ldexp(fmax(fabs(vc), fabs(vu)), -7);
                    double e = scale > 0 ? fabs(vu - vc) / scale : INFINITY;
                    if (e / tol > (worst_tol > 0 ? worst / worst_tol : 0)) {
                        worst = e;
                        worst_tol = tol;
                        snprintf(worst_kernel, sizeof worst_kernel, "%s", name);
                    }
                    if (fabs(vu - vc) > allow) {
                        failf(
                            "%s: argument %d (%s) element %zu: %.9g (CUDA) vs %.9g (C): error %.3g of scale %.3g > "
                            "tolerance %.3g",
                            name, j, what, i, vu, vc, e, scale, tol);
                        within = 0;
                        break;
                    }
                }
            }
            if (same)
                bitid++;
            else if (within)
                tolok++;
            for (int j = 0; j < cl->nargs; j++) {
                free(orig[j]);
                for (int c = 0; c < ncopies; c++) gb_free(&b[j][c]);
            }
        }
    }
    if (shrink && !shrink_seen) die("--shrink %s: no call of that kernel", shrink);
    printf(
        "%s: %d kernel calls compared (%d cooperative; %d repeats of a compared call and %d GEMMs "
        "skipped): %d bit-identical, %d within tolerance",
        label, calls, coop_calls, repeats, gemms, bitid, tolok);
    if (worst_tol > 0)
        printf("; worst cooperative error %.3g (tolerance %.3g, %s)", worst, worst_tol,
               worst_kernel);
    else if (coop_calls)
        printf("; cooperative kernels all bit-identical");
    printf("\n");
    free(vars);
    free(tu);
    cg_program_free(pc);
    cg_program_free(pu);
    plan_free(plan);
    return nfail ? 1 : 0;
}
