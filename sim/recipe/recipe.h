/* recipe.h - the resolved plan of a job: everything the simulator decides
 * about it, decided once, after loading and validating, from the workload
 * and the model. The layout, the schedule builder and the report read only
 * this; none of them re-reads `zero`, `checkpointing` or the optimizer.
 *
 * What it holds:
 * - model states: for params, grads and optimizer states, how many GPUs of
 *   the sharding group share one copy (ZeRO's degree: Rajbhandari et al.
 *   2020, stage 1 partitions optimizer states, 2 also gradients, 3 also
 *   parameters) and where the state lives (the GPU; host and NVMe come with
 *   offload);
 * - the ZeRO data flow those degrees imply (per-block gathers, transient
 *   gradients, the all-gather after the step);
 * - per block kind: per saved tensor whether it is kept, recomputed with the
 *   attention core (selective) or with the whole block (full); per op its
 *   backward work once frozen weights skip their weight gradient; the
 *   block's parameter, gradient and optimizer bytes on one GPU before
 *   sharding;
 * - per use of communication, its stream and group.
 * Invariant: kinds[k] describes m->kinds[k] of the model it was built from,
 * and lives no longer than that model. */
#ifndef VS_RECIPE_H
#define VS_RECIPE_H

#include "category.h"
#include "comm.h"
#include "error.h"
#include "model.h"
#include "workload.h"

#include <stdbool.h>
#include <stdint.h>

/* The streams ops run on (the engine runs each stream's ops in order). */
typedef enum vs_stream {
  VS_STREAM_COMPUTE,  /* kernels, tensor-parallel collectives (Megatron
                         issues them on the compute stream) */
  VS_STREAM_COMM,     /* data-parallel collectives, ZeRO gathers */
  VS_STREAM_SEND,     /* pipeline sends (asynchronous, like isend) */
  VS_STREAM_RECV,     /* pipeline receives, in the order they are needed */
  VS_STREAM_D2H,      /* device-to-host copies (offload: gradients out) */
  VS_STREAM_H2D,      /* host-to-device copies (offload: parameters in) */
  VS_STREAM_HOST,     /* the host CPU (offload: the optimizer step, NVMe
                         swaps) */
  VS_STREAM_N
} vs_stream;

/* The stream a GPU buffer is made on, whose caching-allocator pool it
 * comes from (PyTorch keeps a pool per stream and takes a tensor from the
 * pool of the stream current where it is made): mostly the stream of the
 * op that allocates it, else a stream that only makes buffers here. */
typedef enum vs_made_on {
  VS_MADE_ON_OP_STREAM, /* the allocating op's stream */
  VS_MADE_ON_GATHER,    /* the stream a framework makes its gathered
                           parameters on (recipe gather_made_on):
                           FSDP2's all_gather_copy_in_stream, where
                           foreach_all_gather makes the all-gather's
                           output and the 16-bit copy of the shard,
                           though the all-gather runs on
                           all_gather_stream (_fsdp_collectives.py);
                           DeepSpeed ZeRO-3's __allgather_stream */
  VS_MADE_ON_N
} vs_made_on;

/* What happens to a tensor saved for backward. */
typedef enum vs_keep {
  VS_KEEP,            /* kept on the GPU from forward to backward */
  VS_RECOMPUTE_CORE,  /* dropped; the attention core is re-run before its
                         backward (selective checkpointing) */
  VS_RECOMPUTE_BLOCK, /* dropped; the whole block is re-run from its saved
                         input before its backward (full checkpointing) */
  VS_NOT_SAVED        /* never kept: it served only the weight gradient of
                         an op whose weights are frozen */
} vs_keep;

/* The uses of communication a step makes. */
typedef enum vs_comm_use {
  VS_USE_OP,          /* an op's own collectives (tensor parallelism) */
  VS_USE_GRAD_REDUCE, /* gradient buckets */
  VS_USE_PARAM_GATHER,/* ZeRO-3 gathers of a block's parameters */
  VS_USE_STEP_GATHER, /* ZeRO-1/2: updated parameters after the step */
  VS_USE_EMBED_SYNC,  /* tied embeddings across the pipeline */
  VS_USE_SEND,        /* pipeline sends */
  VS_USE_RECV,        /* pipeline receives */
  VS_USE_N
} vs_comm_use;

typedef struct vs_comm_plan {
  uint8_t stream;     /* vs_stream */
  uint8_t group;      /* vs_group (VS_USE_OP: each op names its own) */
} vs_comm_plan;

