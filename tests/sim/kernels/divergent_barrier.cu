/* Wrong: the barrier is inside a branch only threads 0-15 take, so the
 * others exit without reaching it. A GPU may hang or go on silently. */
#ifndef DPC_SHARED_ARRAY
#define DPC_SHARED_ARRAY(type, name, n) __shared__ type name[n]
#endif
extern "C" __global__ void divergent_barrier(float *__restrict__ out) {
    DPC_SHARED_ARRAY(float, s, 16);
    if (threadIdx.x < 16) {
        s[threadIdx.x] = (float)threadIdx.x;
        __syncthreads();
        out[threadIdx.x] = s[threadIdx.x ^ 1];
    }
}
