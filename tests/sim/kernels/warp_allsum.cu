/* A butterfly: after __shfl_xor_sync every lane holds its warp's sum; the
 * ballot says which lanes hold a positive input. */
extern "C" __global__ void warp_allsum(float *__restrict__ out, unsigned *__restrict__ votes,
                                       const float *__restrict__ in) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    float v = in[t];
    const unsigned b = __ballot_sync(0xffffffffu, v > 0.0f);
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    out[t] = v;
    if (threadIdx.x % 32 == 0) votes[t / 32] = b;
}
