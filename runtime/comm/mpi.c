/* runtime/comm/mpi.c — the MPI side of the collectives (comm.h): joining
 * MPI under mpirun, the mpi communicator's cross-rank operations, and the
 * main-thread helpers. Kept apart from collective.c so that only programs
 * that join MPI (dprun) need MPI at link time.
 *
 * Thread use: the communicator calls MPI only from inside its barrier's
 * serial section (one replica thread at a time, the others blocked) and
 * the main thread only while no replica is inside a collective, so
 * MPI_THREAD_SERIALIZED is what is asked for.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "runtime/comm/comm.h"
#include "runtime/log.h"

#ifdef DPC_HAVE_MPI
#include <mpi.h>

/* mpiCheck: report the failing call with file:line and MPI's own words,
 * then end the whole job (a rank that returned would leave the others
 * blocked in their next collective). */
#define RT_MPI_CHECK(call)                                                       \
    do {                                                                         \
        int rt_mpi_rc_ = (call);                                                 \
        if (rt_mpi_rc_ != MPI_SUCCESS) {                                         \
            char rt_mpi_s_[MPI_MAX_ERROR_STRING];                                \
            int rt_mpi_l_ = 0;                                                   \
            MPI_Error_string(rt_mpi_rc_, rt_mpi_s_, &rt_mpi_l_);                 \
            rt_log_at(__FILE__, __LINE__, 0, "%s failed: %s", #call, rt_mpi_s_); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                        \
        }                                                                        \
    } while (0)

static int mpi_sum_f64(double *buf, int64_t n) {
    for (int64_t at = 0; at < n; at += INT_MAX) {
        int chunk = n - at > INT_MAX ? INT_MAX : (int)(n - at);
        RT_MPI_CHECK(
            MPI_Allreduce(MPI_IN_PLACE, buf + at, chunk, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    }
    return 0;
}

static int mpi_bcast_from(void *buf, int64_t bytes, int root) {
    for (int64_t at = 0; at < bytes; at += INT_MAX) {
        int chunk = bytes - at > INT_MAX ? INT_MAX : (int)(bytes - at);
        RT_MPI_CHECK(MPI_Bcast((char *)buf + at, chunk, MPI_BYTE, root, MPI_COMM_WORLD));
    }
    return 0;
}

static int mpi_bcast(void *buf, int64_t bytes) { return mpi_bcast_from(buf, bytes, 0); }

static int mpi_rank_size(int *size) {
    int rank = 0;
    RT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    RT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, size));
    return rank;
}

/* The ordered sum's hops (comm.h): one message from each rank to the
 * next, then a broadcast from the last. P - 1 sequential hops: latency
 * grows with the process count, bandwidth is a reduce's plus a broadcast's. */
enum { CHAIN_TAG = 7301 };

static int mpi_chain_in(double *buf, int64_t n) {
    int size, rank = mpi_rank_size(&size);
    for (int64_t at = 0; rank > 0 && at < n; at += INT_MAX) {
        int chunk = n - at > INT_MAX ? INT_MAX : (int)(n - at);
        RT_MPI_CHECK(MPI_Recv(buf + at, chunk, MPI_DOUBLE, rank - 1, CHAIN_TAG, MPI_COMM_WORLD,
                              MPI_STATUS_IGNORE));
    }
    return 0;
}

static int mpi_chain_out(double *buf, int64_t n) {
    int size, rank = mpi_rank_size(&size);
    for (int64_t at = 0; at < n; at += INT_MAX) {
        int chunk = n - at > INT_MAX ? INT_MAX : (int)(n - at);
        if (rank + 1 < size)
            RT_MPI_CHECK(
                MPI_Send(buf + at, chunk, MPI_DOUBLE, rank + 1, CHAIN_TAG, MPI_COMM_WORLD));
        RT_MPI_CHECK(MPI_Bcast(buf + at, chunk, MPI_DOUBLE, size - 1, MPI_COMM_WORLD));
    }
    return 0;
}

static int mpi_barrier(void) {
    RT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    return 0;
}
#endif

static int mpi_joined;

rt_coll *rt_coll_mpi_new(int n, rt_backend *be, char *err, size_t errlen) {
#ifdef DPC_HAVE_MPI
    if (!mpi_joined) {
        base_fail(err, errlen, "the mpi collective needs MPI running (start under mpirun)");
        return NULL;
    }
    int rank = 0, ranks = 1;
    RT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    RT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
    rt_coll_ranks_ops ops = {mpi_sum_f64,  mpi_bcast,     mpi_barrier,
                             mpi_chain_in, mpi_chain_out, mpi_bcast_from};
    return rt_coll_ranks_new(RT_COLL_MPI, n, be, rank, ranks, &ops);
#else
    (void)n, (void)be;
    base_fail(err, errlen, "this build has no MPI (install OpenMPI's libopenmpi-dev and rebuild)");
    return NULL;
#endif
}

/* Whether an MPI launcher started this process: OpenMPI (mpirun, orted),
 * PMIx and the PMI of MPICH/Hydra and Slurm each set one of these. */
static int under_launcher(int *size) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            *size = atoi(v);
            return 1;
        }
    }
    if (getenv("PMIX_RANK")) {
        *size = 0; /* unknown until MPI says */
        return 1;
    }
    return 0;
}

