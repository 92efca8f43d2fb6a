/* rawcsv.c - reading and writing raw calibration samples (see rawcsv.h).
 * Reading feeds libcsv one line at a time, so every record is known by the
 * line it ends on, and converts each record as soon as it is complete. */
#include "rawcsv.h"

#include "csvout.h"

#include <csv.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { COL_KIND, COL_BYTES, COL_SAMPLE, COL_SECONDS, N_COLS };
static const char *const col_names[N_COLS] = {"kind", "bytes", "sample", "seconds"};

#define FIELD_MAX 128
#define MAX_FIELDS 32

const char *vs_raw_kind_name(int kind)
{
  return kind == VS_RAW_CONTEXT ? "context" : vs_cal_kind_name(kind);
}

int vs_raw_kind_find(const char *name)
{
  if (strcmp(name, "context") == 0)
    return VS_RAW_CONTEXT;
  return vs_cal_kind_find(name);
}

void vs_raw_init(vs_raw *raw)
{
  memset(raw, 0, sizeof *raw);
}

void vs_raw_fini(vs_raw *raw)
{
  for (int k = 0; k < VS_RAW_N_KINDS; k++) {
    free(raw->kinds[k].bytes);
    free(raw->kinds[k].seconds);
    free(raw->kinds[k].sample);
  }
  memset(raw, 0, sizeof *raw);
}

int vs_raw_add(vs_raw *raw, int kind, uint64_t bytes, uint32_t sample,
               double seconds, vs_error *err)
{
  vs_raw_series *s = &raw->kinds[kind];
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    double *b = realloc(s->bytes, cap * sizeof *b);
    if (b)
      s->bytes = b;
    double *t = realloc(s->seconds, cap * sizeof *t);
    if (t)
      s->seconds = t;
    uint32_t *i = realloc(s->sample, cap * sizeof *i);
    if (i)
      s->sample = i;
    if (!b || !t || !i)
      return vs_error_set(err, VS_ENOMEM, "out of memory holding %zu samples", cap);
    s->cap = cap;
  }
  s->bytes[s->n] = (double)bytes;
  s->seconds[s->n] = seconds;
  s->sample[s->n] = sample;
  s->n++;
  return 0;
}

/* ------------------------------------------------------------------------
 * Reading
 * ------------------------------------------------------------------------ */

/* State of one read, shared with the libcsv callbacks. */
typedef struct reader {
  vs_raw *raw;                   /* where samples go */
  const char *path;              /* for messages */
  vs_error *err;                 /* first error */
  int line;                      /* line being fed */
  int failed;                    /* an error is recorded: ignore the rest */
  int header_done;               /* the header row was read */
  int col[N_COLS];               /* field index of each column */
  int n_header;                  /* fields in the header */
  char fields[MAX_FIELDS][FIELD_MAX]; /* the current record */
  int n_fields;                  /* fields in it so far */
  int too_long;                  /* a field was cut */
  size_t n_rows;                 /* samples read */
} reader;

static void on_field(void *text, size_t len, void *data)
{
  reader *r = data;
  if (r->n_fields < MAX_FIELDS) {
    size_t n = len < FIELD_MAX - 1 ? len : FIELD_MAX - 1;
    r->too_long |= len >= FIELD_MAX;
    memcpy(r->fields[r->n_fields], text ? text : "", n);
    r->fields[r->n_fields][n] = '\0';
  }
  r->n_fields++;
}

static int fail(reader *r, const char *fmt, const char *a, const char *b)
{
  char what[512];
  snprintf(what, sizeof what, fmt, a, b);
  r->failed = 1;
  return vs_error_set(r->err, VS_EINPUT, "%s:%d: %s", r->path, r->line, what);
}

static void header(reader *r)
{
  char got[512] = "";
  for (int c = 0; c < N_COLS; c++)
    r->col[c] = -1;
  for (int i = 0; i < r->n_fields && i < MAX_FIELDS; i++) {
    for (int c = 0; c < N_COLS; c++) {
      if (strcmp(r->fields[i], col_names[c]) == 0 && r->col[c] < 0)
        r->col[c] = i;
    }
    if (strlen(got) + strlen(r->fields[i]) + 2 < sizeof got) {
      if (i)
        strcat(got, ",");
      strcat(got, r->fields[i]);
    }
  }
  r->n_header = r->n_fields;
  r->header_done = 1;
  for (int c = 0; c < N_COLS; c++) {
    if (r->col[c] < 0) {
      fail(r, "missing column '%s': the header must name kind,bytes,sample,"
              "seconds (it has: %s)", col_names[c], got);
      return;
    }
  }
}

static void kinds_list(char *buf, size_t len)
{
  size_t used = 0;
  buf[0] = '\0';
  for (int k = 0; k < VS_RAW_N_KINDS && used < len; k++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", k ? ", " : "",
                             vs_raw_kind_name(k));
}

