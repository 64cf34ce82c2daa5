/* libFuzzer target: the plan loader, and the kernel programs a plan holds. */
#include <stddef.h>
#include <stdint.h>

#include "codegen/codegen.h"
#include "ir/plan.h"

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
    plan_free(p);
    return 0;
}
