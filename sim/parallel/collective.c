/* collective.c - ring collective costs (see collective.h). */
#include "collective.h"

#include "topology.h"

vs_link vs_collective_link(const vs_topology *topo, uint64_t span)
{
  vs_link link = {0};
  if (span <= topo->gpus_per_node) {
    link.bandwidth = topo->intra_bandwidth;
    link.latency = topo->intra_latency;
    if (topo->nvlink_curve)
      link.curve = &topo->cal[VS_CAL_P2P];
  } else {
    link.bandwidth = topo->inter_bandwidth;
    link.latency = topo->inter_latency;
  }
  return link;
}

double vs_link_seconds(vs_link link, double bytes)
{
  if (link.curve)
    return vs_cal_seconds(link.curve, VS_CAL_P2P, bytes, link.seen);
  return link.latency + bytes / link.bandwidth;
}

double vs_collective_seconds(int kind, uint64_t bytes, uint64_t n, vs_link link)
{
  double steps;
  if (n <= 1 || kind == VS_COLL_NONE)
    return 0.0;
  steps = (double)(n - 1);
  if (kind == VS_COLL_ALL_REDUCE)
    steps *= 2.0;
  return steps * vs_link_seconds(link, (double)bytes / (double)n);
}
