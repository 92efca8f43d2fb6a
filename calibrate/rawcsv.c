/* rawcsv.c - reading and writing raw calibration samples (see rawcsv.h).
 * Reading feeds libcsv one line at a time, so every record is known by the
 * line it ends on, and converts each record as soon as it is complete. */
#include "rawcsv.h"

#include "gemmfit.h"

#include "csvout.h"
#include "infile.h"

#include <csv.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The columns read: every row needs the first four, a gemm row the
 * shape's (batch optional). */
enum { COL_KIND, COL_BYTES, COL_SAMPLE, COL_SECONDS, N_REQUIRED,
       COL_M = N_REQUIRED, COL_N, COL_K, COL_BATCH, N_COLS };
static const char *const col_names[N_COLS] = {"kind", "bytes", "sample",
                                              "seconds", "m", "n", "k",
                                              "batch"};

#define FIELD_MAX 128                   /* longest field kept, with its NUL */

const char *vs_raw_kind_name(int kind)
{
  return kind == VS_RAW_CONTEXT ? "context"
         : kind == VS_RAW_GEMM  ? "gemm"
                                : vs_cal_kind_name(kind);
}

int vs_raw_kind_find(const char *name)
{
  if (strcmp(name, "context") == 0)
    return VS_RAW_CONTEXT;
  if (strcmp(name, "gemm") == 0)
    return VS_RAW_GEMM;
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
    free(raw->kinds[k].shape);
  }
  memset(raw, 0, sizeof *raw);
}

/* Whether a series keeps each sample's GEMM shape. */
typedef enum { SERIES_PLAIN, SERIES_SHAPED } series_kind;

/* Room for one more sample in s (and its shape, for gemm). */
static int grow(vs_raw_series *s, series_kind kind, vs_error *err)
{
  bool shapes = kind == SERIES_SHAPED;
  size_t cap = s->cap ? 2 * s->cap : 256;
  double *b, *t;
  uint32_t *i;
  vs_gemm *g = s->shape;
  if (s->n < s->cap && (!shapes || s->shape))
    return 0;
  if ((b = realloc(s->bytes, cap * sizeof *b)))
    s->bytes = b;
  if ((t = realloc(s->seconds, cap * sizeof *t)))
    s->seconds = t;
  if ((i = realloc(s->sample, cap * sizeof *i)))
    s->sample = i;
  if (shapes && (g = realloc(s->shape, cap * sizeof *g)))
    s->shape = g;
  if (!b || !t || !i || (shapes && !g))
    return vs_error_set(err, VS_ENOMEM, "out of memory holding %zu samples", cap);
  s->cap = cap;
  return 0;
}

/* Stores one sample in the room grow made. */
static void put(vs_raw_series *s, double bytes, uint32_t sample,
                double seconds)
{
  s->bytes[s->n] = bytes;
  s->seconds[s->n] = seconds;
  s->sample[s->n] = sample;
  s->n++;
}

int vs_raw_add_gemm(vs_raw *raw, vs_gemm g, uint32_t sample, double seconds,
                    vs_error *err)
{
  vs_raw_series *s = &raw->kinds[VS_RAW_GEMM];
  double elems = (double)g.batch * ((double)g.m * (double)g.k +
                                    (double)g.k * (double)g.n +
                                    (double)g.m * (double)g.n);
  if (grow(s, SERIES_SHAPED, err))
    return err->code;
  s->shape[s->n] = g;
  /* bytes are informational; kept within what a raw CSV's column takes */
  put(s, 2.0 * elems < 9007199254740992.0 ? 2.0 * elems : 9007199254740992.0,
      sample, seconds);
  return 0;
}

int vs_raw_add(vs_raw *raw, int kind, uint64_t bytes, uint32_t sample,
               double seconds, vs_error *err)
{
  vs_raw_series *s = &raw->kinds[kind];
  if (kind == VS_RAW_GEMM)
    return vs_error_set(err, VS_EINPUT, "a gemm sample needs its shape "
                        "(vs_raw_add_gemm)");
  if (grow(s, SERIES_PLAIN, err))
    return err->code;
  put(s, (double)bytes, sample, seconds);
  return 0;
}

