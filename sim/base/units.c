/* units.c - quantity parsers and formatters (see units.h). */
#include "units.h"

#include "error.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct unit {
  const char *suffix; /* matched case-insensitively, except its last
                         letter when that is b or B: B is bytes and b bits,
                         in every unit ("25MB" = "25mB" bytes, "25Mb" and
                         "25mb" bits), as network rates are written */
  double scale;       /* multiplier to the base unit; 0: bits, which are
                         not a size */
} unit;

/* A table with "" takes a bare number in that unit: only rates (GB/s) and
 * latencies (us), as the README documents; a size needs its unit. */

static const unit size_units[] = {
    {"B", 1.0},          {"KB", 1e3},
    {"MB", 1e6},         {"GB", 1e9},
    {"TB", 1e12},        {"KiB", 1024.0},
    {"MiB", 1048576.0},  {"GiB", 1073741824.0},
    {"TiB", 1099511627776.0},
    {"b", 0.0},  {"Kb", 0.0}, {"Mb", 0.0},
    {"Gb", 0.0}, {"Tb", 0.0}, {"Kib", 0.0},
    {"Mib", 0.0}, {"Gib", 0.0}, {"Tib", 0.0},
    {NULL, 0},
};

static const unit rate_units[] = {
    {"", 1e9},              {"GB/s", 1e9},
    {"TB/s", 1e12},         {"MB/s", 1e6},
    {"GiB/s", 1073741824.0}, {"MiB/s", 1048576.0},
    /* network rates are often written in bits: 400 Gb/s = 50 GB/s */
    {"Gb/s", 1e9 / 8},      {"Tb/s", 1e12 / 8},
    {"Mb/s", 1e6 / 8},      {"Gbit/s", 1e9 / 8},
    {"Tbit/s", 1e12 / 8},   {"Mbit/s", 1e6 / 8},
    {"Gbps", 1e9 / 8},      {"Tbps", 1e12 / 8},
    {"Mbps", 1e6 / 8},
    {NULL, 0},
};

static const unit latency_units[] = {
    {"", 1e-6}, {"us", 1e-6}, {"ns", 1e-9},
    {"ms", 1e-3}, {"s", 1.0}, {NULL, 0},
};

/* What each table's unknown unit is told (the units it takes). */
static const char unknown_size[] =
    "unknown unit: a size takes B, KB, MB, GB, TB, KiB, MiB, GiB or TiB";
static const char unknown_rate[] =
    "unknown unit: a rate takes GB/s, TB/s, MB/s, GiB/s or MiB/s, or bits "
    "as Gb/s, Tb/s, Mb/s (Gbit/s, Gbps); a bare number is GB/s";
static const char unknown_time[] =
    "unknown unit: a time takes ns, us, ms or s; a bare number is us";
static const char unknown_plain[] = "unknown unit: a plain number takes none";

/* Whether text, after a sign, starts as a number written in digits
 * ("1e309", "-.5"), not as a word strtod also reads ("inf", "nan"). */
static bool starts_with_digits(const char *text)
{
  text += *text == '+' || *text == '-';
  return isdigit((unsigned char)*text) || *text == '.';
}

static const char bare_size[] =
    "a size needs its unit: e.g. 80GB or 80GiB (bytes: 80B)";

/* Whether suffix names unit u: letters compared without case, but a b or
 * B (bits or bytes) compared exactly wherever it stands before "/", "ps"
 * or the end ("Gb/s", "GiB"). */
static bool same_unit(const char *u, const char *suffix)
{
  size_t n = strlen(u);
  if (strlen(suffix) != n)
    return false;
  for (size_t i = 0; i < n; i++) {
    bool bit_or_byte = (u[i] == 'b' || u[i] == 'B') &&
                       (u[i + 1] == '\0' || u[i + 1] == '/' || u[i + 1] == 'p');
    if (bit_or_byte ? u[i] != suffix[i]
                    : tolower((unsigned char)u[i]) !=
                          tolower((unsigned char)suffix[i]))
      return false;
  }
  return true;
}

/* Splits text into a finite number and a suffix, then scales the number by
 * the suffix's unit. Blanks may surround both parts. */
