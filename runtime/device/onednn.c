/* runtime/device/onednn.c — library convolutions on the cpu: oneDNN.
 *
 * A call is split into parts (a number fixed by the shape, never by the
 * thread count): the forward and data gradient over images or, where the
 * weights outweigh the activations, over their output's channels; the
 * weight gradient over output channels, so no part sums another's work. The
 * caller's pool runs the parts, each a single-threaded oneDNN primitive.
 * oneDNN's own OpenMP threads are never started (every thread that runs a
 * primitive sets its OpenMP thread count to 1 first), so one pool, dpc's,
 * governs the cores (DPC_THREADS), and a result does not depend on how
 * many threads ran it.
 *
 * Primitives take the layouts oneDNN prefers for the machine (format_tag
 * any: blocked on AVX-512); reorders convert between those and dpc's NCHW
 * tensors, a part's slices on the part's thread, the input every part
 * reads whole (the weights, or the activations of a channel split; x for
 * the weight gradient) once per call. Primitives and reorders are made
 * once per distinct descriptor and kept for the process: never per step. A shape oneDNN refuses is
 * remembered too, and its calls answer 1: the caller runs the alternative.
 */
#include "runtime/device/onednn.h"

#include <string.h>

int rt_onednn_impl_runs(const char *impl) {
    return impl && impl[0] && !strstr(impl, "gemm") && strncmp(impl, "ref", 3);
}

#ifndef DPC_HAVE_DNNL

int rt_onednn_conv(const cg_conv *d, void *out, const void *in, const void *in2, rt_parts_run run,
                   char *err, size_t errlen) {
    (void)d, (void)out, (void)in, (void)in2, (void)run, (void)err, (void)errlen;
    return 1;
}

const char *rt_onednn_conv_impl(const cg_conv *d) {
    (void)d;
    return NULL;
}

#else

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "runtime/check.h"
#include "runtime/device/device.h"
#include "runtime/log.h"

#include <dlfcn.h>

_Static_assert(RT_CONV_MAX_DIMS == DNNL_MAX_NDIMS, "rt_conv_split's dims are oneDNN's dnnl_dims_t");

/* oneDNN is loaded on first use, not linked: a process that runs no
 * library convolution never loads it, nor its OpenMP runtime (libgomp,
 * whose constructor reads and complains about OMP_NUM_THREADS values that
 * dprun refuses with a message of its own). The header gives the types. */
#define DNNL_FUNCS(X)                              \
    X(dnnl_convolution_backward_data_desc_init)    \
    X(dnnl_convolution_backward_weights_desc_init) \
    X(dnnl_convolution_forward_desc_init)          \
    X(dnnl_engine_create)                          \
    X(dnnl_memory_create)                          \
    X(dnnl_memory_desc_equal)                      \
    X(dnnl_memory_desc_get_size)                   \
    X(dnnl_memory_desc_init_by_strides)            \
    X(dnnl_memory_desc_init_by_tag)                \
    X(dnnl_memory_destroy)                         \
    X(dnnl_primitive_attr_create)                  \
    X(dnnl_primitive_attr_destroy)                 \
    X(dnnl_primitive_attr_set_scratchpad_mode)     \
    X(dnnl_primitive_create)                       \
    X(dnnl_primitive_desc_create)                  \
    X(dnnl_primitive_desc_destroy)                 \
    X(dnnl_primitive_desc_query)                   \
    X(dnnl_primitive_desc_query_md)                \
    X(dnnl_primitive_execute)                      \
    X(dnnl_reorder_primitive_desc_create)          \
    X(dnnl_stream_create)                          \
    X(dnnl_stream_destroy)                         \
    X(dnnl_stream_wait)
static struct {
#define X(f) __typeof__(f) *f;
    DNNL_FUNCS(X)
#undef X
    void (*omp_set_num_threads)(int); /* libgomp's, a dependency of libdnnl */
} dn;

static void omp_set_num_threads(int n) { dn.omp_set_num_threads(n); }

/* Binds dn from libdnnl.so.2; NULL, or why not. */
static const char *load_dnnl(void) {
    void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) return "libdnnl.so.2 not found (Debian: libdnnl2)";
