/* tests/sim/sim.h — the CUDA simulator's C API: runs one kernel launch of
 * CUDA source compiled for the host as C++ against tests/sim/cuda_sim.h.
 *
 * A kernel TU is the emitted .cu text unchanged, with cuda_sim.h included
 * before it and `SIM_KERNEL(name)` after it; SIM_KERNEL defines
 * `extern "C" void sim_entry_NAME(void **args)`, which unpacks args the way
 * cuLaunchKernel's kernelParams are laid out (args[i] points at parameter i)
 * and calls the kernel with its real parameter types.
 *
 * sim_launch runs every block of the grid, one after another, and every
 * thread of a block as a fiber (see sim.cpp for why). It returns 0, or -1
 * with one line in err naming the kernel, the block and the thread when the
 * kernel does what a CPU twin would hide:
 *   - a __syncthreads() that not every thread of the block reaches (a thread
 *     exited, or waits at a warp operation);
 *   - a warp operation whose mask names a lane that has exited or does not
 *     exist, or whose lanes wait at operations that never match up;
 *   - an index outside a DPC_SHARED_ARRAY (cuda_sim.h), naming the array,
 *     the index and the size;
 *   - a shared-memory race: two threads of a block access one element of a
 *     DPC_SHARED_ARRAY in the same barrier interval, at least one of them
 *     writing, and no warp operation (__syncwarp, a shuffle or a vote) that
 *     both took part in orders them (so two threads of one warp separated by
 *     a full-mask shuffle are fine, two warps never are).
 * Each OS thread may run one launch at a time; launches on different
 * threads are independent (the runner's state is thread_local).
 * Not simulated: dynamic shared memory (shared_bytes must be 0), and plain
 * `__shared__` arrays go unchecked. */
#ifndef DPC_SIM_H
#define DPC_SIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    unsigned x, y, z;
} sim_dim3;

typedef void (*sim_entry)(void **args);

int sim_launch(const char *name, sim_entry fn, sim_dim3 grid, sim_dim3 block, size_t shared_bytes,
               void **args, char *err, size_t errlen);

/* "kernel K block (x,y,z) thread (x,y,z)" for the launch running on this
 * OS thread, "" outside one: for a fault handler to name who faulted. */
const char *sim_where(void);

/* The built-ins' back end, called from cuda_sim.h's inline functions. */
enum { SIM_SHFL, SIM_SHFL_UP, SIM_SHFL_DOWN, SIM_SHFL_XOR, SIM_BALLOT, SIM_SYNCWARP, SIM_NOPS };
unsigned long long sim_warp_op(int op, unsigned mask, unsigned long long value, int arg, int width);
void sim_syncthreads(void);
unsigned sim_activemask(void);
/* Element i of shared array name[n] is read (write 0) or written (1), or
 * i is out of range (write -1): records it in *shadow (made on first use)
 * and fails the launch on a race or a bad index (then never returns). */
typedef struct sim_shadow sim_shadow;
void sim_shared_access(sim_shadow **shadow, const char *name, size_t n, long long i, int write);
void sim_shadow_free(sim_shadow *shadow);

#ifdef __cplusplus
}
#endif

#endif
