/* Lanes 16-31 return before the shuffle: with mask 0xffffffff it names
 * inactive lanes (wrong); with mask 0x0000ffff it is right. */
extern "C" __global__ void half_warp_shfl(float *__restrict__ out, unsigned mask) {
    if (threadIdx.x % 32 >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(mask, (float)threadIdx.x, 1);
}
