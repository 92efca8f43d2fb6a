/* model.h - the model builder: a workload's transformer expanded into
 * blocks of ops, as one tensor-parallel rank sees them.
 *
 * A model is a list of block kinds and, for every block instance of the
 * step (the embedding, each transformer layer, the head), the index of its
 * kind. The builder makes three kinds (embedding, dense layer, head); more
 * may be added (vs_model_add_kind) and assigned to layers
 * (vs_model_set_layer_kind): an MoE layer, a layer with frozen weights.
 * Each op declares its forward and backward FLOPs and HBM bytes (the part
 * of them that computes weight gradients separately, so a frozen weight
 * skips it), the tensors it saves for backward (bytes and dtype), its
 * transient workspace and the collectives around it (kind and group).
 * Each block lists its parameter tensors: shape on one rank, dtype,
 * trainable, and the group that shards their states.
 * Invariants: blocks grow as needed (an impossible size is VS_EINPUT, never
 * a silent drop); an op's saved tensors are saved[first_saved ..
 * first_saved + n_saved) of its block, in op order; its weights are
 * params[first_param .. first_param + n_params). Nothing here knows about
 * time, schedules or parallel placement. */
#ifndef VS_MODEL_H
#define VS_MODEL_H

#include "category.h"
#include "comm.h"
#include "dtype.h"
#include "error.h"
#include "workload.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VS_OP_NAME_MAX 24
#define VS_BLOCK_ITEMS_MAX 65535 /* ops, params or saved tensors per block */
#define VS_MODEL_KINDS_MAX 256   /* block kinds per model */

typedef enum vs_block_role {
  VS_ROLE_EMBED,  /* first pipeline stage: input batch, embeddings */
  VS_ROLE_LAYER,  /* a transformer layer: what checkpointing applies to */
  VS_ROLE_HEAD    /* last pipeline stage: final norm, output layer, loss */
} vs_block_role;

/* The copies of a GEMM's weight its op keeps for backward. */
typedef enum vs_weight_copy {
  VS_COPY_NONE,
  VS_COPY_FP8,      /* precision = fp8: Transformer Engine's FP8 copy, kept
                       here only where ZeRO-3 gathers weights per block
                       (vs_recipe gather_params); elsewhere the layout
                       keeps one for the step */
  VS_COPY_AUTOCAST  /* autocast: the weight's 16-bit cast, saved like any
                       tensor; where its layer is checkpointed, autocast's
                       cache still holds it until the forward pass ends */
} vs_weight_copy;

typedef struct vs_saved {
  uint64_t bytes;     /* size on one rank for one micro-batch */
  uint8_t dtype;      /* vs_dtype of its elements */
  uint8_t category;   /* VS_CAT_ACTIVATIONS, or VS_CAT_TEMP for loss buffers */
  bool selective;     /* dropped and recomputed under selective checkpointing */
  bool wgrad_only;    /* kept only for its op's weight gradients (a
                         linear's input that no other op needs) */
  uint8_t weight_copy; /* vs_weight_copy: a copy of its op's weight, or
                         VS_COPY_NONE */
} vs_saved;

/* The GEMM an op runs forward, as cuBLAS launches it: `batch` independent
 * products C[m x n] = A[m x k] @ B[k x n]. Backward runs the input
 * gradient dA = dC @ B^T (m x k over n: vs_gemm_dgrad) and, where B is a
 * trained weight or an activation, dB = A^T @ dC (k x n over m:
 * vs_gemm_wgrad). batch = 0: the op is no single GEMM shape (adapters,
 * flash attention, elementwise ops) and is timed by its FLOPs alone. */
typedef struct vs_gemm {
  uint64_t m, n, k, batch;
} vs_gemm;

static inline vs_gemm vs_gemm_dgrad(vs_gemm g)
{
  return (vs_gemm){g.m, g.k, g.n, g.batch};
}

static inline vs_gemm vs_gemm_wgrad(vs_gemm g)
{
  return (vs_gemm){g.k, g.n, g.m, g.batch};
}

