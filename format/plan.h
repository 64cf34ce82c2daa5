/* format/plan.h — the plan file: what `dpc` writes and `dprun` loads.
 *
 * Usage:
 *     dpc_plan plan = {0};
 *     plan.train = train_graph; plan.eval = eval_graph; plan.schedule = t;
 *     snprintf(plan.model, sizeof plan.model, "resnet18_v1");
 *     if (plan_write(&plan, "r.plan", err, sizeof err)) ...;
 *
 *     dpc_plan *p = plan_read("r.plan", err, sizeof err);   // NULL + message
 *     plan_info(p, stdout);
 *     plan_free(p);
 *
 * Layout: a 32-byte header — magic "DPCPLAN\0", format version (u32), flags
 * (u32), payload length (u64), FNV-1a 64 checksum of the payload (u64) —
 * then the payload: a sequence of sections, each a 4-byte tag, a u64 length
 * and its bytes. Readers skip unknown tags, so later passes can add sections
 * (kernel sources, memory plans) without breaking older files; a change to
 * an existing section's layout bumps PLAN_VERSION. All integers are little
 * endian; floats are IEEE binary64.
 */
#ifndef DPC_PLAN_H
#define DPC_PLAN_H

#include "ir/ir.h"

#define PLAN_MAGIC        "DPCPLAN"
/* 3: conv and its gradients gained the groups attribute (a node's integer
 * attribute count is part of its record); a version-2 plan is refused with
 * the version message, to be recompiled. */
#define PLAN_VERSION      3u
#define PLAN_MAX_SECTIONS 32
#define PLAN_HEADER_SIZE  32

/* An opaque extra section: tag plus bytes (kernel sources, memory plans). */
typedef struct {
    char tag[5];
    size_t len;
    unsigned char *data;
} plan_section;

typedef struct {
    char model[IR_NAME_MAX]; /* network name */
    char source[256];        /* the .net file it was compiled from */
    ir_train schedule;
    ir_graph *train; /* per-device training program */
    ir_graph *eval;  /* inference program at the eval batch */
    int nextra;
    plan_section extra[PLAN_MAX_SECTIONS];
    uint64_t checksum; /* the file's payload checksum (plan_read; 0 otherwise): names the plan */
    char name[512];    /* the path (or name) plan_read/plan_read_mem read it as; for messages */
} dpc_plan;

int plan_write(const dpc_plan *p, const char *path, char *err, size_t errlen);
dpc_plan *plan_read(const char *path, char *err, size_t errlen);
/* Same as plan_read, from memory (fuzzing and tests); name used in messages. */
dpc_plan *plan_read_mem(const char *name, const unsigned char *buf, size_t len, char *err,
                        size_t errlen);
/* Frees the graphs, the extra sections and p itself (for plan_read's plans). */
void plan_free(dpc_plan *p);
/* Frees only the extra sections (for a caller-owned plan filled by hand). */
void plan_free_sections(dpc_plan *p);
void plan_info(const dpc_plan *p, FILE *f);
/* Adds (copies) an extra section; returns 0, or -1 when full or when the tag
 * is not 4 printable characters, already there, or META/SCHD/GTRN/GEVL/GRPS
 * (the sections plan_write makes itself). */
int plan_add_section(dpc_plan *p, const char *tag, const void *data, size_t len);
const plan_section *plan_find_section(const dpc_plan *p, const char *tag);
/* FNV-1a 64 of a buffer: the header's checksum of the payload. */
uint64_t plan_checksum(const void *data, size_t len);

#endif
