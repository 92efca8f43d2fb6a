/* capacity.c - fit and sweep, and what they share with plan.c (see
 * capacity.h). Every answer comes from simulations; nothing here estimates
 * memory by formula. */
#define _XOPEN_SOURCE 700 /* realpath, fmemopen */
#include "capacity.h"
#include "capacity_int.h"

#include "memory.h"
#include "mpi_split.h"
#include "outputs.h"
#include "report.h"
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Value lists
 * ------------------------------------------------------------------------ */

static int add_value(vs_vary *v, const char *text, vs_error *err)
{
  size_t n = strlen(text);
  if (v->n == VS_VALUES_MAX)
    return vs_error_set(err, VS_EUSAGE, "--vary %s: more than %d values",
                        v->key, VS_VALUES_MAX);
  if (n >= sizeof v->values[0])
    return vs_error_set(err, VS_EUSAGE, "--vary %s: value '%s' too long",
                        v->key, text);
  memcpy(v->values[v->n++], text, n + 1);
  return 0;
}

static bool whole(const char *s, uint64_t *out)
{
  char *end;
  if (!isdigit((unsigned char)*s))
    return false;
  errno = 0;
  *out = strtoull(s, &end, 10);
  return *end == '\0' && errno == 0;
}

/* Expands "a..b" after the values before it (if numeric): a doubling when
 * the two before it and a double (1,2,4..64), else by the step from the
 * one before it (2,4,6..10 and 10,20..100 step by 2 and 10; one value
 * before a doubling is a step too), else by 1. */
static int add_range(vs_vary *v, const char *item, vs_error *err)
{
  char a_text[48], b_text[48];
  const char *dots = strstr(item, "..");
  uint64_t a, b, prev, prev2, step = 1;
  bool doubling = false;
  size_t na = (size_t)(dots - item);

  if (na >= sizeof a_text || strlen(dots + 2) >= sizeof b_text)
    return vs_error_set(err, VS_EUSAGE, "--vary %s: range '%s' too long", v->key,
                        item);
  memcpy(a_text, item, na);
  a_text[na] = '\0';
  strcpy(b_text, dots + 2);
  if (!whole(a_text, &a) || !whole(b_text, &b) || b < a)
    return vs_error_set(err, VS_EUSAGE,
                        "--vary %s: '%s' is not a range a..b of whole numbers "
                        "in decimal digits (no exponent) with a <= b",
                        v->key, item);
  if (v->n > 0 && whole(v->values[v->n - 1], &prev) && prev < a) {
    doubling = a == 2 * prev && v->n > 1 &&
               whole(v->values[v->n - 2], &prev2) && prev == 2 * prev2;
    step = a - prev;
  }
  for (uint64_t x = a; x <= b;) {
    char text[32];
    int rc;
    snprintf(text, sizeof text, "%llu", (unsigned long long)x);
    if ((rc = add_value(v, text, err)))
      return rc;
    if (doubling ? x > b / 2 : x > b - step)
      break;
    x = doubling ? 2 * x : x + step;
  }
  return 0;
}

/* "a..b" with a number before the dots (a path such as "../m.json" is a
 * value, not a range). */
static bool is_range(const char *item)
{
  const char *dots = strstr(item, "..");
  return dots && dots > item && item[0] >= '0' && item[0] <= '9';
}

int vs_vary_parse(const char *text, vs_vary *out, vs_error *err)
{
  const char *eq = strchr(text, '=');
  const char *p;
  size_t nk;

  memset(out, 0, sizeof *out);
  if (!eq || eq == text || eq[1] == '\0')
    return vs_error_set(err, VS_EUSAGE,
                        "--vary %s: expected section.key=v1,v2,... (or "
                        "gpus=8,16), e.g. --vary training.micro_batch=1,2,4..32",
                        text);
  nk = (size_t)(eq - text);
  if (nk >= sizeof out->key)
    return vs_error_set(err, VS_EUSAGE, "--vary: key too long");
  memcpy(out->key, text, nk);
  out->key[nk] = '\0';
  if (strcmp(out->key, "gpus") != 0 && !strchr(out->key, '.'))
    return vs_error_set(err, VS_EUSAGE,
                        "--vary %s: the key must be section.key (or gpus)",
                        out->key);
  for (p = eq + 1; *p;) {
    char item[48];
    size_t n = strcspn(p, ",");
    int rc;
    /* an item after every comma: "1," has an empty last value */
    if (n == 0 || n >= sizeof item || (p[n] == ',' && p[n + 1] == '\0'))
      return vs_error_set(err, VS_EUSAGE, "--vary %s: empty or overlong value",
                          out->key);
    memcpy(item, p, n);
    item[n] = '\0';
    if (isspace((unsigned char)item[0]) || isspace((unsigned char)item[n - 1]))
      return vs_error_set(err, VS_EUSAGE, "--vary %s: value '%s' starts or "
                          "ends with a space (write 1,2 rather than 1, 2)",
                          out->key, item);
    rc = is_range(item) ? add_range(out, item, err) : add_value(out, item, err);
    if (rc)
      return rc;
    p += n;
    if (*p == ',')
      p++;
  }
  return 0;
}