#define X(f) \
    if (!(dn.f = (__typeof__(f) *)dlsym(h, #f))) return "libdnnl.so.2 lacks " #f;
    DNNL_FUNCS(X)
#undef X
    dn.omp_set_num_threads = (void (*)(int))dlsym(h, "omp_set_num_threads");
    if (!dn.omp_set_num_threads) return "libdnnl.so.2 has no OpenMP runtime (omp_set_num_threads)";
    return NULL;
}

/* tensors of a call, by role: the output, the first and second input */
enum { T_OUT, T_IN, T_IN2, T_COUNT };

/* A call splits into parts, each owning a slice of the output (no partial
 * sums): the forward and the data gradient over images, or, ungrouped,
 * over the channels of their output when the weights outweigh the
 * activations they read (the deep layers of a small image, where every
 * part of an image split would stream all the weights); the weight
 * gradient over output channels. One input is whole in every part
 * (shared): the weights of an image split, or the activations (x, dy)
 * of a channel split, reordered once per call (over chunks of images in
 * parallel where the layout keeps images outermost); grouped, a weight
 * gradient's part is whole groups, which read only their own channels of
 * x: a slice like dy's, reordered by the part. */
typedef struct conv_prim {
    cg_conv d;
    int parts;                                     /* 0: oneDNN refused the shape */
    dnnl_primitive_t prim;                         /* the convolution on one part */
    dnnl_memory_desc_t md[T_COUNT], user[T_COUNT]; /* a part's, primitive and dpc layouts */
    size_t step[T_COUNT]; /* bytes from one part's user slice to the next (0: shared) */
    int shared;           /* the input whole in every part (T_IN or T_IN2) */
    dnnl_primitive_t to_prim[T_COUNT]; /* user -> primitive layout (inputs), or NULL */
    dnnl_primitive_t to_user;          /* the output back, or NULL */
    size_t bytes[T_COUNT], scratch;    /* primitive-layout sizes, scratchpad */
    /* the shared input's reorder by chunks of images, or chunks 0: whole */
    int chunks;
    dnnl_primitive_t chunk_reorder;
    dnnl_memory_desc_t chunk_user, chunk_md;
    size_t chunk_user_step, chunk_md_step;
    int zero_out;  /* a trimmed weight gradient: each part zeroes its slice first */
    char impl[64]; /* oneDNN's name for the implementation it chose, or "" */
    struct conv_prim *next;
} conv_prim;

static dnnl_engine_t engine;
static const char *engine_error;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t prims_mu = PTHREAD_MUTEX_INITIALIZER;
static conv_prim *prims;

/* Per thread: a stream, OpenMP limited to this thread, growing buffers. */
static _Thread_local dnnl_stream_t tls_stream;
static _Thread_local struct {
    char *p;
    size_t cap;
} tls_buf[2]; /* [0]: a part's tensors; [1]: a call's shared input */

/* A thread's stream and buffers go with the thread (replica threads and
 * tests' threads end; the pool's never do). */
static pthread_key_t thread_key;
static void thread_end(void *unused) {
    (void)unused;
    if (tls_stream) dn.dnnl_stream_destroy(tls_stream);
    tls_stream = NULL;
    for (int i = 0; i < 2; i++) {
        free(tls_buf[i].p);
        tls_buf[i].p = NULL, tls_buf[i].cap = 0;
    }
}

/* libdnnl bound and its cpu engine made: NULL, or why not. */
static const char *engine_open(void) {
    const char *why = load_dnnl();
    if (why) return why;
    omp_set_num_threads(1);
    return dn.dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success ? NULL : "no cpu engine";
}

static void engine_start(void) {
    if (pthread_key_create(&thread_key, thread_end)) {
        engine_error = "no thread key";
        return;
    }
    engine_error = engine_open();
    if (engine_error)
        rt_log(RT_LOG_NOTE, "oneDNN: %s: convolutions run as im2col + GEMM", engine_error);
}

static dnnl_stream_t thread_stream(void) {
    if (!tls_stream) {
        pthread_setspecific(thread_key, &thread_key); /* thread_end runs at its exit */
        omp_set_num_threads(1);
        if (dn.dnnl_stream_create(&tls_stream, engine, dnnl_stream_default_flags) != dnnl_success)
            tls_stream = NULL;
    }
    return tls_stream;
}

static char *thread_buf(int which, size_t bytes) {
    if (tls_buf[which].cap < bytes) {
        free(tls_buf[which].p);
        tls_buf[which].p = aligned_alloc(64, (bytes + 63) / 64 * 64);
        RT_CHECK_ALLOC(tls_buf[which].p);
        tls_buf[which].cap = bytes;
    }
    return tls_buf[which].p;
}

static size_t md_bytes(const dnnl_memory_desc_t *md) { return dn.dnnl_memory_desc_get_size(md); }
static size_t up64(size_t n) { return (n + 63) / 64 * 64; }

/* A reorder between two descriptions of one tensor; NULL when they agree. */
static int make_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                        dnnl_primitive_t *out) {
    *out = NULL;
    if (dn.dnnl_memory_desc_equal(from, to)) return 0;
    dnnl_primitive_desc_t pd;
    if (dn.dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, NULL) != dnnl_success)
        return -1;
    dnnl_status_t s = dn.dnnl_primitive_create(out, pd);
    dn.dnnl_primitive_desc_destroy(pd);
    return s == dnnl_success ? 0 : -1;
}

