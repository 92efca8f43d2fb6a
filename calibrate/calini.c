/* calini.c - writing the calibrated topology (see calini.h). Every key of
 * the topology table is written from the struct, so the file is complete
 * and needs no built-in default; values carry units vsim parses exactly. */
#include "calini.h"

#include "config.h"
#include "csvout.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The rate of piece g (number j of kind), in B/s. A flat or falling piece
 * is 0 (no size dependence). So is a slope slower than VS_MIN_RATE: no GPU
 * path moves under 1 MB/s, so such a slope is the noise of a few tiny
 * sizes, and vsim refuses the rate; and a rate over VS_MAX_RATE, the
 * rounding noise of a flat piece (equal times fit a slope of about
 * 1e-31 s per byte). A comment in the file says so. */
/* Piece g's fitted rate before those rules: B/s of kind, 0 for a flat or
 * falling piece. */
static double fitted_rate(int kind, const vs_fit_segment *g)
{
  return g->seconds_per_byte > 0
             ? vs_cal_bytes_factor(kind) / g->seconds_per_byte
             : 0.0;
}

static double piece_rate(vs_cal_out *out, int kind, const vs_fit_segment *g,
                         size_t j)
{
  double rate = fitted_rate(kind, g);
  if (rate > 0 && rate < VS_MIN_RATE) {
    vs_cal_out_comment(out, "%s piece %zu (%.0f to %.0f bytes): fitted slope "
                       "%.3g B/s is under 1 MB/s, written as 0 (latency "
                       "only)", vs_cal_kind_name(kind), j + 1, g->lo_bytes,
                       g->hi_bytes, rate);
    return 0.0;
  }
  if (rate > VS_MAX_RATE) {
    /* a slope of rounding noise: the time does not grow with size */
    vs_cal_out_comment(out, "%s piece %zu (%.0f to %.0f bytes): fitted rate "
                       "%.3g B/s is over 100 TB/s, so its time does not "
                       "grow with size: written as 0 (latency only)",
                       vs_cal_kind_name(kind), j + 1, g->lo_bytes,
                       g->hi_bytes, rate);
    return 0.0;
  }
  return rate;
}

/* The latency written for piece g (number j) whose rate was written as
 * `rate`. The first piece's is a time, at least 0. A later piece's is the
 * intercept of its line and may be negative, as long as the line is at or
 * above 0 where the piece starts, at the breakpoint as written (rounded
 * to a byte): vsim checks that; a piece written without a rate keeps the
 * time where it starts. */
static double piece_latency(const vs_fit_segment *g, size_t j, double rate)
{
  double start = (double)llround(g->lo_bytes);
  double at_start = g->latency + start * g->seconds_per_byte;
  if (j == 0)
    return g->latency > 0 ? g->latency : 0.0;
  if (rate <= 0)
    return at_start > 0 ? at_start : 0.0;
  return at_start >= 0 ? g->latency : -start * g->seconds_per_byte;
}

bool vs_cal_out_add(vs_cal_out *out, int kind, const vs_fit *fit)
{
  vs_cal_fit *c = &out->topo.cal[kind];
  size_t last = fit->n_breaks;

  out->fitted[kind] = true;
  out->fits[kind] = *fit;
  memset(c, 0, sizeof *c);
  c->r2 = fit->r2;
  c->max_rel_error = fit->max_rel_error;
  c->points = fit->n_points;
  c->min_bytes = (uint64_t)fit->min_bytes;
  c->max_bytes = (uint64_t)fit->max_bytes;
  c->breakpoints.n = fit->n_breaks;
  for (size_t j = 0; j < fit->n_breaks; j++)
    c->breakpoints.values[j] = (uint64_t)llround(fit->breaks[j]);
  /* Pieces are written only when there are several (vsim reads a single
   * piece from bandwidth and latency); bandwidth and latency are the last
   * piece's. */
  for (size_t j = 0; j <= last; j++) {
    const vs_fit_segment *g = &fit->segs[j];
    double rate = piece_rate(out, kind, g, j);
    c->piece_bandwidths.values[j] = rate;
    c->piece_latencies.values[j] = piece_latency(g, j, rate);
  }
  c->bandwidth = c->piece_bandwidths.values[last];
  c->latency = c->piece_latencies.values[last];
  c->piece_bandwidths.n = c->piece_latencies.n = last ? last + 1 : 0;
  if (vs_cal_times_transfers(kind) && !(c->bandwidth > 0)) {
    /* vsim times transfers with this curve: one that does not grow with
     * size would make every large copy free */
    vs_cal_out_comment(out, "%s not calibrated: the fitted time does not grow "
                       "with size", vs_cal_kind_name(kind));
    out->fitted[kind] = false;
    memset(c, 0, sizeof *c);
  }
  return out->fitted[kind];
}