/* One model state (params, grads or optimizer states). */
typedef struct vs_state_plan {
  uint64_t degree;    /* GPUs of the sharding group sharing one copy:
                         1 = replicated, dp = fully sharded */
  uint8_t place;      /* vs_place (category.h) */
  uint64_t align;     /* a shard holds whole elements of this many bytes */
} vs_state_plan;

/* Offload (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity, Rajbhandari et
 * al. 2021; DeepSpeed runtime/zero/stage_1_and_2.py, stage3.py,
 * offload_config.py): the places of params and optimizer above say where
 * the partitions live; this says what that implies for the step. */
typedef struct vs_offload_plan {
  bool cpu_step;            /* the optimizer states are off the GPU: each
                               reduced gradient partition is copied out
                               (every micro-batch with ZeRO-2/3, once with
                               ZeRO-1) into an fp32 partition on the host,
                               the CPU steps (DeepSpeedCPUAdam), and the
                               updated parameters come back */
  vs_state_plan host_grads; /* that fp32 gradient partition (place host) */
  uint8_t bit16_buffers;    /* bytes an element of DeepSpeed ZeRO-1/2's
                               16-bit offload buffers (the model's dtype;
                               0: not DeepSpeed ZeRO-1/2 with the
                               optimizer on the host), stage_1_and_2.py:
                               - on the host, a copy of the updated
                                 partition, which the step casts the fp32
                                 partition into and copies to the GPU
                                 (since PR #7309, May 2025: param_buffer_
                                 of_bit16_for_cpu_offload_groups, one per
                                 group; the 2 B a parameter copy back of
                                 the 2020 code without its fp32 GPU
                                 transient);
                               - on the GPU and on the host, a staging
                                 buffer of the largest parameter, made at
                                 init (temp_grad_buffer_for_gpu_offload,
                                 temp_grad_buffer_for_cpu_offload);
                               - with ZeRO-2 over more than one
                                 micro-batch a step, the host's running
                                 sum of each partition parameter's
                                 gradients (accumulated_grads_in_cpu,
                                 never freed): see vs_recipe_host_sums */
  bool fetch_params;        /* parameters live off the GPU: each block's
                               partition is copied in before its gather */
  bool pageable_masters;    /* DeepSpeed ZeRO-3 with the optimizer on the
                               host: its fp32 partitions are made with
                               .to('cpu').clone(), never pinned (stage3.py
                               _create_fp32_partitions), and the step
                               copies them back into the 16-bit ones with a
                               blocking copy_ that casts on the host first
                               (_reassign_or_swap_out_partitioned_
                               parameters): that copy is pageable whatever
                               pin_memory says */
  bool pageable;            /* [parallel] offload_pin_memory = false: the
                               host buffers of the offloaded states and
                               parameters are pageable (DeepSpeed's
                               pin_memory false, its default before
                               #8207, August 2026), so each copy to or
                               from them runs at most at the host's
                               pageable rate (vs_topology_pageable_rate);
                               NVMe's swap buffers stay pinned */
  bool activations;         /* each transformer layer's saved tensors but
                               the last layer's are copied to the host after
                               its forward and back before its backward */
  bool activations_on_demand; /* ... as DeepSpeed's cpu_checkpointing
                               does (since PR #8282, August 2026:
                               offload_activations.py
                               _ActivationOffloadEngine): a checkpointed
                               layer's input alone, copied out on a side
                               stream as the next checkpointed layer
                               starts (the newest stays on the GPU:
                               keep_last_count 1), and back as its
                               recompute starts, which waits for the copy
                               (restore_input: nothing prefetched). Its
                               forward stash, which keeps the two newest
                               copies' GPU tensors until later layers
                               start, is not modelled; before #8282 both
                               copies were synchronous (.to()) */
} vs_offload_plan;

/* bitsandbytes pages the states of tensors of at least this many elements
 * (optim/optimizer.py: page_mng.paged_tensors for numel >= 1e5); smaller
 * ones stay in ordinary device memory. */
#define VS_PAGED_MIN_ELEMS 100000

/* DeepSpeed's ZeRO-3 sub_group_size (runtime/zero/config.py: 1e9
 * elements): stage3.py steps a parameter group's partition in sub-groups
 * of about this many (_create_fp16_sub_groups closes one at the
 * parameter that reaches it), one at a time, and swaps them to NVMe so. */
#define VS_DS_SUB_GROUP_ELEMS 1000000000ull

