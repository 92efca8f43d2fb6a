/* csvout.h - CSV files written atomically through libcsv.
 *
 * A vs_csv writes to a temporary file "DEST.tmp.PID.N" beside its
 * destination DEST, puts its data on disk (fsync) and renames it into place
 * on commit, so a reader never sees a half-written file and a failed run
 * leaves nothing behind. A file that replaces another keeps that file's
 * permission bits; a new one gets 0666 less the umask. A destination that
 * is a symbolic link is written where the link points; one that is not a
 * regular file (a device such as /dev/null, a FIFO) is written to
 * directly, never replaced nor synced. Temporary files still open when
 * SIGINT, SIGTERM, SIGHUP, SIGQUIT or SIGXCPU arrives are removed
 * (vs_csv_cleanup_on_signals). Text fields are quoted by libcsv when they
 * need it; numbers are written plainly.
 *
 * What a process killed outright (SIGKILL, a crash, a power cut) leaves is
 * cleaned up by the next vs_csv_open in the same folder: a set that
 * process was renaming into place (vs_csv_commit_all) is finished, and its
 * temporary files and backups for the destination being opened, and the
 * folder probes (VS_CSV_PROBE_STEM), are removed. A file is taken to be
 * left over only when its name is exactly one this module makes and the
 * process id in it is not a live process on this host; so a folder that
 * another host writes the same destinations in at the same time (a shared
 * network folder) is not supported: that host's files would look left
 * over. */
#ifndef VS_CSVOUT_H
#define VS_CSVOUT_H

#include "error.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Longest path an output may have (Linux's PATH_MAX). */
#define VS_CSV_PATH_LEN 4096

typedef struct vs_csv {
  FILE *f;              /* the temporary file (or the destination itself) */
  char path[VS_CSV_PATH_LEN];     /* destination, symbolic links
                                     resolved */
  char tmp_path[VS_CSV_PATH_LEN]; /* temporary name in the same
                                     directory; empty when writing to
                                     the destination directly */
  int n_fields;         /* fields written in the current row */
  bool failed;          /* a write failed; commit will report it */
  int write_errno;      /* errno of the first failed write */
} vs_csv;

/* The stem of the files other modules make to test that a folder is
 * writable (vs_csv_create_unique(FOLDER "/" VS_CSV_PROBE_STEM, ...)), so that
 * vs_csv_open can remove those a killed process left. */
#define VS_CSV_PROBE_STEM ".vsim-probe"

/* Opens a temporary file for path, after tidying its folder (see the top
 * of this file; O(entries in the folder)). VS_EIO with the reason on
 * failure. */
int vs_csv_open(vs_csv *csv, const char *path, vs_error *err);

/* Writes what is buffered to the file (so another reader sees it whole);
 * 0, or -1 when a write failed (commit then reports why). */
int vs_csv_flush(vs_csv *csv);

/* Appends one field to the current row. */
void vs_csv_text(vs_csv *csv, const char *text);
void vs_csv_u64(vs_csv *csv, uint64_t value);
void vs_csv_i64(vs_csv *csv, int64_t value);
void vs_csv_real(vs_csv *csv, double value); /* %.9g */
void vs_csv_seconds(vs_csv *csv, double seconds); /* %.9f */
/* ns nanoseconds as seconds with 9 decimals, from the integer: what
 * vs_csv_seconds writes for ns x 1e-9 below 1e6 s (where the double's
 * error stays under half a nanosecond; above, this is the exact one),
 * without formatting a double. */
void vs_csv_ns(vs_csv *csv, uint64_t ns);
/* %.9f, or 0 for exactly zero: a column of seconds mostly zero. */
void vs_csv_seconds_sparse(vs_csv *csv, double seconds);

/* Writes printf-formatted text as it is, neither quoted nor separated:
 * for a file that is not CSV (a trace, an SVG) written through vs_csv's
 * atomic file. A failure is recorded, with its errno, like any write's. */