/* A GPU count, as --gpus takes it. */
static bool gpu_count(const char *text)
{
  uint64_t g;
  return whole(text, &g) && g >= 1 && g <= VS_MAX_GPUS;
}

/* Checks one value of --vary v alone, by applying it to scratch copies of
 * the two files' structs (a value's own parse and bounds do not depend on
 * the rest of the configuration). */
static int check_value(const vs_vary *v, const char *value, vs_topology *topo,
                       vs_workload *wl, vs_error *err)
{
  char assignment[2 * VS_EXPLORE_SET_MAX];
  if (strcmp(v->key, "gpus") == 0)
    return gpu_count(value)
               ? 0
               : vs_error_set(err, VS_EUSAGE,
                              "--vary gpus=%s: a GPU count is a whole number "
                              "from 1 to %u",
                              value, VS_MAX_GPUS);
  if (snprintf(assignment, sizeof assignment, "%s=%s", v->key, value) >=
      VS_EXPLORE_SET_MAX)
    return vs_error_set(err, VS_EUSAGE, "--vary %s: too long (at most %d "
                        "characters)", assignment, VS_EXPLORE_SET_MAX - 1);
  if (vs_explore_set(topo, wl, assignment, err) == 0)
    return 0;
  /* the configuration code calls every override --set; this one is not */
  vs_explore_relabel(err->msg, sizeof err->msg, assignment, "--vary ");
  if (strstr(err->msg, "unknown section") && strncmp(v->key, "topology.", 9))
    snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg),
             ", topology.SECTION.KEY for the hardware, or gpus");
  return err->code; /* bad input, as the same value given by --set */
}

/* The longest canonical form of a --vary value compared (a value's own
 * text is at most 47 characters; a printed value, a rate or a size, is
 * shorter than this). */
#define CANON_LEN 96

/* Value of `key` as it parses, in canon[CANON_LEN], once check_value has
 * applied value to topo and wl: the key's own value printed back (1GiB
 * and 1024MiB, true, yes and 1), so that two spellings of one value
 * compare equal; where the key takes no such value (gpus), a plain number
 * as a number (2 and 2.0, 1 and 01), else the text itself. */
static void canonical(const char *key, const char *value,
                      const vs_topology *topo, const vs_workload *wl,
                      char *canon)
{
  bool topology = strncmp(key, "topology.", 9) == 0;
  const char *sec_key = topology ? key + 9 : key;
  const char *dot = strchr(sec_key, '.');
  const vs_keytab *tab = topology ? vs_topology_keys() : vs_workload_keys();
  char section[64], *end;
  double x = strtod(value, &end);
  FILE *f;
  int k;
  snprintf(canon, CANON_LEN, "%s", value);
  if (end != value && *end == '\0')
    snprintf(canon, CANON_LEN, "%.17g", x);
  if (!dot || (size_t)(dot - sec_key) >= sizeof section)
    return;
  snprintf(section, sizeof section, "%.*s", (int)(dot - sec_key), sec_key);
  if ((k = vs_conf_find(tab, section, dot + 1)) < 0 ||
      !(f = fmemopen(canon, CANON_LEN, "w")))
    return;
  vs_conf_print_value(f, &tab->keys[k],
                      topology ? (const void *)topo : (const void *)wl);
  if (fclose(f) != 0)
    snprintf(canon, CANON_LEN, "%s", value);
}

