/* config.c - INI loading through a key table (see config.h).
 *
 * inih does the parsing; this file feeds it one line at a time through a
 * reader that counts lines (so every message can name one), strips leading
 * blanks (so an indented key is a key, not an inih continuation line) and
 * rejects unknown [sections] as soon as it sees them. */
#include "config.h"

#include "infile.h"
#include "units.h"

#include <ini.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* State shared by the line reader and the key handler during one parse. */
typedef struct parse_ctx {
  const vs_keytab *tab;   /* keys allowed */
  void *target;           /* where values go */
  vs_origins *orig;       /* where they came from */
  vs_error *err;          /* first error */
  FILE *file;             /* source when reading a file, else NULL */
  const char *text;       /* source when reading a string: next char */
  int line;               /* 1-based number of the line last read */
  size_t bytes;           /* bytes read so far (file input) */
} parse_ctx;

/* No workload or topology file comes near this; a device or a wrong file
 * given by mistake (/dev/zero, a disk image) is refused instead of read on
 * and on. */
#define MAX_INI_BYTES (1u << 20)

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

int vs_conf_find(const vs_keytab *tab, const char *section, const char *name)
{
  for (size_t i = 0; i < tab->n_keys; i++) {
    if (strcmp(tab->keys[i].section, section) == 0 &&
        strcmp(tab->keys[i].name, name) == 0)
      return (int)i;
  }
  return -1;
}

static bool section_known(const vs_keytab *tab, const char *section)
{
  for (size_t i = 0; i < tab->n_keys; i++) {
    if (strcmp(tab->keys[i].section, section) == 0)
      return true;
  }
  return false;
}

/* "a, b, c" of every section's name, each once, in table order. */
static char *list_sections(const vs_keytab *tab, char *buf, size_t len)
{
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < tab->n_keys; i++) {
    const char *s = tab->keys[i].section;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; j++)
      seen = strcmp(tab->keys[j].section, s) == 0;
    if (!seen && used < len)
      used += (size_t)snprintf(buf + used, len - used, "%s[%s]",
                               used ? ", " : "", s);
  }
  return buf;
}

/* What ends a list of keys that buf had no room for. */
#define KEYS_CUT ", ... (`vsim keys` lists them all)"

/* "a, b, c" of the keys of one section; whole names only: when they do
 * not all fit, as many as do and KEYS_CUT ([calibration] has over a
 * hundred). len must exceed KEYS_CUT's length. */
static char *list_keys(const vs_keytab *tab, const char *section, char *buf,
                       size_t len)
{
  size_t used = 0, room = len - (sizeof KEYS_CUT - 1);
  buf[0] = '\0';
  for (size_t i = 0; i < tab->n_keys; i++) {
    if (strcmp(tab->keys[i].section, section) != 0)
      continue;
    if (!vs_conf_append_item(buf, room, &used, used ? ", " : "",
                             tab->keys[i].name, strlen(tab->keys[i].name))) {
      snprintf(buf + used, len - used, "%s", KEYS_CUT);
      break;
    }
  }
  return buf;
}

char *vs_conf_choices(const char *const *choices, char *buf, size_t len)
{
  size_t used = 0, n = 0;
  buf[0] = '\0';
  while (choices[n])
    n++;
  for (size_t i = 0; i < n && used < len; i++) {
    const char *sep = i == 0 ? "" : (i + 1 == n ? " or " : ", ");
    used += (size_t)snprintf(buf + used, len - used, "%s%s", sep, choices[i]);
  }
  return buf;
}

/* Prefix of every message about a value: "file:line: [sec] key = text" or
 * "--set sec.key=text". */
/* What a user types before section.key in --set for this file's keys:
 * "topology." for the topology, nothing for the workload. */
static const char *set_prefix(const vs_keytab *tab)
{
  return strcmp(tab->kind, "topology") == 0 ? "topology." : "";
}

static void where_text(const vs_keytab *tab, const char *source, int line,
                       const vs_key *k, const char *text, char *buf,
                       size_t len)
{
  if (line > 0)
    snprintf(buf, len, "%s:%d: [%s] %s = %s", source, line, k->section,
             k->name, text);
  else if (line == -2)
    snprintf(buf, len, "%s: [%s] %s = %s (the preset of %s)", source,
             k->section, k->name, text,
             tab->preset_from ? tab->preset_from : "another key");
  else if (line < 0)
    snprintf(buf, len, "%s: [%s] %s = %s (from the file of %s)", source,
             k->section, k->name, text,
             tab->derived_from ? tab->derived_from : "another key");
  else
    snprintf(buf, len, "%s %s%s.%s=%s", source, set_prefix(tab), k->section,
             k->name, text);
}

/* The key that `display` ("[section] name", the table's preset_from or
 * derived_from) names, as vs_conf_find; -1 when there is none. */
static int find_display(const vs_keytab *tab, const char *display)
{
  char section[64], name[64];
  if (!display || sscanf(display, "[%63[^]]] %63s", section, name) != 2)
    return -1;
  return vs_conf_find(tab, section, name);
}

/* Where key i's value `text`, which a preset (line -2) or a derived file
 * (line -1, from its field `why`, NULL for none) chose, came from: the
 * line (or the --set) of the key that chose it and that key's value;
 * false when that key has none to name. */
static bool chosen_where(const vs_keytab *tab, const vs_origins *orig, int i,
                         int line, const char *why, const char *text, char *buf,
                         size_t len)
{
  bool preset = line == -2;
  const char *display = preset ? tab->preset_from : tab->derived_from;
  const char *field = preset ? NULL : why;
  int from = find_display(tab, display);
  char by[160];
  const vs_origin *o;
  if (from < 0 || !orig->keys[from].set || orig->keys[from].line < 0)
    return false;
  o = &orig->keys[from];
  /* what chose it: "the preset of [training] framework = x", "from
   * field "n" of the file of [model] hf_config = y", "the type's default,
   * not in the file of ..." (no one field gave it); "its preset", "from
   * its file" after a --set that names the key */
  if (preset)
    snprintf(by, sizeof by, "%s", o->line > 0 ? "the preset of" : "its preset");
  else if (field)
    snprintf(by, sizeof by, "from field \"%s\" of %s", field,
             o->line > 0 ? "the file of" : "its file");
  else
    snprintf(by, sizeof by, "the type's default, not in %s",
             o->line > 0 ? "the file of" : "its file");
  if (o->line > 0)
    snprintf(buf, len, "%s:%d: [%s] %s = %s (%s %s = %s)", orig->file, o->line,
             tab->keys[i].section, tab->keys[i].name, text, by, display,
             o->text);
  else
    snprintf(buf, len, "--set %s%s.%s=%s: [%s] %s = %s (%s)", set_prefix(tab),
             tab->keys[from].section, tab->keys[from].name, o->text,
             tab->keys[i].section, tab->keys[i].name, text, by);
  return true;
}

