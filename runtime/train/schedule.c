/* runtime/train/schedule.c — per-epoch lr dict or a cosine/poly curve,
 * linear scaling, warmup. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/train/train.h"
#include "runtime/log.h"

rt_schedule rt_schedule_make(const ir_train *t, int global_batch) {
    rt_schedule s = {.t = t, .global_batch = global_batch, .per_iteration = 0};
    return s;
}

double rt_schedule_dict_lr(const ir_train *t, int epoch) {
    /* ir_train_check guarantees the keys increase and start at 0. */
    double lr = t->lr_value[0];
    for (int i = 0; i < t->lr_steps; i++)
        if (t->lr_epoch[i] <= epoch) lr = t->lr_value[i];
    return lr;
}

double rt_schedule_scale(const rt_schedule *s) {
    if (s->t->lr_scaling == IR_LR_SCALING_NONE || s->t->reference_batch <= 0) return 1.0;
    double k = (double)s->global_batch / (double)s->t->reference_batch;
    return s->t->lr_scaling == IR_LR_SCALING_SQRT ? sqrt(k) : k;
}

/* Warmup position `frac` in [0, 1): lr moves from the unscaled epoch-0 value
 * towards the scaled value of epoch K, the first epoch after warmup. */
static double warmup_lr(const rt_schedule *s, double frac) {
    double from = rt_schedule_dict_lr(s->t, 0);
    double to = rt_schedule_dict_lr(s->t, s->t->warmup_epochs) * rt_schedule_scale(s);
    return from + (to - from) * frac;
}

/* A cosine or poly curve at step `step` of epoch e (past warmup): from the
 * scaled base at the first step after warmup to lr_final at its end step E
 * (x = s/S, s counted from the end of warmup W, S = E - W; x = 0 when S is
 * 0). E: the curve's steps= (nanoGPT's lr_decay_iters: its
 *     ratio = (it - W) / (E - W), lr = final + 0.5*(1 + cos(pi*ratio))*(base - final)
 * and `final` past E, in the same double operations), else the run's last
 * step (--schedule-steps N: step N - 1). */
static double curve_lr(const rt_schedule *s, int epoch, long step, long spe) {
    const ir_train *t = s->t;
    if (spe <= 0) spe = 1;
    double w = t->warmup_steps ? (double)t->warmup_steps : (double)t->warmup_epochs * spe;
    double end = t->lr_decay_steps   ? (double)t->lr_decay_steps
                 : s->span_steps > 0 ? (double)s->span_steps - 1
                                     : (double)t->epochs * spe - 1;
    double last = end - w, at = (double)epoch * spe + step - w;
    double x = last > 0 ? fmin(fmax(at / last, 0), 1) : 0;
    double f = t->lr_kind == IR_LR_COSINE ? (1 + cos(acos(-1.0) * x)) / 2 : pow(1 - x, t->lr_power);
    double base = t->lr_value[0] * rt_schedule_scale(s);
    return t->lr_final + (base - t->lr_final) * f;
}

/* warmup K steps, nanoGPT's get_lr: step it (from 0 over the run) below K
 * has target * (it + 1) / (K + 1), target the lr of step K (a curve's
 * scaled base; the dict's scaled value of that step's epoch). */
static double step_warmup_lr(const rt_schedule *s, int epoch, long step, long spe) {
    const ir_train *t = s->t;
    if (spe <= 0) spe = 1;
    long it = (long)epoch * spe + step, k = t->warmup_steps;
    if (it >= k && t->lr_kind != IR_LR_DICT) return curve_lr(s, epoch, step, spe);
    double target =
        t->lr_kind != IR_LR_DICT
            ? t->lr_value[0] * rt_schedule_scale(s)
            : rt_schedule_dict_lr(t, (int)((it < k ? k : it) / spe)) * rt_schedule_scale(s);
    return it < k ? target * (double)(it + 1) / (double)(k + 1) : target;
}

double rt_schedule_epoch_lr(const rt_schedule *s, int epoch) {
    if (s->t->warmup_steps) return step_warmup_lr(s, epoch, 0, s->steps_per_epoch);
    int k = s->t->warmup_epochs;
    if (k > 0 && epoch < k) return warmup_lr(s, (double)epoch / k);
    if (s->t->lr_kind != IR_LR_DICT) return curve_lr(s, epoch, 0, s->steps_per_epoch);
    return rt_schedule_dict_lr(s->t, epoch) * rt_schedule_scale(s);
}

double rt_schedule_step_lr(const rt_schedule *s, int epoch, long step, long steps_per_epoch) {
    if (s->t->warmup_steps) return step_warmup_lr(s, epoch, step, steps_per_epoch);
    int k = s->t->warmup_epochs;
    if (epoch >= k && s->t->lr_kind != IR_LR_DICT) return curve_lr(s, epoch, step, steps_per_epoch);
    if (!s->per_iteration || k <= 0 || epoch >= k || steps_per_epoch <= 0)
        return rt_schedule_epoch_lr(s, epoch);
    /* Goyal et al.: a constant increment every iteration, reaching the
     * scaled lr exactly when epoch K starts. */
    double it = (double)epoch * steps_per_epoch + step;
    return warmup_lr(s, it / ((double)k * steps_per_epoch));
}

