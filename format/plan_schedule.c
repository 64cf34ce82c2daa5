/* format/plan_schedule.c — the schedule's bytes, made from ir/ir.h's
 * field table (IR_TRAIN_FIELDS): SCHD holds its ALWAYS and CURVE fields in
 * the table's order, OPTM the OPTIM ones (written only when an optimizer
 * setting is not the default), DATA the NONZERO ones up to the last that
 * is not 0 (none: no section), so plans without the later parts, and DATA
 * sections written before a field was appended, read as before; TOKN the
 * TOKENS ones (only for a tokens dataset). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/plan_internal.h"
#include "base/bytes.h"
#include "base/err.h"
#include "ir/validate.h"

/* The plan section an ir_train field is in (ir/ir.h's table): SCHD, or
 * OPTM and DATA, written only when they differ from the defaults. */
static int section_of(const ir_train_field *f) {
    return f->when == IR_TW_OPTIM     ? PLAN_SEC_OPTM
           : f->when == IR_TW_NONZERO ? PLAN_SEC_DATA
           : f->when == IR_TW_TOKENS  ? PLAN_SEC_TOKN
                                      : PLAN_SEC_SCHD;
}

/* One field's bytes: I32 an i32, ENUM a u32, F64 an f64, F64X3 three, STR
 * a string, LR the step count then (epoch i32, lr f64) per step. */
static void put_field(base_wbuf *b, const ir_train *t, const ir_train_field *f) {
    const void *v = ir_train_cptr(t, f);
    switch (f->kind) {
    case IR_TK_I32: base_put_i32(b, *(const int *)v); break;
    case IR_TK_ENUM: base_put_u32(b, (uint32_t) * (const int *)v); break;
    case IR_TK_F64: base_put_f64(b, *(const double *)v); break;
    case IR_TK_F64X3:
        for (int c = 0; c < 3; c++) base_put_f64(b, ((const double *)v)[c]);
        break;
    case IR_TK_STR: base_put_str(b, (const char *)v); break;
    case IR_TK_LR:
        base_put_i32(b, t->lr_steps);
        for (int i = 0; i < t->lr_steps; i++) {
            base_put_i32(b, t->lr_epoch[i]);
            base_put_f64(b, t->lr_value[i]);
        }
        break;
    case IR_TK_LR_PART: break; /* with its LR field */
    }
}

/* The last DATA field that is not 0 (its index), or -1. */
static int last_data(const ir_train *t) {
    int last = -1;
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++) {
        const ir_train_field *f = &ir_train_fields[i];
        if (section_of(f) == PLAN_SEC_DATA && IR_TRAIN_NONZERO(t, f)) last = i;
    }
    return last;
}

/* The fields of section sec, in the table's order (DATA's up to its last
 * that is not 0). */
void plan_put_schedule(base_wbuf *b, const ir_train *t, int sec) {
    int end = sec == PLAN_SEC_DATA ? last_data(t) + 1 : IR_TRAIN_NFIELDS;
    for (int i = 0; i < end; i++)
        if (section_of(&ir_train_fields[i]) == sec) put_field(b, t, &ir_train_fields[i]);
}

/* DATA is written when one of its fields is not 0. */
int plan_has_data(const ir_train *t) { return last_data(t) >= 0; }

/* TOKN is written for a tokens dataset. */
int plan_has_tokens(const ir_train *t) { return !strcmp(t->dataset, "tokens"); }

/* An enum's value, at most max. */
static int get_enum(plan_rd *r, uint32_t max, const char *what, uint32_t *out) {
    *out = plan_get_u32(r);
    if (r->failed) return -1;
    if (*out > max) return plan_rd_fail(r, "unknown %s %" PRIu32, what, *out);
    return 0;
}

/* One field, as put_field wrote it; an ENUM up to the table's hi, the
 * message naming it by its key ("lr_scaling" as "lr scaling"). */
static void get_field(plan_rd *r, ir_train *t, const ir_train_field *f) {
    void *v = ir_train_ptr(t, f);
    switch (f->kind) {
    case IR_TK_I32: *(int *)v = plan_get_i32(r); break;
    case IR_TK_ENUM: {
        char what[32];
        snprintf(what, sizeof what, "%s", f->key);
        for (char *c = what; *c; c++)
            if (*c == '_') *c = ' ';
        uint32_t e;
        if (!get_enum(r, (uint32_t)f->hi, what, &e)) *(int *)v = (int)e;
        break;
    }
    case IR_TK_F64: *(double *)v = plan_get_f64(r); break;
    case IR_TK_F64X3:
        for (int c = 0; c < 3; c++) ((double *)v)[c] = plan_get_f64(r);
        break;
    case IR_TK_STR: {
        char what[48];
        snprintf(what, sizeof what, "%s name", f->key); /* "dataset name" */
        plan_get_str(r, (char *)v, f->size, what);
        break;
    }
    case IR_TK_LR: {
        int steps = plan_get_i32(r);
        if (r->failed) break;
        if (steps < 0 || steps > IR_MAX_LR_STEPS) {
            plan_rd_fail(r, "%d lr steps, at most %d allowed", steps, IR_MAX_LR_STEPS);
            break;
        }
        t->lr_steps = steps;
        for (int i = 0; i < steps; i++) {
            t->lr_epoch[i] = plan_get_i32(r);
            t->lr_value[i] = plan_get_f64(r);
        }
        break;
    }
    case IR_TK_LR_PART: break; /* with its LR field */
    }
}

/* The fields of section sec, the whole section (DATA's: those it holds,
 * the rest 0). The first failure is kept (rd_fail), and reads after it
 * yield 0. */
int plan_get_schedule(plan_rd *r, ir_train *t, int sec) {
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++)
        if (section_of(&ir_train_fields[i]) == sec && (sec != PLAN_SEC_DATA || base_left(&r->b)))
            get_field(r, t, &ir_train_fields[i]);
    plan_get_done(r);
    return r->failed ? -1 : 0;
}