int vs_vary_check(const vs_vary *vary, size_t n, vs_error *err)
{
  vs_topology *topo = calloc(1, sizeof *topo);
  vs_workload *wl = calloc(1, sizeof *wl);
  char(*canon)[CANON_LEN] = malloc(VS_VALUES_MAX * sizeof *canon);
  int rc = 0;

  if (!topo || !wl || !canon)
    rc = vs_error_set(err, VS_ENOMEM, "out of host memory");
  for (size_t k = 0; rc == 0 && k < n; k++) {
    /* a second list would silently multiply the combinations */
    for (size_t j = 0; rc == 0 && j < k; j++)
      if (strcmp(vary[j].key, vary[k].key) == 0)
        rc = vs_error_set(err, VS_EUSAGE,
                          "--vary %s given twice; list all its values in "
                          "one --vary",
                          vary[k].key);
    if (rc == 0 && vs_explore_is_list_key(vary[k].key))
      rc = vs_error_set(err, VS_EUSAGE,
                        "--vary %s: a list-valued key cannot be varied (--vary "
                        "separates its values with the same commas); run once "
                        "per list instead",
                        vary[k].key);
    for (size_t i = 0; rc == 0 && i < vary[k].n; i++) {
      if ((rc = check_value(&vary[k], vary[k].values[i], topo, wl, err)))
        break;
      canonical(vary[k].key, vary[k].values[i], topo, wl, canon[i]);
      /* a value listed twice would sweep the same combinations twice */
      for (size_t j = 0; rc == 0 && j < i; j++)
        if (strcmp(canon[j], canon[i]) == 0)
          rc = strcmp(vary[k].values[j], vary[k].values[i]) == 0
                   ? vs_error_set(err, VS_EUSAGE, "--vary %s lists %s twice",
                                  vary[k].key, vary[k].values[i])
                   : vs_error_set(
                         err, VS_EUSAGE, "--vary %s lists %s twice (as %s)",
                         vary[k].key, vary[k].values[i], vary[k].values[j]);
    }
  }
  free(topo);
  free(wl);
  free(canon);
  return rc;
}

/* ------------------------------------------------------------------------
 * Shared helpers
 * ------------------------------------------------------------------------ */

/* Resolves the job as given (base sets, on gpus GPUs as --gpus, 0 for the
 * workload's), for what the searches keep fixed. Prints the error and
 * returns the exit status on failure. */
int vs_cap_resolve_base(const vs_explore *ex, uint64_t gpus, vs_workload *wl,
                        vs_topology *topo, FILE *errs)
{
  vs_error err;
  vs_error_clear(&err);
  if (vs_explore_load(ex, NULL, 0, gpus, topo, wl, &err)) {
    fprintf(errs, "vsim: %s\n", err.msg);
    return err.code == VS_EUSAGE ? VS_EXIT_USAGE : VS_EXIT_ERROR;
  }
  return VS_EXIT_OK;
}

const char *vs_cap_status_name(int status)
{
  return status == VS_EVAL_FITS    ? "fits"
         : status == VS_EVAL_TIGHT ? "tight"
         : status == VS_EVAL_OOM   ? "oom"
                                   : "invalid";
}

static void describe_candidate(FILE *out, const vs_candidate *c)
{
  char used[VS_BYTES_PAIR_LEN], cap[VS_BYTES_PAIR_LEN], head[16], t[16];
  uint64_t room =
      vs_mem_headroom(c->worst.capacity_bytes, c->worst.peak_used_bytes);
  vs_format_bytes_pair(c->worst.peak_used_bytes, c->worst.capacity_bytes, used,
                       cap, sizeof used);
  fprintf(out, "rank %u (stage %d) peaks at %s of %s, %s headroom; step %s, "
               "%.0f tokens/s",
          c->worst.rank, c->worst.stage, used, cap,
          vs_format_bytes(room, head, sizeof head),
          vs_format_seconds(c->step_time_s, t, sizeof t), c->tokens_per_s);
}

/* ------------------------------------------------------------------------
 * fit
 * ------------------------------------------------------------------------ */

typedef struct fit_search {
  const vs_capacity_opts *o; /* the command's options */
  const char *key;         /* training.micro_batch or model.seq_len */
  uint64_t replica_mbs;    /* dp * micro-batches per step, kept fixed */
  uint64_t mbs_per_step;   /* micro-batches per step, kept fixed */
  uint64_t global_batch;   /* the base workload's global batch */
  uint64_t step;           /* values searched are multiples of this */
  uint64_t limit;          /* the largest value searched */
  uint64_t lo;             /* the largest value known to fit */
  uint64_t hi;             /* a value above lo not known to fit */
  vs_candidate cand;       /* the latest evaluation */
  vs_candidate best;       /* the evaluation at lo */
} fit_search;

/* The evaluation c of value v: its peak, step and throughput, then the
 * global batch it ran (which follows the micro-batch) in the micro-batches
 * per step that fit keeps, so that the answer says what it holds for. */
static void describe_fit(FILE *out, const fit_search *s, uint64_t v,
                         const vs_candidate *c)
{
  bool mb = strcmp(s->key, "training.micro_batch") == 0;
  char b[16];
  describe_candidate(out, c);
  fprintf(out, "; global batch %llu, %llu micro-batch%s per step",
          (unsigned long long)(mb ? v * s->replica_mbs : s->global_batch),
          (unsigned long long)s->mbs_per_step,
          s->mbs_per_step == 1 ? "" : "es");
  if (c->paged_out_bytes)
    fprintf(out,
            "; %s of its paged optimizer states move to host memory "
            "and back each step, which the step time leaves out",
            vs_format_bytes(c->paged_out_bytes, b, sizeof b));
}

