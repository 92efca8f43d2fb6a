/* workload.h - a training job: the model, how it is trained, how it is laid
 * out over GPUs, and the runtime's allocator settings.
 *
 * vs_workload_load parses workload.ini (inih, via config.c), applies --set
 * overrides, fills every derived default and validates the whole: after it
 * returns 0 every field holds a resolved, mutually consistent value, so later
 * stages never re-check input. Enum fields hold the VS_* constants below. */
#ifndef VS_WORKLOAD_H
#define VS_WORKLOAD_H

#include "config.h"
#include "error.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { VS_ARCH_GPT, VS_ARCH_LLAMA, VS_ARCH_BERT } vs_arch;
/* Which of the attention's linears have biases: none (Llama), the query,
 * key and value projections (Qwen2), or those and the output projection
 * (GPT, BERT; Llama's attention_bias = true). */
typedef enum { VS_BIAS_NONE, VS_BIAS_QKV, VS_BIAS_ALL } vs_attention_bias;
/* How tokens learn their positions: a learned table of max_positions rows
 * added to the embedding (GPT-2, BERT), or rotary embeddings applied to
 * the queries and keys (Llama, GPT-NeoX). */
typedef enum { VS_POS_LEARNED, VS_POS_ROTARY } vs_positions;
/* bf16, fp16, fp32: weights and activations in that dtype (16-bit weights
 * with an fp32 master by default); fp8: Transformer Engine's FP8 GEMMs over
 * 16-bit weights; amp_bf16, amp_fp16: PyTorch's autocast over an fp32 model
 * (torch.autocast; the Hugging Face Trainer's bf16 / fp16 = True): fp32
 * weights, gradients and optimizer states, each op in the dtype autocast's
 * lists give it (shared/reference/frameworks.md 1). */
typedef enum {
  VS_PREC_BF16, VS_PREC_FP16, VS_PREC_FP32, VS_PREC_FP8, VS_PREC_AMP_BF16,
  VS_PREC_AMP_FP16
} vs_precision;
typedef enum { VS_GRAD_PRECISION, VS_GRAD_FP32 } vs_grad_dtype;
/* The dtypes Megatron-LM's precision-aware optimizer keeps an Adam moment
 * in (--exp-avg-dtype, --exp-avg-sq-dtype: Transformer Engine's FusedAdam
 * states) and its main parameters in (--main-params-dtype). */
typedef enum { VS_STATE_FP32, VS_STATE_BF16, VS_STATE_FP16 } vs_state_dtype;
typedef enum { VS_MAIN_FP32, VS_MAIN_FP16 } vs_main_params_dtype;
/* torchao's Float8Linear recipes (torchao/float8/config.py
 * Float8LinearRecipeName), which torchtitan's float8 converter takes as
 * recipe_name: row-wise scales for every cast and GEMM; the same with
 * the weight gradient's GEMM in 16 bits (the weight cast tensor-wise for
 * the input gradient's); one scale a tensor (torchtitan's default until
 * PR #3127, April 2026, which dropped it). */
typedef enum {
  VS_FP8_ROWWISE,
  VS_FP8_ROWWISE_GW_HP,
  VS_FP8_TENSORWISE
} vs_fp8_recipe;
typedef enum {
  VS_OPT_ADAMW, VS_OPT_ADAM, VS_OPT_SGD, VS_OPT_MOMENTUM,
  VS_OPT_ADAFACTOR, VS_OPT_ADAM8BIT, VS_OPT_LION
} vs_optimizer;
/* How the optimizer's step runs: one fused kernel (torch.optim's fused=True,
 * apex's and DeepSpeed's FusedAdam, Transformer Engine's), or PyTorch's
 * foreach implementation (torch.optim's default on CUDA): an op over the
 * whole tensor list for each term of the update. */
typedef enum { VS_OPTIMPL_FUSED, VS_OPTIMPL_FOREACH } vs_optimizer_impl;
/* none; selective: Megatron's attention-core recompute; full: every
 * layer's input kept and the layer recomputed; ops: torchtitan's op-level
 * selective policy (outputs of every other matmul and of attention kept,
 * the rest recomputed). */
typedef enum {
  VS_CKPT_NONE, VS_CKPT_SELECTIVE, VS_CKPT_FULL, VS_CKPT_OPS
} vs_checkpointing;
/* The training framework whose buffers and defaults a job gets (none: the
 * idealised one of the keys alone). */
typedef enum {
  VS_FW_NONE, VS_FW_MEGATRON, VS_FW_DEEPSPEED, VS_FW_FSDP2, VS_FW_HF
} vs_framework;
typedef enum { VS_ATTN_FLASH, VS_ATTN_EAGER } vs_attention;
/* How the framework runs a layer's element-wise work: in the fused
 * kernels Megatron-LM and Transformer Engine launch (a norm, an
 * activation, bias-dropout-add: one kernel each), or as eager PyTorch
 * runs the model's Python code, a kernel per operator (RMSNorm's pow,
 * mean, rsqrt and products; rotary embeddings; residual adds) with a
 * gradient accumulation into each resident .grad. */
typedef enum { VS_KERNELS_FUSED, VS_KERNELS_EAGER } vs_kernels;
/* How context-parallel attention gets the other ranks' keys and values
 * (Megatron-LM's cp_comm_type): a ring of point-to-point chunks, an
 * all-to-all to heads (Ulysses), or all of them gathered. */
typedef enum { VS_CP_P2P, VS_CP_A2A, VS_CP_ALLGATHER } vs_cp_comm;
/* Whether a pipeline stage's compute waits for its own sends: overlapped
 * (the sends run beside the next compute, as torch.distributed.pipelining
 * and Megatron-LM's interleaved schedule with overlap_p2p_comm issue
 * them) or blocking (the next compute waits until the send is done, as
 * Megatron-LM's non-interleaved 1F1B and DeepSpeed's pipeline engine
 * wait). */
typedef enum { VS_P2P_OVERLAPPED, VS_P2P_BLOCKING } vs_p2p_mode;
typedef enum { VS_SCHED_1F1B, VS_SCHED_GPIPE, VS_SCHED_INTERLEAVED } vs_schedule_kind;
typedef enum { VS_OFFLOAD_NONE, VS_OFFLOAD_CPU, VS_OFFLOAD_NVME } vs_offload;
typedef enum { VS_ALLOC_CACHING, VS_ALLOC_EXACT } vs_allocator_kind;
/* full: every weight trains; lora / qlora: the base is frozen and adapters
 * train; frozen: the base is frozen but for its last trainable_layers
 * layers, which train whole. */
