/* csvout_test.c - atomic CSV output: exact file contents, libcsv quoting,
 * the temporary-then-rename protocol, abort, and vs_make_dir. */
#include "csvout.h"
#include "testutil.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>


static bool exists(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0;
}

static void test_header_and_rows(void **state)
{
  char dir[64], path[128];
  vs_csv csv;
  vs_error err;
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ops.csv", dir);
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, path, &err), 0);
  vs_csv_header(&csv, "rank,op,delta_bytes,flops,start_s,memory_s");
  vs_csv_u64(&csv, 3);
  vs_csv_text(&csv, "qkv_proj");
  vs_csv_i64(&csv, -4096);
  vs_csv_real(&csv, 1.5e12);
  vs_csv_seconds(&csv, 0.25);
  vs_csv_seconds_sparse(&csv, 0.0);
  vs_csv_row(&csv);
  vs_csv_u64(&csv, UINT64_MAX);
  vs_csv_text(&csv, "");
  vs_csv_i64(&csv, INT64_MIN);
  vs_csv_real(&csv, 1.0 / 3.0);
  vs_csv_seconds(&csv, 1e-9);
  vs_csv_seconds_sparse(&csv, 2e-9);
  vs_csv_row(&csv);
  vs_csv_u64(&csv, 0);
  vs_csv_text(&csv, "x");
  vs_csv_i64(&csv, -7);
  vs_csv_real(&csv, 0);
  vs_csv_ns(&csv, 123456789012ull);
  vs_csv_ns(&csv, 5);
  vs_csv_row(&csv);
  assert_int_equal(vs_csv_commit(&csv, &err), 0);
  text = tu_read_file(path);
  assert_non_null(text);
  /* Numbers plainly: %llu, %lld, %.9g (1.5e12 -> "1.5e+12", 1/3 ->
   * "0.333333333"), %.9f (0.25 -> "0.250000000", 1 ns -> "0.000000001"),
   * sparse seconds as %.9f but zero as 0, nanoseconds as seconds with 9
   * decimals. An empty text field needs no quotes. */
  assert_string_equal(text,
                      "rank,op,delta_bytes,flops,start_s,memory_s\n"
                      "3,qkv_proj,-4096,1.5e+12,0.250000000,0\n"
                      "18446744073709551615,,-9223372036854775808,"
                      "0.333333333,0.000000001,0.000000002\n"
                      "0,x,-7,0,123.456789012,0.000000005\n");
  free(text);
  tu_remove_dir(dir);
}

static void test_quoting(void **state)
{
  char dir[64], path[128];
  vs_csv csv;
  vs_error err;
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/q.csv", dir);
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, path, &err), 0);
  vs_csv_text(&csv, "plain");
  vs_csv_text(&csv, "a,b");          /* comma */
  vs_csv_text(&csv, "say \"hi\"");   /* quotes are doubled (RFC 4180) */
  vs_csv_text(&csv, "two\nlines");   /* newline */
  vs_csv_row(&csv);
  assert_int_equal(vs_csv_commit(&csv, &err), 0);
  text = tu_read_file(path);
  assert_non_null(text);
  assert_string_equal(text,
                      "plain,\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\"\n");
  free(text);
  tu_remove_dir(dir);
}

static void test_atomic_commit(void **state)
{
  char dir[64], path[128];
  vs_csv csv;
  vs_error err;
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/summary.csv", dir);
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, path, &err), 0);
  vs_csv_header(&csv, "a,b");
  /* Before commit only the temporary file exists, beside the destination
   * and named after it (csvout.h). */
  assert_false(exists(path));
  assert_true(exists(csv.tmp_path));
  assert_int_equal(strncmp(csv.tmp_path, path, strlen(path)), 0);
  assert_int_equal(tu_count_entries(dir), 1);
  assert_int_equal(vs_csv_commit(&csv, &err), 0);
  /* After: the destination, and nothing else */
  assert_true(exists(path));
  assert_false(exists(csv.tmp_path));
  assert_int_equal(tu_count_entries(dir), 1);
  text = tu_read_file(path);
  assert_non_null(text);
  assert_string_equal(text, "a,b\n");
  free(text);
  tu_remove_dir(dir);
}

/* The file gets the permissions any file the user creates gets: 0666 less
 * the umask (0644 under umask 022), not mkstemp's owner-only 0600. */