static dnnl_data_type_t dtype_of(int ir_type) { return ir_type == IR_BF16 ? dnnl_bf16 : dnnl_f32; }
static size_t elem_bytes(int ir_type) { return ir_type == IR_BF16 ? 2 : 4; }

/* NCHW (OIHW, GOIHW) dims with strides: a slice of a larger tensor. */
static int plain_md(dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims,
                    const dnnl_dims_t strides, int ir_type) {
    return dn.dnnl_memory_desc_init_by_strides(md, ndims, dims, dtype_of(ir_type), strides) !=
           dnnl_success;
}

/* The shared activations (x, dy) reordered by chunks of images, when the
 * primitive's layout keeps images outermost (then a chunk is the same
 * layout with fewer images, a fixed step apart); image_bytes: one image's
 * in dpc's layout. */
static void plan_chunks(conv_prim *c, size_t image_bytes) {
    const dnnl_memory_desc_t *md = &c->md[c->shared], *user = &c->user[c->shared];
    int64_t N = c->d.N;
    int chunks = rt_conv_divisor_upto(N, RT_CONV_MAX_PARTS, 1);
    if (chunks < 2 || md->format_kind != dnnl_blocked || md->offset0 != 0) return;
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    for (int i = 1; i < md->ndims; i++)
        if (b->strides[i] * md->padded_dims[i] > b->strides[0]) return;
    size_t es = md->data_type == dnnl_bf16 ? 2 : 4;
    if ((size_t)b->strides[0] * (size_t)N * es != md_bytes(md)) return;
    dnnl_memory_desc_t cu = *user, cm = *md;
    cu.dims[0] = cu.padded_dims[0] = N / chunks;
    cm.dims[0] = cm.padded_dims[0] = N / chunks;
    dnnl_primitive_t r;
    if (make_reorder(&cu, &cm, &r) || !r) return;
    c->chunks = chunks;
    c->chunk_reorder = r;
    c->chunk_user = cu, c->chunk_md = cm;
    c->chunk_user_step = (size_t)(N / chunks) * image_bytes;
    c->chunk_md_step = (size_t)(N / chunks) * (size_t)b->strides[0] * es;
}

/* One part's x, w and y as oneDNN memory descriptors: in the layouts the
 * primitive picks (any), in the forward hint's (h*), and dpc's own (user;
 * the weights a strided view of the kept taps). */
typedef struct {
    dnnl_memory_desc_t x_any, w_any, y_any, hx, hw, hy, x_user, w_user, y_user;
} conv_mds;