typedef enum { VS_FT_FULL, VS_FT_LORA, VS_FT_QLORA, VS_FT_FROZEN } vs_finetune_method;
/* Storage of frozen base weights: as the trained weights (precision), or
 * a format of its own. */
typedef enum {
  VS_BASE_PRECISION, VS_BASE_BF16, VS_BASE_FP16, VS_BASE_FP32, VS_BASE_INT8,
  VS_BASE_NF4, VS_BASE_FP8
} vs_base_dtype;
/* The dtype LoRA adapters are kept in: fp32 (PEFT's
 * autocast_adapter_dtype), or bf16 / fp16 (the QLoRA repository's --bf16,
 * torchtune). */
typedef enum { VS_ADAPTER_FP32, VS_ADAPTER_BF16, VS_ADAPTER_FP16 } vs_adapter_dtype;

/* The linears a LoRA adapter can target (bits of lora_targets). */
typedef enum {
  VS_LORA_Q, VS_LORA_K, VS_LORA_V, VS_LORA_O, VS_LORA_GATE, VS_LORA_UP,
  VS_LORA_DOWN, VS_LORA_N
} vs_lora_target;
/* Rank placement, innermost group first (Megatron's default is tp-dp-pp). */
typedef enum { VS_ORDER_TP_DP_PP, VS_ORDER_TP_PP_DP } vs_order;

typedef struct vs_model_conf {
  char hf_config[VS_PATH_MAX]; /* a Hugging Face config.json giving the
                               keys below that the workload does not set
                               ("" = none); relative to the workload file */
  int arch;                 /* vs_arch */
  uint64_t layers;          /* transformer layers */
  uint64_t hidden;          /* h */
  uint64_t heads;           /* a */
  uint64_t kv_heads;        /* grouped-query heads; = heads by default */
  uint64_t head_dim;        /* a query, key or value head's width;
                               hidden / heads by default */
  uint64_t ffn_hidden;      /* MLP width; 4h for gpt/bert by default */
  uint64_t vocab;           /* V */
  uint64_t seq_len;         /* s */
  bool tied_embeddings;     /* output layer shares the embedding matrix */
  double dropout;           /* probability; 0 removes the dropout ops */
  int attention_bias;       /* vs_attention_bias */
  bool mlp_bias;            /* every MLP's linears (dense, experts, shared
                               experts) have biases */
  bool qk_norm;             /* a norm over each query and key head before
                               rotary embeddings (Qwen3) */
  bool zero_centered_norm;  /* the norms scale by 1 + weight, in fp32
                               (Gemma's RMSNorm; Megatron-LM's
                               --apply-layernorm-1p) */
  bool post_norms;          /* a norm over each sublayer's output before
                               its residual add (Gemma 2 and 3's
                               post_attention_layernorm and
                               post_feedforward_layernorm) */
  double attn_softcap;      /* attention scores soft-capped, cap *
                               tanh(x / cap) (Gemma 2); 0: not */
  double logit_softcap;     /* the final logits soft-capped so; 0: not */
  int positions;            /* vs_positions */
  uint64_t max_positions;   /* rows of the learned position table (at
                               least seq_len); 0 with rotary embeddings */
  uint64_t type_vocab;      /* BERT's token types (0 for other arches) */
  uint64_t vocab_divisible_by; /* vocab padded to a multiple of this * tp */
  /* Mixture of experts (0 experts: every layer dense) */
  uint64_t experts;         /* routed experts of an MoE layer, E */
  uint64_t experts_per_token; /* top-k */
  uint64_t expert_ffn_hidden; /* each routed expert's FFN width */
  uint64_t shared_experts;  /* experts every token goes through */
  uint64_t shared_expert_ffn_hidden; /* each shared expert's FFN width */
  bool shared_expert_gate;           /* the shared experts' output scaled by a
                                        sigmoid gate (Qwen2-MoE) */
  uint64_t dense_layers;    /* the first layers stay dense (DeepSeek) */
  uint64_t moe_every;       /* after them, every moe_every-th layer is MoE,
                               the first one included */
  double expert_capacity_factor; /* slots per expert = factor x k x tokens
                               / E, padded; 0: dropless */
  double routing_skew;      /* the hottest expert receives 1 + this times
                               its balanced share of the tokens (0:
                               balanced routing) */
  /* Multi-head latent attention (DeepSeek-V2/V3; 0 kv_lora_rank: off) */
  uint64_t kv_lora_rank;    /* the compressed key-value latent's width */
  uint64_t q_lora_rank;     /* the compressed query's (0: a full query
                               projection) */
  uint64_t qk_head_dim;     /* a query/key head's non-rotary part */
  uint64_t qk_rope_head_dim; /* its rotary part (one key part shared by
                               the heads) */
  uint64_t v_head_dim;      /* a value head */
  uint64_t mtp_layers;      /* multi-token prediction depths (DeepSeek-V3's
                               MTP module, Megatron-LM's --mtp-num-layers;
                               0: none), on the last pipeline stage */
} vs_model_conf;

