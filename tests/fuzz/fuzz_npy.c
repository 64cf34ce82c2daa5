/* libFuzzer target: the .npy reader (a `data npy` plan's --data). The
 * input is two files, images then labels, split at the offset its first
 * two bytes give. Any input is a dataset whose labels and pixels can all
 * be read, or one message. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t cut = (size_t)data[0] | (size_t)data[1] << 8;
    data += 2, size -= 2;
    if (cut > size) cut = size;
    char err[512];
    rt_dataset *ds =
        rt_data_npy_parse("x.npy", data, cut, "y.npy", data + cut, size - cut, 3, err, sizeof err);
    if (!ds) return 0;
    unsigned sum = 0;
    for (int64_t i = 0; i < ds->count; i++) {
        int label;
        const uint8_t *px = rt_dataset_get(ds, i, &label);
        if (label < 0 || label >= ds->classes) abort();
        sum += px[0] + px[3 * ds->h * ds->w - 1];
    }
    rt_dataset_free(ds);
    return (int)(sum & 0);
}
