/* Shared-memory accesses, right and wrong, by mode (one block of 64):
 *   0  every thread writes s[0]: a write-write race
 *   1  each thread writes s[t] and reads s[t ^ 1] with no barrier: the
 *      reads race with the neighbour's write
 *   2  s[t] for t up to 63 in an array of 32: an index past the end
 *   3  as 1, with __syncthreads() between: correct
 *   4  as 1, with __syncwarp() between (t ^ 1 is in the same warp): correct
 *   5  s[t] and s[t ^ 32] with __syncwarp() between: the other thread is in
 *      the other warp, so a race
 *   6  thread 0 writes s[0], then every thread reads it with no barrier: the
 *      other threads' reads race with that write */
#ifndef DPC_SHARED_ARRAY
#define DPC_SHARED_ARRAY(type, name, n) __shared__ type name[n]
#endif
extern "C" __global__ void shared_check(float *__restrict__ out, int mode) {
    DPC_SHARED_ARRAY(float, s, 64);
    DPC_SHARED_ARRAY(float, small, 32);
    const unsigned t = threadIdx.x;
    float v = 0.0f;
    if (mode == 0) s[0] = (float)t;
    if (mode == 1 || mode == 3 || mode == 4) {
        s[t] = (float)t;
        if (mode == 3) __syncthreads();
        if (mode == 4) __syncwarp();
        v = s[t ^ 1];
    }
    if (mode == 2) small[t] = (float)t;
    if (mode == 5) {
        s[t] = (float)t;
        __syncwarp();
        v = s[t ^ 32];
    }
    if (mode == 6) {
        if (t == 0) s[0] = 1.0f;
        v = s[0];
    }
    out[t] = v;
}
