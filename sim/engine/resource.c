/* resource.c - shared resources, processor sharing (see resource.h). */
#include "resource.h"

#include "error.h"
#include "grow.h"

#include <math.h>
#include <stdlib.h>

/* The longest time a transfer may take: integer nanoseconds stay exact and
 * far from overflow below it. */
#define MAX_NS 9.2e18

static const char *const kind_names[] = {
#define VS_RES_NAME(id, name) name,
    VS_RESOURCE_KINDS(VS_RES_NAME)
#undef VS_RES_NAME
};

const char *vs_resource_name(int kind)
{
  return kind >= 0 && kind < VS_RES_N ? kind_names[kind] : NULL;
}

/* ------------------------------------------------------------------------
 * The table from topology and layout
 * ------------------------------------------------------------------------ */

static void set_kind(vs_resource_spec *spec, double bytes_per_s,
                     double latency_s, uint64_t gpi)
{
  if (gpi == 0)
    gpi = 1;
  spec->bytes_per_s = bytes_per_s;
  spec->latency_ns = (uint64_t)llround(latency_s * 1e9);
  spec->gpus_per_instance = gpi > UINT32_MAX ? UINT32_MAX : (uint32_t)gpi;
}

void vs_resource_table(const vs_topology *topo,
                       vs_resource_spec specs[VS_RES_N])
{
  uint64_t node = topo->gpus_per_node;
  for (int k = 0; k < VS_RES_N; k++)
    specs[k] = (vs_resource_spec){0, 0, 0};
  set_kind(&specs[VS_RES_PCIE_SWITCH], topo->pcie_bandwidth, topo->pcie_latency,
           topo->gpus_per_pcie_switch);
  set_kind(&specs[VS_RES_PCIE_D2H], topo->pcie_d2h_bandwidth,
           topo->pcie_latency, topo->gpus_per_pcie_switch);
  set_kind(&specs[VS_RES_CPU], topo->cpu_optimizer_rate, 0, node);
  set_kind(&specs[VS_RES_HOST_MEMORY], topo->host_memory_bandwidth, 0, node);
  set_kind(&specs[VS_RES_NVME], topo->nvme_bandwidth, 0, node);
  set_kind(&specs[VS_RES_NIC], topo->inter_bandwidth, topo->inter_latency, 1);
  set_kind(&specs[VS_RES_NVLINK], topo->intra_bandwidth, topo->intra_latency,
           1);
  set_kind(&specs[VS_RES_COPY_ENGINE], 0, 0, 1);
}

uint32_t vs_resource_users(const vs_resource_spec *spec, const vs_layout *lay,
                           uint64_t s, bool all_ranks)
{
  uint64_t gpi = spec->gpus_per_instance ? spec->gpus_per_instance : 1;
  uint64_t inst = s * lay->pp_stride / gpi, lo = inst * gpi;
  uint64_t hi = lo + gpi < lay->gpus ? lo + gpi : lay->gpus;
  uint64_t own = 0, elsewhere = 0, lowest = UINT64_MAX;
  if (all_ranks || lay->pp_stride == 0)
    return 1;
  for (uint64_t g = lo; g < hi; g++) {
    uint64_t t = vs_layout_stage_of_gpu(lay, g);
    bool rank_here = t * lay->pp_stride / gpi == inst;
    own += t == s;
    elsewhere += !rank_here;
    if (rank_here && t < lowest)
      lowest = t;
  }
  if (s == lowest)
    own += elsewhere;
  return own == 0 ? 1 : own > UINT32_MAX ? UINT32_MAX : (uint32_t)own;
}

/* ------------------------------------------------------------------------
 * State
 * ------------------------------------------------------------------------ */

void vs_res_init(vs_res_state *st, const vs_resource_spec *specs,
                 size_t n_specs, size_t n_slots)
{
  st->specs = specs;
  st->n_specs = specs ? n_specs : 0;
  st->n_slots = n_slots;
  st->flows = NULL;
  for (int k = 0; k < VS_RES_N; k++) {
    st->instances[k] = NULL;
    st->n_instances[k] = 0;
    st->cap_instances[k] = 0;
  }
}

void vs_res_fini(vs_res_state *st)
{
  free(st->flows);
  for (int k = 0; k < VS_RES_N; k++)
    free(st->instances[k]);
  vs_res_init(st, NULL, 0, 0);
}