/* DeepSpeed's defaults for NVMe swapping (runtime/zero/offload_config.py
 * and config.py): optimizer buffer_count 4 (param, grad, m, v), of a
 * sub-group each; parameter buffer_count 5, buffer_size 1e8 elements. */
#define VS_NVME_OPT_BUFFERS 4
#define VS_NVME_PARAM_BUFFERS 5
#define VS_NVME_PARAM_BUFFER_ELEMS 100000000ull

/* The decisions for one block kind. */
typedef struct vs_kind_plan {
  uint8_t *keep;            /* [saved tensor] vs_keep */
  double *bwd_flops;        /* [op] backward FLOPs (frozen weights skip
                               their weight gradient) */
  double *bwd_bytes;        /* [op] backward HBM bytes, the same way */
  double *wgrad_share;      /* [op] the share of its weight gradient that
                               backward computes: its trainable share */
  bool recompute_block;     /* full checkpointing: the block's input is
                               kept and its forward re-run */
  bool recompute_core;      /* selective: some tensors are re-made by
                               re-running the attention core */
  bool recompute_reuses_kept; /* op-level checkpointing (checkpointing =
                               ops): the recompute reuses the outputs
                               the block kept instead of holding them
                               beside the ones it re-makes */
  bool no_backward;         /* every instance comes before the model's
                               first trainable weight: no gradient flows
                               through it, so it keeps nothing and its
                               backward does not run (a frozen prefix) */
  uint64_t param_bytes;     /* its parameters on one GPU, unsharded (what
                               a ZeRO-3 gather brings) */
  uint64_t stored_param_bytes; /* as they are kept between uses: as
                               param_bytes, or fp32 for 16-bit ones when
                               the recipe's fp32_params */
  uint64_t grad_bytes;      /* gradients of its trainable parameters */
  uint64_t made_grad_bytes; /* of them as backward makes them: grad_bytes,
                               or in the parameters' dtype when the
                               recipe's reduce_copy (FSDP2's 16-bit
                               unsharded gradients) */
  uint64_t optimizer_bytes; /* optimizer states of its trainable ones */
  uint64_t expert_optimizer_bytes; /* of which the routed experts' (sharded
                               over the expert-data-parallel group) */
  uint64_t expert_grad_bytes; /* of grad_bytes, the routed experts' (reduced
                               over that group) */
  uint64_t expert_param_bytes; /* of stored_param_bytes, the routed
                               experts' (gathered after the step over that
                               group) */
  uint64_t expert_trainable_elems; /* of trainable_elems, theirs */
  uint64_t expert_decay_elems; /* of decay_elems, theirs */
  uint64_t paged_bytes;     /* of which in CUDA managed memory (paged
                               optimizer: large tensors' states, no master) */
  uint64_t fp8_weight_elems; /* precision = fp8: its GEMMs' weights */
  uint64_t fp8_copy_elems;   /* of which not stored in FP8: Transformer
                               Engine quantizes them and keeps the copy */
  uint64_t fp8_gemms;        /* its GEMMs with weights (each keeps amax
                               histories) */
  uint64_t param_elems;     /* parameter elements */
  uint64_t trainable_elems; /* elements of trainable parameters */
  uint64_t largest_trainable_elems; /* of its largest trainable tensor */
  uint32_t grads_op;                /* the op whose backward makes the block's
                                       first gradient: the last one, in forward
                                       order, with a trainable parameter (n_ops - 1
                                       without any) */
  uint32_t output_op;               /* the last output layer (vs_op_spec
                                       output_layer), where the model's forward
                                       ends (n_ops - 1 without one) */
  uint32_t embedding_grads_op;      /* the last op whose backward makes the
                                    word embeddings' gradient (vs_op_spec
                                    embedding_grads): the first to, backward
                                    running in reverse (n_ops - 1 without
                                    one) */
  uint64_t decay_elems;     /* of which in matrices: the weight-decay
                               parameter group (not biases or norms) */
  uint64_t trainable_param_bytes; /* of stored_param_bytes, the trainable
                               tensors': what the optimizer updates (and
                               ZeRO-1/2 all-gather once stepped) */
} vs_kind_plan;

/* What the optimizer step copies gradients into (DeepSpeed's wrappers,
 * shared/reference/frameworks.md 2.1-2.2, and Megatron-LM's, 3.1):
 * nothing; FP16_Optimizer's flat fp32 gradients of every group, beside
 * the per-tensor fp32 copies of the group being flattened; ZeRO-1/2's
 * fp32 copy of a group's partition; Megatron-LM's fp32 copy of every
 * 16-bit main grad the GPU steps (all of them, or the distributed
 * optimizer's shard); ZeRO-3's concatenation of a sub-group's gradient
 * partitions (VS_DS_SUB_GROUP_ELEMS) and, from 16-bit gradients, its fp32
 * copy beside it. */
