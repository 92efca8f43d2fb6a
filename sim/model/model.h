/* model.h - the model builder: a workload's transformer expanded into blocks
 * of ops, as one tensor-parallel rank sees them.
 *
 * Three blocks make a model: `embed` (input batch, embeddings), `layer` (one
 * transformer layer, repeated `layers` times) and `head` (final norm, output
 * layer, loss). Each op declares its forward and backward FLOPs and HBM
 * bytes, the tensors it saves for backward (with dtype sizes; dropout masks
 * are 1 byte), its transient workspace and the tensor-parallel communication
 * that follows it. Each block lists its parameter tensors with their shapes
 * on one rank. Nothing here knows about time or schedules. */
#ifndef VS_MODEL_H
#define VS_MODEL_H

#include "category.h"
#include "comm.h"
#include "error.h"
#include "workload.h"

#include <stdbool.h>
#include <stdint.h>

#define VS_OP_NAME_MAX 24
#define VS_BLOCK_OPS_MAX 24
#define VS_BLOCK_PARAMS_MAX 16
#define VS_SAVED_MAX 3

typedef struct vs_saved {
  uint64_t bytes;     /* size on one rank for one micro-batch */
  int category;       /* VS_CAT_ACTIVATIONS, or VS_CAT_TEMP for loss buffers */
  bool selective;     /* dropped and recomputed under selective checkpointing */
} vs_saved;

/* A collective a tensor-parallel layer needs (Megatron's f and g operators;
 * with sequence parallelism all-gather and reduce-scatter replace them). */
typedef struct vs_tp_comm {
  int kind;                   /* vs_coll_kind */
  uint64_t bytes;             /* size of the full (gathered) buffer */
} vs_tp_comm;

typedef struct vs_op_spec {
  char name[VS_OP_NAME_MAX];  /* "qkv_proj" */
  bool matmul;                /* runs on tensor cores at the compute dtype */
  bool attn_core;             /* part of the attention core that selective
                                 checkpointing recomputes */
  double fwd_flops;           /* forward FLOPs, one rank, one micro-batch */
  double bwd_flops;           /* backward FLOPs */
  double fwd_bytes;           /* forward HBM traffic */
  double bwd_bytes;           /* backward HBM traffic */
  vs_saved saved[VS_SAVED_MAX]; /* tensors kept from forward to backward */
  int n_saved;                /* how many of saved[] are used */
  uint64_t fwd_temp_bytes;    /* transient outputs/workspace during forward */
  uint64_t bwd_temp_bytes;    /* gradient buffers during backward */
  vs_tp_comm fwd_before;      /* tensor-parallel collective before forward */
  vs_tp_comm fwd_after;       /* ... after forward */
  vs_tp_comm bwd_before;      /* ... before backward */
  vs_tp_comm bwd_after;       /* ... after backward */
} vs_op_spec;

typedef struct vs_param_tensor {
  char name[VS_OP_NAME_MAX];  /* "mlp_up.weight" */
  uint64_t rows;              /* shape on one rank (1 for vectors) */
  uint64_t cols;
} vs_param_tensor;

typedef struct vs_block {
  vs_op_spec ops[VS_BLOCK_OPS_MAX];           /* forward order */
  int n_ops;
  vs_param_tensor params[VS_BLOCK_PARAMS_MAX]; /* on one tp rank */
  int n_params;
  uint64_t param_elems;       /* sum of rows*cols of params[] */
  uint64_t input_bytes;       /* the block input a full checkpoint keeps */
} vs_block;

typedef struct vs_model {
  vs_block embed;             /* first pipeline stage */
  vs_block layer;             /* one transformer layer */
  vs_block head;              /* last pipeline stage */
  uint64_t layers;            /* how many times `layer` repeats */
  uint64_t vocab_padded;      /* vocab rounded up to a multiple of tp */
  uint64_t params_total;      /* whole model, all ranks, unpadded vocab */
  uint64_t act_elem_bytes;    /* bytes per activation element */
  uint64_t param_elem_bytes;  /* bytes per weight element on the GPU */
  bool causal;                /* attention masks later tokens (gpt, llama;
                                 bert is bidirectional) */
} vs_model;

/* Expands wl into m. VS_EINPUT if a block would exceed its fixed capacity. */
int vs_model_build(const vs_workload *wl, vs_model *m, vs_error *err);

/* Parameters of the whole model, as `vsim show` prints them. */
uint64_t vs_model_param_count(const vs_model *m);

/* Sum of the bytes a block saves for backward, in one category or all (-1),
 * with or without the selective ones. Used by tests and reports. */
uint64_t vs_block_saved_bytes(const vs_block *b, int category,
                              bool include_selective);

#endif
