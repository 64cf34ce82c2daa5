/* runtime/data/image.c — JPEG and PNG files to RGB pixels (libjpeg-turbo,
 * libpng), and the resize + centre crop every image-folder record and
 * every `dprun predict` image goes through.
 *
 * A file is read whole (base_file_read: a regular file, size-capped) and
 * decoded from memory, by its first bytes, never its name. Both libraries
 * report errors through a handler that returns to us with longjmp (their
 * defaults exit or abort), and libjpeg's warnings (a truncated file, bad
 * Huffman data) are errors too: a damaged image is refused, not half grey.
 * Declared sizes are checked before anything is allocated for the pixels,
 * so a tiny file claiming 100000x100000 costs nothing; a progressive JPEG
 * is bounded further, in pixels (its coefficients are held whole) and in
 * scans (each a pass over them); a PNG's compressed data past its last row
 * is refused, not inflated (a bomb: megabytes inflating to gigabytes of
 * nothing). The bytes all threads' decoders hold at
 * once are bounded by a budget each decoder waits on (RT_IMAGE_DECODE_BUDGET).
 */
#include "runtime/data/data.h"
#include "base/err.h"
#include "base/file.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/check.h"

#ifdef DPC_HAVE_IMAGE
#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#endif

void rt_image_free(rt_image *im) {
    free(im->rgb);
    im->rgb = NULL;
    im->w = im->h = 0;
}

#ifndef DPC_HAVE_IMAGE

int rt_image_available(void) { return 0; }

int rt_image_decode(const char *path, const uint8_t *data, size_t size, int want, rt_image *im,
                    char *err, size_t errlen) {
    (void)data, (void)size, (void)want;
    memset(im, 0, sizeof *im);
    return base_fail(err, errlen, "%s: %s", path, RT_IMAGE_MISSING);
}

int rt_image_load(const char *path, int want, rt_image *im, char *err, size_t errlen) {
    return rt_image_decode(BASE_ESC(path), NULL, 0, want, im, err, errlen);
}

#else

int rt_image_available(void) { return 1; }

/* Both refusals a declared size gets, before any pixel memory. */
static int check_size(const char *path, long long w, long long h, char *err, size_t errlen) {
    if (w < 1 || h < 1)
        return base_fail(err, errlen, "%s: the image declares size %lldx%lld", path, w, h);
    if (w > RT_IMAGE_MAX_SIDE || h > RT_IMAGE_MAX_SIDE || w * h > RT_IMAGE_MAX_PIXELS)
        return base_fail(err, errlen,
                         "%s: the image declares size %lldx%lld; at most %d pixels a side and %d "
                         "in all are read",
                         path, w, h, RT_IMAGE_MAX_SIDE, RT_IMAGE_MAX_PIXELS);
    return 0;
}

/* ---- the decoding budget: the bytes every thread's decoder holds at once
 * (pixels, and a progressive JPEG's coefficients), at most
 * RT_IMAGE_DECODE_BUDGET in all. A decoder waits for its share before it
 * allocates; one alone always goes (check_size bounds it below the budget). */

static pthread_mutex_t budget_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t budget_cv = PTHREAD_COND_INITIALIZER;
static size_t budget_used;

static void budget_take(size_t bytes) {
    pthread_mutex_lock(&budget_mu);
    while (budget_used > 0 && budget_used + bytes > RT_IMAGE_DECODE_BUDGET)
        pthread_cond_wait(&budget_cv, &budget_mu);
    budget_used += bytes;
    pthread_mutex_unlock(&budget_mu);
}

static void budget_give(size_t bytes) {
    pthread_mutex_lock(&budget_mu);
    budget_used -= bytes;
    pthread_cond_broadcast(&budget_cv);
    pthread_mutex_unlock(&budget_mu);
}

/* ---- JPEG */

