/* runtime/train/placement.c — where the replicas of replicas.h run: the
 * cpu thread budget, the replica -> device map, the backends each replica
 * opens, the start-up banner, and the collective (local, mpi, nccl) the
 * devices present call for. Nothing here touches a running rt_replicas.
 */
#include "runtime/train/replicas.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/device/device.h"
#include "runtime/check.h"
#include "runtime/comm/comm.h"
#include "runtime/exec/exec.h"
#include "runtime/train/internal.h"
#include "runtime/log.h"

void rt_replicas_cpu_threads(int n) {
    if (n <= 1) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long per = cores > n ? cores / n : 1;
    if (!getenv("OMP_NUM_THREADS")) {
        char buf[32];
        snprintf(buf, sizeof buf, "%ld", per);
        setenv("OMP_NUM_THREADS", buf, 1);
    }
    /* Several replica threads call cblas at once: each does its own GEMMs
     * single-threaded instead of contending for one OpenBLAS thread pool. */
    if (!getenv("OPENBLAS_NUM_THREADS")) openblas_set_num_threads(1);
}

void rt_replicas_place(int n, int devices, int *device_of) {
    if (devices < 1) devices = 1;
    for (int r = 0; r < n; r++) device_of[r] = (int)((long)r * devices / n);
}

void rt_replicas_banner_text(FILE *f, const char *device_name, int devices, int local, int ranks,
                             int accum, int batch) {
    int total = local * ranks;
    if (devices < 1) devices = 1;
    fprintf(f, "%d replica%s", total, total == 1 ? "" : "s");
    if (ranks > 1) fprintf(f, " (%d processes x %d)", ranks, local);
    if (accum > 1)
        fprintf(f, " x %d micro-batches", accum);
    else
        accum = 1;
    fprintf(f, " x batch %d per device = global batch %d\n", batch, total * accum * batch);
    int *dev = malloc(sizeof *dev * (size_t)(local + 1));
    RT_CHECK_ALLOC(dev);
    rt_replicas_place(local, devices, dev);
    for (int d = 0, r = 0; d < devices && r < local; d++) {
        int lo = r;
        while (r < local && dev[r] == d) r++;
        if (r == lo) continue;
        char name[64];
        if (devices == 1)
            snprintf(name, sizeof name, "%s", device_name);
        else
            snprintf(name, sizeof name, "%s:%d", device_name, d);
        fprintf(f, "%s%s: replica%s %d", ranks > 1 ? "this process, " : "", name,
                r - lo == 1 ? "" : "s", lo);
        if (r - lo > 1) fprintf(f, "-%d", r - 1);
        if (r - lo > 1)
            fprintf(
                f, " share it (per-device BatchNorm and the global batch as on %d devices; slower)",
                r - lo);
        fputc('\n', f);
    }
    free(dev);
}

void rt_replicas_banner(const char *device_name, int devices, int local, int ranks, int accum,
                        int batch) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    RT_CHECK_ALLOC(f);
    rt_replicas_banner_text(f, device_name, devices, local, ranks, accum, batch);
    RT_CHECK_ALLOC(fclose(f) == 0 ? text : NULL);
    for (char *line = text, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) nl = line + strlen(line) - 1; /* never: every line ends in one */
        rt_log(RT_LOG_INFO, "%.*s", (int)(nl - line), line);
    }
    free(text);
}

int rt_replicas_open_backends(rt_backend *first, int n, rt_backend **bes, int *devices, char *err,
                              size_t errlen) {
    *devices = 1;
    for (int r = 0; r < n; r++) bes[r] = first;
    if (n == 1) return 0;
    char why[256];
    int d = rt_backend_device_count(first, why, sizeof why);
    if (d < 1) d = 1;
    *devices = d < n ? d : n;
    int *dev = malloc(sizeof *dev * (size_t)n);
    RT_CHECK_ALLOC(dev);
    rt_replicas_place(n, *devices, dev);
    int rc = 0;
    for (int r = 0; r < n && !rc; r++) {
        bes[r] = rt_backend_open_device(first, dev[r], err, errlen);
        if (!bes[r]) rc = -1;
    }
    free(dev);
    if (rc) {
        for (int r = 0; r < n; r++)
            if (bes[r] == NULL) bes[r] = first;
        rt_replicas_close_backends(first, n, bes);
    }
    return rc;
}

void rt_replicas_close_backends(rt_backend *first, int n, rt_backend **bes) {
    for (int r = 0; r < n; r++) {
        if (bes[r] && bes[r] != first) rt_backend_free(bes[r]);
        bes[r] = first;
    }
}

/* The devices the replicas run on when every one is on a backend of the
 * kind with a collective of its own (cuda: nccl); 0 when one is not. */
