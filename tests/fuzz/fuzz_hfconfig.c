/* fuzz_hfconfig.c - libFuzzer target: a Hugging Face config.json through
 * the reader `[model] hf_config` uses (vs_hf_config_read), then, when it
 * maps, a workload that names it loaded as the command line loads one and
 * shown and (when small) simulated by fz_job.
 *
 * Input: the JSON text, read by path from an in-memory file. A config
 * that maps must give every [model] key it promises, each a value the
 * workload's key table accepts or refuses with a message; anything else
 * aborts. */
#include "explore.h"
#include "fuzz.h"
#include "hfconfig.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fz_file json_file, workload_file;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  fz_file_open(&json_file, "config.json");
  fz_file_open(&workload_file, "workload.ini");
  return 0;
}

/* The workload that names the config, with a small sequence. */
static void load_workload(const char *json_path)
{
  char text[256];
  vs_explore ex = {.jobs = 1};
  vs_topology *topo = malloc(sizeof *topo);
  vs_workload *wl = malloc(sizeof *wl);
  vs_error err;
  int n = snprintf(text, sizeof text, "[model]\nhf_config = %s\nseq_len = 64\n",
                   json_path);
  if (!topo || !wl || n < 0)
    abort();
  ex.workload = fz_file_put(&workload_file, text, (size_t)n);
  vs_error_clear(&err);
  if (vs_explore_load(&ex, NULL, 0, 0, topo, wl, &err) == 0)
    fz_job(wl, topo);
  else if (err.code == VS_OK || err.msg[0] == '\0')
    abort(); /* a failure says why */
  free(topo);
  free(wl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const char *path = fz_file_put(&json_file, data, size);
  vs_hf_model hf;
  vs_error err;
  vs_error_clear(&err);
  if (vs_hf_config_read(path, &hf, &err) != 0) {
    if (err.code == VS_OK || err.msg[0] == '\0')
      abort(); /* a refusal says why */
    return 0;
  }
  if (hf.n < 7 || hf.n > VS_HF_MAX_KEYS)
    abort(); /* arch, 4 counts, tied_embeddings, dropout; ffn_hidden and
                kv_heads where the file gives them, a mixture of experts'
                keys besides */
  for (size_t i = 0; i < hf.n; i++) /* empty: a default vsim does not
                                       know, of a field the file lacks */
    if (!hf.keys[i].name || (hf.keys[i].value[0] == '\0' && !hf.keys[i].lacked))
      abort();
  load_workload(path);
  return 0;
}
