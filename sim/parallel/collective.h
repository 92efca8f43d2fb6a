/* collective.h - which link a collective or transfer rides on the
 * topology: a group inside one node rides NVLink; a group that spans nodes
 * is limited by each GPU's network interface. The time over a link is
 * sim/cost's (vs_cost_link_seconds, vs_cost_collective_seconds). Pure
 * functions. */
#ifndef VS_COLLECTIVE_H
#define VS_COLLECTIVE_H

#include "comm.h"

#include <stdbool.h>
#include <stdint.h>

struct vs_topology;
struct vs_cal_fit;
struct vs_cal_seen;

typedef struct vs_link {
  double bandwidth;   /* bytes/s per GPU, one direction */
  double latency;     /* seconds per ring step */
  const struct vs_cal_fit *curve; /* calibrated p2p curve that replaces
                                     bandwidth and latency; NULL: nominal */
  struct vs_cal_seen *seen;       /* where curve sizes are recorded, or NULL
                                     (callers set it) */
} vs_link;

/* The link a group of `span` consecutive ranks uses (span = group size x
 * stride of its members): NVLink when it fits in one node, timed by the
 * calibrated p2p curve when the topology has one (nvlink_curve). */
vs_link vs_collective_link(const struct vs_topology *topo, uint64_t span);

#endif
