/* codegen/cost.c — the per-kernel cost model (codegen/cost.h): the device
 * table, each call's threads, serial loop, bytes and flops, and the
 * roofline that turns them into microseconds. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/internal.h"

/* The devices, one row each. h200 (NVIDIA H200 SXM 141 GB datasheet,
 * nvidia.com/en-us/data-center/h200, and the H100/H200 Hopper whitepaper):
 * 132 SMs, 2048 resident threads per SM (compute capability 9.0, CUDA C
 * Programming Guide, table of technical specifications), 4.8 TB/s HBM3e,
 * 67 TFLOP/s FP32, 495 TFLOP/s TF32 and 989 TFLOP/s BF16 dense tensor-core
 * peak. launch_us: ~2 us per kernel node replayed inside a CUDA graph (our
 * round figure for a dependent chain of small graph nodes; tests/gpu/
 * check.sh measures it). iter_ns: a thread of a kernel that does not fill
 * the GPU runs its loop alone; an iteration is a global load (and a
 * double add) whose ~0.5 us HBM latency (about 1000 cycles at 1.98 GHz)
 * the few warps resident cannot hide; the independent partial-sum lanes
 * (CG_REDUCE_LANES) keep ~25 loads in flight, so 20 ns per iteration, a
 * round figure for the first GPU run to calibrate. */
const cg_device cg_devices[] = {
    {.name = "h200",
     .sms = 132,
     .threads_per_sm = 2048,
     .hbm_bytes_per_s = 4.8e12,
     .fp32_flops = 67e12,
     .tf32_flops = 495e12,
     .bf16_flops = 989e12,
     .launch_us = 2.0,
     .iter_ns = 20.0},
    /* h100: H100 SXM5 80 GB (datasheet, nvidia.com/en-us/data-center/h100):
     * the H200's SMs and peaks, 3.35 TB/s HBM3. a100: A100 SXM4 80 GB
     * (datasheet, nvidia.com/en-us/data-center/a100): 108 SMs, 2048
     * resident threads per SM (compute capability 8.0), 2.039 TB/s HBM2e,
     * 19.5 TFLOP/s FP32, 156 TF32 and 312 BF16 dense. Launch and iteration
     * figures: the h200's round ones. */
    {.name = "h100",
     .sms = 132,
     .threads_per_sm = 2048,
     .hbm_bytes_per_s = 3.35e12,
     .fp32_flops = 67e12,
     .tf32_flops = 495e12,
     .bf16_flops = 989e12,
     .launch_us = 2.0,
     .iter_ns = 20.0},
    {.name = "a100",
     .sms = 108,
     .threads_per_sm = 2048,
     .hbm_bytes_per_s = 2.039e12,
     .fp32_flops = 19.5e12,
     .tf32_flops = 156e12,
     .bf16_flops = 312e12,
     .launch_us = 2.0,
     .iter_ns = 20.0},
    {.name = NULL},
};

const cg_device *cg_device_find(const char *name) {
    for (const cg_device *d = cg_devices; name && d->name; d++)
        if (!strcmp(d->name, name)) return d;
    return NULL;
}

const char *cg_device_names(char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    for (const cg_device *d = cg_devices; d->name && len < n; d++) {
        int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "", d->name);
        if (w < 0) break;
        len += (size_t)w;
    }
    return buf;
}

/* cuBLAS reaches a large share of peak only on large products: 70% from
 * 2^30 multiply-adds (a ResNet convolution at batch 128), 40% from 2^24,
 * 10% below (tile quantisation and launch-bound shapes). A stated rule of
 * thumb, not a measurement. */
static double macs_fraction(double macs) {
    return macs >= 1073741824.0 ? 0.7 : macs >= 16777216.0 ? 0.4 : 0.1;
}

double cg_gemm_fraction(const cg_gemm *d) {
    return macs_fraction((double)d->m * (double)d->n * (double)d->k *
                         (double)(d->batch > 0 ? d->batch : 1));
}

/* cuDNN's implicit-GEMM convolutions tile the same product without
 * writing its columns: the GEMM's fractions of the multiply-adds. A
 * stated rule of thumb too, for the first GPU run to calibrate. */
double cg_conv_fraction(const cg_conv *d) { return macs_fraction(cg_conv_flops(d) / 2); }

static double seconds_us(double s) { return s * 1e6; }

/* The roofline of kernels and GEMMs alike: bytes at HBM bandwidth or flops
 * at the given rate, whichever takes longer (launch not included). */
static double roofline_us(const cg_device *dev, int64_t bytes, int64_t flops, double flops_per_s) {
    double t = seconds_us((double)bytes / dev->hbm_bytes_per_s);
    double f = seconds_us((double)flops / flops_per_s);
    return f > t ? f : t;
}

