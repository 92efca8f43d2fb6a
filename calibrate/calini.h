/* calini.h - the calibrated topology INI that vsim-calibrate writes.
 *
 * A vs_cal_out gathers what goes into the file: the nominal topology (a base
 * file's values, with the figures the measurement read from the device put
 * over them), the fit of each calibrated kind, and comment lines (device,
 * date, source). The file is written atomically and is read back by
 * vs_topology_load; its [calibration] section follows topology.h. */
#ifndef VS_CALINI_H
#define VS_CALINI_H

#include "error.h"
#include "fit.h"
#include "topology.h"

#include <stdbool.h>

typedef struct vs_cal_out {
  vs_topology topo;                  /* nominal values; cal[] filled by add */
  bool fitted[VS_CAL_N_KINDS];       /* kinds with a fit */
  vs_fit fits[VS_CAL_N_KINDS];       /* their fits */
  char comments[4096];               /* header comment lines, '\n'-separated */
} vs_cal_out;

/* Records kind's fit in out->fits and out->topo.cal[kind]: bandwidth and
 * latency of the last piece, quality, range, breakpoints and, when
 * piecewise, every piece's bandwidth and latency. The first piece's latency
 * is clamped at 0; a later piece's is its line's intercept (may be below
 * 0); a rate under 1 MB/s is written as 0. False when the kind is left out:
 * a curve vsim times transfers with whose time does not grow with size. */
bool vs_cal_out_add(vs_cal_out *out, int kind, const vs_fit *fit);

/* Why vs_cal_out_add left kind's fit out, into buf: its last piece's
 * time does not grow with size (a slope over 100 TB/s is rounding noise,
 * or times far too small), or grows under 1 MB/s (times far too large:
 * most likely microseconds for seconds). */
void vs_cal_out_why_left_out(int kind, const vs_fit *fit, char *buf,
                             size_t len);

/* Appends one comment line (without the leading "; "). */
void vs_cal_out_comment(vs_cal_out *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Marks the nominal key section.name as measured on this machine (in
 * out->topo.measured, written as [calibration] measured); false when it is
 * none of vs_topology_measurable. */
bool vs_cal_out_measured(vs_cal_out *out, const char *section,
                         const char *name);

/* Writes out to path through a temporary file renamed into place. VS_EIO
 * with the reason; on failure nothing is left at path's temporary name. */
int vs_cal_out_write(const vs_cal_out *out, const char *path, vs_error *err);

#endif
