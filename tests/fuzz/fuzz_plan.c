/* libFuzzer target: the plan loader, the kernel programs and memory plans a
 * plan holds, and the memory dprun would check it against (limits.h). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "ir/plan.h"
#include "passes/passes.h"

static void load(const uint8_t *data, size_t size) {
    char err[512];
    dpc_plan *p = plan_read_mem("fuzz.plan", data, size, err, sizeof err);
    if (!p) return;
    const char *tags[] = {"KCPU", "KCUD"};
    for (int t = 0; t < 2; t++) {
        const plan_section *s = plan_find_section(p, tags[t]);
        if (!s) continue;
        cg_program *prog = NULL;
        if (cg_section_find(s->data, s->len, p->train, &prog, err, sizeof err) == 0 && prog)
            cg_program_check(prog, p->train, err, sizeof err);
        cg_program_free(prog);
    }
    /* What dprun adds up before allocating: saturating sums, never overflow. */
    const plan_section *mp = plan_find_section(p, MEMPLAN_SECTION);
    if (p->train && p->eval) {
        pass_memplan *mt = NULL, *me = NULL;
        if (mp) {
            pass_memplan_section_find(mp->data, mp->len, p->train, &mt, err, sizeof err);
            pass_memplan_section_find(mp->data, mp->len, p->eval, &me, err, sizeof err);
        }
        pass_memory need;
        pass_memory_need(p->train, mt, p->eval, me, &need);
        if (pass_memory_total(&need) < 0) abort();
        pass_memplan_free(mt);
        pass_memplan_free(me);
    }
    plan_free(p);
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load(data, size);
    /* Nearly every mutation breaks the checksum, which the loader checks
     * first; a copy whose header length and checksum are made right lets
     * the fuzzer reach the decoder behind them. */
    if (size >= PLAN_HEADER_SIZE) {
        uint8_t *fixed = malloc(size);
        if (!fixed) abort();
        memcpy(fixed, data, size);
        put_le64(fixed + 16, size - PLAN_HEADER_SIZE);
        put_le64(fixed + 24, plan_checksum(fixed + PLAN_HEADER_SIZE, size - PLAN_HEADER_SIZE));
        load(fixed, size);
        free(fixed);
    }
    return 0;
}
