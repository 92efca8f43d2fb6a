/* units_test.c - the quantity parsers and formatters of units.h: every
 * suffix, blanks, the failure reasons, and that a failure leaves the output
 * untouched. */
#include "testutil.h"

#include "units.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* A value no parser produces, to see that failures leave the output alone. */
#define SENTINEL_U 0xdeadbeefull
#define SENTINEL_D -12345.0

/* Asserts |got - want| <= 1e-12 * |want| (or 1e-300 when want is 0). */
static void assert_near(double got, double want)
{
  double tol = want == 0 ? 1e-300 : 1e-12 * fabs(want);
  if (!(fabs(got - want) <= tol))
    fail_msg("got %.17g, want %.17g", got, want);
}

/* Parses text as a count and returns the value (fails the test on error). */
static uint64_t count_ok(const char *text)
{
  uint64_t v = SENTINEL_U;
  const char *why = NULL;
  int rc = vs_parse_count(text, &v, &why);
  if (rc != 0)
    fail_msg("vs_parse_count(\"%s\"): %s", text, why ? why : "?");
  return v;
}

/* Expects vs_parse_count(text) to fail with a reason containing want. */
static void count_bad(const char *text, const char *want)
{
  uint64_t v = SENTINEL_U;
  const char *why = NULL;
  assert_int_equal(vs_parse_count(text, &v, &why), VS_EINPUT);
  assert_non_null(why);
  if (!strstr(why, want))
    fail_msg("vs_parse_count(\"%s\"): reason \"%s\" lacks \"%s\"", text, why,
             want);
  assert_true(v == SENTINEL_U); /* output untouched on error */
}

static uint64_t size_ok(const char *text)
{
  uint64_t v = SENTINEL_U;
  const char *why = NULL;
  if (vs_parse_size(text, &v, &why) != 0)
    fail_msg("vs_parse_size(\"%s\"): %s", text, why ? why : "?");
  return v;
}

static void size_bad(const char *text, const char *want)
{
  uint64_t v = SENTINEL_U;
  const char *why = NULL;
  assert_int_equal(vs_parse_size(text, &v, &why), VS_EINPUT);
  assert_non_null(why);
  if (!strstr(why, want))
    fail_msg("vs_parse_size(\"%s\"): reason \"%s\" lacks \"%s\"", text, why,
             want);
  assert_true(v == SENTINEL_U);
}

/* Shared by rate, latency and real: which parser is passed in. */
typedef int (*real_parser)(const char *, double *, const char **);

static double real_ok(real_parser parse, const char *text)
{
  double v = SENTINEL_D;
  const char *why = NULL;
  if (parse(text, &v, &why) != 0)
    fail_msg("parse(\"%s\"): %s", text, why ? why : "?");
  return v;
}

static void real_bad(real_parser parse, const char *text, const char *want)
{
  double v = SENTINEL_D;
  const char *why = NULL;
  assert_int_equal(parse(text, &v, &why), VS_EINPUT);
  assert_non_null(why);
  if (!strstr(why, want))
    fail_msg("parse(\"%s\"): reason \"%s\" lacks \"%s\"", text, why, want);
  assert_true(v == SENTINEL_D);
}

/* ------------------------------------------------------------------------
 * Counts
 * ------------------------------------------------------------------------ */

static void test_count_accepts_integers_and_exponents(void **state)
{
  (void)state;
  assert_true(count_ok("32") == 32);
  assert_true(count_ok("0") == 0);
  /* 7.5e9 = 7,500,000,000 (the DESIGN example); exact in a double. */
  assert_true(count_ok("7.5e9") == 7500000000ull);
  assert_true(count_ok("1e3") == 1000);
  assert_true(count_ok("1E3") == 1000);
  /* 2^53 is the largest power of two whose neighbours are exact doubles. */
  assert_true(count_ok("9007199254740992") == 9007199254740992ull);
  /* Blanks around the number are allowed (units.h: "accept surrounding
   * blanks"). */
  assert_true(count_ok("  12\t") == 12);
  /* "2.0" is a whole number even though written with a fraction. */
  assert_true(count_ok("2.0") == 2);
}