typedef struct {
    struct jpeg_error_mgr mgr;
    struct jpeg_progress_mgr progress;
    jmp_buf jb;
    int refused; /* msg is a refusal of ours, not libjpeg's */
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

/* Called as libjpeg reads each part of the input: a progressive file of
 * more than RT_JPEG_MAX_SCANS scans is refused at the scan past it (each
 * scan is a pass over the whole image's coefficients: thousands of scans
 * in a small file would cost minutes). */
static void jpeg_scans(j_common_ptr c) {
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (d->input_scan_number <= RT_JPEG_MAX_SCANS) return;
    jpeg_err *e = (jpeg_err *)c->err;
    e->refused = 1;
    snprintf(e->msg, sizeof e->msg,
             "a progressive JPEG of more than %d scans; at most %d are decoded", RT_JPEG_MAX_SCANS,
             RT_JPEG_MAX_SCANS);
    longjmp(e->jb, 1);
}

static void jpeg_fail(j_common_ptr c) {
    jpeg_err *e = (jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

/* Level -1 is a warning (corrupt data, a premature end): refused too,
 * except stray bytes between markers, common in camera files and harmless. */
static void jpeg_message(j_common_ptr c, int level) {
    if (level < 0 && c->err->msg_code != JWRN_EXTRANEOUS_DATA) jpeg_fail(c);
}

/* The smallest DCT scale n/8 that keeps the shorter side at least `want`:
 * decoding a 4000-pixel photo at 1/8 for a 64-pixel input is 64x less work. */
static int jpeg_scale(long long w, long long h, int want) {
    long long side = w < h ? w : h;
    if (want <= 0) return 8;
    for (int n = 1; n < 8; n++)
        if ((side * n + 7) / 8 >= want) return n;
    return 8;
}

static int decode_jpeg(const char *path, const uint8_t *data, size_t size, int want, rt_image *im,
                       char *err, size_t errlen) {
    struct jpeg_decompress_struct d;
    jpeg_err e;
    /* volatile: set between setjmp and a longjmp back to it */
    uint8_t *volatile rgb = NULL;
    volatile size_t held = 0; /* of the budget */
    d.err = jpeg_std_error(&e.mgr);
    e.mgr.error_exit = jpeg_fail;
    e.mgr.emit_message = jpeg_message;
    e.refused = 0;
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&d);
        free(rgb);
        if (held) budget_give(held);
        return base_fail(err, errlen, "%s: %s%s", path,
                         e.refused ? "" : "not a valid JPEG image: ", e.msg);
    }
    jpeg_create_decompress(&d);
    e.progress.progress_monitor = jpeg_scans;
    d.progress = &e.progress;
    jpeg_mem_src(&d, data, (unsigned long)size);
    jpeg_read_header(&d, TRUE);
    if (check_size(path, d.image_width, d.image_height, err, errlen)) {
        jpeg_destroy_decompress(&d);
        return -1;
    }
    /* A progressive file's coefficients are held whole, 2 bytes each, at
     * full size whatever the DCT scale. */
    size_t full = (size_t)(d.image_width + 15) / 8 * 8 * ((d.image_height + 15) / 8 * 8);
    size_t coef = jpeg_has_multiple_scans(&d) ? full * (size_t)d.num_components * 2 : 0;
    if (coef && (size_t)d.image_width * d.image_height > RT_IMAGE_MAX_PROGRESSIVE_PIXELS) {
        jpeg_destroy_decompress(&d);
        return base_fail(err, errlen,
                         "%s: a progressive JPEG of %ux%u; at most %d pixels are read from a "
                         "progressive JPEG",
                         path, d.image_width, d.image_height, RT_IMAGE_MAX_PROGRESSIVE_PIXELS);
    }
    d.out_color_space = JCS_RGB; /* grey and YCbCr alike; CMYK is refused */
    d.scale_num = (unsigned)jpeg_scale(d.image_width, d.image_height, want);
    d.scale_denom = 8;
    jpeg_calc_output_dimensions(&d);
    size_t stride = (size_t)d.output_width * 3;
    held = coef + stride * d.output_height;
    budget_take(held);
    jpeg_start_decompress(&d);
    rgb = malloc(stride * d.output_height);
    RT_CHECK_ALLOC(rgb);
    while (d.output_scanline < d.output_height) {
        JSAMPROW row = rgb + stride * d.output_scanline;
        jpeg_read_scanlines(&d, &row, 1);
    }
    jpeg_finish_decompress(&d);
    im->w = (int)d.output_width, im->h = (int)d.output_height, im->rgb = rgb;
    jpeg_destroy_decompress(&d);
    budget_give(held);
    return 0;
}

/* ---- PNG */

typedef struct {
    const uint8_t *data;
    size_t size, at;
    /* While the last row is read: the bytes read so far and the most it may
     * take (that row's share of the compressed data, and libpng's read-ahead) */
    size_t tail, tail_max;
    int last_row;
    char msg[256];
} png_src;

static void png_fail(png_structp p, png_const_charp msg) {
    png_src *s = png_get_error_ptr(p);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(p, 1);
}

static void png_quiet(png_structp p, png_const_charp msg) { (void)p, (void)msg; }

static void png_read(png_structp p, png_bytep out, png_size_t n) {
    png_src *s = png_get_io_ptr(p);
    if (n > s->size - s->at) png_error(p, "the file ends early (truncated?)");
    /* Once the rows are decoded, libpng inflates what is left of the
     * compressed stream to its end: a few bytes in a real file, gigabytes of
     * zeros in a small bomb (minutes of work, every byte then dropped). */
    if (s->last_row && (s->tail += n) > s->tail_max)
        png_error(p, "compressed data past the image's last row (a decompression bomb?)");
    memcpy(out, s->data + s->at, n);
    s->at += n;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int decode_png(const char *path, const uint8_t *data, size_t size, rt_image *im, char *err,
                      size_t errlen) {
    /* The size IHDR declares, refused by value before libpng (whose own
     * limit says only "Invalid IHDR data"). */
    if (size >= 24 && !memcmp(data + 12, "IHDR", 4) &&
        check_size(path, be32(data + 16), be32(data + 20), err, errlen))
        return -1;
    png_src s = {data, size, 0, 0, 0, 0, {0}};
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_fail, png_quiet);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    RT_CHECK_ALLOC(p && info);
    uint8_t *volatile rgb = NULL;
    png_bytep *volatile rows = NULL;
    volatile size_t held = 0; /* of the budget */
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_read_struct(&p, &info, NULL);
        free(rgb), free(rows);
        if (held) budget_give(held);
        return base_fail(err, errlen, "%s: not a valid PNG image: %s", path, s.msg);
    }
    /* libpng refuses these itself, before its own allocations. */
    png_set_user_limits(p, RT_IMAGE_MAX_SIDE, RT_IMAGE_MAX_SIDE);
    png_set_chunk_malloc_max(p, 16u << 20);
    png_set_read_fn(p, &s, png_read);
    png_read_info(p, info);
    png_uint_32 w = png_get_image_width(p, info), h = png_get_image_height(p, info);
    if (check_size(path, w, h, err, errlen)) {
        png_destroy_read_struct(&p, &info, NULL);
        return -1;
    }
    /* Whatever the colour type: 8-bit RGB (alpha dropped, as PIL's
     * convert("RGB") does). */
    png_set_expand(p);
    png_set_strip_16(p);
    png_set_strip_alpha(p);
    png_set_gray_to_rgb(p);
    int passes = png_set_interlace_handling(p);
    png_read_update_info(p, info);
    if (png_get_rowbytes(p, info) != (size_t)w * 3) png_error(p, "unexpected row layout");
    held = (size_t)w * h * 3 + sizeof *rows * h;
    budget_take(held);
    rgb = malloc((size_t)w * h * 3);
    rows = malloc(sizeof *rows * h);
    RT_CHECK_ALLOC(rgb && rows);
    for (png_uint_32 y = 0; y < h; y++) rows[y] = rgb + (size_t)y * w * 3;
    /* png_read_image's loop, the last row's reads bounded: at most the
     * file's widest row (8 bytes a pixel) and 64 KiB of libpng's buffer. */
    s.tail_max = (size_t)w * 8 + 1 + (64 << 10);
    for (int pass = 0; pass < passes; pass++)
        for (png_uint_32 y = 0; y < h; y++) {
            s.last_row = pass == passes - 1 && y == h - 1;
            png_read_row(p, rows[y], NULL);
        }
    s.last_row = 0;
    png_read_end(p, NULL);
    png_destroy_read_struct(&p, &info, NULL);
    free(rows);
    budget_give(held);
    im->w = (int)w, im->h = (int)h, im->rgb = rgb;
    return 0;
}