typedef enum {
  VS_STEP_COPY_NONE,
  VS_STEP_COPY_FLAT,
  VS_STEP_COPY_PARTITION,
  VS_STEP_COPY_MAIN_GRADS,
  VS_STEP_COPY_SUB_GROUP
} vs_step_copy;

/* How many times the optimizer step moves each kind of byte it touches,
 * read and written (vs_recipe step_passes): a fused step reads and
 * writes each state and parameter once and reads each gradient. */
typedef struct vs_step_passes {
  double params;            /* the stepped parameters' bytes */
  double states;            /* the optimizer states' bytes */
  double grads;             /* the gradients' bytes */
  double unscaled;          /* bytes a stepped element of the fp32 copies
                               the step unpacks (recipe step_unscaled) */
  double wrap;              /* bytes a stepped element that the framework's
                               step moves around the update on the GPU:
                               the gradients' cast to fp32, overflow check,
                               norm, unscaling and clipping (recipe
                               step_wrap) */
  double buffer;            /* passes over the resident gradients each step
                               (zeroing them for the next: 1) */
} vs_step_passes;

typedef struct vs_recipe {
  vs_kind_plan *kinds;      /* [model kind] */
  uint32_t n_kinds;
  vs_state_plan params, grads, optimizer; /* over VS_GROUP_DP */
  vs_state_plan expert_optimizer; /* the routed experts' optimizer states,
                               over VS_GROUP_EXPERT_DP (its
                               vs_workload_expert_dp ranks: Megatron-LM's
                               expert data parallelism) */
  vs_state_plan expert_grads;     /* the routed experts' gradients, over
                                   VS_GROUP_EXPERT_DP from ZeRO-2 on
                                   (DeepSpeed's MoE param groups); where
                                   they live is grads' place */
  bool gather_params;       /* ZeRO-3: each block's parameters gathered
                               before its forward and its backward */
  bool gather_traced;       /* gathers follow DeepSpeed's ZeRO-3
                               coordinator (vs_workload_zero3_
                               coordinator), not one block ahead */
  uint64_t gather_live_elems;  /* its [parallel] max_live_parameters:
                                before each block's pass it gathers the
                                blocks that come next in the micro-batch's
                                forward-then-backward order while fewer
                                elements than this are gathered */
  uint64_t gather_reuse_elems; /* its [parallel] max_reuse_distance: after
                               a block's forward it keeps it gathered when
                               its backward comes within this many
                               elements of passes */
  bool transient_grads;     /* ZeRO-2/3 (or a step in backward):
                               gradients live until their bucket is
                               reduce-scattered (or stepped), every
                               micro-batch */
  uint8_t grad_reduce;      /* vs_coll_kind of gradient buckets */
  uint8_t reduce_depth;     /* with transient gradients, how far the bucket
                               reductions may fall behind: issuing bucket
                               k's makes the compute stream wait for the
                               end of bucket k - reduce_depth's (its
                               reduction and copy to the host), which
                               bounds the gradients waiting for them
                               (recipe.c, reduce_depth); 0: no bound */
  bool gather_after_step;   /* ZeRO-1/2, or DeepSpeed's BF16_Optimizer,
                               with gradients shared over data-parallel
                               ranks: updated params all-gathered */
  bool step_in_backward;    /* each block's parameters stepped right after
                               its backward, its gradients freed then: no
                               resident gradients, no step at the end */
  bool embedding_sync;      /* the last stage keeps a copy of the word
                               embeddings (tied, or for multi-token
                               prediction) to all-reduce with the first */
  uint8_t step_copy;        /* vs_step_copy */
  vs_step_passes step_passes; /* the optimizer step's traffic */
  bool step_sqrt_list;      /* PyTorch's foreach Adam(W) makes
                               torch._foreach_sqrt(exp_avg_sqs), a new
                               tensor list as large as one of its two
                               states: half the optimizer states, held
                               through the step */
  uint8_t step_unscaled;    /* how many of the precision-aware optimizer's
                               states its step unpacks to an fp32 copy of
                               a parameter group's shard (0-3) */
  bool fp32_params;         /* FSDP2: 16-bit weights kept (sharded) in
                               fp32 and cast to 16 bits when gathered */
  bool gather_copy_out;     /* FSDP2: each block all-gathers into a flat
                               buffer, copied out into its unsharded
                               parameters when its pass starts; the flat
                               buffer lives until the next block's
                               copy-out */
  uint8_t gather_made_on;   /* vs_made_on of what a gather makes: the
                               flat buffer FSDP2 all-gathers into, and
                               the parameters DeepSpeed's ZeRO-3 gathers
                               with overlap_comm (its coordinator's
                               __allgather_stream, parameter_offload.py);
                               else the gather op's stream */
  bool ipg_resident;        /* DeepSpeed ZeRO-3 (contiguous_gradients, its
                               default) where gradients are bucketed: one
                               ipg buffer of the bucket's bytes from its
                               init on (stage3.py __init__), into which
                               its reduction stream copies each gradient
                               as backward makes it and frees it
                               (__add_grad_to_ipg_bucket: .grad becomes a
                               view of the buffer; the copies' time is
                               not priced); each
                               bucket's reduce-scatter reads an
                               interleaved copy of it, divided in place
                               (coalesced_collectives.py
                               reduce_scatter_coalesced: torch.cat),
                               freed once reduced */
  bool lp_grads_kept;       /* DeepSpeed's BF16_Optimizer (immediate_grad_
                               update off, its default): backward makes
                               each parameter's 16-bit .grad (its kinds'
                               made_grad_bytes) in the step's first
                               micro-batch and adds into it in the later
                               ones, zeroed between them and freed by the
                               engine's zero_grad after the step
                               (bf16_optimizer.py clear_lp_grads,
                               zero_grad); after each backward it adds
                               them into its own buffer (update_hp_grads),
                               the gradients the recipe's grads describe */
  uint8_t engine_allreduce_bytes; /* DeepSpeed's engine all-reduce (ZeRO
                               off, and BF16_Optimizer's): the bytes of an
                               element of its communication_data_type (the
                               model's dtype), each bucket flattened in the
                               gradients' dtype and cast to it for the
                               all-reduce, both held through it (engine.py
                               allreduce_no_retain, allreduce_bucket); 0
                               elsewhere */
  uint64_t bucket_bytes;          /* the gradient bytes that fill a bucket:
                                     [parallel] bucket, but under DeepSpeed's
                                     engine all-reduce its fixed 5e8 elements
                                     (VS_DEEPSPEED_BUCKET_ELEMS) of the
                                     gradients' dtype, and under its
                                     BF16_Optimizer the whole buffer
                                     (UINT64_MAX) */
  bool engine_allreduce_flat;     /* DeepSpeed's engine all-reduces
                                   BF16_Optimizer's flat buffer, a tensor a
                                   parameter group: no flattened copy of a
                                   group of 5e8 elements or more, alone in
                                   its bucket */
  bool ipg_buckets;         /* DeepSpeed's ZeRO-1 to 3: a bucket is
                               reduced before a gradient would take it
                               past reduce_bucket_size (stage_1_and_2.py
                               and stage3.py reduce_independent_p_g_
                               buckets_and_remove_grads), where other
                               frameworks close theirs once full */
  bool reduce_copy;         /* FSDP2 (frameworks.md 4.3): a unit's
                               post-backward copies its 16-bit unsharded
                               gradients into a reduce-scatter input in
                               the reduce dtype (grad_bytes) and frees
                               them; the input lives until the next
                               unit's post-backward waits for its
                               reduce-scatter (reduce_scatter_state), or
                               to the end of the backward pass */
  bool pipelined_fsdp;      /* FSDP2 under torch.distributed.pipelining:
                               every backward runs without gradient sync
                               or resharding, and each unit's
                               post-backward runs once the stage's last
                               backward is done (stage.py
                               backward_maybe_with_nosync, _post_backward):
                               a block's gathered parameters stay until
                               then (torchtitan also keeps them after
                               forward under PP), its gradients
                               accumulate unsharded in the reduce dtype
                               over the micro-batches and are
                               reduce-scattered as each chunk's last
                               backward ends, before its gradient is
                               sent */
  bool keep_last_gathered;  /* FSDP2 without pipelining, as torchtitan
                               wraps it: the last transformer block is not
                               resharded after forward (its backward comes
                               next and would gather it at once), so its
                               forward gather lasts to its backward */
  bool root_kept;           /* FSDP2 without pipelining: the root unit
                               (embedding, final norm, output layer) is
                               gathered whole as forward starts and kept
                               to the end of backward */
  bool reduce_on_compute;   /* gradients freed once reduced are reduced
                               on the compute stream as each bucket fills
                               ([parallel] overlap_grad_reduce = false with
                               ZeRO-2: DeepSpeed without overlap_comm) */
  bool reduce_after_backward; /* the step's gradient buckets are reduced
                               once the stage's whole backward pass is
                               done, not as each fills ([parallel]
                               overlap_grad_reduce = false) */
  bool buckets_first_chunk; /* Megatron-LM's DDP (distributed_data_
                               parallel.py): gradients go in buckets of
                               [parallel] bucket only in the first
                               stage's first model chunk and only with
                               overlap_grad_reduce; elsewhere each model
                               chunk's gradients are one bucket
                               (bucket_size None) */
  bool p2p_blocking;        /* a stage's next compute waits for its
                               pipeline send ([parallel] p2p = blocking) */
  uint64_t p2p_parts;       /* the pipeline tensor goes as this many parts,
                               one per tensor-parallel rank, all-gathered
                               by the receivers (Megatron-LM's scatter/
                               gather); 1: whole */
  bool fp8_weight_cache;    /* precision = fp8 under Megatron-LM
                               (framework megatron or none): Transformer
                               Engine quantizes a weight in its model
                               chunk's first micro-batch only and reuses
                               the copy (the schedule passes
                               is_first_microbatch; module/linear.py
                               update_fp8_weights), not where ZeRO-3
                               gathers the weights per block (their copies
                               are made from each gather); elsewhere in
                               every forward (is_first_microbatch None) */
  bool grads_set_to_none;   /* [training] set_grads_to_none (the
                               Trainer's model.zero_grad() after each step
                               sets the gradients to None: set_to_none =
                               True, PyTorch >= 2.0's default), without
                               transient gradients, and so does
                               DeepSpeed's FP16_Optimizer (step_copy
                               VS_STEP_COPY_FLAT) in its step, so each block's
                               appear at its first backward of the step
                               and go when the step ends (with resident
                               gradients: not transient, not stepped in
                               backward) */
  bool reduced_grads_set_to_none; /* the same with transient gradients
                               (ZeRO-2/3: FSDP2), on the GPU: the reduced
                               partitions are None from each step's
                               start, and each block's first reduction
                               makes its share (FSDP2's foreach_reduce:
                               the reduce-scatter's output becomes the
                               sharded .grad when it is None, later ones
                               add into it); they go when the step ends */
  bool states_in_param_dtype; /* PyTorch's own optimizers without a
                               master copy (framework hf or none, not
                               bitsandbytes' paged ones): the states are
                               zeros_like(param), 16-bit for 16-bit
                               parameters (vsim's figures are fp32 ones) */
  bool per_tensor_states;   /* PyTorch's own loop without ZeRO: each
                               parameter and its master copy are
                               allocations of their own, made with the
                               model, and so is each gradient set to None
                               (grads_set_to_none) as backward makes it,
                               and under first_step_states each resident
                               gradient and optimizer state;
                               vs_recipe_tensor_states gives their sizes.
                               Otherwise flat buffers */
  bool first_step_states;   /* PyTorch's own loop and optimizers
                               (per_tensor_states, the optimizer stepping
                               after backward, its states on the GPU) on
                               the caching allocator (the exact one keeps
                               no cache for the first step to shape):
                               the first step makes the states that do
                               not come with the model, tensor by tensor,
                               in a cache its activations have warmed:
                               AccumulateGrad each resident gradient in
                               the first backward, torch.optim each
                               optimizer state in the first step()
                               (AdamW's _init_group: zeros_like per
                               parameter). The step vsim reports runs in
                               the cache that first step leaves (vs_step,
                               vs_rank_inherit) */
  bool ddp_bucket_copy;     /* PyTorch DDP (framework = hf, dp > 1): the
                               reducer's flat buckets hold a copy of every
                               gradient beside .grad, allocated with the
                               model (gradient_as_bucket_view = False, the
                               default; PyTorch PR #41954 made the views
                               to save that much memory) */
  double tied_share;        /* the trainable share of the embedding's
                               weights, which an output layer tied to them
                               (a matmul without weights of its own)
                               computes gradients for */
  uint64_t grad_elem_bytes; /* bytes of one gradient element (fp32 main
                               grads, else as the parameter) */
  vs_comm_plan comm[VS_USE_N]; /* stream and group of each use */
  vs_offload_plan offload;  /* what moves off the GPU, and how */
} vs_recipe;

