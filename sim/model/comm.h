/* comm.h - the communication an op declares: which collective, over which
 * group of GPUs. The model and the program say what moves; the parallel
 * layer (collective.h, layout.h) places the group on the topology and the
 * cost module times it. */
#ifndef VS_COMM_H
#define VS_COMM_H

typedef enum vs_coll_kind {
  VS_COLL_NONE,
  VS_COLL_ALL_REDUCE,
  VS_COLL_ALL_GATHER,
  VS_COLL_REDUCE_SCATTER
} vs_coll_kind;

/* "all_reduce", "all_gather", "reduce_scatter" or "none". */
const char *vs_coll_name(int kind);

#endif
