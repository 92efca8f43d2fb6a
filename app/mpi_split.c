/* mpi_split.c - plan and sweep across the ranks of an MPI job
 * (mpi_split.h). With VSIM_MPI undefined only the one-process half is
 * compiled: rank 0 of 1, vs_explore_all unchanged. */
#include "mpi_split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool vs_split_runs(int argc, char **argv)
{
  return vs_split_root() ||
         (argc > 1 && (strcmp(argv[1], "plan") == 0 ||
                       strcmp(argv[1], "sweep") == 0));
}

#ifndef VSIM_MPI

int vs_split_init(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  return 0;
}

bool vs_split_root(void)
{
  return true;
}

int vs_split_explore(const vs_explore *ex, vs_candidate *cands, size_t n,
                     vs_error *err)
{
  return vs_explore_all(ex, cands, n, err);
}

int vs_split_agree(bool *value, vs_error *err)
{
  (void)value;
  (void)err;
  return 0;
}

int vs_split_finish(int code)
{
  return code;
}

#else /* VSIM_MPI */

#include "workload.h"

#include <mpi.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

/* Waits for req, sleeping a millisecond between tests: Open MPI's blocking
 * calls spin, and a rank that waits (for the slowest share, for rank 0's
 * confirmations and report) would take a core from the ranks still
 * simulating when there are more ranks than cores. */
static void wait_idle(MPI_Request *req)
{
  const struct timespec ms = {0, 1000000};
  int done = 0;
  for (MPI_Test(req, &done, MPI_STATUS_IGNORE); !done;
       MPI_Test(req, &done, MPI_STATUS_IGNORE))
    nanosleep(&ms, NULL);
}

/* This process's rank and the job's size; false when MPI is not running
 * (one process). */
static bool world(int *rank, int *size)
{
  int up = 0, down = 0;
  MPI_Initialized(&up);
  if (up)
    MPI_Finalized(&down);
  if (!up || down)
    return false;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return true;
}

int vs_split_init(int *argc, char ***argv)
{
  int provided = 0;
  if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE") &&
      !getenv("PMIX_RANK"))
    return 0; /* not started by a launcher: one process */
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) !=
      MPI_SUCCESS) {
    fprintf(stderr, "vsim: MPI could not start\n");
    return -1;
  }
  if (provided < MPI_THREAD_FUNNELED) {
    fprintf(stderr, "vsim: this MPI cannot run beside threads "
                    "(MPI_THREAD_FUNNELED); run with --jobs 1 per rank or "
                    "another MPI build\n");
    MPI_Finalize();
    return -1;
  }
  return 0;
}

bool vs_split_root(void)
{
  int rank = 0, size = 1;
  return !world(&rank, &size) || rank == 0;
}

/* One round of the agreement that keeps the ranks' collectives matched
 * when one stops early (a file missing on its host): every search opens
 * with a round where the rank says done = false, vs_split_finish repeats
 * rounds with done = true until all say so. True when any rank is done. */
typedef enum { RANK_SEARCHING, RANK_DONE } rank_state;

static bool round_any_done(rank_state state, bool *all_done)
{
  int done = state == RANK_DONE;
  int mine[2] = {done, -done}, min[2] = {0, 0};
  MPI_Request req;
  MPI_Iallreduce(mine, min, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req);
  wait_idle(&req);
  *all_done = min[0] == 1;
  return min[1] == -1;
}

/* The number of the n candidates that worker w of n_workers evaluates:
 * i % n_workers == w. */
static size_t share(size_t n, int w, int n_workers)
{
  size_t r = (size_t)w, s = (size_t)n_workers;
  return n > r ? (n - r + s - 1) / s : 0;
}

/* Which ranks simulate: on each host the first max(1, cores / jobs) of its
 * ranks (or VSIM_MPI_WORKERS_PER_HOST of them, when set), so that a host's
 * ranks never run more threads than it has cores (more only take turns on
 * them, slower); the others wait. workers[r] is rank r's worker index or
 * -1; the count of workers. Rank 0 is worker 0. */
static int workers_of(unsigned jobs, int rank, int size, int *workers)
{
  MPI_Comm host;
  int local = 0, w = -1, n_workers = 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  long cap = cores > 0 ? cores / (long)(jobs ? jobs : 1) : 1;
  const char *forced = getenv("VSIM_MPI_WORKERS_PER_HOST");

  if (forced && atol(forced) > 0)
    cap = atol(forced);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank,
                      MPI_INFO_NULL, &host);
  MPI_Comm_rank(host, &local);
  MPI_Comm_free(&host);
  if (local < (cap > 1 ? cap : 1))
    w = 0; /* a worker: its index below */
  MPI_Allgather(&w, 1, MPI_INT, workers, 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < size; r++)
    if (workers[r] >= 0)
      workers[r] = n_workers++;
  return n_workers;
}

/* Rank 0 receives every other worker's share into its places (candidate
 * w, w + n_workers, ...: a strided MPI type); the other workers send
 * theirs. */
