/* resource.h - links and devices that ops share: PCIe switches, host
 * memory, NVMe drives, NICs, NVLink ports, copy engines.
 *
 * An op that names a resource moves its bytes through one instance of it,
 * and through one instance of a second kind when it names one too (a copy
 * crosses its PCIe switch and the host's memory). An instance shares its
 * bandwidth fairly among the ops moving bytes through it at the moment
 * (processor sharing), and an op moves at the smaller of its shares (and
 * of its own cap, when it has one: a copy from or to pageable host memory,
 * which the host CPU stages), so its duration is decided while it runs:
 * whenever an op joins or leaves an instance, every op on it is re-timed
 * (remaining -= rate x elapsed; rate = the smallest of its cap and, over
 * its instances, bandwidth / users; end = now + ceil(remaining / rate) ns)
 * and its end event moved. (The share an op leaves unused on its other
 * instance, or under its cap, is not handed to the others there: equal
 * shares, not max-min fairness.)
 *
 * Which instance: GPU g uses instance g / gpus_per_instance of each kind. A
 * simulated rank that stands for several GPUs on its instance (one rank
 * per stage: its stage's data- and tensor-parallel peers run the same
 * program at the same time) counts as that many users (the op's `users`,
 * vs_resource_users), so it sees the contention of its peers without
 * simulating them.
 *
 * State (vs_res_state): per kind, the instances used so far; per instance,
 * a doubly linked list of the links of the flows moving bytes through it
 * and the sum of their weights. A flow is the resource part of one running
 * op, one per (rank, stream) slot, with one link per instance it crosses.
 * Invariants: an instance's weight is the sum of its listed links'
 * weights; every moving flow has one live movable event in the queue, at
 * its end for its instances' current weights. Resources are plain
 * data: the state is per run, so runs in threads share nothing. */
#ifndef VS_RESOURCE_H
#define VS_RESOURCE_H

#include "evq.h"
#include "resource_kinds.h"
#include "layout.h"
#include "topology.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One kind of resource. */
typedef struct vs_resource_spec {
  double bytes_per_s;          /* bandwidth of one instance; 0: absent (an
                                  op that names it is an error) */
  uint64_t latency_ns;         /* fixed time, once per op, before its bytes
                                  move (it holds no bandwidth meanwhile) */
  uint32_t gpus_per_instance;  /* GPU g uses instance g / this (0 = 1) */
} vs_resource_spec;

/* The name of a kind ("pcie_switch"), or NULL when out of range. */
const char *vs_resource_name(int kind);

/* Fills specs[VS_RES_N] (by kind; [VS_RES_NONE] all zero) from topo and
 * lay: pcie_switch (host to device) from [node] pcie_bandwidth,
 * pcie_latency and gpus_per_pcie_switch, pcie_switch_d2h the other
 * direction of the same link (PCIe is full duplex) at pcie_d2h_bandwidth;
 * cpu from cpu_optimizer_rate, one per node, whose "bytes" are parameters
 * stepped; host_memory from host_memory_bandwidth (absent when 0), one
 * per node; nvme from nvme_bandwidth, one per node; nic and
 * nvlink from [network] inter_* and intra_*, one per GPU. copy_engine
 * has no topology key yet: absent. O(1). */
void vs_resource_table(const vs_topology *topo,
                       vs_resource_spec specs[VS_RES_N]);

/* The users the simulated rank of stage s of lay counts for on its
 * instance of the kind of spec: 1 when every GPU is simulated (all_ranks);
 * in stage mode (the rank is GPU s * pp_stride) its stage's GPUs on that
 * instance, and for the lowest stage whose rank is there also the GPUs
 * there of stages whose ranks are elsewhere, so that the instance's users
 * add up to its GPUs, whichever stages share it (stages that fill
 * instances unevenly are approximate: a stage's GPUs on other instances
 * are taken to see what its rank sees). At least 1. O(gpus_per_instance). */
uint32_t vs_resource_users(const vs_resource_spec *spec, const vs_layout *lay,
                           uint64_t s, bool all_ranks);

#define VS_RES_NIL UINT32_MAX  /* no link */

/* Instances one flow crosses at most. */
#define VS_RES_LINKS 2

/* What a flow is doing. */
enum { VS_FLOW_IDLE, VS_FLOW_WAIT, VS_FLOW_MOVE };

