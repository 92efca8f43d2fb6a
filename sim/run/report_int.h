/* report_int.h - what report.c and report_show.c share. */
#ifndef VS_REPORT_INT_H
#define VS_REPORT_INT_H

#include "layout.h"

#include <stddef.h>
#include <stdio.h>

/* "cp N x " with context parallelism (with its exchange), else "" (in
 * buf, of len bytes). */
static inline const char *vs_report_cp_text(const vs_layout *lay, char *buf,
                                            size_t len)
{
  buf[0] = '\0';
  if (lay->cp > 1)
    snprintf(buf, len, "cp %llu x ", (unsigned long long)lay->cp);
  return buf;
}

#endif