void vs_csv_printf(vs_csv *csv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Ends the row. */
void vs_csv_row(vs_csv *csv);

/* Appends one text field per name of a comma-separated list (a header's
 * columns; the row goes on). */
void vs_csv_fields(vs_csv *csv, const char *names);

/* Writes a header row from a comma-separated list of names. */
void vs_csv_header(vs_csv *csv, const char *names);

/* Flushes, syncs, closes and renames into place. On failure removes the
 * temporary file and returns VS_EIO naming the file and the first failed
 * write's reason. */
int vs_csv_commit(vs_csv *csv, vs_error *err);

/* vs_csv_commit for a set of files that belong together: together or not
 * at all. All are flushed and synced first; only when every one was
 * written are they renamed into place, with the signals above held. When
 * more than one is renamed, each existing destination first gets a
 * hard-link backup "DEST.old.PID.N" (none on a filesystem without hard
 * links) and a journal ".vsim-commit.PID.N" listing the renames is put on
 * disk in the destinations' folder; files in several folders are renamed
 * folder by folder (each consecutive run of one folder a set with its own
 * journal). If a rename fails, the destinations of that folder already
 * replaced get their old files back (or are removed if they did not
 * exist), later folders' files are dropped, and VS_EIO names the file and
 * the reason; if the process dies between renames, the next vs_csv_open
 * in that folder finishes them from the journal. On success the journals
 * and the backups are removed. On a write failure all temporary files
 * are removed and the first failure is reported: nothing is replaced. */
int vs_csv_commit_all(vs_csv *csvs, size_t n, vs_error *err);

/* Closes and removes the temporary file. */
void vs_csv_abort(vs_csv *csv);

/* Installs handlers for SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGXCPU that
 * remove the temporary files of every vs_csv not yet committed or aborted,
 * then end the process by the same signal; a signal the parent ignored
 * (nohup) stays ignored. Ignores SIGXFSZ and SIGPIPE, so that a write past
 * the file-size limit or to a closed pipe fails with EFBIG or EPIPE, is
 * reported, and the other files still get written. Call once, early in
 * main. */
void vs_csv_cleanup_on_signals(void);

/* Follows the symbolic links of path into out, as vs_csv_open does for a
 * path that is not a device, FIFO or terminal: a relative target is
 * relative to the link's folder, and the last target need not exist. 0,
 * or ELOOP (over 16 links), ENAMETOOLONG or readlink's errno. */
int vs_csv_follow_links(const char *path, char *out, size_t len);

/* Creates a new file named "stem.PID.N" (O_EXCL, mode 0666 less the
 * umask), its name in name[len]; the file is removed on a signal until
 * vs_csv_untrack(name). Returns the descriptor, or -1 with errno. */
int vs_csv_create_unique(const char *stem, char *name, size_t len);

/* Stops removing that file on a signal (after the caller removed or
 * renamed it). */
void vs_csv_untrack(const char *tmp_path);

/* Removes folder dir on a signal too, after the temporary files, when it
 * is empty then (a folder the caller made for its outputs); NULL: none.
 * dir must live until it is replaced. */
void vs_csv_remove_dir_on_signal(const char *dir);

/* Creates directory dir if it does not exist. VS_EIO on failure (a
 * dangling link: VS_CSV_DANGLING_DIR). */
int vs_make_dir(const char *dir, vs_error *err);

/* The directory part of path into dir[len] ("." when it has none),
 * trailing slashes ignored; false when it does not fit. */
bool vs_csv_dir_of(const char *path, char *dir, size_t len);

/* Whether a file can be created in directory dir, found the way
 * vs_csv_open will find it: by creating one (then removing it), since
 * access() says yes to root everywhere, even where creating fails
 * (/proc). 0, or VS_EIO with a message naming `option` and `path` (the
 * output the directory was checked for). */
int vs_csv_check_dir(const char *option, const char *path, const char *dir,
                     vs_error *err);

/* Whether the file `path` given to `option` can be written as vs_csv_open
 * writes it: not a directory; a device or FIFO writable in place; else
 * the directory where its symbolic links lead takes a new file
 * (vs_csv_check_dir). Leaves nothing behind. 0, or an error naming
 * option and path: VS_EUSAGE when path can only name a directory (empty,
 * or ending in '/'), VS_EIO otherwise. */
int vs_csv_check_path(const char *option, const char *path, vs_error *err);

/* Flushes stream f: NULL when everything written to it reached its
 * file, else why not (strerror's text, or that the reason was not kept),
 * for a message. */
const char *vs_stream_write_error(FILE *f);

/* What vs_make_dir says of a directory that is a link to nothing, after
 * its path; the checks before a run say it too. */
#define VS_CSV_DANGLING_DIR                                                 \
  "is a symbolic link to a path that does not exist; point it at a "        \
  "directory or remove it"

#endif
