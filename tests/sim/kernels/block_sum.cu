/* A block reduction the way a GPU does it: a grid-stride partial sum per
 * thread, a warp reduction with __shfl_down_sync, one partial per warp in
 * __shared__ memory, a barrier, and warp 0 reducing the partials. out gets
 * one sum per block. */
#ifndef DPC_SHARED_ARRAY
#define DPC_SHARED_ARRAY(type, name, n) __shared__ type name[n]
#endif
extern "C" __global__ void block_sum(float *__restrict__ out, const float *__restrict__ in, int n) {
    DPC_SHARED_ARRAY(float, part, 32);
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += in[i];
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (blockDim.x + 31) / 32 ? part[lane] : 0.0f;
        for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
        if (lane == 0) out[blockIdx.x] = v;
    }
}