char *vs_conf_where(const vs_keytab *tab, const vs_origins *orig,
                    const char *section, const char *name, char *buf,
                    size_t len)
{
  int i = vs_conf_find(tab, section, name);
  if (i >= 0 && orig->keys[i].set && orig->keys[i].line < 0 &&
      chosen_where(tab, orig, i, orig->keys[i].line, orig->keys[i].why,
                   orig->keys[i].text, buf, len))
    return buf;
  if (i < 0) {
    snprintf(buf, len, "[%s] %s", section, name);
  } else if (!orig->keys[i].set) {
    snprintf(buf, len, "%s: [%s] %s (default %s)", orig->file, section, name,
             tab->keys[i].default_doc ? tab->keys[i].default_doc : "derived");
  } else {
    where_text(tab, orig->keys[i].line != 0 ? orig->file : "--set",
               orig->keys[i].line, &tab->keys[i],
               orig->keys[i].text, buf, len);
  }
  return buf;
}

/* ------------------------------------------------------------------------
 * Storing one value
 * ------------------------------------------------------------------------ */

static char *size_text(uint64_t bytes, char *buf, size_t len);

/* Writes bound v in the unit the key's values are written in. */
static void bound_text(const vs_key *k, double v, char *buf, size_t len)
{
  if (k->type == VS_KEY_RATE || k->type == VS_KEY_RATES) {
    snprintf(buf, len, "%.15g GB/s", v / 1e9);
  } else if (k->type == VS_KEY_LATENCY || k->type == VS_KEY_LATENCIES) {
    snprintf(buf, len, "%.15g s", v);
  } else if (k->type == VS_KEY_SIZE) {
    size_text((uint64_t)v, buf, len);
  } else {
    snprintf(buf, len, "%.15g", v);
  }
}

/* Checks a number against the key's bounds; returns a reason or NULL. */
static const char *bounds_problem(const vs_key *k, double v, char *buf,
                                  size_t len)
{
  char bound[64];
  if (k->positive && !(v > 0)) {
    snprintf(buf, len, "must be greater than 0");
    return buf;
  }
  if (v < k->lo) {
    bound_text(k, k->lo, bound, sizeof bound);
    snprintf(buf, len, "must be at least %s", bound);
    return buf;
  }
  if (k->hi != 0 && v > k->hi) {
    bound_text(k, k->hi, bound, sizeof bound);
    snprintf(buf, len, "must be at most %s", bound);
    return buf;
  }
  return NULL;
}

/* What a list longer than its kind holds is told. */
#define STRING_OF(x) #x
#define STRING_OF_VALUE(x) STRING_OF(x)
#define TOO_MANY_COUNTS                                                        \
  "too many list items (at most " STRING_OF_VALUE(VS_LIST_MAX) ")"
#define TOO_MANY_REALS                                                         \
  "too many list items (at most " STRING_OF_VALUE(VS_REAL_LIST_MAX) ")"

/* Splits text at commas and parses each item with parse_item into
 * values[0..max) (elem bytes apart); *n gets the count. */
typedef int (*item_parser)(const char *text, void *out, const char **why);

static int parse_items(const char *text, item_parser parse_item, void *values,
                       size_t elem, size_t max, size_t *n_out,
                       const char **why)
{
  char item[64];
  size_t n = 0;
  const char *p = text;

  while (*p) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len >= sizeof item) {
      *why = "list item too long";
      return VS_EINPUT;
    }
    if (n == max) {
      *why = max == VS_LIST_MAX ? TOO_MANY_COUNTS : TOO_MANY_REALS;
      return VS_EINPUT;
    }
    memcpy(item, p, len);
    item[len] = '\0';
    if (parse_item(item, (char *)values + n * elem, why))
      return VS_EINPUT;
    n++;
    if (comma && comma[1 + strspn(comma + 1, " \t")] == '\0') {
      *why = "empty list item after the last comma";
      return VS_EINPUT;
    }
    p = comma ? comma + 1 : p + len;
  }
  if (n == 0) {
    *why = "empty list";
    return VS_EINPUT;
  }
  *n_out = n;
  return 0;
}

static int count_item(const char *t, void *out, const char **why)
{
  return vs_parse_count(t, out, why);
}

static int rate_item(const char *t, void *out, const char **why)
{
  return vs_parse_rate(t, out, why);
}

static int real_item(const char *t, void *out, const char **why)
{
  return vs_parse_real(t, out, why);
}

static int latency_item(const char *t, void *out, const char **why)
{
  return vs_parse_latency(t, out, why);
}

static int time_offset_item(const char *t, void *out, const char **why)
{
  return vs_parse_time_offset(t, out, why);
}

/* The error for a value that did not parse (why) or broke a bound (bad),
 * or 0 when it did neither. */
static int value_error(int rc, const char *why, const char *bad,
                       const char *where, vs_error *err)
{
  if (rc)
    return vs_error_set(err, VS_EINPUT, "%s: %s", where, why);
  if (bad)
    return vs_error_set(err, VS_EINPUT, "%s: %s", where, bad);
  return 0;
}

/* A parse's reason why, or for a value past 64 bits the key's bound
 * (into buf), the more useful thing to say. */
static const char *bound_if_too_large(const vs_key *k, const char *why,
                                      char *buf, size_t len)
{
  if (why == vs_parse_too_large && k->hi != 0 &&
      bounds_problem(k, 0x1p64, buf, len))
    return buf;
  return why;
}