/* Resolves wl and m (m's kinds may have been edited after building) into
 * r, which it initialises. VS_ENOMEM without host memory, VS_EINPUT for a
 * tensor sharded over a group other than dp (r is then empty). Cost: O(ops + tensors of every kind). */
int vs_recipe_build(const vs_workload *wl, const vs_model *m, vs_recipe *r,
                    vs_error *err);
void vs_recipe_fini(vs_recipe *r);

/* The plan of instance inst's kind (see vs_model_block). */
const vs_kind_plan *vs_recipe_kind(const vs_recipe *r, const vs_model *m,
                                   size_t inst);

/* Bytes a layer of model kind `kind` saves for backward without
 * checkpointing: every saved tensor of the block that the plan keeps or
 * recomputes, none that it never saves (VS_NOT_SAVED: a frozen weight's
 * input for its gradient, an FP8 weight copy held with the parameters, a
 * frozen prefix's). */
uint64_t vs_recipe_kind_saved_bytes(const vs_recipe *r, const vs_model *m,
                                    uint32_t kind);

/* Resident bytes of a state of `bytes` (unsharded) under plan: ZeRO shards a
 * flat buffer evenly over its degree, padding the last shard, so each GPU
 * holds ceil(bytes / degree) rounded up to whole elements. */
uint64_t vs_recipe_shard(const vs_state_plan *plan, uint64_t bytes);