static void test_count_rejects_bad_text(void **state)
{
  (void)state;
  count_bad("", "empty value");
  count_bad("   ", "empty value");
  count_bad(NULL, "no value");
  count_bad("abc", "not a number");
  count_bad("inf", "not a number");     /* not finite */
  count_bad("nan", "not a number");     /* not finite */
  /* digits past a double are a number (the largest double), judged as
   * any other, not no number; "inf" is none */
  count_bad("1e309", "too large");
  count_bad("-1e309", "negative");
  count_bad("-inf", "not a number");
  count_bad("0x1p2000", "not a decimal number");
  count_bad("1.5", "whole number");
  count_bad("-3", "negative");
  /* A second word is read as the unit; a third is left over. */
  count_bad("12 34", "unknown unit");
  count_bad("12 x y", "unexpected text");
  /* Counts take no unit, so "32GiB" is a unit error. */
  count_bad("32GiB", "unknown unit");
  count_bad("12x", "unknown unit");
  /* 2^64 = 18446744073709551616 does not fit a uint64_t. */
  count_bad("18446744073709551616", "too large");
  count_bad("1e30", "too large");
  /* strtod reads hexadecimal; a count is written in decimal */
  count_bad("0x10", "not a decimal number");
  count_bad("0X1p4", "not a decimal number");
}

/* ------------------------------------------------------------------------
 * Sizes
 * ------------------------------------------------------------------------ */

static void test_size_suffixes(void **state)
{
  (void)state;
  assert_true(size_ok("512B") == 512);
  assert_true(size_ok("0") == 0); /* nothing needs no unit */
  assert_true(size_ok("1KB") == 1000);        /* decimal: 10^3 */
  assert_true(size_ok("50GB") == 50000000000ull);   /* 50 * 10^9 */
  assert_true(size_ok("2TB") == 2000000000000ull);  /* 2 * 10^12 */
  assert_true(size_ok("3MB") == 3000000ull);        /* 3 * 10^6 */
  assert_true(size_ok("1KiB") == 1024);       /* binary: 2^10 */
  assert_true(size_ok("512MiB") == 512ull << 20);   /* 512 * 2^20 */
  assert_true(size_ok("80GiB") == 80ull << 30);     /* 80 * 2^30 */
  assert_true(size_ok("2TiB") == 2ull << 40);       /* 2 * 2^40 */
  /* The prefix's letters take any case, and may follow a blank; the B
   * (bytes) must be a capital, as a lowercase b is bits everywhere
   * (issue 18: 25MB, 25mB and 25Mb cannot mean three things). */
  assert_true(size_ok("80gIB") == 80ull << 30);
  assert_true(size_ok("80 GiB") == 80ull << 30);
  assert_true(size_ok(" 1 kB ") == 1000);
  assert_true(size_ok("25mB") == size_ok("25MB"));
  /* 1.5KiB = 1.5 * 1024 = 1536 bytes (units.c comment). */
  assert_true(size_ok("1.5KiB") == 1536);
  /* A size between bytes rounds up: 0.5 B -> 1 B, 1.0001 KB = 1000.1 -> 1001. */
  assert_true(size_ok("0.5B") == 1);
  assert_true(size_ok("1.0001KB") == 1001);
  /* The H100 file's memory: 81089MiB = 81089 * 2^20 = 85027979264 bytes. */
  assert_true(size_ok("81089MiB") == 85027979264ull);
}

static void test_size_rejects_bad_text(void **state)
{
  (void)state;
  size_bad("", "empty value");
  size_bad(NULL, "no value");
  size_bad("GiB", "not a number");
  size_bad("80GiBs", "unknown unit");
  size_bad("80 G", "unknown unit");
  /* an unknown unit is told the ones the kind of value takes */
  size_bad("80G", "unknown unit: a size takes B, KB, MB, GB, TB, KiB, MiB, "
                  "GiB or TiB");
  count_bad("32GiB", "unknown unit: a plain number takes none");
  size_bad("3GB/s", "unknown unit"); /* a rate is not a size */
  size_bad("80 GiB x", "unexpected text");
  size_bad("-1GiB", "negative");
  /* -0.5 bytes is negative too; it must not round up to a size of 0. */
  size_bad("-0.5B", "negative");
  /* 2^64 bytes = 16 EiB = 16777216 TiB does not fit a uint64_t. */
  size_bad("16777216TiB", "too large");
  /* A lowercase b is bits, as in a rate (Gb/s); as a size it is refused,
   * in any case of the prefix, with the fix */
  size_bad("8Gb", "bits, which are not a size: write B for bytes");
  size_bad("512 Mb", "bits, which are not a size");
  size_bad("25mb", "bits, which are not a size");
  size_bad("80gib", "bits, which are not a size");
  size_bad("1 kb", "bits, which are not a size");
  /* A size without its unit is refused (issue 18: memory = 80 was 80
   * bytes and a verdict of "189160488960%"), with the fix */
  size_bad("80", "a size needs its unit: e.g. 80GB or 80GiB");
  size_bad("0.5", "a size needs its unit");
}