void vs_cal_out_why_left_out(int kind, const vs_fit *fit, char *buf,
                             size_t len)
{
  double rate = fitted_rate(kind, &fit->segs[fit->n_breaks]);
  if (!(rate > 0))
    snprintf(buf, len, "the fitted time does not grow with size");
  else if (rate > VS_MAX_RATE)
    snprintf(buf, len, "the fitted time does not grow with size (its slope, "
             "%.3g B/s, is over 100 TB/s: are the times in seconds?)", rate);
  else
    snprintf(buf, len, "the fitted rate, %.3g B/s, is under 1 MB/s (are the "
             "times in seconds?)", rate);
}

void vs_cal_out_comment(vs_cal_out *out, const char *fmt, ...)
{
  size_t used = strlen(out->comments);
  va_list ap;
  if (used + 2 >= sizeof out->comments)
    return;
  va_start(ap, fmt);
  vsnprintf(out->comments + used, sizeof out->comments - used - 1, fmt, ap);
  va_end(ap);
  strcat(out->comments, "\n");
}

bool vs_cal_out_measured(vs_cal_out *out, const char *section,
                         const char *name)
{
  return vs_topology_mark_measured(&out->topo, section, name);
}

/* ------------------------------------------------------------------------
 * Values
 * ------------------------------------------------------------------------ */

/* Writes a size in binary units for comments ("1 MiB", "4 B"). */
static void put_size(vs_csv *f, double bytes)
{
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    u++;
  }
  vs_csv_printf(f, "%.4g %s", bytes, unit[u]);
}

/* What vsim takes of a kind's pieces (README "How vsim uses it";
 * vs_cal_times_transfers, vs_cal_by_piece). */
static const char *piece_use(int kind)
{
  if (vs_cal_by_piece(kind))
    return "vsim times each size with its own piece";
  if (kind == VS_CAL_H2D_PINNED)
    return "vsim takes the bandwidth and the first piece's latency as the "
           "PCIe link's, which copies share";
  if (kind == VS_CAL_H2D_PAGEABLE || kind == VS_CAL_D2H_PAGEABLE)
    return "vsim caps each copy from or to pageable memory at its size's "
           "rate on this curve";
  if (vs_cal_times_transfers(kind))
    return "vsim takes the bandwidth as the PCIe link's device-to-host "
           "rate, which copies share";
  return "recorded for reference: vsim does not read this kind";
}

/* The comments above a kind's keys: range, pieces, outliers, convention. */
static void describe_kind(vs_csv *f, int kind, const vs_fit *fit)
{
  double factor = vs_cal_bytes_factor(kind);
  vs_csv_printf(f, "\n; %s: %zu sizes from ", vs_cal_kind_name(kind),
                fit->n_points);
  put_size(f, fit->min_bytes);
  vs_csv_printf(f, " to ");
  put_size(f, fit->max_bytes);
  vs_csv_printf(f, ", %zu outlier size(s) ignored, %zu breakpoint(s)\n",
                fit->n_outliers, fit->n_breaks);
  for (size_t s = 0; s <= fit->n_breaks; s++) {
    const vs_fit_segment *g = &fit->segs[s];
    vs_csv_printf(f, ";   piece %zu, ", s + 1);
    put_size(f, g->lo_bytes);
    vs_csv_printf(f, " to ");
    put_size(f, g->hi_bytes);
    vs_csv_printf(f, ": t = %.4g us + bytes / ", g->latency * 1e6);
    if (g->seconds_per_byte > 0)
      vs_csv_printf(f, "%.5g GB/s\n", 1e-9 / g->seconds_per_byte);
    else
      vs_csv_printf(f, "inf (time does not grow with size)\n");
  }
  if (factor != 1.0)
    vs_csv_printf(f, "; bandwidth counts read + write (2 x bytes copied), as "
                     "STREAM copy and hbm_bandwidth do\n");
  if (fit->n_breaks)
    vs_csv_printf(f,
                  "; bandwidth and latency below are the last piece's; "
                  "%s\n",
                  piece_use(kind));
  if (fit->n_breaks == 0 && fit->segs[0].latency < 0)
    vs_csv_printf(f, "; the intercept %.4g us is negative: latency written "
                     "as 0\n", fit->segs[0].latency * 1e6);
  else if (fit->n_breaks && vs_fit_last(fit)->latency < 0)
    vs_csv_printf(f, "; the last piece's latency is its line's intercept, "
                     "below 0: its times start where the piece does\n");
  if (vs_cal_by_piece(kind))
    vs_csv_printf(f, "; measured sizes only: outside them vsim extends the "
                     "nearest piece and says so\n");
}

