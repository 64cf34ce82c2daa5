/* runtime/train/progress.h — a one-line progress bar for a terminal.
 *
 * Drawn on a stream only when that stream is a terminal: when stderr goes
 * to a file or a pipe, a bar would only be noise (carriage returns in a
 * log). There, rt_progress_lines asks for a plain line every N seconds
 * instead, so a log shows the run is alive. The bar is redrawn in place at
 * most ten times a second and erased by rt_progress_clear, so the log
 * lines printed between bars stay clean.
 *
 * Usage:
 *     rt_progress bar;
 *     rt_progress_init(&bar, stderr);              // enabled iff isatty(stderr)
 *     rt_progress_lines(&bar, 60);                 // else a line a minute (optional)
 *     rt_progress_begin(&bar, "epoch 3", steps);
 *     for (...) rt_progress_update(&bar, done, images_per_s, running_loss);  // NAN: no loss
 *     rt_progress_clear(&bar);                     // before printing the EPOCH line
 */
#ifndef DPC_RT_TRAIN_PROGRESS_H
#define DPC_RT_TRAIN_PROGRESS_H

#include <stdio.h>

typedef struct {
    FILE *f;
    int enabled; /* a terminal; else every call does nothing */
    int shown;   /* a bar is on the line now */
    char label[48];
    long total;
    double t_begin, t_drawn;
    double line_every, t_line; /* not a terminal: seconds between lines (0: none), the last */
} rt_progress;

void rt_progress_init(rt_progress *p, FILE *f);
/* Not a terminal: a line `PREFIX: progress: ...` on stderr through rt_log
 * (runtime/log.h) every `seconds` (0: none). */
void rt_progress_lines(rt_progress *p, double seconds);
void rt_progress_begin(rt_progress *p, const char *label, long total);
/* done of total units (steps or batches); img_s and loss as shown (loss
 * NAN: left out). Redraws when 0.1 s have passed or the work is done. */
void rt_progress_update(rt_progress *p, long done, double img_s, double loss);
/* Erases the bar, if one is shown. */
void rt_progress_clear(rt_progress *p);

/* The bar's text for a terminal `width` columns wide, without control
 * characters (exposed for tests). */
void rt_progress_format(char *buf, size_t len, int width, const char *label, long done, long total,
                        double img_s, double loss, double elapsed);

#endif