/* ------------------------------------------------------------------------
 * Rates, latencies, reals
 * ------------------------------------------------------------------------ */

static void test_rate_suffixes(void **state)
{
  (void)state;
  /* A bare number means GB/s: 25 -> 25 * 10^9 B/s (units.h). */
  assert_near(real_ok(vs_parse_rate, "25"), 25e9);
  assert_near(real_ok(vs_parse_rate, "3350GB/s"), 3.35e12); /* 3350 * 10^9 */
  assert_near(real_ok(vs_parse_rate, "3.35TB/s"), 3.35e12); /* 3.35 * 10^12 */
  assert_near(real_ok(vs_parse_rate, "500MB/s"), 5e8);      /* 500 * 10^6 */
  assert_near(real_ok(vs_parse_rate, "1GiB/s"), 1073741824.0); /* 2^30 */
  assert_near(real_ok(vs_parse_rate, "1MiB/s"), 1048576.0);    /* 2^20 */
  assert_near(real_ok(vs_parse_rate, " 6.25 gB/s "), 6.25e9);
  assert_near(real_ok(vs_parse_rate, "3.35tB/s"), 3.35e12);
  assert_near(real_ok(vs_parse_rate, "0"), 0.0);
  /* Network rates in bits, as NIC datasheets write them: 400 Gb/s is
   * 400e9 / 8 = 50e9 B/s (one ConnectX-7 NDR port); 100 Mb/s = 12.5e6 B/s. */
  assert_near(real_ok(vs_parse_rate, "400Gb/s"), 50e9);
  assert_near(real_ok(vs_parse_rate, "400 Gbit/s"), 50e9);
  assert_near(real_ok(vs_parse_rate, "400Gbps"), 50e9);
  assert_near(real_ok(vs_parse_rate, "1.6Tb/s"), 200e9);
  assert_near(real_ok(vs_parse_rate, "100Mb/s"), 12.5e6);
  /* ...in any case of the prefix: a lowercase b is bits everywhere */
  assert_near(real_ok(vs_parse_rate, " 6.25 gb/s "), 6.25e9 / 8);
  assert_near(real_ok(vs_parse_rate, "400gbps"), 50e9);
  assert_near(real_ok(vs_parse_rate, "400 GBIT/s"), 50e9);
}

static void test_rate_rejects_bad_text(void **state)
{
  (void)state;
  real_bad(vs_parse_rate, "", "empty value");
  real_bad(vs_parse_rate, "fast", "not a number");
  real_bad(vs_parse_rate, "3GB", "unknown unit"); /* a size is not a rate */
  real_bad(vs_parse_rate, "-1GB/s", "negative");
  /* finite as written, infinite once scaled: 1e300 * 10^12 */
  real_bad(vs_parse_rate, "1e300TB/s", "out of range");
}

static void test_latency_suffixes(void **state)
{
  (void)state;
  /* A bare number means microseconds: 5 -> 5e-6 s (units.h). */
  assert_near(real_ok(vs_parse_latency, "5"), 5e-6);
  assert_near(real_ok(vs_parse_latency, "3us"), 3e-6);
  assert_near(real_ok(vs_parse_latency, "250ns"), 250e-9);
  assert_near(real_ok(vs_parse_latency, "1.5ms"), 1.5e-3);
  assert_near(real_ok(vs_parse_latency, "2s"), 2.0);
  assert_near(real_ok(vs_parse_latency, "2 S"), 2.0);
}

static void test_latency_rejects_bad_text(void **state)
{
  (void)state;
  real_bad(vs_parse_latency, "", "empty value");
  real_bad(vs_parse_latency, "soon", "not a number");
  real_bad(vs_parse_latency, "3min", "unknown unit");
  real_bad(vs_parse_latency, "-2us", "negative");
}

static void test_real(void **state)
{
  (void)state;
  assert_near(real_ok(vs_parse_real, "0.1"), 0.1);
  assert_near(real_ok(vs_parse_real, " -2.5 "), -2.5); /* reals may be < 0 */
  assert_near(real_ok(vs_parse_real, "1e-3"), 1e-3);
  real_bad(vs_parse_real, "", "empty value");
  real_bad(vs_parse_real, NULL, "no value");
  real_bad(vs_parse_real, "x", "not a number");
  real_bad(vs_parse_real, "inf", "not a number");
  assert_true(real_ok(vs_parse_real, "1e999") == DBL_MAX); /* past a double */
  real_bad(vs_parse_real, "0.5%", "unknown unit");
  real_bad(vs_parse_real, "0.5 0.6", "unknown unit"); /* "0.6" as a unit */
  real_bad(vs_parse_real, "0.5 0.6 0.7", "unexpected text");
}

