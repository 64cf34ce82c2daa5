/* Tests for runtime/comm/collective.c: the local all-reduce from N threads is the
 * replica-order sum whatever the threads' timing, for every size (empty,
 * fewer elements than replicas, large, growing); broadcast; barriers;
 * aborts and mismatched calls fail instead of hanging; buckets on the
 * communication queue; staging for backends without host memory; MPI
 * helpers outside mpirun. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/device/device.h"
#include "runtime/comm/comm.h"
#include "tests/harness.h"

static uint64_t mix(uint64_t x) { /* splitmix64: values and delays per (replica, call) */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Values with widely different magnitudes, so that another order of the
 * additions would round differently. */
static float value(int replica, int64_t i, int salt) {
    uint64_t h = mix(((uint64_t)salt << 40) ^ ((uint64_t)replica << 32) ^ (uint64_t)i);
    double u = (double)(h >> 11) / (double)(1ull << 53) - 0.5;
    int e = (int)(h % 17) - 8;
    return (float)(u * (double)(1 << 8) * (e >= 0 ? (double)(1 << e) : 1.0 / (double)(1 << -e)));
}

static float expected(int n, int64_t i, int salt) {
    double s = 0;
    for (int r = 0; r < n; r++) s += (double)value(r, i, salt);
    return (float)s;
}