double cg_kernel_us(const cg_device *dev, int64_t threads, int64_t blocks, int64_t serial,
                    int64_t bytes, int64_t flops) {
    double t = roofline_us(dev, bytes, flops, dev->fp32_flops);
    /* an SM's share of bandwidth and peak each: a grid of fewer blocks
     * than SMs leaves the others idle */
    if (blocks > 0 && blocks < dev->sms) t *= (double)dev->sms / (double)blocks;
    double chain = threads < (int64_t)dev->sms * dev->threads_per_sm
                       ? (double)serial * dev->iter_ns * 1e-3
                       : 0.0;
    if (chain > t) t = chain;
    return t + dev->launch_us;
}

static int64_t esize(int dtype) { return (int64_t)ir_dtype_size((ir_dtype)dtype); }

/* A GEMM: every operand once (a stride-0 operand once for the batch), C
 * read too when beta accumulates. f32 GEMMs run plain FP32, or on the TF32
 * tensor cores when tf32 (--precision tf32, runtime/cuda/cublas.c), bf16
 * ones on the BF16 tensor cores. */
static void gemm_cost(const cg_device *dev, const cg_gemm *d, cg_call_cost *c) {
    int64_t b = d->batch > 0 ? d->batch : 1;
    int64_t na = d->m * d->k * (d->stride_a ? b : 1), nb = d->k * d->n * (d->stride_b ? b : 1);
    int64_t nc = d->m * d->n * b * (d->beta != 0.0f ? 2 : 1);
    snprintf(c->name, sizeof c->name, "gemm_%" PRId64 "x%" PRId64 "x%" PRId64 "%s", d->m, d->n,
             d->k,
             d->type_a == IR_BF16 ? "_bf16"
             : d->tf32            ? "_tf32"
                                  : "");
    c->kind = CG_CALL_GEMM;
    c->threads = d->m * d->n * b;
    c->serial = d->k;
    c->bytes = na * esize(d->type_a) + nb * esize(d->type_b) + nc * esize(d->type_c);
    c->flops = 2 * d->m * d->n * d->k * b;
    c->peak = d->type_a == IR_BF16 ? dev->bf16_flops : d->tf32 ? dev->tf32_flops : dev->fp32_flops;
    c->us = roofline_us(dev, c->bytes, c->flops, c->peak * cg_gemm_fraction(d)) + dev->launch_us;
}

/* A library convolution (cuDNN): x, w and y once each, no columns; the
 * output's elements as threads, each summing the reduction as its loop. */
static void conv_cost(const cg_device *dev, const cg_conv *d, cg_call_cost *c) {
    int64_t Cg = d->C / d->G, Kg = d->K / d->G; /* a group's inputs and outputs */
    int64_t nx = d->N * d->C * d->H * d->W, nw = d->K * Cg * d->kh * d->kw,
            ny = d->N * d->K * d->Ho * d->Wo;
    int bf16 = d->type_x == IR_BF16;
    snprintf(c->name, sizeof c->name,
             "conv_%s_%" PRId64 "x%" PRId64 "x%" PRId64 "_k%" PRId64 "_s%" PRId64 "%s%s",
             cg_conv_dir_name(d->dir), d->C, d->H, d->K, d->kh, d->sh, d->G > 1 ? "_g" : "",
             bf16      ? "_bf16"
             : d->tf32 ? "_tf32"
                       : "");
    c->kind = CG_CALL_CONV;
    c->threads = d->dir == CG_CONV_FORWARD ? ny : d->dir == CG_CONV_BACKWARD_DATA ? nx : nw;
    c->serial = d->dir == CG_CONV_FORWARD         ? Cg * d->kh * d->kw
                : d->dir == CG_CONV_BACKWARD_DATA ? Kg * d->kh * d->kw
                                                  : d->N * d->Ho * d->Wo;
    /* a widened f32 dw is written in bf16, then read and written as f32 by
     * a launch of its own (runtime/cuda/cudnn.c) */
    int widened = cg_conv_widened(d);
    int64_t widening = widened ? nw * (esize(IR_BF16) + esize(IR_F32)) : 0;
    c->bytes =
        nx * esize(d->type_x) + nw * esize(widened ? IR_BF16 : d->type_w) + ny * esize(d->type_y);
    c->flops = (int64_t)cg_conv_flops(d);
    c->peak = bf16 ? dev->bf16_flops : d->tf32 ? dev->tf32_flops : dev->fp32_flops;
    c->us = roofline_us(dev, c->bytes, c->flops, c->peak * cg_conv_fraction(d)) + dev->launch_us;
    if (widened) c->us += roofline_us(dev, widening, 0, c->peak) + dev->launch_us;
    c->bytes += widening;
}

/* A kernel: `count` threads (one per iteration), each running the
 * kernel's serial loop; an argument's bytes are its buffer from the call's
 * offset, read (or written) once, but never more than the iterations can
 * touch (count * serial elements: a conv chunk's slice of the scratch). */
