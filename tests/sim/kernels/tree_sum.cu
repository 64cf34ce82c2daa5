/* The classic shared-memory tree: one value per thread in shared memory, a
 * barrier after each halving down to 64 values, then warp 0 finishes with
 * shared memory and __syncwarp down to 32 values and a shuffle tail. Correct:
 * the race checks must stay silent. Block of 64 to 1024 threads, a power of
 * two; out gets one sum per block. */
#ifndef DPC_SHARED_ARRAY
#define DPC_SHARED_ARRAY(type, name, n) __shared__ type name[n]
#endif
extern "C" __global__ void tree_sum(float *__restrict__ out, const float *__restrict__ in, int n) {
    DPC_SHARED_ARRAY(float, s, 1024);
    const unsigned t = threadIdx.x;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) v += in[i];
    s[t] = v;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half >= 64; half /= 2) {
        if (t < half) s[t] += s[t + half];
        __syncthreads();
    }
    if (t < 32) {
        s[t] = s[t] + s[t + 32];
        __syncwarp();
        v = s[t];
        for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
        if (t == 0) out[blockIdx.x] = v;
    }
}