/* 0, or nonzero when oneDNN refuses one. */
static int make_mds(const cg_conv *d, const rt_conv_split *g, conv_mds *m) {
    /* bf16 activations: the products in bf16 (f32 accumulation), each
     * output in its own type, f32 weights converted by the reorder */
    int bf = d->type_x == IR_BF16 || d->type_y == IR_BF16;
    dnnl_data_type_t comp = bf ? dnnl_bf16 : dnnl_f32;
    dnnl_data_type_t tx = d->dir == CG_CONV_BACKWARD_DATA ? dtype_of(d->type_x) : comp,
                     tw = d->dir == CG_CONV_BACKWARD_WEIGHTS ? dtype_of(d->type_w) : comp,
                     ty = d->dir == CG_CONV_FORWARD ? dtype_of(d->type_y) : comp;
    if (dn.dnnl_memory_desc_init_by_tag(&m->x_any, 4, g->xd, tx, dnnl_format_tag_any) ||
        dn.dnnl_memory_desc_init_by_tag(&m->w_any, g->wn, g->wd, tw, dnnl_format_tag_any) ||
        dn.dnnl_memory_desc_init_by_tag(&m->y_any, 4, g->yd, ty, dnnl_format_tag_any) ||
        dn.dnnl_memory_desc_init_by_tag(&m->hx, 4, g->xd, comp, dnnl_format_tag_any) ||
        dn.dnnl_memory_desc_init_by_tag(&m->hw, g->wn, g->wd, comp, dnnl_format_tag_any) ||
        dn.dnnl_memory_desc_init_by_tag(&m->hy, 4, g->yd, comp, dnnl_format_tag_any) ||
        plain_md(&m->x_user, 4, g->xd, g->xs, d->type_x) ||
        plain_md(&m->w_user, g->wn, g->wd, g->ws, d->type_w) ||
        plain_md(&m->y_user, 4, g->yd, g->ys, d->type_y))
        return -1;
    m->w_user.offset0 = g->r0 * d->kw + g->q0; /* the kept taps of dpc's [K, C/G, kh, kw] */
    return 0;
}

/* The primitive descriptor of d's direction (a backward one with the
 * forward's as its hint), its scratchpad the caller's; NULL when oneDNN
 * refuses it. */
static dnnl_primitive_desc_t make_pd(const cg_conv *d, const rt_conv_split *g, const conv_mds *m) {
    dnnl_primitive_attr_t attr;
    if (dn.dnnl_primitive_attr_create(&attr)) return NULL;
    dn.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    dnnl_convolution_desc_t fd, bd;
    dnnl_primitive_desc_t fpd = NULL, pd = NULL;
    int fwd = g->fwd;
    int ok = !dn.dnnl_convolution_forward_desc_init(
                 &fd, dnnl_forward_training, dnnl_convolution_direct, fwd ? &m->x_any : &m->hx,
                 fwd ? &m->w_any : &m->hw, NULL, fwd ? &m->y_any : &m->hy, g->st, g->pl, g->pr) &&
             !dn.dnnl_primitive_desc_create(&fpd, &fd, attr, engine, NULL);
    if (ok && d->dir == CG_CONV_FORWARD) {
        pd = fpd, fpd = NULL;
    } else if (ok && d->dir == CG_CONV_BACKWARD_DATA) {
        ok = !dn.dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &m->x_any,
                                                          &m->w_any, &m->y_any, g->st, g->pl,
                                                          g->pr) &&
             !dn.dnnl_primitive_desc_create(&pd, &bd, attr, engine, fpd);
    } else if (ok) {
        ok = !dn.dnnl_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct,
                                                             &m->x_any, &m->w_any, NULL, &m->y_any,
                                                             g->st, g->pl, g->pr) &&
             !dn.dnnl_primitive_desc_create(&pd, &bd, attr, engine, fpd);
    }
    dn.dnnl_primitive_attr_destroy(attr);
    if (fpd) dn.dnnl_primitive_desc_destroy(fpd);
    if (!ok) {
        if (pd) dn.dnnl_primitive_desc_destroy(pd);
        return NULL;
    }
    return pd;
}

/* A convolution oneDNN can only run as im2col + GEMM (ungrouped, or
 * per group), or by its reference code, is declined: dpc's own
 * alternative is that method with dpc's pool splitting the GEMM, or
 * for a grouped one the direct kernel. oneDNN 2.6 on AVX2 takes that
 * way for the weight gradient of a 2x2 plane at stride 1, ungrouped
 * (four times dpc's im2col) and depthwise (ten times the direct kernel).
 * Records pd's implementation in c->impl; 1 (pd destroyed) when declined. */