/* Returned by a step of the search that does not decide the exit status. */
enum { FIT_GO_ON = -1 };

/* Simulates key = v into s->cand and its verdict into *status. FIT_GO_ON,
 * or VS_EXIT_ERROR (with the message) when the host is out of memory. */
static int fit_eval(fit_search *s, uint64_t v, int *status, FILE *errs)
{
  vs_candidate *c = &s->cand;
  memset(c, 0, sizeof *c);
  c->gpus = s->o->gpus;
  vs_candidate_set(c, "%s=%llu", s->key, (unsigned long long)v);
  if (strcmp(s->key, "training.micro_batch") == 0)
    vs_candidate_set(c, "training.global_batch=%llu",
                     (unsigned long long)(v * s->replica_mbs));
  if (vs_explore_one(&s->o->ex, c)) {
    fprintf(errs, "vsim: out of host memory\n");
    return VS_EXIT_ERROR;
  }
  *status = c->status;
  return FIT_GO_ON;
}

/* Checks --vary-key and resolves the job: what stays fixed, the step and
 * the limit of the values. FIT_GO_ON or the exit status. */
static int fit_setup(fit_search *s, const vs_capacity_opts *o, FILE *errs)
{
  vs_workload *wl = malloc(sizeof *wl);
  vs_topology *topo = malloc(sizeof *topo);
  bool seq = false;
  int code = FIT_GO_ON;

  s->o = o;
  s->key = vs_capacity_fit_key(o);
  seq = strcmp(s->key, "model.seq_len") == 0;
  if (!wl || !topo) {
    fprintf(errs, "vsim: out of host memory\n");
    code = VS_EXIT_ERROR;
  } else if (strcmp(s->key, "training.micro_batch") != 0 && !seq) {
    fprintf(errs, "vsim: --vary-key takes training.micro_batch or "
                  "model.seq_len, got '%s'\n",
            s->key);
    code = VS_EXIT_USAGE;
  } else if ((code = vs_cap_resolve_base(&o->ex, o->gpus, wl, topo, errs)) ==
             VS_EXIT_OK) {
    code = FIT_GO_ON;
    s->replica_mbs = wl->parallel.dp * wl->grad_accum;
    s->mbs_per_step = wl->grad_accum;
    s->global_batch = wl->training.global_batch;
    s->step = seq ? vs_workload_seq_multiple(wl->parallel.cp, wl->parallel.tp,
                                             vs_workload_sp(&wl->parallel))
                  : 1;
    s->limit = seq ? 100000000 : 1000000;
  }
  free(wl);
  free(topo);
  return code;
}

/* The smallest value: when it cannot be simulated or does not fit, that
 * is the answer. */
static int fit_first(fit_search *s, FILE *out, FILE *errs)
{
  int code, st;
  if ((code = fit_eval(s, s->step, &st, errs)) != FIT_GO_ON)
    return code;
  if (st == VS_EVAL_INVALID) { /* an error, not a memory verdict */
    fprintf(errs, "vsim: %s = %llu cannot be simulated: %s\n", s->key,
            (unsigned long long)s->step, s->cand.reason);
    return VS_EXIT_ERROR;
  }
  if (st != VS_EVAL_FITS) {
    fprintf(out, "%s = %llu %s: %s\n", s->key, (unsigned long long)s->step,
            st == VS_EVAL_TIGHT ? "does not keep the reserve free"
                                : "does not fit",
            s->cand.reason);
    return VS_EXIT_OOM;
  }
  s->best = s->cand;
  s->lo = s->step;
  s->hi = 2 * s->step;
  return FIT_GO_ON;
}

/* Doubles hi until it does not fit; when the limit comes first, that is
 * the answer. */
static int fit_double(fit_search *s, FILE *out, FILE *errs)
{
  int code, st;
  for (;;) {
    if (s->hi > s->limit) {
      fprintf(out, "%s fits up to the search limit %llu: ", s->key,
              (unsigned long long)s->lo);
      describe_fit(out, s, s->lo, &s->best);
      fputc('\n', out);
      return VS_EXIT_OK;
    }
    if ((code = fit_eval(s, s->hi, &st, errs)) != FIT_GO_ON)
      return code;
    if (st != VS_EVAL_FITS)
      return FIT_GO_ON;
    s->best = s->cand;
    s->lo = s->hi;
    s->hi *= 2;
  }
}

/* Narrows lo (fits) and hi (does not) to one step apart. */
static int fit_bisect(fit_search *s, FILE *errs)
{
  int code, st;
  while (s->hi - s->lo > s->step) {
    uint64_t mid = s->lo + (s->hi - s->lo) / s->step / 2 * s->step;
    if ((code = fit_eval(s, mid, &st, errs)) != FIT_GO_ON)
      return code;
    if (st == VS_EVAL_FITS) {
      s->lo = mid;
      s->best = s->cand;
    } else {
      s->hi = mid;
    }
  }
  return FIT_GO_ON;
}