/* Writes the n characters at p as comment lines no longer than the INI
 * reader takes (vs_conf_line_max), broken at the last blank that fits, or
 * within a word (a path) that does not: a longer line made vsim-calibrate
 * refuse the file it had just written ("line too long"), as a raw CSV
 * path over 170 characters in "fitted from the samples in PATH" did. */
static void put_comment(vs_csv *f, const char *p, size_t n)
{
  size_t most = vs_conf_line_max() - 2; /* less the "; " */
  while (n > most) {
    size_t cut = most, blank;
    while (cut > 0 && p[cut] != ' ')
      cut--;
    blank = cut > 0; /* the blank broken at is not written */
    if (!blank)
      cut = most;
    vs_csv_printf(f, "; %.*s\n", (int)cut, p);
    p += cut + blank;
    n -= cut + blank;
  }
  vs_csv_printf(f, "; %.*s\n", (int)n, p);
}

static void put_comments(vs_csv *f, const char *text)
{
  const char *p = text;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    put_comment(f, p, n);
    p += n + (nl != NULL);
  }
}

/* Writes "name = value" for key k of topo, the value as vs_conf_print_value
 * spells it, through vs_csv_printf so that a failed write keeps its reason;
 * a key without a value (an empty list: not given) is left out. */
static void put_key(vs_csv *f, const char *name, const vs_key *k,
                    const vs_topology *topo)
{
  char *value = NULL;
  size_t n = 0;
  FILE *m = open_memstream(&value, &n);
  if (m) {
    vs_conf_print_value(m, k, topo);
    if (fclose(m) != 0) {
      free(value);
      value = NULL;
    }
  }
  if (value && *value) {
    vs_csv_printf(f, "%s = %s\n", name, value);
  } else if (value) {
    /* nothing to write */
  } else if (!f->failed) { /* out of host memory: commit reports it */
    f->failed = true;
    f->write_errno = ENOMEM;
  }
  free(value);
}

/* Commits the written topology only if vsim loads it: a fit of data far
 * outside real hardware (a latency over a second, say) would otherwise
 * leave a file that every later vsim run refuses. */
static int commit_if_vsim_reads(vs_csv *file, const char *shown,
                                vs_error *err)
{
  vs_topology *check = malloc(sizeof *check);
  vs_error why;
  int rc;

  if (!check) {
    vs_csv_abort(file);
    return vs_error_set(err, VS_ENOMEM, "out of host memory");
  }
  if (vs_csv_flush(file) != 0 || !file->tmp_path[0]) {
    free(check);
    return vs_csv_commit(file, err); /* reports the write error */
  }
  vs_error_clear(&why);
  rc = vs_topology_load(check, file->tmp_path, NULL, 0, &why);
  free(check);
  if (rc) {
    /* "TMP:45: [calibration] ..." -> "line 45: [calibration] ..." (the
     * temporary path may hold a colon itself) */
    size_t n = strlen(file->tmp_path);
    const char *cut = strncmp(why.msg, file->tmp_path, n) == 0 &&
                              why.msg[n] == ':'
                          ? why.msg + n
                          : NULL;
    vs_csv_abort(file);
    return vs_error_set(err, VS_EINPUT,
                        "%s: not written: the fit gives values vsim refuses "
                        "(%s%s); check the raw measurements",
                        shown, cut ? "line " : "",
                        cut ? cut + 1 : why.msg);
  }
  return vs_csv_commit(file, err);
}

/* The keys outside [calibration], each section once, in table order. */
static void put_nominal(vs_csv *f, const vs_cal_out *out)
{
  const vs_keytab *tab = vs_topology_keys();
  const char *section = "";
  for (size_t i = 0; i < tab->n_keys; i++) {
    const vs_key *k = &tab->keys[i];
    if (strcmp(k->section, "calibration") == 0)
      continue;
    if (strcmp(k->section, section) != 0) {
      vs_csv_printf(f, "\n[%s]\n", k->section);
      section = k->section;
    }
    if (vs_topology_is_measured(&out->topo, k->section, k->name))
      vs_csv_printf(f, "; measured (see the header for where and from "
                       "what)\n");
    put_key(f, k->name, k, &out->topo);
  }
}