static int declined(conv_prim *c, dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    if (!dn.dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) && impl)
        snprintf(c->impl, sizeof c->impl, "%s", impl);
    if (rt_onednn_impl_runs(c->impl)) return 0;
    if (rt_debug_level() >= 1) {
        char what[160];
        cg_conv_describe(&c->d, what, sizeof what);
        rt_log(RT_LOG_INFO, "oneDNN: %s: only %s, declined", what,
               c->impl[0] ? c->impl : "an unnamed implementation");
    }
    dn.dnnl_primitive_desc_destroy(pd);
    return 1;
}

/* The roles' layouts (the primitive's and dpc's) and steps between parts,
 * the primitive and its reorders from pd (destroyed here), the shared
 * activations' chunks; 1 when all were made. */
static int bind_roles(conv_prim *c, const rt_conv_split *g, const conv_mds *m,
                      dnnl_primitive_desc_t pd) {
    const cg_conv *d = &c->d;
    int by_ch = g->by_ch, fwd = g->fwd;
    int64_t HW = g->HW, PQ = g->PQ, kk = g->kk, kp = g->kp, cp = g->cp, nb = g->nb;
    /* the roles' queries, user layouts and steps between parts, per direction */
    static const dnnl_query_t q[3][T_COUNT] = {
        [CG_CONV_FORWARD] = {dnnl_query_dst_md, dnnl_query_src_md, dnnl_query_weights_md},
        [CG_CONV_BACKWARD_DATA] = {dnnl_query_diff_src_md, dnnl_query_diff_dst_md,
                                   dnnl_query_weights_md},
        [CG_CONV_BACKWARD_WEIGHTS] = {dnnl_query_diff_weights_md, dnnl_query_diff_dst_md,
                                      dnnl_query_src_md}};
    const dnnl_memory_desc_t *users[3][T_COUNT] = {
        [CG_CONV_FORWARD] = {&m->y_user, &m->x_user, &m->w_user},
        [CG_CONV_BACKWARD_DATA] = {&m->x_user, &m->y_user, &m->w_user},
        [CG_CONV_BACKWARD_WEIGHTS] = {&m->w_user, &m->y_user, &m->x_user}};
    /* a part's step: its images, or its channels and their weights */
    size_t xstep = (size_t)(by_ch ? cp * HW : nb * d->C * HW) * elem_bytes(d->type_x),
           ystep = (size_t)(by_ch ? kp * PQ : nb * d->K * PQ) * elem_bytes(d->type_y),
           wstep = (size_t)(fwd ? kp * d->C * kk : cp * kk) * elem_bytes(d->type_w);
    const size_t steps[3][T_COUNT] = {
        [CG_CONV_FORWARD] = {ystep, by_ch ? 0 : xstep, by_ch ? wstep : 0},
        [CG_CONV_BACKWARD_DATA] = {xstep, by_ch ? 0 : ystep, by_ch ? wstep : 0},
        [CG_CONV_BACKWARD_WEIGHTS] = {(size_t)(kp * g->Cg * kk) * elem_bytes(d->type_w),
                                      (size_t)(kp * PQ) * elem_bytes(d->type_y),
                                      g->G > 1 ? (size_t)(cp * HW) * elem_bytes(d->type_x) : 0}};
    for (int t = 0; t < T_COUNT; t++) {
        c->md[t] = *dn.dnnl_primitive_desc_query_md(pd, q[d->dir][t], 0);
        c->user[t] = *users[d->dir][t];
        c->bytes[t] = md_bytes(&c->md[t]);
        c->step[t] = steps[d->dir][t];
    }
    c->shared = by_ch ? T_IN : T_IN2;
    c->scratch = md_bytes(dn.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    int ok = !dn.dnnl_primitive_create(&c->prim, pd) &&
             !make_reorder(&c->user[T_IN], &c->md[T_IN], &c->to_prim[T_IN]) &&
             !make_reorder(&c->user[T_IN2], &c->md[T_IN2], &c->to_prim[T_IN2]) &&
             !make_reorder(&c->md[T_OUT], &c->user[T_OUT], &c->to_user);
    dn.dnnl_primitive_desc_destroy(pd);
    /* shared activations: x of the weight gradient and the forward, dy of the data gradient */
    size_t image = (size_t)(d->dir == CG_CONV_BACKWARD_DATA ? d->K * PQ : d->C * HW) *
                   elem_bytes(d->dir == CG_CONV_BACKWARD_DATA ? d->type_y : d->type_x);
    if (ok && (g->bwd_w || by_ch) && c->to_prim[c->shared] && !c->step[c->shared])
        plan_chunks(c, image);
    return ok;
}

/* Builds the primitive for d, or leaves parts 0 when oneDNN refuses it.
 * Taps that only ever read padding are left out (a smaller kernel, less
 * padding, the weights a strided view of the kept taps; the weight
 * gradient's other taps are zeros), so the deep layers of a small image
 * do only the work that counts; the sums are the same terms less zeros.
 * Steps: the split (onednn_split.c), the memory descriptors, the primitive descriptor,
 * the implementation oneDNN picked (declined or kept), the primitive
 * bound to its roles. */
static void build(conv_prim *c) {
    const cg_conv *d = &c->d;
    rt_conv_split g;
    conv_mds m;
    if (rt_conv_split_plan(d, &g) || make_mds(d, &g, &m)) return;
    c->zero_out = g.bwd_w && (g.kh < d->kh || g.kw < d->kw);
    dnnl_primitive_desc_t pd = make_pd(d, &g, &m);
    if (!pd || declined(c, pd)) return;
    int ok = bind_roles(c, &g, &m, pd);
    if (ok) c->parts = g.parts;
    if (ok && rt_debug_level() >= 2) {
        char what[160];
        cg_conv_describe(d, what, sizeof what);
        rt_log(RT_LOG_INFO, "oneDNN: %s: %s, %d parts by %s", what, c->impl, g.parts,
               g.by_ch || g.bwd_w ? "channels" : "images");
    }
}

/* The primitive for d, made on first use. */
static conv_prim *prim_for(const cg_conv *d) {
    pthread_mutex_lock(&prims_mu);
    conv_prim *c = prims;
    while (c && !cg_conv_equal(&c->d, d)) c = c->next;
    if (!c) {
        c = calloc(1, sizeof *c);
        RT_CHECK_ALLOC(c);
        c->d = *d;
        thread_stream(); /* this thread's OpenMP count is 1 before oneDNN looks */
        build(c);
        c->next = prims;
        prims = c;
    }
    pthread_mutex_unlock(&prims_mu);
    return c;
}

static int exec_args(dnnl_primitive_t p, dnnl_stream_t s, int n, const dnnl_exec_arg_t *a) {
    return dn.dnnl_primitive_execute(p, s, n, a) != dnnl_success ||
           dn.dnnl_stream_wait(s) != dnnl_success;
}

static dnnl_memory_t memory(const dnnl_memory_desc_t *md, void *p) {
    dnnl_memory_t m = NULL;
    return dn.dnnl_memory_create(&m, md, engine, p) == dnnl_success ? m : NULL;
}

/* Runs reorder r from one layout's bytes to another's. */
static int reorder(dnnl_primitive_t r, dnnl_stream_t s, const dnnl_memory_desc_t *from_md,
                   const void *from, const dnnl_memory_desc_t *to_md, void *to) {
    dnnl_memory_t a = memory(from_md, (void *)from), b = memory(to_md, to);
    int bad =
        !a || !b || exec_args(r, s, 2, (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}});
    if (a) dn.dnnl_memory_destroy(a);
    if (b) dn.dnnl_memory_destroy(b);
    return bad;
}