static void test_commit_respects_umask(void **state)
{
  char dir[64], path[128];
  vs_csv csv;
  vs_error err;
  struct stat st;
  mode_t old = umask(022);
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ops.csv", dir);
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, path, &err), 0);
  vs_csv_header(&csv, "a");
  assert_int_equal(vs_csv_commit(&csv, &err), 0);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0644);
  umask(old);
  tu_remove_dir(dir);
}

static void test_commit_replaces_existing(void **state)
{
  char dir[64], path[128];
  vs_csv csv;
  vs_error err;
  FILE *f;
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/out.csv", dir);
  f = fopen(path, "w");
  assert_non_null(f);
  fputs("old contents\n", f);
  fclose(f);
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, path, &err), 0);
  vs_csv_header(&csv, "x");
  /* the old file is intact until commit */
  text = tu_read_file(path);
  assert_string_equal(text, "old contents\n");
  free(text);
  assert_int_equal(vs_csv_commit(&csv, &err), 0);
  text = tu_read_file(path);
  assert_string_equal(text, "x\n");
  free(text);
  assert_int_equal(tu_count_entries(dir), 1);
  tu_remove_dir(dir);
}

static void test_abort_leaves_nothing(void **state)
{
  char dir[64], path[128];
  vs_csv csv;
  vs_error err;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/timeline.csv", dir);
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, path, &err), 0);
  vs_csv_header(&csv, "time_s,rank");
  vs_csv_seconds(&csv, 1.0);
  vs_csv_u64(&csv, 0);
  vs_csv_row(&csv);
  assert_int_equal(tu_count_entries(dir), 1); /* the temporary file */
  vs_csv_abort(&csv);
  assert_false(exists(path));
  assert_int_equal(tu_count_entries(dir), 0);
  tu_remove_dir(dir);
}

static void test_open_missing_dir(void **state)
{
  char dir[64], path[192];
  vs_csv csv;
  vs_error err;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/no-such-dir/summary.csv", dir);
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, path, &err), VS_EIO);
  assert_int_equal(err.code, VS_EIO);
  /* the message names the destination the user asked for */
  assert_non_null(strstr(err.msg, path));
  assert_non_null(strstr(err.msg, "cannot create"));
  assert_int_equal(tu_count_entries(dir), 0);
  tu_remove_dir(dir);
}

static void test_make_dir(void **state)
{
  char dir[64], sub[128], file[128];
  vs_error err;
  struct stat st;
  FILE *f;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(sub, sizeof sub, "%s/csv", dir);
  snprintf(file, sizeof file, "%s/plain", dir);

  /* creates */
  vs_error_clear(&err);
  assert_int_equal(vs_make_dir(sub, &err), 0);
  assert_int_equal(stat(sub, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  /* accepts an existing directory */
  assert_int_equal(vs_make_dir(sub, &err), 0);
  assert_int_equal(err.code, VS_OK);

  /* rejects a regular file, naming it */
  f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  assert_int_equal(vs_make_dir(file, &err), VS_EIO);
  assert_non_null(strstr(err.msg, file));
  assert_non_null(strstr(err.msg, "not a directory"));

  /* a parent that does not exist: mkdir fails (no -p) */
  {
    char deep[192];
    vs_error err2;
    snprintf(deep, sizeof deep, "%s/a/b", dir);
    vs_error_clear(&err2);
    assert_int_equal(vs_make_dir(deep, &err2), VS_EIO);
    assert_non_null(strstr(err2.msg, deep));
    assert_non_null(strstr(err2.msg, "parent directory does not exist"));
  }
  /* a dangling symbolic link: says so (mkdir alone says "File exists") */
  {
    char link_path[128], missing[128];
    vs_error err3;
    snprintf(link_path, sizeof link_path, "%s/link", dir);
    snprintf(missing, sizeof missing, "%s/missing/out", dir);
    assert_int_equal(symlink(missing, link_path), 0);
    vs_error_clear(&err3);
    assert_int_equal(vs_make_dir(link_path, &err3), VS_EIO);
    assert_non_null(strstr(err3.msg, link_path));
    assert_non_null(strstr(err3.msg, "symbolic link to a path that does not exist"));
    unlink(link_path);
  }
  rmdir(sub);
  tu_remove_dir(dir);
}

/* A symbolic link is written through: the link stays, its target gets the
 * rows, also when the target does not exist yet. A link into a missing
 * folder fails like any path there. */
static void test_symlink_is_followed(void **state)
{
  char dir[64], target[128], link_path[128], dangling[128], *text;
  vs_csv csv;
  vs_error err;
  struct stat st;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(target, sizeof target, "%s/real.csv", dir);
  snprintf(link_path, sizeof link_path, "%s/link.csv", dir);
  snprintf(dangling, sizeof dangling, "%s/dangling.csv", dir);
  assert_int_equal(symlink("real.csv", link_path), 0);
  assert_int_equal(symlink("missing/x.csv", dangling), 0);
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, link_path, &err), 0);
  vs_csv_header(&csv, "a,b");
  assert_int_equal(vs_csv_commit(&csv, &err), 0);
  assert_int_equal(lstat(link_path, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  assert_non_null(text = tu_read_file(target));
  assert_string_equal(text, "a,b\n");
  free(text);
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, dangling, &err), VS_EIO);
  assert_non_null(strstr(err.msg, "cannot create"));
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, dir, &err), VS_EIO);
  assert_non_null(strstr(err.msg, "is a directory"));
  unlink(link_path);
  unlink(dangling);
  tu_remove_dir(dir);
}