static void gather(vs_candidate *cands, size_t n, const vs_candidate *mine,
                   int rank, int size, const int *workers, int n_workers)
{
  MPI_Datatype one;
  MPI_Type_contiguous((int)sizeof(vs_candidate), MPI_BYTE, &one);
  MPI_Type_commit(&one);
  if (rank != 0 && workers[rank] >= 0) {
    MPI_Send(mine, (int)share(n, workers[rank], n_workers), one, 0, 0,
             MPI_COMM_WORLD);
  } else if (rank == 0) {
    for (size_t k = 0; k < share(n, 0, n_workers); k++)
      cands[k * (size_t)n_workers] = mine[k];
    for (int r = 1; r < size; r++) {
      int count = workers[r] < 0 ? 0 : (int)share(n, workers[r], n_workers);
      MPI_Datatype strided;
      if (count == 0)
        continue;
      MPI_Type_vector(count, 1, n_workers, one, &strided);
      MPI_Type_commit(&strided);
      MPI_Recv(&cands[workers[r]], 1, strided, r, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      MPI_Type_free(&strided);
    }
  }
  MPI_Type_free(&one);
}

/* This rank's share of cands evaluated into *mine (malloc'ed, count
 * candidates); 0 or the error. */
static int evaluate_share(const vs_explore *ex, const vs_candidate *cands,
                          size_t n, int w, int n_workers, vs_candidate **mine,
                          vs_error *err)
{
  size_t count = w < 0 ? 0 : share(n, w, n_workers);
  vs_explore local = *ex;
  local.progress = ex->progress && w == 0; /* rank 0's share stands for all */
  *mine = malloc((count ? count : 1) * sizeof **mine);
  if (!*mine)
    return vs_error_set(err, VS_ENOMEM,
                        "out of host memory for %zu candidates", count);
  for (size_t k = 0; k < count; k++)
    (*mine)[k] = cands[(size_t)w + k * (size_t)n_workers];
  return count ? vs_explore_all(&local, *mine, count, err) : 0;
}

/* FNV-1a (64-bit) of the bytes of the file at path folded into *h; a
 * file that cannot be read folds in one byte of its own, so that a rank
 * without it differs from one with it. */
static void hash_file(const char *path, uint64_t *h)
{
  unsigned char buf[65536];
  size_t n;
  FILE *f = fopen(path, "rb");
  if (!f) {
    *h = (*h ^ 0x100u) * 1099511628211u;
    return;
  }
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; i++)
      *h = (*h ^ buf[i]) * 1099511628211u;
  fclose(f);
}

/* The hash of what a search reads: the workload, the topology (none for
 * the built-in one) and the Hugging Face config the workload names. */
static uint64_t inputs_hash(const vs_explore *ex)
{
  uint64_t h = 14695981039346656037u;
  vs_workload *wl = malloc(sizeof *wl);
  vs_topology *topo = malloc(sizeof *topo);
  char hf[VS_PATH_MAX + 512];
  vs_error err;
  vs_error_clear(&err);
  hash_file(ex->workload, &h);
  if (ex->topology)
    hash_file(ex->topology, &h);
  if (wl && topo && vs_explore_parse(ex, topo, wl, &err) == 0) {
    vs_workload_hf_config_path(wl, hf, sizeof hf);
    if (hf[0])
      hash_file(hf, &h);
  }
  free(wl);
  free(topo);
  return h;
}

/* Whether every rank reads the same input files (README: the same files
 * at the same paths on every host): a rank whose workload differs would
 * simulate its share of another job, and rank 0 would report the mix as
 * one search. Collective; VS_EINPUT on every rank when they differ. */
static int same_inputs(const vs_explore *ex, vs_error *err)
{
  uint64_t h = inputs_hash(ex), mine[2] = {h, ~h}, min[2];
  MPI_Request req;
  MPI_Iallreduce(mine, min, 2, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD, &req);
  wait_idle(&req);
  if (min[0] == ~min[1]) /* the smallest hash is the largest: all alike */
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "the MPI ranks read different input files (the "
                      "workload, the topology or its hf_config differ "
                      "between hosts): every host needs the same files at "
                      "the same paths");
}

int vs_split_explore(const vs_explore *ex, vs_candidate *cands, size_t n,
                     vs_error *err)
{
  int rank = 0, size = 1, rc, worst = 0, n_workers;
  int *workers;
  MPI_Request req;
  vs_candidate *mine = NULL;

  bool all_done;

  if (!world(&rank, &size) || size == 1)
    return vs_explore_all(ex, cands, n, err);
  if (round_any_done(RANK_SEARCHING, &all_done))
    return vs_error_set(err, VS_EINPUT, "another MPI rank stopped before "
                        "the search: do all hosts have the same vsim and "
                        "files at the same paths?");
  if ((rc = same_inputs(ex, err)))
    return rc;
  workers = malloc((size_t)size * sizeof *workers);
  if (!workers) /* every rank needs the table: no way to go on together */
    MPI_Abort(MPI_COMM_WORLD, 1);
  n_workers = workers_of(ex->jobs, rank, size, workers);
  rc = evaluate_share(ex, cands, n, workers[rank], n_workers, &mine, err);
  MPI_Iallreduce(&rc, &worst, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req);
  wait_idle(&req);
  if (worst == 0)
    gather(cands, n, mine, rank, size, workers, n_workers);
  else if (rc == 0)
    vs_error_set(err, worst, "another MPI rank failed: %s",
                 vs_error_name(worst));
  free(mine);
  free(workers);
  return worst;
}

int vs_split_agree(bool *value, vs_error *err)
{
  int rank = 0, size = 1, v = *value;
  MPI_Request req;
  bool all_done;
  if (!world(&rank, &size) || size == 1)
    return 0;
  if (round_any_done(RANK_SEARCHING, &all_done))
    return vs_error_set(err, VS_EINPUT, "another MPI rank stopped before "
                        "the search: do all hosts have the same vsim and "
                        "files at the same paths?");
  MPI_Ibcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
  wait_idle(&req);
  *value = v != 0;
  return 0;
}

int vs_split_finish(int code)
{
  int rank = 0, size = 1;
  MPI_Request req;
  bool all_done = false;
  if (!world(&rank, &size))
    return code;
  while (!all_done) /* answer the searches of the ranks still in one */
    round_any_done(RANK_DONE, &all_done);
  MPI_Ibcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
  wait_idle(&req);
  MPI_Finalize();
  return code;
}

#endif /* VSIM_MPI */
