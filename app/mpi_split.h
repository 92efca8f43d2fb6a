/* mpi_split.h - a search's candidates split over the processes of an MPI
 * job (`mpirun -n N vsim plan|sweep ...`): candidate i is evaluated by
 * worker i % W, the W simulating ranks (round-robin: neighbouring candidates
 * cost alike, so every worker gets a like share), and every result is gathered to rank 0, which then goes on
 * exactly as one process would (the same report, the same CSV). The other
 * ranks print and write nothing and exit with rank 0's status. `--jobs`
 * stays the worker threads of each rank; only the main thread calls MPI.
 *
 * Built without VSIM_MPI, or started without an MPI launcher, everything
 * here is one process: rank 0 of 1, and vs_split_explore is vs_explore_all.
 * No state of its own: the rank and size are MPI's. */
#ifndef VS_MPI_SPLIT_H
#define VS_MPI_SPLIT_H

#include "explore.h"
#include "error.h"

#include <stdbool.h>
#include <stddef.h>

/* Starts MPI (threads funneled) when built with it and started by a
 * launcher (mpirun sets OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK); else
 * does nothing. 0, or -1 after a message on stderr when MPI fails. */
int vs_split_init(int *argc, char ***argv);

/* True on rank 0 (and in one process): the rank that prints and writes. */
bool vs_split_root(void);

/* True when this process runs the command of argv: rank 0 always, the
 * others only for the commands that split their search (plan, sweep); the
 * rest (run, show, fit) are rank 0's alone. */
bool vs_split_runs(int argc, char **argv);

/* Evaluates the n candidates as vs_explore_all does, candidate i on rank
 * i % size. Collective: every rank calls it with the same candidates (each
 * builds them alike from the same arguments and files). On return rank 0's
 * cands hold every outcome, as one process would have them; another rank's
 * hold only its own share. An error on any rank is an error on all (rank 0
 * names its own, or says another rank failed), and so is a rank that
 * stopped before the search (its files missing on its host), or ranks
 * whose input files differ (a hash of the workload, the topology and its
 * hf_config, compared before the search): VS_EINPUT, never a hang. On each host
 * only the first max(1, cores / ex->jobs) ranks simulate
 * (VSIM_MPI_WORKERS_PER_HOST=N overrides), so that ranks beyond the cores do
 * not take turns on them; the rest wait asleep. Cost: one message of n /
 * workers candidates from each worker to rank 0. */
int vs_split_explore(const vs_explore *ex, vs_candidate *cands, size_t n,
                     vs_error *err);

/* Sets *value on every rank to rank 0's (a broadcast): how the ranks
 * agree on a decision only rank 0 can make (it alone holds every outcome).
 * Collective, like vs_split_explore, with its error when another rank
 * stopped; in one process it changes nothing and returns 0. */
int vs_split_agree(bool *value, vs_error *err);

/* Rank 0's code on every rank (a broadcast, once every rank got here),
 * then MPI finished; code unchanged in one process. */
int vs_split_finish(int code);

#endif
