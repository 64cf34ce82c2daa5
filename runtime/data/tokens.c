/* runtime/data/tokens.c — token files (nanoGPT's train.bin / val.bin:
 * little-endian uint16 ids, nothing else) and the windows a language
 * model trains on. A training sample is a window of T+1 tokens at an
 * offset that is a pure function of (seed, step, sample), so any worker
 * may fill any sample and each replica fills its own samples of the
 * step's global batch; validation reads fixed consecutive windows.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"
#include "runtime/data/data.h"
#include "runtime/check.h"

/* Mixed into the seed so the windows do not share draws with other
 * streams of the same --seed. */
#define TOKENS_SALT 0x746f6b656e73ull /* "tokens" */

rt_tokens *rt_tokens_load(const char *path, int64_t block, int64_t vocab, char *err,
                          size_t errlen) {
    long long size;
    if (block < 1) {
        base_fail(err, errlen, "%s: block must be positive, got %" PRId64, path, block);
        return NULL;
    }
    int fd = base_file_open_read(path, &size, err, errlen);
    if (fd < 0) return NULL;
    rt_tokens *t = NULL;
    if (size % 2) {
        base_fail(err, errlen, "%s: %lld bytes, an odd size: not uint16 tokens", path, size);
    } else if ((unsigned long long)size > RT_TOKENS_MAX_FILE) {
        base_fail(err, errlen, "%s: %lld bytes; token files of at most %llu bytes are read", path,
                  size, (unsigned long long)RT_TOKENS_MAX_FILE);
    } else if (size / 2 < block + 1) {
        base_fail(err, errlen,
                  "%s: %lld tokens; a window of block %" PRId64 " needs at least %" PRId64, path,
                  size / 2, block, block + 1);
    } else {
        t = calloc(1, sizeof *t);
        RT_CHECK_ALLOC(t);
        t->count = size / 2;
        t->tok = malloc((size_t)size);
        RT_CHECK_ALLOC(t->tok);
        snprintf(t->name, sizeof t->name, "%s", path);
        uint8_t *b = (uint8_t *)t->tok;
        if (base_file_read_exact(fd, b, (size_t)size)) {
            base_fail(err, errlen, "%s: cannot read %lld bytes", path, size);
            rt_tokens_free(t), t = NULL;
        } else {
            for (int64_t i = 0; i < t->count; i++) /* little-endian on any host */
                t->tok[i] = (uint16_t)(b[2 * i] | b[2 * i + 1] << 8);
            for (int64_t i = 0; vocab > 0 && i < t->count; i++)
                if (t->tok[i] >= vocab) {
                    base_fail(err, errlen,
                              "%s: token %d at position %" PRId64
                              " is outside the vocabulary of %" PRId64,
                              path, t->tok[i], i, vocab);
                    rt_tokens_free(t), t = NULL;
                    break;
                }
        }
    }
    close(fd);
    return t;
}

void rt_tokens_free(rt_tokens *t) {
    if (!t) return;
    free(t->tok);
    free(t);
}

int64_t rt_tokens_offset(const rt_tokens *t, int64_t block, uint64_t seed, int64_t step,
                         int64_t sample) {
    rt_rng r;
    rt_rng_seed(&r, rt_rng_key(seed ^ TOKENS_SALT, (uint64_t)step, (uint64_t)sample));
    return (int64_t)rt_rng_below(&r, (uint64_t)(t->count - block));
}

/* Window at offset o: tokens w[0:T], targets w[1:T+1]. */
static void window(const rt_tokens *t, int64_t o, int64_t block, int32_t *tokens,
                   int32_t *targets) {
    for (int64_t k = 0; k < block; k++) {
        tokens[k] = t->tok[o + k];
        targets[k] = t->tok[o + k + 1];
    }
}

void rt_tokens_fill_train(const rt_tokens *t, int64_t block, uint64_t seed, int64_t step,
                          int replica, int64_t local, int64_t first, int64_t n, int32_t *tokens,
                          int32_t *targets) {
    for (int64_t j = first; j < first + n; j++) {
        int64_t sample = (int64_t)replica * local + j; /* its place in the global batch */
        window(t, rt_tokens_offset(t, block, seed, step, sample), block, tokens + j * block,
               targets + j * block);
    }
}

int64_t rt_tokens_val_windows(const rt_tokens *t, int64_t block) { return (t->count - 1) / block; }

void rt_tokens_fill_val(const rt_tokens *t, int64_t block, int64_t first, int64_t n,
                        int32_t *tokens, int32_t *targets) {
    for (int64_t j = 0; j < n; j++)
        window(t, (first + j) * block, block, tokens + j * block, targets + j * block);
}

int rt_batcher_tokens(rt_batcher *b, const rt_tokens *t, int64_t block, int batch,
                      rt_batch_mode mode, uint64_t seed, int64_t max_windows, char *err,
                      size_t errlen) {
    memset(b, 0, sizeof *b);
    b->tok = t, b->block = block, b->mode = mode, b->seed = seed, b->batch = batch;
    b->stride = batch, b->offset = 0;
    b->oc = b->oh = 1, b->ow = (int)block;
    b->label_elems = (int)block;
    if (batch <= 0) return base_fail(err, errlen, "batch must be positive, got %d", batch);
    if (mode == RT_BATCH_TRAIN) {
        b->batches = t->count / (block + 1) / batch;
        if (b->batches == 0)
            return base_fail(err, errlen,
                             "%s: %" PRId64 " tokens (%" PRId64 " windows of %" PRId64
                             ") do not fill one batch of %d",
                             t->name, t->count, t->count / (block + 1), block + 1, batch);
    } else {
        b->windows = rt_tokens_val_windows(t, block);
        if (max_windows > 0 && b->windows > max_windows) b->windows = max_windows;
        b->batches = (b->windows + batch - 1) / batch;
    }
    return 0;
}

int rt_tokens_batch_fill(const rt_batcher *b, int epoch, int64_t first, int n, int32_t *tokens,
                         int32_t *targets) {
    int64_t T = b->block;
    if (b->mode == RT_BATCH_TRAIN) {
        int64_t step = (int64_t)epoch * b->batches + first / b->stride;
        for (int j = 0; j < n; j++) {
            int64_t sample = first % b->stride + j; /* its place in the global batch */
            window(b->tok, rt_tokens_offset(b->tok, T, b->seed, step, sample), T, tokens + j * T,
                   targets + j * T);
        }
        return n;
    }
    int real = 0;
    for (int j = 0; j < n; j++) {
        int64_t p = first + j;
        if (p >= b->windows) {
            memset(tokens + j * T, 0, sizeof *tokens * (size_t)T);
            memset(targets + j * T, 0, sizeof *targets * (size_t)T);
            continue;
        }
        window(b->tok, p * T, T, tokens + j * T, targets + j * T);
        real++;
    }
    return real;
}