static int parse_scaled(const char *text, const unit *units,
                        const char *unknown, double *out, const char **why)
{
  char *end;
  double value;
  char suffix[16];
  size_t n = 0;

  if (!text) {
    *why = "no value";
    return VS_EINPUT;
  }
  while (isspace((unsigned char)*text))
    text++;
  if (*text == '\0') {
    *why = "empty value";
    return VS_EINPUT;
  }
  value = strtod(text, &end);
  if (strpbrk(text, "xX") && strpbrk(text, "xX") < end) { /* strtod reads hex */
    *why = "not a decimal number";
    return VS_EINPUT;
  }
  /* digits past a double (1e309), unlike "inf", are a number: the largest
   * double of their sign, which each kind's bounds then judge */
  if (end != text && isinf(value) && starts_with_digits(text))
    value = copysign(DBL_MAX, value);
  if (end == text || !isfinite(value)) {
    *why = "not a number";
    return VS_EINPUT;
  }
  while (isspace((unsigned char)*end))
    end++;
  while (*end && !isspace((unsigned char)*end) && n + 1 < sizeof suffix)
    suffix[n++] = *end++;
  suffix[n] = '\0';
  while (isspace((unsigned char)*end))
    end++;
  if (*end != '\0') {
    *why = "unexpected text after the value";
    return VS_EINPUT;
  }
  for (const unit *u = units; u->suffix; u++) {
    if (same_unit(u->suffix, suffix)) {
      if (u->scale == 0) {
        *why = "a lowercase b is bits, which are not a size: write B for "
               "bytes (GB or GiB)";
        return VS_EINPUT;
      }
      if (!isfinite(value * u->scale)) {
        *why = "out of range";
        return VS_EINPUT;
      }
      *out = value * u->scale;
      return 0;
    }
  }
  *why = suffix[0] ? unknown : bare_size;
  return VS_EINPUT;
}

const char vs_parse_too_large[] = "too large";

/* Converts a non-negative whole real to uint64_t. */
static int to_count(double value, uint64_t *out, const char **why)
{
  if (value < 0) {
    *why = "must not be negative";
    return VS_EINPUT;
  }
  if (value >= 18446744073709551616.0) {
    *why = vs_parse_too_large;
    return VS_EINPUT;
  }
  if (value != floor(value)) {
    *why = "must be a whole number";
    return VS_EINPUT;
  }
  *out = (uint64_t)value;
  return 0;
}

int vs_parse_count(const char *text, uint64_t *out, const char **why)
{
  static const unit plain[] = {{"", 1.0}, {NULL, 0}};
  double value;
  int rc = parse_scaled(text, plain, unknown_plain, &value, why);
  return rc ? rc : to_count(value, out, why);
}

int vs_parse_size(const char *text, uint64_t *out, const char **why)
{
  double value;
  int rc = parse_scaled(text, size_units, unknown_size, &value, why);
  if (rc && *why == bare_size && strtod(text, NULL) == 0) {
    *out = 0; /* nothing is nothing in any unit */
    return 0;
  }
  if (rc)
    return rc;
  /* "1.5KiB" is 1536 bytes; a size that lands between bytes rounds up.
   * A negative size stays negative (ceil(-0.5) would be 0). */
  return to_count(value < 0 ? value : ceil(value), out, why);
}

int vs_parse_rate(const char *text, double *out, const char **why)
{
  double value;
  int rc = parse_scaled(text, rate_units, unknown_rate, &value, why);
  if (rc)
    return rc;
  if (value < 0) {
    *why = "must not be negative";
    return VS_EINPUT;
  }
  *out = value;
  return 0;
}

int vs_parse_latency(const char *text, double *out, const char **why)
{
  double value;
  int rc = vs_parse_time_offset(text, &value, why);
  if (rc)
    return rc;
  if (value < 0) {
    *why = "must not be negative";
    return VS_EINPUT;
  }
  *out = value;
  return 0;
}

int vs_parse_time_offset(const char *text, double *out, const char **why)
{
  return parse_scaled(text, latency_units, unknown_time, out, why);
}