typedef struct vs_training_conf {
  uint64_t micro_batch;     /* b, sequences per micro-batch per replica */
  uint64_t global_batch;    /* sequences per optimizer step */
  int precision;            /* vs_precision */
  bool master_weights;      /* fp32 master copy of 16/8-bit weights */
  int grad_dtype;           /* vs_grad_dtype */
  int optimizer;            /* vs_optimizer */
  int framework;            /* vs_framework */
  int checkpointing;        /* vs_checkpointing */
  uint64_t checkpoint_layers; /* full: only the first this many layers of
                               each model chunk (Megatron's block method);
                               0 = all */
  uint64_t checkpoint_every; /* full: only layers whose 1-based index is a
                               multiple of this (torchtitan); 0 = all */
  int attention;            /* vs_attention */
  int kernels;              /* vs_kernels */
  int optimizer_impl;       /* vs_optimizer_impl */
  bool grad_accumulation_fusion; /* each weight-gradient GEMM adds into
                               the resident gradient (Megatron-LM's
                               gradient_accumulation_fusion); false: a
                               kernel a parameter adds each new gradient,
                               as eager PyTorch's AccumulateGrad */
  bool set_grads_to_none;        /* the training loop's optimizer.zero_grad()
                                    sets the gradients to None each step (its
                                    set_to_none), so they are made anew in
                                    each step's backward; false: they stay,
                                    zeroed in place */
  bool grad_clipping;            /* the step clips the gradients by their global
                                    norm (Megatron-LM's --clip-grad, the
                                    Trainer's max_grad_norm, torchtitan's
                                    max_norm, DeepSpeed's gradient_clipping):
                                    their norm taken and their scaling, over the
                                    GPU's share (vs_recipe step_wrap) */
  int offload_activations;  /* vs_offload: none or cpu (saved activations
                               copied to the host after forward) */
  bool optimizer_in_backward; /* each block's parameters stepped as soon as
                               its backward made their gradients */
  bool paged_optimizer;     /* bitsandbytes' paged variant: the states of
                               large tensors in CUDA managed memory */
  bool fused_cross_entropy; /* the loss computes the logits' gradient in
                               their own buffer during forward (Liger
                               Kernel): no fp32 copies */
  bool precision_aware_optimizer; /* Megatron-LM's --use-precision-aware-
                               optimizer: Transformer Engine's FusedAdam
                               keeps the master weights and moments in the
                               dtypes below */
  int exp_avg_dtype;              /* vs_state_dtype of Adam's first moment */
  int exp_avg_sq_dtype;           /* vs_state_dtype of its second moment */
  int main_params_dtype;          /* vs_main_params_dtype */
  bool fp8_param_gather; /* Megatron-LM's --fp8-param-gather: the weights of
                            the FP8 GEMMs kept in FP8 (Transformer Engine's
                            fp8_model_init) and all-gathered so */
  int fp8_recipe;        /* vs_fp8_recipe of torchao's float8 (precision
                            fp8 under framework fsdp2) */
} vs_training_conf;

/* [parallel] bucket's default: DDP's bucket_cap_mb = 25 (Megatron-LM's
 * and DeepSpeed's presets size theirs in parameters). */
#define VS_BUCKET_DEFAULT (25ull << 20)

typedef struct vs_parallel_conf {
  uint64_t tp;              /* tensor-parallel size */
  uint64_t pp;              /* pipeline-parallel size */
  uint64_t dp;              /* data-parallel size */
  bool sequence_parallel;   /* shard norms/dropout by sequence over tp */
  int schedule;             /* vs_schedule_kind */
  uint64_t virtual_stages;  /* model chunks per pipeline rank */
  uint64_t zero;            /* ZeRO stage 0-3 */
  uint64_t ep;              /* expert-parallel size: the experts of an MoE
                               layer spread over ep data-parallel ranks */
  uint64_t etp;             /* expert tensor-parallel size (Megatron-LM's
                               expert_tensor_parallel_size): each routed
                               expert's FFN split over etp ranks; 0: tp
                               (vs_workload_etp) */
  uint64_t cp;              /* context-parallel size: each sequence split
                               over cp ranks */
  int cp_comm;              /* vs_cp_comm */
  int p2p;                  /* vs_p2p_mode of the pipeline's sends */
  bool overlap_grad_reduce; /* the step's gradient buckets reduced while
                               backward goes on (true), or once the whole
                               backward pass is done (Megatron-LM without
                               --overlap-grad-reduce, DeepSpeed's ZeRO-0/1
                               at the accumulation boundary) */
  bool p2p_scatter_gather;  /* Megatron-LM's scatter_gather_tensors_in_
                               pipeline: each tensor-parallel rank sends
                               1/tp of the pipeline tensor and the
                               receivers all-gather it (without sequence
                               parallelism, whose tensor is already split) */
  int offload_optimizer;    /* vs_offload */
  int offload_params;       /* vs_offload */
  bool offload_pin_memory;  /* the offloaded states' and parameters' host
                               buffers are pinned (DeepSpeed's
                               offload_optimizer / offload_param
                               pin_memory, FSDP2's CPUOffloadPolicy);
                               false: pageable, copied at the host's
                               pageable rate */
  uint64_t bucket_bytes;    /* gradient all-reduce / reduce-scatter bucket */
  uint64_t max_live_parameters; /* DeepSpeed ZeRO-3's parameter coordinator
                               (vs_workload_deepspeed_zero3): its
                               stage3_max_live_parameters, the gathered
                               elements below which it prefetches (0:
                               none); 0 elsewhere */
  uint64_t max_reuse_distance;  /* its stage3_max_reuse_distance: a block
                                whose next use is fewer gathered elements
                                away stays gathered (0: none); 0
                                elsewhere */
  vs_count_list pp_layers;  /* layers per pipeline stage (or per model
                               chunk when interleaved); n = 0: even split */
  int order;                /* vs_order */
} vs_parallel_conf;

typedef struct vs_finetune_conf {
  int method;               /* vs_finetune_method */
  int base_dtype;           /* vs_base_dtype of the frozen base weights */
  bool double_quant;        /* nf4: absmaxes 8-bit with fp32 scales
                               (bitsandbytes compress_statistics), else
                               fp32 */
  uint64_t lora_rank;       /* r */
  double lora_alpha;        /* scaling alpha / r: no memory effect */
  uint32_t lora_targets;    /* bits 1 << vs_lora_target */
  double lora_dropout;      /* probability on each adapter's input */
  uint64_t trainable_layers; /* only the last this many layers train (with
                               adapters under lora/qlora, whole under
                               frozen); 0 = all */
  int adapter_dtype;        /* vs_adapter_dtype */
} vs_finetune_conf;

typedef struct vs_runtime_conf {
  int allocator;            /* vs_allocator_kind */
  bool expandable_segments; /* PyTorch expandable segments */
  uint64_t max_split_size_mb; /* blocks this large are never split; 0 = no limit */
  uint64_t roundup_power2_divisions; /* 0: round requests to 512 B */
  vs_margin reserve;        /* GPU memory fit and plan keep free */
} vs_runtime_conf;

typedef struct vs_workload {
  vs_model_conf model;
  vs_training_conf training;
  vs_parallel_conf parallel;
  vs_finetune_conf finetune;
  vs_runtime_conf runtime;
  /* resolved by vs_workload_load */
  uint64_t gpus;            /* tp * pp * dp */
  uint64_t grad_accum;      /* micro-batches per step per replica */
  vs_origins origins;       /* where every value came from */
} vs_workload;

/* GPUs a job may have at most (tp x cp x pp x dp, --gpus, --max-gpus):
 * the engine names a rank in 32 bits, and the largest jobs run on about
 * 1e5 GPUs. */
#define VS_MAX_GPUS 1000000u

