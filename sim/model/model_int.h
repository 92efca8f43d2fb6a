/* model_int.h - what the model builder's three files share (model.c: the
 * whole model; block.c: the building blocks of a block; layer.c: the
 * blocks themselves, from attention to the head). Not part of model.h's
 * contract: only sim/model includes it. */
#ifndef VS_MODEL_INT_H
#define VS_MODEL_INT_H

#include "comm.h"
#include "error.h"
#include "workload.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* model.h's, which this header does not include (the three files
 * include both; model.h knows nothing of these internals). */
typedef struct vs_block vs_block;
typedef struct vs_op_spec vs_op_spec;

/* Shapes of one rank's work for one micro-batch. */
typedef struct vs_dims {
  uint64_t s, b, h, a, kv, d, f, vocab; /* model sizes (vocab padded; s
                                          this rank's part of a sequence) */
  uint64_t skv;      /* the keys a query attends over: seq_len */
  uint64_t cp;       /* context-parallel size */
  int cp_comm;       /* vs_cp_comm */
  uint64_t t;        /* tensor-parallel size */
  uint8_t tp_group;  /* the vs_group of those t ranks: tp (etp in the
                        routed experts' dims, expert_dims) */
  uint64_t et;       /* expert tensor-parallel size (vs_workload_etp) */
  uint64_t tokens;   /* s*b */
  uint64_t
      tok_rep; /* tokens in the tp-replicated region: s*b, or s*b/t with sp */
  uint64_t e;        /* bytes per activation element (the GEMMs'
                        outputs) */
  uint64_t em;       /* bytes per saved matmul input (1 under fp8) */
  uint8_t act_dtype; /* vs_dtype of activations */
  uint8_t em_dtype;  /* vs_dtype of saved matmul inputs */
  uint8_t param_dtype; /* vs_dtype of the GPU's weights */
  bool amp;          /* autocast over fp32 weights (frameworks.md 1) */
  uint64_t er;       /* bytes per element of the residual stream and of
                        the inputs norms save: e, or 4 under autocast
                        (fp32 weights make the residual fp32; layer_norm
                        is on autocast's fp32 list) */
  uint8_t er_dtype;  /* their vs_dtype */
  uint64_t qkv_modules; /* linear modules reading the first norm's
                        output (modules_of): where more than one, the
                        attention's input projections as separate
                        weights */
  uint64_t up_modules; /* ... the second norm's output, the MLP's */
  uint64_t qkv_casts; /* copies of the first norm's output the attention's
                        input projections save: qkv_modules under
                        autocast, else 1 */
  uint64_t up_casts; /* ... of the second norm's output, the MLP's */
  uint8_t copy_dtype; /* dtype of a GEMM weight's copy saved for backward
                        (vs_block_weight_copy): fp8 under Transformer
                        Engine's fp8, the 16-bit dtype
                        under autocast; VS_DTYPE_N: none */
  bool dropout;      /* dropout ops exist */
  bool sp;           /* sequence parallel */
  bool sp_gathered;  /* under sp a column-parallel linear saves its input
                        gathered (tokens, not tok_rep) and gathers nothing
                        again for backward: torchtitan's tensor
                        parallelism (fsdp2), whose PrepareModuleInput and
                        ColwiseParallel redistribute the sequence shard
                        to Replicate before the module, so autograd keeps
                        the replicated tensor (torch.distributed.tensor.
                        parallel; the PyTorch TP tutorial's plan), where
                        Megatron-LM saves the shard and gathers it again */
  bool eager;        /* attention materialises the scores */
  bool causal;       /* attention masks later tokens (gpt, llama) */
  bool frozen_base;  /* LoRA / QLoRA: every base weight frozen */
  uint8_t base_dtype; /* vs_dtype of the layers' linear weights */
  uint64_t lora_r;   /* adapter rank; 0: no adapters */
  uint32_t lora_targets; /* bits 1 << vs_lora_target */
  bool lora_drop;    /* dropout on each adapter's input */
  uint8_t adapter_dtype; /* vs_dtype of adapter weights */
  bool frozen_prefix; /* trainable_layers: the first layers are frozen */
  uint64_t experts;  /* routed experts of an MoE layer (0: dense model) */
  uint64_t topk;     /* experts a token goes to */
  uint64_t fe;       /* a routed expert's FFN width */
  uint64_t fs;       /* the shared experts' FFN width, all together */
  bool shared_gate;  /* their output scaled by a sigmoid gate */
  uint64_t slots;    /* token slots the routed experts process on this
                        rank per micro-batch: what the all-to-all brings
                        (arrived), gathered over etp */
  uint64_t arrived;  /* token slots the expert-parallel all-to-all brings
                        this rank (moe_slots of its tok_rep tokens) */
  uint64_t sent;     /* the rank's own token slots it dispatches (k
                        tok_rep, or padded to capacity) */
  uint64_t ep;       /* expert-parallel size: experts / ep on a rank */
  bool bert;         /* arch = bert (its GeLU is F.gelu) */
  uint8_t norm;      /* vs_norm_kind of the model's norms */
  bool qkv_bias;     /* the query, key and value projections have
                        biases ([model] attention_bias) */
  bool out_bias;     /* the attention's output projection has one */
  bool mlp_bias;     /* every MLP's linears have biases ([model]
                        mlp_bias) */
  bool qk_norm;      /* a norm over each query and key head (Qwen3) */
  bool post_norms;   /* a norm over each sublayer's output (Gemma 2, 3) */
  bool attn_softcap; /* the attention scores soft-capped (Gemma 2) */
  bool logit_softcap;  /* the final logits soft-capped (Gemma 2) */
  uint64_t positions;  /* rows of the learned position table (0: rotary
                         embeddings) */
  uint64_t type_vocab; /* BERT's token types (0: none) */
  bool gated_mlp;    /* SwiGLU MLPs (llama), else GeLU ones */
  uint8_t fp8_lib;   /* vs_fp8_lib: who runs fp8's GEMMs. Transformer
                        Engine: its GroupedLinear runs the routed
                        experts, its LayerNormLinear quantizes a norm's
                        output in the norm's kernel, and a linear saves
                        its input's FP8 copy. torchao (fsdp2):
                        torchtitan's float8 converter swaps nn.Linear
                        modules alone (no GroupedExperts:
                        moe_fqns_prototype empty by default), no fused
                        norm, and Float8Linear saves no FP8 weight copy
                        (float8_linear.py, save_for_backward(input_hp,
                        weight_hp_t): FSDP gathers the weight again for
                        backward) nor, eagerly, an FP8 input
                        (vs_block_fp8_copies) */
  bool fp8_params;   /* Megatron-LM's --fp8-param-gather: the trained
                        weights of Transformer Engine's FP8 linears are
                        Float8Tensors (fp8_model_init), 1 B a weight and
                        an fp32 scale, no 16-bit copy */
  uint8_t fp8_recipe; /* vs_fp8_recipe of torchao's float8 */
  bool torchao_tp;   /* vs_workload_fp8_tp_plan: torchtitan's float8
                        tensor-parallel plan casts each module's input
                        to FP8 before its linears (_prepare_input_fn
                        runs hp_tensor_to_float8_dynamic, then
                        redistributes), so the all-gather moves FP8 and
                        each linear saves the FP8 input it got
                        (tensor_already_casted_to_fp8: no cast of its
                        own) */
  uint64_t rkv;      /* MLA: the key-value latent's width (0: no MLA) */
  uint64_t rq;       /* MLA: the query latent's (0: a full projection) */
  uint64_t dn, dr, dv; /* MLA head sizes: query/key non-rotary, rotary,
                        value */
  bool hf_modules;   /* Hugging Face transformers' eager modules
                        (framework = hf): GPT-2's NewGELUActivation in
                        Python ops, unfused; an fp32 attention mask; the
                        rotary embedding's slices (its RMSNorm:
                        python_rmsnorm) */
  bool repeat_kv;    /* K and V expanded to every query head before a
                        flash kernel, which saves the copies: torchtitan's
                        attention (framework = fsdp2; repeat_kv in
                        torchtitan/models/llama/model.py @ 9dec370) */
  bool python_rmsnorm; /* RMSNorm in Python ops, as Hugging Face's
                        LlamaRMSNorm and torchtitan's RMSNorm (framework
                        hf, fsdp2) run eagerly (kernels = eager): what
                        autograd saves of it */
  bool norm_fp32_scale; /* ... and scaled by 1 + weight in fp32, as
                        Gemma's RMSNorm (zero_centered_norm) */
  bool hf_fp32_softmax; /* Hugging Face's eager attention for Llama-like
                        models: softmax(dtype = float32), then cast to
                        the query's dtype (eager_attention_forward) */
  bool eager_kernels; /* kernels = eager: element-wise work as eager
                        PyTorch's per-operator kernels */
  uint8_t rope;      /* vs_rope: whether a rotary embedding runs, and how
                        eagerly */
} vs_dims;