/* The boundary: lo and what it uses, and why the next value fails. */
static int fit_answer(fit_search *s, FILE *out, FILE *errs)
{
  int code, st;
  if ((code = fit_eval(s, s->hi, &st, errs)) != FIT_GO_ON)
    return code;
  fprintf(out, "largest %s that fits: %llu (", s->key,
          (unsigned long long)s->lo);
  describe_fit(out, s, s->lo, &s->best);
  /* past the boundary the job either runs out of memory or stops being
   * simulable (a limit of vsim's, not of the GPU): say which */
  fprintf(out, ")\nat %llu %s: %s\n", (unsigned long long)s->hi,
          st == VS_EVAL_INVALID ? "vsim cannot simulate it"
          : st == VS_EVAL_TIGHT ? "it fits but does not keep the reserve free"
                                : "it does not fit",
          s->cand.reason);
  return VS_EXIT_OK;
}

const char *vs_capacity_fit_key(const vs_capacity_opts *o)
{
  return o->fit_key ? o->fit_key : "training.micro_batch";
}

int vs_capacity_fit(const vs_capacity_opts *o, FILE *out, FILE *errs)
{
  fit_search *s = calloc(1, sizeof *s);
  int code;

  if (!s) {
    fprintf(errs, "vsim: out of host memory\n");
    return VS_EXIT_ERROR;
  }
  /* memory grows with both keys: find a value that does not fit by
   * doubling, then the boundary by bisection on multiples of step */
  if ((code = fit_setup(s, o, errs)) == FIT_GO_ON &&
      (code = fit_first(s, out, errs)) == FIT_GO_ON &&
      (code = fit_double(s, out, errs)) == FIT_GO_ON &&
      (code = fit_bisect(s, errs)) == FIT_GO_ON)
    code = fit_answer(s, out, errs);
  free(s);
  return code;
}

/* ------------------------------------------------------------------------
 * sweep
 * ------------------------------------------------------------------------ */

void vs_cap_tail_header(vs_csv *c)
{
  vs_csv_fields(c, "status,reason,tokens_per_s,mfu,usd_per_step");
}

/* A figure derived from a candidate's step time, or an empty cell when the
 * candidate has no step (invalid, or screening stopped at its
 * out-of-memory): a CSV cell is a number or empty, never inf or nan. */
void vs_cap_derived_cell(vs_csv *c, const vs_candidate *cand, double value)
{
  if (cand->status != VS_EVAL_INVALID && cand->timed && isfinite(value))
    vs_csv_real(c, value);
  else
    vs_csv_text(c, "");
}

void vs_cap_price_cell(vs_csv *c, const vs_candidate *cand, double value)
{
  if (cand->usd_per_step > 0)
    vs_cap_derived_cell(c, cand, value);
  else
    vs_csv_text(c, "");
}

void vs_cap_tail_columns(vs_csv *c, const vs_candidate *cand)
{
  vs_csv_text(c, vs_cap_status_name(cand->status));
  vs_csv_text(c, cand->reason);
  vs_cap_derived_cell(c, cand, cand->tokens_per_s);
  vs_cap_derived_cell(c, cand, cand->mfu);
  vs_cap_price_cell(c, cand, cand->usd_per_step);
}

void vs_cap_summary_or_empty(vs_csv *c, const vs_candidate *cand)
{
  if (cand->status == VS_EVAL_INVALID)
    vs_summary_csv_empty(c);
  else
    vs_summary_csv_row(c, &cand->worst);
}

/* The values of combination i: the last --vary key varies fastest. */
static void combo_values(const vs_capacity_opts *o, size_t i, const char **vals)
{
  for (size_t k = o->n_vary; k-- > 0;) {
    vals[k] = o->vary[k].values[i % o->vary[k].n];
    i /= o->vary[k].n;
  }
}

/* Reads the files into topo and wl and applies the base --set overrides,
 * as fit and plan do, so that an error every combination would share is
 * reported once (exit 1). What is checked across keys waits for each
 * combination: its varied keys may be what makes the layout valid (gpus,
 * parallel.tp). */
static int parse_base(const vs_capacity_opts *o, vs_topology *topo,
                      vs_workload *wl, FILE *errs)
{
  vs_error err;
  vs_error_clear(&err);
  if (vs_explore_parse(&o->ex, topo, wl, &err) == 0)
    return VS_EXIT_OK;
  fprintf(errs, "vsim: %s\n", err.msg);
  return err.code == VS_EUSAGE ? VS_EXIT_USAGE : VS_EXIT_ERROR;
}