int rt_mpi_init(int *argc, char ***argv, int *rank, int *size, char *err, size_t errlen) {
    *rank = 0;
    *size = 1;
    int launched = 0;
    if (!under_launcher(&launched)) return 0;
#ifdef DPC_HAVE_MPI
    int provided = 0;
    RT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
    /* Report failures with our file:line instead of MPI's default abort. */
    RT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    mpi_joined = 1;
    if (provided < MPI_THREAD_SERIALIZED) {
        return base_fail(err, errlen,
                         "MPI provides thread level %d; dprun needs MPI_THREAD_SERIALIZED "
                         "(replica threads take turns calling MPI)",
                         provided);
    }
    RT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    RT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, size));
    return 0;
#else
    (void)argc, (void)argv;
    if (launched == 1) return 0; /* mpirun -np 1: one process is all there is */
    base_fail(err, errlen,
              "started by an MPI launcher (%d processes), but this build has no MPI: "
              "install OpenMPI's development files (libopenmpi-dev) and rebuild",
              launched);
    return -1;
#endif
}

int rt_mpi_active(void) { return mpi_joined; }

void rt_mpi_finalize(void) {
#ifdef DPC_HAVE_MPI
    if (mpi_joined) MPI_Finalize();
#endif
    mpi_joined = 0;
}

/* mpirun forwards a rank's stderr asynchronously and the abort kills the
 * job at once: the grace lets the message that says why reach the user. */
void rt_mpi_abort(int code) {
#ifdef DPC_HAVE_MPI
    if (mpi_joined) {
        fflush(stderr);
        nanosleep(&(struct timespec){.tv_nsec = 300 * 1000 * 1000}, NULL);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
#endif
    (void)code;
}

int rt_mpi_allreduce_sum_f64(double *buf, int n) {
#ifdef DPC_HAVE_MPI
    if (mpi_joined)
        RT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
#else
    (void)buf, (void)n;
#endif
    return 0;
}

int rt_mpi_bcast_bytes(void *buf, size_t bytes, int root) {
#ifdef DPC_HAVE_MPI
    if (mpi_joined)
        for (size_t at = 0; at < bytes; at += INT_MAX) {
            size_t left = bytes - at;
            int chunk = left > INT_MAX ? INT_MAX : (int)left;
            RT_MPI_CHECK(MPI_Bcast((char *)buf + at, chunk, MPI_BYTE, root, MPI_COMM_WORLD));
        }
#else
    (void)buf, (void)bytes, (void)root;
#endif
    return 0;
}

int rt_mpi_any(int flag) {
#ifdef DPC_HAVE_MPI
    if (mpi_joined) {
        int out = 0;
        RT_MPI_CHECK(MPI_Allreduce(&flag, &out, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD));
        return out;
    }
#endif
    return flag != 0;
}

const rt_coll_ranks_ops *rt_mpi_ranks_ops(int *rank, int *ranks, char *err, size_t errlen) {
    *rank = 0, *ranks = 1;
#ifdef DPC_HAVE_MPI
    static const rt_coll_ranks_ops ops = {mpi_sum_f64,  mpi_bcast,     mpi_barrier,
                                          mpi_chain_in, mpi_chain_out, mpi_bcast_from};
    if (!mpi_joined) {
        base_fail(err, errlen, "MPI is not running (start under mpirun)");
        return NULL;
    }
    RT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    RT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, ranks));
    return &ops;
#else
    base_fail(err, errlen, "this build has no MPI");
    return NULL;
#endif
}

int rt_mpi_barrier(void) {
#ifdef DPC_HAVE_MPI
    if (mpi_joined) RT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
#endif
    return 0;
}
