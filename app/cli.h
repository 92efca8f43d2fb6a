/* cli.h - the vsim command line: parses arguments, runs the command and
 * returns the process exit status (docs/DESIGN.md; outputs.h): 0 done and
 * everything fits, 3 simulated out-of-memory, 1 bad input or error, 2 bad
 * usage. Writes the report to out and every message to errs, once; a
 * report that could not be written to out (a full disk, a closed pipe) is
 * reported and exits 1. */
#ifndef VS_CLI_H
#define VS_CLI_H

#include "outputs.h"

#include <stdio.h>

int vs_cli_main(int argc, char **argv, FILE *out, FILE *errs);

#endif