/* VS_KEY_COUNT and VS_KEY_SIZE: a uint64_t within the key's bounds. */
static int store_whole(const vs_key *k, char *slot, const char *text,
                       const char *where, vs_error *err)
{
  const char *why = NULL, *bad = NULL;
  char reason[160];
  uint64_t u = 0;
  int rc = (k->type == VS_KEY_SIZE ? vs_parse_size : vs_parse_count)(text, &u,
                                                                      &why);
  if (rc == 0)
    bad = bounds_problem(k, (double)u, reason, sizeof reason);
  else
    why = bound_if_too_large(k, why, reason, sizeof reason);
  if ((rc = value_error(rc, why, bad, where, err)))
    return rc;
  *(uint64_t *)slot = u;
  return 0;
}

uint64_t vs_margin_bytes(const vs_margin *m, uint64_t capacity)
{
  return m->percent > 0 ? (uint64_t)ceil(m->percent / 100.0 * (double)capacity)
                        : m->bytes;
}

/* VS_KEY_MARGIN: "N%" (0 <= N < 100) or a size within the key's bounds. */
static int store_margin(const vs_key *k, char *slot, const char *text,
                        const char *where, vs_error *err)
{
  vs_margin m = {0, 0};
  size_t len = strlen(text);
  if (len > 0 && text[len - 1] == '%') {
    char num[64];
    const char *why = NULL;
    double pct = 0;
    int rc = len < sizeof num ? 0 : VS_EINPUT;
    if (rc == 0) {
      memcpy(num, text, len - 1);
      num[len - 1] = '\0';
      rc = vs_parse_real(num, &pct, &why);
    }
    if (rc || !(pct >= 0 && pct < 100))
      return vs_error_set(err, VS_EINPUT,
                          "%s: a share of the capacity is a percentage from "
                          "0%% to below 100%%, e.g. 10%%",
                          where);
    m.percent = pct;
  } else {
    vs_key as_size = *k;
    as_size.type = VS_KEY_SIZE;
    int rc = store_whole(&as_size, (char *)&m.bytes, text, where, err);
    if (rc)
      return rc;
  }
  memcpy(slot, &m, sizeof m);
  return 0;
}

/* VS_KEY_REAL, VS_KEY_RATE and VS_KEY_LATENCY: a double within the key's
 * bounds. A latency key whose lower bound is negative takes any sign. */
static int store_real(const vs_key *k, char *slot, const char *text,
                      const char *where, vs_error *err)
{
  const char *why = NULL, *bad = NULL;
  char reason[160];
  double d = 0;
  int rc;

  if (k->type == VS_KEY_REAL)
    rc = vs_parse_real(text, &d, &why);
  else if (k->type == VS_KEY_RATE)
    rc = vs_parse_rate(text, &d, &why);
  else
    rc = (k->lo < 0 ? vs_parse_time_offset : vs_parse_latency)(text, &d, &why);
  if (rc == 0)
    bad = bounds_problem(k, d, reason, sizeof reason);
  if ((rc = value_error(rc, why, bad, where, err)))
    return rc;
  *(double *)slot = d;
  return 0;
}

static int store_bool(char *slot, const char *text, const char *where,
                      vs_error *err)
{
  const char *why = NULL;
  bool b = false;
  int rc = vs_parse_bool(text, &b, &why);
  if ((rc = value_error(rc, why, NULL, where, err)))
    return rc;
  *(bool *)slot = b;
  return 0;
}

/* VS_KEY_ENUM: the index of text among the key's choices. */
static int store_enum(const vs_key *k, char *slot, const char *text,
                      const char *where, vs_error *err)
{
  char choices[256];
  for (int i = 0; k->choices[i]; i++) {
    if (strcmp(k->choices[i], text) == 0) {
      *(int *)slot = i;
      return 0;
    }
  }
  return vs_error_set(err, VS_EINPUT, "%s: expected %s", where,
                      vs_conf_choices(k->choices, choices, sizeof choices));
}

/* item without its leading and trailing blanks, in place. */
static void trim_item(char *item)
{
  size_t n = strlen(item), skip = strspn(item, " \t");
  while (n > skip && (item[n - 1] == ' ' || item[n - 1] == '\t'))
    n--;
  memmove(item, item + skip, n - skip);
  item[n - skip] = '\0';
}

/* VS_KEY_FLAGS: comma-separated names among the key's choices, each once;
 * stores the set of their indices as bits. */
static int store_flags(const vs_key *k, char *slot, const char *text,
                       const char *where, vs_error *err)
{
  char choices[256], item[64];
  uint32_t set = 0;
  const char *at = text;
  for (;;) {
    size_t n = strcspn(at, ",");
    int i;
    snprintf(item, sizeof item, "%.*s", (int)(n < 63 ? n : 63), at);
    trim_item(item);
    for (i = 0; k->choices[i] && strcmp(k->choices[i], item) != 0; i++)
      ;
    if (!k->choices[i] || n >= sizeof item)
      return vs_error_set(err, VS_EINPUT, "%s: '%s' is not one of %s", where,
                          item, vs_conf_choices(k->choices, choices,
                                                sizeof choices));
    if (set & (1u << i))
      return vs_error_set(err, VS_EINPUT, "%s: '%s' is listed twice", where,
                          item);
    set |= 1u << i;
    if (at[n] == '\0')
      break;
    at += n + 1;
  }
  *(uint32_t *)(void *)slot = set;
  return 0;
}

static int store_path(char *slot, const char *text, const char *where,
                      vs_error *err)
{
  if (*text == '\0' || strlen(text) >= VS_PATH_MAX || strpbrk(text, "\r\n"))
    return vs_error_set(err, VS_EINPUT,
                        "%s: expected a file path of 1-%d characters",
                        where, VS_PATH_MAX - 1);
  strcpy(slot, text);
  return 0;
}

static int store_name(char *slot, const char *text, const char *where,
                      vs_error *err)
{
  if (*text == '\0' || strlen(text) >= VS_NAME_MAX || strpbrk(text, " \t,"))
    return vs_error_set(err, VS_EINPUT,
                        "%s: expected a name of 1-%d characters without "
                        "blanks or commas",
                        where, VS_NAME_MAX - 1);
  strcpy(slot, text);
  return 0;
}

