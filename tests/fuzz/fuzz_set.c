/* fuzz_set.c - libFuzzer target: the command line's `--set SEC.KEY=VALUE`
 * and `--vary KEY=V1,V2,...` values, and the unit parsers under them.
 *
 * Input: lines (empty ones skipped). A line "vary TEXT" is one --vary
 * option (at most VS_VARY_MAX of them, parsed with vs_vary_parse and, when
 * all parse, checked together with vs_vary_check as `vsim sweep` does); any
 * other line is one --set (at most MAX_SETS), "topology.SEC.KEY=VALUE"
 * going to the topology. The sets are applied through vs_explore_load onto
 * tests/data/gpt-small.ini and the built-in topology, both parsed once as
 * sweep and plan parse them; a job that then loads goes to fz_job (shown,
 * and simulated when small). Every line's value (after the first '=') is
 * also given to each parser of units.h. */
#include "capacity.h"
#include "explore.h"
#include "fuzz.h"
#include "units.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SETS 32

static vs_workload base_workload;
static vs_topology base_topology;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  vs_error err;
  (void)argc;
  (void)argv;
  vs_error_clear(&err);
  if (vs_workload_load_base(&base_workload, VSIM_FUZZ_BASE_WORKLOAD, &err) ||
      vs_topology_load_base(&base_topology, NULL, &err)) {
    fprintf(stderr, "fuzz_set: the base files do not load: %s\n", err.msg);
    abort();
  }
  return 0;
}

/* Every parser of units.h on text; their results are not used. */
static void parse_units(const char *text)
{
  const char *why;
  uint64_t u;
  double d;
  bool b;
  (void)vs_parse_count(text, &u, &why);
  (void)vs_parse_size(text, &u, &why);
  (void)vs_parse_rate(text, &d, &why);
  (void)vs_parse_latency(text, &d, &why);
  (void)vs_parse_time_offset(text, &d, &why);
  (void)vs_parse_bool(text, &b, &why);
  (void)vs_parse_real(text, &d, &why);
}

/* The --set lines onto the base files, then the job to fz_job. */
static void apply_sets(const char *const *sets, size_t n)
{
  vs_explore ex = {.jobs = 1, .sets = sets, .n_sets = n,
                   .workload_base = &base_workload,
                   .topology_base = &base_topology};
  vs_topology *topo = malloc(sizeof *topo);
  vs_workload *wl = malloc(sizeof *wl);
  vs_error err;
  if (!topo || !wl)
    abort();
  vs_error_clear(&err);
  if (vs_explore_load(&ex, NULL, 0, 0, topo, wl, &err) == 0)
    fz_job(wl, topo);
  free(topo);
  free(wl);
}

/* The --vary lines: each parsed; all checked together when all parse. */
static void parse_varies(const char *const *texts, size_t n)
{
  vs_vary *vary;
  vs_error err;
  size_t parsed = 0;
  if (n == 0)
    return;
  if (!(vary = malloc(n * sizeof *vary)))
    abort();
  vs_error_clear(&err);
  while (parsed < n && vs_vary_parse(texts[parsed], &vary[parsed], &err) == 0)
    parsed++;
  if (parsed == n)
    (void)vs_vary_check(vary, n, &err);
  free(vary);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char *text = malloc(size + 1);
  const char *sets[MAX_SETS], *varies[VS_VARY_MAX];
  size_t n_sets = 0, n_varies = 0;

  if (!text)
    abort();
  memcpy(text, data, size);
  text[size] = '\0';
  for (char *line = text, *next; line; line = next) {
    const char *eq;
    if ((next = strchr(line, '\n')) != NULL)
      *next++ = '\0';
    if (line[0] == '\0')
      continue;
    eq = strchr(line, '=');
    parse_units(eq ? eq + 1 : line);
    if (strncmp(line, "vary ", 5) == 0) {
      if (n_varies < VS_VARY_MAX)
        varies[n_varies++] = line + 5;
    } else if (n_sets < MAX_SETS) {
      sets[n_sets++] = line;
    }
  }
  apply_sets(sets, n_sets);
  parse_varies(varies, n_varies);
  free(text);
  return 0;
}
