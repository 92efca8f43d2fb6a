/* collective.c - ring collective costs (see collective.h). */
#include "collective.h"

#include "topology.h"

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

vs_link vs_collective_link(const vs_topology *topo, uint64_t span)
{
  vs_link link;
  if (span <= topo->gpus_per_node) {
    link.bandwidth = topo->intra_bandwidth;
    link.latency = topo->intra_latency;
  } else {
    link.bandwidth = topo->inter_bandwidth;
    link.latency = topo->inter_latency;
  }
  return link;
}

double vs_collective_seconds(int kind, uint64_t bytes, uint64_t n, vs_link link)
{
  double steps, fraction;
  if (n <= 1 || kind == VS_COLL_NONE)
    return 0.0;
  steps = (double)(n - 1);
  fraction = (double)(n - 1) / (double)n;
  if (kind == VS_COLL_ALL_REDUCE) {
    steps *= 2.0;
    fraction *= 2.0;
  }
  return steps * link.latency + fraction * (double)bytes / link.bandwidth;
}