/* A device is written to, never renamed over (vsim run --trace /dev/null
 * as root once replaced /dev/null with a regular file). */
static void test_device_is_written_directly(void **state)
{
  vs_csv csv;
  vs_error err;
  struct stat st;
  (void)state;
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, "/dev/null", &err), 0);
  assert_string_equal(csv.tmp_path, "");
  vs_csv_header(&csv, "a,b");
  assert_int_equal(vs_csv_commit(&csv, &err), 0);
  assert_int_equal(stat("/dev/null", &st), 0);
  assert_true(S_ISCHR(st.st_mode));
}

/* A pipe reached through /proc's magic link (as /dev/stdout leads to a
 * pipe: "pipe:[N]", which names no path) is written through, as the
 * output checks promise (hunt: vsim run --trace /dev/stdout | cat failed
 * after the whole simulation, "cannot create"). */
static void test_pipe_through_proc_link_is_written(void **state)
{
  char path[64], got[16] = "";
  int fds[2];
  vs_csv csv;
  vs_error err;
  (void)state;
  assert_int_equal(pipe(fds), 0);
  snprintf(path, sizeof path, "/proc/self/fd/%d", fds[1]);
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, path, &err), 0);
  assert_string_equal(csv.tmp_path, "");
  vs_csv_header(&csv, "a,b");
  assert_int_equal(vs_csv_commit(&csv, &err), 0);
  close(fds[1]);
  assert_int_equal(read(fds[0], got, sizeof got - 1), 4);
  assert_string_equal(got, "a,b\n");
  close(fds[0]);
}

/* Runs in a child that installs the signal handlers, opens a file and
 * raises sig: the child must end by sig with its temporary file removed.
 * No core file (SIGQUIT and SIGXCPU dump one by default). */
static void assert_signal_removes_temporary(int sig)
{
  char dir[64], path[128];
  int status;
  pid_t pid;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/timeline.csv", dir);
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct rlimit no_core = {0, 0};
    vs_csv csv;
    vs_error err;
    setrlimit(RLIMIT_CORE, &no_core);
    vs_csv_cleanup_on_signals();
    if (vs_csv_open(&csv, path, &err) != 0)
      _exit(2);
    vs_csv_header(&csv, "time_s,rank");
    raise(sig);
    _exit(3); /* not reached */
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), sig);
  assert_int_equal(tu_count_entries(dir), 0);
  tu_remove_dir(dir);
}

/* In a child: names folder out for removal on a signal (making it first
 * when `make`), opens a file in it and raises SIGTERM; returns the
 * child's wait status. */
static int signal_in_folder(const char *out, bool make)
{
  char path[192];
  int status;
  pid_t pid;
  snprintf(path, sizeof path, "%s/summary.csv", out);
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    vs_csv csv;
    vs_error err;
    vs_csv_cleanup_on_signals();
    vs_csv_remove_dir_on_signal(out);
    if ((make && mkdir(out, 0777) != 0) || vs_csv_open(&csv, path, &err) != 0)
      _exit(2);
    vs_csv_header(&csv, "rank");
    raise(SIGTERM);
    _exit(3); /* not reached */
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return status;
}

