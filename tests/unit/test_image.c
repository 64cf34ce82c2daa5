/* Tests for runtime/data/image.c's resize + centre crop (rt_image_fit).
 * With arguments, `test_image FILE OUT` writes FILE's decoded RGB bytes
 * (full size, h x w x 3) to OUT, for tests/imagefolder_test.sh to compare
 * with PIL's decoding of the same file; `test_image --jpeg OUT W H SCANS`
 * writes a W x H grey JPEG, baseline (SCANS 0), progressive in 190 scans
 * (SCANS 1) or in libjpeg's usual few (SCANS 2), for tests that need images
 * without PIL. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef DPC_HAVE_IMAGE
#include <jpeglib.h>
#endif

#include "runtime/data/data.h"
#include "tests/harness.h"

/* A scale of 1 copies the pixels; the crop is the centre. */
TEST(fit_at_scale_one_is_a_centre_crop) {
    uint8_t rgb[6 * 4 * 3], out[3 * 4 * 4];
    for (int i = 0; i < 6 * 4 * 3; i++) rgb[i] = (uint8_t)i;
    rt_image im = {6, 4, rgb}; /* 6 wide, 4 high */
    rt_image_fit(&im, 4, 4, 4, out);
    int bad = 0;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 4; x++)
                bad += out[c * 16 + y * 4 + x] != rgb[(y * 6 + x + 1) * 3 + c];
    CHECK(bad == 0);
}

/* Halving a 2x2 checker of 0 and 200 gives its mean everywhere. */
TEST(fit_halving_averages) {
    uint8_t rgb[4 * 4 * 3], out[3 * 2 * 2];
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++)
            for (int c = 0; c < 3; c++) rgb[(y * 4 + x) * 3 + c] = (x + y) % 2 ? 200 : 0;
    rt_image im = {4, 4, rgb};
    rt_image_fit(&im, 2, 2, 2, out);
    for (int i = 0; i < 12; i++) CHECK(out[i] == 100);
}

static int dump(const char *path, const char *out) {
    char err[1024];
    rt_image im;
    if (rt_image_load(path, 0, &im, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    FILE *f = fopen(out, "wb");
    int rc = !f || fwrite(im.rgb, 3, (size_t)im.w * (size_t)im.h, f) != (size_t)im.w * im.h;
    if (f) fclose(f);
    printf("%d %d\n", im.w, im.h);
    rt_image_free(&im);
    return rc;
}

#ifdef DPC_HAVE_IMAGE
/* A grey gradient; progressive: the DC, then each of the 63 AC
 * coefficients in its own scan at successive approximation 2, 1, 0. */
static int write_jpeg(const char *out, int w, int h, int many) {
    FILE *f = fopen(out, "wb");
    if (!f) return 1;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h;
    c.input_components = 1, c.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    static jpeg_scan_info scans[1 + 3 * 63];
    if (many == 2) jpeg_simple_progression(&c);
    if (many == 1) {
        scans[0] = (jpeg_scan_info){1, {0}, 0, 0, 0, 0};
        for (int k = 1, i = 1; k < 64; k++)
            for (int al = 2; al >= 0; al--)
                scans[i++] = (jpeg_scan_info){1, {0}, k, k, al == 2 ? 0 : al + 1, al};
        c.scan_info = scans, c.num_scans = 1 + 3 * 63;
    }
    jpeg_start_compress(&c, TRUE);
    unsigned char *row = malloc((size_t)w);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) row[x] = (unsigned char)((x + y) * 7);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    return fclose(f) != 0;
}
#endif

int main(int argc, char **argv) {
#ifdef DPC_HAVE_IMAGE
    if (argc == 6 && !strcmp(argv[1], "--jpeg"))
        return write_jpeg(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
#endif
    if (argc == 3) return dump(argv[1], argv[2]);
    RUN(fit_at_scale_one_is_a_centre_crop);
    RUN(fit_halving_averages);
    return harness_done();
}