/* Micro-batches per step vsim simulates at most: every one is built into
 * each stage's program (about 12 KB each), and real steps use thousands at
 * most (a 4M-token batch of 512-token sequences on one GPU is 8192). */
#define VS_MAX_MICROBATCHES 16384

/* Pipeline stages, and model chunks (stages x virtual stages), vsim
 * simulates at most: a layout keeps fixed arrays of them (layout.h). */
#define VS_MAX_STAGES 512
#define VS_MAX_CHUNKS 4096

/* The highest ZeRO stage ([parallel] zero = 0 to 3). */
#define VS_ZERO_MAX 3

/* What key section.name needs to mean anything, where wl does not have
 * it ("experts", "kv_lora_rank", "method = lora or qlora"): set from
 * input, the key is refused without it; NULL where it applies. */
const char *vs_workload_key_unused(const vs_workload *wl, const char *section,
                                   const char *name);

/* The key table of workload.ini (for --set and README). */
const vs_keytab *vs_workload_keys(void);

/* Parses path, applies the n_sets overrides "section.key=value", resolves
 * defaults (dp from gpus when gpus > 0) and validates the layout. gpus = 0
 * means "from the workload". VS_EIO / VS_EINPUT / VS_EUSAGE on error, with a
 * message naming file, line and key. */
int vs_workload_load(vs_workload *wl, const char *path,
                     const char *const *sets, size_t n_sets, uint64_t gpus,
                     vs_error *err);

/* The two halves of vs_workload_load, for callers that parse one file once
 * and resolve many copies of it with different overrides: defaults and the
 * file, nothing resolved; then the overrides and vs_workload_resolve. */
int vs_workload_load_base(vs_workload *wl, const char *path, vs_error *err);
int vs_workload_finish(vs_workload *wl, const char *const *sets,
                       size_t n_sets, uint64_t gpus, vs_error *err);

/* Applies one "section.key=value" override. */
int vs_workload_set(vs_workload *wl, const char *assignment, vs_error *err);

/* Resolves defaults and validates (called by vs_workload_load). */
int vs_workload_resolve(vs_workload *wl, uint64_t gpus, vs_error *err);

/* Layout rules (rules.c). Each rule is decided here and nowhere else:
 * validation (vs_workload_resolve) reports a broken rule with the key's
 * file and line, and `vsim plan` leaves out the layouts that break one
 * before simulating. All are O(1) and pure. */

/* ZeRO stage zero with pp pipeline stages under framework: ZeRO-2/3
 * partition gradients across micro-batches, which DeepSpeed's and
 * Megatron-LM's pipelines do not allow; FSDP2 is fully_shard (zero = 3
 * only) and runs under torchtitan's pipelines too. */
bool vs_workload_zero_allowed(uint64_t zero, uint64_t pp, int framework);
/* Whether framework runs pipeline schedule (vs_schedule_kind): DeepSpeed's
 * PipelineEngine has one training schedule, TrainSchedule, a 1F1B
 * (deepspeed/runtime/pipe/schedule.py); Megatron-LM's are 1F1B and the
 * interleaved one (megatron/core/pipeline_parallel/schedules.py:
 * forward_backward_pipelining_without_interleaving, _with_interleaving);
 * the others run every schedule vsim has (torchtitan GPipe too). */
bool vs_workload_schedule_allowed(int schedule, int framework);
/* Whether ZeRO stage zero under framework is DeepSpeed's stage 3
 * (runtime/zero/stage3.py): framework = deepspeed with zero = 3, whose
 * parameter coordinator ([parallel] max_live_parameters and
 * max_reuse_distance) gathers the parameters and whose step copies a
 * sub-group's gradients (vs_step_copy). */
bool vs_workload_deepspeed_zero3(int framework, uint64_t zero);

/* Whether precision is autocast (amp_bf16, amp_fp16). */
bool vs_precision_autocast(int precision);

/* Whether weights of `precision` can have an fp32 master copy: below
 * fp32 and not autocast (which keeps the weights in fp32 and casts them
 * per op). */
bool vs_precision_has_master(int precision);

/* Whether a fine-tune of `method` trains LoRA adapters over a frozen base
 * (lora, qlora). */
bool vs_finetune_adapters(int method);

/* Whether framework runs Megatron-LM's code: megatron, or none (vsim's
 * idealised Megatron-style job). */
bool vs_framework_megatron(int framework);

/* The precision precision's GEMMs run at: bf16 for amp_bf16, fp16 for
 * amp_fp16, the others themselves. */
int vs_precision_gemm(int precision);

/* The vs_dtype of precision's activations (the GEMMs' outputs): fp32,
 * fp16, else bf16 (fp8 runs inside a bf16 model). */
int vs_precision_act_dtype(int precision);

/* The vs_dtype of precision's weights on the GPU: fp32 under autocast
 * (over the fp32 model), else the activations'. */
int vs_precision_param_dtype(int precision);

/* Which library runs precision = fp8's GEMMs: torchao's Float8Linear
 * under framework = fsdp2 (torchtitan's float8 converter, dynamic
 * scaling of [training] fp8_recipe: torchao/float8/float8_linear.py),
 * Transformer Engine under every other framework (Megatron-LM's, vsim's
 * default); none at other precisions. */
typedef enum { VS_FP8_NONE, VS_FP8_TE, VS_FP8_TORCHAO } vs_fp8_lib;
vs_fp8_lib vs_workload_fp8_lib(int precision, int framework);

/* Whether torchtitan's float8 tensor-parallel plan casts the linears'
 * inputs (torchao's tensorwise float8 over tp > 1 ranks:
 * Float8ColwiseParallel, Float8RowwiseParallel and
 * PrepareFloat8ModuleInput cast a module's input to FP8 before it,
 * float8_tensor_parallel.py), so the linears save the FP8 input they got
 * and cast none of their own. The row-wise recipes run plain 16-bit
 * tensor parallelism (torchtitan's parallelize applied the float8 plan to
 * tensorwise alone; since 1786292db, April 2026, it has none). */
bool vs_workload_fp8_tp_plan(const vs_training_conf *t, uint64_t tp);

/* Whether a job of precision under framework runs data parallelism alone
 * (vs_workload_dp_only_misfit says what that allows): autocast (precision
 * amp_*) or the Hugging Face Trainer (framework = hf). */
bool vs_workload_dp_only(int precision, int framework);

