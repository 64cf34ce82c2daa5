/* Tests for runtime/progress: the bar's text, and silence off a terminal. */
#include <math.h>

#include "runtime/train/progress.h"
#include "tests/harness.h"

TEST(format_fits_and_counts) {
    char buf[512];
    rt_progress_format(buf, sizeof buf, 80, "epoch 3", 97, 390, 2075.4, 1.23456, 60.0);
    CHECK_MSG(strlen(buf) <= 79, "%zu columns: %s", strlen(buf), buf);
    CHECK_MSG(strstr(buf, "epoch 3 [") == buf, "%s", buf);
    CHECK_MSG(strstr(buf, "]  97/390 |    2075 img/s | loss  1.2346 | eta  3:01") != NULL, "%s",
              buf);
    /* a quarter done: a quarter of the cells filled */
    const char *open = strchr(buf, '['), *close = strchr(buf, ']');
    int cells = (int)(close - open - 1), full = 0;
    for (const char *c = open + 1; c < close; c++) full += *c == '#';
    CHECK_MSG(cells >= 10 && full == (int)(cells * 97.0 / 390), "%d of %d: %s", full, cells, buf);
    /* same width whatever the numbers */
    char buf2[512];
    rt_progress_format(buf2, sizeof buf2, 80, "epoch 3", 390, 390, 12.0, 0.5, 600.0);
    CHECK_MSG(strlen(buf2) == strlen(buf), "%s | %s", buf, buf2);
    CHECK(strstr(buf2, "[########################################]") ||
          strchr(buf2, '.') > strchr(buf2, ']'));
    /* no loss (evaluation); long runs */
    rt_progress_format(buf, sizeof buf, 120, "test accuracy", 5, 100, 999.0, NAN, 7200.0);
    CHECK_MSG(strstr(buf, "loss") == NULL && strstr(buf, "eta 38:00:00"), "%s", buf);
    /* too narrow for a bar: the numbers alone */
    rt_progress_format(buf, sizeof buf, 40, "epoch 12", 5, 100, 10.0, 2.0, 1.0);
    CHECK_MSG(strchr(buf, '[') == NULL && strstr(buf, "5/100"), "%s", buf);
}

TEST(silent_off_a_terminal) {
    FILE *f = tmpfile();
    rt_progress p;
    rt_progress_init(&p, f);
    CHECK(!p.enabled);
    rt_progress_begin(&p, "epoch 0", 10);
    for (int i = 1; i <= 10; i++) rt_progress_update(&p, i, 100.0, 2.0);
    rt_progress_clear(&p);
    CHECK(ftell(f) == 0);
    fclose(f);
}

int main(void) {
    RUN(format_fits_and_counts);
    RUN(silent_off_a_terminal);
    return harness_done();
}
