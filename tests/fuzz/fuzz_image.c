/* libFuzzer target: the JPEG and PNG decoders (image folders, dprun
 * predict). Any input is an RGB image of a size within the limits, whose
 * every pixel can be read and fitted, or one message; never a crash, a
 * hang or an exit from inside libjpeg or libpng. The first byte is the
 * shorter side asked for (the JPEG DCT scale). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int want = data[0] % 64;
    char err[512];
    rt_image im;
    if (rt_image_decode("fuzz.img", data + 1, size - 1, want, &im, err, sizeof err)) return 0;
    if (im.w < 1 || im.h < 1 || im.w > RT_IMAGE_MAX_SIDE || im.h > RT_IMAGE_MAX_SIDE) abort();
    uint8_t out[3 * 8 * 8];
    rt_image_fit(&im, 8, 8, 8, out);
    unsigned sum = im.rgb[0] + im.rgb[(size_t)im.w * (size_t)im.h * 3 - 1];
    rt_image_free(&im);
    return (int)(sum & 0);
}
