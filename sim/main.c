/* main.c - the vsim executable: everything is in cli.c. */
#include "cli.h"

int main(int argc, char **argv)
{
  return vs_cli_main(argc, argv, stdout, stderr);
}