/* Autocast (precision amp_*) and the Hugging Face Trainer (framework =
 * hf) under a layout: they run data parallelism alone (DDP; under
 * autocast also optimizer states and gradients sharded, zero <= 2, while
 * ZeRO-3's and FSDP's parameter sharding casts per module instead, as
 * framework = fsdp2 models; the Trainer hands ZeRO to DeepSpeed, framework
 * = deepspeed), without offload. NULL when allowed or when neither
 * applies; else the key to blame ("tp", "pp", "zero" or
 * "offload_optimizer"). */
const char *vs_workload_dp_only_misfit(int precision, int framework,
                                       uint64_t tp, uint64_t pp,
                                       uint64_t zero, bool offload);

/* Offload with ZeRO stage zero under training t (its optimizer,
 * framework and master weights): NULL when allowed; otherwise why not,
 * with *key the key to blame ("offload_optimizer" or "offload_params"). */
const char *vs_workload_offload_misfit(uint64_t zero, int offload_optimizer,
                                       int offload_params,
                                       const vs_training_conf *t,
                                       const char **key);

/* Whether layer l (0-based) of model m is a mixture of experts: m has
 * experts, l is past dense_layers, and (l - dense_layers) is a multiple
 * of moe_every (Megatron-LM's moe_layer_freq counted after DeepSeek's
 * first_k_dense_replace). */
bool vs_workload_moe_layer(const vs_model_conf *m, uint64_t l);

/* How the experts' tensor parallelism relates to tp. */
typedef enum vs_etp_split {
  VS_ETP_AS_TP, /* etp = tp: each expert split as the dense layers are */
  VS_ETP_APART  /* another etp: expert groups of their own */
} vs_etp_split;

/* Whether framework (vs_framework) runs expert parallelism with its
 * experts split as `etp` says: vsim simulates it as Megatron-LM runs it,
 * so not under fsdp2 or hf, and VS_ETP_APART only under megatron or
 * none. */
bool vs_workload_framework_runs_ep(int framework, vs_etp_split etp);

/* Expert parallelism of size ep and expert tensor parallelism of size
 * etp beside tp tensor- and dp data- and context-parallel ranks (dp x
 * cp), ZeRO stage zero and framework (vs_framework): NULL when allowed
 * (ep = 1 with etp = tp always is), else the key to blame: "experts" (ep
 * must divide them), "dp" (Megatron-LM's rule: the expert grid, etp x ep
 * x expert-data-parallel ranks, is made of a stage's tp x dp x cp ranks,
 * so etp x ep must divide them; at etp = tp, ep must divide dp x cp),
 * "framework" (vs_workload_framework_runs_ep) or "zero" (zero above
 * vs_workload_ep_zero_max). */
/* The highest ZeRO stage framework (vs_framework) runs with experts in
 * groups of their own (vs_workload_experts_apart), their states (and from
 * ZeRO-2 their gradients) partitioned over the expert-data-parallel group:
 * 2 under deepspeed (its ZeRO-1/2 optimizer's MoE param groups; its engine
 * refuses ZeRO-3 with MoE layers), else 1 (Megatron-LM's distributed
 * optimizer). */
uint64_t vs_workload_ep_zero_max(int framework);

const char *vs_workload_ep_misfit(const vs_model_conf *m, uint64_t ep,
                                  uint64_t etp, uint64_t tp, uint64_t dp,
                                  uint64_t zero, int framework);

/* The expert tensor-parallel size of p: its etp, or tp when unset
 * (Megatron-LM's default). */
uint64_t vs_workload_etp(const vs_parallel_conf *p);

/* The expert-data-parallel size of p: the ranks of a stage holding the
 * same expert shards, tp x dp x cp / (etp x ep) (Megatron-LM's
 * expert_data_parallel_size; dp x cp / ep at etp = tp). */
uint64_t vs_workload_expert_dp(const vs_parallel_conf *p);

/* Whether m's routing_skew changes what its ranks' experts receive with
 * ep expert-parallel ranks: a skewed dropless router (no capacity
 * factor) over more than one expert, spread over ep > 1 ranks (at ep = 1
 * every rank holds every expert: kT slots whatever the routing). */
bool vs_workload_skew_applies(const vs_model_conf *m, uint64_t ep);

/* Whether p's routed experts use groups of their own (ep > 1, or etp
 * other than tp): their gradients then reduce, and their states shard,
 * over the expert-data-parallel group instead of dp. */
bool vs_workload_experts_apart(const vs_parallel_conf *p);

/* Whether the routed experts may have groups of their own
 * (vs_workload_experts_apart) in a job that `offloads` its optimizer, its
 * parameters or its activations: no. Offload is simulated with the
 * experts' states sharded and their gradients reduced as the dense
 * weights' are, over dp x cp (ep = 1, etp = tp); the one home of that
 * rule, which validation refuses and plan prunes with. */
bool vs_workload_experts_apart_allowed(bool offloads);

/* Whether a rank's gradients are reduced with other ranks' (and ZeRO's
 * states can shard): dp x cp > 1, or routed experts apart whose
 * expert-data-parallel group has more than one rank (tp 2 at etp 1). */
bool vs_workload_grads_shared(const vs_parallel_conf *p);

/* Whether the optimizer steps on the CPU, its states off the GPU. */
bool vs_workload_cpu_step(const vs_parallel_conf *p);

/* Whether the step's gradients leave the rank in buckets: reduced with
 * other ranks' (vs_workload_grads_shared), or streamed to the host for an
 * offloaded optimizer's step (vs_workload_cpu_step). */
bool vs_workload_grads_bucketed(const vs_parallel_conf *p);

/* Where DeepSpeed makes its contiguous-gradient buffers. */
typedef enum vs_ipg_made {
  VS_IPG_IN_BACKWARD, /* in the step's first backward */
  VS_IPG_AT_BOUNDARY  /* when the step's backward passes are done */
} vs_ipg_made;

/* DeepSpeed ZeRO-1/2's contiguous-gradient buffers of reduce_bucket_size
 * elements ([parallel] bucket) a stage holds (stage_1_and_2.py, with
 * contiguous_gradients, on by default; ZeRO-2 copies each gradient into
 * them as backward makes it), on pipeline stage `stage` (0 .. pp - 1;
 * a later one counts as the last): made in the
 * optimizer's backward, from the step's first (*made VS_IPG_IN_BACKWARD:
 * no pipeline, or the pipeline engine's last stage, whose
 * _exec_backward_pass calls it), one and a second with overlap_comm
 * ([parallel] overlap_grad_reduce); on the pipeline's other stages one,
 * made in reduce_gradients at the boundary (VS_IPG_AT_BOUNDARY).
 * 0 for every other job. This is the code of early 2025: since PR #7018
 * (March 2025) the gradient hooks make the buffers on every stage
 * (setup_buckets), and the pipeline engine adds one at the boundary: not
 * modelled. */