bool vs_conf_append_item(char *out, size_t len, size_t *used, const char *sep,
                         const char *item, size_t n)
{
  int w = snprintf(out + *used, len - *used, "%s%.*s", sep, (int)n, item);
  if (w < 0 || (size_t)w >= len - *used) {
    out[*used] = '\0';
    return false;
  }
  *used += (size_t)w;
  return true;
}

/* text's counts with each run written VxN (the count V, N times, as plan
 * prints an uneven split: 7,8x14,7) spelled out, into out[len]. A 0x
 * prefix stays (a hexadecimal number, which the count's parser refuses).
 * VS_EINPUT with *why for a bad N or a list past VS_LIST_MAX. */
static int expand_runs(const char *text, char *out, size_t len,
                       const char **why)
{
  size_t used = 0, items = 0;
  const char *p = text;
  out[0] = '\0';
  do {
    size_t item = strcspn(p, ","), n = item, lead = strspn(p, " \t");
    const char *x = memchr(p, 'x', item);
    uint64_t reps = 1;
    char times[32];
    if (x && x > p + lead && !(x == p + lead + 1 && p[lead] == '0')) {
      size_t nt = (size_t)(p + item - x - 1);
      if (nt < sizeof times)
        snprintf(times, sizeof times, "%.*s", (int)nt, x + 1);
      if (nt >= sizeof times || vs_parse_count(times, &reps, why) ||
          reps == 0 || reps > VS_LIST_MAX) {
        *why = "a run VxN needs N from 1 to 256 (e.g. 8x14: 8, 14 times)";
        return VS_EINPUT;
      }
      n = (size_t)(x - p);
    }
    /* a comma before all but the first (an empty item stays one, for
     * the list's parser to refuse) */
    for (uint64_t r = 0; r < reps; r++, items++) {
      if (items == VS_LIST_MAX) {
        *why = TOO_MANY_COUNTS;
        return VS_EINPUT;
      }
      if (!vs_conf_append_item(out, len, &used, items ? "," : "", p, n)) {
        *why = "list too long (its items spelt out are more characters than "
               "vsim reads)";
        return VS_EINPUT;
      }
    }
    p += item;
  } while (*p++ == ',');
  return 0;
}

/* VS_KEY_LIST: comma-separated counts (a run as VxN), each within the
 * key's bounds. */
static int store_count_list(const vs_key *k, char *slot, const char *text,
                            const char *where, vs_error *err)
{
  const char *why = NULL, *bad = NULL;
  char reason[160], spelled[VS_LIST_MAX * 24];
  vs_count_list list = {0};
  int rc = expand_runs(text, spelled, sizeof spelled, &why);
  if (rc == 0 &&
      (rc = parse_items(spelled, count_item, list.values,
                        sizeof list.values[0], VS_LIST_MAX, &list.n, &why)))
    why = bound_if_too_large(k, why, reason, sizeof reason);
  for (size_t i = 0; rc == 0 && i < list.n && !bad; i++)
    bad = bounds_problem(k, (double)list.values[i], reason, sizeof reason);
  if ((rc = value_error(rc, why, bad, where, err)))
    return rc;
  *(vs_count_list *)slot = list;
  return 0;
}

/* VS_KEY_RATES and VS_KEY_LATENCIES: comma-separated values as the single
 * kinds take them, each within the key's bounds. */
static int store_real_list(const vs_key *k, char *slot, const char *text,
                           const char *where, vs_error *err)
{
  const char *why = NULL, *bad = NULL;
  char reason[160];
  vs_real_list list = {0};
  int rc = parse_items(text,
                       k->type == VS_KEY_RATES   ? rate_item
                       : k->type == VS_KEY_REALS ? real_item
                       : k->lo < 0               ? time_offset_item
                                               : latency_item,
                       list.values, sizeof list.values[0], VS_REAL_LIST_MAX,
                       &list.n, &why);
  for (size_t i = 0; rc == 0 && i < list.n && !bad; i++)
    bad = bounds_problem(k, list.values[i], reason, sizeof reason);
  if ((rc = value_error(rc, why, bad, where, err)))
    return rc;
  *(vs_real_list *)slot = list;
  return 0;
}

/* Parses text per the key's type, checks bounds, and only then stores, so
 * a bad value leaves the target unchanged. */
static int store_value(const vs_key *k, void *target, const char *text,
                       const char *where, vs_error *err)
{
  char *slot = (char *)target + k->offset;

  switch (k->type) {
  case VS_KEY_COUNT:
  case VS_KEY_SIZE:
    return store_whole(k, slot, text, where, err);
  case VS_KEY_REAL:
  case VS_KEY_RATE:
  case VS_KEY_LATENCY:
    return store_real(k, slot, text, where, err);
  case VS_KEY_BOOL:
    return store_bool(slot, text, where, err);
  case VS_KEY_ENUM:
    return store_enum(k, slot, text, where, err);
  case VS_KEY_FLAGS:
    return store_flags(k, slot, text, where, err);
  case VS_KEY_NAME:
    return store_name(slot, text, where, err);
  case VS_KEY_PATH:
    return store_path(slot, text, where, err);
  case VS_KEY_MARGIN:
    return store_margin(k, slot, text, where, err);
  case VS_KEY_LIST:
    return store_count_list(k, slot, text, where, err);
  case VS_KEY_RATES:
  case VS_KEY_LATENCIES:
  case VS_KEY_REALS:
    return store_real_list(k, slot, text, where, err);
  }
  return 0;
}

/* Where a value comes from: a file's line (source the file), --set
 * (line 0), a derived file (line -1, `why` the field that gave it) or a
 * preset (line -2, `why` its reason); as vs_origin records it. */
typedef struct origin_of {
  const char *source;
  int line;
  const char *why;
} origin_of;

