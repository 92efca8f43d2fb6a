/* collective.h - alpha-beta costs of NCCL-style ring collectives on the
 * topology's links. A group inside one node rides NVLink; a group that spans
 * nodes is limited by each GPU's network interface. Pure functions. */
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

/* Seconds to move `bytes` once over link: latency + bytes / bandwidth, or
 * the calibrated curve's piece for that size. */
double vs_link_seconds(vs_link link, double bytes);

/* Seconds for one collective over n ranks on a buffer of `bytes` (the full,
 * gathered size): ring all-reduce moves 2(n-1)/n of it over 2(n-1) steps,
 * all-gather and reduce-scatter (n-1)/n over n-1 steps (Thakur et al. 2005;
 * NCCL's bus-bandwidth convention), each step moving bytes / n over the
 * link. 0 when n <= 1. */
double vs_collective_seconds(int kind, uint64_t bytes, uint64_t n, vs_link link);

#endif