unsigned vs_workload_ipg_buffers(const vs_workload *wl, uint64_t stage,
                                 vs_ipg_made *made);

/* Whether [parallel] bucket and overlap_grad_reduce change anything: the
 * gradients are bucketed, or DeepSpeed ZeRO-1 sizes its buffers by them. */
bool vs_workload_bucket_matters(const vs_workload *wl);

/* The data-parallel ranks that ZeRO shards model states over and that
 * reduce each gradient together: dp x cp (context-parallel ranks hold
 * the same weights and split each sequence). */
uint64_t vs_workload_shard_ranks(const vs_parallel_conf *p);

/* Which optimizer wrapper DeepSpeed's engine runs under framework =
 * deepspeed, as engine.py _do_optimizer_sanity_check and
 * _configure_optimizer pick it (DeepSpeed edaa7221, August 2026;
 * frameworks.md 2.1-2.2), by precision, ZeRO stage and where the
 * optimizer steps. The one home of that choice: every reader asks
 * vs_workload_deepspeed_optimizer. */
typedef enum vs_ds_optimizer {
  VS_DS_OPT_NONE,  /* framework is not deepspeed */
  VS_DS_OPT_TORCH, /* ZeRO off in neither fp16 nor bf16 (fp32; fp8 is
                      left here too): the torch optimizer as it is, no
                      16-bit wrapper */
  VS_DS_OPT_FP16,  /* FP16_Optimizer (fp16/fused_optimizer.py): ZeRO off
                      with fp16, and with bf16 outside its pipeline engine
                      (DDP_BFLOAT16, its bf16 mode, since #7515):
                      replicated fp32 master and states, flat fp32
                      gradients at the step */
  VS_DS_OPT_BF16,  /* BF16_Optimizer (bf16_optimizer.py): bf16 at ZeRO-1
                      with fp32 gradient accumulation (grad_dtype = fp32)
                      and the optimizer on the GPU, and bf16 without ZeRO
                      under its pipeline engine, where it accumulates in
                      bf16 (the default grad_accum_dtype, the model's
                      since #7515, August 2025). It keeps an unsharded
                      gradient buffer in grad_dtype (frameworks.md 2.1,
                      which describes the rule before #7515: bf16 without
                      ZeRO); the recipe shards its masters and states when
                      vs_workload_shard_ranks > 1 */
  VS_DS_OPT_ZERO,  /* ZeRO-1/2's DeepSpeedZeroOptimizer
                      (stage_1_and_2.py) */
  VS_DS_OPT_ZERO3  /* ZeRO-3's DeepSpeedZeroOptimizer_Stage3 (stage3.py) */
} vs_ds_optimizer;

/* The optimizer wrapper DeepSpeed runs for training t under layout p
 * (VS_DS_OPT_NONE outside framework = deepspeed). */
vs_ds_optimizer vs_workload_deepspeed_optimizer(const vs_training_conf *t,
                                                const vs_parallel_conf *p);

/* Whether DeepSpeed's engine all-reduces the gradients itself (engine.py
 * allreduce_gradients: buffered_allreduce_fallback) rather than a ZeRO
 * optimizer reducing them: ZeRO off, or its BF16_Optimizer (any wrapper
 * but VS_DS_OPT_ZERO and VS_DS_OPT_ZERO3). */
bool vs_workload_deepspeed_engine_allreduce(const vs_training_conf *t,
                                            const vs_parallel_conf *p);

/* Whether DeepSpeed's engine casts every floating-point parameter to the
 * model's 16-bit dtype under framework = deepspeed (engine.py
 * _configure_distributed_model, _cast_module_mixed_precision at edaa7221;
 * module.half() or bfloat16() before #8066, June 2026): in fp16 or bf16,
 * below ZeRO-3. At ZeRO-3 the model is taken as built under zero.Init, as
 * the Hugging Face Trainer and accelerate load it, whose parameters the
 * engine leaves as they are (is_zero_init_model): adapters stay in
 * adapter_dtype, PEFT's fp32 by default. */
bool vs_workload_deepspeed_casts(const vs_training_conf *t,
                                 const vs_parallel_conf *p);

/* The 16-bit dtype DeepSpeed casts to where it casts
 * (vs_workload_deepspeed_casts): precision's, as a vs_adapter_dtype and
 * as a vs_base_dtype. */
int vs_workload_deepspeed_adapter_dtype(const vs_training_conf *t);
int vs_workload_deepspeed_base_dtype(const vs_training_conf *t);

/* DeepSpeed's engine all-reduces in buckets of MEMORY_OPT_ALLREDUCE_SIZE
 * = 5e8 elements (engine.py at edaa7221: allreduce_gradients' default
 * bucket_size, which its _backward_epilogue and the pipeline engine's
 * _exec_reduce_grads and _bf16_reduce_grads use), whatever
 * reduce_bucket_size says; reduce_bucket_size's default is 5e8 too. */
#define VS_DEEPSPEED_BUCKET_ELEMS 500000000ULL

/* Whether DeepSpeed's gradient_clipping decides what its step moves: in
 * fp32 with ZeRO off (VS_DS_OPT_TORCH, no wrapper), where the engine
 * clips only when asked; every wrapper takes the norm and multiplies
 * anyway. */
bool vs_deepspeed_clip_matters(const vs_training_conf *t,
                               const vs_parallel_conf *p);

/* When the optimizer steps: after the backward pass, or in it, each
 * block as its gradients appear ([training] optimizer_in_backward). */
typedef enum vs_optimizer_at {
  VS_OPTIMIZER_AFTER_BACKWARD,
  VS_OPTIMIZER_IN_BACKWARD
} vs_optimizer_at;

/* When t's optimizer steps. */
vs_optimizer_at vs_workload_optimizer_at(const vs_training_conf *t);

/* Whether gradients wait for the step, so that they can be reduced once
 * the backward pass is done (overlap_grad_reduce = false): not under
 * ZeRO-2/3, which reduce-scatter each micro-batch's as backward makes
 * them, nor with the optimizer in backward, which steps each block as its
 * gradients appear. */
