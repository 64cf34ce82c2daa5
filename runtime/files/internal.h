/* runtime/files/internal.h — private to runtime/files: what its files
 * share.
 *
 *     checkpoint.c        the metadata keys (rt_ckpt_keys), in the order written
 *     checkpoint_meta.c   the metadata of a checkpoint read back, checked
 *     safetensors_json.c  the header's JSON, parsed into an rt_st_file
 */
#ifndef DPC_RT_FILES_INTERNAL_H
#define DPC_RT_FILES_INTERNAL_H

#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "runtime/check.h"
#include "runtime/files/files.h"

/* A broken invariant of this room (not of the input): abort, saying where. */
#define CKPT_ASSERT(cond, ...)    \
    do {                          \
        if (!(cond)) {            \
            RT_FAIL(__VA_ARGS__); \
            abort();              \
        }                         \
    } while (0)

/* Every key a checkpoint's metadata holds, in the order they are written;
 * a file with any other key, or one of these twice, is refused. */
#define RT_CKPT_NKEYS 29
extern const char *const rt_ckpt_keys[RT_CKPT_NKEYS];

/* A value from the file as a message shows it: cut short, with control
 * bytes escaped. */
static inline const char *rt_ckpt_shown(const char *v, char buf[64]) {
    return base_esc(buf, 64, v);
}

/* checkpoint_meta.c: a parsed checkpoint's format, keys, checksum, plan
 * (model and plan checksum) and replica count n; then the position and
 * counters into *s, each checked. 0, or -1 + a message naming path. */
int rt_ckpt_check_header(const rt_st_file *f, const char *path, const dpc_plan *plan, int n,
                         rt_ckpt_state *s, char *err, size_t errlen);

/* safetensors_json.c: the header's len bytes at h (after the 8 length
 * bytes of the file named `file`) into f's tensors (name, shape, byte
 * range; numel and the layout are safetensors.c's) and metadata, at most
 * max_tensors of them. 0, or -1 + a message naming the byte. */
int rt_st_parse_header(const char *file, const char *h, size_t len, int max_tensors, rt_st_file *f,
                       char *err, size_t errlen);

#endif
