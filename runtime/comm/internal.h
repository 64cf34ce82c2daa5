/* runtime/comm/internal.h — the communicator's state, shared by the comm
 * room's files: collective.c (the protocol) and queue.c (the communication
 * queue, which reads each replica's backend and a stream kind's ops).
 * Private to runtime/comm/ (and unit tests). */
#ifndef DPC_RT_COMM_INTERNAL_H
#define DPC_RT_COMM_INTERNAL_H

#include <pthread.h>

#include "runtime/comm/comm.h"

struct rt_coll {
    rt_coll_kind kind;
    int n;                 /* replicas in this process */
    int rank, ranks;       /* 0 and 1 for local */
    rt_coll_ranks_ops ops; /* across ranks (mpi) */
    rt_backend **be;       /* per replica: whose memory its buffers are */
    unsigned char *host;   /* per replica: its device pointers are host memory (cpu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    unsigned long gen;
    int aborted;
    char why[1024]; /* the reason of an abort from inside the protocol */
    /* the call in progress */
    void **ptr;   /* per replica: its host buffer */
    int64_t *cnt; /* per replica: elements (all-reduce) or bytes (broadcast) */
    int *parts;   /* per replica: the all-reduce's parts (accumulated micro-batches) */
    double *acc;
    int64_t acc_cap;
    /* staging for backends whose buffers are not host memory */
    void **stage;
    size_t *stage_cap;
    /* Kinds whose queue is a device stream (nccl): per replica, its rank. */
    rt_coll_stream_ops sops;
    void **sctx;
    /* Kinds that sum device by device (nccl on shared GPUs): per replica,
     * the first replica of its device, and the context of each such one. */
    rt_coll_device_ops dops;
    void **dctx;
    int *leader;
    int ngroups;
};

#endif