static void nap(uint64_t h) { /* 0-300 us, or none */
    unsigned us = (unsigned)(h % 400);
    if (us >= 300) return;
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

typedef struct {
    rt_coll *c;
    int r, n, calls, jitter;
    const int64_t *sizes; /* per call */
    float **out;          /* per call: this replica's result */
    int rc;
    char err[256];
} worker;

static void *allreduce_worker(void *arg) {
    worker *w = arg;
    for (int k = 0; k < w->calls; k++) {
        int64_t cnt = w->sizes[k];
        float *buf = w->out[k];
        for (int64_t i = 0; i < cnt; i++) buf[i] = value(w->r, i, k);
        if (w->jitter)
            nap(mix((uint64_t)w->r * 7919u + (uint64_t)k + (uint64_t)w->jitter * 104729u));
        if (rt_coll_allreduce_sum(w->c, w->r, buf, cnt, w->err, sizeof w->err)) {
            w->rc = -1;
            return NULL;
        }
    }
    return NULL;
}

/* n threads make `calls` all-reduces of the given sizes; checks every
 * replica holds the replica-order sum, bit for bit. */
static int run_allreduce(rt_backend *be, int n, int calls, const int64_t *sizes, int jitter) {
    rt_coll *c = rt_coll_local_new(n, be);
    worker *w = calloc((size_t)n, sizeof *w);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    int bad = 0;
    for (int r = 0; r < n; r++) {
        w[r] = (worker){.c = c, .r = r, .n = n, .calls = calls, .jitter = jitter, .sizes = sizes};
        w[r].out = calloc((size_t)calls, sizeof *w[r].out);
        for (int k = 0; k < calls; k++) w[r].out[k] = calloc((size_t)sizes[k] + 1, sizeof(float));
        pthread_create(&th[r], NULL, allreduce_worker, &w[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++) {
        if (w[r].rc) {
            fprintf(stderr, "replica %d: %s\n", r, w[r].err);
            bad++;
        }
        for (int k = 0; k < calls && !w[r].rc; k++)
            for (int64_t i = 0; i < sizes[k]; i++) {
                float want = expected(n, i, k), got = w[r].out[k][i];
                if (memcmp(&want, &got, sizeof want)) {
                    if (bad < 5)
                        fprintf(stderr, "n=%d replica %d call %d element %lld: %.9g, want %.9g\n",
                                n, r, k, (long long)i, got, want);
                    bad++;
                    break;
                }
            }
        for (int k = 0; k < calls; k++) free(w[r].out[k]);
        free(w[r].out);
    }
    free(w);
    free(th);
    rt_coll_free(c);
    return bad;
}

TEST(sum_is_replica_order_for_any_thread_count) {
    rt_backend *be = rt_backend_cpu();
    int64_t sizes[] = {1000, 37, 4096};
    for (int n = 1; n <= 8; n++) CHECK_MSG(run_allreduce(be, n, 3, sizes, 0) == 0, "n=%d", n);
    rt_backend_free(be);
}

TEST(sum_does_not_depend_on_timing) {
    /* Threads arrive in a different order on every run and call; the sums
     * must come out bit-identical (and equal to the serial reference). */
    rt_backend *be = rt_backend_cpu();
    int64_t sizes[] = {777, 5, 2049, 64};
    for (int run = 1; run <= 6; run++)
        CHECK_MSG(run_allreduce(be, 5, 4, sizes, run) == 0, "run %d", run);
    rt_backend_free(be);
}

TEST(sizes_empty_tiny_large_and_growing) {
    rt_backend *be = rt_backend_cpu();
    /* 0 elements; fewer elements than replicas (empty slices); a large
     * buffer after small ones (the accumulator grows); small again. */
    int64_t sizes[] = {0, 1, 3, 6, (int64_t)1 << 20, 2, (int64_t)3 << 18};
    CHECK(run_allreduce(be, 6, 7, sizes, 0) == 0);
    rt_backend_free(be);
}

TEST(sum_of_one_replica_is_identity) {
    rt_backend *be = rt_backend_cpu();
    rt_coll *c = rt_coll_local_new(1, be);
    float x[4] = {1.5f, -2.0f, 1e-30f, 3e30f}, y[4];
    memcpy(y, x, sizeof x);
    char err[128];
    CHECK(rt_coll_allreduce_sum(c, 0, y, 4, err, sizeof err) == 0);
    CHECK(memcmp(x, y, sizeof x) == 0);
    CHECK(rt_coll_size(c) == 1 && rt_coll_local_size(c) == 1 && rt_coll_rank(c) == 0);
    CHECK_STR(rt_coll_name(c), "local");
    CHECK(rt_coll_allreduce_sum(c, 1, y, 4, err, sizeof err) == -1); /* no replica 1 */
    rt_coll_free(c);
    rt_backend_free(be);
}

/* ---- failures do not hang ---- */

typedef struct {
    rt_coll *c;
    int r;
    int64_t count;
    int rc;
    char err[256];
} simple_arg;

static void *mismatch_worker(void *arg) {
    simple_arg *a = arg;
    float buf[16] = {0};
    a->rc = rt_coll_allreduce_sum(a->c, a->r, buf, a->count, a->err, sizeof a->err);
    return NULL;
}

TEST(mismatched_sizes_fail_everywhere) {
    rt_backend *be = rt_backend_cpu();
    rt_coll *c = rt_coll_local_new(3, be);
    simple_arg a[3];
    pthread_t th[3];
    for (int r = 0; r < 3; r++) {
        a[r] = (simple_arg){.c = c, .r = r, .count = r == 2 ? 9 : 8};
        pthread_create(&th[r], NULL, mismatch_worker, &a[r]);
    }
    for (int r = 0; r < 3; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 3; r++) {
        CHECK(a[r].rc == -1);
        CHECK_MSG(strstr(a[r].err, "sizes differ") != NULL, "%s", a[r].err);
    }
    CHECK(rt_coll_aborted(c));
    rt_coll_free(c);
    rt_backend_free(be);
}

static void *abort_worker(void *arg) {
    simple_arg *a = arg;
    if (a->r == 1) { /* this replica fails before its collective call */
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        rt_coll_abort(a->c);
        a->rc = -1;
        return NULL;
    }
    float buf[4] = {0};
    a->rc = rt_coll_allreduce_sum(a->c, a->r, buf, 4, a->err, sizeof a->err);
    return NULL;
}

TEST(abort_wakes_waiting_replicas) {
    rt_backend *be = rt_backend_cpu();
    rt_coll *c = rt_coll_local_new(3, be);
    simple_arg a[3];
    pthread_t th[3];
    for (int r = 0; r < 3; r++) {
        a[r] = (simple_arg){.c = c, .r = r};
        pthread_create(&th[r], NULL, abort_worker, &a[r]);
    }
    for (int r = 0; r < 3; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 3; r++) CHECK(a[r].rc == -1);
    CHECK(strstr(a[0].err, "aborted") != NULL);
    /* Later calls fail at once. */
    float x = 1;
    char err[128];
    CHECK(rt_coll_allreduce_sum(c, 0, &x, 1, err, sizeof err) == -1);
    rt_coll_free(c);
    rt_backend_free(be);
}

/* ---- broadcast and barrier ---- */

typedef struct {
    rt_coll *c;
    int r;
    float data[100];
    int rc;
    char err[128];
} bcast_arg;

static void *bcast_worker(void *arg) {
    bcast_arg *a = arg;
    for (int i = 0; i < 100; i++) a->data[i] = (float)(a->r * 1000 + i);
    a->rc = rt_coll_broadcast(a->c, a->r, a->data, sizeof a->data, a->err, sizeof a->err);
    if (!a->rc && a->r == 0) /* replica 0 may change its copy right after */
        for (int i = 0; i < 100; i++) a->data[i] = -1;
    if (!a->rc) a->rc = rt_coll_barrier(a->c, a->r, a->err, sizeof a->err);
    return NULL;
}

TEST(broadcast_from_replica_zero) {
    rt_backend *be = rt_backend_cpu();
    rt_coll *c = rt_coll_local_new(4, be);
    bcast_arg *a = calloc(4, sizeof *a);
    pthread_t th[4];
    for (int r = 0; r < 4; r++) {
        a[r].c = c, a[r].r = r;
        pthread_create(&th[r], NULL, bcast_worker, &a[r]);
    }
    for (int r = 0; r < 4; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 4; r++) CHECK(a[r].rc == 0);
    for (int r = 1; r < 4; r++)
        for (int i = 0; i < 100; i++) CHECK(a[r].data[i] == (float)i);
    free(a);
    rt_coll_free(c);
    rt_backend_free(be);
}

/* ---- backends whose memory the host cannot touch: staged ---- */

static void *fake_alloc(rt_backend *be, size_t bytes, char *err, size_t errlen) {
    (void)be, (void)err, (void)errlen;
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) abort();
    return p;
}
static void fake_free(rt_backend *be, void *p) {
    (void)be;
    free(p);
}
static int fake_copies; /* copies through the backend (staging proves itself by them) */
static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
static int fake_copy(rt_backend *be, void *dst, const void *src, size_t bytes, char *err,
                     size_t errlen) {
    (void)be, (void)err, (void)errlen;
    pthread_mutex_lock(&fake_mu);
    fake_copies++;
    pthread_mutex_unlock(&fake_mu);
    if (bytes) memmove(dst, src, bytes);
    return 0;
}
static int fake_sync(rt_backend *be, char *err, size_t errlen) {
    (void)be, (void)err, (void)errlen;
    return 0;
}

static void check_zero(rt_backend *be, int via_queue); /* ZeRO-1's collectives, below */

TEST(device_buffers_are_staged) {
    rt_backend fake = {.name = "fake",
                       .alloc = fake_alloc,
                       .free = fake_free,
                       .copy_in = fake_copy,
                       .copy_out = fake_copy,
                       .copy = fake_copy,
                       .sync = fake_sync};
    fake_copies = 0;
    int64_t sizes[] = {100, 3};
    CHECK(run_allreduce(&fake, 3, 2, sizes, 0) == 0);
    CHECK(fake_copies == 3 * 2 * 2); /* out and back in, per replica and call */
    check_zero(&fake, 0);            /* staged reduce-scatter and broadcast_from */
}

/* ---- ZeRO-1: reduce-scatter to uneven owners, broadcast from any root ---- */

#define ZN 4 /* replicas */
static const int64_t zend[3] = {5, 6, 300};
static const int zowner[3] = {2, -1, 0};

typedef struct {
    rt_coll *c;
    int r, via_queue, rc;
    float buf[300], bc[40];
    char err[256];
} zero_arg;

static void *zero_worker(void *arg) {
    zero_arg *a = arg;
    for (int i = 0; i < 300; i++) a->buf[i] = value(a->r, i, 7);
    if (a->via_queue) { /* the same pieces as a packed bucket */
        float src[300];
        memcpy(src, a->buf, sizeof src);
        rt_coll_queue *q = rt_coll_queue_new(a->c, a->r);
        rt_coll_piece p[3] = {
            {src, a->buf, 5}, {src + 5, a->buf + 5, 1}, {src + 6, a->buf + 6, 294}};
        rt_coll_queue_add_bucket(q, p, 3);
        rt_coll_queue_set_owners(q, 0, zowner);
        rt_coll_queue_start(q, 0);
        a->rc = rt_coll_queue_wait(q, 0, a->err, sizeof a->err);
        rt_coll_queue_free(q);
    } else {
        a->rc =
            rt_coll_reduce_scatter(a->c, a->r, a->buf, 300, zend, zowner, 3, a->err, sizeof a->err);
    }
    for (int i = 0; i < 40; i++) a->bc[i] = (float)(a->r * 100 + i);
    if (!a->rc)
        a->rc = rt_coll_broadcast_from(a->c, a->r, 2, a->bc, sizeof a->bc, a->err, sizeof a->err);
    if (!a->rc && a->r == 2) /* the root may change its copy right after */
        for (int i = 0; i < 40; i++) a->bc[i] = -1;
    return NULL;
}

/* Each piece's sum, bit for bit the all-reduce's, reaches its owners only;
 * the others keep what they had. Then replica 2's buffer reaches all. */
static void check_zero(rt_backend *be, int via_queue) {
    rt_coll *c = rt_coll_local_new(ZN, be);
    zero_arg *a = calloc(ZN, sizeof *a);
    pthread_t th[ZN];
    for (int r = 0; r < ZN; r++) {
        a[r].c = c, a[r].r = r, a[r].via_queue = via_queue;
        pthread_create(&th[r], NULL, zero_worker, &a[r]);
    }
    for (int r = 0; r < ZN; r++) pthread_join(th[r], NULL);
    int bad = 0;
    for (int r = 0; r < ZN; r++) {
        CHECK_MSG(a[r].rc == 0, "replica %d: %s", r, a[r].err);
        for (int k = 0; k < 3; k++)
            for (int64_t i = k ? zend[k - 1] : 0; i < zend[k]; i++) {
                int mine = zowner[k] < 0 || zowner[k] == r;
                float want = mine ? expected(ZN, i, 7) : value(r, i, 7);
                bad += memcmp(&want, &a[r].buf[i], sizeof want) != 0;
            }
        for (int i = 0; i < 40 && r != 2; i++) bad += a[r].bc[i] != (float)(200 + i);
    }
    CHECK_MSG(bad == 0, "%d wrong values", bad);
    free(a);
    rt_coll_free(c);
}

TEST(reduce_scatter_and_broadcast_from_a_root) {
    rt_backend *be = rt_backend_cpu();
    check_zero(be, 0);
    check_zero(be, 1);
    char err[128];
    float x[4] = {0};
    int64_t short_end[1] = {3};
    int own[1] = {0};
    rt_coll *c = rt_coll_local_new(2, be);
    CHECK(rt_coll_reduce_scatter(c, 0, x, 4, short_end, own, 1, err, sizeof err) == -1);
    CHECK(strstr(err, "do not tile") != NULL);
    CHECK(rt_coll_broadcast_from(c, 0, 2, x, sizeof x, err, sizeof err) == -1); /* no replica 2 */
    rt_coll_free(c);
    rt_backend_free(be);
}

/* ---- buckets on the communication queue ---- */

#define QN     3 /* replicas */
#define QP     5 /* gradients */
#define QSTEPS 4
static const int64_t qcount[QP] = {7, 1, 300, 2, 64};

typedef struct {
    rt_coll *c;
    int r;
    float *src[QP], *dst[QP];
    int rc;
    char err[256];
    float result[QSTEPS][QP][300];
} queue_arg;

static float grad(int r, int step, int p, int64_t i) { return value(r, i, 100 * step + p); }

static void *queue_worker(void *arg) {
    queue_arg *a = arg;
    rt_coll_queue *q = rt_coll_queue_new(a->c, a->r);
    /* Buckets {4, 3} (packed), {2} (one piece, reduced in its output) and
     * {1, 0}: gradients "complete" in order 4, 3, 2, 1, 0. */
    rt_coll_piece b0[] = {{a->src[4], a->dst[4], qcount[4]}, {a->src[3], a->dst[3], qcount[3]}};
    rt_coll_piece b1[] = {{a->src[2], a->dst[2], qcount[2]}};
    rt_coll_piece b2[] = {{a->src[1], a->dst[1], qcount[1]}, {a->src[0], a->dst[0], qcount[0]}};
    int id0 = rt_coll_queue_add_bucket(q, b0, 2), id1 = rt_coll_queue_add_bucket(q, b1, 1);
    int id2 = rt_coll_queue_add_bucket(q, b2, 2);
    if (id0 != 0 || id1 != 1 || id2 != 2 || rt_coll_queue_buckets(q) != 3) a->rc = -2;
    for (int s = 0; s < QSTEPS && !a->rc; s++) {
        /* "backward": produce gradients in completion order, start each
         * bucket when its last gradient exists, with jitter in between */
        for (int p = QP - 1; p >= 0; p--) {
            for (int64_t i = 0; i < qcount[p]; i++) a->src[p][i] = grad(a->r, s, p, i);
            nap(mix((uint64_t)(a->r * 31 + s * 7 + p)));
            if (p == 3) rt_coll_queue_start(q, 0);
            if (p == 2) rt_coll_queue_start(q, 1);
            if (p == 0) rt_coll_queue_start(q, 2);
        }
        /* "update": wait in another order than started */
        if (rt_coll_queue_wait(q, 2, a->err, sizeof a->err) ||
            rt_coll_queue_wait(q, 0, a->err, sizeof a->err) ||
            rt_coll_queue_wait_all(q, a->err, sizeof a->err))
            a->rc = -1;
        for (int p = 0; p < QP; p++)
            memcpy(a->result[s][p], a->dst[p], sizeof(float) * (size_t)qcount[p]);
    }
    rt_coll_queue_free(q);
    return NULL;
}

TEST(queue_reduces_buckets_into_outputs) {
    rt_backend *be = rt_backend_cpu();
    rt_coll *c = rt_coll_local_new(QN, be);
    queue_arg *a = calloc(QN, sizeof *a);
    pthread_t th[QN];
    for (int r = 0; r < QN; r++) {
        a[r].c = c, a[r].r = r;
        for (int p = 0; p < QP; p++) {
            a[r].src[p] = rt_backend_alloc(be, sizeof(float) * (size_t)qcount[p], NULL, 0);
            a[r].dst[p] = rt_backend_alloc(be, sizeof(float) * (size_t)qcount[p], NULL, 0);
        }
        pthread_create(&th[r], NULL, queue_worker, &a[r]);
    }
    for (int r = 0; r < QN; r++) pthread_join(th[r], NULL);
    int bad = 0;
    for (int r = 0; r < QN; r++) {
        CHECK_MSG(a[r].rc == 0, "replica %d: rc %d %s", r, a[r].rc, a[r].err);
        for (int s = 0; s < QSTEPS; s++)
            for (int p = 0; p < QP; p++)
                for (int64_t i = 0; i < qcount[p]; i++) {
                    double sum = 0;
                    for (int k = 0; k < QN; k++) sum += (double)grad(k, s, p, i);
                    bad += a[r].result[s][p][i] != (float)sum;
                }
        /* the local gradients are left as they were (other readers) */
        for (int p = 0; p < QP; p++)
            for (int64_t i = 0; i < qcount[p]; i++)
                bad += a[r].src[p][i] != grad(r, QSTEPS - 1, p, i);
        for (int p = 0; p < QP; p++)
            rt_backend_dealloc(be, a[r].src[p]), rt_backend_dealloc(be, a[r].dst[p]);
    }
    CHECK_MSG(bad == 0, "%d wrong elements", bad);
    free(a);
    rt_coll_free(c);
    rt_backend_free(be);
}

TEST(queue_wait_without_start_returns_at_once) {
    rt_backend *be = rt_backend_cpu();
    rt_coll *c = rt_coll_local_new(2, be);
    rt_coll_queue *q = rt_coll_queue_new(c, 0);
    float s[2] = {1, 2}, d[2] = {0, 0};
    rt_coll_piece p = {s, d, 2};
    CHECK(rt_coll_queue_add_bucket(q, &p, 1) == 0);
    char err[128];
    CHECK(rt_coll_queue_wait(q, 0, err, sizeof err) == 0);
    CHECK(rt_coll_queue_wait_all(q, err, sizeof err) == 0);
    CHECK(rt_coll_queue_wait(q, 5, err, sizeof err) == -1);
    CHECK(d[0] == 0 && d[1] == 0); /* nothing ran */
    rt_coll_queue_free(q);
    rt_coll_free(c);
    rt_backend_free(be);
}

TEST(queue_reports_an_aborted_collective) {
    rt_backend *be = rt_backend_cpu();
    rt_coll *c = rt_coll_local_new(2, be);
    rt_coll_queue *q = rt_coll_queue_new(c, 0);
    float s[2] = {1, 2}, d[2] = {0, 0};
    rt_coll_piece p = {s, d, 2};
    rt_coll_queue_add_bucket(q, &p, 1);
    rt_coll_queue_start(q, 0); /* replica 1 never comes */
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    rt_coll_abort(c);
    char err[256] = "";
    CHECK(rt_coll_queue_wait(q, 0, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "bucket 0") && strstr(err, "aborted"), "%s", err);
    rt_coll_queue_free(q);
    rt_coll_free(c);
    rt_backend_free(be);
}

/* ---- MPI outside mpirun ---- */

TEST(mpi_outside_a_launcher) {
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMIX_SIZE");
    unsetenv("PMI_SIZE");
    unsetenv("PMIX_RANK");
    int rank = -1, size = -1;
    char err[256] = "";
    CHECK(rt_mpi_init(NULL, NULL, &rank, &size, err, sizeof err) == 0);
    CHECK(rank == 0 && size == 1);
    CHECK(!rt_mpi_active());
    double v[2] = {1.5, 2};
    CHECK(rt_mpi_allreduce_sum_f64(v, 2) == 0 && v[0] == 1.5 && v[1] == 2);
    char id[8] = "abcdefg";
    CHECK(rt_mpi_bcast_bytes(id, sizeof id, 0) == 0 && !strcmp(id, "abcdefg"));
    CHECK(rt_mpi_any(0) == 0 && rt_mpi_any(3) == 1);
    CHECK(rt_mpi_barrier() == 0);
    rt_backend *be = rt_backend_cpu();
    rt_coll *c = rt_coll_mpi_new(2, be, err, sizeof err);
    CHECK(c == NULL); /* MPI is not running (or not built in) */
    CHECK(strstr(err, "MPI") != NULL);
    rt_backend_free(be);
    rt_mpi_finalize();
}

TEST(mpi_launcher_without_mpi_build_is_refused) {
#ifndef DPC_HAVE_MPI
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    int rank, size;
    char err[256] = "";
    CHECK(rt_mpi_init(NULL, NULL, &rank, &size, err, sizeof err) == -1);
    CHECK(strstr(err, "no MPI") != NULL);
    unsetenv("OMPI_COMM_WORLD_SIZE");
#endif
}

/* ---- gradient accumulation: replicas of parts ---- */

#define PN 2   /* replicas */
#define PK 3   /* parts (micro-batches) each */
#define PC 257 /* floats */

/* Contributor g's (replica g / PK's part g % PK) element i. Element 0 comes
 * out right only in global order: (1e20 + -1e20) + ... + 1 is 1, while
 * adding part by part across replicas, (1e20 + 1) + -1e20, gives 0. */
static float part_value(int g, int64_t i) {
    if (i == 0) return g == 0 ? 1e20f : g == 1 ? -1e20f : g == PK ? 1.0f : 0.0f;
    return value(g, i, 77);
}

static float part_expected(int contributors, int64_t i) {
    double s = 0;
    for (int g = 0; g < contributors; g++) s += (double)part_value(g, i);
    return (float)s;
}

typedef struct {
    rt_coll *c;
    int r, parts;
    float buf[PN * PK * PC]; /* the all-reduce's parts; [0, PC) the sum */
    float src[PC], dst[PC];  /* the queue's gradients and sums */
    int rc;
    char err[256];
} parts_arg;

static void *parts_worker(void *p) {
    parts_arg *a = p;
    int first = a->r * a->parts; /* this replica's first contributor */
    for (int k = 0; k < a->parts; k++)
        for (int64_t i = 0; i < PC; i++) a->buf[k * PC + i] = part_value(first + k, i);
    a->rc = rt_coll_allreduce_parts(a->c, a->r, a->buf, PC, a->parts, a->err, sizeof a->err);
    /* The queue: micro-batches 0..K-2 kept, the last one started. */
    rt_coll_queue *q = rt_coll_queue_new(a->c, a->r);
    rt_coll_piece b[] = {{a->src, a->dst, 100}, {a->src + 100, a->dst + 100, PC - 100}};
    if (!a->rc) a->rc = rt_coll_queue_set_parts(q, a->parts, a->err, sizeof a->err);
    rt_coll_queue_add_bucket(q, b, 2);
    for (int k = 0; k < a->parts && !a->rc; k++) {
        for (int64_t i = 0; i < PC; i++) a->src[i] = part_value(first + k, i);
        if (k < a->parts - 1) rt_coll_queue_keep(q, k);
    }
    int64_t area = a->parts > 1 ? (int64_t)sizeof(float) * PC * a->parts : 0;
    if (!a->rc && rt_coll_queue_parts_bytes(q) != area) a->rc = -2;
    if (!a->rc) {
        rt_coll_queue_start(q, 0);
        a->rc = rt_coll_queue_wait(q, 0, a->err, sizeof a->err);
    }
    rt_coll_queue_free(q);
    return NULL;
}

/* n replicas of `parts` parts: every replica's sums are the sum over the
 * n * parts contributors in global order, by the all-reduce and the queue. */
static int run_parts(int n, int parts) {
    rt_backend *be = rt_backend_cpu();
    rt_coll *c = rt_coll_local_new(n, be);
    parts_arg *a = calloc((size_t)n, sizeof *a);
    pthread_t th[PN * PK];
    for (int r = 0; r < n; r++) {
        a[r].c = c, a[r].r = r, a[r].parts = parts;
        pthread_create(&th[r], NULL, parts_worker, &a[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    int bad = 0;
    for (int r = 0; r < n; r++) {
        CHECK_MSG(a[r].rc == 0, "replica %d of %d x %d: rc %d %s", r, n, parts, a[r].rc, a[r].err);
        for (int64_t i = 0; i < PC; i++) {
            float want = part_expected(n * parts, i);
            bad += memcmp(&want, &a[r].buf[i], sizeof want) != 0;
            bad += memcmp(&want, &a[r].dst[i], sizeof want) != 0;
        }
        CHECK(a[r].buf[0] == 1.0f && a[r].dst[0] == 1.0f);
    }
    free(a);
    rt_coll_free(c);
    rt_backend_free(be);
    return bad;
}

TEST(parts_sum_in_global_replica_order) {
    CHECK_MSG(run_parts(PN, PK) == 0, "2 replicas x 3 parts");
    CHECK_MSG(run_parts(1, PN * PK) == 0, "1 replica x 6 parts"); /* --gpus 1 --accumulate 6 */
    CHECK_MSG(run_parts(PN * PK, 1) == 0, "6 replicas x 1 part");
}

TEST(parts_refused_where_they_cannot_be) {
    rt_backend *be = rt_backend_cpu();
    rt_coll *c = rt_coll_local_new(1, be);
    rt_coll_queue *q = rt_coll_queue_new(c, 0);
    char err[256];
    float s[2] = {1, 2}, d[2];
    rt_coll_piece p = {s, d, 2};
    CHECK(rt_coll_queue_set_parts(q, 0, err, sizeof err) == -1);
    rt_coll_queue_add_bucket(q, &p, 1);
    CHECK(rt_coll_queue_set_parts(q, 2, err, sizeof err) == -1); /* after the buckets */
    CHECK(strstr(err, "registered already") != NULL);
    CHECK(rt_coll_queue_parts_bytes(q) == 0);
    CHECK(rt_coll_allreduce_parts(c, 0, s, 1, 0, err, sizeof err) == -1);
    CHECK(rt_coll_allreduce_parts(c, 0, s, 1, 2, err, sizeof err) == 0 && s[0] == 3);
    rt_coll_queue_free(q);
    rt_coll_free(c);
    rt_backend_free(be);
}

/* ---- under mpirun (tests/mpi_test.sh runs this binary with -np 2) ---- */

#define MN 3 /* replicas per process */

typedef struct {
    rt_coll *c;
    int r, g, total;
    int rc;
    char err[256];
    float sum[4][2000];
    float bc[64], bc2[64];
    float qdst[2][300];
    float rs[300];
} mpi_arg;

static const int64_t mpi_sizes[4] = {2000, 1, 0, 777};

static void *mpi_worker(void *p) {
    mpi_arg *a = p;
    for (int k = 0; k < 4 && !a->rc; k++) {
        for (int64_t i = 0; i < mpi_sizes[k]; i++) a->sum[k][i] = value(a->g, i, k);
        nap(mix((uint64_t)a->g * 131u + (uint64_t)k));
        a->rc = rt_coll_allreduce_sum(a->c, a->r, a->sum[k], mpi_sizes[k], a->err, sizeof a->err);
    }
    for (int i = 0; i < 64; i++) a->bc[i] = (float)(a->g * 100 + i);
    if (!a->rc) a->rc = rt_coll_broadcast(a->c, a->r, a->bc, sizeof a->bc, a->err, sizeof a->err);
    /* ZeRO-1: from the last replica of the last rank; a reduce-scatter */
    for (int i = 0; i < 64; i++) a->bc2[i] = (float)(a->g * 100 + i);
    if (!a->rc)
        a->rc = rt_coll_broadcast_from(a->c, a->r, a->total - 1, a->bc2, sizeof a->bc2, a->err,
                                       sizeof a->err);
    for (int i = 0; i < 300; i++) a->rs[i] = value(a->g, i, 60);
    int64_t end[2] = {100, 300};
    int owner[2] = {1, a->total - 1};
    if (!a->rc)
        a->rc =
            rt_coll_reduce_scatter(a->c, a->r, a->rs, 300, end, owner, 2, a->err, sizeof a->err);
    if (!a->rc) a->rc = rt_coll_barrier(a->c, a->r, a->err, sizeof a->err);
    /* two buckets on the queue, one packed */
    float src[2][300];
    for (int i = 0; i < 300; i++) src[0][i] = value(a->g, i, 50), src[1][i] = value(a->g, i, 51);
    rt_coll_queue *q = rt_coll_queue_new(a->c, a->r);
    rt_coll_piece b0[] = {{src[0], a->qdst[0], 100}, {src[0] + 100, a->qdst[0] + 100, 200}};
    rt_coll_piece b1[] = {{src[1], a->qdst[1], 300}};
    rt_coll_queue_add_bucket(q, b0, 2);
    rt_coll_queue_add_bucket(q, b1, 1);
    if (!a->rc) {
        rt_coll_queue_start(q, 0);
        rt_coll_queue_start(q, 1);
        a->rc = rt_coll_queue_wait_all(q, a->err, sizeof a->err);
    }
    rt_coll_queue_free(q);
    return NULL;
}

static int mpi_main(int argc, char **argv) {
    int rank, size;
    char err[256];
    if (rt_mpi_init(&argc, &argv, &rank, &size, err, sizeof err)) {
        fprintf(stderr, "rt_mpi_init: %s\n", err);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    harness_current = "mpi";
    CHECK(rt_mpi_active() && size >= 2);
    rt_backend *be = rt_backend_cpu();
    rt_coll *c = rt_coll_mpi_new(MN, be, err, sizeof err);
    CHECK_MSG(c != NULL, "%s", err);
    if (c) {
        CHECK_STR(rt_coll_name(c), "mpi");
        CHECK(rt_coll_size(c) == MN * size && rt_coll_rank(c) == rank);
        CHECK(rt_coll_global_replica(c, 1) == rank * MN + 1);
        int total = MN * size;
        mpi_arg *a = calloc(MN, sizeof *a);
        pthread_t th[MN];
        for (int r = 0; r < MN; r++) {
            a[r] = (mpi_arg){.c = c, .r = r, .g = rank * MN + r, .total = total};
            pthread_create(&th[r], NULL, mpi_worker, &a[r]);
        }
        for (int r = 0; r < MN; r++) pthread_join(th[r], NULL);
        int bad = 0;
        for (int r = 0; r < MN; r++) {
            CHECK_MSG(a[r].rc == 0, "rank %d replica %d: %s", rank, r, a[r].err);
            /* the sum over every replica of every process, in global
             * replica order: bit for bit what one process would give */
            for (int k = 0; k < 4; k++)
                for (int64_t i = 0; i < mpi_sizes[k]; i++) {
                    float want = expected(total, i, k);
                    bad += memcmp(&want, &a[r].sum[k][i], sizeof want) != 0;
                }
            for (int i = 0; i < 64; i++) bad += a[r].bc[i] != (float)i; /* global replica 0's */
            for (int i = 0; i < 64; i++) bad += a[r].bc2[i] != (float)((total - 1) * 100 + i);
            for (int i = 0; i < 300; i++) {
                int mine = a[r].g == (i < 100 ? 1 : total - 1);
                float want = mine ? expected(total, i, 60) : value(a[r].g, i, 60);
                bad += memcmp(&want, &a[r].rs[i], sizeof want) != 0;
            }
            for (int b = 0; b < 2; b++)
                for (int i = 0; i < 300; i++) bad += a[r].qdst[b][i] != expected(total, i, 50 + b);
        }
        CHECK_MSG(bad == 0, "rank %d: %d wrong values", rank, bad);
        free(a);
        rt_coll_free(c);
    }
    /* main-thread helpers */
    double v[2] = {1.0, (double)rank};
    CHECK(rt_mpi_allreduce_sum_f64(v, 2) == 0);
    CHECK(v[0] == size && v[1] == size * (size - 1) / 2.0);
    char id[16];
    snprintf(id, sizeof id, "id-of-rank-%d", rank);
    CHECK(rt_mpi_bcast_bytes(id, sizeof id, 0) == 0);
    CHECK_STR(id, "id-of-rank-0");
    CHECK(rt_mpi_any(rank == size - 1) == 1 && rt_mpi_any(0) == 0);
    CHECK(rt_mpi_barrier() == 0);
    if (harness_current_failed)
        harness_failed++;
    else
        harness_passed++;
    rt_backend_free(be);
    rt_mpi_finalize();
    return harness_done();
}

int main(int argc, char **argv) {
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK")) return mpi_main(argc, argv);
    RUN(sum_is_replica_order_for_any_thread_count);
    RUN(sum_does_not_depend_on_timing);
    RUN(sizes_empty_tiny_large_and_growing);
    RUN(sum_of_one_replica_is_identity);
    RUN(mismatched_sizes_fail_everywhere);
    RUN(abort_wakes_waiting_replicas);
    RUN(broadcast_from_replica_zero);
    RUN(device_buffers_are_staged);
    RUN(reduce_scatter_and_broadcast_from_a_root);
    RUN(queue_reduces_buckets_into_outputs);
    RUN(queue_wait_without_start_returns_at_once);
    RUN(queue_reports_an_aborted_collective);
    RUN(parts_sum_in_global_replica_order);
    RUN(parts_refused_where_they_cannot_be);
    RUN(mpi_outside_a_launcher);
    RUN(mpi_launcher_without_mpi_build_is_refused);
    return harness_done();
}