/* Stores section.name = value from `from` and records its origin. */
static int apply(const vs_keytab *tab, void *target, vs_origins *orig,
                 origin_of from, const char *section, const char *name,
                 const char *value, vs_error *err)
{
  const char *source = from.source;
  int line = from.line;
  char where[320], known[512];
  char text[96];
  int i = vs_conf_find(tab, section, name);

  /* a value longer than the origin holds is cut, and says so */
  if (snprintf(text, sizeof text, "%s", value ? value : "") >= (int)sizeof text)
    memcpy(text + sizeof text - 4, "...", 4);
  if (i < 0) {
    if (!section_known(tab, section)) {
      if (line > 0)
        return vs_error_set(err, VS_EINPUT,
                            "%s:%d: unknown section [%s] in %s file; valid "
                            "sections: %s",
                            source, line, section, tab->kind,
                            list_sections(tab, known, sizeof known));
      return vs_error_set(err, VS_EINPUT,
                          "%s %s%s.%s: unknown section [%s]; valid sections: %s",
                          source, set_prefix(tab), section, name, section,
                          list_sections(tab, known, sizeof known));
    }
    if (line > 0)
      return vs_error_set(err, VS_EINPUT,
                          "%s:%d: unknown key '%s' in [%s]; valid keys: %s",
                          source, line, name, section,
                          list_keys(tab, section, known, sizeof known));
    return vs_error_set(err, VS_EINPUT,
                        "%s %s%s.%s: unknown key '%s' in [%s]; valid keys: %s",
                        source, set_prefix(tab), section, name, name, section,
                        list_keys(tab, section, known, sizeof known));
  }
  if (line >= 0 ||
      !chosen_where(tab, orig, i, line, from.why, text, where, sizeof where))
    where_text(tab, source, line, &tab->keys[i], text, where, sizeof where);
  if (line > 0 && orig->keys[i].set && orig->keys[i].line > 0)
    return vs_error_set(err, VS_EINPUT, "%s: key set twice (first on line %d)",
                        where, orig->keys[i].line);
  if (text[0] == '\0')
    return vs_error_set(err, VS_EINPUT, "%s: missing value", where);
  /* text may be cut to fit the origin; the value is parsed whole. */
  if (store_value(&tab->keys[i], target, value, where, err))
    return VS_EINPUT;
  orig->keys[i].set = true;
  orig->keys[i].line = line;
  orig->keys[i].why = from.why;
  orig->keys[i].follows_gpus = false;
  memcpy(orig->keys[i].text, text, sizeof text);
  return 0;
}

/* ------------------------------------------------------------------------
 * Parsing through inih
 * ------------------------------------------------------------------------ */

/* True when text holds a control character (binary content). */
static bool has_control(const char *text)
{
  for (const unsigned char *p = (const unsigned char *)text; *p; p++)
    if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
      return true;
  return false;
}

static int on_key(void *user, const char *section, const char *name,
                  const char *value)
{
  parse_ctx *ctx = user;
  if (ctx->err->code != VS_OK)
    return 0;
  if (has_control(section) || has_control(name) || has_control(value)) {
    vs_error_set(ctx->err, VS_EINPUT,
                 "%s:%d: not a line of text (control characters): is this a "
                 "%s INI file?",
                 ctx->orig->file, ctx->line, ctx->tab->kind);
    return 0;
  }
  if (section[0] == '\0') {
    vs_error_set(ctx->err, VS_EINPUT,
                 "%s:%d: key '%s' appears before any [section]",
                 ctx->orig->file, ctx->line, name);
    return 0;
  }
  return apply(ctx->tab, ctx->target, ctx->orig,
               (origin_of){ctx->orig->file, ctx->line, NULL}, section, name,
               value, ctx->err) == 0;
}

/* What next_line found wrong with a line, besides its text. */
typedef struct line_flaws {
  bool too_long;          /* longer than the buffer */
  bool nul;               /* a NUL byte: not text */
  bool too_big;           /* the file passed MAX_INI_BYTES */
} line_flaws;

/* Reads the next whole line into line[] (NUL-terminated); returns its length
 * or -1 at end of input. Flaws are reported in *f; reading stops at the
 * size limit. */
static long next_line(parse_ctx *ctx, char *line, size_t cap, line_flaws *f)
{
  size_t n = 0;
  int c;
  bool any = false;
  memset(f, 0, sizeof *f);
  for (;;) {
    if (ctx->file) {
      c = fgetc(ctx->file);
      if (c != EOF && ++ctx->bytes > MAX_INI_BYTES) {
        f->too_big = true;
        break;
      }
      if (c == '\0') { /* not text: said at once (/dev/zero has no line end) */
        f->nul = true;
        any = true;
        break;
      }
    } else {
      c = *ctx->text ? (unsigned char)*ctx->text++ : EOF;
    }
    if (c == EOF)
      break;
    any = true;
    if (c == '\n')
      break;
    if (n + 1 < cap)
      line[n++] = (char)c;
    else
      f->too_long = true;
  }
  line[n] = '\0';
  return any ? (long)n : -1;
}

#define MALFORMED_FMT \
  "%s:%d: malformed line: expected [section], key = value, or a ; comment"

/* True for a line inih rejects: a [section without its ], or text that is
 * neither a comment nor key = value; and for "key: value", which inih
 * takes but vsim's files do not. The reader reports it at once, because
 * inih keeps parsing after one and a later error would hide it. */
static bool malformed(const char *p)
{
  if (*p == '\0' || *p == ';' || *p == '#')
    return false;
  if (*p == '[')
    return !strchr(p, ']');
  /* inih's ':' separator is compiled into the system library */
  p = strpbrk(p, "=:");
  return !p || *p == ':';
}

size_t vs_conf_line_max(void)
{
  return INI_MAX_LINE - 2; /* less the line end and the terminator */
}

/* Checks a [section] header line p (leading blanks gone): a name of text
 * that the table knows, and nothing after the ] but blanks or a comment
 * (inih would drop it silently, keys and all). */
static bool check_section(parse_ctx *ctx, const char *p)
{
  char name[128], known[256];
  const char *close = strchr(p, ']'), *rest = close + 1;
  size_t n = (size_t)(close - p - 1);

  if (n >= sizeof name) {
    vs_error_set(ctx->err, VS_EINPUT, "%s:%d: section name too long (over %zu "
                 "characters)", ctx->orig->file, ctx->line, sizeof name - 1);
    return false;
  }
  memcpy(name, p + 1, n);
  name[n] = '\0';
  if (has_control(name)) {
    vs_error_set(ctx->err, VS_EINPUT,
                 "%s:%d: not a line of text (control characters): is this a "
                 "%s INI file?", ctx->orig->file, ctx->line, ctx->tab->kind);
    return false;
  }
  if (!section_known(ctx->tab, name)) {
    vs_error_set(ctx->err, VS_EINPUT,
                 "%s:%d: unknown section [%s] in %s file; valid sections: %s",
                 ctx->orig->file, ctx->line, name, ctx->tab->kind,
                 list_sections(ctx->tab, known, sizeof known));
    return false;
  }
  while (isspace((unsigned char)*rest))
    rest++;
  if (*rest != '\0' && *rest != ';' && *rest != '#') {
    vs_error_set(ctx->err, VS_EINPUT,
                 "%s:%d: text after [%s]: put each key = value on a line of "
                 "its own", ctx->orig->file, ctx->line, name);
    return false;
  }
  return true;
}