/* ------------------------------------------------------------------------
 * Booleans
 * ------------------------------------------------------------------------ */

static bool bool_ok(const char *text)
{
  bool v = false;
  const char *why = NULL;
  if (vs_parse_bool(text, &v, &why) != 0)
    fail_msg("vs_parse_bool(\"%s\"): %s", text, why ? why : "?");
  return v;
}

static void bool_bad(const char *text)
{
  bool v = true;
  const char *why = NULL;
  assert_int_equal(vs_parse_bool(text, &v, &why), VS_EINPUT);
  assert_non_null(why);
  assert_non_null(strstr(why, "expected true or false"));
  assert_true(v); /* untouched */
}

static void test_bool_words(void **state)
{
  (void)state;
  /* units.h: true/false, yes/no, on/off, 1/0, case-insensitive. */
  assert_true(bool_ok("true"));
  assert_true(bool_ok("TRUE"));
  assert_true(bool_ok("Yes"));
  assert_true(bool_ok("on"));
  assert_true(bool_ok("1"));
  assert_true(bool_ok("  true  "));
  assert_false(bool_ok("false"));
  assert_false(bool_ok("No"));
  assert_false(bool_ok("OFF"));
  assert_false(bool_ok("0"));
}

static void test_bool_rejects_other_words(void **state)
{
  const char *why = NULL;
  bool v = true;
  (void)state;
  bool_bad("");
  bool_bad("maybe");
  bool_bad("2");
  bool_bad("t");
  bool_bad("true false");
  bool_bad("truest");
  bool_bad("truexxxxxxxxxxxx"); /* longer than the internal word buffer */
  assert_int_equal(vs_parse_bool(NULL, &v, &why), VS_EINPUT);
  assert_string_equal(why, "no value");
}

/* ------------------------------------------------------------------------
 * Formatting
 * ------------------------------------------------------------------------ */

/* Two sizes that read alike but differ are told apart ("needs 44.4 GiB of
 * 44.4 GiB" was fit's message for 44.38 of 44.41 GiB); others are as
 * vs_format_bytes writes them. */
static void test_format_bytes_pair(void **state)
{
  char a[VS_BYTES_PAIR_LEN], b[VS_BYTES_PAIR_LEN];
  (void)state;
  vs_format_bytes_pair(47650000000ull, 47680000000ull, a, b, sizeof a);
  assert_string_equal(a, "44.378 GiB");
  assert_string_equal(b, "44.405 GiB");
  vs_format_bytes_pair(80ull << 30, 40ull << 30, a, b, sizeof a);
  assert_string_equal(a, "80.0 GiB");
  assert_string_equal(b, "40.0 GiB");
  vs_format_bytes_pair(5ull << 30, 5ull << 30, a, b, sizeof a);
  assert_string_equal(a, "5.00 GiB");
  assert_string_equal(b, "5.00 GiB");
  /* a byte apart: no decimals tell them, the bytes do */
  vs_format_bytes_pair(5ull << 30, (5ull << 30) + 1, a, b, sizeof a);
  assert_string_equal(a, "5368709120 B");
  assert_string_equal(b, "5368709121 B");
}

static void test_format_bytes(void **state)
{
  char buf[32];
  (void)state;
  assert_string_equal(vs_format_bytes(0, buf, sizeof buf), "0 B");
  assert_string_equal(vs_format_bytes(1023, buf, sizeof buf), "1023 B");
  /* 1024 = 1 KiB, shown with 3 significant digits. */
  assert_string_equal(vs_format_bytes(1024, buf, sizeof buf), "1.00 KiB");
  /* 13.5 GiB = 13.5 * 2^30 (the units.h example). */
  assert_string_equal(vs_format_bytes(14495514624ull, buf, sizeof buf),
                      "13.5 GiB");
  /* 80 * 2^30 = 80 GiB; 512 * 2^20 = 512 MiB. */
  assert_string_equal(vs_format_bytes(80ull << 30, buf, sizeof buf), "80.0 GiB");
  assert_string_equal(vs_format_bytes(512ull << 20, buf, sizeof buf), "512 MiB");
  /* 1.5 * 2^40 = 1.50 TiB; 2^50 = 1 PiB, the largest unit. */
  assert_string_equal(vs_format_bytes(3ull << 39, buf, sizeof buf), "1.50 TiB");
  assert_string_equal(vs_format_bytes(1ull << 50, buf, sizeof buf), "1.00 PiB");
  /* 2^64 - 1 is just under 16 EiB = 16384 PiB; PiB is the top unit. */
  assert_string_equal(vs_format_bytes(UINT64_MAX, buf, sizeof buf), "16384 PiB");
  /* 2^20 - 1 bytes is 1023.999 KiB, which rounds to 1.00 MiB, not "1024 KiB". */
  assert_string_equal(vs_format_bytes((1ull << 20) - 1, buf, sizeof buf),
                      "1.00 MiB");
  /* Three digits also across the 10 and 100 boundaries: 10235 B = 9.995 KiB
   * rounds to "10.0 KiB" (not "10.00"), 102350 B = 99.95 KiB to "100 KiB". */
  assert_string_equal(vs_format_bytes(10235, buf, sizeof buf), "10.0 KiB");
  assert_string_equal(vs_format_bytes(102350, buf, sizeof buf), "100 KiB");
  /* A short buffer is cut, never overrun: "13.5 GiB" -> "13.5". */
  assert_string_equal(vs_format_bytes(14495514624ull, buf, 5), "13.5");
}