bool vs_res_available(const vs_res_state *st, int kind)
{
  return kind > VS_RES_NONE && kind < VS_RES_N && (size_t)kind < st->n_specs &&
         st->specs[kind].bytes_per_s > 0;
}

/* The instance of kind that gpu uses, created (idle) when new. */
static int find_instance(vs_res_state *st, int kind, uint32_t gpu,
                         uint32_t *idx)
{
  uint32_t gpi = st->specs[kind].gpus_per_instance;
  size_t i = gpu / (gpi ? gpi : 1);
  if (i >= st->n_instances[kind]) {
    if (!vs_grow((void **)&st->instances[kind], &st->cap_instances[kind], i + 1,
                 sizeof *st->instances[kind]))
      return VS_ENOMEM;
    for (size_t j = st->n_instances[kind]; j <= i; j++)
      st->instances[kind][j] = (vs_res_instance){VS_RES_NIL, 0};
    st->n_instances[kind] = i + 1;
  }
  *idx = (uint32_t)i;
  return 0;
}

/* ------------------------------------------------------------------------
 * Processor sharing
 * ------------------------------------------------------------------------ */

#define FLOW_OF(link_id) ((link_id) / VS_RES_LINKS)

static vs_res_link *link_at(vs_res_state *st, uint32_t id)
{
  return &st->flows[FLOW_OF(id)].links[id % VS_RES_LINKS];
}

static vs_res_instance *instance_of(vs_res_state *st, const vs_res_link *l)
{
  return &st->instances[l->kind][l->instance];
}

/* Brings every flow on inst up to now at the rate it has moved at since
 * its last_ns (a flow on two listed instances is brought up once). */
static void advance(vs_res_state *st, const vs_res_instance *inst,
                    uint64_t now)
{
  for (uint32_t id = inst->head; id != VS_RES_NIL; id = link_at(st, id)->next) {
    vs_res_flow *fl = &st->flows[FLOW_OF(id)];
    double moved = (double)(now - fl->last_ns) * fl->rate;
    fl->remaining_bytes =
        moved < fl->remaining_bytes ? fl->remaining_bytes - moved : 0;
    fl->last_ns = now;
  }
}

/* A flow's rate now: the smallest of its cap and its shares, bandwidth /
 * weight of each instance it crosses, in bytes per ns. */
static double flow_rate(vs_res_state *st, const vs_res_flow *fl)
{
  double rate = fl->cap;
  for (uint8_t m = 0; m < fl->n_links; m++) {
    const vs_res_link *l = &fl->links[m];
    double share = st->specs[l->kind].bytes_per_s /
                   ((double)instance_of(st, l)->weight * 1e9);
    if (share < rate)
      rate = share;
  }
  return rate;
}

/* Moves every flow's end on inst to now + remaining / rate, rounded up to
 * a nanosecond; pushes the event of a flow that has none yet. */
static int retime(vs_res_state *st, vs_evq *q, const vs_res_instance *inst,
                  uint64_t now)
{
  for (uint32_t id = inst->head; id != VS_RES_NIL; id = link_at(st, id)->next) {
    vs_res_flow *fl = &st->flows[FLOW_OF(id)];
    double ns;
    uint64_t end;
    int rc;
    fl->rate = flow_rate(st, fl);
    ns = ceil(fl->remaining_bytes / fl->rate);
    if (!(ns < MAX_NS - (double)now))
      return VS_EINPUT;
    end = now + (uint64_t)ns;
    if (fl->handle == VS_EVQ_NONE)
      rc = vs_evq_push_movable(q, end, fl->rank, fl->op, &fl->handle);
    else
      rc = vs_evq_update(q, fl->handle, end);
    if (rc)
      return rc;
  }
  return 0;
}

/* Flow f starts moving its bytes through its instances at now. */
static int join(vs_res_state *st, vs_evq *q, uint32_t f, uint64_t now)
{
  vs_res_flow *fl = &st->flows[f];
  int rc = 0;
  fl->last_ns = now;
  fl->handle = VS_EVQ_NONE;
  fl->phase = VS_FLOW_MOVE;
  fl->rate = 0;
  for (uint8_t m = 0; m < fl->n_links; m++) {
    vs_res_link *l = &fl->links[m];
    vs_res_instance *inst = instance_of(st, l);
    uint32_t id = f * VS_RES_LINKS + m;
    advance(st, inst, now);
    if (inst->head != VS_RES_NIL)
      link_at(st, inst->head)->prev = id;
    l->prev = VS_RES_NIL;
    l->next = inst->head;
    inst->head = id;
    inst->weight += l->weight;
  }
  for (uint8_t m = 0; m < fl->n_links && !rc; m++)
    rc = retime(st, q, instance_of(st, &fl->links[m]), now);
  return rc;
}