int rt_image_decode(const char *path, const uint8_t *data, size_t size, int want, rt_image *im,
                    char *err, size_t errlen) {
    memset(im, 0, sizeof *im);
    static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
        return decode_jpeg(path, data, size, want, im, err, errlen);
    if (size >= 8 && !memcmp(data, png_magic, 8))
        return decode_png(path, data, size, im, err, errlen);
    return base_fail(err, errlen, "%s: not a JPEG or PNG image (%s)", path,
                     size ? "unknown first bytes" : "the file is empty");
}

int rt_image_load(const char *path, int want, rt_image *im, char *err, size_t errlen) {
    memset(im, 0, sizeof *im);
    size_t size;
    /* The name came from a folder's listing: escaped in every message. */
    char shown[1024];
    base_esc(shown, sizeof shown, path);
    uint8_t *data = base_file_read_as(path, shown, RT_IMAGE_MAX_FILE, &size, err, errlen);
    if (!data) return -1;
    int rc = rt_image_decode(shown, data, size, want, im, err, errlen);
    free(data);
    return rc;
}

#endif

/* Bilinear, pixel centres aligned (source x = (x + 0.5) * scale - 0.5,
 * clamped): a scale of 1 copies the pixels exactly. */
void rt_image_fit(const rt_image *im, int side, int oh, int ow, uint8_t *out) {
    int shorter = im->w < im->h ? im->w : im->h;
    double scale = (double)shorter / side; /* source pixels per output pixel */
    /* The resized image is rw x rh; the crop starts at its centre. */
    long long rw = im->w == shorter ? side : llround(im->w / scale);
    long long rh = im->h == shorter ? side : llround(im->h / scale);
    long long y0 = (rh - oh) / 2, x0 = (rw - ow) / 2;
    size_t plane = (size_t)oh * (size_t)ow;
    for (int y = 0; y < oh; y++) {
        double sy = ((double)(y + y0) + 0.5) * scale - 0.5;
        if (sy < 0) sy = 0;
        if (sy > im->h - 1) sy = im->h - 1;
        int ya = (int)sy, yb = ya + 1 < im->h ? ya + 1 : ya;
        double fy = sy - ya;
        for (int x = 0; x < ow; x++) {
            double sx = ((double)(x + x0) + 0.5) * scale - 0.5;
            if (sx < 0) sx = 0;
            if (sx > im->w - 1) sx = im->w - 1;
            int xa = (int)sx, xb = xa + 1 < im->w ? xa + 1 : xa;
            double fx = sx - xa;
            for (int c = 0; c < 3; c++) {
                const uint8_t *p = im->rgb + c;
                double top = p[((size_t)ya * im->w + xa) * 3] * (1 - fx) +
                             p[((size_t)ya * im->w + xb) * 3] * fx;
                double bot = p[((size_t)yb * im->w + xa) * 3] * (1 - fx) +
                             p[((size_t)yb * im->w + xb) * 3] * fx;
                long v = lround(top * (1 - fy) + bot * fy);
                out[(size_t)c * plane + (size_t)y * ow + x] = (uint8_t)(v < 0     ? 0
                                                                        : v > 255 ? 255
                                                                                  : v);
            }
        }
    }
}