/* The hf_config file that wl (the base workload) reads with
 * model.hf_config set to value, into hf (of len): as a workload resolves
 * it (vs_workload_hf_config_path); "" for a value the key refuses (which
 * vs_vary_check reported). VS_ENOMEM without room for the copy. */
static int varied_hf_config(const vs_workload *wl, const char *value,
                            char *hf, size_t len)
{
  vs_workload *copy = malloc(sizeof *copy);
  char assignment[sizeof "model.hf_config=" + sizeof((vs_vary *)0)->values[0]];
  vs_error err;
  hf[0] = '\0';
  if (!copy)
    return VS_ENOMEM;
  vs_error_clear(&err);
  snprintf(assignment, sizeof assignment, "model.hf_config=%s", value);
  *copy = *wl;
  if (vs_workload_set(copy, assignment, &err) == 0)
    vs_workload_hf_config_path(copy, hf, len);
  free(copy);
  return 0;
}

/* The sweep's --csv is none of its inputs: the workload, the topology, or
 * the hf_config file of the base workload or of a --vary value. */
static int check_csv_not_input(const vs_capacity_opts *o, const vs_workload *wl,
                               FILE *errs)
{
  char hf[VS_OUTPUTS_PATH_LEN], key[VS_OUTPUTS_PATH_LEN];
  int code;
  vs_workload_hf_config_path(wl, hf, sizeof hf);
  code = vs_outputs_check_not_input(errs, "--csv", o->csv, o->ex.workload,
                                    o->ex.topology, hf);
  vs_outputs_file_key(o->csv, key, sizeof key);
  for (size_t k = 0; k < o->n_vary && code == VS_EXIT_OK; k++) {
    if (strcmp(o->vary[k].key, "model.hf_config") != 0)
      continue;
    for (size_t v = 0; v < o->vary[k].n && code == VS_EXIT_OK; v++) {
      if (varied_hf_config(wl, o->vary[k].values[v], hf, sizeof hf)) {
        fprintf(errs, "vsim: out of host memory\n");
        return VS_EXIT_ERROR;
      }
      if (vs_outputs_input_named(key, NULL, NULL, hf))
        code = vs_usage(errs, "--csv %s would overwrite the input file %s",
                        o->csv, hf);
    }
  }
  return code;
}

/* The options of a sweep: at least one --vary, at most 100000
 * combinations (their count in *n), each value one its key takes. Exit
 * status. */
static int check_vary(const vs_capacity_opts *o, size_t *n, FILE *errs)
{
  vs_error err;
  vs_error_clear(&err);
  if (o->n_vary == 0) {
    fprintf(errs, "vsim: sweep needs at least one --vary section.key=values\n");
    return VS_EXIT_USAGE;
  }
  *n = 1;
  for (size_t k = 0; k < o->n_vary; k++) {
    *n *= o->vary[k].n;
    if (*n > 100000) {
      fprintf(errs, "vsim: the sweep has over 100000 combinations; narrow "
                    "the --vary lists\n");
      return VS_EXIT_USAGE;
    }
  }
  if (vs_vary_check(o->vary, o->n_vary, &err) == 0)
    return VS_EXIT_OK;
  fprintf(errs, "vsim: %s\n", err.msg);
  return err.code == VS_EUSAGE ? VS_EXIT_USAGE : VS_EXIT_ERROR;
}

/* The file a --vary model.hf_config value names, resolved beside the
 * workload as a run resolves it, into real[len] ("" when it cannot be
 * resolved: the run says why). */
static int real_hf_config(const vs_workload *wl, const char *value, char *real,
                          size_t len)
{
  char hf[VS_OUTPUTS_PATH_LEN], *r;
  real[0] = '\0';
  if (varied_hf_config(wl, value, hf, sizeof hf))
    return VS_ENOMEM;
  if ((r = realpath(hf, NULL))) {
    snprintf(real, len, "%s", r);
    free(r);
  }
  return 0;
}

/* --vary model.hf_config naming one file twice, however it is spelt
 * (c.json, ./c.json): the same combinations would be swept twice. The
 * values' own check (vs_vary_check) cannot see it: it has no workload
 * folder to resolve them in. */