/* A signal also removes the folder the outputs were to go in, which the
 * process made (vs_csv_remove_dir_on_signal), once its temporary files
 * are gone; a folder that holds anything else stays, with what it
 * holds. */
static void test_signal_removes_made_folder(void **state)
{
  char dir[64], out[128], kept[128], other[160];
  int status;
  FILE *f;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(out, sizeof out, "%s/out", dir);
  status = signal_in_folder(out, true);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(tu_count_entries(dir), 0);
  snprintf(kept, sizeof kept, "%s/kept", dir);
  snprintf(other, sizeof other, "%s/notes.txt", kept);
  assert_int_equal(mkdir(kept, 0777), 0);
  assert_non_null(f = fopen(other, "w"));
  fclose(f);
  status = signal_in_folder(kept, false);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(tu_count_entries(kept), 1);
  tu_remove_dir(dir);
}

/* SIGTERM while a file is being written removes its temporary file and
 * ends the process by that signal. */
static void test_signal_removes_temporary(void **state)
{
  (void)state;
  assert_signal_removes_temporary(SIGTERM);
}

/* So do SIGQUIT (Ctrl-\) and SIGXCPU (ulimit -t), whose default action
 * used to leave the temporary file behind. */
static void test_sigquit_sigxcpu_remove_temporary(void **state)
{
  (void)state;
  assert_signal_removes_temporary(SIGQUIT);
  assert_signal_removes_temporary(SIGXCPU);
}

/* After vs_csv_cleanup_on_signals a write to a pipe nobody reads fails with
 * EPIPE instead of SIGPIPE ending the process (vsim run --csv D | head
 * then still writes D's files); a signal the parent ignored (nohup) stays
 * ignored. In a child, whose signal dispositions do not outlive it. */
static void test_sigpipe_is_ignored(void **state)
{
  int status;
  pid_t pid;
  (void)state;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fds[2];
    signal(SIGQUIT, SIG_IGN);
    vs_csv_cleanup_on_signals();
    if (pipe(fds) != 0)
      _exit(2);
    close(fds[0]);
    if (write(fds[1], "x", 1) != -1 || errno != EPIPE)
      _exit(3);
    raise(SIGQUIT); /* ignored: the child goes on */
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status)); /* not killed by SIGPIPE nor SIGQUIT */
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* A set of files appears together or not at all: when one of three failed
 * to write, none is renamed into place and no temporary file remains. */
static void test_commit_all_is_all_or_nothing(void **state)
{
  char dir[64], path[128];
  vs_csv files[3];
  vs_error err;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  vs_error_clear(&err);
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 3; i++) {
      snprintf(path, sizeof path, "%s/f%d.csv", dir, i);
      assert_int_equal(vs_csv_open(&files[i], path, &err), 0);
      vs_csv_header(&files[i], "a,b");
    }
    if (round == 0) {
      files[1].failed = true; /* as after a short write */
      assert_int_equal(vs_csv_commit_all(files, 3, &err), VS_EIO);
      assert_non_null(strstr(err.msg, "f1.csv: write failed"));
      assert_int_equal(tu_count_entries(dir), 0);
    } else {
      vs_error_clear(&err);
      assert_int_equal(vs_csv_commit_all(files, 3, &err), 0);
      assert_int_equal(tu_count_entries(dir), 3);
    }
  }
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/f%d.csv", dir, i);
    unlink(path);
  }
  tu_remove_dir(dir);
}

/* Rows of text through the field writers: about 460 KB. */
static void write_fields(vs_csv *csv)
{
  for (int i = 0; i < 10000; i++) {
    vs_csv_text(csv, "a row of text well past four kilobytes in all");
    vs_csv_row(csv);
  }
}

/* The same through vs_csv_printf, as the trace and the SVG are written. */
static void write_printf(vs_csv *csv)
{
  for (int i = 0; i < 10000; i++)
    vs_csv_printf(csv, "{\"row\":%d,\"text\":\"%s\"}\n", i,
                  "well past four kilobytes in all");
}

/* Writes a file with write under a 4096-byte file-size limit, in a child
 * that the limit and the signal dispositions must not outlive: the commit
 * must fail with EFBIG's reason (not EIO's), the child exit (not die of
 * SIGXFSZ) and no file remain. */