/* A FlashAttention op's shape, what its measured rates depend on
 * (seq = 0: not a flash attention op). */
typedef struct vs_flash_shape {
  uint64_t seq;      /* this rank's query length */
  uint64_t head_dim; /* the query-key head dimension */
  bool causal;
} vs_flash_shape;

/* Work an op does in kernels of their own beside its main one (a GEMM,
 * attention, or one fused element-wise kernel), each bound by its HBM
 * bytes: autocast's casts, eager PyTorch's unfused element-wise ops, a
 * weight gradient's cast. These kernels run one after another on the
 * stream, so they add to the op's time rather than hide under its GEMM.
 * An op's side work is also counted in its fwd_bytes, bwd_bytes or
 * wgrad_bytes (the schedule's gradient accumulation, a vs_side_work too,
 * is not the op's: it depends on the recipe). */
typedef struct vs_side_work {
  double bytes;
  uint32_t kernels;
} vs_side_work;

typedef struct vs_op_spec {
  char name[VS_OP_NAME_MAX];  /* "qkv_proj" */
  bool matmul;                /* runs on tensor cores at the compute dtype */
  bool input_from_norm;       /* its input is a norm's output that,
                                 under fp8, Transformer Engine's
                                 LayerNormLinear quantizes in the norm's
                                 kernel (not torchtitan's float8) */
  bool attn_core;             /* part of the attention core that selective
                                 checkpointing recomputes */
  bool adapter;               /* LoRA adapters (PEFT's layers) */
  bool output_layer;          /* the head's output layer (lm_head) */
  bool embedding_grads;       /* its backward makes the word embeddings'
                                 gradient on the stage of the embedding:
                                 an output layer tied to them, the
                                 multi-token prediction's lookups */
  bool no_fp8;                /* a matmul outside Transformer Engine's
                                 modules (LoRA adapters, the router,
                                 the attention core, the output layer;
                                 torchtitan's routed experts): under fp8
                                 it runs at the 16-bit rate on 16-bit
                                 inputs, saves them in 16 bits and
                                 keeps no FP8 copy of its weight */
  bool routed;                /* runs on the token slots the rank's
                                 experts receive (vs_model routed_load
                                 times their average under skew) */
  double recompute_share;     /* the share of its forward a checkpointed
                                 block's recompute re-runs: 1, or less
                                 where op-level checkpointing kept its
                                 output */
  vs_gemm gemm;               /* its forward GEMM's shape (matmul ops; a
                                 shape's FLOPs are fwd_flops) */
  vs_flash_shape flash;       /* a flash attention op's shape */
  uint8_t fwd_kernels;        /* CUDA kernels its forward launches */
  uint8_t bwd_kernels;        /* ... its backward (a GEMM op's weight
                                 gradient among them) */
  double fwd_flops;           /* forward FLOPs, one rank, one micro-batch */
  double bwd_flops;           /* backward FLOPs, weight gradients included */
  double fwd_bytes;           /* forward HBM traffic */
  double bwd_bytes;           /* backward HBM traffic, weight gradients
                                 included */
  double wgrad_flops;         /* the part of bwd_flops that computes the
                                 gradients of params[first_param ..] */
  double wgrad_bytes;         /* the part of bwd_bytes it moves */
  vs_side_work fwd_side;      /* of fwd_bytes, in kernels of their own:
                                 a recompute re-runs recompute_share */
  vs_side_work fwd_eager;     /* ... eager element-wise operators' (the
                                 rotary embedding, a residual add), whose
                                 outputs no checkpointing policy keeps: a
                                 recompute re-runs them whole */
  vs_side_work bwd_side;      /* of bwd_bytes outside wgrad_bytes, ... */
  vs_side_work wgrad_side;    /* of wgrad_bytes, ... (skipped with the
                                 weight gradient of a frozen weight) */
  uint32_t first_param;       /* the weights whose gradients it computes */
  uint32_t n_params;          /* 0: none */
  uint32_t first_saved;       /* its tensors kept from forward to backward */
  uint32_t n_saved;
  uint64_t fwd_temp_bytes;    /* transient outputs/workspace during forward */
  uint64_t bwd_temp_bytes;    /* gradient buffers during backward */
  uint64_t fwd_temp_first;    /* of fwd_temp_bytes, a first tensor PyTorch
                                 allocates on its own (0: one tensor) */
  uint64_t bwd_temp_first;    /* ... of bwd_temp_bytes */
  vs_comm fwd_before;         /* collective before forward */
  vs_comm fwd_after;          /* ... after forward */
  vs_comm bwd_before;         /* ... before backward */
  vs_comm bwd_after;          /* ... after backward */
} vs_op_spec;