/* Resident bytes of `bytes` of gradients (unsharded), `expert` of them the
 * routed experts': those sharded under r's expert_grads, the rest under
 * its grads (vs_recipe_shard each; all under grads where both have one
 * degree). */
uint64_t vs_recipe_grads_shard(const vs_recipe *r, uint64_t bytes,
                               uint64_t expert);

/* The most tensors an optimizer keeps for one parameter: a master copy
 * and bitsandbytes' two 8-bit states with their two absmax arrays. */
#define VS_OPT_STATE_TENSORS_MAX 5

/* One parameter tensor's model states on its GPU, unsharded, each a
 * tensor of its own (as PyTorch allocates them: the parameter, its .grad,
 * a wrapper's fp32 master copy, and each state the optimizer's
 * _init_group creates with zeros_like). The kind plans' sums are these,
 * added over the block's tensors. */
typedef struct vs_tensor_states {
  uint64_t stored_param;    /* as kept between uses (stored_param_bytes) */
  uint64_t param_parts[VS_DTYPE_PARTS_MAX]; /* the tensors it is kept as
                               (vs_dtype_tensor_parts: an nf4 weight's
                               packed data and quantization state) */
  unsigned n_param_parts;   /* how many; they sum to stored_param */
  uint64_t grad;            /* its resident gradient; 0 when frozen */
  uint64_t made_grad;       /* the gradient as backward makes it */
  uint64_t optimizer[VS_OPT_STATE_TENSORS_MAX]; /* each optimizer state
                               tensor, the master copy first */
  unsigned n_optimizer;     /* how many (0 when frozen) */
  uint64_t master;          /* of them, the master copy's bytes (0: none) */
} vs_tensor_states;