static void test_format_seconds(void **state)
{
  char buf[32];
  (void)state;
  assert_string_equal(vs_format_seconds(3.21, buf, sizeof buf), "3.21 s");
  assert_string_equal(vs_format_seconds(0.412, buf, sizeof buf), "412 ms");
  assert_string_equal(vs_format_seconds(25e-6, buf, sizeof buf), "25 us");
  /* 0.9999 s rounds to 1 s at 3 digits, not "1e+03 ms". */
  assert_string_equal(vs_format_seconds(0.9999, buf, sizeof buf), "1 s");
  /* Long steps print whole seconds rather than "1.23e+03 s". */
  assert_string_equal(vs_format_seconds(1234.4, buf, sizeof buf), "1234 s");
}

/* ------------------------------------------------------------------------
 * Checked arithmetic
 * ------------------------------------------------------------------------ */

static void test_checked_add(void **state)
{
  uint64_t out = 7;
  (void)state;
  assert_true(vs_add_bytes(2, 3, &out));
  assert_true(out == 5);
  /* (2^64 - 2) + 1 = 2^64 - 1 still fits. */
  assert_true(vs_add_bytes(UINT64_MAX - 1, 1, &out));
  assert_true(out == UINT64_MAX);
  /* (2^64 - 1) + 1 = 2^64 overflows. */
  assert_false(vs_add_bytes(UINT64_MAX, 1, &out));
  assert_false(vs_add_bytes(1ull << 63, 1ull << 63, &out));
}

static void test_checked_mul(void **state)
{
  uint64_t out = 7;
  (void)state;
  assert_true(vs_mul_bytes(80, 1ull << 30, &out));
  assert_true(out == 80ull << 30);
  assert_true(vs_mul_bytes(0, UINT64_MAX, &out));
  assert_true(out == 0);
  /* 2^32 * (2^32 - 1) = 2^64 - 2^32 fits; 2^32 * 2^32 = 2^64 does not. */
  assert_true(vs_mul_bytes(1ull << 32, (1ull << 32) - 1, &out));
  assert_true(out == UINT64_MAX - ((1ull << 32) - 1));
  assert_false(vs_mul_bytes(1ull << 32, 1ull << 32, &out));
  assert_false(vs_mul_bytes(UINT64_MAX, 2, &out));
}

static void test_div_ceil(void **state)
{
  (void)state;
  assert_true(vs_div_ceil(10, 5) == 2);    /* exact */
  assert_true(vs_div_ceil(11, 5) == 3);    /* ceil(2.2) */
  assert_true(vs_div_ceil(0, 5) == 0);
  /* ceil((2^64 - 1) / 2) = 2^63, without overflowing a + b - 1. */
  assert_true(vs_div_ceil(UINT64_MAX, 2) == 1ull << 63);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_count_accepts_integers_and_exponents),
      cmocka_unit_test(test_count_rejects_bad_text),
      cmocka_unit_test(test_size_suffixes),
      cmocka_unit_test(test_size_rejects_bad_text),
      cmocka_unit_test(test_rate_suffixes),
      cmocka_unit_test(test_rate_rejects_bad_text),
      cmocka_unit_test(test_latency_suffixes),
      cmocka_unit_test(test_latency_rejects_bad_text),
      cmocka_unit_test(test_real),
      cmocka_unit_test(test_bool_words),
      cmocka_unit_test(test_bool_rejects_other_words),
      cmocka_unit_test(test_format_bytes),
      cmocka_unit_test(test_format_bytes_pair),
      cmocka_unit_test(test_format_seconds),
      cmocka_unit_test(test_checked_add),
      cmocka_unit_test(test_checked_mul),
      cmocka_unit_test(test_div_ceil),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