/* ------------------------------------------------------------------------
 * Reading
 * ------------------------------------------------------------------------ */

/* Bounds on what is read: a sample row has about 50 bytes and a default
 * measurement writes under 1 MiB, so anything past these is not a raw CSV
 * (or a runaway one) and is refused before it can exhaust memory. */
#define RAW_LINE_MAX 4096              /* bytes of one line, newline aside */
#define RAW_FILE_MAX (1ull << 30)      /* bytes of the whole file */
#define NO_COL ((size_t)-1)            /* a column the header lacks */
/* The longest time a sample can hold: the largest size a row takes (2^53
 * bytes) at the slowest rate vsim takes (VS_MIN_RATE, 1 MB/s), 9.0e9 s;
 * a GEMM within VS_GEMM_FIT_MAX_FLOPS at vsim's smallest peak (1 GFLOP/s)
 * takes 1e9 s. A time of 1e300 s for one size (every sample) made the
 * robust fit put a breakpoint at 6 B and write pcie_latency 0. */
#define RAW_SECONDS_MAX 1e10

/* The lines the samples of one kind were read from, in the order read. */
typedef struct line_list {
  int *line;  /* lines */
  size_t n;   /* lines held */
  size_t cap; /* capacity */
} line_list;

/* State of one read, shared with the libcsv callbacks. Only the four
 * columns vsim uses are kept, so a header may have any number of others. */
typedef struct reader {
  vs_raw *raw;                   /* where samples go */
  const char *path;              /* for messages */
  vs_error *err;                 /* first error */
  int line;                      /* line being fed */
  int record_line;               /* line the record being read starts on */
  int record_done;               /* the last line fed ended a record */
  int failed;                    /* an error is recorded: ignore the rest */
  int header_done;               /* the header row was read */
  size_t col[N_COLS];            /* field index of each column, or NO_COL */
  size_t n_header;               /* fields in the header */
  char got[512];                 /* the header's names, for a message */
  char fields[N_COLS][FIELD_MAX]; /* the current record's used fields */
  size_t n_fields;               /* fields in it so far */
  int too_long;                  /* a required field was cut */
  int shape_too_long;            /* a shape field was cut (gemm rows) */
  int repeated;                  /* a column vsim reads named twice: its
                                    index + 1, 0 when none */
  size_t n_rows;                 /* samples read */
  size_t first[VS_RAW_N_KINDS];  /* samples each series held before */
  line_list lines[VS_RAW_N_KINDS]; /* the line of each sample read, by
                                    kind, in the order read */
} reader;

/* A header field: which column it names (a column vsim reads named a
 * second time is recorded in r->repeated: which of the two holds the
 * values is not for vsim to guess), and its name appended to r->got. */
static void header_field(reader *r, const char *text, size_t len)
{
  size_t used = strlen(r->got);
  for (int c = 0; c < N_COLS; c++) {
    if (len != strlen(col_names[c]) || memcmp(text, col_names[c], len) != 0)
      continue;
    if (r->col[c] == NO_COL)
      r->col[c] = r->n_fields;
    else if (!r->repeated)
      r->repeated = c + 1;
  }
  if (used + len + 2 < sizeof r->got)
    snprintf(r->got + used, sizeof r->got - used, "%s%.*s",
             r->n_fields ? "," : "", (int)len, text);
}

