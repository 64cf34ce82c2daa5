/* format/plan_internal.h — what the files of the plan container share
 * (plan.c: the file, its sections, writing and reading; plan_graph.c,
 * plan_schedule.c: the sections' bytes; plan_check.c: what a plan must
 * satisfy). Private to them and to unit tests; others use format/plan.h. */
#ifndef DPC_FORMAT_PLAN_INTERNAL_H
#define DPC_FORMAT_PLAN_INTERNAL_H

#include <stdint.h>

#include "format/plan.h"
#include "base/bytes.h"

/* Bounds on dimensions and integer attributes: far below where the shape
 * rules' arithmetic (size + 2*pad, products of dims) could overflow. */
#define PLAN_MAX_VALUE      ((int64_t)1 << 40)
#define PLAN_MAX_NUMEL      IR_MAX_NUMEL       /* elements in one tensor */
#define PLAN_MAX_TOTAL      ((int64_t)1 << 50) /* elements in all of a program's tensors */
/* Smallest encoded node: ten u32/i32 fields and an empty name. */
#define PLAN_NODE_MIN_BYTES 40

#define PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Everything a plan must satisfy to be written, or to be accepted on
 * reading (plan_check.c); 0, or -1 with the reason in why. */
int plan_check(const dpc_plan *p, char *why, size_t wn);
/* A tag of four printable ASCII bytes; a tag plan.c writes itself (never
 * an extra section). */
int plan_valid_tag(const char *t);
int plan_is_required(const char *tag);

/* base/bytes.h's bounded reader plus what a message needs: the first failure,
 * and where it happened. */
typedef struct {
    base_rbuf b;
    const char *what; /* "train program", "section META", ... for messages */
    int node;         /* node being decoded, or -1 */
    char why[512];    /* first failure */
    int failed;
} plan_rd;

/* Records the first failure ("WHAT[, node N]: ..."); returns -1. Reads
 * after a failure yield 0 and record nothing. */
PRINTF(2, 3) int plan_rd_fail(plan_rd *r, const char *f, ...);
uint32_t plan_get_u32(plan_rd *r);
uint64_t plan_get_u64(plan_rd *r);
int plan_get_i32(plan_rd *r);
int64_t plan_get_i64(plan_rd *r);
double plan_get_f64(plan_rd *r);
/* A string into dst[cap]: shorter than cap, no NUL or control bytes. */
void plan_get_str(plan_rd *r, char *dst, size_t cap, const char *field);
/* Fails when bytes are left over. */
void plan_get_done(plan_rd *r);

/* The graph sections (plan_graph.c). */
int plan_has_groups(const ir_graph *g);
void plan_put_graph(base_wbuf *b, const ir_graph *g);
ir_graph *plan_get_graph(plan_rd *r);
void plan_get_groups(plan_rd *r, ir_graph *g);

/* The schedule's sections (plan_schedule.c): the ir_train fields each
 * holds, by ir/ir.h's table. */
enum { PLAN_SEC_SCHD, PLAN_SEC_OPTM, PLAN_SEC_DATA, PLAN_SEC_TOKN };
void plan_put_schedule(base_wbuf *b, const ir_train *t, int sec);
int plan_get_schedule(plan_rd *r, ir_train *t, int sec); /* the whole section; 0 or -1 */
int plan_has_data(const ir_train *t);                    /* DATA is written */
int plan_has_tokens(const ir_train *t);                  /* TOKN is written */

#endif
