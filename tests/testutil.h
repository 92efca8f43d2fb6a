/* testutil.h - helpers shared by the CMocka tests: temporary files and
 * directories, loading a workload from text, building a pipeline's
 * programs, and running the vsim binary. */
#ifndef VS_TESTUTIL_H
#define VS_TESTUTIL_H

#include "error.h"
#include "layout.h"
#include "model.h"
#include "recipe.h"
#include "schedule.h"
#include "topology.h"
#include "workload.h"

#include <stddef.h>
#include <stdint.h>

/* Writes text to a new temporary file and returns its path (static storage
 * of the caller: buf of at least 64 bytes). Aborts the test on failure. */
char *tu_write_temp(const char *text, const char *suffix, char *buf, size_t len);

/* A new empty temporary directory in buf. */
char *tu_temp_dir(char *buf, size_t len);

/* tu_write_temp for n bytes of data, NUL bytes included. */
char *tu_write_temp_bytes(const char *data, size_t n, const char *suffix,
                          char *buf, size_t len);

/* Entries in dir other than . and .. (fails the test if dir cannot be
 * read). */
int tu_count_entries(const char *dir);

/* Removes a directory and everything in it. */
void tu_remove_dir(const char *dir);

/* Loads a workload from INI text with optional "sec.key=value" overrides and
 * a GPU count (0 = from the workload). Returns vs_workload_load's code. */
int tu_load_workload(vs_workload *wl, const char *ini, const char *const *sets,
                     size_t n_sets, uint64_t gpus, vs_error *err);

/* Loads the built-in topology (aborts the test if it fails). */
void tu_default_topology(vs_topology *topo);

/* Every stage's program of a workload, built and linked, and what they
 * are built from. */
typedef struct tu_pipeline {
  vs_workload wl;
  vs_topology topo;
  vs_model m;
  vs_recipe r;
  vs_layout lay;
  vs_program *progs;   /* [n] one per pipeline stage, in stage order */
  size_t n;
} tu_pipeline;

/* The workload ini with sets on gpus GPUs on the built-in topology, and
 * its model, recipe and layout (aborts the test if anything fails; the
 * caller releases them with vs_recipe_fini and vs_model_fini). */
void tu_build_job(const char *ini, const char *const *sets, size_t n_sets,
                  uint64_t gpus, vs_workload *wl, vs_topology *topo,
                  vs_model *m, vs_recipe *r, vs_layout *lay);

/* The pipeline of ini with sets on gpus GPUs on the built-in topology
 * (aborts the test if anything fails). Release with tu_free_pipeline. */
tu_pipeline *tu_build_pipeline(const char *ini, const char *const *sets,
                               size_t n_sets, uint64_t gpus);
void tu_free_pipeline(tu_pipeline *p);

/* Result of running the vsim binary. */
typedef struct tu_run {
  int status;          /* exit status, or -1 if it did not exit normally */
  char out[65536];     /* stdout (truncated) */
  char err[16384];     /* stderr (truncated) */
} tu_run;

/* Runs program bin with args (NULL-terminated) from the source directory,
 * capturing its exit status, stdout and stderr. */
void tu_run_program(tu_run *r, const char *bin, const char *const *args);

/* tu_run_program for VSIM_BIN. */
void tu_run_vsim(tu_run *r, const char *const *args);

/* Reads a whole file into a malloc'd string (NULL if unreadable). */
char *tu_read_file(const char *path);

/* Fails the test unless actual and expected are both finite (not inf, not
 * NaN) and |actual - expected| <= rel * |expected| (so expected 0 needs an
 * exact 0). The message names the caller's file and line. Use it for every
 * floating-point check: CMocka's assert_float_equal accepts inf and NaN. */
#define tu_assert_close(actual, expected, rel)                                 \
  tu_assert_close_at((actual), (expected), (rel), __FILE__, __LINE__)
void tu_assert_close_at(double actual, double expected, double rel,
                        const char *file, int line);

/* Fails the test unless msg contains want, where each '@' in want stands
 * for path (so "@:8:" checks a message's file:line exactly). */
void tu_assert_message_at(const char *msg, const char *want,
                          const char *path);

#endif