static void assert_file_size_limit_reported(void (*write)(vs_csv *))
{
  char dir[64], path[128];
  pid_t pid;
  int status;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/big.csv", dir);
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct rlimit lim = {4096, 4096};
    vs_csv csv;
    vs_error err;
    vs_csv_cleanup_on_signals();
    setrlimit(RLIMIT_FSIZE, &lim);
    vs_error_clear(&err);
    if (vs_csv_open(&csv, path, &err))
      _exit(10);
    write(&csv);
    if (vs_csv_commit(&csv, &err) == 0)
      _exit(11);
    printf("%s\n", err.msg);
    _exit(strstr(err.msg, strerror(EFBIG)) ? 0 : 12);
  }
  assert_true(waitpid(pid, &status, 0) == pid);
  assert_true(WIFEXITED(status)); /* not killed by SIGXFSZ */
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_int_equal(tu_count_entries(dir), 0); /* no output, no temporary file */
  tu_remove_dir(dir);
}

/* Past a file-size limit (ulimit -f), a write fails with EFBIG and is
 * reported like any failed write, the temporary file removed; SIGXFSZ's
 * default would end the process and leave the temporary file. */
static void test_file_size_limit_is_an_error(void **state)
{
  (void)state;
  assert_file_size_limit_reported(write_fields);
}

/* vs_csv_printf keeps the first failure's reason too ("File too large",
 * not the "Input/output error" a stream written to directly gave). */
static void test_printf_keeps_the_reason(void **state)
{
  (void)state;
  assert_file_size_limit_reported(write_printf);
}

/* vs_csv_printf writes the text as it is: no quoting, no separators. */
static void test_printf_writes_text(void **state)
{
  char dir[64], path[128], *text;
  vs_csv csv;
  vs_error err;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/t.json", dir);
  vs_error_clear(&err);
  assert_int_equal(vs_csv_open(&csv, path, &err), 0);
  vs_csv_printf(&csv, "{\"a\":%d,", 1);
  vs_csv_printf(&csv, "\"b\":\"%s\"}\n", "x,y");
  assert_int_equal(vs_csv_commit(&csv, &err), 0);
  assert_non_null(text = tu_read_file(path));
  assert_string_equal(text, "{\"a\":1,\"b\":\"x,y\"}\n");
  free(text);
  unlink(path);
  tu_remove_dir(dir);
}

/* Writes text to path (a new file or over an old one). */
static void put_file(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

/* Fails unless path holds exactly text. */
static void assert_file(const char *path, const char *text)
{
  char *got = tu_read_file(path);
  if (!got)
    fail_msg("%s: missing", path);
  if (strcmp(got, text) != 0)
    fail_msg("%s holds \"%s\", not \"%s\"", path, got, text);
  free(got);
}

/* Opens path (in dir) and writes one header row, name. */
static void open_with(vs_csv *csv, const char *dir, const char *name,
                      const char *header)
{
  char path[128];
  vs_error err;
  vs_error_clear(&err);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  assert_int_equal(vs_csv_open(csv, path, &err), 0);
  vs_csv_header(csv, header);
}

/* A file that replaces another keeps its permission bits (chmod 640 stays
 * 640), alone and in a set; a new file in the set still gets 0666 less the
 * umask (0644 under 022). */
static void test_commit_keeps_mode(void **state)
{
  char dir[64], path[128];
  vs_csv one, set[2];
  vs_error err;
  struct stat st;
  mode_t old = umask(022);
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/summary.csv", dir);
  put_file(path, "old\n");
  assert_int_equal(chmod(path, 0640), 0);
  open_with(&one, dir, "summary.csv", "a");
  vs_error_clear(&err);
  assert_int_equal(vs_csv_commit(&one, &err), 0);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0640);

  assert_int_equal(chmod(path, 0600), 0);
  open_with(&set[0], dir, "summary.csv", "b");
  open_with(&set[1], dir, "ops.csv", "c");
  assert_int_equal(vs_csv_commit_all(set, 2, &err), 0);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_file(path, "b\n");
  snprintf(path, sizeof path, "%s/ops.csv", dir);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0644);
  assert_int_equal(tu_count_entries(dir), 2); /* no backup, no journal */
  unlink(path);
  snprintf(path, sizeof path, "%s/summary.csv", dir);
  unlink(path);
  umask(old);
  tu_remove_dir(dir);
}

