/* main.c - the vsim executable: everything is in cli.c. Under mpirun
 * (a VSIM_MPI build) every rank runs plan and sweep, sharing the search
 * (mpi_split.h); only rank 0 prints and writes, every rank exits with its
 * status. */
#include "cli.h"
#include "csvout.h"
#include "mpi_split.h"

#include <malloc.h>
#include <stdio.h>

int main(int argc, char **argv)
{
  int code = 0;
  FILE *sink;

  /* Sweeps and plans build and free thousands of large programs: keep that
   * memory in the heap for reuse rather than returning it to the kernel and
   * faulting it in again (glibc's default maps blocks over 128 KiB). */
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  vs_csv_cleanup_on_signals(); /* Ctrl-C leaves no temporary files */
  if (vs_split_init(&argc, &argv))
    return 1;
  if (vs_split_root()) {
    code = vs_cli_main(argc, argv, stdout, stderr);
  } else if (vs_split_runs(argc, argv)) {
    /* its share of the search; what it would print, rank 0 prints */
    sink = fopen("/dev/null", "w");
    code = vs_cli_main(argc, argv, sink ? sink : stderr, sink ? sink : stderr);
    if (sink)
      fclose(sink);
  }
  return vs_split_finish(code);
}
