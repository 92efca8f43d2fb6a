/* layout.h - how a job is laid out: dp x tp (x pp) over nodes, the ZeRO
 * partitioning of model states over data-parallel ranks, and the memory the
 * framework holds outside the allocator.
 *
 * Ranks are numbered Megatron's way: tp innermost, then dp, then pp, so a
 * tp group is tp consecutive GPUs and a dp group strides by tp. All byte
 * figures are for one GPU. */
#ifndef VS_LAYOUT_H
#define VS_LAYOUT_H

#include "collective.h"
#include "error.h"
#include "model.h"
#include "recipe.h"
#include "topology.h"
#include "workload.h"

#include <stdbool.h>
#include <stdint.h>

/* What one GPU keeps in a place other than its own memory (host DRAM or
 * NVMe), per GPU: its share of the node's. */
typedef struct vs_placed_bytes {
  uint64_t params;                /* parameter partition */
  uint64_t grads;                 /* fp32 gradient partition */
  uint64_t optimizer;             /* master weights and moments */
  uint64_t buffers;               /* pinned staging and swap buffers */
} vs_placed_bytes;

/* What one pipeline stage holds. */
typedef struct vs_stage_layout {
  bool has_embed;                 /* first stage: input batch and embeddings */
  bool has_head;                  /* last stage: final norm, output, loss */
  uint64_t framework_bytes;       /* outside the allocator on its GPUs: the
                                     CUDA context and its communicators'
                                     buffers (the embedding group's only on
                                     the first and the last stage) */
  uint64_t n_layers;              /* transformer layers, all its chunks */
  uint64_t param_elems;           /* parameters on one GPU before ZeRO */
  uint64_t trainable_elems;       /* of which trainable */
  uint64_t largest_trainable_elems; /* its largest trainable tensor's */
  uint64_t params_full_bytes;     /* before partitioning */
  uint64_t grads_full_bytes;
  uint64_t optimizer_full_bytes;
  uint64_t params_bytes;          /* resident on the GPU after ZeRO */
  uint64_t grads_bytes;
  uint64_t optimizer_bytes;
  uint64_t params_shard_bytes;    /* this GPU's partitions after ZeRO, */
  uint64_t optimizer_shard_bytes; /* wherever they live */
  uint64_t decay_elems;           /* trainable matrices' elements */
  uint64_t expert_optimizer_full_bytes; /* of optimizer_full_bytes, the
                                     routed experts' (vs_recipe
                                     expert_optimizer shards them) */
  uint64_t expert_params_full_bytes; /* of params_full_bytes, theirs */
  uint64_t expert_grads_full_bytes;  /* of grads_full_bytes, theirs
                                      (vs_recipe expert_grads shards
                                      them) */
  uint64_t trainable_params_full_bytes; /* of params_full_bytes, the
                                     trainable tensors' (vs_kind_plan
                                     trainable_param_bytes) */
  uint64_t expert_trainable_elems; /* of trainable_elems, theirs */
  uint64_t expert_decay_elems;    /* of decay_elems, theirs */
  uint64_t ddp_bucket_bytes;      /* of grads_bytes, DDP's bucket copy
                                     (vs_recipe ddp_bucket_copy) */
  uint64_t step_temp_bytes;       /* fp32 gradient copies at the optimizer
                                     step (vs_recipe step_copy) */
  uint64_t step_elems;            /* parameters this GPU's optimizer steps
                                     (its trainable partition) */
  uint64_t managed_bytes;         /* paged optimizer states in CUDA managed
                                     memory (not in optimizer_bytes) */
  uint64_t fp8_weight_elems;      /* its FP8 GEMMs' weights, in blocks
                                     that run backward */
  uint64_t fp8_copy_elems;        /* of which quantized (not stored in FP8) */
  uint64_t fp8_gemms;             /* its GEMMs with weights */
  uint64_t fp8_cache_bytes;       /* FP8 copies kept through the step: 1 B
                                     a quantized weight, and with
                                     transposes 1 B more a weight, and
                                     the GEMMs' amax histories (in
                                     params_bytes) */
  uint64_t grad_staging_bytes;    /* DeepSpeed ZeRO-1/2's GPU buffer of
                                     its largest trainable tensor for
                                     gradient sums from the host
                                     (vs_offload_plan bit16_buffers) */
  vs_placed_bytes host;           /* off the GPU, in host DRAM */
  vs_placed_bytes nvme;           /* off the GPU, on NVMe */
} vs_stage_layout;

/* Where the members of a group sit on the nodes: the nodes a group spans
 * and the fewest of its members in one of them. A group inside one node
 * has nodes = 1 and per_node = its size. */
typedef struct vs_group_span {
  uint64_t nodes;
  uint64_t per_node;
} vs_group_span;