static int check_hf_configs_distinct(const vs_capacity_opts *o,
                                     const vs_workload *wl, FILE *errs)
{
  for (size_t k = 0; k < o->n_vary; k++) {
    const vs_vary *v = &o->vary[k];
    char(*real)[VS_OUTPUTS_PATH_LEN];
    int code = VS_EXIT_OK;
    if (strcmp(v->key, "model.hf_config") != 0)
      continue;
    if (!(real = malloc(v->n * sizeof *real))) {
      fprintf(errs, "vsim: out of host memory\n");
      return VS_EXIT_ERROR;
    }
    for (size_t i = 0; i < v->n && code == VS_EXIT_OK; i++) {
      if (real_hf_config(wl, v->values[i], real[i], sizeof real[i])) {
        fprintf(errs, "vsim: out of host memory\n");
        code = VS_EXIT_ERROR;
      }
      for (size_t j = 0; j < i && code == VS_EXIT_OK; j++)
        if (real[i][0] && strcmp(real[i], real[j]) == 0)
          code = vs_usage(errs,
                          "--vary model.hf_config lists %s twice (as "
                          "%s)",
                          v->values[j], v->values[i]);
    }
    free(real);
    if (code != VS_EXIT_OK)
      return code;
  }
  return VS_EXIT_OK;
}

/* Everything a sweep checks before simulating, in the order a user fixes
 * it: the options (exit 2), the base input (exit 1), the varied files
 * against it (exit 2: they can only be resolved beside it), the output
 * (exit 1). Sets *n to the number of combinations. */
static int sweep_checks(const vs_capacity_opts *o, size_t *n, FILE *errs)
{
  vs_topology *topo = malloc(sizeof *topo);
  vs_workload *wl = malloc(sizeof *wl);
  int code = check_vary(o, n, errs);

  if (code == VS_EXIT_OK && (!topo || !wl)) {
    fprintf(errs, "vsim: out of host memory\n");
    code = VS_EXIT_ERROR;
  }
  if (code == VS_EXIT_OK)
    code = parse_base(o, topo, wl, errs);
  if (code == VS_EXIT_OK)
    code = check_hf_configs_distinct(o, wl, errs);
  /* only rank 0 of an MPI job writes */
  if (code == VS_EXIT_OK && o->csv && vs_split_root())
    code = check_csv_not_input(o, wl, errs);
  free(topo);
  free(wl);
  return code;
}

static bool vary_has_gpus(const vs_capacity_opts *o)
{
  for (size_t k = 0; k < o->n_vary; k++)
    if (strcmp(o->vary[k].key, "gpus") == 0)
      return true;
  return false;
}

/* Fills the n candidates of the sweep's combinations. */
static int sweep_candidates(const vs_capacity_opts *o, vs_candidate *cands,
                            size_t n, FILE *errs)
{
  for (size_t i = 0; i < n; i++) {
    const char *vals[VS_VARY_MAX];
    combo_values(o, i, vals);
    cands[i].gpus = o->gpus;
    for (size_t k = 0; k < o->n_vary; k++) {
      const char *key = o->vary[k].key;
      if (strcmp(key, "gpus") == 0)
        cands[i].gpus = strtoull(vals[k], NULL, 10); /* checked: 1..1e6 */
      else if (vs_candidate_set(&cands[i], "%s=%s", key, vals[k])) {
        fprintf(errs, "vsim: --vary %s=%s: value too long\n", key, vals[k]);
        return VS_EXIT_USAGE;
      }
    }
  }
  return VS_EXIT_OK;
}

/* Replaces the first `from` in reason (of len bytes) with `to`, where it
 * fits. */
static void replace_once(char *reason, size_t len, const char *from,
                         const char *to)
{
  char *at = strstr(reason, from);
  size_t nf = strlen(from), nt = strlen(to);
  if (at && strlen(reason) - nf + nt < len) {
    memmove(at + nt, at + nf, strlen(at + nf) + 1);
    memcpy(at, to, nt);
  }
}

/* An invalid combination's reason names its varied keys as the user gave
 * them (--vary), not as the overrides they became (--set). */
static void relabel_reason(vs_candidate *c, bool gpus_varied)
{
  char from[32], to[40];
  for (size_t k = 0; c->status == VS_EVAL_INVALID && k < c->n_sets; k++)
    vs_explore_relabel(c->reason, sizeof c->reason, c->sets[k], "--vary ");
  if (c->status != VS_EVAL_INVALID || !gpus_varied)
    return;
  /* the workload's layout check speaks of --gpus N, which was --vary
   * gpus, and of dropping dp "or --gpus" where dp contradicts it */
  snprintf(from, sizeof from, "--gpus %llu", (unsigned long long)c->gpus);
  snprintf(to, sizeof to, "--vary gpus=%llu", (unsigned long long)c->gpus);
  replace_once(c->reason, sizeof c->reason, from, to);
  replace_once(c->reason, sizeof c->reason, "drop dp or --gpus",
               "drop dp or --vary gpus");
}

/* One line per combination on stdout, and the totals. Returns how many
 * fit. */