static void kernel_cost(const cg_device *dev, const cg_program *p, const ir_graph *g,
                        const cg_step *s, const cg_call *call, const cg_kernel_info *ki,
                        cg_call_cost *c) {
    snprintf(c->name, sizeof c->name, "%s", p->kernels[call->kernel].name);
    c->kind = CG_CALL_KERNEL;
    /* the threads the recorded launch starts (a grid-stride loop covers
     * the rest); a cooperative kernel's block shares an iteration */
    int64_t threads = (int64_t)call->launch.grid * call->launch.block;
    int64_t per_iter = (ki->block > 0 ? ki->block : 1) * (ki->split > 1 ? ki->split : 1);
    int64_t needed = call->count * per_iter;
    c->threads = threads > 0 && threads < needed ? threads : needed;
    c->serial = ki->serial;
    int64_t reach = needed * ki->serial;
    for (int j = 0; j < call->nargs; j++) {
        int64_t n = cg_slot_size(p, g, s, call->arg[j]) - call->off[j];
        if (n > reach) n = reach;
        if (n > 0) c->bytes += n * esize(ki->type[j]);
    }
    c->flops = call->count * ki->work;
    c->peak = dev->fp32_flops;
    c->us = cg_kernel_us(dev, c->threads, call->launch.grid, c->serial, c->bytes, c->flops);
}

int cg_cost_estimate(const ir_graph *g, const cg_device *dev, cg_call_cost **out, int *n,
                     cg_cost_totals *t, char *err, size_t errlen) {
    cg_kernel_info *info = NULL;
    cg_program *p = cg_generate_info(g, CG_DIALECT_CUDA, NULL, &info, err, errlen);
    if (!p) return -1;
    cg_call_cost *cs = calloc((size_t)p->ncalls + 1, sizeof *cs);
    BASE_CHECK_ALLOC(cs);
    cg_cost_totals tot = {0};
    double bound_flops_us = 0;
    int k = 0;
    for (int si = 0; si < p->nsteps; si++) {
        const cg_step *s = &p->steps[si];
        for (int ci = s->first_call; ci < s->first_call + s->ncalls; ci++) {
            const cg_call *call = &p->calls[ci];
            /* cuDNN runs a library convolution it computes in one type,
             * and its alternative the rest (runtime/cuda/cudnn.c) */
            if (call->kind == CG_CALL_CONV && cg_conv_compute_type(&call->conv) < 0) continue;
            if (call->kind == CG_CALL_CONV) {
                conv_cost(dev, &call->conv, &cs[k]);
                tot.convs++;
                ci += call->conv.nalt;
            } else if (call->kind == CG_CALL_GEMM) {
                gemm_cost(dev, &call->gemm, &cs[k]);
                tot.gemms++;
            } else {
                kernel_cost(dev, p, g, s, call, &info[call->kernel], &cs[k]);
                tot.kernels++;
            }
            tot.bytes += cs[k].bytes;
            tot.flops += cs[k].flops;
            tot.step_us += cs[k].us;
            bound_flops_us += seconds_us((double)cs[k].flops / cs[k].peak);
            k++;
        }
    }
    double bytes_us = seconds_us((double)tot.bytes / dev->hbm_bytes_per_s);
    tot.bound_us = (bytes_us > bound_flops_us ? bytes_us : bound_flops_us) +
                   (tot.kernels + tot.gemms + tot.convs) * dev->launch_us;
    *out = cs;
    *n = k;
    if (t) *t = tot;
    free(info);
    cg_program_free(p);
    return 0;
}

int cg_cost_report(FILE *f, const char *prog, int batch, const ir_graph *g, const cg_device *dev,
                   cg_cost_totals *t, char *err, size_t errlen) {
    cg_call_cost *cs = NULL;
    cg_cost_totals tot;
    int n = 0;
    if (cg_cost_estimate(g, dev, &cs, &n, &tot, err, errlen)) return -1;
    int w = 6; /* the name column fits the longest name */
    for (int i = 0; i < n; i++)
        if ((int)strlen(cs[i].name) > w) w = (int)strlen(cs[i].name);
    fprintf(f, "%s program on %s, batch %d (CUDA kernels, modelled):\n", prog, dev->name, batch);
    fprintf(f, "  %-*s %10s %10s %12s %14s %10s\n", w, "kernel", "threads", "serial", "bytes",
            "flops", "us");
    for (int i = 0; i < n; i++)
        fprintf(f, "  %-*s %10" PRId64 " %10" PRId64 " %12" PRId64 " %14" PRId64 " %10.1f\n", w,
                cs[i].name, cs[i].threads, cs[i].serial, cs[i].bytes, cs[i].flops, cs[i].us);
    fprintf(f, "%s total: modelled step %.1f us, lower bound %.1f us\n", prog, tot.step_us,
            tot.bound_us);
    fprintf(f, "%s total: %d kernels and %d GEMMs per step, %" PRId64 " bytes per step (%.1f MB)\n",
            prog, tot.kernels, tot.gemms, tot.bytes, (double)tot.bytes / 1e6);
    if (tot.convs)
        fprintf(f, "%s total: %d library convolutions per step (cuDNN)\n", prog, tot.convs);
    fprintf(f, "%s total: %.2f GFLOP per step\n", prog, (double)tot.flops * 1e-9);
    if (t) *t = tot;
    free(cs);
    return 0;
}
