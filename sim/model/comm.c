/* comm.c - names of collectives and groups (see comm.h). */
#include "comm.h"

const char *vs_coll_name(int kind)
{
  switch (kind) {
  case VS_COLL_ALL_REDUCE:
    return "all_reduce";
  case VS_COLL_ALL_GATHER:
    return "all_gather";
  case VS_COLL_REDUCE_SCATTER:
    return "reduce_scatter";
  default:
    return "none";
  }
}
