/* base/parse.h — whole-string numbers: flags, environment variables and
 * metadata values, where "12x", "" or a value out of range is an error
 * rather than a prefix.
 *
 * Usage:
 *     int64_t n;
 *     if (base_parse_i64(arg, &n) || n < 1 || n > 4096)
 *         return base_fail(err, errlen, "--gpus: '%s' is not an integer in 1..4096", arg);
 *
 * Each returns 0 and sets *out only when all of s is one decimal number (as
 * strtoll/strtoull/strtod read it, but with nothing before it: no white
 * space, no sign '+') that fits the type; else -1 and *out is untouched. The caller adds its own range and
 * writes its own message.
 */
#ifndef DPC_BASE_PARSE_H
#define DPC_BASE_PARSE_H

#include <stdint.h>

/* A signed integer in int64_t's range. */
int base_parse_i64(const char *s, int64_t *out);
/* An unsigned integer in uint64_t's range; no sign '-' (strtoull would
 * wrap "-1" to 2^64-1). */
int base_parse_u64(const char *s, uint64_t *out);
/* A double, "inf" and "nan" included. A value too large for a double fails;
 * one too small for a normal double is kept as strtod rounds it. */
int base_parse_f64(const char *s, double *out);

/* A size as a user writes it: bytes ("1000000"), or a number with a unit
 * K, M, G, T (powers of 1024; "KiB", "MB" ... spelt either way, any case):
 * "8G", "1.5 GiB", "512m" (nothing before the number: no white space, no
 * '+'). -1 when malformed, zero or negative. */
int64_t base_parse_size(const char *s);

#endif