bool vs_workload_grads_wait_for_step(uint64_t zero, vs_optimizer_at step);

/* Whether overlap_grad_reduce = false means something: gradients that wait
 * for the step are reduced once the backward pass is done; ZeRO-2's,
 * freed once reduced, are reduced on the compute stream as each bucket
 * fills (DeepSpeed without overlap_comm). ZeRO-3 reduce-scatters on a
 * stream of its own whatever overlap_comm says (DeepSpeed stage3.py's
 * reduce_and_partition_stream, FSDP2's), and the optimizer in backward
 * steps each block as its gradients appear. */
bool vs_workload_reduce_can_wait(uint64_t zero, vs_optimizer_at step);

/* Whether model m's layers can run on tp ranks with sequence parallelism
 * sp under framework (vs_framework): mixture-of-experts layers and
 * latent attention with tp > 1 as Megatron-LM splits them (framework none
 * or megatron; torchtitan and DeepSpeed split them otherwise), the
 * experts only under sequence parallelism (Megatron-LM's expert tensor parallelism at the default
 * expert_tensor_parallel_size = tp: each expert's FFN split over tp, its
 * tokens gathered over tp by the dispatcher). */
bool vs_workload_moe_tp_allowed(const vs_model_conf *m, uint64_t tp, bool sp,
                                int framework);

/* The framework's part of vs_workload_moe_tp_allowed, whatever sequence
 * parallelism says: m's layers split over tp ranks as Megatron-LM splits
 * them, or no such layer to split. */
bool vs_workload_moe_tp_split_allowed(const vs_model_conf *m, uint64_t tp,
                                      int framework);

/* Whether experts with groups of their own (`apart`:
 * vs_workload_experts_apart) run with rank order `order` (vs_order) and
 * pp stages: Megatron-LM asserts that its expert groups keep the pipeline
 * outermost (order tp-dp-pp) unless pp = 1. */
bool vs_workload_ep_order_allowed(bool apart, int order, uint64_t pp);

/* Tensor parallelism splits heads, kv_heads and ffn_hidden over tp
 * ranks, the routed experts' expert_ffn_hidden over etp (expert tensor
 * parallelism) and the shared experts' shared_expert_ffn_hidden over tp.
 * Returns the name of the first of them (in that order) that tp (or etp)
 * does not divide, with its value in *size when size is not NULL, or NULL
 * (*size untouched) when they divide them all. tp and etp must be > 0. */
const char *vs_workload_tp_misfit(const vs_model_conf *m, uint64_t tp,
                                  uint64_t etp, uint64_t *size);

/* Whether fine-tune f can run on tp ranks: adapters (method = lora or
 * qlora) and bitsandbytes' base formats (int8, nf4) only without tensor
 * parallelism (PEFT's and bitsandbytes' layers are not tensor-parallel);
 * otherwise any tp. */
bool vs_workload_finetune_tp_allowed(const vs_finetune_conf *f, uint64_t tp);

/* Whether training t can step each gradient in backward
 * (optimizer_in_backward, torchtune's optimizer_in_bwd: its single-device
 * recipe) with grad_accum micro-batches a step, dp x cp data- and
 * context-parallel ranks, pp stages and offload_optimizer: one
 * micro-batch, one rank, the optimizer on the GPU; true when t does not. */
bool vs_workload_step_in_backward_allowed(const vs_training_conf *t,
                                          uint64_t grad_accum, uint64_t dp_cp,
                                          uint64_t pp, int offload_optimizer);

/* Megatron-LM's precision-aware optimizer under training t with ZeRO
 * stage zero, offload_optimizer and fine-tune `method` (megatron/core/
 * optimizer/optimizer_config.py and __init__.py asserts): state dtypes
 * other than fp32 need it; it needs framework megatron or none, Adam(W),
 * a master copy of 16-bit weights, the distributed optimizer (zero = 1)
 * and, as vsim simulates it, the optimizer on the GPU and the whole model
 * trained. NULL when allowed; else why not, with *key the key to
 * blame. */
const char *vs_workload_precision_aware_misfit(const vs_training_conf *t,
                                               uint64_t zero,
                                               int offload_optimizer,
                                               int method, const char **key);

/* Whether wl's RMSNorms run as the Python of their modules, eagerly:
 * Hugging Face's LlamaRMSNorm and torchtitan's RMSNorm (framework hf or
 * fsdp2, kernels = eager; compiled, a norm saves what a fused one does),
 * which keep more for backward than a fused kernel (model/block.c). */
bool vs_workload_python_rmsnorm(const vs_workload *wl);

/* Megatron-LM's FP8 primary weights (--fp8-param-gather) under training
 * t with ZeRO stage zero, offload_optimizer and fine-tune `method`: they
 * need FP8 GEMMs by Transformer Engine (precision = fp8 under framework
 * megatron or none), the distributed optimizer (zero = 1: Megatron-LM's
 * arguments.py) with its fp32 main parameters (master_weights), trained
 * weights and, as vsim simulates them, neither offload nor the
 * precision-aware optimizer. NULL when allowed; else why
 * not, with *key the key to blame. */
const char *vs_workload_fp8_params_misfit(const vs_training_conf *t,
                                          uint64_t zero, int offload_optimizer,
                                          int method, const char **key);

/* Megatron-LM's optimizer rules: its ZeRO (framework megatron shards
 * with the distributed optimizer, zero <= 1: Megatron FSDP, which shards
 * gradients and parameters, is not simulated), then both rules above,
 * the precision-aware optimizer's and the FP8 weights'. */
const char *vs_workload_megatron_optimizer_misfit(const vs_training_conf *t,
                                                  uint64_t zero,
                                                  int offload_optimizer,
                                                  int method, const char **key);

/* Whether training t's activation offload runs with checkpointing
 * policy `checkpointing`: DeepSpeed offloads activations as its
 * activation checkpointing's cpu_checkpointing, which moves the
 * checkpointed layers' inputs alone (runtime/activation_checkpointing/
 * checkpointing.py); vsim simulates it with full checkpointing. True
 * without activation offload or DeepSpeed. */
bool vs_workload_activation_offload_allowed(const vs_training_conf *t,
                                            int checkpointing);

/* Whether training t's paged optimizer (bitsandbytes', each tensor's
 * states in managed memory) runs with ZeRO stage zero and
 * offload_optimizer: only zero = 0 on the GPU; true without one. */
bool vs_workload_paged_allowed(const vs_training_conf *t, uint64_t zero,
                               int offload_optimizer);