typedef struct {
    const conv_prim *c;
    char *base[T_COUNT]; /* the call's tensors (bytes) */
    char *shared;        /* the shared input in primitive layout, or NULL: as it is */
    atomic_int failed;
} conv_job;

static const int dnnl_arg[3][T_COUNT] = {
    [CG_CONV_FORWARD] = {DNNL_ARG_DST, DNNL_ARG_SRC, DNNL_ARG_WEIGHTS},
    [CG_CONV_BACKWARD_DATA] = {DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS},
    [CG_CONV_BACKWARD_WEIGHTS] = {DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST, DNNL_ARG_SRC}};

/* One chunk of images of the shared input into primitive layout. */
static void chunk_part(void *ctx, int part, int parts) {
    conv_job *j = ctx;
    const conv_prim *c = j->c;
    (void)parts;
    dnnl_stream_t s = thread_stream();
    if (!s || reorder(c->chunk_reorder, s, &c->chunk_user,
                      j->base[c->shared] + (size_t)part * c->chunk_user_step, &c->chunk_md,
                      j->shared + (size_t)part * c->chunk_md_step))
        atomic_store(&j->failed, 1);
}

static void conv_part(void *ctx, int part, int parts) {
    conv_job *j = ctx;
    const conv_prim *c = j->c;
    (void)parts;
    dnnl_stream_t s = thread_stream();
    if (!s) {
        atomic_store(&j->failed, 1);
        return;
    }
    /* this part's tensors, in the primitive's layout where it differs */
    size_t off[T_COUNT + 1] = {0};
    for (int t = 0; t < T_COUNT; t++) off[t + 1] = off[t] + up64(c->bytes[t]);
    char *buf = thread_buf(0, off[T_COUNT] + c->scratch);
    void *at[T_COUNT], *user[T_COUNT];
    for (int t = 0; t < T_COUNT; t++) at[t] = user[t] = j->base[t] + (size_t)part * c->step[t];
    if (c->zero_out) memset(user[T_OUT], 0, c->step[T_OUT]); /* the taps left out */
    int bad = 0;
    for (int t = T_IN; t < T_COUNT && !bad; t++) {
        if (!c->to_prim[t]) continue;
        if (!c->step[t]) { /* shared: reordered once for every part */
            at[t] = j->shared;
            continue;
        }
        at[t] = buf + off[t];
        bad = reorder(c->to_prim[t], s, &c->user[t], user[t], &c->md[t], at[t]);
    }
    if (c->to_user) at[T_OUT] = buf + off[T_OUT];
    dnnl_memory_t m[T_COUNT + 1] = {0};
    dnnl_exec_arg_t a[T_COUNT + 1];
    for (int t = 0; t < T_COUNT && !bad; t++) {
        m[t] = memory(&c->md[t], at[t]);
        a[t] = (dnnl_exec_arg_t){dnnl_arg[c->d.dir][t], m[t]};
        bad = !m[t];
    }
    if (!bad && c->scratch) {
        dnnl_memory_desc_t smd;
        dnnl_dims_t sd = {(dnnl_dim_t)c->scratch};
        bad = dn.dnnl_memory_desc_init_by_tag(&smd, 1, sd, dnnl_u8, dnnl_a) != dnnl_success ||
              !(m[T_COUNT] = memory(&smd, buf + off[T_COUNT]));
        a[T_COUNT] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m[T_COUNT]};
    }
    if (!bad) bad = exec_args(c->prim, s, c->scratch ? T_COUNT + 1 : T_COUNT, a);
    for (int t = 0; t <= T_COUNT; t++)
        if (m[t]) dn.dnnl_memory_destroy(m[t]);
    if (!bad && c->to_user)
        bad = reorder(c->to_user, s, &c->md[T_OUT], at[T_OUT], &c->user[T_OUT], user[T_OUT]);
    if (bad) atomic_store(&j->failed, 1);
}