/* [calibration]: the keys measured (`measured`), then each fitted kind's
 * comments and keys. */
static void put_calibration(vs_csv *f, const vs_cal_out *out)
{
  static const char *const suffix[] = {"_bandwidth", "_latency", "_r2",
      "_max_rel_error", "_points", "_min_bytes", "_max_bytes", "_breakpoints",
      "_piece_bandwidths", "_piece_latencies"};
  const vs_keytab *tab = vs_topology_keys();
  vs_csv_printf(f, "\n[calibration]\n; t = latency + bytes / bandwidth per "
                   "kind, fitted by vsim-calibrate;\n; vsim uses d2d_kernel "
                   "for HBM, p2p for NVLink, h2d_pinned and d2h_pinned for "
                   "PCIe\n");
  if (out->topo.measured) {
    vs_csv_printf(f, "; the keys above marked measured\n");
    put_key(f, "measured", &tab->keys[vs_conf_find(tab, "calibration",
                                                  "measured")],
            &out->topo);
  }
  for (int kind = 0; kind < VS_CAL_N_KINDS; kind++) {
    if (!out->fitted[kind])
      continue;
    describe_kind(f, kind, &out->fits[kind]);
    for (size_t s = 0; s < sizeof suffix / sizeof suffix[0]; s++) {
      char name[64];
      int i;
      snprintf(name, sizeof name, "%s%s", vs_cal_kind_name(kind), suffix[s]);
      i = vs_conf_find(tab, "calibration", name);
      if (i < 0 || (s >= 7 && out->topo.cal[kind].breakpoints.n == 0))
        continue;
      put_key(f, name, &tab->keys[i], &out->topo);
    }
  }
}

/* The whole calibrated topology, into f. */
static void put_topology(vs_csv *f, const vs_cal_out *out)
{
  put_comments(f, out->comments);
  put_nominal(f, out);
  put_calibration(f, out);
}

/* A new private folder for check_written_through: in $TMPDIR, or in
 * /tmp where that one cannot hold it; false (errno) when neither can. */
static bool private_folder(char *dir, size_t len)
{
  const char *tmp = getenv("TMPDIR");
  if (tmp && *tmp &&
      (size_t)snprintf(dir, len, "%s/vsim-calibrate-XXXXXX", tmp) < len &&
      mkdtemp(dir))
    return true;
  snprintf(dir, len, "/tmp/vsim-calibrate-XXXXXX");
  return mkdtemp(dir) != NULL;
}

/* For an output written through rather than renamed into place (a pipe,
 * /dev/stdout: vs_csv_open): checks that vsim loads out's file, written
 * to a private folder first, before anything reaches the output (shown
 * as `path`). */
static int check_written_through(const vs_cal_out *out, const char *path,
                                 vs_error *err)
{
  char dir[4096], copy[4096 + 16];
  vs_error why;
  vs_csv f;
  int rc;
  if (!private_folder(dir, sizeof dir))
    return vs_error_set(err, VS_EIO, "%s: not written: no private folder "
                        "to check it in (%s)", path, strerror(errno));
  snprintf(copy, sizeof copy, "%s/check.ini", dir);
  vs_error_clear(&why);
  if ((rc = vs_csv_open(&f, copy, &why)) == 0) {
    put_topology(&f, out);
    rc = commit_if_vsim_reads(&f, path, &why);
  }
  unlink(copy);
  rmdir(dir);
  if (rc)
    return why.msg[0] == '\0' || strncmp(why.msg, path, strlen(path)) == 0
               ? vs_error_set(err, rc, "%s", why.msg)
               : vs_error_set(err, rc, "%s: not written: its check in a "
                              "private copy failed (%s)", path, why.msg);
  return 0;
}

int vs_cal_out_write(const vs_cal_out *out, const char *path, vs_error *err)
{
  vs_csv file; /* vs_csv is vsim's atomic file: temporary, then rename */
  int rc = vs_csv_open(&file, path, err);
  if (rc)
    return rc;
  if (!file.tmp_path[0] && (rc = check_written_through(out, path, err))) {
    vs_csv_abort(&file);
    return rc;
  }
  put_topology(&file, out);
  /* a write that failed above is reported, with its reason, on commit */
  return commit_if_vsim_reads(&file, path, err);
}