/* A flow's place on one instance's list. Lists hold link ids: flow x
 * VS_RES_LINKS + the link's index in its flow. */
typedef struct vs_res_link {
  uint32_t instance;       /* index among its kind's instances */
  uint32_t prev, next;     /* neighbouring link ids (VS_RES_NIL) */
  uint32_t weight;         /* users it counts for (vs_res_op users) */
  uint8_t kind;            /* vs_resource_kind */
} vs_res_link;

/* The resource part of one running op. */
typedef struct vs_res_flow {
  double remaining_bytes;  /* still to move, as of last_ns */
  double rate;             /* bytes per ns since last_ns */
  double cap;              /* the most bytes per ns it moves at, whatever
                              its shares; HUGE_VAL: no cap */
  uint64_t last_ns;        /* when remaining_bytes was last brought up to date */
  uint64_t tag;            /* the caller's (the engine: its span index) */
  uint32_t rank, op;       /* its events' rank and op in the queue */
  uint32_t handle;         /* its movable end event while moving bytes */
  vs_res_link links[VS_RES_LINKS];
  uint8_t n_links;         /* links in use */
  uint8_t phase;           /* VS_FLOW_* */
} vs_res_flow;

/* One instance of a kind. */
typedef struct vs_res_instance {
  uint32_t head;           /* first link moving bytes; VS_RES_NIL if none */
  uint64_t weight;         /* sum of its links' weights */
} vs_res_instance;

typedef struct vs_res_state {
  const vs_resource_spec *specs; /* [kind] (not owned) */
  size_t n_specs;                /* kinds specs describes */
  size_t n_slots;                /* flow slots: ranks x streams */
  vs_res_flow *flows;            /* [slot], allocated at the first start */
  vs_res_instance *instances[VS_RES_N]; /* per kind, by instance index */
  size_t n_instances[VS_RES_N];  /* instances initialised, per kind */
  size_t cap_instances[VS_RES_N]; /* allocated, per kind */
} vs_res_state;

/* An op that starts on a resource. */
typedef struct vs_res_op {
  uint32_t rank, op;       /* identity of its events in the queue */
  uint32_t gpu;            /* global GPU number: picks the instance */
  uint8_t kind;            /* vs_resource_kind, not VS_RES_NONE */
  uint8_t via;             /* a second kind its bytes cross, or
                              VS_RES_NONE */
  double bytes;            /* to move through it (>= 0) */
  uint64_t fixed_ns;       /* its own fixed time, before the latency */
  uint64_t tag;            /* kept for the caller */
  double max_bytes_per_s;  /* the most it moves at, whatever its shares
                              (0: no cap) */
  uint32_t users[VS_RES_LINKS]; /* users it counts for on its instance of
                              kind and of via (vs_resource_users); 0 = 1 */
} vs_res_op;

/* Empty state over specs[0..n_specs) (not copied; must outlive it) for
 * n_slots flow slots; allocates nothing until the first vs_res_start. */
void vs_res_init(vs_res_state *st, const vs_resource_spec *specs,
                 size_t n_specs, size_t n_slots);
void vs_res_fini(vs_res_state *st);

/* True when kind has an instance bandwidth in the table. */
bool vs_res_available(const vs_res_state *st, int kind);

/* Starts op in flow slot at t_ns: it waits fixed_ns + the kind's latency
 * (a plain event, holding no bandwidth), then joins its instance (a movable
 * event; the others on it re-timed). An op with no bytes ends after the
 * wait. VS_EINPUT if the kind (or via, when given) is absent, bytes is
 * negative or not finite, the cap is negative or not finite,
 * or a time would pass 2^63 ns; VS_ENOMEM on allocation failure. After an
 * error the state may be inconsistent: end the run. The slot must be idle.
 * O(k log m) for k ops on the instance. */
int vs_res_start(vs_res_state *st, vs_evq *q, size_t slot,
                 const vs_res_op *op, uint64_t t_ns);

/* Handles the popped event of the flow in slot at t_ns: after the wait the
 * flow joins its instance (*ended = false); after the transfer it leaves it,
 * re-timing the others, and the slot is idle again (*ended = true, *tag =
 * the op's tag). Errors as vs_res_start; VS_EINPUT also if the slot is
 * idle. O(k log m). */
int vs_res_event(vs_res_state *st, vs_evq *q, size_t slot, uint64_t t_ns,
                 bool *ended, uint64_t *tag);

#endif
