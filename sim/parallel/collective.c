/* collective.c - the link a group uses (see collective.h). */
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
