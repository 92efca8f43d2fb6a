/* units.h - parsing and printing of the quantities that appear in INI files
 * and reports: counts ("7.5e9"), sizes ("80GiB"), rates ("3.35TB/s"),
 * latencies ("5us"), booleans and plain reals.
 *
 * Parsers are pure: they take the whole text of a value, accept surrounding
 * blanks, and return 0 with the result or a negative VS_EINPUT code with a
 * short reason in *why (a static string) and the output untouched. */
#ifndef VS_UNITS_H
#define VS_UNITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A non-negative integer; accepts "32", "7.5e9", "1e3". Rejects fractions. */
int vs_parse_count(const char *text, uint64_t *out, const char **why);

/* The *why of a count or size past 64 bits (the caller may say its own
 * bound instead). */
extern const char vs_parse_too_large[];

/* Bytes: a number with its unit B, KB, MB, GB, TB (powers of 1000) or KiB,
 * MiB, GiB, TiB (powers of 1024); the prefix in any case, the B a capital
 * (a lowercase b is bits, refused with the fix). A bare number is refused
 * ("80" was once 80 bytes where 80 GB was meant), except 0. */
int vs_parse_size(const char *text, uint64_t *out, const char **why);

/* Bytes per second: a number with GB/s, TB/s, MB/s, GiB/s, MiB/s, or in
 * bits Gb/s, Tb/s, Mb/s, Gbit/s, Gbps (400Gb/s is 50 GB/s); the prefix in
 * any case, b/B exact: a lowercase b is bits; a bare number means GB/s
 * (1e9 B/s), as the README documents. */
int vs_parse_rate(const char *text, double *out, const char **why);

/* Seconds: a number with ns, us, ms or s; a bare number means microseconds. */
int vs_parse_latency(const char *text, double *out, const char **why);

/* A time in the units of vs_parse_latency that may be negative: the
 * intercept of a piece of a calibrated curve past its first breakpoint
 * (the line through that piece, extended back to 0 bytes). */
int vs_parse_time_offset(const char *text, double *out, const char **why);

/* true/false, yes/no, on/off, 1/0 (case-insensitive). */
int vs_parse_bool(const char *text, bool *out, const char **why);

/* A finite real number. */
int vs_parse_real(const char *text, double *out, const char **why);

/* Writes bytes in binary units with three significant digits ("13.5 GiB")
 * into buf; returns buf. */
char *vs_format_bytes(uint64_t bytes, char *buf, size_t len);

/* Writes a and b (each into a buffer of len, at least VS_BYTES_PAIR_LEN)
 * as vs_format_bytes does, or, where the two would read the same but
 * differ ("44.4 GiB of 44.4 GiB"), both in the larger's unit with the
 * fewest decimals (3 to 6) that tell them apart, else in bytes. */
#define VS_BYTES_PAIR_LEN 32
void vs_format_bytes_pair(uint64_t a, uint64_t b, char *abuf, char *bbuf,
                          size_t len);

/* Writes seconds in the unit that suits them ("412 ms", "3.21 s"). */
char *vs_format_seconds(double seconds, char *buf, size_t len);

/* Checked arithmetic on byte counts: returns false on overflow. */
bool vs_add_bytes(uint64_t a, uint64_t b, uint64_t *out);
bool vs_mul_bytes(uint64_t a, uint64_t b, uint64_t *out);

/* ceil(a / b) for b > 0. */
static inline uint64_t vs_div_ceil(uint64_t a, uint64_t b)
{
  return a / b + (a % b != 0);
}

#endif