/* Whether op is a linear of the FP8 library under precision = fp8 (its
 * quantized GEMM, casts and copies): a matmul with a GEMM shape and
 * weights, not outside the library's modules (no_fp8). */
static inline bool vs_op_fp8_linear(const vs_op_spec *op)
{
  return op->matmul && !op->no_fp8 && op->n_params > 0 && op->gemm.batch > 0;
}

typedef struct vs_param_tensor {
  char name[VS_OP_NAME_MAX];  /* "mlp_up.weight" */
  uint64_t rows;              /* shape on one rank (1 for vectors) */
  uint64_t cols;
  uint8_t dtype;              /* vs_dtype of the GPU copy */
  bool trainable;             /* has a gradient and optimizer states */
  uint8_t shard_group;        /* vs_group over which ZeRO/FSDP shards its
                                 states (VS_GROUP_DP) */
} vs_param_tensor;

/* Whether p is a matrix (a GEMM's weight, an embedding table), not a
 * vector (a bias, a norm's scale). */
static inline bool vs_param_matrix(const vs_param_tensor *p)
{
  return p->rows > 1 && p->cols > 1;
}

typedef struct vs_block {
  char name[VS_OP_NAME_MAX];  /* "embedding", "dense", "head", ... */
  uint8_t role;               /* vs_block_role */
  vs_op_spec *ops;            /* forward order */
  uint32_t n_ops, cap_ops;
  vs_param_tensor *params;    /* on one tp rank */
  uint32_t n_params, cap_params;
  vs_saved *saved;            /* every op's saved tensors, in op order */
  uint32_t n_saved, cap_saved;
  uint64_t param_elems;       /* sum of rows*cols of params[] */
  uint64_t input_bytes;       /* the block input (what a pipeline stage
                                 sends on) */
  uint64_t ckpt_bytes;        /* what a checkpointed block keeps: its
                                 input, or with op-level checkpointing the
                                 outputs that policy saves besides */
  bool not_checkpointed;      /* a layer that full checkpointing leaves
                                 alone ([training] checkpoint_layers or
                                 checkpoint_every chose others) */
} vs_block;

typedef struct vs_model {
  vs_block *kinds;            /* block kinds; the builder's: embedding,
                                 dense layer, head */
  uint32_t n_kinds, cap_kinds;
  uint32_t *inst_kind;        /* [layers + 2]: kind of each block instance:
                                 0 the embedding, 1..layers the layers,
                                 layers + 1 the head */
  uint64_t layers;            /* transformer layers */
  uint64_t vocab_padded;      /* vocab rounded up to a multiple of tp */
  uint64_t params_total;      /* whole model, all ranks, unpadded vocab */
  uint64_t params_active;     /* of which one token uses (= params_total
                                 without experts) */
  uint64_t params_lookup;     /* of both, the embedding tables a token
                                 only looks up (embedding_params) */
  uint64_t params_mtp;        /* beside them, the multi-token prediction
                                 depths' own (0 without) */
  uint64_t act_elem_bytes;    /* bytes per activation element (of the
                                 GEMMs' outputs under autocast) */
  uint64_t param_elem_bytes;  /* bytes per weight element on the GPU */
  bool causal;                /* attention masks later tokens (gpt, llama;
                                 bert is bidirectional) */
  double routed_load;         /* the simulated rank's routed token slots
                                 over the k T copies of its tokens (above
                                 1 under routing skew with expert
                                 parallelism, or padded to a capacity):
                                 model FLOPs count the k T */
} vs_model;

