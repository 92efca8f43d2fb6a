/* capacity.h - capacity planning on full simulations: the largest value of
 * a key that fits (fit), a grid of combinations (sweep), and the layouts to
 * rent ranked by cost (plan). Each prints its report to `out` and returns a
 * process exit status (cli.h): 0, 3 when nothing fits, 1 on bad input. */
#ifndef VS_CAPACITY_H
#define VS_CAPACITY_H

#include "explore.h"

#include <stdio.h>

#define VS_VALUES_MAX 1024
#define VS_VARY_MAX 8

/* A key and the values a sweep gives it. */
typedef struct vs_vary {
  char key[64];                      /* "training.micro_batch", "gpus" */
  char values[VS_VALUES_MAX][48];    /* as text */
  size_t n;
} vs_vary;

/* Parses "key=v1,v2,..." where an item "a..b" expands to a range: after a
 * previous item p it continues p's progression (doubling if a = 2p, else
 * steps of a - p), alone it counts a, a+1, ..., b. "1,2,4..64" is the
 * powers of two from 1 to 64; "1..16" sixteen values. VS_EUSAGE with a
 * message on a malformed list or more than VS_VALUES_MAX values. */
int vs_vary_parse(const char *text, vs_vary *out, vs_error *err);

/* Checks a sweep's n --vary options before anything is simulated: each
 * key given once, gpus values whole numbers from 1 to 1000000, and every
 * other value one its key accepts (a key of workload.ini, or of
 * topology.ini after "topology."), each checked alone; whether values fit
 * together is each combination's outcome. VS_EUSAGE with a message naming
 * the --vary option; VS_ENOMEM. */
int vs_vary_check(const vs_vary *vary, size_t n, vs_error *err);

typedef struct vs_capacity_opts {
  vs_explore ex;                     /* workload, topology, base sets, jobs */
  uint64_t gpus;                     /* --gpus, 0 = from the workload */
  const char *csv;                   /* --csv FILE (sweep, plan) */
  vs_vary vary[VS_VARY_MAX];         /* --vary (sweep) */
  size_t n_vary;
  const char *fit_key;               /* --vary-key (fit) */
  uint64_t max_gpus;                 /* --max-gpus (plan) */
  size_t top;                        /* --top (plan) */
} vs_capacity_opts;

/* The uneven split plan tries when pp does not divide the layers, as
 * Megatron-LM's --decoder-first-pipeline-num-layers and
 * --decoder-last-pipeline-num-layers allow: every stage gets
 * ceil(layers / pp), then one layer comes off the first stage, the last,
 * the second, the second to last, ... until they add up to layers (the
 * first and last stages also hold the embedding and the output layer).
 * Writes pp counts, each >= 1, to counts (an even split when pp divides
 * the layers). VS_EUSAGE, counts untouched, when pp is 0 or over layers.
 * O(pp). */
int vs_capacity_split(uint64_t layers, uint64_t pp, uint64_t *counts);

/* The key fit searches: --vary-key's, else the micro-batch. */
const char *vs_capacity_fit_key(const vs_capacity_opts *o);

/* Whether plan sets the key of n characters at key in every layout it
 * simulates (so that a --set of it would be overridden). */
bool vs_capacity_plan_sets(const char *key, size_t n);

int vs_capacity_fit(const vs_capacity_opts *o, FILE *out, FILE *errs);
int vs_capacity_sweep(const vs_capacity_opts *o, FILE *out, FILE *errs);
int vs_capacity_plan(const vs_capacity_opts *o, FILE *out, FILE *errs);

#endif