static void record(reader *r)
{
  const char *kind_s, *bytes_s, *sample_s, *sec_s;
  char *end, count[16], want[16], kinds[256];
  unsigned long long bytes, sample;
  double sec;
  int kind;

  if (r->too_long) {
    fail(r, "a field is longer than %s characters%s", "127", "");
    return;
  }
  if (r->n_fields != r->n_header) {
    snprintf(count, sizeof count, "%d", r->n_fields);
    snprintf(want, sizeof want, "%d", r->n_header);
    fail(r, "%s fields, expected %s as in the header", count, want);
    return;
  }
  kind_s = r->fields[r->col[COL_KIND]];
  bytes_s = r->fields[r->col[COL_BYTES]];
  sample_s = r->fields[r->col[COL_SAMPLE]];
  sec_s = r->fields[r->col[COL_SECONDS]];
  if ((kind = vs_raw_kind_find(kind_s)) < 0) {
    kinds_list(kinds, sizeof kinds);
    fail(r, "unknown kind '%s'; valid kinds: %s", kind_s, kinds);
    return;
  }
  errno = 0;
  bytes = strtoull(bytes_s, &end, 10);
  if (!*bytes_s || *end || errno || bytes_s[0] == '-' || bytes > (1ull << 53)) {
    fail(r, "bytes '%s' is not a non-negative integer%s", bytes_s, "");
    return;
  }
  sample = strtoull(sample_s, &end, 10);
  if (!*sample_s || *end || errno || sample_s[0] == '-' || sample > UINT32_MAX) {
    fail(r, "sample '%s' is not a non-negative integer%s", sample_s, "");
    return;
  }
  sec = strtod(sec_s, &end);
  if (!*sec_s || *end || !isfinite(sec)) {
    fail(r, "seconds '%s' is not a finite number%s", sec_s, "");
    return;
  }
  if (sec < 0) {
    fail(r, "negative time %s s for kind %s", sec_s, kind_s);
    return;
  }
  if (vs_raw_add(r->raw, kind, bytes, (uint32_t)sample, sec, r->err)) {
    r->failed = 1;
    return;
  }
  r->n_rows++;
}

static void on_record(int c, void *data)
{
  reader *r = data;
  (void)c;
  if (!r->failed) {
    if (!r->header_done)
      header(r);
    else
      record(r);
  }
  r->n_fields = 0;
  r->too_long = 0;
}

int vs_raw_read(vs_raw *raw, const char *path, vs_error *err)
{
  struct csv_parser p;
  reader *r;
  FILE *f;
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int rc = 0;

  if (!(f = fopen(path, "r")))
    return vs_error_set(err, VS_EIO, "%s: cannot open: %s", path, strerror(errno));
  if (!(r = calloc(1, sizeof *r))) {
    fclose(f);
    return vs_error_set(err, VS_ENOMEM, "out of memory reading %s", path);
  }
  r->raw = raw;
  r->path = path;
  r->err = err;
  if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0) {
    free(r);
    fclose(f);
    return vs_error_set(err, VS_ENOMEM, "out of memory reading %s", path);
  }
  while (!r->failed && (len = getline(&line, &cap, f)) > 0) {
    r->line++;
    if (csv_parse(&p, line, (size_t)len, on_field, on_record, r) != (size_t)len) {
      fail(r, "malformed CSV: %s%s", csv_strerror(csv_error(&p)), "");
      break;
    }
  }
  if (!r->failed && ferror(f))
    rc = vs_error_set(err, VS_EIO, "%s: read error", path);
  if (!r->failed && !rc && csv_fini(&p, on_field, on_record, r) != 0)
    fail(r, "malformed CSV: %s%s", csv_strerror(csv_error(&p)), "");
  if (!r->failed && !rc && !r->header_done)
    rc = vs_error_set(err, VS_EINPUT,
                      "%s: empty file; expected a header kind,bytes,sample,"
                      "seconds and one row per sample", path);
  else if (!r->failed && !rc && r->n_rows == 0)
    rc = vs_error_set(err, VS_EINPUT, "%s: no samples after the header", path);
  if (r->failed)
    rc = err->code ? err->code : VS_EINPUT;
  csv_free(&p);
  free(line);
  free(r);
  fclose(f);
  return rc;
}

/* ------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------ */

int vs_raw_write(const vs_raw *raw, const char *path, vs_error *err)
{
  vs_csv csv;
  char sec[32];
  int rc = vs_csv_open(&csv, path, err);
  if (rc)
    return rc;
  vs_csv_header(&csv, "kind,bytes,sample,seconds");
  for (int k = 0; k < VS_RAW_N_KINDS; k++) {
    const vs_raw_series *s = &raw->kinds[k];
    for (size_t i = 0; i < s->n; i++) {
      vs_csv_text(&csv, vs_raw_kind_name(k));
      vs_csv_u64(&csv, (uint64_t)s->bytes[i]);
      vs_csv_u64(&csv, s->sample[i]);
      snprintf(sec, sizeof sec, "%.9e", s->seconds[i]);
      vs_csv_text(&csv, sec);
      vs_csv_row(&csv);
    }
  }
  return vs_csv_commit(&csv, err);
}