/* Which rank's expert load a model is built for when the router is
 * skewed (vs_workload_skew_applies): one holding the hottest expert (the
 * worst, which one rank per stage stands for), or one holding only the
 * others, which share what the hottest leaves. */
typedef enum vs_expert_load { VS_LOAD_HOTTEST, VS_LOAD_REST } vs_expert_load;

/* Expands wl into m (which it initialises; release with vs_model_fini),
 * its ranks' experts loaded as the hottest expert's rank's.
 * VS_EINPUT for shapes too large to simulate, VS_ENOMEM without host
 * memory; on error m is empty. */
int vs_model_build(const vs_workload *wl, vs_model *m, vs_error *err);

/* vs_model_build for the ranks of expert load `load`. */
int vs_model_build_loaded(const vs_workload *wl, vs_expert_load load,
                          vs_model *m, vs_error *err);
void vs_model_fini(vs_model *m);

/* The block of instance inst (0 embedding, 1..layers layers, layers + 1
 * head); of layer l (0-based); the embedding; the head. O(1). */
const vs_block *vs_model_block(const vs_model *m, size_t inst);
const vs_block *vs_model_layer(const vs_model *m, uint64_t l);
const vs_block *vs_model_embed(const vs_model *m);
const vs_block *vs_model_head(const vs_model *m);

/* Adds a copy of src (a kind of m or any block) as a new kind named name,
 * and returns its index in *kind and the copy in *out (valid until the next
 * vs_model_add_kind), for the caller to change. VS_EINPUT past
 * VS_MODEL_KINDS_MAX kinds, VS_ENOMEM without host memory. */
int vs_model_add_kind(vs_model *m, const vs_block *src, const char *name,
                      uint32_t *kind, vs_block **out, vs_error *err);

/* Makes layer l (0-based) an instance of kind. VS_EINPUT if either is out
 * of range or the kind is not a layer. */
int vs_model_set_layer_kind(vs_model *m, uint64_t l, uint32_t kind,
                            vs_error *err);

/* Appends an op named name to b (a kind being made or edited) and returns
 * it, zeroed but for its name and its first_saved/first_param, which start
 * after b's current tensors (the tensors saved and parameters added until
 * the next op are its own). The pointer lasts until b grows again. NULL with
 * VS_EINPUT past VS_BLOCK_ITEMS_MAX ops, VS_ENOMEM without host memory. */
vs_op_spec *vs_block_add_op(vs_block *b, const char *name, vs_error *err);

/* op (b's newest op) keeps sv for its backward; a tensor of 0 bytes is not
 * kept. VS_EINPUT if op is not b's newest op or past VS_BLOCK_ITEMS_MAX
 * tensors, VS_ENOMEM without host memory: never a silent drop. */
int vs_block_save(vs_block *b, vs_op_spec *op, vs_saved sv, vs_error *err);

/* Freezes (trainable = false) every parameter tensor of b whose name starts
 * with prefix; returns how many. */
size_t vs_block_freeze(vs_block *b, const char *prefix);

/* The largest number of saved tensors in any kind (sizes per-block tables). */
uint32_t vs_model_max_saved(const vs_model *m);

/* The most ops of any layer kind (dense or MoE; sizes program estimates). */
uint32_t vs_model_max_layer_ops(const vs_model *m);

/* Parameters of the whole model, as `vsim show` prints them. */
uint64_t vs_model_param_count(const vs_model *m);

/* Which saved tensors a sum takes: all, or those selective recompute
 * keeps (not its attention core's). */
typedef enum { VS_SAVED_ALL, VS_SAVED_KEPT_BY_SELECTIVE } vs_saved_set;

/* Sum of the bytes a block can save for backward, in one category or all
 * (-1), of the set `which`, whatever the recipe keeps (the report's
 * figure is vs_recipe_kind_saved_bytes). Used by tests. */
uint64_t vs_block_saved_bytes(const vs_block *b, int category,
                              vs_saved_set which);

#endif
