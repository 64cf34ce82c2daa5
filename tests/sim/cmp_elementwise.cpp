/* tests/sim/cmp_elementwise.cpp — one emitted elementwise kernel, its CUDA
 * text under the simulator against its C-dialect twin (tests/sim_test.sh):
 *     cmp_elementwise COUNT GRID BLOCK LEN0 LEN1 ...
 * Every buffer is floats of the given length, filled from a fixed seed with
 * values of both signs; the CUDA kernel is SIM_ENTRY, its parameters the
 * buffers then `idx_t count`; the C kernel is REF_KERNEL (renamed with -D).
 * After both ran on copies, every buffer must be bit-identical. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "sim.h"

extern "C" void SIM_ENTRY(void **);
extern "C" void REF_KERNEL(void *const *arg, long long count, long long lo, long long hi);

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: cmp_elementwise COUNT GRID BLOCK LEN...\n");
        return 2;
    }
    long long count = atoll(argv[1]);
    unsigned grid = (unsigned)atoi(argv[2]), block = (unsigned)atoi(argv[3]);
    int nb = argc - 4;
    std::vector<std::vector<float>> sim(nb), ref(nb);
    unsigned long long s = 0x9e3779b97f4a7c15ull;
    for (int b = 0; b < nb; b++) {
        long long len = atoll(argv[4 + b]);
        for (long long i = 0; i < len; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            sim[b].push_back((float)((double)(s >> 11) / 9007199254740992.0 * 4.0 - 2.0));
        }
        ref[b] = sim[b];
    }
    std::vector<void *> ptr(nb), args(nb + 1), rptr(nb);
    for (int b = 0; b < nb; b++) {
        ptr[b] = sim[b].data();
        rptr[b] = ref[b].data();
        args[b] = &ptr[b];
    }
    args[nb] = &count;
    char err[512];
    if (sim_launch(SIM_NAME, SIM_ENTRY, {grid, 1, 1}, {block, 1, 1}, 0, args.data(), err,
                   sizeof err)) {
        fprintf(stderr, "cmp_elementwise: %s\n", err);
        return 1;
    }
    REF_KERNEL(rptr.data(), count, 0, count);
    for (int b = 0; b < nb; b++)
        if (memcmp(sim[b].data(), ref[b].data(), sim[b].size() * sizeof(float))) {
            size_t i = 0;
            while (!memcmp(&sim[b][i], &ref[b][i], sizeof(float))) i++;
            fprintf(stderr,
                    "cmp_elementwise: %s: buffer %d differs at %zu: %a (simulated) vs %a (C)\n",
                    SIM_NAME, b, i, sim[b][i], ref[b][i]);
            return 1;
        }
    printf("ok\n");
    return 0;
}
