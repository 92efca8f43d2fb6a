/* fuzz_workload.c - libFuzzer target: workload.ini and topology.ini text
 * through the loader `vsim run` uses (vs_explore_load), then, when the job
 * loads, what `vsim show` and `vsim run` do with it (fz_job: a simulation
 * when it is small).
 *
 * Input: the workload's text, optionally followed by a line that starts
 * with "%%" and the topology's text (without one: the built-in topology).
 * A whole number after the "%%" is the run's --gpus ("%% 16"). Both files
 * are in-memory files read by path, as the command line reads them. */
#include "explore.h"
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static fz_file workload_file, topology_file;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  fz_file_open(&workload_file, "workload.ini");
  fz_file_open(&topology_file, "topology.ini");
  return 0;
}

/* The "%%" line in data[0..size), or NULL: at the start or after a '\n'. */
static const uint8_t *separator(const uint8_t *data, size_t size)
{
  for (size_t i = 0; i + 1 < size; i++)
    if (data[i] == '%' && data[i + 1] == '%' && (i == 0 || data[i - 1] == '\n'))
      return data + i;
  return NULL;
}

/* The --gpus after "%%" on the separator line sep (ending at end): a whole
 * number from 1 to 1000000 as the command line takes it, else 0 (from the
 * workload). */
static uint64_t gpus_after(const uint8_t *sep, const uint8_t *end)
{
  uint64_t g = 0;
  const uint8_t *p = sep + 2;
  while (p < end && *p == ' ')
    p++;
  for (; p < end && *p >= '0' && *p <= '9' && g <= 1000000; p++)
    g = g * 10 + (uint64_t)(*p - '0');
  return g <= 1000000 ? g : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const uint8_t *sep = separator(data, size), *end = data + size;
  vs_explore ex = {.jobs = 1};
  vs_topology *topo = malloc(sizeof *topo);
  vs_workload *wl = malloc(sizeof *wl);
  uint64_t gpus = 0;
  vs_error err;

  if (!topo || !wl)
    abort();
  ex.workload =
      fz_file_put(&workload_file, data, sep ? (size_t)(sep - data) : size);
  if (sep) {
    const uint8_t *nl = memchr(sep, '\n', (size_t)(end - sep));
    const uint8_t *text = nl ? nl + 1 : end;
    gpus = gpus_after(sep, nl ? nl : end);
    ex.topology = fz_file_put(&topology_file, text, (size_t)(end - text));
  }
  vs_error_clear(&err);
  if (vs_explore_load(&ex, NULL, 0, gpus, topo, wl, &err) == 0)
    fz_job(wl, topo);
  free(topo);
  free(wl);
  return 0;
}
