/* libFuzzer target: the CIFAR-10 batch-file reader (--data). Any input is
 * either a dataset of whole records with labels 0-9 or one message. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    rt_dataset *ds = rt_data_cifar10_parse("fuzz.bin", data, size, err, sizeof err);
    if (!ds) return 0;
    /* every accepted record must be readable, with a valid label */
    for (int64_t i = 0; i < ds->count; i++) {
        int label;
        const uint8_t *px = rt_dataset_get(ds, i, &label);
        if (label < 0 || label > 9 || px[3071] != data[(size_t)i * 3073 + 3072]) abort();
    }
    rt_dataset_free(ds);
    return 0;
}
