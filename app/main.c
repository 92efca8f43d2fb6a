/* main.c - the vsim executable: everything is in cli.c. */
#include "cli.h"
#include "csvout.h"

#include <malloc.h>

int main(int argc, char **argv)
{
  /* Sweeps and plans build and free thousands of large programs: keep that
   * memory in the heap for reuse rather than returning it to the kernel and
   * faulting it in again (glibc's default maps blocks over 128 KiB). */
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  vs_csv_cleanup_on_signals(); /* Ctrl-C leaves no temporary files */
  return vs_cli_main(argc, argv, stdout, stderr);
}