/* True when a carriage return is inside the line, not at its end: a file
 * with old Mac (CR-only) line ends reads as one line. */
static bool inner_cr(const char *line)
{
  const char *cr = strchr(line, '\r');
  return cr && cr[strspn(cr, "\r \t")] != '\0';
}

/* inih's reader: one line per call, counted, leading blanks (and a UTF-8
 * byte-order mark) dropped, [section] headers checked against the table and
 * malformed lines reported. */
static char *read_line(char *str, int num, void *stream)
{
  parse_ctx *ctx = stream;
  char line[1024];
  line_flaws flaws;
  char *p;

  if (ctx->err->code != VS_OK)
    return NULL;
  if (next_line(ctx, line, sizeof line, &flaws) < 0 && !flaws.too_big)
    return NULL;
  ctx->line++;
  if (flaws.too_big) {
    vs_error_set(ctx->err, VS_EINPUT, "%s: over %u bytes: not a %s INI file",
                 ctx->orig->file, MAX_INI_BYTES, ctx->tab->kind);
    return NULL;
  }
  if (flaws.nul) {
    vs_error_set(ctx->err, VS_EINPUT, "%s:%d: a NUL byte: not a line of text "
                 "(is this a %s INI file?)", ctx->orig->file, ctx->line,
                 ctx->tab->kind);
    return NULL;
  }
  if (inner_cr(line)) {
    vs_error_set(ctx->err, VS_EINPUT, "%s:%d: a carriage return inside the line "
                 "(old Mac line ends?): end lines with \\n or \\r\\n",
                 ctx->orig->file, ctx->line);
    return NULL;
  }
  line[strcspn(line, "\r")] = '\0'; /* a \r\n line end's \r, and what
                                       inner_cr let through after it */
  if (flaws.too_long || strlen(line) + 2 > (size_t)num) {
    vs_error_set(ctx->err, VS_EINPUT, "%s:%d: line too long (over %d "
                 "characters; a list of counts can write a run of equal "
                 "ones as VxN, e.g. 8x14)",
                 ctx->orig->file, ctx->line, num - 2);
    return NULL;
  }
  p = line;
  if (ctx->line == 1)
    p += vs_utf8_bom_len(p, strlen(p));
  while (isspace((unsigned char)*p))
    p++;
  if (malformed(p)) {
    vs_error_set(ctx->err, VS_EINPUT, MALFORMED_FMT, ctx->orig->file, ctx->line);
    return NULL;
  }
  if (*p == '[' && !check_section(ctx, p))
    return NULL;
  snprintf(str, (size_t)num, "%s\n", p);
  return str;
}

static int parse(parse_ctx *ctx)
{
  int rc = ini_parse_stream(read_line, ctx, on_key, ctx);
  if (ctx->err->code != VS_OK)
    return ctx->err->code;
  if (rc > 0)
    return vs_error_set(ctx->err, VS_EINPUT, MALFORMED_FMT, ctx->orig->file, rc);
  if (rc < 0)
    return vs_error_set(ctx->err, VS_ENOMEM, "%s: out of memory while parsing",
                        ctx->orig->file);
  return 0;
}

static void start(parse_ctx *ctx, const vs_keytab *tab, void *target,
                  vs_origins *orig, const char *name, vs_error *err)
{
  memset(ctx, 0, sizeof *ctx);
  vs_error_clear(err); /* the reader stops at the first error it records */
  ctx->tab = tab;
  ctx->target = target;
  ctx->orig = orig;
  ctx->err = err;
  snprintf(orig->file, sizeof orig->file, "%s", name);
}

int vs_conf_load_file(const vs_keytab *tab, void *target, vs_origins *orig,
                      const char *path, vs_error *err)
{
  parse_ctx ctx;
  char what[48];
  int rc;

  start(&ctx, tab, target, orig, path, err);
  if (*path == '\0')
    return vs_error_set(err, VS_EIO, "the %s file's path is empty", tab->kind);
  snprintf(what, sizeof what, "%s file", tab->kind);
  if (!(ctx.file = vs_open_input(path, what, err)))
    return VS_EIO;
  rc = parse(&ctx);
  if (rc == 0 && ferror(ctx.file))
    rc = vs_error_set(err, VS_EIO, "%s: read error", path);
  fclose(ctx.file);
  return rc;
}

int vs_conf_load_string(const vs_keytab *tab, void *target, vs_origins *orig,
                        const char *name, const char *text, vs_error *err)
{
  parse_ctx ctx;
  start(&ctx, tab, target, orig, name, err);
  ctx.text = text;
  return parse(&ctx);
}

int vs_conf_set(const vs_keytab *tab, void *target, vs_origins *orig,
                const char *section, const char *name, const char *value,
                vs_error *err)
{
  return apply(tab, target, orig, (origin_of){"--set", 0, NULL}, section, name,
               value, err);
}

int vs_conf_set_derived(const vs_keytab *tab, void *target, vs_origins *orig,
                        const char *section, const char *name,
                        const char *value, const char *field, vs_error *err)
{
  return apply(tab, target, orig, (origin_of){orig->file, -1, field}, section,
               name, value, err);
}

int vs_conf_set_preset(const vs_keytab *tab, void *target, vs_origins *orig,
                       const char *section, const char *name,
                       const char *value, const char *why, vs_error *err)
{
  return apply(tab, target, orig, (origin_of){orig->file, -2, why}, section,
               name, value, err);
}