/* Whether training t's loss can run on tp ranks: Liger Kernel's fused
 * cross-entropy (fused_cross_entropy) works on whole logits rows, so only
 * with tp = 1 (Megatron's vocab-parallel loss is the in-place one). */
bool vs_workload_fused_loss_tp_allowed(const vs_training_conf *t, uint64_t tp);

/* Model chunk g's layer count and first layer (of n = pp x
 * virtual_stages chunks; stage s holds chunks s, s + pp, ...): as listed
 * in [parallel] pp_layers, or evenly with the first chunks taking one
 * more when the division is not exact. O(1), or O(g) with pp_layers. */
uint64_t vs_workload_chunk_size(const vs_workload *wl, uint64_t n, uint64_t g);
uint64_t vs_workload_chunk_first(const vs_workload *wl, uint64_t n, uint64_t g);

/* Which layers full checkpointing recomputes, into ckpt[layers]: every
 * layer, the first [training] checkpoint_layers of each model chunk
 * (Megatron-LM's block method), or those whose 1-based index among their
 * stage's layers is a multiple of checkpoint_every (torchtitan counts the
 * blocks of each process's model parts). O(layers + chunks), or
 * O(layers + chunks^2) with pp_layers. */
void vs_workload_checkpointed_layers(const vs_workload *wl, bool *ckpt);

/* Whether sequence parallelism can split seq_len tokens over tp ranks
 * (Megatron-LM scatters the sequence dimension in whole tokens). */
bool vs_workload_sp_allowed(uint64_t seq_len, uint64_t tp);

/* Whether sequence parallelism is in effect: set, and tp > 1 (with one
 * tensor-parallel rank there is nothing to split; Megatron-LM turns it
 * off then, megatron/training/arguments.py, "Disabling sequence
 * parallelism because tensor model parallelism is disabled"). */
bool vs_workload_sp(const vs_parallel_conf *p);

/* Whether gpus GPUs split into whole tp x pp groups (dp = gpus / (tp*pp);
 * with context parallelism pass tp x cp as tp). tp and pp must be > 0. */
bool vs_workload_gpus_allowed(uint64_t gpus, uint64_t tp, uint64_t pp);

/* Whether global_batch sequences split into whole steps of micro_batch *
 * dp (each replica runs whole micro-batches); false when that product does
 * not fit 64 bits or is 0. */
bool vs_workload_batch_allowed(uint64_t global_batch, uint64_t micro_batch,
                               uint64_t dp);

/* Whether the interleaved schedule can run pp stages of virtual_stages
 * model chunks each: pp >= 2 and virtual_stages >= 2. */
bool vs_workload_interleave_shape_allowed(uint64_t pp, uint64_t virtual_stages);

/* Whether the interleaved schedule can run grad_accum micro-batches per
 * step on pp stages: a multiple of pp, as Megatron-LM requires. */
bool vs_workload_interleave_batch_allowed(uint64_t grad_accum, uint64_t pp);

/* What seq_len must be a multiple of with context parallelism of size cp
 * and tensor parallelism tp, sequence-parallel (sp) or not: 2 cp chunks
 * (causal load balancing) with cp > 1, each split by tp under sp. */
uint64_t vs_workload_seq_multiple(uint64_t cp, uint64_t tp, bool sp);

/* Context parallelism of size cp for model m with tp and sequence
 * parallelism sp: NULL when allowed (cp = 1 always is), else why not. The
 * sequence splits into 2 cp chunks for causal load balancing (and by tp
 * more with sp: vs_workload_cp_seq_misfit); a2a moves whole heads to each
 * rank. */
const char *vs_workload_cp_misfit(const vs_model_conf *m, uint64_t cp,
                                  int cp_comm, uint64_t tp, bool sp);

/* The part of vs_workload_cp_misfit that is about seq_len: NULL when it
 * splits, else what it must be a multiple of (a phrase that follows
 * "seq_len"). */
const char *vs_workload_cp_seq_misfit(uint64_t seq_len, uint64_t cp,
                                      uint64_t tp, bool sp);

/* What stops context parallelism (cp > 1) under the job's other
 * settings, as this version simulates it (Megatron-LM's, and torchtitan's
 * under FSDP2): flash attention only, the cp ranks beside the tp ones (order = tp-dp-pp), and not under autocast or
 * the Hugging Face Trainer, which run data parallelism alone. */
typedef enum {
  VS_CP_FITS,
  VS_CP_MISFIT_ATTENTION, /* attention is not flash */
  VS_CP_MISFIT_ORDER,     /* order is not tp-dp-pp */
  VS_CP_MISFIT_DP_ONLY    /* autocast or framework = hf */
} vs_cp_misfit;

vs_cp_misfit vs_workload_cp_settings_misfit(const vs_training_conf *t,
                                            int order);

/* The cp_comm a framework's context parallelism runs with: DeepSpeed's
 * sequence parallelism is DeepSpeed-Ulysses (deepspeed/sequence/layer.py
 * DistributedAttention: an all-to-all swaps sequence chunks for heads
 * before attention and back after it), so a2a; with the others (Megatron-
 * LM through Transformer Engine, torchtitan) the workload's own `own`. */
int vs_workload_framework_cp_comm(int framework, int own);

/* Names of enum values, for reports. */
const char *vs_arch_name(int arch);
const char *vs_precision_name(int precision);
const char *vs_optimizer_name(int optimizer);
const char *vs_optimizer_impl_name(int impl);
const char *vs_checkpointing_name(int checkpointing);
const char *vs_framework_name(int framework);
const char *vs_attention_name(int attention);
const char *vs_kernels_name(int kernels);
const char *vs_fp8_recipe_name(int recipe);
const char *vs_cp_comm_name(int cp_comm);
const char *vs_p2p_name(int p2p);
const char *vs_offload_name(int offload);
const char *vs_allocator_name(int allocator);
const char *vs_schedule_name(int schedule);
const char *vs_order_name(int order);
const char *vs_finetune_name(int method);
const char *vs_base_dtype_name(int base_dtype);
const char *vs_lora_target_name(int target);
const char *vs_adapter_dtype_name(int adapter_dtype);

/* The file [model] hf_config names, as vsim reads it (beside the workload
 * file unless absolute), into buf of len; "" when the workload names none.
 * Outputs must never be written onto it. */
void vs_workload_hf_config_path(const vs_workload *wl, char *buf, size_t len);

#endif
