/* testutil.c - shared test helpers (see testutil.h). */
#define _DEFAULT_SOURCE /* mkstemps, mkdtemp */
#include "testutil.h"

#include <dirent.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

char *tu_write_temp(const char *text, const char *suffix, char *buf, size_t len)
{
  return tu_write_temp_bytes(text, strlen(text), suffix, buf, len);
}

char *tu_write_temp_bytes(const char *data, size_t n, const char *suffix,
                          char *buf, size_t len)
{
  int fd;
  snprintf(buf, len, "/tmp/vsim-test-XXXXXX%s", suffix);
  fd = mkstemps(buf, (int)strlen(suffix));
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, n), (ssize_t)n);
  close(fd);
  return buf;
}

char *tu_temp_dir(char *buf, size_t len)
{
  snprintf(buf, len, "/tmp/vsim-test-dir-XXXXXX");
  assert_non_null(mkdtemp(buf));
  return buf;
}

void tu_remove_dir(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[4096];
  if (!d)
    return;
  while ((e = readdir(d)) != NULL) {
    struct stat st;
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
      tu_remove_dir(path); /* what a test made inside it, too */
    else
      unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

int tu_load_workload(vs_workload *wl, const char *ini, const char *const *sets,
                     size_t n_sets, uint64_t gpus, vs_error *err)
{
  char path[128];
  int rc;
  tu_write_temp(ini, ".ini", path, sizeof path);
  rc = vs_workload_load(wl, path, sets, n_sets, gpus, err);
  unlink(path);
  return rc;
}

void tu_default_topology(vs_topology *topo)
{
  vs_error err;
  vs_error_clear(&err);
  if (vs_topology_load(topo, NULL, NULL, 0, &err) != 0)
    fail_msg("built-in topology: %s", err.msg);
}

static void drain(int fd, char *buf, size_t cap)
{
  size_t n = 0;
  ssize_t got;
  char sink[4096];
  while ((got = read(fd, n + 1 < cap ? buf + n : sink,
                     n + 1 < cap ? cap - 1 - n : sizeof sink)) > 0) {
    if (n + 1 < cap)
      n += (size_t)got;
  }
  buf[n] = '\0';
}

void tu_run_vsim(tu_run *r, const char *const *args)
{
  tu_run_program(r, VSIM_BIN, args);
}

void tu_run_program(tu_run *r, const char *bin, const char *const *args)
{
  char out_path[128], err_path[128];
  const char *argv[64];
  int out_fd, err_fd, status;
  size_t n = 0;
  pid_t pid;

  tu_write_temp("", ".out", out_path, sizeof out_path);
  tu_write_temp("", ".err", err_path, sizeof err_path);
  argv[n++] = bin;
  while (args[n - 1] && n + 1 < 64) {
    argv[n] = args[n - 1];
    n++;
  }
  argv[n] = NULL;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int o = open(out_path, O_WRONLY | O_TRUNC);
    int e = open(err_path, O_WRONLY | O_TRUNC);
    if (o < 0 || e < 0 || chdir(VSIM_SOURCE_DIR) != 0)
      _exit(127);
    dup2(o, 1);
    dup2(e, 2);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  assert_true(waitpid(pid, &status, 0) == pid);
  r->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  out_fd = open(out_path, O_RDONLY);
  err_fd = open(err_path, O_RDONLY);
  assert_true(out_fd >= 0 && err_fd >= 0);
  drain(out_fd, r->out, sizeof r->out);
  drain(err_fd, r->err, sizeof r->err);
  close(out_fd);
  close(err_fd);
  unlink(out_path);
  unlink(err_path);
}

char *tu_read_file(const char *path)
{
  FILE *f = fopen(path, "rb");
  char *buf;
  long n;
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  if (buf)
    buf[n] = '\0';
  fclose(f);
  return buf;
}

void tu_assert_message_at(const char *msg, const char *want,
                          const char *path)
{
  char full[512];
  size_t used = 0;
  for (const char *w = want; *w && used + 1 < sizeof full; w++) {
    if (*w == '@')
      used += (size_t)snprintf(full + used, sizeof full - used, "%s", path);
    else
      full[used++] = *w;
  }
  full[used < sizeof full ? used : sizeof full - 1] = '\0';
  if (!strstr(msg, full))
    fail_msg("message \"%s\" lacks \"%s\"", msg, full);
}

int tu_count_entries(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  assert_non_null(d);
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      n++;
  closedir(d);
  return n;
}

void tu_assert_close_at(double actual, double expected, double rel,
                        const char *file, int line)
{
  if (!isfinite(actual) || !isfinite(expected) ||
      !(fabs(actual - expected) <= rel * fabs(expected)))
    fail_msg("%s:%d: %.17g is not within %.3g (relative) of %.17g", file,
             line, actual, rel, expected);
}

void tu_build_job(const char *ini, const char *const *sets, size_t n_sets,
                  uint64_t gpus, vs_workload *wl, vs_topology *topo,
                  vs_model *m, vs_recipe *r, vs_layout *lay)
{
  vs_error err;
  vs_error_clear(&err);
  if (tu_load_workload(wl, ini, sets, n_sets, gpus, &err))
    fail_msg("workload: %s", err.msg);
  tu_default_topology(topo);
  if (vs_model_build(wl, m, &err) || vs_recipe_build(wl, m, r, &err) ||
      vs_layout_build(wl, topo, m, r, lay, &err))
    fail_msg("build: %s", err.msg);
}

tu_pipeline *tu_build_pipeline(const char *ini, const char *const *sets,
                               size_t n_sets, uint64_t gpus)
{
  tu_pipeline *p = calloc(1, sizeof *p);
  vs_error err;
  assert_non_null(p);
  vs_error_clear(&err);
  tu_build_job(ini, sets, n_sets, gpus, &p->wl, &p->topo, &p->m, &p->r,
               &p->lay);
  p->n = (size_t)p->lay.pp;
  p->progs = calloc(p->n, sizeof *p->progs);
  assert_non_null(p->progs);
  for (size_t s = 0; s < p->n; s++) {
    vs_job job = {.wl = &p->wl, .topo = &p->topo, .model = &p->m,
                  .recipe = &p->r, .layout = &p->lay};
    if (vs_schedule_build(&job, (int)s, &p->progs[s], &err))
      fail_msg("schedule: %s", err.msg);
  }
  if (vs_schedule_link(p->progs, p->n, &err))
    fail_msg("link: %s", err.msg);
  return p;
}

void tu_free_pipeline(tu_pipeline *p)
{
  for (size_t s = 0; s < p->n; s++)
    vs_program_fini(&p->progs[s]);
  free(p->progs);
  vs_recipe_fini(&p->r);
  vs_model_fini(&p->m);
  free(p);
}