/* The bytes of the gradient backward makes for trainable tensor p under
 * t, before anything adds, reduces or casts it: in the parameter's dtype,
 * an FP8 weight's in the model's 16-bit dtype. */
uint64_t vs_recipe_new_grad_bytes(const vs_training_conf *t,
                                  const vs_param_tensor *p);

/* Tensor p's states under r and t (r resolved up to its kinds). */
void vs_recipe_tensor_states(const vs_recipe *r, const vs_training_conf *t,
                             const vs_param_tensor *p, vs_tensor_states *out);

/* Whether a parameter's optimizer states include its fp32 master copy. */
typedef enum vs_master_part {
  VS_WITHOUT_MASTER,
  VS_WITH_MASTER
} vs_master_part;

/* Each tensor the optimizer keeps for one parameter of rows x cols
 * elements, in out (the fp32 master copy first WITH_MASTER); returns
 * how many: vs_optimizer_state_bytes is their sum. bitsandbytes keeps
 * state1 and state2 (1 B an element) and one absmax array each. */
unsigned vs_optimizer_state_tensors(int optimizer, vs_master_part master,
                                    uint64_t rows, uint64_t cols,
                                    uint64_t out[VS_OPT_STATE_TENSORS_MAX]);

/* Optimizer-state bytes (master weights included WITH_MASTER) of one
 * parameter tensor of rows x cols elements:
 *   adam, adamw   8 per element (fp32 exp_avg, exp_avg_sq)
 *   momentum, lion 4 (one fp32 buffer)
 *   sgd           0
 *   adafactor     4*(rows+cols) for a matrix (factored second moment, no
 *                 first moment: Shazeer & Stern 2018), 4 per element for
 *                 a vector
 *   adam8bit      2 per element + fp32 absmax per 256-element block per
 *                 state (bitsandbytes blockwise: 2 x (1 + 4/256) = 2.03 B),
 *                 8 per element for tensors under 4096 elements
 *                 (bitsandbytes min_8bit_size). */
