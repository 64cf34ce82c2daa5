/* libFuzzer target: the plan loader, the kernel programs and memory plans a
 * plan holds, and the memory dprun would check it against (limits.h). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "codegen/codegen.h"
#include "ir/plan.h"
#include "passes/passes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    dpc_plan *p = plan_read_mem("fuzz.plan", data, size, err, sizeof err);
    if (!p) return 0;
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
    return 0;
}
