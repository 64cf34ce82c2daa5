/* tests/unit/test_parse.c — whole-string numbers (base/parse.h). */
#include <math.h>
#include <stdint.h>

#include "base/parse.h"
#include "tests/harness.h"

TEST(integers) {
    int64_t i = 7;
    CHECK(base_parse_i64("42", &i) == 0 && i == 42);
    CHECK(base_parse_i64("-9223372036854775808", &i) == 0 && i == INT64_MIN);
    CHECK(base_parse_i64("9223372036854775807", &i) == 0 && i == INT64_MAX);
    i = 7;
    CHECK(base_parse_i64("9223372036854775808", &i) == -1); /* overflow */
    CHECK(base_parse_i64("", &i) == -1);
    CHECK(base_parse_i64("12x", &i) == -1);
    CHECK(base_parse_i64("1.5", &i) == -1);
    CHECK(base_parse_i64("3 ", &i) == -1);
    /* nothing before the number: strtoll would skip the space and take the '+' */
    CHECK(base_parse_i64(" 3", &i) == -1);
    CHECK(base_parse_i64("\t3", &i) == -1);
    CHECK(base_parse_i64("+3", &i) == -1);
    CHECK(base_parse_i64("\n-3", &i) == -1);
    CHECK(i == 7); /* untouched on failure */

    uint64_t u = 7;
    CHECK(base_parse_u64("18446744073709551615", &u) == 0 && u == UINT64_MAX);
    u = 7;
    CHECK(base_parse_u64("18446744073709551616", &u) == -1);
    CHECK(base_parse_u64("-1", &u) == -1); /* strtoull alone would wrap it */
    CHECK(base_parse_u64(" -1", &u) == -1);
    CHECK(base_parse_u64("", &u) == -1);
    CHECK(base_parse_u64("5k", &u) == -1);
    CHECK(base_parse_u64("+5", &u) == -1);
    CHECK(base_parse_u64(" 5", &u) == -1);
    CHECK(u == 7);
}

TEST(reals) {
    double d = 7;
    CHECK(base_parse_f64("0.25", &d) == 0 && d == 0.25);
    CHECK(base_parse_f64("0x1.8p+1", &d) == 0 && d == 3); /* as checkpoints write them */
    CHECK(base_parse_f64("nan", &d) == 0 && isnan(d));
    CHECK(base_parse_f64("-inf", &d) == 0 && isinf(d) && d < 0);
    CHECK(base_parse_f64("1e-310", &d) == 0 && d > 0 && d < 1e-300); /* subnormal: kept */
    d = 7;
    CHECK(base_parse_f64("1e400", &d) == -1); /* too large for a double */
    CHECK(base_parse_f64("", &d) == -1);
    CHECK(base_parse_f64("1.5e", &d) == -1);
    CHECK(base_parse_f64("2 MiB", &d) == -1);
    CHECK(base_parse_f64(" 0.5", &d) == -1);
    CHECK(base_parse_f64("+0.5", &d) == -1);
    CHECK(d == 7);
}

TEST(sizes) {
    CHECK(base_parse_size("1000000") == 1000000);
    CHECK(base_parse_size("8G") == 8ll << 30);
    CHECK(base_parse_size("1.5 GiB") == 3ll << 29);
    CHECK(base_parse_size("512m") == 512ll << 20);
    CHECK(base_parse_size("") == -1);
    CHECK(base_parse_size("0") == -1);
    CHECK(base_parse_size("-1G") == -1);
    CHECK(base_parse_size("8X") == -1);
    CHECK(base_parse_size(" 8G") == -1);
    CHECK(base_parse_size("+8G") == -1);
    CHECK(base_parse_size("\t512m") == -1);
}

int main(void) {
    RUN(integers);
    RUN(reals);
    RUN(sizes);
    return harness_done();
}
