/* fuzz.h - what the libFuzzer targets in tests/fuzz/ share.
 *
 * An fz_file is one in-memory file (memfd) that each input is written to,
 * so the targets load inputs by path through the loaders the command line
 * uses, without touching the disk. fz_job shows a loaded job and simulates
 * it when it is small enough to finish in milliseconds, and turns a failure
 * that only a bug can cause (a broken memory invariant, a schedule or
 * engine error) into a crash that libFuzzer reports. Nothing here is meant
 * for vsim itself; libFuzzer calls each target from one thread. */
#ifndef VS_FUZZ_H
#define VS_FUZZ_H

#include "topology.h"
#include "workload.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct fz_file {
  int fd;                  /* the memfd, open for the process's life */
  char path[48];           /* "/proc/self/fd/N": a path that reopens it */
} fz_file;

/* Creates an empty in-memory file called name (shown in /proc only).
 * Aborts when the system has none: every target needs one. */
void fz_file_open(fz_file *f, const char *name);

/* Replaces f's content by the n bytes of data; returns f->path. Aborts on
 * a write error (a host problem, not a finding). */
const char *fz_file_put(fz_file *f, const void *data, size_t n);

/* True when wl's step is small enough to simulate in milliseconds: layers
 * x micro-batches per step x pipeline stages x virtual stages, the
 * sequence and the GPUs each under a modest bound. */
bool fz_small_job(const vs_workload *wl);

/* What `vsim show` and `vsim run` do with a loaded job: its model, recipe
 * and layout built and the configuration printed (to /dev/null), then,
 * when fz_small_job(wl), a simulation in stage mode (the smallest jobs with
 * the memory invariants checked after every event) and its reports; a
 * small job on few GPUs is simulated again with --ranks all, which must
 * agree. An error that input can cause is an outcome; one that names an
 * internal invariant, or a disagreement, aborts. */
void fz_job(const vs_workload *wl, const vs_topology *topo);

#endif
