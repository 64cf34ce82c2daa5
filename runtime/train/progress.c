/* runtime/train/progress.c — the terminal progress bar. */
#include "runtime/train/progress.h"

#include <math.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "runtime/log.h"

void rt_progress_init(rt_progress *p, FILE *f) {
    memset(p, 0, sizeof *p);
    p->f = f;
    p->enabled = f && isatty(fileno(f));
}

void rt_progress_lines(rt_progress *p, double seconds) {
    if (p->enabled) return;
    p->line_every = seconds;
    p->t_line = rt_now(); /* the first after `seconds` of the run, not of an epoch */
}

void rt_progress_begin(rt_progress *p, const char *label, long total) {
    snprintf(p->label, sizeof p->label, "%s", label);
    p->total = total;
    p->t_begin = rt_now();
    p->t_drawn = 0;
}

static int columns(FILE *f) {
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

/* m:ss or h:mm:ss. */
static void clock_str(char *buf, size_t len, double s) {
    long t = s > 0 && s < 1e8 ? (long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

void rt_progress_format(char *buf, size_t len, int width, const char *label, long done, long total,
                        double img_s, double loss, double elapsed) {
    /* Fixed-width fields, so the bar does not jitter as the numbers change. */
    char tail[160], eta[24], lossbuf[32] = "", tot[24];
    clock_str(eta, sizeof eta, done > 0 ? elapsed / (double)done * (double)(total - done) : 0);
    if (!isnan(loss)) snprintf(lossbuf, sizeof lossbuf, " | loss %7.4f", loss);
    int digits = snprintf(tot, sizeof tot, "%ld", total);
    snprintf(tail, sizeof tail, " %*ld/%s | %7.0f img/s%s | eta %5s", digits, done, tot, img_s,
             lossbuf, eta);
    /* The bar gets what is left of the line, between 10 and 40 cells;
     * one column stays free so the terminal never wraps. */
    int room = width - 1 - (int)strlen(label) - (int)strlen(tail) - 3;
    int cells = room > 40 ? 40 : room;
    if (cells < 10) {
        snprintf(buf, len, "%s%s", label, tail);
        return;
    }
    char bar[48];
    int full = total > 0 ? (int)((double)cells * (double)done / (double)total) : 0;
    if (full > cells) full = cells;
    for (int i = 0; i < cells; i++) bar[i] = i < full ? '#' : '.';
    bar[cells] = 0;
    snprintf(buf, len, "%s [%s]%s", label, bar, tail);
}

/* The line for a log: what the bar says, without the bar. */
static void log_line(rt_progress *p, double t, long done, double img_s, double loss) {
    if (t - p->t_line < p->line_every) return;
    p->t_line = t;
    char line[512];
    rt_progress_format(line, sizeof line, 0, p->label, done, p->total, img_s, loss, t - p->t_begin);
    rt_log(RT_LOG_INFO, "progress: %s", line);
}

void rt_progress_update(rt_progress *p, long done, double img_s, double loss) {
    if (!p->enabled) {
        if (p->line_every > 0 && p->f) log_line(p, rt_now(), done, img_s, loss);
        return;
    }
    double t = rt_now();
    if (done < p->total && t - p->t_drawn < 0.1) return;
    p->t_drawn = t;
    char line[512];
    rt_progress_format(line, sizeof line, columns(p->f), p->label, done, p->total, img_s, loss,
                       t - p->t_begin);
    /* Carriage return, the text, erase to the end of the line. */
    fprintf(p->f, "\r%s\033[K", line);
    fflush(p->f);
    p->shown = 1;
}

void rt_progress_clear(rt_progress *p) {
    if (!p->enabled || !p->shown) return;
    fputs("\r\033[K", p->f);
    fflush(p->f);
    p->shown = 0;
}
