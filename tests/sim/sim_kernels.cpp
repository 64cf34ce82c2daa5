/* tests/sim/sim_kernels.cpp — runs the hand-written kernels of
 * tests/sim/kernels under the simulator (tests/sim_test.sh):
 *     sim_kernels sum N GRID BLOCK    block_sum == a serial sum
 *     sim_kernels tree N GRID BLOCK   tree_sum == a serial sum
 *     sim_kernels shared MODE         shared_check in MODE (see its source)
 *     sim_kernels where               half_warp_shfl writing to a page it may not
 *                                     touch: the SIGSEGV handler prints sim_where()
 *     sim_kernels allsum WARPS        warp_allsum: every lane its warp's sum, the ballot
 *     sim_kernels divergent           divergent_barrier (must fail)
 *     sim_kernels halfwarp MASK       half_warp_shfl with MASK (0xffffffff must fail)
 * Prints `ok` and exits 0, or prints the failure on stderr and exits 1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include "sim.h"

extern "C" void sim_entry_block_sum(void **);
extern "C" void sim_entry_warp_allsum(void **);
extern "C" void sim_entry_divergent_barrier(void **);
extern "C" void sim_entry_half_warp_shfl(void **);
extern "C" void sim_entry_tree_sum(void **);
extern "C" void sim_entry_shared_check(void **);

static int launch(const char *name, sim_entry fn, unsigned grid, unsigned block, void **args) {
    char err[512];
    if (sim_launch(name, fn, {grid, 1, 1}, {block, 1, 1}, 0, args, err, sizeof err)) {
        fprintf(stderr, "sim_kernels: %s\n", err);
        return 1;
    }
    return 0;
}

/* Small integers, so that every order of summation is exact. */
static float value(unsigned i) { return (float)((int)((i * 2654435761u) >> 28) - 8); }

int main(int argc, char **argv) {
    if (argc >= 5 && (!strcmp(argv[1], "sum") || !strcmp(argv[1], "tree"))) {
        bool tree = !strcmp(argv[1], "tree");
        int n = atoi(argv[2]);
        unsigned grid = (unsigned)atoi(argv[3]), block = (unsigned)atoi(argv[4]);
        std::vector<float> in(n), out(grid, -1.0f);
        double serial = 0;
        for (int i = 0; i < n; i++) serial += in[i] = value(i);
        float *o = out.data();
        const float *p = in.data();
        void *args[] = {&o, &p, &n};
        const char *name = tree ? "tree_sum" : "block_sum";
        if (launch(name, tree ? sim_entry_tree_sum : sim_entry_block_sum, grid, block, args))
            return 1;
        double got = 0;
        for (float v : out) got += v;
        if (got != serial) {
            fprintf(stderr, "sim_kernels: %s %g, serial sum %g\n", name, got, serial);
            return 1;
        }
        printf("ok %g\n", got);
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "allsum")) {
        unsigned warps = (unsigned)atoi(argv[2]), n = warps * 32;
        std::vector<float> in(n), out(n);
        std::vector<unsigned> votes(warps);
        for (unsigned i = 0; i < n; i++) in[i] = value(i);
        float *o = out.data();
        unsigned *v = votes.data();
        const float *p = in.data();
        void *args[] = {&o, &v, &p};
        if (launch("warp_allsum", sim_entry_warp_allsum, 1, n, args)) return 1;
        for (unsigned w = 0; w < warps; w++) {
            float sum = 0;
            unsigned ballot = 0;
            for (unsigned l = 0; l < 32; l++) {
                sum += in[w * 32 + l];
                if (in[w * 32 + l] > 0) ballot |= 1u << l;
            }
            for (unsigned l = 0; l < 32; l++)
                if (out[w * 32 + l] != sum) {
                    fprintf(stderr, "sim_kernels: warp %u lane %u: %g, want %g\n", w, l,
                            out[w * 32 + l], sum);
                    return 1;
                }
            if (votes[w] != ballot) {
                fprintf(stderr, "sim_kernels: warp %u ballot 0x%08x, want 0x%08x\n", w, votes[w],
                        ballot);
                return 1;
            }
        }
        printf("ok\n");
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "divergent")) {
        std::vector<float> out(64);
        float *o = out.data();
        void *args[] = {&o};
        if (launch("divergent_barrier", sim_entry_divergent_barrier, 2, 64, args)) return 1;
        printf("ok\n");
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "halfwarp")) {
        unsigned mask = (unsigned)strtoul(argv[2], nullptr, 0);
        std::vector<float> out(64, -1.0f);
        float *o = out.data();
        void *args[] = {&o, &mask};
        if (launch("half_warp_shfl", sim_entry_half_warp_shfl, 1, 64, args)) return 1;
        for (unsigned t = 0; t < 64; t++) {
            float want = t % 32 < 16 ? (float)(t ^ 1) : -1.0f;
            if (out[t] != want) {
                fprintf(stderr, "sim_kernels: half_warp_shfl out[%u] %g, want %g\n", t, out[t],
                        want);
                return 1;
            }
        }
        printf("ok\n");
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "shared")) {
        int mode = atoi(argv[2]);
        std::vector<float> out(64, -1.0f);
        float *o = out.data();
        void *args[] = {&o, &mode};
        if (launch("shared_check", sim_entry_shared_check, 1, 64, args)) return 1;
        for (unsigned t = 0; t < 64; t++) {
            float want = mode == 3 || mode == 4 ? (float)(t ^ 1) : 0.0f;
            if (out[t] != want) {
                fprintf(stderr, "sim_kernels: shared_check %d out[%u] %g, want %g\n", mode, t,
                        out[t], want);
                return 1;
            }
        }
        printf("ok\n");
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "where")) {
        if (*sim_where()) {
            fprintf(stderr, "sim_kernels: sim_where() outside a launch: '%s'\n", sim_where());
            return 1;
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = [](int) {
            const char *w = sim_where();
            ssize_t r = write(2, w, strlen(w));
            r = write(2, "\n", 1);
            (void)r;
            _exit(1);
        };
        sigaction(SIGSEGV, &sa, nullptr);
        float *o = (float *)mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        unsigned mask = 0x0000ffffu;
        void *args[] = {&o, &mask};
        launch("half_warp_shfl", sim_entry_half_warp_shfl, 1, 64, args);
        fprintf(stderr, "sim_kernels: the write to a PROT_NONE page did not fault\n");
        return 2;
    }
    fprintf(stderr,
            "usage: sim_kernels sum|tree N GRID BLOCK | shared MODE | where | allsum WARPS | "
            "divergent | halfwarp MASK\n");
    return 2;
}
