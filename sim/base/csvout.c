/* csvout.c - atomic CSV output through libcsv (see csvout.h).
 *
 * Besides a destination DEST this module makes, each named after the
 * process that made it ("<stem>.<PID>.<N>"):
 *   DEST.tmp.PID.N       the new contents, renamed over DEST on commit;
 *   DEST.old.PID.N       a hard link to DEST's old contents while a set of
 *                        files is renamed (vs_csv_commit_all), to put the
 *                        old set back if a rename fails;
 *   .vsim-commit.PID.N   the journal of a set being renamed;
 *   .vsim-probe.PID.N    app/outputs.c's check that a folder is writable.
 * Invariant: every temporary file a journal lists is complete and on disk
 * before the journal is, and the journal is on disk before the first
 * rename; so a journal left by a process that is gone is finished by
 * renaming what it lists, and any other such file of a gone process is
 * garbage. */
#include "csvout.h"

#include <csv.h>

#include <dirent.h>
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

#define JOURNAL_STEM ".vsim-commit"
#define JOURNAL_HEAD "vsim-commit 1\n"
#define JOURNAL_END "end\n"   /* its last line */
#define JOURNAL_MAX 65536   /* bytes: longer is not a journal of this module */

/* ------------------------------------------------------------------------
 * Temporary files to remove on a signal
 * ------------------------------------------------------------------------ */

#define LIVE_MAX 64

/* tmp_path of each open vs_csv, read by the signal handler; a slot is
 * claimed with a compare-and-swap so threads may open files too. */
static _Atomic(char *) live[LIVE_MAX];

/* The signals that end the process by default and can be caught: their
 * handler removes the live temporary files first. */
static const int handled[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGXCPU};
enum { N_HANDLED = sizeof handled / sizeof handled[0] };

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

/* The folder vs_csv_remove_dir_on_signal names. */
static _Atomic(const char *) live_dir;

void vs_csv_remove_dir_on_signal(const char *dir)
{
  atomic_store(&live_dir, dir);
}

static void on_signal(int sig)
{
  const char *dir = atomic_load(&live_dir);
  for (int i = 0; i < LIVE_MAX; i++) {
    char *p = atomic_load(&live[i]);
    if (p)
      unlink(p); /* async-signal-safe */
  }
  if (dir)
    rmdir(dir); /* async-signal-safe; only when empty */
  signal(sig, SIG_DFL);
  raise(sig); /* delivered, with the default action, when this returns */
}

static void handled_set(sigset_t *set)
{
  sigemptyset(set);
  for (int i = 0; i < N_HANDLED; i++)
    sigaddset(set, handled[i]);
}

/* Blocks the handled signals in this thread, the mask before in *before. */
static void hold_signals(sigset_t *before)
{
  sigset_t held;
  handled_set(&held);
  pthread_sigmask(SIG_BLOCK, &held, before);
}