const char *rt_onednn_conv_impl(const cg_conv *d) {
    pthread_once(&engine_once, engine_start);
    return engine_error ? NULL : prim_for(d)->impl;
}

int rt_onednn_conv(const cg_conv *d, void *out, const void *in, const void *in2, rt_parts_run run,
                   char *err, size_t errlen) {
    pthread_once(&engine_once, engine_start);
    if (engine_error) return 1;
    conv_prim *c = prim_for(d);
    if (!c->parts) return 1;
    dnnl_stream_t s = thread_stream();
    if (!s) return base_fail(err, errlen, "oneDNN: cannot create a stream");
    conv_job j = {.c = c, .base = {out, (char *)in, (char *)in2}};
    /* the shared input, once for every part: by chunks of images, or whole */
    int t = c->shared;
    if (c->to_prim[t] && !c->step[t]) {
        j.shared = thread_buf(1, c->bytes[t]);
        if (c->chunks)
            run(chunk_part, &j, c->chunks);
        else if (reorder(c->to_prim[t], s, &c->user[t], j.base[t], &c->md[t], j.shared))
            atomic_store(&j.failed, 1);
    }
    if (!atomic_load(&j.failed)) run(conv_part, &j, c->parts);
    if (atomic_load(&j.failed))
        return base_fail(err, errlen, "oneDNN: %s convolution failed", cg_conv_dir_name(d->dir));
    return 0;
}

#endif
