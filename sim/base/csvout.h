/* csvout.h - CSV files written atomically through libcsv.
 *
 * A vs_csv writes to a temporary file beside its destination and renames it
 * into place on commit, so a reader never sees a half-written file and a
 * failed run leaves nothing behind. A destination that is a symbolic link
 * is written where the link points; one that is not a regular file (a
 * device such as /dev/null, a FIFO) is written to directly, never replaced.
 * Temporary files still open when SIGINT, SIGTERM or SIGHUP arrives are
 * removed (vs_csv_cleanup_on_signals). Text fields are quoted by libcsv
 * when they need it; numbers are written plainly. */
#ifndef VS_CSVOUT_H
#define VS_CSVOUT_H

#include "error.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct vs_csv {
  FILE *f;              /* the temporary file (or the destination itself) */
  char path[4096];      /* destination, symbolic links resolved */
  char tmp_path[4096];  /* temporary name in the same directory; empty when
                           writing to the destination directly */
  int n_fields;         /* fields written in the current row */
  bool failed;          /* a write failed; commit will report it */
  int write_errno;      /* errno of the first failed write */
} vs_csv;

/* Opens a temporary file for path. VS_EIO with the reason on failure. */
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

/* Writes printf-formatted text as it is, neither quoted nor separated:
 * for a file that is not CSV (a trace, an SVG) written through vs_csv's
 * atomic file. A failure is recorded, with its errno, like any write's. */
void vs_csv_printf(vs_csv *csv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Ends the row. */
void vs_csv_row(vs_csv *csv);

/* Writes a header row from a comma-separated list of names. */
void vs_csv_header(vs_csv *csv, const char *names);

/* Flushes, closes and renames into place. On failure removes the temporary
 * file and returns VS_EIO. */
int vs_csv_commit(vs_csv *csv, vs_error *err);

/* vs_csv_commit for a set of files that belong together: all are flushed
 * first, and only when every one was written are they renamed into place;
 * otherwise all temporary files are removed and the first failure is
 * reported. */
int vs_csv_commit_all(vs_csv *csvs, size_t n, vs_error *err);

/* Closes and removes the temporary file. */
void vs_csv_abort(vs_csv *csv);

/* Installs handlers for SIGINT, SIGTERM and SIGHUP that remove the
 * temporary files of every vs_csv not yet committed or aborted, then end
 * the process by the same signal. Call once, early in main. */
void vs_csv_cleanup_on_signals(void);

/* Follows the symbolic links of path into out, as vs_csv_open does: a
 * relative target is relative to the link's folder, and the last target
 * need not exist. 0, or ELOOP (over 16 links), ENAMETOOLONG or readlink's
 * errno. */
int vs_csv_follow_links(const char *path, char *out, size_t len);

/* Creates a new file named "stem.PID.N" (O_EXCL, mode 0666 less the
 * umask), its name in name[len]; the file is removed on a signal until
 * vs_csv_untrack(name). Returns the descriptor, or -1 with errno. */
int vs_csv_create_unique(const char *stem, char *name, size_t len);

/* Stops removing that file on a signal (after the caller removed or
 * renamed it). */
void vs_csv_untrack(const char *tmp_path);

/* Creates directory dir if it does not exist. VS_EIO on failure. */
int vs_make_dir(const char *dir, vs_error *err);

#endif