int vs_parse_real(const char *text, double *out, const char **why)
{
  static const unit plain[] = {{"", 1.0}, {NULL, 0}};
  return parse_scaled(text, plain, unknown_plain, out, why);
}

int vs_parse_bool(const char *text, bool *out, const char **why)
{
  static const char *const truths[] = {"true", "yes", "on", "1"};
  static const char *const lies[] = {"false", "no", "off", "0"};
  char word[8];
  size_t n = 0;

  if (!text) {
    *why = "no value";
    return VS_EINPUT;
  }
  while (isspace((unsigned char)*text))
    text++;
  while (*text && !isspace((unsigned char)*text) && n + 1 < sizeof word)
    word[n++] = *text++;
  word[n] = '\0';
  while (isspace((unsigned char)*text))
    text++;
  if (*text == '\0') {
    for (size_t i = 0; i < 4; i++) {
      if (strcasecmp(word, truths[i]) == 0) {
        *out = true;
        return 0;
      }
      if (strcasecmp(word, lies[i]) == 0) {
        *out = false;
        return 0;
      }
    }
  }
  *why = "expected true or false (or yes/no, on/off, 1/0)";
  return VS_EINPUT;
}

static const char *const byte_units[] = {"B", "KiB", "MiB", "GiB", "TiB",
                                         "PiB"};

/* The binary unit bytes are written in (an index into byte_units): the
 * largest in which they are under 1023.5, so that 1023.9 KiB, which would
 * round to "1024 KiB", is "1.00 MiB". Its size in *scale. */
static size_t byte_unit(uint64_t bytes, double *scale)
{
  size_t i = 0;
  *scale = 1.0;
  while ((double)bytes / *scale >= 1023.5 &&
         i + 1 < sizeof byte_units / sizeof byte_units[0]) {
    *scale *= 1024.0;
    i++;
  }
  return i;
}

char *vs_format_bytes(uint64_t bytes, char *buf, size_t len)
{
  double scale;
  size_t i = byte_unit(bytes, &scale);
  double value = (double)bytes / scale;
  if (i == 0)
    snprintf(buf, len, "%llu B", (unsigned long long)bytes);
  else if (value >= 99.95)
    snprintf(buf, len, "%.0f %s", value, byte_units[i]);
  else if (value >= 9.995)
    snprintf(buf, len, "%.1f %s", value, byte_units[i]);
  else
    snprintf(buf, len, "%.2f %s", value, byte_units[i]);
  return buf;
}

void vs_format_bytes_pair(uint64_t a, uint64_t b, char *abuf, char *bbuf,
                          size_t len)
{
  double scale;
  size_t i = byte_unit(a > b ? a : b, &scale);
  vs_format_bytes(a, abuf, len);
  vs_format_bytes(b, bbuf, len);
  if (a == b || strcmp(abuf, bbuf) != 0)
    return;
  for (int decimals = 3; decimals <= 6; decimals++) {
    snprintf(abuf, len, "%.*f %s", decimals, (double)a / scale, byte_units[i]);
    snprintf(bbuf, len, "%.*f %s", decimals, (double)b / scale, byte_units[i]);
    if (strcmp(abuf, bbuf) != 0)
      return;
  }
  snprintf(abuf, len, "%llu B", (unsigned long long)a);
  snprintf(bbuf, len, "%llu B", (unsigned long long)b);
}

char *vs_format_seconds(double seconds, char *buf, size_t len)
{
  /* Thresholds sit where %.3g would round up into the next unit. */
  if (seconds >= 999.5)
    snprintf(buf, len, "%.0f s", seconds);
  else if (seconds >= 0.9995)
    snprintf(buf, len, "%.3g s", seconds);
  else if (seconds >= 0.9995e-3)
    snprintf(buf, len, "%.3g ms", seconds * 1e3);
  else
    snprintf(buf, len, "%.3g us", seconds * 1e6);
  return buf;
}

bool vs_add_bytes(uint64_t a, uint64_t b, uint64_t *out)
{
  return !__builtin_add_overflow(a, b, out);
}

bool vs_mul_bytes(uint64_t a, uint64_t b, uint64_t *out)
{
  return !__builtin_mul_overflow(a, b, out);
}