static size_t sweep_table(const vs_capacity_opts *o, const vs_candidate *cands,
                          size_t n, FILE *out)
{
  size_t fits = 0, tight = 0, ooms = 0;
  for (size_t k = 0; k < o->n_vary; k++)
    fprintf(out, "%-22s ", o->vary[k].key);
  fprintf(out, "%-8s %10s %10s %12s\n", "status", "peak", "step", "tokens/s");
  for (size_t i = 0; i < n; i++) {
    const vs_candidate *c = &cands[i];
    char peak[16], step[16] = "-", tokens[32] = "-";
    const char *vals[VS_VARY_MAX];
    combo_values(o, i, vals);
    for (size_t k = 0; k < o->n_vary; k++)
      fprintf(out, "%-22s ", vals[k]);
    fits += c->status == VS_EVAL_FITS;
    tight += c->status == VS_EVAL_TIGHT;
    ooms += c->status == VS_EVAL_OOM;
    if (c->status == VS_EVAL_INVALID) {
      fprintf(out, "%-8s %s\n", "invalid", c->reason);
      continue;
    }
    if (c->timed) {
      vs_format_seconds(c->step_time_s, step, sizeof step);
      snprintf(tokens, sizeof tokens, "%.0f", c->tokens_per_s);
    }
    fprintf(out, "%-8s %10s %10s %12s", vs_cap_status_name(c->status),
            vs_format_bytes(c->worst.peak_used_bytes, peak, sizeof peak), step,
            tokens);
    /* the peak is the GPU's: an oom of a GPU that fits is a node's host
       memory or NVMe, which the row names (a review read it as the GPU's) */
    if (c->status == VS_EVAL_OOM && c->worst.fits)
      fprintf(out, "  %.*s", (int)strcspn(c->reason, ";"), c->reason);
    fputc('\n', out);
  }
  fprintf(out, "%zu combinations: %zu fit, ", n, fits);
  if (tight)
    fprintf(out, "%zu tight (less than [runtime] reserve free), ", tight);
  fprintf(out, "%zu out of memory, %zu invalid\n", ooms,
          n - fits - tight - ooms);
  return fits;
}

static int write_sweep_csv(const vs_capacity_opts *o, const vs_candidate *cands,
                           size_t n, vs_error *err)
{
  vs_csv c;
  int rc = vs_csv_open(&c, o->csv, err);
  if (rc)
    return rc;
  for (size_t k = 0; k < o->n_vary; k++)
    vs_csv_text(&c, o->vary[k].key);
  vs_summary_csv_header(&c);
  vs_cap_tail_header(&c);
  vs_csv_row(&c);
  for (size_t i = 0; i < n; i++) {
    const char *vals[VS_VARY_MAX];
    combo_values(o, i, vals);
    for (size_t k = 0; k < o->n_vary; k++)
      vs_csv_text(&c, vals[k]);
    vs_cap_summary_or_empty(&c, &cands[i]);
    vs_cap_tail_columns(&c, &cands[i]);
    vs_csv_row(&c);
  }
  return vs_csv_commit(&c, err);
}

static bool all_invalid(const vs_candidate *cands, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (cands[i].status != VS_EVAL_INVALID)
      return false;
  return n > 0;
}

int vs_capacity_sweep(const vs_capacity_opts *o, FILE *out, FILE *errs)
{
  size_t n = 0, fits;
  vs_candidate *cands;
  vs_error err;
  int code;

  vs_error_clear(&err);
  if ((code = sweep_checks(o, &n, errs)) != VS_EXIT_OK)
    return code;
  cands = calloc(n, sizeof *cands);
  if (!cands) {
    fprintf(errs, "vsim: out of host memory for %zu combinations\n", n);
    return VS_EXIT_ERROR;
  }
  if ((code = sweep_candidates(o, cands, n, errs)) != VS_EXIT_OK)
    goto done;
  if (vs_split_explore(&o->ex, cands, n, &err)) {
    fprintf(errs, "vsim: %s\n", err.msg);
    code = VS_EXIT_ERROR;
    goto done;
  }
  if (!vs_split_root())
    goto done; /* another MPI rank: rank 0 reports and writes */
  for (size_t i = 0; i < n; i++)
    relabel_reason(&cands[i], vary_has_gpus(o));
  fits = sweep_table(o, cands, n, out);
  if (all_invalid(cands, n)) {
    /* nothing was simulated: the input is wrong, not the memory short
     * (and, as for any bad input, nothing is written) */
    fprintf(errs, "vsim: every combination is invalid, so nothing was "
            "simulated; the first: %s\n", cands[0].reason);
    code = VS_EXIT_ERROR;
  } else if (o->csv && write_sweep_csv(o, cands, n, &err)) {
    fprintf(errs, "vsim: --csv %s\n", err.msg);
    code = VS_EXIT_ERROR;
  } else if (fits == 0) {
    code = VS_EXIT_OOM;
  }
done:
  free(cands);
  return code;
}