void rt_schedule_print(const rt_schedule *s, int per_step, FILE *f) {
    long spe = s->steps_per_epoch;
    for (int e = 0; e < s->t->epochs; e++)
        if (!per_step)
            fprintf(f, "epoch %d lr %.3f\n", e, rt_schedule_epoch_lr(s, e));
        else
            for (long i = 0; i < spe; i++)
                fprintf(f, "epoch %d step %ld lr %.9g\n", e, i, rt_schedule_step_lr(s, e, i, spe));
}

/* Appends one line to buf (cut to fit). */
static void note(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(char *buf, size_t len, const char *fmt, ...) {
    size_t used = strlen(buf);
    if (used + 2 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used - 1, fmt, ap);
    va_end(ap);
    strcat(buf, "\n");
}

/* --steps N short of a curve's span: the lr never reaches its end. */
static int stop_note(const rt_schedule *s, char *buf, size_t len) {
    const ir_train *t = s->t;
    long spe = s->steps_per_epoch, n = s->stop_steps;
    if (t->lr_kind == IR_LR_DICT || t->lr_decay_steps || n <= 0 || spe <= 0) return 0;
    long span = s->span_steps > 0 ? s->span_steps : (long)t->epochs * spe;
    if (n >= span) return 0;
    char whence[96];
    if (s->span_steps > 0)
        snprintf(whence, sizeof whence, "--schedule-steps %ld", span);
    else
        snprintf(whence, sizeof whence, "%d epoch%s of %ld", t->epochs, t->epochs == 1 ? "" : "s",
                 spe);
    note(buf, len,
         "the %s lr schedule spans %ld steps (%s); --steps %ld stops it early at lr %.4g, short "
         "of its end %.4g; --schedule-steps %ld makes it end there",
         t->lr_kind == IR_LR_COSINE ? "cosine" : "poly", span, whence, n,
         rt_schedule_step_lr(s, (int)((n - 1) / spe), (n - 1) % spe, spe), t->lr_final, n);
    return 1;
}

int rt_schedule_notes(const rt_schedule *s, char *buf, size_t len) {
    const ir_train *t = s->t;
    buf[0] = 0;
    int k = t->warmup_epochs, count = stop_note(s, buf, len);
    if (k <= 0) return count;
    double from = rt_schedule_dict_lr(t, 0), scale = rt_schedule_scale(s);
    double to = rt_schedule_dict_lr(t, k) * scale;
    int flat = fabs(to - from) <= 1e-12 * fabs(from); /* warmup from the lr to itself */
    if (t->epochs < k && !flat) {
        note(buf, len,
             "the run stops after %d epoch%s, inside the %d-epoch warmup: the lr reaches %.4g, "
             "not its target %.4g",
             t->epochs, t->epochs == 1 ? "" : "s", k, warmup_lr(s, (double)t->epochs / k), to);
        count++;
    }
    char scaling[128];
    if (t->lr_scaling == IR_LR_SCALING_NONE)
        snprintf(scaling, sizeof scaling, "the schedule does not scale the lr");
    else
        snprintf(scaling, sizeof scaling, "%s scaling at global batch %d, reference batch %d",
                 t->lr_scaling == IR_LR_SCALING_SQRT ? "sqrt" : "linear", s->global_batch,
                 t->reference_batch);
    /* A flat warmup is said when it is flat at every global batch (no lr
     * scaling to ramp to), or when the user asked for it: a schedule's
     * warmup under linear or sqrt scaling is flat only at its reference
     * batch and ramps at any larger one, as it is written to. */
    int flat_always = t->lr_scaling == IR_LR_SCALING_NONE || t->reference_batch <= 0;
    if (flat && (flat_always || s->warmup_asked)) {
        note(buf, len, "warmup changes nothing: the lr stays %.4g for its %d epoch%s (%s)", from, k,
             k == 1 ? "" : "s", scaling);
        count++;
    } else if (to < from) {
        note(buf, len,
             "warmup lowers the lr from %.4g to %.4g over %d epoch%s: its target is epoch %d's "
             "lr %.4g times %.4g (%s); a warmup normally ramps up to a larger lr",
             from, to, k, k == 1 ? "" : "s", k, rt_schedule_dict_lr(t, k), scale, scaling);
        count++;
    }
    return count;
}

void rt_schedule_say_notes(const rt_schedule *s, char *first, size_t first_len) {
    char buf[1024];
    if (first && first_len) first[0] = 0;
    if (!rt_schedule_notes(s, buf, sizeof buf)) return;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        rt_log(RT_LOG_NOTE, "%s", line);
        if (first && first_len && !first[0]) snprintf(first, first_len, "%s", line);
    }
}
