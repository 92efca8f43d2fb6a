/* bench_run.c - times full simulations (load, build, engine) and reports wall
 * time and simulated events per second. Not a test: run it by hand.
 *
 *   build/tests/bench/bench_run [WORKLOAD.ini GPUS [stage|all]]...
 * Without arguments: GPT-3 175B on 1024 GPUs (ZeRO-3), Llama-3 405B on
 * 16,384 GPUs (tp 8, pp 16, interleaved, dp 128), each with one rank per
 * stage and with every rank, and Llama-2-7B on 8 GPUs. */
#include "simulate.h"

#include <gsl/gsl_errno.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int bench(const char *workload, uint64_t gpus, bool all_ranks,
                 const char *set)
{
  vs_topology topo;
  vs_workload wl;
  vs_sim sim;
  vs_sim_opts opts = {.all_ranks = all_ranks};
  vs_error err;
  double best = 1e30;
  uint64_t events = 0;
  int reps = all_ranks && gpus > 4096 ? 1 : 5;

  vs_error_clear(&err);
  for (int i = 0; i < reps; i++) {
    double t0 = now();
    if (vs_topology_load(&topo, NULL, NULL, 0, &err) ||
        vs_workload_load(&wl, workload, set ? &set : NULL, set ? 1 : 0, gpus,
                         &err) ||
        vs_sim_run(&sim, &wl, &topo, &opts, &err)) {
      fprintf(stderr, "bench: %s\n", err.msg);
      return 1;
    }
    double t = now() - t0;
    if (t < best)
      best = t;
    events = sim.stats.events;
    if (i == reps - 1)
      printf("%-28s %-26s gpus %5llu ranks %-5s simulated ranks %5zu  events "
             "%9llu  wall %8.4f s (best of %d)  %.3g events/s  step %.3f s\n",
             strrchr(workload, '/') ? strrchr(workload, '/') + 1 : workload,
             set ? set : "", (unsigned long long)gpus,
             all_ranks ? "all" : "stage",
             sim.n_ranks, (unsigned long long)events, best, reps,
             (double)events / best, sim.step_time_s);
    vs_sim_fini(&sim);
  }
  return 0;
}

int main(int argc, char **argv)
{
  int rc = 0;
  gsl_set_error_handler_off();
  if (argc > 1) {
    for (int i = 1; i + 1 < argc; i += 3) {
      bool all = i + 2 < argc && strcmp(argv[i + 2], "all") == 0;
      rc |= bench(argv[i], strtoull(argv[i + 1], NULL, 10), all, NULL);
    }
    return rc;
  }
  /* the caching-allocator emulation against exact accounting (issue 4) */
  rc |= bench(VSIM_SOURCE_DIR "/workloads/gpt3-175b.ini", 1024, false,
              "runtime.allocator=exact");
  rc |= bench(VSIM_SOURCE_DIR "/workloads/gpt3-175b.ini", 1024, false,
              "runtime.allocator=caching");
  rc |= bench(VSIM_SOURCE_DIR "/workloads/gpt3-175b.ini", 1024, true,
              "runtime.allocator=exact");
  rc |= bench(VSIM_SOURCE_DIR "/workloads/gpt3-175b.ini", 1024, true,
              "runtime.allocator=caching");
  rc |= bench(VSIM_SOURCE_DIR "/workloads/llama3-405b.ini", 16384, false, NULL);
  rc |= bench(VSIM_SOURCE_DIR "/workloads/llama3-405b.ini", 16384, true, NULL);
  rc |= bench(VSIM_SOURCE_DIR "/workloads/llama2-7b.ini", 8, false, NULL);
  /* offload: copies and the CPU step on shared resources, host memory */
  rc |= bench(VSIM_SOURCE_DIR "/workloads/llama2-70b-finetune-offload.ini", 8,
              false, "training.offload_activations=cpu");
  rc |= bench(VSIM_SOURCE_DIR "/workloads/llama2-70b-finetune-offload.ini", 8,
              true, "training.offload_activations=cpu");
  return rc;
}
