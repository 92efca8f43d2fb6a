/* rawcsv.h - the raw samples of a calibration: one row per timed sample.
 *
 * File format (contract): a header row naming the columns kind, bytes,
 * sample and seconds (in any order; any number of other columns, which are
 * ignored), then one row per sample: kind is a VS_CAL_* name or "context"
 * (CUDA context creation: bytes is the context's size, seconds its creation
 * time) or "gemm" (one GEMM launch: columns m, n, k and batch, which the
 * header may have, give its shape, batch 1 when absent or empty; bytes is
 * ignored, written as its operands' and output's bytes at 2 B an element),
 * bytes a non-negative integer, sample the sample's index at that size,
 * seconds a finite time >= 0 and at most 1e10 (2^53 bytes at
 * 1 MB/s). Each sample is one row: a kind, size (a gemm row's shape) and
 * sample index on two rows is refused. A vs_raw owns one growing series
 * per kind. */
#ifndef VS_RAWCSV_H
#define VS_RAWCSV_H

#include "error.h"
#include "model.h"
#include "topology.h"

#include <stddef.h>
#include <stdint.h>

#define VS_RAW_CONTEXT VS_CAL_N_KINDS          /* kind index of "context" */
#define VS_RAW_GEMM (VS_CAL_N_KINDS + 1)        /* ... of "gemm" */
#define VS_RAW_N_KINDS (VS_CAL_N_KINDS + 2)

/* The samples of one kind, in the order they were taken or read. */
typedef struct vs_raw_series {
  double *bytes;                 /* sizes (exact integers below 2^53) */
  double *seconds;               /* times */
  uint32_t *sample;              /* sample index at that size */
  vs_gemm *shape;                /* gemm: each sample's shape, else NULL */
  size_t n;                      /* samples held */
  size_t cap;                    /* capacity of the arrays */
} vs_raw_series;

typedef struct vs_raw {
  vs_raw_series kinds[VS_RAW_N_KINDS]; /* by VS_CAL_* or VS_RAW_CONTEXT */
} vs_raw;

/* Name of a raw kind ("h2d_pinned", ..., "context") or NULL. */
const char *vs_raw_kind_name(int kind);

/* The raw kind called name, or -1. */
int vs_raw_kind_find(const char *name);

/* Empty series / frees them. */
void vs_raw_init(vs_raw *raw);
void vs_raw_fini(vs_raw *raw);

/* Appends one sample (not of kind gemm: vs_raw_add_gemm, VS_EINPUT).
 * VS_ENOMEM. Amortised O(1). */
int vs_raw_add(vs_raw *raw, int kind, uint64_t bytes, uint32_t sample,
               double seconds, vs_error *err);

/* Appends one GEMM launch of shape g (m, n, k, batch all > 0; bytes
 * recorded as its operands' and output's at 2 B an element). VS_ENOMEM. */
int vs_raw_add_gemm(vs_raw *raw, vs_gemm g, uint32_t sample, double seconds,
                    vs_error *err);

/* Appends the samples of path (parsed with libcsv). VS_EIO when it cannot
 * be read or is not a regular file (a directory, device, FIFO or socket);
 * VS_EINPUT naming path:line for a missing column, an unknown kind, a bad
 * or negative number, a wrong field count, malformed CSV, a NUL byte, a
 * line over 4096 bytes, a file over 1 GiB or a file without samples, and
 * for a sample on two rows (the same kind, size or gemm shape, and sample
 * index: the later row, on the earliest line, naming the first's line;
 * checked once the whole file is read, against the samples of path only).
 * A leading UTF-8 byte order mark is skipped. raw may hold part of the
 * file on error. O(n log n) in its rows. */
int vs_raw_read(vs_raw *raw, const char *path, vs_error *err);

/* Writes raw to path atomically (temporary file, then rename). VS_EIO. */
int vs_raw_write(const vs_raw *raw, const char *path, vs_error *err);

#endif