/* When a rename of a set fails midway, the files already replaced get
 * their old contents back and one that did not exist goes again: the old
 * set stays whole, with no temporary file, backup or journal left. Here
 * c.csv becomes a non-empty directory between the open and the commit,
 * after a.csv (old) and b.csv (new) were renamed. */
static void test_commit_all_failed_rename_keeps_old_set(void **state)
{
  char dir[64], path[128], sub[160];
  vs_csv set[3];
  vs_error err;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/a.csv", dir);
  put_file(path, "old a\n");
  open_with(&set[0], dir, "a.csv", "new a");
  open_with(&set[1], dir, "b.csv", "new b");
  open_with(&set[2], dir, "c.csv", "new c");
  snprintf(path, sizeof path, "%s/c.csv", dir);
  assert_int_equal(mkdir(path, 0777), 0);
  snprintf(sub, sizeof sub, "%s/keep", path);
  put_file(sub, "");
  vs_error_clear(&err);
  assert_int_equal(vs_csv_commit_all(set, 3, &err), VS_EIO);
  tu_assert_message_at(err.msg, "@: cannot rename the new file into place: ",
                       path);
  assert_non_null(strstr(err.msg, strerror(EISDIR)));
  snprintf(path, sizeof path, "%s/a.csv", dir);
  assert_file(path, "old a\n");
  snprintf(path, sizeof path, "%s/b.csv", dir);
  assert_false(exists(path));
  assert_int_equal(tu_count_entries(dir), 2); /* a.csv and c.csv/ */
  unlink(sub);
  snprintf(path, sizeof path, "%s/c.csv", dir);
  rmdir(path);
  snprintf(path, sizeof path, "%s/a.csv", dir);
  unlink(path);
  tu_remove_dir(dir);
}

/* The id of a process that has ended (and been reaped). */
static pid_t gone_pid(void)
{
  int status;
  pid_t pid;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0)
    _exit(0);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return pid;
}

/* Writes text to dir/name, name a printf format with the pid in it. */
static void put_named(const char *dir, const char *name, long pid,
                      const char *text)
{
  char file[96], path[192];
  snprintf(file, sizeof file, name, pid);
  snprintf(path, sizeof path, "%s/%s", dir, file);
  put_file(path, text);
}

/* Fails unless dir/name (a format with the pid) exists as want says. */
static void assert_named(const char *dir, const char *name, long pid,
                         bool want)
{
  char file[96], path[192];
  snprintf(file, sizeof file, name, pid);
  snprintf(path, sizeof path, "%s/%s", dir, file);
  if (exists(path) != want)
    fail_msg("%s: %s", path, want ? "removed" : "kept");
}

/* A process killed (SIGKILL) after renaming a.csv of a set a, b, c left
 * its journal, b's and c's temporary files and the backups; the next
 * vs_csv_open in that folder finishes the set: all three new, nothing
 * else left. */
static void test_commit_all_finished_after_a_crash(void **state)
{
  char dir[64], path[128];
  long pid = gone_pid();
  vs_csv csv;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/.vsim-commit.%ld.0", dir, pid);
  {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "vsim-commit 1\na.csv.tmp.%ld.0/a.csv/a.csv.old.%ld.0\n"
               "b.csv.tmp.%ld.1/b.csv/b.csv.old.%ld.0\nc.csv.tmp.%ld.0/c.csv/\n"
               "end\n", pid, pid, pid, pid, pid);
    assert_int_equal(fclose(f), 0);
  }
  put_named(dir, "a.csv", pid, "new a\n"); /* renamed before the crash */
  put_named(dir, "a.csv.old.%ld.0", pid, "old a\n");
  put_named(dir, "b.csv", pid, "old b\n");
  put_named(dir, "b.csv.old.%ld.0", pid, "old b\n");
  put_named(dir, "b.csv.tmp.%ld.1", pid, "new b\n");
  put_named(dir, "c.csv.tmp.%ld.0", pid, "new c\n");
  open_with(&csv, dir, "ops.csv", "x");
  vs_csv_abort(&csv);
  snprintf(path, sizeof path, "%s/a.csv", dir);
  assert_file(path, "new a\n");
  snprintf(path, sizeof path, "%s/b.csv", dir);
  assert_file(path, "new b\n");
  snprintf(path, sizeof path, "%s/c.csv", dir);
  assert_file(path, "new c\n");
  assert_int_equal(tu_count_entries(dir), 3);
  tu_remove_dir(dir);
}

