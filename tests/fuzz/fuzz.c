/* fuzz.c - in-memory input files and bounded simulation for the fuzz
 * targets (see fuzz.h). Harness state (the /dev/null sink) is static:
 * libFuzzer runs a target in one thread. */
#define _GNU_SOURCE /* memfd_create */
#include "fuzz.h"

#include "report.h"
#include "simulate.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Bounds of a job fz_job simulates: a step's events grow with the layers
 * every micro-batch passes through on every stage, and its allocations
 * with each layer's routed experts, whose weights, gradients and
 * optimizer states reach the caching allocator tensor by tensor in
 * PyTorch's own loop (its "work"); under the sanitizers a unit of work
 * takes about 0.1 ms, and 2.5 ms with the memory invariants walked after
 * every event, so those are walked on the smallest jobs only. (A 256-
 * expert, 61-layer model allocates 31,455 weight tensors, and as many
 * gradients and moments in the first step: 10^5 free blocks in one of
 * the allocator's sets when their sizes leave split-off remainders.) */
#define FZ_MAX_WORK 512           /* layers x micro-batches x stages x chunks */
#define FZ_MAX_CHECKED_WORK 16
#define FZ_MAX_AGREE_WORK 64       /* ... and --ranks all beside it */
#define FZ_MAX_AGREE_GPUS 16
#define FZ_MAX_SEQ_LEN 65536
#define FZ_MAX_GPUS 4096

void fz_file_open(fz_file *f, const char *name)
{
  f->fd = memfd_create(name, MFD_CLOEXEC);
  if (f->fd < 0) {
    perror("fuzz: memfd_create");
    abort();
  }
  snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

const char *fz_file_put(fz_file *f, const void *data, size_t n)
{
  const char *p = data;
  size_t done = 0;
  if (ftruncate(f->fd, 0) != 0) {
    perror("fuzz: ftruncate");
    abort();
  }
  while (done < n) {
    ssize_t w = pwrite(f->fd, p + done, n - done, (off_t)done);
    if (w <= 0) {
      perror("fuzz: pwrite");
      abort();
    }
    done += (size_t)w;
  }
  return f->path;
}

/* wl's work, or UINT64_MAX past 64 bits. */
static uint64_t work_of(const vs_workload *wl)
{
  uint64_t w = wl->model.layers;
  if (__builtin_mul_overflow(w, wl->model.experts ? wl->model.experts : 1,
                             &w) ||
      __builtin_mul_overflow(w, wl->grad_accum, &w) ||
      __builtin_mul_overflow(w, wl->parallel.pp, &w) ||
      __builtin_mul_overflow(w, wl->parallel.virtual_stages, &w))
    return UINT64_MAX;
  return w;
}

bool fz_small_job(const vs_workload *wl)
{
  return work_of(wl) <= FZ_MAX_WORK && wl->model.seq_len <= FZ_MAX_SEQ_LEN &&
         wl->gpus <= FZ_MAX_GPUS;
}

/* True when err comes from a check that only a bug in vsim can fail (the
 * prefixes of the invariant walkers and of the schedule's and engine's
 * consistency errors); the rest are about the input, and a job past what
 * vsim counts (VS_ELIMIT) or the host's memory (VS_ENOMEM) is an outcome. */
static bool internal_error(const vs_error *err)
{
  static const char *const prefixes[] = {
      "memory invariant", "allocator:", "schedule:", "engine:",
      "model builder:"};
  if (err->code == VS_ELIMIT || err->code == VS_ENOMEM)
    return false;
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
    if (strncmp(err->msg, prefixes[i], strlen(prefixes[i])) == 0)
      return true;
  return false;
}

/* Where the reports go: nowhere (opened once, for the process's life). */
static FILE *sink(void)
{
  static FILE *f;
  if (!f && !(f = fopen("/dev/null", "w"))) {
    perror("fuzz: /dev/null");
    abort();
  }
  return f;
}

/* What `vsim show` does with a loaded job, of any size: the model, its
 * recipe and layout, and the resolved configuration printed. */
static void show(const vs_workload *wl, const vs_topology *topo)
{
  vs_model *m = malloc(sizeof *m);
  vs_recipe r = {0};
  vs_layout lay;
  vs_error err;
  if (!m)
    abort();
  vs_error_clear(&err);
  if (vs_model_build(wl, m, &err) == 0 &&
      vs_recipe_build(wl, m, &r, &err) == 0 &&
      vs_layout_build(wl, topo, m, &r, &lay, &err) == 0)
    (void)vs_report_show(sink(), wl, topo, m, &r, &lay, &err);
  vs_recipe_fini(&r);
  vs_model_fini(m);
  free(m);
}

/* Fails (aborts) unless every GPU of all (--ranks all) has the peak and
 * end time of its stage's rank in one: data- and tensor-parallel peers are
 * identical (docs/DESIGN.md, Fidelity principles: "both must agree").
 * Under a skewed router (per_rank_load) that holds for the ranks of the
 * hottest expert, the ones stage mode stands for; the others, whose ops
 * are no longer, end no later (their memory may differ either way: the
 * caching allocator is not monotone in the sizes). */
static void check_agree(const vs_sim *one, const vs_sim *all)
{
  for (size_t i = 0; i < all->n_ranks; i++) {
    const vs_rank *a = &all->ranks[i], *o = &one->ranks[a->stage];
    bool rest = all->per_rank_load &&
                a->prog >= all->programs + all->layout.pp;
    if (rest ? a->end_ns > o->end_ns
             : a->mem.peak_used_bytes != o->mem.peak_used_bytes ||
                   a->end_ns != o->end_ns) {
      fprintf(stderr, "fuzz: --ranks all disagrees with stage mode: rank %u "
              "(stage %d) peak %llu B, end %llu ns; its stage's rank %llu B, "
              "%llu ns\n", a->id, a->stage,
              (unsigned long long)a->mem.peak_used_bytes,
              (unsigned long long)a->end_ns,
              (unsigned long long)o->mem.peak_used_bytes,
              (unsigned long long)o->end_ns);
      abort();
    }
  }
}

/* The job again with every GPU simulated, compared with one. */
static void simulate_all_ranks(const vs_sim *one)
{
  vs_sim_opts opts = {.all_ranks = true};
  vs_sim all;
  vs_error err;
  vs_error_clear(&err);
  if (vs_sim_run(&all, one->wl, one->topo, &opts, &err) != 0) {
    fprintf(stderr, "fuzz: --ranks all fails where stage mode ran: %s\n",
            err.msg);
    abort();
  }
  check_agree(one, &all);
  vs_sim_fini(&all);
}

void fz_job(const vs_workload *wl, const vs_topology *topo)
{
  vs_sim_opts opts = {.check_invariants = work_of(wl) <= FZ_MAX_CHECKED_WORK};
  vs_sim sim;
  vs_error err;

  show(wl, topo);
  if (!fz_small_job(wl))
    return;
  vs_error_clear(&err);
  if (vs_sim_run(&sim, wl, topo, &opts, &err) == 0) {
    vs_report_summary(sink(), &sim);
    vs_report_memory_summary(sink(), &sim);
    if (work_of(wl) <= FZ_MAX_AGREE_WORK && wl->gpus <= FZ_MAX_AGREE_GPUS)
      simulate_all_ranks(&sim);
    vs_sim_fini(&sim);
    return;
  }
  if (internal_error(&err)) {
    fprintf(stderr, "fuzz: a valid job failed inside vsim: %s\n", err.msg);
    abort();
  }
}
