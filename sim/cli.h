/* cli.h - the vsim command line: parses arguments, runs the command and
 * returns the process exit status (DESIGN.md): 0 done and everything fits,
 * 3 simulated out-of-memory, 1 bad input or error, 2 bad usage. Writes the
 * report to out and every message to errs, once. */
#ifndef VS_CLI_H
#define VS_CLI_H

#include <stdio.h>

enum {
  VS_EXIT_OK = 0,
  VS_EXIT_ERROR = 1,
  VS_EXIT_USAGE = 2,
  VS_EXIT_OOM = 3
};

int vs_cli_main(int argc, char **argv, FILE *out, FILE *errs);

/* Checks, before a long computation, that the file `path` given to
 * `option` can be written: it is not a directory and its directory exists
 * and is writable. Writes nothing. Prints one message naming the option
 * and path and returns VS_EXIT_ERROR (VS_EXIT_USAGE for a path that can
 * only name a directory); VS_EXIT_OK when it can. */
int vs_cli_check_output(FILE *errs, const char *option, const char *path);

/* vs_cli_check_output, and a usage error when path names the workload or
 * topology file (NULL: none), which writing would destroy. */
int vs_cli_check_output_not_input(FILE *errs, const char *option,
                                  const char *path, const char *workload,
                                  const char *topology);

#endif