static void on_field(void *text, size_t len, void *data)
{
  reader *r = data;
  const char *s = text ? text : "";
  if (!r->header_done)
    header_field(r, s, len);
  for (int c = 0; r->header_done && c < N_COLS; c++) {
    if (r->col[c] == r->n_fields) {
      size_t n = len < FIELD_MAX - 1 ? len : FIELD_MAX - 1;
      if (c < N_REQUIRED)
        r->too_long |= len >= FIELD_MAX;
      else
        r->shape_too_long |= len >= FIELD_MAX;
      memcpy(r->fields[c], s, n);
      r->fields[c][n] = '\0';
    }
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
  r->n_header = r->n_fields;
  r->header_done = 1;
  if (r->repeated) {
    fail(r,
         "column '%s' named twice (the header has: %s): name each column "
         "once",
         col_names[r->repeated - 1], r->got);
    return;
  }
  for (int c = 0; c < N_REQUIRED; c++) {
    if (r->col[c] == NO_COL) {
      fail(r, "missing column '%s': the header must name kind,bytes,sample,"
              "seconds (it has: %s)", col_names[c], r->got);
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

/* Whether t is decimal digits (no sign, no blank) of a value at most
 * max, stored in *out. */
static bool read_count(const char *t, unsigned long long max,
                       unsigned long long *out)
{
  char *end;
  errno = 0;
  *out = strtoull(t, &end, 10);
  return isdigit((unsigned char)t[0]) && !*end && !errno && *out <= max;
}

/* Whether t is a time in decimal notation (digits, a sign, a point, an
 * exponent: no hex float, no blank inside; libcsv trims a field's outer
 * blanks), stored in *out. */
static bool read_seconds(const char *t, double *out)
{
  char *end;
  if (!*t || t[strspn(t, "0123456789+-.eE")] != '\0')
    return false;
  *out = strtod(t, &end);
  return !*end && isfinite(*out);
}

/* Whether a row of another kind than gemm leaves the shape columns (m, n,
 * k, batch) empty; fails naming the first that is not. */
static bool shape_empty(reader *r, const char *kind_s)
{
  for (int c = COL_M; c <= COL_BATCH; c++)
    if (r->col[c] != NO_COL && r->fields[c][0]) {
      char what[160];
      snprintf(what, sizeof what, "a %.32s row leaves m, n, k and batch "
               "empty (a gemm row's shape), but its %s is", kind_s,
               col_names[c]);
      fail(r, "%s '%s'", what, r->fields[c]);
      return false;
    }
  return true;
}

/* One dimension of a gemm row's shape: a positive integer under 2^31,
 * or `absent` when its column is missing or empty and absent > 0. */
static bool dimension(reader *r, int c, uint64_t absent, uint64_t *out)
{
  const char *t = r->col[c] == NO_COL ? "" : r->fields[c];
  unsigned long long v;
  if (!*t && absent) {
    *out = absent;
    return true;
  }
  if (r->col[c] == NO_COL) {
    fail(r, "a gemm row needs the column '%s' (m, n, k and optionally "
            "batch give its shape)%s", col_names[c], "");
    return false;
  }
  if (!read_count(t, (1ull << 31) - 1, &v) || v == 0) {
    fail(r, "gemm %s '%s' is not a positive integer under 2^31", col_names[c],
         t);
    return false;
  }
  *out = v;
  return true;
}

/* A gemm row: its shape from m, n, k and batch. Nonzero on failure. */
static int gemm_record(reader *r, uint32_t sample, double sec)
{
  vs_gemm g;
  if (r->shape_too_long)
    return fail(r, "a gemm shape field is longer than %s characters%s", "127",
                "");
  if (!(sec > 0))
    return fail(r, "a gemm row's time must be positive, not %s s%s",
                r->fields[COL_SECONDS], "");
  if (!dimension(r, COL_M, 0, &g.m) || !dimension(r, COL_N, 0, &g.n) ||
      !dimension(r, COL_K, 0, &g.k) || !dimension(r, COL_BATCH, 1, &g.batch))
    return VS_EINPUT;
  if (vs_gemm_fit_flops(g) > VS_GEMM_FIT_MAX_FLOPS) {
    char flops[32], most[32];
    snprintf(flops, sizeof flops, "%.3g", vs_gemm_fit_flops(g));
    snprintf(most, sizeof most, "%.0e", VS_GEMM_FIT_MAX_FLOPS);
    return fail(r,
                "a gemm row of %s FLOPs (2 m n k batch) is more than "
                "the %s a timed GEMM can be",
                flops, most);
  }
  return vs_raw_add_gemm(r->raw, g, sample, sec, r->err);
}

/* Appends line to l. VS_ENOMEM. Amortised O(1). */
static int note_line(line_list *l, int line, vs_error *err)
{
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 256;
    int *grown = realloc(l->line, cap * sizeof *grown);
    if (!grown)
      return vs_error_set(err, VS_ENOMEM, "out of memory holding %zu lines",
                          cap);
    l->line = grown;
    l->cap = cap;
  }
  l->line[l->n++] = line;
  return 0;
}

static void record(reader *r)
{
  const char *kind_s = r->fields[COL_KIND], *bytes_s = r->fields[COL_BYTES];
  const char *sample_s = r->fields[COL_SAMPLE], *sec_s = r->fields[COL_SECONDS];
  char count[24], want[24], kinds[256];
  unsigned long long bytes = 0, sample;
  double sec;
  int kind;

  if (r->n_fields != r->n_header) {
    snprintf(count, sizeof count, "%zu", r->n_fields);
    snprintf(want, sizeof want, "%zu", r->n_header);
    fail(r, "%s fields, expected %s as in the header", count, want);
    return;
  }
  if (r->too_long) {
    fail(r, "a field is longer than %s characters%s", "127", "");
    return;
  }
  if ((kind = vs_raw_kind_find(kind_s)) < 0) {
    kinds_list(kinds, sizeof kinds);
    fail(r, "unknown kind '%s'; valid kinds: %s", kind_s, kinds);
    return;
  }
  if (kind != VS_RAW_GEMM && !shape_empty(r, kind_s))
    return;
  if (kind != VS_RAW_GEMM && /* a gemm row's bytes are not read */
      !read_count(bytes_s, 1ull << 53, &bytes)) {
    fail(r, "bytes '%s' is not a non-negative integer up to 2^53%s",
         bytes_s, "");
    return;
  }
  if (!read_count(sample_s, UINT32_MAX, &sample)) {
    fail(r, "sample '%s' is not a non-negative integer up to 2^32 - 1%s",
         sample_s, "");
    return;
  }
  if (!read_seconds(sec_s, &sec)) {
    fail(r, "seconds '%s' is not a finite number in decimal notation%s",
         sec_s, "");
    return;
  }
  if (sec < 0) {
    fail(r, "negative time %s s for kind %s", sec_s, kind_s);
    return;
  }
  if (sec > RAW_SECONDS_MAX) {
    fail(r,
         "seconds %s is over the 1e10 s any sample can take (2^53 "
         "bytes at vsim's slowest rate, 1 MB/s)%s: are the times in "
         "seconds?",
         sec_s, "");
    return;
  }
  if (kind == VS_RAW_GEMM ? gemm_record(r, (uint32_t)sample, sec)
                          : vs_raw_add(r->raw, kind, bytes, (uint32_t)sample,
                                       sec, r->err)) {
    r->failed = 1;
    return;
  }
  if (note_line(&r->lines[kind], r->line, r->err)) {
    r->failed = 1;
    return;
  }
  r->n_rows++;
}

static void on_record(int c, void *data)
{
  reader *r = data;
  (void)c;
  r->record_done = 1;
  if (!r->failed) {
    if (!r->header_done)
      header(r);
    else
      record(r);
  }
  r->n_fields = 0;
  r->too_long = 0;
  r->shape_too_long = 0;
}

/* Opens the raw CSV file path (vs_open_input) into *out, refusing one over
 * RAW_FILE_MAX bytes. */
static int open_raw(const char *path, FILE **out, vs_error *err)
{
  struct stat st;
  int e;
  if (!(*out = vs_open_input(path, "raw CSV file (kind,bytes,sample,seconds)",
                             err)))
    return VS_EIO;
  if (fstat(fileno(*out), &st) != 0) {
    e = errno;
    fclose(*out);
    *out = NULL;
    return vs_error_set(err, VS_EIO, "%s: cannot read: %s", path, strerror(e));
  }
  if ((uint64_t)st.st_size <= RAW_FILE_MAX)
    return 0;
  fclose(*out);
  *out = NULL;
  return vs_error_set(err, VS_EINPUT,
                      "%s: %lld bytes, over the 1 GiB a raw "
                      "CSV file may have (a default measurement writes under "
                      "1 MiB)",
                      path, (long long)st.st_size);
}

/* Reads one line into buf[0..cap-1]: through '\n', or through a '\r' not
 * followed by '\n' (a file with old Mac line ends still has lines). Returns
 * its length; 0 at the end of the file; cap with no line end when the line
 * is longer (the rest is left unread). */
static size_t read_line(FILE *f, char *buf, size_t cap)
{
  size_t n = 0;
  int ch;
  while (n < cap && (ch = getc(f)) != EOF) {
    buf[n++] = (char)ch;
    if (ch == '\n')
      break;
    if (ch == '\r') {
      if ((ch = getc(f)) == '\n' && n < cap)
        buf[n++] = '\n';
      else if (ch != EOF)
        ungetc(ch, f);
      break;
    }
  }
  return n;
}

/* Checks one line that read_line returned, before libcsv sees it. */
static bool line_ok(reader *r, const char *line, size_t len, uint64_t total)
{
  const char *nul = memchr(line, '\0', len);
  size_t body = len; /* without its line end */
  char at[24];
  while (body > 0 && (line[body - 1] == '\n' || line[body - 1] == '\r'))
    body--;
  if (body > RAW_LINE_MAX) {
    snprintf(at, sizeof at, "%d", RAW_LINE_MAX);
    fail(r, "line longer than %s bytes (a sample row has about 50)%s", at, "");
  } else if (nul) {
    snprintf(at, sizeof at, "%zu", (size_t)(nul - line) + 1);
    fail(r, "NUL byte (byte %s of the line); a raw CSV file is text%s", at, "");
  } else if (total > RAW_FILE_MAX) {
    fail(r, "the file grew past the 1 GiB a raw CSV file may have%s%s", "", "");
  }
  return !r->failed;
}

/* Feeds f to libcsv line by line, so that every record and error is known
 * by its line; a leading UTF-8 byte order mark (spreadsheets write one) is
 * skipped. False when the input failed. */
static bool feed(reader *r, struct csv_parser *p, FILE *f)
{
  char *line = malloc(RAW_LINE_MAX + 2); /* room for a "\r\n" */
  uint64_t total = 0;
  size_t len;

  if (!line) {
    r->failed = 1;
    vs_error_set(r->err, VS_ENOMEM, "out of memory reading %s", r->path);
    return false;
  }
  while (!r->failed && (len = read_line(f, line, RAW_LINE_MAX + 2)) > 0) {
    size_t skip = r->line == 0 ? vs_utf8_bom_len(line, len) : 0;
    r->line++;
    /* this line starts a record, unless it is blank (libcsv skips blank
     * lines between records without a record) */
    if (r->record_done && len - skip > strspn(line + skip, "\r\n")) {
      r->record_line = r->line;
      r->record_done = 0;
    }
    total += len;
    if (line_ok(r, line, len, total) &&
        csv_parse(p, line + skip, len - skip, on_field, on_record, r) != len - skip)
      fail(r, "malformed CSV: %s%s", csv_strerror(csv_error(p)), "");
  }
  free(line);
  return !r->failed;
}

/* One sample's identity, to find a sample read twice: its size (a gemm
 * row's shape, each dimension under 2^31, packed in two) and its index
 * there, with the line it was read from. */
typedef struct sample_key {
  uint64_t size;   /* bytes, or a gemm's m << 32 | n */
  uint64_t shape;  /* 0, or a gemm's k << 32 | batch */
  uint32_t sample; /* the sample's index at that size */
  int line;        /* the line it was read from */
} sample_key;

/* Orders keys by size, shape, sample, then line. */
static int key_order(const void *a, const void *b)
{
  const sample_key *x = a, *y = b;
  if (x->size != y->size)
    return x->size < y->size ? -1 : 1;
  if (x->shape != y->shape)
    return x->shape < y->shape ? -1 : 1;
  if (x->sample != y->sample)
    return x->sample < y->sample ? -1 : 1;
  return (x->line > y->line) - (x->line < y->line);
}

static bool same_sample(const sample_key *x, const sample_key *y)
{
  return x->size == y->size && x->shape == y->shape && x->sample == y->sample;
}

/* The key of sample i of series s. */
static sample_key key_of(const vs_raw_series *s, size_t i, int line)
{
  sample_key k = {(uint64_t)s->bytes[i], 0, s->sample[i], line};
  if (s->shape) {
    const vs_gemm *g = &s->shape[i];
    k.size = g->m << 32 | g->n;
    k.shape = g->k << 32 | g->batch;
  }
  return k;
}

/* Among the samples of s read from line list l (s's samples from `from`
 * on), the repeat read on the earliest line into *again and the first
 * reading of the same sample into *first, when that line is before
 * again->line (again->line is 0 on entry when none was found yet).
 * VS_ENOMEM. O(n log n). */
static int find_repeat(const vs_raw_series *s, size_t from, const line_list *l,
                       sample_key *first, sample_key *again, vs_error *err)
{
  sample_key *keys;
  size_t run = 0;
  if (l->n < 2)
    return 0;
  if (!(keys = malloc(l->n * sizeof *keys)))
    return vs_error_set(err, VS_ENOMEM, "out of memory checking %zu samples",
                        l->n);
  for (size_t i = 0; i < l->n; i++)
    keys[i] = key_of(s, from + i, l->line[i]);
  qsort(keys, l->n, sizeof *keys, key_order);
  for (size_t i = 1; i < l->n; i++) {
    if (!same_sample(&keys[i], &keys[run])) {
      run = i;
      continue;
    }
    if (!again->line || keys[i].line < again->line) {
      *again = keys[i];
      *first = keys[run];
    }
  }
  free(keys);
  return 0;
}

/* Refuses a sample read twice: the same kind, size (a gemm row's shape)
 * and sample index on two rows. Each row of a raw CSV is one timed sample
 * (vsim-calibrate --raw writes each once); a repeat (a file appended to
 * itself, an edit gone wrong) would count one sample twice in its size's
 * median and spread. Names the later row of the repeat on the earliest
 * line, and where the sample was first. */
static int check_repeats(reader *r)
{
  sample_key first = {0, 0, 0, 0}, again = {0, 0, 0, 0};
  int kind = 0;
  char what[160], at[24];
  for (int k = 0; k < VS_RAW_N_KINDS; k++) {
    int before = again.line;
    if (find_repeat(&r->raw->kinds[k], r->first[k], &r->lines[k], &first,
                    &again, r->err))
      return r->err->code;
    if (again.line != before)
      kind = k;
  }
  if (!again.line)
    return 0;
  if (kind == VS_RAW_GEMM)
    snprintf(what, sizeof what, "gemm %llux%llux%llu (batch %llu) sample %lu",
             (unsigned long long)(again.size >> 32),
             (unsigned long long)(again.size & 0xffffffffu),
             (unsigned long long)(again.shape >> 32),
             (unsigned long long)(again.shape & 0xffffffffu),
             (unsigned long)again.sample);
  else
    snprintf(what, sizeof what, "kind %s, bytes %llu, sample %lu",
             vs_raw_kind_name(kind), (unsigned long long)again.size,
             (unsigned long)again.sample);
  snprintf(at, sizeof at, "%d", first.line);
  r->line = again.line;
  return fail(r,
              "%s again (first on line %s): each timed sample is one row; "
              "remove the repeat (a file appended to itself?)",
              what, at);
}

int vs_raw_read(vs_raw *raw, const char *path, vs_error *err)
{
  reader r = {
      .raw = raw,
      .path = path,
      .err = err,
      .record_done = 1,
      .col = {NO_COL, NO_COL, NO_COL, NO_COL, NO_COL, NO_COL, NO_COL, NO_COL}};
  struct csv_parser p;
  FILE *f;
  int rc;

  for (int k = 0; k < VS_RAW_N_KINDS; k++)
    r.first[k] = raw->kinds[k].n;
  if ((rc = open_raw(path, &f, err)))
    return rc;
  if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0) {
    fclose(f);
    return vs_error_set(err, VS_ENOMEM, "out of memory reading %s", path);
  }
  if (feed(&r, &p, f) && ferror(f))
    rc = vs_error_set(err, VS_EIO, "%s: read error", path);
  if (!r.failed && !rc && csv_fini(&p, on_field, on_record, &r) != 0) {
    /* only an open quote is left unparsed at the end (CSV_STRICT_FINI) */
    r.line = r.record_line;
    fail(&r,
         "a quoted field in the record that starts on this line is "
         "never closed (a '\"' without its pair)%s%s",
         "", "");
  }
  if (!r.failed && !rc && r.header_done)
    rc = check_repeats(&r);
  if (!r.failed && !rc && !r.header_done)
    rc = vs_error_set(err, VS_EINPUT,
                      "%s: empty file; expected a header kind,bytes,sample,"
                      "seconds and one row per sample", path);
  else if (!r.failed && !rc && r.n_rows == 0)
    rc = vs_error_set(err, VS_EINPUT, "%s: no samples after the header", path);
  if (r.failed)
    rc = err->code ? err->code : VS_EINPUT;
  csv_free(&p);
  fclose(f);
  for (int k = 0; k < VS_RAW_N_KINDS; k++)
    free(r.lines[k].line);
  return rc;
}

/* ------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------ */

/* A row's shape columns when the file has them: g's, or empty. */
static void write_shape(vs_csv *csv, bool shapes, const vs_gemm *g)
{
  if (!shapes)
    return;
  if (!g) {
    for (int i = 0; i < 4; i++)
      vs_csv_text(csv, "");
    return;
  }
  vs_csv_u64(csv, g->m);
  vs_csv_u64(csv, g->n);
  vs_csv_u64(csv, g->k);
  vs_csv_u64(csv, g->batch);
}

int vs_raw_write(const vs_raw *raw, const char *path, vs_error *err)
{
  vs_csv csv;
  char sec[32];
  int rc = vs_csv_open(&csv, path, err);
  if (rc)
    return rc;
  bool shapes = raw->kinds[VS_RAW_GEMM].n > 0;
  vs_csv_header(&csv, shapes ? "kind,bytes,sample,seconds,m,n,k,batch"
                             : "kind,bytes,sample,seconds");
  for (int k = 0; k < VS_RAW_N_KINDS; k++) {
    const vs_raw_series *s = &raw->kinds[k];
    for (size_t i = 0; i < s->n; i++) {
      vs_csv_text(&csv, vs_raw_kind_name(k));
      vs_csv_u64(&csv, (uint64_t)s->bytes[i]);
      vs_csv_u64(&csv, s->sample[i]);
      snprintf(sec, sizeof sec, "%.9e", s->seconds[i]);
      vs_csv_text(&csv, sec);
      write_shape(&csv, shapes, s->shape ? &s->shape[i] : NULL);
      vs_csv_row(&csv);
    }
  }
  return vs_csv_commit(&csv, err);
}
