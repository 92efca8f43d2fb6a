/* outputs.c - exit statuses, usage errors and the checks every output path
 * passes before a long computation (see outputs.h). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "outputs.h"

#include "csvout.h"
#include "report.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int vs_vusage(FILE *errs, const char *declined, const char *fmt, va_list ap)
{
  fprintf(errs, "vsim: ");
  vfprintf(errs, fmt, ap);
  if (declined)
    fprintf(errs, " (the next argument, '%s', is an option)", declined);
  fprintf(errs, "\n(see vsim --help)\n");
  return VS_EXIT_USAGE;
}

int vs_usage(FILE *errs, const char *fmt, ...)
{
  va_list ap;
  int rc;
  va_start(ap, fmt);
  rc = vs_vusage(errs, NULL, fmt, ap);
  va_end(ap);
  return rc;
}


#define PATH_LEN VS_OUTPUTS_PATH_LEN

/* errs gets err's message as vsim's: a usage error (VS_EUSAGE) with the
 * pointer to --help, VS_EXIT_ERROR otherwise. */
static int report_check(FILE *errs, const vs_error *err)
{
  if (err->code == VS_EUSAGE)
    return vs_usage(errs, "%s", err->msg);
  fprintf(errs, "vsim: %s\n", err->msg);
  return VS_EXIT_ERROR;
}

int vs_outputs_check(FILE *errs, const char *option, const char *path)
{
  vs_error err;
  vs_error_clear(&err);
  return vs_csv_check_path(option, path, &err) ? report_check(errs, &err)
                                               : VS_EXIT_OK;
}

/* --csv DIR: an existing directory whose files can be written, or
 * one that can be created (vs_report_write_csv creates it after the
 * simulation; nothing is created here). */
int vs_outputs_check_csv_dir(FILE *errs, const char *dir)
{
  char parent[PATH_LEN], file[PATH_LEN];
  struct stat st;
  vs_error err;
  int code = VS_EXIT_OK;

  if (*dir == '\0')
    return vs_usage(errs, "%s needs a directory, got ''", "--csv");
  if (stat(dir, &st) != 0) {
    if (lstat(dir, &st) == 0 && S_ISLNK(st.st_mode)) {
      fprintf(errs, "vsim: --csv %s: " VS_CSV_DANGLING_DIR "\n", dir);
      return VS_EXIT_ERROR;
    }
    if (!vs_csv_dir_of(dir, parent, sizeof parent)) {
      fprintf(errs, "vsim: --csv %s: path too long\n", dir);
      return VS_EXIT_ERROR;
    }
    vs_error_clear(&err);
    return vs_csv_check_dir("--csv", dir, parent, &err)
               ? report_check(errs, &err)
               : VS_EXIT_OK;
  }
  if (!S_ISDIR(st.st_mode)) {
    fprintf(errs, "vsim: --csv %s: exists and is not a directory\n", dir);
    return VS_EXIT_ERROR;
  }
  for (size_t i = 0; code == VS_EXIT_OK && i < VS_REPORT_CSV_FILES; i++) {
    snprintf(file, sizeof file, "%s/%s", dir, vs_report_csv_names[i]);
    code = vs_outputs_check(errs, "--csv", file);
  }
  return code;
}

/* path with empty and "." components removed ("./a//b" -> "a/b"), the
 * spelling compared when nothing of it exists yet. */
static void normalize(const char *path, char *out, size_t len)
{
  size_t used = 0;
  out[0] = '\0';
  if (*path == '/')
    used = (size_t)snprintf(out, len, "/");
  for (const char *p = path; *p && used < len;) {
    size_t n = strcspn(p, "/");
    if (n > 0 && !(n == 1 && *p == '.'))
      used += (size_t)snprintf(out + used, len - used, "%s%.*s",
                               used > 0 && out[used - 1] != '/' ? "/" : "",
                               (int)n, p);
    p += n;
    while (*p == '/')
      p++;
  }
}

/* Symbolic links followed a whole chain deep at most (Linux's MAXSYMLINKS,
 * the most open(2) follows before ELOOP). */
#define LINK_HOPS 40

/* Where writing path would create a file when path is a dangling symbolic
 * link (or a chain of them): the last link's target, relative targets
 * read from their link's directory, into out; false when path is no
 * dangling link (or the chain is too long or unreadable). */
static bool dangling_target(const char *path, char *out, size_t len)
{
  char cur[PATH_LEN], target[PATH_LEN], dir[PATH_LEN];
  struct stat st;
  if (snprintf(cur, sizeof cur, "%s", path) >= (int)sizeof cur)
    return false;
  for (int hop = 0; hop < LINK_HOPS; hop++) {
    ssize_t n;
    if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) /* past the links */
      return hop > 0 && snprintf(out, len, "%s", cur) < (int)len;
    n = readlink(cur, target, sizeof target - 1);
    if (n < 0 || (size_t)n >= sizeof target - 1)
      return false;
    target[n] = '\0';
    if (target[0] != '/' && vs_csv_dir_of(cur, dir, sizeof dir)) {
      if (snprintf(cur, sizeof cur, "%s/%s", dir, target) >= (int)sizeof cur)
        return false;
    } else if (snprintf(cur, sizeof cur, "%s", target) >= (int)sizeof cur) {
      return false;
    }
  }
  return false;
}

/* One name per file, whatever spelling leads to it: the file resolved
 * when it exists, else its resolved directory and its name (a dangling
 * link's by where it points), else the normalized path. */
bool vs_outputs_file_key(const char *path, char *key, size_t len)
{
  char norm[PATH_LEN], dir[PATH_LEN], target[PATH_LEN];
  char *real = realpath(path, NULL);
  int n;
  if (!real && dangling_target(path, target, sizeof target))
    path = target;
  normalize(path, norm, sizeof norm);
  if (!real && vs_csv_dir_of(norm, dir, sizeof dir) &&
      (real = realpath(dir, NULL))) {
    const char *base = strrchr(norm, '/');
    n = snprintf(key, len, "%s/%s", real, base ? base + 1 : norm);
  } else {
    n = snprintf(key, len, "%s", real ? real : norm);
  }
  free(real);
  return strlen(path) < sizeof norm && n >= 0 && (size_t)n < len;
}

/* The input file (workload, topology or hf_config; any may be NULL or "")
 * whose file_key is key, or NULL. */
const char *vs_outputs_input_named(const char *key, const char *workload,
                                   const char *topology, const char *hf_config)
{
  const char *inputs[] = {workload, topology, hf_config};
  char in_key[PATH_LEN];
  for (size_t k = 0; k < sizeof inputs / sizeof *inputs; k++) {
    if (!inputs[k] || !inputs[k][0])
      continue;
    vs_outputs_file_key(inputs[k], in_key, PATH_LEN);
    if (strcmp(key, in_key) == 0)
      return inputs[k];
  }
  return NULL;
}

int vs_outputs_check_not_input(FILE *errs, const char *option,
                               const char *path, const char *workload,
                               const char *topology, const char *hf_config)
{
  char key[PATH_LEN];
  const char *in;
  int code = vs_outputs_check(errs, option, path);
  if (code != VS_EXIT_OK)
    return code;
  vs_outputs_file_key(path, key, PATH_LEN);
  if ((in = vs_outputs_input_named(key, workload, topology, hf_config)) !=
      NULL)
    code = vs_usage(errs, "%s %s would overwrite the input file %s", option,
                 path, in);
  return code;
}