typedef struct vs_layout {
  uint64_t tp, pp, dp;            /* group sizes; dp counts the context-
                                     parallel ranks too (dp x cp: the ranks
                                     beside tp that reduce gradients and
                                     shard states together) */
  uint64_t cp;                    /* context-parallel size (of dp) */
  uint64_t gpus;                  /* tp * pp * dp */
  uint64_t nodes;                 /* ceil(gpus / gpus per node) */
  uint64_t zero;                  /* ZeRO stage */
  uint64_t grad_accum;            /* micro-batches per step */
  uint64_t vstages;               /* model chunks per stage (interleaving) */
  uint64_t n_chunks;              /* pp * vstages */
  uint32_t chunk_first[VS_MAX_CHUNKS];  /* first layer of model chunk g;
                                           stage g % pp holds chunk g */
  uint32_t chunk_layers[VS_MAX_CHUNKS]; /* layers in model chunk g */
  vs_stage_layout stages[VS_MAX_STAGES]; /* per pipeline stage */
  uint64_t tp_stride, dp_stride, pp_stride; /* rank distance between group
                                               neighbours (from `order`) */
  uint64_t group_size[VS_GROUP_N];   /* members of each vs_group */
  uint64_t group_stride[VS_GROUP_N]; /* rank distance between members */
  vs_group_span group_span[VS_GROUP_N]; /* of each kind, its worst-placed
                                     group's: the one whose inter-node
                                     share per NIC, (nodes - 1) / nodes of
                                     1 / per_node of the buffer, is the
                                     largest (then the one over most
                                     nodes). Where a node's GPU count is
                                     not a multiple of a group's extent,
                                     groups straddle nodes unevenly; the
                                     step waits for the slowest, so every
                                     group of the kind is priced as it */
  bool stage_apart[VS_MAX_STAGES]; /* some rank of stage s and its peer in
                                     stage (s + 1) % pp are in different
                                     nodes */
  bool experts_apart;             /* routed experts have groups of their own
                                     (vs_workload_experts_apart): their
                                     gradients reduce over
                                     VS_GROUP_EXPERT_DP, not dp */
  /* The fields below are those of the stage with the most model states
   * (the only stage when pp = 1). */
  uint64_t param_elems;           /* parameters on one GPU before ZeRO */
  uint64_t param_elem_bytes;      /* 4 (fp32) or 2 */
  uint64_t grad_elem_bytes;       /* 4 with fp32 grads, else as params */
  uint64_t params_full_bytes;     /* params before partitioning */
  uint64_t grads_full_bytes;      /* grads before partitioning */
  uint64_t optimizer_full_bytes;  /* master weights + moments before it */
  uint64_t params_bytes;          /* resident after ZeRO-3 partitioning */
  uint64_t grads_bytes;           /* resident after ZeRO-2 partitioning */
  uint64_t optimizer_bytes;       /* resident after ZeRO-1 partitioning */
  int n_communicators;            /* NCCL communicators a GPU of the first
                                     stage joins (the most: one fewer on
                                     the stages between the first and the
                                     last when the embedding group is one,
                                     vs_stage_layout framework_bytes) */
  uint64_t framework_bytes;       /* outside the allocator: context + NCCL,
                                     the most of a stage's (the first's) */
  /* cuBLAS workspaces PyTorch allocates through the caching allocator
   * (CublasHandlePool.cpp getNewWorkspace: one per (handle, stream), and
   * a handle per thread): the forward's, on the Python thread, and the
   * backward's, on autograd's device thread. Each is
   * [gpu] cublas_workspace bytes, held from the first step on. */
  int blas_workspaces;
  uint64_t blas_workspace_bytes;
} vs_layout;

/* Fills lay from the resolved workload, its model, their recipe and the
 * topology.
 * VS_EINPUT if the precision needs a capability the GPU lacks (fp8) or the
 * pipeline has more than VS_MAX_STAGES stages or VS_MAX_CHUNKS chunks
 * (which a loaded workload never has: the guard of lay's arrays). */
int vs_layout_build(const vs_workload *wl, const vs_topology *topo,
                    const vs_model *m, const vs_recipe *r, vs_layout *lay,
                    vs_error *err);

/* Model states resident on one GPU: params + grads + optimizer, of the most
 * loaded stage, or of stage s. */
uint64_t vs_layout_model_states(const vs_layout *lay);
uint64_t vs_layout_stage_model_states(const vs_layout *lay, uint64_t s);

/* The pipeline stage GPU `gpu` of lay belongs to: stages are pp_stride
 * apart in either of Megatron's orders (tp-dp-pp, tp-pp-dp). */
static inline uint64_t vs_layout_stage_of_gpu(const vs_layout *lay,
                                              uint64_t gpu)
{
  return gpu / lay->pp_stride % lay->pp;
}

/* The bytes of all a GPU's cuBLAS workspaces (vs_layout.blas_workspaces),
 * allocated with its model states and held all step. */
uint64_t vs_layout_blas_bytes(const vs_layout *lay);

/* The bytes of stage st's own gradient tensors on the GPU: its grads_bytes
 * less DDP's bucket copy of them (what zero_grad zeroes and the reducer
 * copies back). */
static inline uint64_t vs_stage_grad_tensor_bytes(const vs_stage_layout *st)
{
  return st->grads_bytes - st->ddp_bucket_bytes;
}

/* The sum of a vs_placed_bytes. */
uint64_t vs_placed_total(const vs_placed_bytes *b);

/* Link between pipeline stages s and t, neighbours modulo pp (t = s + 1,
 * s - 1, or the first and last stage): NVLink when every rank of the one
 * and its peer in the other share a node, else the NIC. */
vs_link vs_layout_stage_link(const vs_topology *topo, const vs_layout *lay,
                             uint64_t s, uint64_t t);

#endif