/* A journal cut short (the process died writing it, before any rename) is
 * removed and the set stays old; the next open of a.csv removes a.csv's
 * temporary file as well. */
static void test_commit_journal_cut_short(void **state)
{
  char dir[64], path[128];
  long pid = gone_pid();
  vs_csv csv;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "vsim-commit 1\na.csv.tmp.%ld.0/a.csv/\n", pid);
  put_named(dir, ".vsim-commit.%ld.0", pid, path); /* no "end" line */
  put_named(dir, "a.csv", pid, "old a\n");
  put_named(dir, "a.csv.tmp.%ld.0", pid, "new a\n");
  open_with(&csv, dir, "a.csv", "x");
  vs_csv_abort(&csv);
  snprintf(path, sizeof path, "%s/a.csv", dir);
  assert_file(path, "old a\n");
  assert_int_equal(tu_count_entries(dir), 1);
  tu_remove_dir(dir);
}

/* Opening x.csv removes what a gone process left for x.csv (temporary
 * file, backup) and the folder probes it left; it keeps a live process's
 * files (this one's), look-alike names (not all digits), other
 * destinations' files, and a live process's journal. */
static void test_open_removes_stale_files(void **state)
{
  static const char *const removed[] = {"x.csv.tmp.%ld.0", "x.csv.old.%ld.3",
                                        ".vsim-probe.%ld.1"};
  static const char *const kept[] = {"x.csv.tmp.%ld.a", "x.csv.tmp.%ld",
      "x.csv.tmp.%ld.0.bak", "x.csv.tmp.%ldx.0", "x.csv.tmp.+%ld.0",
      "y.csv.tmp.%ld.0", "x.csvtmp.%ld.0", ".vsim-probe.%ld.z"};
  char dir[64];
  long dead = gone_pid(), self = (long)getpid();
  vs_csv csv;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  for (size_t i = 0; i < 3; i++)
    put_named(dir, removed[i], dead, "stale\n");
  for (size_t i = 0; i < 8; i++)
    put_named(dir, kept[i], dead, "look-alike\n");
  put_named(dir, "x.csv.tmp.%ld.7", self, "live\n");
  put_named(dir, ".vsim-commit.%ld.0", self, "vsim-commit 1\nend\n");
  open_with(&csv, dir, "x.csv", "x");
  vs_csv_abort(&csv);
  for (size_t i = 0; i < 3; i++)
    assert_named(dir, removed[i], dead, false);
  for (size_t i = 0; i < 8; i++)
    assert_named(dir, kept[i], dead, true);
  assert_named(dir, "x.csv.tmp.%ld.7", self, true);
  assert_named(dir, ".vsim-commit.%ld.0", self, true);
  assert_int_equal(tu_count_entries(dir), 10);
  tu_remove_dir(dir);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header_and_rows),
      cmocka_unit_test(test_quoting),
      cmocka_unit_test(test_atomic_commit),
      cmocka_unit_test(test_commit_respects_umask),
      cmocka_unit_test(test_commit_replaces_existing),
      cmocka_unit_test(test_abort_leaves_nothing),
      cmocka_unit_test(test_open_missing_dir),
      cmocka_unit_test(test_make_dir),
      cmocka_unit_test(test_symlink_is_followed),
      cmocka_unit_test(test_device_is_written_directly),
      cmocka_unit_test(test_pipe_through_proc_link_is_written),
      cmocka_unit_test(test_signal_removes_temporary),
      cmocka_unit_test(test_signal_removes_made_folder),
      cmocka_unit_test(test_sigquit_sigxcpu_remove_temporary),
      cmocka_unit_test(test_sigpipe_is_ignored),
      cmocka_unit_test(test_commit_all_is_all_or_nothing),
      cmocka_unit_test(test_file_size_limit_is_an_error),
      cmocka_unit_test(test_printf_keeps_the_reason),
      cmocka_unit_test(test_printf_writes_text),
      cmocka_unit_test(test_commit_keeps_mode),
      cmocka_unit_test(test_commit_all_failed_rename_keeps_old_set),
      cmocka_unit_test(test_commit_all_finished_after_a_crash),
      cmocka_unit_test(test_commit_journal_cut_short),
      cmocka_unit_test(test_open_removes_stale_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