/* Flow f, whose end event has popped, leaves its instances at now. */
static int leave(vs_res_state *st, vs_evq *q, uint32_t f, uint64_t now)
{
  vs_res_flow *fl = &st->flows[f];
  int rc = 0;
  for (uint8_t m = 0; m < fl->n_links; m++) {
    vs_res_link *l = &fl->links[m];
    vs_res_instance *inst = instance_of(st, l);
    advance(st, inst, now);
    if (l->prev != VS_RES_NIL)
      link_at(st, l->prev)->next = l->next;
    else
      inst->head = l->next;
    if (l->next != VS_RES_NIL)
      link_at(st, l->next)->prev = l->prev;
    inst->weight -= l->weight;
  }
  fl->phase = VS_FLOW_IDLE;
  fl->handle = VS_EVQ_NONE;
  for (uint8_t m = 0; m < fl->n_links && !rc; m++)
    rc = retime(st, q, instance_of(st, &fl->links[m]), now);
  return rc;
}

/* Sets link m of fl to the instance of kind that gpu uses. */
static int set_link(vs_res_state *st, vs_res_flow *fl, uint8_t m, int kind,
                    const vs_res_op *op)
{
  vs_res_link *l = &fl->links[m];
  l->kind = (uint8_t)kind;
  l->weight = op->users[m] ? op->users[m] : 1;
  return find_instance(st, kind, op->gpu, &l->instance);
}

int vs_res_start(vs_res_state *st, vs_evq *q, size_t slot,
                 const vs_res_op *op, uint64_t t_ns)
{
  vs_res_flow *fl;
  uint64_t wait;
  int rc;
  if (!vs_res_available(st, op->kind) ||
      (op->via != VS_RES_NONE && !vs_res_available(st, op->via)) ||
      slot >= st->n_slots || !(op->bytes >= 0 && op->bytes < HUGE_VAL) ||
      !(op->max_bytes_per_s >= 0 && op->max_bytes_per_s < HUGE_VAL))
    return VS_EINPUT;
  if (!st->flows && !(st->flows = calloc(st->n_slots, sizeof *st->flows)))
    return VS_ENOMEM;
  fl = &st->flows[slot];
  if (fl->phase != VS_FLOW_IDLE)
    return VS_EINPUT;
  fl->n_links = op->via != VS_RES_NONE ? 2 : 1;
  if ((rc = set_link(st, fl, 0, op->kind, op)) ||
      (fl->n_links > 1 && (rc = set_link(st, fl, 1, op->via, op))))
    return rc;
  fl->remaining_bytes = op->bytes;
  fl->cap = op->max_bytes_per_s > 0 ? op->max_bytes_per_s / 1e9 : HUGE_VAL;
  fl->tag = op->tag;
  fl->rank = op->rank;
  fl->op = op->op;
  wait = op->fixed_ns + st->specs[op->kind].latency_ns;
  if (wait < op->fixed_ns || (double)t_ns + (double)wait >= MAX_NS)
    return VS_EINPUT;
  if (wait > 0 || op->bytes == 0) {
    fl->phase = VS_FLOW_WAIT;
    return vs_evq_push(q, t_ns + wait, op->rank, op->op);
  }
  return join(st, q, (uint32_t)slot, t_ns);
}

int vs_res_event(vs_res_state *st, vs_evq *q, size_t slot, uint64_t t_ns,
                 bool *ended, uint64_t *tag)
{
  vs_res_flow *fl = st->flows && slot < st->n_slots ? &st->flows[slot] : NULL;
  *ended = false;
  if (!fl || fl->phase == VS_FLOW_IDLE)
    return VS_EINPUT;
  *tag = fl->tag;
  if (fl->phase == VS_FLOW_WAIT && fl->remaining_bytes > 0)
    return join(st, q, (uint32_t)slot, t_ns);
  *ended = true;
  if (fl->phase == VS_FLOW_WAIT) {
    fl->phase = VS_FLOW_IDLE;
    return 0;
  }
  return leave(st, q, (uint32_t)slot, t_ns);
}