static int cuda_devices(rt_backend *const *bes, int n) {
    int d = 0;
    for (int r = 0; r < n; r++) {
        if (!bes[r] || !bes[r]->coll_new || !bes[r]->coll_ranks_new ||
            bes[r]->coll_new != bes[0]->coll_new)
            return 0;
        int seen = 0;
        for (int q = 0; q < r && !seen; q++) seen = bes[q]->ordinal == bes[r]->ordinal;
        d += !seen;
    }
    return d;
}

/* Under mpirun: nccl when every process runs the cuda backend on as many
 * devices as rank 0 (all processes decide alike, none is left waiting),
 * else mpi. */
static rt_coll *ranks_coll_new(rt_backend *const *bes, int n, const char *want, char *err,
                               size_t errlen) {
    int d = cuda_devices(bes, n), d0 = d;
    rt_mpi_bcast_bytes(&d0, sizeof d0, 0);
    int can = d > 0 && d == d0 && !(want && !strcmp(want, "local"));
    if (!rt_mpi_any(!can)) {
        int rank = 0, ranks = 1;
        const rt_coll_ranks_ops *ops = rt_mpi_ranks_ops(&rank, &ranks, err, errlen);
        char why[512] = "";
        rt_coll *c =
            ops ? rt_backend_coll_ranks_new(bes, n, rank, ranks, ops, why, sizeof why) : NULL;
        if (c) return c;
        /* coll_ranks_new (nccl) fails on every rank alike. */
        if (want && !strcmp(want, "nccl")) {
            base_fail(err, errlen, "DPC_COLL=nccl: %s", ops ? why : err);
            return NULL;
        }
        if (rank == 0)
            rt_log(RT_LOG_NOTE, "%s: the processes sum their gradients through MPI",
                   ops ? why : err);
    } else if (want && !strcmp(want, "nccl")) {
        base_fail(err, errlen,
                  "DPC_COLL=nccl needs every process on the cuda backend with as many devices");
        return NULL;
    }
    if (errlen) err[0] = 0;
    rt_coll *c = rt_coll_mpi_new(n, bes[0], err, errlen);
    for (int r = 0; c && r < n; r++) rt_coll_set_backend(c, r, bes[r]);
    return c;
}

rt_coll *rt_replicas_coll_new(rt_backend *const *bes, int n, int ranks, char *err, size_t errlen) {
    return rt_replicas_coll_new_accum(bes, n, ranks, 1, err, errlen);
}

rt_coll *rt_replicas_coll_new_accum(rt_backend *const *bes, int n, int ranks, int accum, char *err,
                                    size_t errlen) {
    if (errlen) err[0] = 0;
    const char *want = getenv("DPC_COLL");
    if (want && *want && strcmp(want, "local") && strcmp(want, "nccl")) {
        base_fail(err, errlen, "DPC_COLL='%s' is not one of local, nccl", want);
        return NULL;
    }
    /* Accumulated micro-batches: the host kinds sum them in global order
     * (rt_coll_allreduce_parts: bit for bit --gpus N*K), the default; nccl
     * on distinct GPUs, when asked for, adds each replica's on its device,
     * then across them (faster, not those bits). */
    int want_nccl = want && !strcmp(want, "nccl");
    if (accum > 1 && !want_nccl) want = "local";
    if (ranks > 1) return ranks_coll_new(bes, n, want, err, errlen);
    if (n == 1 && accum == 1) return NULL;
    /* nccl: a rank per replica on distinct devices, a rank per device
     * (the replicas of each summed on it first) when they share >= 2. */
    if (cuda_devices(bes, n) >= 2 && !(want && !strcmp(want, "local"))) {
        char why[512];
        rt_coll *c = rt_backend_coll_new(bes, n, why, sizeof why);
        if (c && accum > 1 && rt_coll_device_groups(c) > 0) {
            rt_coll_free(c);
            base_fail(err, errlen,
                      "DPC_COLL=nccl: --accumulate %d needs one replica per GPU (the %d replicas "
                      "share %d devices); leave DPC_COLL unset to sum through host memory",
                      accum, n, cuda_devices(bes, n));
            return NULL;
        }
        if (c) return c;
        if (want && !strcmp(want, "nccl")) {
            base_fail(err, errlen, "DPC_COLL=nccl: %s", why);
            return NULL;
        }
        rt_log(RT_LOG_NOTE, "%s: the replicas sum their gradients through host memory", why);
    } else if (want && !strcmp(want, "nccl")) {
        base_fail(err, errlen, "DPC_COLL=nccl needs the replicas on at least 2 CUDA devices");
        return NULL;
    }
    rt_coll *c = rt_coll_local_new(n, bes[0]);
    for (int r = 0; r < n; r++) rt_coll_set_backend(c, r, bes[r]);
    return c;
}