void vs_csv_cleanup_on_signals(void)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  handled_set(&sa.sa_mask); /* one cleanup at a time */
  for (int i = 0; i < N_HANDLED; i++) {
    struct sigaction old;
    /* leave alone a signal the caller's parent asked to ignore (nohup) */
    if (sigaction(handled[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
      continue;
    sigaction(handled[i], &sa, NULL);
  }
  /* past a file-size limit (ulimit -f) a write then fails with EFBIG,
   * reported and cleaned up like any failed write, instead of the default
   * SIGXFSZ ending the process with its temporary file left behind */
  signal(SIGXFSZ, SIG_IGN);
  /* likewise a write to a closed pipe (vsim run ... | head) fails with
   * EPIPE, and the files still get written, instead of SIGPIPE ending the
   * process before them */
  signal(SIGPIPE, SIG_IGN);
}

/* ------------------------------------------------------------------------
 * Names, folders and processes
 * ------------------------------------------------------------------------ */

/* Whether s[0..n) is a nonempty run of decimal digits. */
static bool all_digits(const char *s, size_t n)
{
  if (n == 0)
    return false;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9')
      return false;
  return true;
}

/* Whether name is exactly "<base><kind>.<PID>.<N>", PID and N decimal
 * digits and PID above 0 (in *pid); nothing else matches. */
static bool owned_name(const char *name, const char *base, const char *kind,
                       pid_t *pid)
{
  size_t nb = strlen(base), nk = strlen(kind);
  const char *p, *dot;
  long v = 0;
  if (strncmp(name, base, nb) != 0 || strncmp(name + nb, kind, nk) != 0 ||
      name[nb + nk] != '.')
    return false;
  p = name + nb + nk + 1;
  dot = strchr(p, '.');
  if (!dot || dot - p > 9 || !all_digits(p, (size_t)(dot - p)) ||
      !all_digits(dot + 1, strlen(dot + 1)))
    return false;
  for (; p < dot; p++)
    v = v * 10 + (*p - '0');
  *pid = (pid_t)v;
  return v > 0;
}

/* Whether no process has that id on this host. */
static bool process_gone(pid_t pid)
{
  return kill(pid, 0) == -1 && errno == ESRCH;
}

/* The folder of path into dir ("." when it names none) and its last
 * component in *base; false when dir[len] is too small. */
static bool split_path(const char *path, char *dir, size_t len,
                       const char **base)
{
  const char *slash = strrchr(path, '/');
  *base = slash ? slash + 1 : path;
  if (!slash)
    return snprintf(dir, len, ".") < (int)len;
  return snprintf(dir, len, "%.*s", slash == path ? 1 : (int)(slash - path),
                  path) < (int)len;
}

/* Makes the renames and removals in a folder durable (best effort: some
 * filesystems cannot sync a folder). */
static void sync_dir(const char *dir)
{
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

/* sync_dir for the folder of path. */
static void sync_dir_of(const char *path)
{
  char dir[4096];
  const char *base;
  if (split_path(path, dir, sizeof dir, &base))
    sync_dir(dir);
}

/* Makes "stem.PID.N" with make for the first N (under 100) whose name is
 * free, the name in name[len], tracked for removal on a signal (the caller
 * untracks it). make returns -1 with errno on failure; EEXIST tries the
 * next N. Returns make's result. */
static int claim_name(const char *stem, char *name, size_t len,
                      int (*make)(const char *name, const char *arg),
                      const char *arg)
{
  int r = -1;
  for (unsigned attempt = 0; r < 0 && attempt < 100; attempt++) {
    if (snprintf(name, len, "%s.%ld.%u", stem, (long)getpid(), attempt) >=
        (int)len) {
      errno = ENAMETOOLONG;
      break;
    }
    live_add(name); /* before it exists: a signal finds it */
    r = make(name, arg);
    if (r < 0)
      live_remove(name);
    if (r < 0 && errno != EEXIST)
      break;
  }
  return r;
}

static int make_file(const char *name, const char *unused)
{
  (void)unused;
  /* mode 0666 so that the user's umask applies (mkstemp would make 0600) */
  return open(name, O_WRONLY | O_CREAT | O_EXCL, 0666);
}

static int make_link(const char *name, const char *target)
{
  return link(target, name);
}

int vs_csv_create_unique(const char *stem, char *name, size_t len)
{
  return claim_name(stem, name, len, make_file, NULL);
}

/* ------------------------------------------------------------------------
 * What a process that is gone left behind
 * ------------------------------------------------------------------------ */

/* One line of a journal, "TMP/DEST/BACKUP": names in the journal's folder
 * ('/' cannot be in a name), BACKUP empty when there was none. */
typedef struct journal_line {
  const char *tmp;     /* the new contents, "DEST.tmp.PID.N" */
  const char *dest;    /* the destination */
  const char *backup;  /* "DEST.old.PID.N" or "" */
} journal_line;

enum { JOURNAL_BAD = -1, JOURNAL_CUT = 0, JOURNAL_WHOLE = 1 };

/* The journal name in folder dfd as a malloc'd string, NULL when it
 * cannot be read or is longer than any journal this module writes. */
static char *read_journal(int dfd, const char *name)
{
  int fd = openat(dfd, name, O_RDONLY);
  char *text = fd >= 0 ? malloc(JOURNAL_MAX + 2) : NULL;
  size_t n = 0;
  ssize_t got = 0;
  while (text && n <= JOURNAL_MAX &&
         (got = read(fd, text + n, JOURNAL_MAX + 1 - n)) > 0)
    n += (size_t)got;
  if (fd >= 0)
    close(fd);
  if (!text || got < 0 || n > JOURNAL_MAX) {
    free(text);
    return NULL;
  }
  text[n] = '\0';
  return text;
}

/* Splits line into its names; false unless it is a line this module wrote
 * for process pid: DEST a plain name, TMP "DEST.tmp.PID.N", BACKUP empty or
 * "DEST.old.PID.N". */
static bool parse_line(char *line, pid_t pid, journal_line *out)
{
  char *s1 = strchr(line, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
  pid_t owner = 0;
  if (!s2 || strchr(s2 + 1, '/'))
    return false;
  *s1 = *s2 = '\0';
  out->tmp = line;
  out->dest = s1 + 1;
  out->backup = s2 + 1;
  if (!*out->dest || strcmp(out->dest, ".") == 0 ||
      strcmp(out->dest, "..") == 0)
    return false;
  if (!owned_name(out->tmp, out->dest, ".tmp", &owner) || owner != pid)
    return false;
  return !*out->backup ||
         (owned_name(out->backup, out->dest, ".old", &owner) && owner == pid);
}

/* Parses a journal of process pid into lines[LIVE_MAX] (*n of them):
 * JOURNAL_WHOLE, JOURNAL_CUT when it does not end as a whole journal does
 * (the process died writing it, before any rename), or JOURNAL_BAD when it
 * is not one this module wrote. */
static int parse_journal(char *text, pid_t pid, journal_line *lines,
                         size_t *n)
{
  size_t len = strlen(text), head = strlen(JOURNAL_HEAD),
         end = strlen(JOURNAL_END);
  char *p = text + head;
  *n = 0;
  if (len < head + end || text[len - end - 1] != '\n' ||
      strcmp(text + len - end, JOURNAL_END) != 0)
    return JOURNAL_CUT;
  if (strncmp(text, JOURNAL_HEAD, head) != 0)
    return JOURNAL_BAD;
  text[len - end] = '\0'; /* the lines, each ending in '\n' */
  while (*p) {
    char *nl = strchr(p, '\n');
    *nl = '\0';
    if (*n == LIVE_MAX || !parse_line(p, pid, &lines[*n]))
      return JOURNAL_BAD;
    (*n)++;
    p = nl + 1;
  }
  return JOURNAL_WHOLE;
}

/* Finishes the commit journal name of process pid (gone) recorded in
 * folder dfd: renames each listed temporary file that still exists into
 * place, removes the backups, then the journal. A journal cut short is
 * removed (its renames never started). 0 when the journal is gone, -1
 * when it stays (unreadable, not this module's, or a rename failed). */
static int roll_forward(int dfd, const char *name, pid_t pid)
{
  journal_line lines[LIVE_MAX];
  char *text = read_journal(dfd, name);
  size_t n = 0;
  int kind = text ? parse_journal(text, pid, lines, &n) : JOURNAL_BAD;
  int rc = kind == JOURNAL_BAD ? -1 : 0;
  for (size_t i = 0; kind == JOURNAL_WHOLE && rc == 0 && i < n; i++)
    if (renameat(dfd, lines[i].tmp, dfd, lines[i].dest) != 0 &&
        errno != ENOENT)
      rc = -1;
  for (size_t i = 0; kind == JOURNAL_WHOLE && rc == 0 && i < n; i++)
    if (*lines[i].backup)
      unlinkat(dfd, lines[i].backup, 0);
  if (rc == 0 && unlinkat(dfd, name, 0) != 0 && errno != ENOENT)
    rc = -1;
  if (rc == 0)
    (void)fsync(dfd);
  free(text);
  return rc;
}

/* Rolls forward every journal in d whose process is gone; true when one
 * of them stays. */
static bool finish_journals(DIR *d)
{
  struct dirent *e;
  bool left = false;
  pid_t pid;
  while ((e = readdir(d)) != NULL)
    if (owned_name(e->d_name, JOURNAL_STEM, "", &pid) && process_gone(pid) &&
        roll_forward(dirfd(d), e->d_name, pid) != 0)
      left = true;
  return left;
}

/* Removes from d the temporary files and backups of destination base, and
 * the folder probes, whose process is gone. */
static void remove_stale(DIR *d, const char *base)
{
  struct dirent *e;
  pid_t pid;
  while ((e = readdir(d)) != NULL)
    if ((owned_name(e->d_name, base, ".tmp", &pid) ||
         owned_name(e->d_name, base, ".old", &pid) ||
         owned_name(e->d_name, VS_CSV_PROBE_STEM, "", &pid)) &&
        process_gone(pid))
      unlinkat(dirfd(d), e->d_name, 0);
}

/* Before a temporary file for path is made: finishes the commits that
 * processes now gone left in its folder, then removes what such
 * processes left there for the same destination. A journal that stays
 * (see roll_forward) keeps every file, as its commit may still need
 * them. Best effort: what cannot be read or removed stays. */
static void tidy_folder(const char *path)
{
  char dir[4096];
  const char *base;
  DIR *d;
  if (!split_path(path, dir, sizeof dir, &base) || !(d = opendir(dir)))
    return;
  if (!finish_journals(d)) {
    rewinddir(d);
    remove_stale(d, base);
  }
  closedir(d);
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

/* Where path leads into csv->path, and whether it is an existing file
 * that is not a regular file (special): such a file (a device, FIFO or
 * terminal) as given, the kernel resolving its links; any other path
 * with its symbolic links followed (the file they name may not exist
 * yet), so that the file is replaced beside where they lead. */
static int resolve(vs_csv *csv, const char *path, bool *special,
                   vs_error *err)
{
  struct stat st;
  int e;
  /* a device, FIFO or terminal as the kernel reaches it: through /proc's
   * magic links too (/dev/stdout's leads to "pipe:[N]", no path) */
  *special = stat(path, &st) == 0 && !S_ISREG(st.st_mode) &&
             !S_ISDIR(st.st_mode);
  if (*special) {
    if (snprintf(csv->path, sizeof csv->path, "%s", path) >=
        (int)sizeof csv->path)
      return vs_error_set(err, VS_EIO, "%s: path too long", path);
    return 0;
  }
  e = vs_csv_follow_links(path, csv->path, sizeof csv->path);
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
  tidy_folder(csv->path);
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

/* Writes the decimal digits of value, at least `width` of them (zeros
 * in front), as %0*llu does: the timeline's millions of integers without
 * vfprintf's parsing of a format each time. */
static void put_digits(vs_csv *csv, uint64_t value, int width)
{
  char buf[24];
  char *end = buf + sizeof buf, *p = end;
  do {
    *--p = (char)('0' + value % 10);
    value /= 10;
    width--;
  } while (value > 0 || width > 0);
  if (fwrite(p, 1, (size_t)(end - p), csv->f) != (size_t)(end - p))
    note_failure(csv);
}

void vs_csv_u64(vs_csv *csv, uint64_t value)
{
  separator(csv);
  put_digits(csv, value, 1);
}

void vs_csv_i64(vs_csv *csv, int64_t value)
{
  separator(csv);
  if (value < 0 && fputc('-', csv->f) == EOF)
    note_failure(csv);
  /* the magnitude, INT64_MIN's too */
  put_digits(csv, value < 0 ? 0 - (uint64_t)value : (uint64_t)value, 1);
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

void vs_csv_ns(vs_csv *csv, uint64_t ns)
{
  separator(csv);
  put_digits(csv, ns / 1000000000u, 1);
  if (fputc('.', csv->f) == EOF)
    note_failure(csv);
  put_digits(csv, ns % 1000000000u, 9);
}

void vs_csv_seconds_sparse(vs_csv *csv, double seconds)
{
  if (seconds == 0)
    vs_csv_u64(csv, 0);
  else
    vs_csv_seconds(csv, seconds);
}

void vs_csv_row(vs_csv *csv)
{
  if (fputc('\n', csv->f) == EOF)
    note_failure(csv);
  csv->n_fields = 0;
}

void vs_csv_fields(vs_csv *csv, const char *names)
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
}

void vs_csv_header(vs_csv *csv, const char *names)
{
  vs_csv_fields(csv, names);
  vs_csv_row(csv);
}

/* Flushes csv's file; the errno of the first failure, or 0. */
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

/* ------------------------------------------------------------------------
 * Committing
 * ------------------------------------------------------------------------ */

/* Before the rename: gives the temporary file the permission bits of the
 * file it replaces (a new file keeps 0666 less the umask) and puts its
 * data on disk. 0, or fsync's errno; a file that cannot be synced
 * (EINVAL, ENOTSUP) or whose mode cannot be set keeps going. */
static int settle(vs_csv *csv)
{
  int fd = fileno(csv->f);
  struct stat st;
  if (stat(csv->path, &st) == 0 && S_ISREG(st.st_mode) &&
      fchmod(fd, st.st_mode & 07777) != 0) {
    /* best effort: a filesystem without modes (vfat) keeps its own */
  }
  if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP)
    return errno;
  return 0;
}

/* Flushes, settles (when written to a temporary file) and closes csv's
 * file; the errno of the first failure, or 0. */
static int finish(vs_csv *csv)
{
  int e = 0;
  if (vs_csv_flush(csv) != 0 || ferror(csv->f))
    e = csv->write_errno ? csv->write_errno : EIO;
  if (!e && csv->tmp_path[0])
    e = settle(csv);
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
    else
      sync_dir_of(csv->path);
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

/* One file of a set being replaced (vs_csv_commit_all). */
typedef struct swap {
  vs_csv *csv;        /* its temporary file and destination */
  char backup[4096];  /* hard link to the old destination; "" if none */
  bool existed;       /* the destination existed before the commit */
} swap;

/* Links each existing destination to a backup name beside it, so that a
 * failed rename can put the old set back. A filesystem without hard links
 * (EPERM, ENOTSUP, ENOSYS) gives no backup; another failure is VS_EIO. */
static int keep_backups(swap *sw, size_t n, vs_error *err)
{
  for (size_t i = 0; i < n; i++) {
    vs_csv *c = sw[i].csv;
    char stem[sizeof c->path + 8];
    struct stat st;
    if (!c->tmp_path[0] || lstat(c->path, &st) != 0)
      continue;
    sw[i].existed = true;
    if (!S_ISREG(st.st_mode))
      continue;
    snprintf(stem, sizeof stem, "%s.old", c->path);
    if (claim_name(stem, sw[i].backup, sizeof sw[i].backup, make_link,
                   c->path) == 0)
      continue;
    sw[i].backup[0] = '\0';
    if (errno != EPERM && errno != ENOTSUP && errno != ENOSYS)
      return vs_error_set(err, VS_EIO, "%s: cannot keep the old file while "
                          "the new set is renamed into place: %s",
                          c->path, strerror(errno));
  }
  return 0;
}

/* The journal of sw's renames (see write_journal), its folder in dir[len];
 * NULL when the set cannot have one (destinations in different folders, a
 * name with a newline) or out of memory. */
static char *journal_text(const swap *sw, size_t n, char *dir, size_t len)
{
  char d[4096];
  const char *base;
  size_t cap = strlen(JOURNAL_HEAD) + strlen(JOURNAL_END) + 1, used;
  char *text;
  dir[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    const vs_csv *c = sw[i].csv;
    if (!c->tmp_path[0])
      continue;
    if (!split_path(c->path, d, sizeof d, &base) || strchr(c->path, '\n') ||
        (dir[0] && strcmp(d, dir) != 0))
      return NULL;
    snprintf(dir, len, "%s", d);
    cap += strlen(c->tmp_path) + strlen(c->path) + strlen(sw[i].backup) + 3;
  }
  if (!(text = malloc(cap)))
    return NULL;
  used = (size_t)snprintf(text, cap, "%s", JOURNAL_HEAD);
  for (size_t i = 0; i < n; i++) {
    const vs_csv *c = sw[i].csv;
    const char *slash = strrchr(c->path, '/');
    size_t skip = slash ? (size_t)(slash - c->path) + 1 : 0; /* the folder */
    if (c->tmp_path[0])
      used += (size_t)snprintf(text + used, cap - used, "%s/%s/%s\n",
                               c->tmp_path + skip, c->path + skip,
                               sw[i].backup[0] ? sw[i].backup + skip : "");
  }
  snprintf(text + used, cap - used, "%s", JOURNAL_END);
  return text;
}

/* Writes the journal of the renames to come in the destinations' folder
 * and puts it on disk, its name in journal[len]; "" when there is none
 * (see journal_text, or a failed write): the renames then go ahead
 * without one. Not removed on a signal: from here a crash rolls forward. */
static void write_journal(const swap *sw, size_t n, char *journal,
                          size_t len)
{
  char dir[4096], stem[sizeof dir + 16];
  char *text = journal_text(sw, n, dir, sizeof dir);
  size_t done = 0, size = text ? strlen(text) : 0;
  ssize_t got = 0;
  int fd = -1;
  journal[0] = '\0';
  if (text) {
    snprintf(stem, sizeof stem, "%s/%s", dir, JOURNAL_STEM);
    fd = vs_csv_create_unique(stem, journal, len);
  }
  while (fd >= 0 && done < size &&
         (got = write(fd, text + done, size - done)) > 0)
    done += (size_t)got;
  if (fd >= 0) {
    bool ok = done == size && fsync(fd) == 0;
    close(fd);
    if (!ok)
      unlink(journal);
    vs_csv_untrack(journal);
    if (ok)
      sync_dir(dir);
    else
      journal[0] = '\0';
  }
  free(text);
}

/* Renames the set into place in order; on a failure VS_EIO, *done the
 * number of files renamed before it. */
static int rename_set(swap *sw, size_t n, size_t *done, vs_error *err)
{
  for (*done = 0; *done < n; (*done)++) {
    vs_csv *c = sw[*done].csv;
    if (c->tmp_path[0] && rename(c->tmp_path, c->path) != 0) {
      int e = errno;
      return vs_error_set(err, VS_EIO, "%s: cannot rename the new file into "
                          "place: %s; the previous files of the set are kept",
                          c->path, strerror(e));
    }
  }
  return 0;
}

/* Puts back what the first done renames replaced: the old file from its
 * backup, or no file where there was none (a destination that existed
 * without a backup keeps the new file). The journal goes first, so that a
 * crash from here on is not rolled forward. */
static void roll_back(swap *sw, size_t done, const char *journal)
{
  if (journal[0] && unlink(journal) == 0)
    sync_dir_of(journal);
  for (size_t i = 0; i < done; i++) {
    const vs_csv *c = sw[i].csv;
    if (!c->tmp_path[0])
      continue;
    if (sw[i].backup[0])
      rename(sw[i].backup, c->path);
    else if (!sw[i].existed)
      unlink(c->path);
  }
}

/* After the renames (or the roll back): removes the journal, the backups
 * and the temporary files from index done on, which were not renamed. */
static void end_set(swap *sw, size_t n, size_t done, const char *journal)
{
  if (journal[0])
    unlink(journal);
  for (size_t i = 0; i < n; i++) {
    vs_csv *c = sw[i].csv;
    if (sw[i].backup[0]) {
      unlink(sw[i].backup);
      live_remove(sw[i].backup);
    }
    if (!c->tmp_path[0])
      continue;
    live_remove(c->tmp_path);
    if (i >= done)
      unlink(c->tmp_path);
    else
      sync_dir_of(c->path);
    c->tmp_path[0] = '\0';
  }
}

/* Renames a set of finished files into place together: with backups of
 * the old files and a journal when more than one is renamed, and the
 * handled signals held, so that the set is replaced whole or not at all,
 * and a crash between renames is finished by the next vs_csv_open in that
 * folder (tidy_folder). */
static int replace_set(vs_csv *csvs, size_t n, vs_error *err)
{
  swap *sw = calloc(n, sizeof *sw);
  char journal[4096] = "";
  size_t done = 0, renames = 0;
  sigset_t before;
  int rc = 0;
  if (!sw) {
    for (size_t i = 0; i < n; i++)
      vs_csv_abort(&csvs[i]);
    return vs_error_set(err, VS_ENOMEM, "%s: out of host memory to commit",
                        csvs[0].path);
  }
  for (size_t i = 0; i < n; i++) {
    sw[i].csv = &csvs[i];
    renames += csvs[i].tmp_path[0] != '\0';
  }
  hold_signals(&before);
  if (renames > 1 && (rc = keep_backups(sw, n, err)) == 0)
    write_journal(sw, n, journal, sizeof journal);
  if (rc == 0) {
    /* from here the temporary files are the new set: a signal another
     * thread takes leaves them for the journal to finish */
    for (size_t i = 0; i < n; i++)
      live_remove(csvs[i].tmp_path);
    rc = rename_set(sw, n, &done, err);
  }
  if (rc)
    roll_back(sw, done, journal);
  end_set(sw, n, done, journal);
  pthread_sigmask(SIG_SETMASK, &before, NULL);
  free(sw);
  return rc;
}

/* Whether a and b are in the same folder. */
static bool same_folder(const vs_csv *a, const vs_csv *b)
{
  char x[4096], y[4096];
  const char *base;
  return split_path(a->path, x, sizeof x, &base) &&
         split_path(b->path, y, sizeof y, &base) && strcmp(x, y) == 0;
}

/* replace_set for each run of csvs in one folder, in order: a journal
 * covers one folder (journal_text), so that each folder's files are
 * replaced whole even across a crash. Every file is written by now (the
 * failures of writing are behind); a rename that fails in a later folder
 * leaves the earlier folders' files replaced, and the later ones' are
 * dropped. */
static int replace_by_folder(vs_csv *csvs, size_t n, vs_error *err)
{
  size_t i = 0;
  int rc = 0;
  while (i < n && rc == 0) {
    size_t j = i + 1;
    while (j < n && same_folder(&csvs[i], &csvs[j]))
      j++;
    rc = replace_set(&csvs[i], j - i, err);
    i = j;
  }
  for (; i < n; i++)
    vs_csv_abort(&csvs[i]);
  return rc;
}

int vs_csv_commit_all(vs_csv *csvs, size_t n, vs_error *err)
{
  int failed = -1, e = 0;
  if (n == 0)
    return 0;
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
  return replace_by_folder(csvs, n, err);
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

const char *vs_stream_write_error(FILE *f)
{
  errno = 0;
  if (fflush(f) == 0 && !ferror(f))
    return NULL;
  return errno ? strerror(errno) : "a write error (its reason was not kept)";
}

bool vs_csv_dir_of(const char *path, char *dir, size_t len)
{
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/')
    n--;
  while (n > 0 && path[n - 1] != '/')
    n--;
  while (n > 1 && path[n - 1] == '/')
    n--;
  if (n == 0)
    return snprintf(dir, len, ".") < (int)len;
  return snprintf(dir, len, "%.*s", (int)n, path) < (int)len;
}

int vs_csv_check_dir(const char *option, const char *path, const char *dir,
                     vs_error *err)
{
  char stem[VS_CSV_PATH_LEN + 16], probe[VS_CSV_PATH_LEN + 64];
  struct stat st;
  int fd = -1, e = 0;
  bool is_dir = false;

  if (stat(dir, &st) != 0)
    e = errno;
  else if (!(is_dir = S_ISDIR(st.st_mode)))
    e = ENOTDIR;
  if (e == 0) {
    snprintf(stem, sizeof stem, "%s/%s", dir, VS_CSV_PROBE_STEM);
    if ((fd = vs_csv_create_unique(stem, probe, sizeof probe)) < 0)
      e = errno;
  }
  if (fd >= 0) {
    close(fd);
    unlink(probe);
    vs_csv_untrack(probe);
    return 0;
  }
  /* the folder, or a file in it (/proc refuses new files: ENOENT) */
  return vs_error_set(
      err, VS_EIO, "%s %s: cannot create: %s '%s': %s", option, path,
      is_dir ? "no new file can be made in directory" : "directory", dir,
      strerror(e ? e : EEXIST));
}

int vs_csv_check_path(const char *option, const char *path, vs_error *err)
{
  char dir[VS_CSV_PATH_LEN], target[VS_CSV_PATH_LEN];
  struct stat st;
  size_t n = strlen(path);
  bool exists;
  int e;

  if (n == 0 || path[n - 1] == '/')
    return vs_error_set(err, VS_EUSAGE, "%s needs a file name, got '%s'",
                        option, path);
  exists = stat(path, &st) == 0;
  if (exists && S_ISDIR(st.st_mode))
    return vs_error_set(err, VS_EIO, "%s %s: is a directory", option, path);
  if (exists && !S_ISREG(st.st_mode)) {
    /* a device or FIFO is written in place, never replaced */
    if (access(path, W_OK) == 0)
      return 0;
    return vs_error_set(err, VS_EIO, "%s %s: cannot write: %s", option, path,
                        strerror(errno));
  }
  /* the file is written beside where a symbolic link leads */
  if ((e = vs_csv_follow_links(path, target, sizeof target)) == 0 &&
      !vs_csv_dir_of(target, dir, sizeof dir))
    e = ENAMETOOLONG;
  if (e)
    return vs_error_set(err, VS_EIO, "%s %s: %s", option, path, strerror(e));
  return vs_csv_check_dir(option, path, dir, err);
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
      return vs_error_set(err, VS_EIO, "%s: " VS_CSV_DANGLING_DIR, dir);
    if (e == ENOENT)
      return vs_error_set(err, VS_EIO, "%s: cannot create directory: its parent "
                          "directory does not exist", dir);
    return vs_error_set(err, VS_EIO, "%s: cannot create directory: %s", dir,
                        strerror(e));
  }
  return 0;
}