void vs_conf_preset_follows_gpus(const vs_keytab *tab, vs_origins *orig,
                                 const char *section, const char *name)
{
  int i = vs_conf_find(tab, section, name);
  if (i >= 0 && orig->keys[i].set && orig->keys[i].line == -2)
    orig->keys[i].follows_gpus = true;
}

/* vs_conf_set of value without the blanks around it, as inih gives a
 * file's values (`--set model.arch= llama` is `arch = llama`). */
static int set_trimmed(const vs_keytab *tab, void *target, vs_origins *orig,
                       const char *sec, const char *key, const char *value,
                       vs_error *err)
{
  char *copy = strdup(value);
  int rc;
  if (!copy)
    return vs_error_set(err, VS_ENOMEM, "out of host memory");
  trim_item(copy);
  rc = vs_conf_set(tab, target, orig, sec, key, copy, err);
  free(copy);
  return rc;
}

int vs_conf_assign(const vs_keytab *tab, void *target, vs_origins *orig,
                   const char *assignment, const char *prefix, vs_error *err)
{
  char sec[64], key[64];
  const char *dot = strchr(assignment, '.');
  const char *eq = strchr(assignment, '=');
  size_t ns, nk;

  if (!dot || !eq || dot > eq)
    return vs_error_set(err, VS_EUSAGE,
                        "--set %s%s: expected %ssection.key=value (for example "
                        "--set %s)",
                        prefix, assignment, prefix,
                        prefix[0] ? "topology.gpu.memory=40GiB"
                                  : "training.micro_batch=2");
  ns = (size_t)(dot - assignment);
  nk = (size_t)(eq - dot - 1);
  if (ns >= sizeof sec || nk >= sizeof key)
    return vs_error_set(err, VS_EUSAGE, "--set %s%s: name too long", prefix,
                        assignment);
  memcpy(sec, assignment, ns);
  sec[ns] = '\0';
  memcpy(key, dot + 1, nk);
  key[nk] = '\0';
  if (has_control(assignment)) /* as a file's line (on_key): not echoed */
    return vs_error_set(err, VS_EINPUT,
                        "--set %s%s.%s: not text (control characters in it)",
                        prefix, has_control(sec) ? "?" : sec,
                        has_control(key) ? "?" : key);
  return set_trimmed(tab, target, orig, sec, key, eq + 1, err);
}

/* ------------------------------------------------------------------------
 * Writing values back
 * ------------------------------------------------------------------------ */

/* v in `unit`, of which `scale` is one (units.c's tables): the number
 * with the fewest significant digits (15 to 17) that reads back as v (the
 * reader multiplies it by scale), then the unit, into buf. False when no
 * number does: a product by a scale that is no power of two misses some
 * doubles (1 in 20 rates in GB/s); buf then holds the nearest. */
static bool real_text(double v, double scale, const char *unit, char *buf,
                      size_t len)
{
  bool exact = false;
  int n = 0;
  for (int digits = 15; digits <= 17 && !exact; digits++) {
    n = snprintf(buf, len, "%.*g", digits, v / scale);
    exact = strtod(buf, NULL) * scale == v;
  }
  snprintf(buf + n, len - (size_t)n, "%s", unit);
  return exact;
}

/* v as real_text spells it in `unit` of `scale`, or, where that does not
 * read back as v, in `exact_unit` of exact_scale (1 or a power of two,
 * which every double survives). */
static void print_real(FILE *f, const char *before, double v, double scale,
                       const char *unit, double exact_scale,
                       const char *exact_unit)
{
  char buf[48];
  if (!real_text(v, scale, unit, buf, sizeof buf))
    real_text(v, exact_scale, exact_unit, buf, sizeof buf);
  fprintf(f, "%s%s", before, buf);
}

/* A number as it is (scale 1: always exact). */
static void print_plain(FILE *f, const char *before, double v,
                        const char *unit)
{
  print_real(f, before, v, 1.0, unit, 1.0, unit);
}

/* A latency in us, or in s where us does not read back exactly. */
static void print_latency(FILE *f, const char *before, double seconds)
{
  print_real(f, before, seconds, 1e-6, "us", 1.0, "s");
}

/* A rate in GB/s, or in GiB/s where that is shorter (307GiB/s rather than
 * 329.638601728GB/s: a list of a dozen stays a line the reader takes) or
 * GB/s does not read back exactly. */
static void print_rate(FILE *f, const char *before, double bytes_per_s)
{
  char gb[48], gib[48];
  bool exact = real_text(bytes_per_s, 1e9, "GB/s", gb, sizeof gb);
  real_text(bytes_per_s, 1073741824.0, "GiB/s", gib, sizeof gib);
  fprintf(f, "%s%s", before,
          exact && strlen(gb) <= strlen(gib) ? gb : gib);
}

/* bytes exactly, in the largest binary unit that divides them ("25MiB",
 * "85027979264B"), so that it loads back (a size needs its unit); into
 * buf, returned. */
static char *size_text(uint64_t bytes, char *buf, size_t len)
{
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t u = 0;
  while (u + 1 < sizeof units / sizeof units[0] && bytes > 0 &&
         bytes % 1024 == 0) {
    bytes /= 1024;
    u++;
  }
  snprintf(buf, len, "%llu%s", (unsigned long long)bytes, units[u]);
  return buf;
}

/* A FLAGS key's set choices, comma-separated. */
static void print_flags(FILE *f, const vs_key *k, uint32_t set)
{
  bool first = true;
  for (int i = 0; k->choices[i]; i++)
    if (set & (1u << i)) {
      fprintf(f, "%s%s", first ? "" : ",", k->choices[i]);
      first = false;
    }
}

/* Characters of n in decimal. */
static size_t decimal_digits(uint64_t n)
{
  size_t d = 1;
  while (n >= 10) {
    n /= 10;
    d++;
  }
  return d;
}

/* A count list as the reader takes it (expand_runs), each run of equal
 * counts written VxN where that is shorter than the run written out
 * (10,10 as 10x2; 1,1 stays), so that a long split (100 stages) stays a
 * line as short as any the reader takes. */
