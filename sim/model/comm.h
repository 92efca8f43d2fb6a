/* comm.h - the communication an op declares: which collective, over which
 * group of GPUs, on how many bytes. The model and the program say what
 * moves; the parallel layer (layout.h) places each group on the topology
 * (its size and the rank distance between members) and the cost module
 * times it. A new group (expert or context parallelism) is a new vs_group
 * and its size in the layout; nothing else changes. */
#ifndef VS_COMM_H
#define VS_COMM_H

#include <stdint.h>

typedef enum vs_coll_kind {
  VS_COLL_NONE,
  VS_COLL_ALL_REDUCE,
  VS_COLL_ALL_GATHER,
  VS_COLL_REDUCE_SCATTER,
  VS_COLL_ALL_TO_ALL,   /* each member sends 1/n of the buffer to each other */
  VS_COLL_SEND_RECV,    /* point to point, one member to one other */
  VS_COLL_N
} vs_coll_kind;

typedef enum vs_group {
  VS_GROUP_TP,        /* tensor parallel: tp consecutive ranks */
  VS_GROUP_DP,        /* data parallel: shards ZeRO states, reduces grads */
  VS_GROUP_PP,        /* pipeline: neighbouring stages */
  VS_GROUP_EP,        /* expert parallel: ep ranks */
  VS_GROUP_CP,        /* context parallel: cp ranks */
  VS_GROUP_EMBEDDING, /* first and last stage: tied embeddings (Megatron) */
  VS_GROUP_EXPERT_DP, /* expert data parallel: the ranks holding the same
                         expert shards (vs_workload_expert_dp of them,
                         Megatron-LM's), which shard their optimizer
                         states and reduce their gradients */
  VS_GROUP_ETP,       /* expert tensor parallel: the etp ranks that split
                         each routed expert's FFN (Megatron-LM's; the tp
                         group when etp = tp) */
  VS_GROUP_N
} vs_group;

/* One collective an op needs. kind VS_COLL_NONE: none. */
typedef struct vs_comm {
  uint8_t kind;         /* vs_coll_kind */
  uint8_t group;        /* vs_group */
  uint64_t bytes;       /* size of the full (gathered) buffer */
} vs_comm;

/* "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"
 * or "none". */
const char *vs_coll_name(int kind);

/* "<group>_<collective>", e.g. "tp_all_reduce": the name of the op that
 * runs it. A static string. */
const char *vs_coll_op_name(int group, int kind);

/* "tp", "dp", "pp", "ep", "cp", "embedding", "edp", "etp" ("?" outside
 * the range). */
const char *vs_group_name(int group);

#endif