/* The rotary embedding's eager code (llama layers; under fused kernels
 * Megatron-LM's one kernel a tensor, vs_block_rope): x * cos +
 * rotate_half(x) * sin with the halves from torch.chunk (Megatron-LM's
 * unfused _rotate_half, the ground-truth harness) or from slices (Hugging
 * Face's modeling_llama, cos and sin in the residual's dtype), or
 * torchtitan's complex product (view_as_complex(x.float()) * freqs_cis,
 * then type_as). */
typedef enum { ROPE_NONE, ROPE_CHUNK, ROPE_HF, ROPE_COMPLEX } vs_rope;

/* A norm: LayerNorm (a scale and a bias, one kernel even eagerly) or
 * RMSNorm (a scale). */
typedef enum vs_norm_kind { NORM_LAYER, NORM_RMS } vs_norm_kind;

/* Whether a linear that quantizes its input saves that FP8 copy for its
 * weight gradient, a copy of its own even where another op keeps the
 * 16-bit tensor: Transformer Engine's linears do (module/linear.py saves
 * inputmat_t under delayed scaling, save_original_input false), and
 * torchao's over tp ranks, whose input the tensor-parallel plan cast
 * (torchao_tp); otherwise torchao's Float8Linear saves the 16-bit input
 * itself (float8_linear.py; compiled, what the graph saves is the
 * partitioner's choice, not verified: vsim keeps the Function's). */
