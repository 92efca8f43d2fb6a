/* csvout.c - atomic CSV output through libcsv (see csvout.h). */
#include "csvout.h"

#include <csv.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------
 * Temporary files to remove on a signal
 * ------------------------------------------------------------------------ */

#define LIVE_MAX 64

/* tmp_path of each open vs_csv, read by the signal handler; a slot is
 * claimed with a compare-and-swap so threads may open files too. */
static _Atomic(char *) live[LIVE_MAX];

static void live_add(char *tmp_path);
static void live_remove(const char *tmp_path);

void vs_csv_untrack(const char *tmp_path) { live_remove(tmp_path); }

static void live_add(char *tmp_path)
{
  for (int i = 0; i < LIVE_MAX; i++) {
    char *expected = NULL;
    if (atomic_compare_exchange_strong(&live[i], &expected, tmp_path))
      return;
  }
  /* more than LIVE_MAX open at once: this one is not cleaned on a signal */
}

static void live_remove(const char *tmp_path)
{
  for (int i = 0; i < LIVE_MAX; i++) {
    char *expected = (char *)tmp_path;
    if (atomic_compare_exchange_strong(&live[i], &expected, NULL))
      return;
  }
}

static void on_signal(int sig)
{
  for (int i = 0; i < LIVE_MAX; i++) {
    char *p = atomic_load(&live[i]);
    if (p)
      unlink(p); /* async-signal-safe */
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void vs_csv_cleanup_on_signals(void)
{
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction old;
    /* leave alone a signal the caller's parent asked to ignore (nohup) */
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
      continue;
    sigaction(sigs[i], &sa, NULL);
  }
  /* past a file-size limit (ulimit -f) a write then fails with EFBIG,
   * reported and cleaned up like any failed write, instead of the default
   * SIGXFSZ ending the process with its temporary file left behind */
  signal(SIGXFSZ, SIG_IGN);
}

/* ------------------------------------------------------------------------
 * Opening
 * ------------------------------------------------------------------------ */

int vs_csv_follow_links(const char *path, char *out, size_t len)
{
  char target[4096], joined[4096];
  struct stat st;
  if (snprintf(out, len, "%s", path) >= (int)len)
    return ENAMETOOLONG;
  for (int hops = 0; lstat(out, &st) == 0 && S_ISLNK(st.st_mode); hops++) {
    const char *slash = strrchr(out, '/');
    ssize_t n;
    int used;
    if (hops == 16)
      return ELOOP;
    if ((n = readlink(out, target, sizeof target - 1)) < 0)
      return errno;
    target[n] = '\0';
    /* a relative target is relative to the link's folder */
    if (target[0] == '/' || !slash)
      used = snprintf(joined, sizeof joined, "%s", target);
    else
      used = snprintf(joined, sizeof joined, "%.*s/%s", (int)(slash - out),
                      out, target);
    if (used >= (int)sizeof joined || used >= (int)len)
      return ENAMETOOLONG;
    memcpy(out, joined, (size_t)used + 1);
  }
  return 0;
}

int vs_csv_create_unique(const char *stem, char *name, size_t len)
{
  int fd = -1;
  for (unsigned attempt = 0; fd < 0 && attempt < 100; attempt++) {
    if (snprintf(name, len, "%s.%ld.%u", stem, (long)getpid(), attempt) >=
        (int)len) {
      errno = ENAMETOOLONG;
      break;
    }
    live_add(name); /* before it exists: a signal finds it */
    fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd < 0)
      live_remove(name);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  return fd;
}

/* Where path really leads (symbolic links followed; the file they name
 * may not exist yet) into csv->path, and whether it is an existing file
 * that is not a regular file. */
static int resolve(vs_csv *csv, const char *path, bool *special,
                   vs_error *err)
{
  struct stat st;
  int e = vs_csv_follow_links(path, csv->path, sizeof csv->path);
  *special = false;
  if (e == ELOOP)
    return vs_error_set(err, VS_EIO, "%s: too many symbolic links", path);
  if (e == ENAMETOOLONG)
    return vs_error_set(err, VS_EIO, "%s: path too long", path);
  if (e)
    return vs_error_set(err, VS_EIO, "%s: cannot read the link: %s", path,
                        strerror(e));
  if (lstat(csv->path, &st) != 0)
    return 0; /* a new file */
  if (S_ISDIR(st.st_mode))
    return vs_error_set(err, VS_EIO, "%s: is a directory", path);
  *special = !S_ISREG(st.st_mode);
  return 0;
}

int vs_csv_open(vs_csv *csv, const char *path, vs_error *err)
{
  char stem[sizeof csv->path + 8];
  int fd, rc;
  bool special;
  memset(csv, 0, sizeof *csv);
  if (*path == '\0')
    return vs_error_set(err, VS_EIO, "an output path is empty");
  if ((rc = resolve(csv, path, &special, err)))
    return rc;
  if (special) {
    /* /dev/null, a FIFO, a terminal: write through, never rename over it */
    csv->f = fopen(csv->path, "w");
    if (!csv->f)
      return vs_error_set(err, VS_EIO, "%s: cannot write: %s", path,
                          strerror(errno));
    return 0;
  }
  /* created with O_EXCL and mode 0666 so that the user's umask applies
   * (mkstemp would make 0600) */
  snprintf(stem, sizeof stem, "%s.tmp", csv->path);
  fd = vs_csv_create_unique(stem, csv->tmp_path, sizeof csv->tmp_path);
  if (fd < 0) {
    int e = errno;
    csv->tmp_path[0] = '\0';
    if (e == ENAMETOOLONG)
      return vs_error_set(err, VS_EIO, "%s: path too long", path);
    return vs_error_set(err, VS_EIO, "%s: cannot create: %s", path, strerror(e));
  }
  csv->f = fdopen(fd, "w");
  if (!csv->f) {
    int e = errno;
    close(fd);
    live_remove(csv->tmp_path);
    unlink(csv->tmp_path);
    csv->tmp_path[0] = '\0';
    return vs_error_set(err, VS_EIO, "%s: cannot write: %s", path, strerror(e));
  }
  return 0;
}

/* ------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------ */

/* Records a failed write with the reason the first failure gave: later
 * calls (a close, a retry) overwrite errno, and EFBIG or ENOSPC is what
 * the user needs to read. */
static void note_failure(vs_csv *csv)
{
  if (!csv->failed)
    csv->write_errno = errno ? errno : EIO;
  csv->failed = true;
}

void vs_csv_printf(vs_csv *csv, const char *fmt, ...)
{
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vfprintf(csv->f, fmt, ap);
  va_end(ap);
  if (n < 0)
    note_failure(csv);
}

static void separator(vs_csv *csv)
{
  if (csv->n_fields++ > 0 && fputc(',', csv->f) == EOF)
    note_failure(csv);
}

void vs_csv_text(vs_csv *csv, const char *text)
{
  separator(csv);
  if (strpbrk(text, ",\"\r\n")) {
    if (csv_fwrite(csv->f, text, strlen(text)) != 0)
      note_failure(csv);
  } else if (fputs(text, csv->f) == EOF) {
    note_failure(csv);
  }
}

void vs_csv_u64(vs_csv *csv, uint64_t value)
{
  separator(csv);
  vs_csv_printf(csv, "%llu", (unsigned long long)value);
}

void vs_csv_i64(vs_csv *csv, int64_t value)
{
  separator(csv);
  vs_csv_printf(csv, "%lld", (long long)value);
}

void vs_csv_real(vs_csv *csv, double value)
{
  separator(csv);
  vs_csv_printf(csv, "%.9g", value);
}

void vs_csv_seconds(vs_csv *csv, double seconds)
{
  separator(csv);
  vs_csv_printf(csv, "%.9f", seconds);
}

void vs_csv_row(vs_csv *csv)
{
  if (fputc('\n', csv->f) == EOF)
    note_failure(csv);
  csv->n_fields = 0;
}

void vs_csv_header(vs_csv *csv, const char *names)
{
  char name[128];
  const char *p = names;
  while (*p) {
    size_t n = strcspn(p, ",");
    if (n >= sizeof name)
      n = sizeof name - 1;
    memcpy(name, p, n);
    name[n] = '\0';
    vs_csv_text(csv, name);
    p += strcspn(p, ",");
    if (*p == ',')
      p++;
  }
  vs_csv_row(csv);
}

/* Flushes and closes csv's file; the errno of the first failure, or 0. */
int vs_csv_flush(vs_csv *csv)
{
  errno = 0;
  if (fflush(csv->f) == 0 && !ferror(csv->f))
    return csv->failed ? -1 : 0;
  /* the flush's own failure says why (EFBIG, ENOSPC); a stream a caller
   * wrote to directly may have failed earlier, its reason lost (EIO) */
  note_failure(csv);
  return -1;
}

static int finish(vs_csv *csv)
{
  int e = 0;
  if (vs_csv_flush(csv) != 0 || ferror(csv->f))
    e = csv->write_errno ? csv->write_errno : EIO;
  if (fclose(csv->f) != 0 && !e)
    e = errno;
  csv->f = NULL;
  return e;
}

/* Renames csv's temporary file into place (nothing when written directly);
 * e is an earlier failure, which removes the temporary file instead. */
static int put_in_place(vs_csv *csv, int e, vs_error *err)
{
  if (csv->tmp_path[0]) {
    if (!e && rename(csv->tmp_path, csv->path) != 0)
      e = errno;
    live_remove(csv->tmp_path);
    if (e)
      unlink(csv->tmp_path);
    csv->tmp_path[0] = '\0';
  }
  if (e)
    return vs_error_set(err, VS_EIO, "%s: write failed: %s", csv->path,
                        strerror(e));
  return 0;
}

int vs_csv_commit(vs_csv *csv, vs_error *err)
{
  return put_in_place(csv, finish(csv), err);
}

int vs_csv_commit_all(vs_csv *csvs, size_t n, vs_error *err)
{
  int failed = -1, e = 0;
  for (size_t i = 0; i < n; i++) {
    int ei = finish(&csvs[i]);
    if (ei && failed < 0) {
      failed = (int)i;
      e = ei;
    }
  }
  if (failed >= 0) {
    for (size_t i = 0; i < n; i++)
      if ((int)i != failed)
        vs_csv_abort(&csvs[i]);
    return put_in_place(&csvs[failed], e, err);
  }
  {
    /* hold SIGINT, SIGTERM and SIGHUP while the set is renamed: delivered
     * after the last rename, they find the new set whole, never half */
    sigset_t held, before;
    int rc = 0;
    sigemptyset(&held);
    sigaddset(&held, SIGINT);
    sigaddset(&held, SIGTERM);
    sigaddset(&held, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &held, &before);
    for (size_t i = 0; i < n; i++) {
      int ri = put_in_place(&csvs[i], rc ? EIO : 0, err);
      if (ri && !rc)
        rc = ri;
    }
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    return rc;
  }
}

void vs_csv_abort(vs_csv *csv)
{
  if (csv->f) {
    fclose(csv->f);
    csv->f = NULL;
  }
  if (csv->tmp_path[0]) {
    live_remove(csv->tmp_path);
    unlink(csv->tmp_path);
    csv->tmp_path[0] = '\0';
  }
}

int vs_make_dir(const char *dir, vs_error *err)
{
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return 0;
    return vs_error_set(err, VS_EIO, "%s: exists and is not a directory", dir);
  }
  if (mkdir(dir, 0777) != 0) {
    int e = errno;
    if (e == EEXIST && lstat(dir, &st) == 0 && S_ISLNK(st.st_mode))
      return vs_error_set(err, VS_EIO, "%s: is a symbolic link to a path that "
                          "does not exist; point it at a directory or remove it",
                          dir);
    if (e == ENOENT)
      return vs_error_set(err, VS_EIO, "%s: cannot create directory: its parent "
                          "directory does not exist", dir);
    return vs_error_set(err, VS_EIO, "%s: cannot create directory: %s", dir,
                        strerror(e));
  }
  return 0;
}