static void print_count_list(FILE *f, const vs_count_list *l)
{
  for (size_t i = 0; i < l->n;) {
    size_t run = 1, v;
    while (i + run < l->n && l->values[i + run] == l->values[i])
      run++;
    v = decimal_digits(l->values[i]);
    if (v + 1 + decimal_digits(run) >= run * v + run - 1)
      run = 1;
    fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)l->values[i]);
    if (run > 1)
      fprintf(f, "x%zu", run);
    i += run;
  }
}

/* A list of reals in the unit of its key type (RATES and LATENCIES as
 * print_rate and print_latency spell them, REALS as they are),
 * comma-separated. */
static void print_reals(FILE *f, vs_key_type type, const vs_real_list *l)
{
  for (size_t i = 0; i < l->n; i++) {
    if (type == VS_KEY_RATES)
      print_rate(f, i ? "," : "", l->values[i]);
    else if (type == VS_KEY_REALS)
      print_plain(f, i ? "," : "", l->values[i], "");
    else
      print_latency(f, i ? "," : "", l->values[i]);
  }
}

void vs_conf_print_value(FILE *f, const vs_key *k, const void *target)
{
  const char *slot = (const char *)target + k->offset;
  switch (k->type) {
  case VS_KEY_COUNT:
    fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)slot);
    break;
  case VS_KEY_SIZE: {
    char text[32];
    fputs(size_text(*(const uint64_t *)slot, text, sizeof text), f);
    break;
  }
  case VS_KEY_REAL:
    print_plain(f, "", *(const double *)slot, "");
    break;
  case VS_KEY_RATE:
    print_rate(f, "", *(const double *)slot);
    break;
  case VS_KEY_LATENCY:
    print_latency(f, "", *(const double *)slot);
    break;
  case VS_KEY_BOOL:
    fputs(*(const bool *)slot ? "true" : "false", f);
    break;
  case VS_KEY_ENUM:
    fputs(k->choices[*(const int *)slot], f);
    break;
  case VS_KEY_FLAGS:
    print_flags(f, k, *(const uint32_t *)(const void *)slot);
    break;
  case VS_KEY_NAME:
  case VS_KEY_PATH:
    fputs(slot, f);
    break;
  case VS_KEY_MARGIN: {
    const vs_margin *m = (const vs_margin *)(const void *)slot;
    char text[32];
    if (m->percent > 0)
      print_plain(f, "", m->percent, "%");
    else
      fputs(size_text(m->bytes, text, sizeof text), f);
    break;
  }
  case VS_KEY_LIST:
    print_count_list(f, (const vs_count_list *)(const void *)slot);
    break;
  case VS_KEY_RATES:
  case VS_KEY_LATENCIES:
  case VS_KEY_REALS:
    print_reals(f, k->type, (const vs_real_list *)(const void *)slot);
    break;
  }
}

int vs_conf_check_required(const vs_keytab *tab, const vs_origins *orig,
                           vs_error *err)
{
  for (size_t i = 0; i < tab->n_keys; i++) {
    if (tab->keys[i].required && !orig->keys[i].set)
      return vs_error_set(err, VS_EINPUT,
                          "%s: missing required key '%s' in [%s]", orig->file,
                          tab->keys[i].name, tab->keys[i].section);
  }
  return 0;
}

/* Whether key k holds the same value at x and y (its slots). */
static bool same_value(const vs_key *k, const char *x, const char *y)
{
  switch (k->type) {
  case VS_KEY_COUNT:
  case VS_KEY_SIZE:
    return memcmp(x, y, sizeof(uint64_t)) == 0;
  case VS_KEY_REAL:
  case VS_KEY_RATE:
  case VS_KEY_LATENCY: {
    double a, b;
    memcpy(&a, x, sizeof a);
    memcpy(&b, y, sizeof b);
    return a == b;
  }
  case VS_KEY_BOOL:
    return *(const bool *)(const void *)x == *(const bool *)(const void *)y;
  case VS_KEY_ENUM:
    return memcmp(x, y, sizeof(int)) == 0;
  case VS_KEY_FLAGS:
    return memcmp(x, y, sizeof(uint32_t)) == 0;
  case VS_KEY_NAME:
  case VS_KEY_PATH:
    return strcmp(x, y) == 0;
  case VS_KEY_LIST: {
    const vs_count_list *a = (const void *)x, *b = (const void *)y;
    return a->n == b->n &&
           memcmp(a->values, b->values, a->n * sizeof a->values[0]) == 0;
  }
  case VS_KEY_RATES:
  case VS_KEY_LATENCIES:
  case VS_KEY_REALS: {
    const vs_real_list *a = (const void *)x, *b = (const void *)y;
    for (size_t i = 0; a->n == b->n && i < a->n; i++)
      if (a->values[i] != b->values[i])
        return false;
    return a->n == b->n;
  }
  default: {
    const vs_margin *a = (const void *)x, *b = (const void *)y;
    return a->bytes == b->bytes && a->percent == b->percent;
  }
  }
}

const char *vs_conf_first_different(const vs_keytab *tab, const char *section,
                                    const char *const *names, size_t n,
                                    const void *a, const void *b)
{
  for (size_t i = 0; i < n; i++) {
    int at = vs_conf_find(tab, section, names[i]);
    const vs_key *k = at >= 0 ? &tab->keys[at] : NULL;
    if (k && !same_value(k, (const char *)a + k->offset,
                         (const char *)b + k->offset))
      return names[i];
  }
  return NULL;
}

/* The origin of section.name where a value was stored, else NULL. */
static const vs_origin *set_origin(const vs_keytab *tab, const vs_origins *orig,
                                   const char *section, const char *name)
{
  int i = vs_conf_find(tab, section, name);
  return i >= 0 && orig->keys[i].set ? &orig->keys[i] : NULL;
}

bool vs_conf_is_set(const vs_keytab *tab, const vs_origins *orig,
                    const char *section, const char *name)
{
  return set_origin(tab, orig, section, name) != NULL;
}

bool vs_conf_set_by_user(const vs_keytab *tab, const vs_origins *orig,
                         const char *section, const char *name)
{
  const vs_origin *o = set_origin(tab, orig, section, name);
  return o && o->line >= 0;
}

bool vs_conf_set_by_option(const vs_keytab *tab, const vs_origins *orig,
                           const char *section, const char *name)
{
  const vs_origin *o = set_origin(tab, orig, section, name);
  return o && o->line == 0;
}