bool vs_block_fp8_copies(const vs_dims *d);

/* Who keeps a linear's input for backward. */
typedef enum vs_input_keeper {
  KEPT_FOR_WEIGHTS,  /* only the linear, for its weight gradient */
  KEPT_BY_ANOTHER    /* another op keeps the same tensor too (flash
                        attention its output, the output projection's
                        input) */
} vs_input_keeper;

/* One LoRA target of a base linear: its output features and name. */
typedef struct vs_lora_linear {
  int target;        /* vs_lora_target */
  uint64_t out;      /* output features */
} vs_lora_linear;

/* A fused norm's backward launches two kernels: the input gradient with
 * per-block partial sums of the weight's (and bias's) gradients, then
 * their reduction (apex's contrib layer_norm: ln_bwd and
 * ln_bwd_finalize, ln_bwd_semi_cuda_kernel.cu; Megatron's persistent
 * FastLayerNorm). */
#define NORM_BWD_KERNELS 2

/* Whether a column-parallel matmul under sequence parallelism gathers its
 * saved (sequence-sharded) input again for backward, or keeps the gathered
 * input whole (the experts' tokens, gathered by the dispatcher). */
typedef enum { SP_REGATHER, SP_KEEPS_GATHERED } vs_sp_input;

/* A layer's MLP: dense, or a mixture of experts. */
typedef enum { MLP_DENSE, MLP_MOE } vs_mlp_kind;

/* ------------------------------------------------------------------------
 * Building blocks (block.c): ops with their work, saved tensors, weights
 * and their copies, norms, dropouts, tensor-parallel linears and their
 * collectives. Each returns 0, or an error code with err set.
 * ------------------------------------------------------------------------ */

int vs_block_save_act(vs_block *blk, vs_op_spec *op, uint64_t bytes, int dtype,
                      vs_error *err);

int vs_block_save_input(vs_block *blk, vs_op_spec *op, const vs_dims *d,
                        uint64_t elems, vs_input_keeper keeper, vs_error *err);

/* A tensor of the attention core (op->attn_core) that selective
 * checkpointing drops and its re-run makes again before backward. */
int vs_block_save_core(vs_block *blk, vs_op_spec *op, uint64_t bytes, int dtype,
                       vs_error *err);

int vs_block_save_scores(vs_block *blk, vs_op_spec *op, uint64_t scores,
                         int dtype, vs_error *err);

void vs_block_as_matmul(vs_op_spec *op, uint64_t m, uint64_t k, uint64_t n,
                        uint64_t e);

void vs_block_as_elementwise(vs_op_spec *op, uint64_t elems, uint64_t e,
                             double flops_per_elem);

