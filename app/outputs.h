/* outputs.h - what every command shares: the process exit statuses, the
 * usage-error message, and the checks an output path passes before a long
 * computation (a run or a sweep can take minutes, and an output that cannot
 * be written is found before any of it). Nothing here writes an output. */
#ifndef VS_OUTPUTS_H
#define VS_OUTPUTS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum {
  VS_EXIT_OK = 0,
  VS_EXIT_ERROR = 1,
  VS_EXIT_USAGE = 2,
  VS_EXIT_OOM = 3
};

/* "vsim: MESSAGE" and the pointer to --help on errs; when an option went
 * without its value because the next argument (declined, may be NULL) is an
 * option, says so. Returns VS_EXIT_USAGE. */
int vs_vusage(FILE *errs, const char *declined, const char *fmt, va_list ap);
int vs_usage(FILE *errs, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));


/* Checks that the file `path` given to `option` can be written: it is not
 * a directory and its directory exists and is writable. Writes nothing.
 * Prints one message naming the option and path and returns VS_EXIT_ERROR
 * (VS_EXIT_USAGE for a path that can only name a directory); VS_EXIT_OK
 * when it can. */
int vs_outputs_check(FILE *errs, const char *option, const char *path);

/* --csv DIR: an existing directory whose files (vs_report_csv_names) can be written, or one
 * that can be created (nothing is created here). Exit status as above. */
int vs_outputs_check_csv_dir(FILE *errs, const char *dir);

/* vs_outputs_check, and a usage error when path names the workload, the
 * topology or the hf_config file (vs_workload_hf_config_path; NULL or "":
 * none), which writing would destroy. */
int vs_outputs_check_not_input(FILE *errs, const char *option,
                               const char *path, const char *workload,
                               const char *topology, const char *hf_config);

/* One name per file, whatever spelling leads to it (into key, of len): the
 * file resolved when it exists, else its resolved directory and its name,
 * else the normalized path. False when path or its name is too long for
 * the checks (VS_OUTPUTS_PATH_LEN; the key is then cut short). */
bool vs_outputs_file_key(const char *path, char *key, size_t len);

/* The input file (workload, topology or hf_config; any may be NULL or "")
 * whose file key is key, or NULL. */
const char *vs_outputs_input_named(const char *key, const char *workload,
                                   const char *topology,
                                   const char *hf_config);

/* Longest path the checks handle. */
#define VS_OUTPUTS_PATH_LEN 4096

#endif