uint64_t vs_optimizer_state_bytes(int optimizer, vs_master_part master,
                                  uint64_t rows, uint64_t cols);

/* Whether the host keeps DeepSpeed's running 16-bit sums of a GPU's
 * gradients over a step of `grad_accum` micro-batches
 * (async_accumulate_grad_in_cpu_via_gpu). copy_grads_in_partition calls
 * it where the optimizer's micro_step_id is past 0 or the micro-batch is
 * not the step's last (since PR #7981, April 2026); micro_step_id counts
 * the backward passes that make the gradient buckets (setup_buckets,
 * since PR #7018, March 2025), which ZeRO-2, reducing every micro-batch
 * (transient_grads), does each micro-batch, and ZeRO-1, reducing only at
 * the step's last, once a step: its micro_step_id stays 0 and it keeps
 * no sums. Under ZeRO-2 each reduction past micro-step 0 copies the sum
 * in (to the GPU's staging buffer) and adds it to its gradients, and
 * each copies its gradients out, 2 B an element each way (since PR
 * #7967, April 2026, "gradients are copied and accumulated on every
 * microstep"; the 2020 code skipped the copy out at the step's last, and
 * from PR #6550, 2024, to #7967 the middle micro-batches' sums were
 * dropped); the step's last then goes out in fp32 as without. DeepSpeed
 * copies and adds whole parameters (param.numel()); vsim, the
 * partition's share. */
bool vs_recipe_host_sums(const vs_recipe *r, uint64_t grad_accum);

/* The bytes of DeepSpeed ZeRO-1/2's gradient staging buffer, one on the
 * GPU and one on the host (vs_offload_plan bit16_buffers x
 * `largest_elems`, a GPU's largest trainable tensor's); 0 else. */
uint64_t vs_recipe_grad_staging_bytes(const vs_recipe *r,
                                      uint64_t largest_elems);

/* The bytes of DeepSpeed ZeRO-1/2's 16-bit host buffer of a partition of
 * `partition_elems` (vs_offload_plan bit16_buffers x them): its copy of
 * the updated partition, and as much for the gradient sums
 * (vs_recipe_host_sums); 0 else. */
uint64_t vs_recipe_bit16_host_bytes(const vs_recipe *r,
                                    uint64_t partition_elems);

/* The largest of DeepSpeed ZeRO-3's sub-groups of a partition of
 * `partition_elems` (VS_DS_SUB_GROUP_ELEMS; the one that reaches it may
 * take a parameter's partition more, which vsim leaves out). */
uint64_t vs_recipe_sub_group_elems(uint64_t partition_elems);

/* Host buffers one GPU's offload takes beside the states: DeepSpeed
 * ZeRO-1/2's 16-bit copy of the updated partition
 * (vs_recipe_bit16_host_bytes of `partition_elems`), its staging buffer
 * (vs_recipe_grad_staging_bytes of `largest_elems`) and, with `sums`
 * (vs_recipe_host_sums), the sums, bit16_buffers x `partition_elems`
 * (its parameters' whole elements: those a partition boundary cuts count
 * in part); the pinned buffers of NVMe swapping
 * (DeepSpeed's swap_tensor/optimizer_utils.py and
 * partitioned_param_swapper.py): with the optimizer on NVMe,
 * VS_NVME_OPT_BUFFERS buffers of the largest sub-group partition
 * (min(sub_group_size, its trainable partition)) x 4 B; with parameters on
 * NVMe, VS_NVME_PARAM_BUFFERS x VS_NVME_PARAM_BUFFER_ELEMS x 2 B. */
uint64_t vs_recipe_host_buffer_bytes(const vs_recipe *r,
                                     uint64_t partition_elems,
                                     uint64_t largest_elems, bool sums);

/* "keep", "recompute_core", "recompute_block", "not_saved". */
const char *vs_keep_name(int keep);

#endif