void vs_block_comm(vs_comm *c, const vs_dims *d, int kind, uint64_t bytes);

/* The pass a side kernel runs in (vs_side_work): forward (an eager
 * element-wise operator's, which a recompute re-runs whole, apart),
 * backward outside the weight gradient, or with the weight gradient. */
typedef enum { SIDE_FWD, SIDE_FWD_EAGER, SIDE_BWD, SIDE_WGRAD } vs_side_pass;

void vs_block_side(vs_op_spec *op, vs_side_pass pass, double bytes,
                   uint32_t kernels);

int vs_block_weight_copy(vs_block *blk, const vs_dims *d, uint64_t rows,
                         uint64_t cols, int dtype, vs_error *err);

int vs_block_param(vs_block *blk, const vs_dims *d, const char *name,
                   uint64_t rows, uint64_t cols, vs_error *err);

int vs_block_linear_weight(vs_block *blk, const vs_dims *d, const char *name,
                           uint64_t rows, uint64_t cols, vs_error *err);

int vs_block_lora_adapter(vs_block *blk, const vs_dims *d, const char *name,
                          uint64_t in, vs_input_keeper keeper,
                          const vs_lora_linear *t, size_t n, vs_error *err);

int vs_block_norm(vs_block *blk, const vs_dims *d, const char *name,
                  vs_norm_kind kind, vs_error *err);

/* A norm over each of `heads` (all the model's; the rank holds heads /
 * t) query or key heads of the newest projection's output, on the
 * rank's tokens, with one weight of a head's width (Qwen3's q_norm and
 * k_norm): the model's norm kind, saving what vs_block_norm saves (a
 * LayerNorm's input in fp32 under autocast, which casts it). */
/* A norm over a sublayer's 16-bit output before its residual add
 * (post_norms), as vs_block_norm over the activations' dtype. */
int vs_block_post_norm(vs_block *blk, const vs_dims *d, const char *name,
                       vs_error *err);

/* What a soft-capping op saves: attention scores (which selective
 * checkpointing drops) or the final logits. */
typedef enum { VS_CAP_SCORES, VS_CAP_LOGITS } vs_cap_of;

/* Soft-capping over `elems` elements, cap * tanh(x / cap), as the newest
 * op (see block.c). */
int vs_block_softcap(vs_block *blk, const vs_dims *d, const char *name,
                     uint64_t elems, vs_cap_of of, vs_error *err);

int vs_block_head_norm(vs_block *blk, const vs_dims *d, const char *name,
                       uint64_t heads, vs_error *err);

/* Whether an op belongs to the attention core that selective recompute
 * recomputes (Korthikanti et al.'s). */
typedef enum { VS_OUTSIDE_ATTN_CORE, VS_IN_ATTN_CORE } vs_core_part;

int vs_block_dropout(vs_block *blk, const vs_dims *d, const char *name,
                     uint64_t n, uint64_t eb, vs_core_part part,
                     vs_error *err);

void vs_block_autocast_input(vs_op_spec *op, const vs_dims *d, uint64_t casts,
                             uint64_t elems);

void vs_block_residual_add(vs_op_spec *op, const vs_dims *d);

void vs_block_rope(vs_op_spec *op, const vs_dims *d);

void vs_block_column_comms(vs_op_spec *op, const vs_dims *d, uint64_t rows,
                           uint64_t width, vs_sp_input input);

void vs_block_row_comms(vs_op_spec *op, const vs_dims *d, uint64_t rows);

vs_op_spec *vs_block_column_parallel(vs_block *blk, const vs_dims *d,
                                     const char *name, uint64_t out_cols,
                                     uint64_t casts, vs_error *err);

vs_op_spec *vs_block_row_parallel(vs_block *blk, const vs_dims *d,
                                  const char *name, uint64_t in_cols,
                                  vs_input_keeper keeper, vs_error *err);

/* ------------------------------------------------------------------------
 * Blocks (layer.c): one transformer layer, the embedding, the head.
 * ------------------------------------------------------------------------ */

int vs_model_build_layer(vs_block *blk, const vs_workload *wl, const vs_dims *d,
                         vs_mlp_kind mlp, vs_error *err);

int vs_model_build_embed(vs_block *blk, const vs_workload *wl, const vs_dims *d,
                         vs_error *err);

int vs_model_build_head(vs_block *blk, const vs_workload *wl, const vs_dims *d,
                        vs_error *err);

#endif
