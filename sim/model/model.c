/* model.c - expands gpt / llama / bert into blocks of ops (see model.h):
 * the shapes of a rank's work (vs_dims), the kinds of block and which
 * layer is which, parameter counts and the model's queries. The blocks
 * themselves are built in layer.c from block.c's building blocks. */
#include "model.h"
#include "model_int.h"

#include "grow.h"
#include "units.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Whole model
 * ------------------------------------------------------------------------ */

/* The norm output a group of linears reads. */
typedef enum { CASTS_FOR_ATTENTION, CASTS_FOR_MLP } cast_readers;

/* How many nn.Linear modules read the norm output before the attention
 * or the MLP: Hugging Face's BERT and Llama (framework = hf, and the
 * modules autocast runs over) and torchtitan's Llama (fsdp2: wq, wk, wv;
 * w1, w3) have separate query, key and value (and Llama gate and up)
 * linears; GPT-2's c_attn, Megatron-LM's fused linear_qkv and every
 * arch's single up projection are one. Each module casts its input:
 * under autocast to 16 bits, saving its own copy (frameworks.md
 * 1.2-1.3), under torchao's fp8 to FP8. */
static uint64_t modules_of(const vs_workload *wl, cast_readers readers)
{
  int arch = wl->model.arch;
  int fw = wl->training.framework;
  if (!vs_precision_autocast(wl->training.precision) && fw != VS_FW_HF &&
      fw != VS_FW_FSDP2)
    return 1;
  if (readers == CASTS_FOR_ATTENTION)
    return arch == VS_ARCH_GPT ? 1 : 3;
  return arch == VS_ARCH_LLAMA ? 2 : 1;
}

/* Parameters of an FFN of width f: gated (Llama: gate, up, down) or
 * GeLU (up, down), each linear with a bias when mlp_bias. */
static uint64_t ffn_params(const vs_model_conf *m, uint64_t f)
{
  uint64_t h = m->hidden, ins = m->arch == VS_ARCH_LLAMA ? 2 : 1;
  return (ins + 1) * h * f + (m->mlp_bias ? ins * f + h : 0);
}

/* Which parameters a count takes: all, or those one token uses (of the
 * routed experts, the k it is sent to). */
typedef enum { PARAMS_ALL, PARAMS_ACTIVE } param_count;

/* Parameters of one layer's MLP: dense, or MoE (the router, the routed
 * experts: all of them, or the k a token uses, and the shared ones). */
static uint64_t mlp_params(const vs_model_conf *m, bool moe,
                           param_count count)
{
  if (!moe)
    return ffn_params(m, m->ffn_hidden);
  return m->hidden * m->experts +
         (count == PARAMS_ACTIVE ? m->experts_per_token : m->experts) *
             ffn_params(m, m->expert_ffn_hidden) +
         (m->shared_experts
              ? ffn_params(m, m->shared_experts * m->shared_expert_ffn_hidden)
              : 0) +
         (m->shared_expert_gate ? m->hidden : 0);
}

/* Parameters of a multi-head latent attention block (attention_mla): the
 * query's down and up projections and latent norm (or one projection),
 * the key-value down projection (with the shared rotary key part), its
 * latent norm and up projection, the output projection. */
static uint64_t mla_params(const vs_model_conf *m)
{
  uint64_t h = m->hidden, a = m->heads, dqk = m->qk_head_dim +
                                              m->qk_rope_head_dim;
  uint64_t q = m->q_lora_rank ? h * m->q_lora_rank + m->q_lora_rank +
                                    m->q_lora_rank * a * dqk
                              : h * a * dqk;
  return q + h * (m->kv_lora_rank + m->qk_rope_head_dim) + m->kv_lora_rank +
         m->kv_lora_rank * a * (m->qk_head_dim + m->v_head_dim) +
         a * m->v_head_dim * h;
}

/* Parameters of one norm over `width` features: a scale, and a bias but
 * in llama's RMSNorm. */
static uint64_t norm_width_params(const vs_model_conf *m, uint64_t width)
{
  return m->arch == VS_ARCH_LLAMA ? width : 2 * width;
}

/* Parameters of one norm over the hidden features. */
static uint64_t norm_params(const vs_model_conf *m)
{
  return norm_width_params(m, m->hidden);
}

/* Parameters of a standard attention block: the query, key, value and
 * output projections, their biases, and the query and key head norms. */
static uint64_t attention_params(const vs_model_conf *m)
{
  uint64_t h = m->hidden, ad = m->heads * m->head_dim;
  uint64_t qkv = ad + 2 * m->kv_heads * m->head_dim;
  return h * qkv + ad * h + (m->attention_bias != VS_BIAS_NONE ? qkv : 0) +
         (m->attention_bias == VS_BIAS_ALL ? h : 0) +
         (m->qk_norm ? 2 * norm_width_params(m, m->head_dim) : 0);
}

/* Parameters of layer l (0-based), all or those one token uses. */
static uint64_t layer_params(const vs_model_conf *m, uint64_t l,
                             param_count count)
{
  uint64_t attn = m->kv_lora_rank ? mla_params(m) : attention_params(m);
  return attn + (m->post_norms ? 4 : 2) * norm_params(m) +
         mlp_params(m, vs_workload_moe_layer(m, l), count);
}

/* The embedding's parameters: the token table, the learned positions
 * (GPT's and BERT's), BERT's token types and LayerNorm. *lookups gets those a
 * token only looks up, never multiplies: all the tables but the token table
 * when the output layer shares it. Vendors differ on whether a token's
 * active parameters count them: DeepSeek's do not (DeepSeek-V3's
 * README_WEIGHTS.md: "36.6B (including 0.9B for the output Head)"),
 * Mistral's and Qwen's do (Mixtral's 12.9 B, Qwen1.5-MoE's 2.7 B). */
static uint64_t embedding_params(const vs_model_conf *m, uint64_t *lookups)
{
  uint64_t h = m->hidden, tokens = m->vocab * h;
  uint64_t positions =
      m->positions == VS_POS_LEARNED ? m->max_positions * h : 0;
  uint64_t types = m->type_vocab * h;
  uint64_t norm = m->arch == VS_ARCH_BERT ? 2 * h : 0;
  *lookups = (m->tied_embeddings ? 0 : tokens) + positions + types;
  return tokens + positions + types + norm;
}

/* Parameters of the whole model (all, or those one token uses): what
 * one tp=1 build counts, with the real (unpadded) vocabulary. The
 * multi-token prediction module is apart (mtp_params). */
static uint64_t whole_model_params(const vs_workload *wl, param_count count)
{
  const vs_model_conf *m = &wl->model;
  uint64_t h = m->hidden, lookups;
  uint64_t embed = embedding_params(m, &lookups), head, total = 0;

  if (m->arch == VS_ARCH_LLAMA) {
    head = h;
  } else {
    head = 2 * h;
    if (m->arch == VS_ARCH_BERT)
      head += h * h + h + m->vocab;
  }
  if (!m->tied_embeddings)
    head += m->vocab * h;
  for (uint64_t l = 0; l < m->layers; l++)
    total += layer_params(m, l, count);
  return total + embed + head;
}

/* Parameters of the multi-token prediction depths, which share the
 * model's embedding and output layer: each a layer like the last one,
 * eh_proj (2h x h, no bias) and three norms (enorm, hnorm and the final
 * one; DeepSeek-V3's released MTP weights, model.layers.61). */
static uint64_t mtp_params(const vs_workload *wl)
{
  const vs_model_conf *m = &wl->model;
  return m->mtp_layers * (layer_params(m, m->layers - 1, PARAMS_ALL) +
                          2 * m->hidden * m->hidden + 3 * norm_params(m));
}

/* A block the builder refused (more than VS_BLOCK_ITEMS_MAX ops, weights
 * or saved tensors: block.c's room, "... in one block" in err): the
 * message again, with the file and the keys that grow a block. Any other
 * refusal (a builder bug, the host's memory) passes on as it is. */
static int too_many_items(const vs_workload *wl, vs_error *err)
{
  char why[sizeof err->msg];
  if (!strstr(err->msg, " in one block"))
    return VS_EINPUT;
  snprintf(why, sizeof why, "%s", err->msg);
  vs_error_clear(err); /* the first error wins: this one replaces it */
  return vs_error_set(
      err, VS_EINPUT,
      "%s: %s ([model] experts = %llu, mtp_layers = %llu: a block is a "
      "layer, or the output layer with its multi-token prediction depths, "
      "and each routed expert brings its own weights, fc1 and fc2 with "
      "their biases); lower experts or mtp_layers",
      wl->origins.file, why, (unsigned long long)wl->model.experts,
      (unsigned long long)wl->model.mtp_layers);
}

/* The largest total vsim's byte counts (64-bit integers, signed where the
 * allocator adds a change) are let reach: far above any GPU's memory. */
#define SIZE_LIMIT 1e18

/* The micro-batches a stage may keep at once, at most: GPipe the step's
 * all; 1F1B and the interleaved schedule fewer than pp x virtual stages
 * in flight on the first stage, counted twice for a margin; at least
 * one. */
static double kept_microbatches(const vs_workload *wl)
{
  double step = wl->grad_accum ? (double)wl->grad_accum : 1.0;
  double flight =
      2.0 * (double)wl->parallel.pp *
      (double)(wl->parallel.virtual_stages ? wl->parallel.virtual_stages : 1);
  if (wl->parallel.schedule == VS_SCHED_GPIPE || flight > step)
    return step;
  return flight;
}

/* The byte counts below are 64-bit integers; refuses shapes whose largest
 * tensors or totals (estimated in floating point first) would not fit:
 * the fp32 logits, the model states, and the activations of every layer
 * (the multi-token prediction depths among them) for as many micro-batches
 * as a stage may keep at once (kept_microbatches). */
static int check_size(const vs_workload *wl, vs_error *err)
{
  const vs_model_conf *mc = &wl->model;
  double s = (double)mc->seq_len, b = (double)wl->training.micro_batch;
  double h = (double)mc->hidden, f = (double)mc->ffn_hidden;
  double a = (double)mc->heads;
  double l = (double)mc->layers + (double)mc->mtp_layers;
  double kept = kept_microbatches(wl);
  /* the vocabulary padded as make_dims pads it */
  double pad = (double)mc->vocab_divisible_by * (double)wl->parallel.tp;
  double v = ceil((double)mc->vocab / pad) * pad;
  double biggest = 4.0 * s * b * v;                        /* fp32 logits */
  /* eager attention keeps s x s scores per head; flash keeps none */
  double scores = wl->training.attention == VS_ATTN_EAGER ? 5.0 * a * s : 0.0;
  /* the heads' width: hidden, or heads x head_dim */
  double ad = a * (double)mc->head_dim > h ? a * (double)mc->head_dim : h;
  double layer = 4.0 * s * b * (36.0 * h + 4.0 * ad + 8.0 * f + scores);
  double params =
      20.0 * (l * (2.0 * h * h + 2.0 * h * ad + 3.0 * h * f) + 2.0 * v * h);
  /* a mixture of experts: every expert's weights; the slots (k a token,
   * or E x capacity, at most E a token) carry its tensors, the shared
   * experts' MLP of width fs every token; latent attention's projections
   * and heads */
  double e = (double)mc->experts, fe = (double)mc->expert_ffn_hidden;
  double fs = (double)mc->shared_experts * (double)mc->shared_expert_ffn_hidden;
  double hd = (double)(mc->qk_head_dim + mc->qk_rope_head_dim + mc->v_head_dim);
  layer += 4.0 * s * b * (e * (4.0 * h + 8.0 * fe) + 8.0 * fs + 3.0 * a * hd);
  params += 20.0 * l *
            (e * 3.0 * h * fe +
             3.0 * h * fs +
             a * hd * ((double)mc->q_lora_rank + (double)mc->kv_lora_rank + h));
  if (biggest > SIZE_LIMIT || layer * l * kept > SIZE_LIMIT ||
      params > SIZE_LIMIT)
    return vs_error_set(
        err, VS_EINPUT,
        "%s: the model's tensors (about %.3g bytes of activations over the "
        "%.0f micro-batches a stage may keep, %.3g bytes of model states, "
        "%.3g bytes "
        "of fp32 logits) are too large to simulate: each must stay below "
        "%.0e bytes; lower [model] layers, hidden, head_dim, ffn_hidden, "
        "experts, seq_len or vocab, or [training] micro_batch or "
        "global_batch",
        wl->origins.file, layer * l * kept, kept, params, biggest, SIZE_LIMIT);
  return 0;
}

/* The vs_dtype of a frozen base's linear weights: as the other weights
 * (param_dtype), or a format of its own. */
static uint8_t base_dtype(const vs_workload *wl, uint8_t param_dtype)
{
  switch (wl->finetune.base_dtype) {
  case VS_BASE_FP8:
    return VS_DTYPE_FP8_SCALED;
  case VS_BASE_BF16:
    return VS_DTYPE_BF16;
  case VS_BASE_FP16:
    return VS_DTYPE_FP16;
  case VS_BASE_FP32:
    return VS_DTYPE_FP32;
  case VS_BASE_INT8:
    return VS_DTYPE_INT8_ROWWISE;
  case VS_BASE_NF4:
    return wl->finetune.double_quant ? VS_DTYPE_NF4 : VS_DTYPE_NF4_NODQ;
  default:
    return param_dtype;
  }
}

/* The token slots a rank dispatches for its `tokens` tokens: k per token,
 * dropless; with a capacity factor C each expert gets ceil(C x k x tokens
 * / E) slots of each rank, padded (GShard; Megatron-LM's
 * --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity),
 * whatever the routing. */
static uint64_t moe_sent(const vs_model_conf *mc, uint64_t tokens)
{
  double cap;
  if (mc->experts == 0)
    return 0;
  if (mc->expert_capacity_factor <= 0.0)
    return mc->experts_per_token * tokens;
  cap = ceil(mc->expert_capacity_factor * (double)mc->experts_per_token *
             (double)tokens / (double)mc->experts);
  return mc->experts * (uint64_t)cap;
}

/* The token slots the routed experts of a rank process (the rank holding
 * the hottest expert, or one of the others: `load`): its E / ep experts
 * receive from the ep ranks of its expert-parallel group. Padded to
 * capacity, each expert its slots of every rank (E x capacity in all).
 * Dropless, the group's kTep copies: the hottest expert gets 1 +
 * routing_skew times its balanced share kTep / E (at most one copy of
 * each of the group's Tep tokens), the other E - 1 share the rest evenly;
 * the hottest expert's rank holds it and E / ep - 1 others, another rank
 * E / ep others. Balanced routing gives every rank kT; without expert
 * parallelism the rank holds every expert, kT whatever the skew. */
static uint64_t moe_slots(const vs_model_conf *mc, uint64_t tokens,
                          uint64_t ep, vs_expert_load load)
{
  double group, hot, rest;
  if (!vs_workload_skew_applies(mc, ep))
    return moe_sent(mc, tokens);
  group = (double)(mc->experts_per_token * tokens * ep);
  hot = (1.0 + mc->routing_skew) * group / (double)mc->experts;
  if (hot > (double)(tokens * ep))
    hot = (double)(tokens * ep);
  rest = (group - hot) / (double)(mc->experts - 1);
  if (load == VS_LOAD_REST)
    return (uint64_t)ceil((double)(mc->experts / ep) * rest);
  return (uint64_t)ceil(hot + (double)(mc->experts / ep - 1) * rest);
}

/* The sizes of one rank's part of a micro-batch: sequence (context
 * parallelism), heads, widths (tensor parallelism), the padded
 * vocabulary, and what kind of layers take them. */
static void size_dims(const vs_workload *wl, vs_dims *d)
{
  const vs_model_conf *mc = &wl->model;
  const vs_parallel_conf *pc = &wl->parallel;
  d->cp = pc->cp;
  d->cp_comm = pc->cp_comm;
  d->s = mc->seq_len / d->cp; /* a load-balanced chunk pair */
  d->skv = mc->seq_len;
  d->b = wl->training.micro_batch;
  d->h = mc->hidden;
  d->a = mc->heads;
  d->kv = mc->kv_heads;
  d->d = mc->head_dim;
  d->f = mc->ffn_hidden;
  d->t = pc->tp;
  d->tp_group = VS_GROUP_TP;
  /* Megatron pads the vocabulary to a multiple of
   * make_vocab_size_divisible_by (128 by default there) times tp. */
  d->vocab = vs_div_ceil(mc->vocab, mc->vocab_divisible_by * d->t) *
             mc->vocab_divisible_by * d->t;
  d->tokens = d->s * d->b;
  d->sp = vs_workload_sp(pc);
  d->tok_rep = d->sp ? d->tokens / d->t : d->tokens;
  d->sp_gathered = d->sp && wl->training.framework == VS_FW_FSDP2;
  d->rkv = mc->kv_lora_rank;
  d->rq = mc->q_lora_rank;
  d->dn = mc->qk_head_dim;
  d->dr = mc->qk_rope_head_dim;
  d->dv = mc->v_head_dim;
  d->dropout = mc->dropout > 0.0;
  d->eager = wl->training.attention == VS_ATTN_EAGER;
  d->bert = mc->arch == VS_ARCH_BERT;
  d->norm = mc->arch == VS_ARCH_LLAMA ? NORM_RMS : NORM_LAYER;
  d->qkv_bias = mc->attention_bias != VS_BIAS_NONE;
  d->out_bias = mc->attention_bias == VS_BIAS_ALL;
  d->mlp_bias = mc->mlp_bias;
  d->qk_norm = mc->qk_norm;
  d->post_norms = mc->post_norms;
  d->attn_softcap = mc->attn_softcap > 0.0;
  d->logit_softcap = mc->logit_softcap > 0.0;
  d->positions = mc->positions == VS_POS_LEARNED ? mc->max_positions : 0;
  d->type_vocab = mc->type_vocab;
  d->gated_mlp = mc->arch == VS_ARCH_LLAMA;
  d->fp8_lib = (uint8_t)vs_workload_fp8_lib(wl->training.precision,
                                            wl->training.framework);
  d->torchao_tp = vs_workload_fp8_tp_plan(&wl->training, d->t);
  d->fp8_recipe = (uint8_t)wl->training.fp8_recipe;
  d->causal = mc->arch != VS_ARCH_BERT;
  d->hf_modules = wl->training.framework == VS_FW_HF;
  d->eager_kernels = wl->training.kernels == VS_KERNELS_EAGER;
  d->python_rmsnorm = vs_workload_python_rmsnorm(wl);
  d->norm_fp32_scale = mc->zero_centered_norm;
  d->hf_fp32_softmax = d->hf_modules && mc->arch == VS_ARCH_LLAMA;
  d->repeat_kv = wl->training.framework == VS_FW_FSDP2 &&
                 mc->arch == VS_ARCH_LLAMA && !mc->kv_lora_rank;
  d->rope = mc->positions != VS_POS_ROTARY || mc->kv_lora_rank ? ROPE_NONE
            : wl->training.framework == VS_FW_FSDP2            ? ROPE_COMPLEX
            : d->hf_modules                                    ? ROPE_HF
                                                               : ROPE_CHUNK;
}

/* The dtypes of activations, matmul inputs and weights the precision
 * gives, and autocast's casts. */
static void dtype_dims(const vs_workload *wl, vs_dims *d)
{
  int prec = vs_precision_gemm(wl->training.precision);
  d->act_dtype = (uint8_t)vs_precision_act_dtype(wl->training.precision);
  d->e = vs_dtype_size(d->act_dtype);
  d->em = prec == VS_PREC_FP8 ? 1 : d->e;
  d->em_dtype = prec == VS_PREC_FP8 ? VS_DTYPE_FP8 : d->act_dtype;
  d->amp = vs_precision_autocast(wl->training.precision);
  /* fp8 keeps 16-bit weights, autocast fp32 ones */
  d->param_dtype =
      (uint8_t)vs_precision_param_dtype(wl->training.precision);
  d->er = d->amp ? 4 : d->e;
  d->er_dtype = d->amp ? VS_DTYPE_FP32 : d->act_dtype;
  d->qkv_modules = modules_of(wl, CASTS_FOR_ATTENTION);
  d->up_modules = modules_of(wl, CASTS_FOR_MLP);
  /* without autocast the modules read the one tensor */
  d->qkv_casts = d->amp ? d->qkv_modules : 1;
  d->up_casts = d->amp ? d->up_modules : 1;
  d->fp8_params = wl->training.fp8_param_gather && d->fp8_lib == VS_FP8_TE;
  d->copy_dtype = d->fp8_lib == VS_FP8_TE ? VS_DTYPE_FP8
                  : d->amp                ? d->act_dtype
                                          : VS_DTYPE_N;
}

/* A fine-tune's frozen base and adapters (after dtype_dims: the base's
 * format defaults to the weights'). */
static void finetune_dims(const vs_workload *wl, vs_dims *d)
{
  /* with method = frozen the layers built from d are the trained ones;
   * the frozen prefix gets the base's format (build_kinds) */
  d->frozen_base = vs_finetune_adapters(wl->finetune.method);
  d->base_dtype = d->frozen_base ? base_dtype(wl, d->param_dtype)
                                 : d->param_dtype;
  d->lora_r = d->frozen_base ? wl->finetune.lora_rank : 0;
  d->lora_targets = wl->finetune.lora_targets;
  d->lora_drop = wl->finetune.lora_dropout > 0.0;
  d->adapter_dtype = wl->finetune.adapter_dtype == VS_ADAPTER_BF16
                         ? VS_DTYPE_BF16
                     : wl->finetune.adapter_dtype == VS_ADAPTER_FP16
                         ? VS_DTYPE_FP16
                         : VS_DTYPE_FP32;
  d->frozen_prefix = wl->finetune.trainable_layers > 0 &&
                     wl->finetune.trainable_layers < wl->model.layers;
}

/* The routed and shared experts and the tokens a rank (of expert load
 * `load`) sends and receives (after size_dims: it routes tok_rep). */
static void moe_dims(const vs_workload *wl, vs_expert_load load, vs_dims *d)
{
  const vs_model_conf *mc = &wl->model;
  d->experts = mc->experts;
  d->topk = mc->experts_per_token;
  d->fe = mc->expert_ffn_hidden;
  d->fs = mc->shared_experts * mc->shared_expert_ffn_hidden;
  d->shared_gate = mc->shared_expert_gate;
  d->ep = wl->parallel.ep;
  d->et = vs_workload_etp(&wl->parallel);
  /* with tp (and sp) each rank routes its own tok_rep tokens, and the
   * etp ranks pool what they receive for their experts (Megatron-LM's
   * alltoall dispatcher with expert tensor parallelism) */
  d->sent = moe_sent(mc, d->tok_rep);
  d->arrived = moe_slots(mc, d->tok_rep, d->ep, load);
  d->slots = d->et * d->arrived;
}

/* The shapes one rank (of expert load `load`) works on, from the
 * workload. */
static void make_dims(const vs_workload *wl, vs_expert_load load, vs_dims *d)
{
  size_dims(wl, d);
  dtype_dims(wl, d);
  finetune_dims(wl, d);
  moe_dims(wl, load, d);
}

/* A new, empty kind of the given name and role; NULL on error. */
static vs_block *new_kind(vs_model *m, const char *name, int role,
                          vs_error *err)
{
  size_t cap = m->cap_kinds;
  vs_block *b;
  if (m->n_kinds >= VS_MODEL_KINDS_MAX) {
    vs_error_set(err, VS_EINPUT, "model: more than %d block kinds",
                 VS_MODEL_KINDS_MAX);
    return NULL;
  }
  if (!vs_grow((void **)&m->kinds, &cap, (size_t)m->n_kinds + 1,
               sizeof *m->kinds)) {
    vs_error_set(err, VS_ENOMEM, "out of host memory building the model");
    return NULL;
  }
  m->cap_kinds = (uint32_t)cap;
  b = &m->kinds[m->n_kinds++];
  memset(b, 0, sizeof *b);
  snprintf(b->name, sizeof b->name, "%s", name);
  b->role = (uint8_t)role;
  return b;
}

/* [finetune] trainable_layers: the first layers (all but the last
 * trainable_layers) are a kind of their own, with every weight frozen and
 * no adapter (the embedding before them is frozen too). */
static int frozen_prefix(const vs_workload *wl, const vs_dims *frozen,
                         vs_model *m, vs_error *err)
{
  uint64_t n = wl->model.layers - wl->finetune.trainable_layers;
  vs_block *b = new_kind(m, "dense_frozen", VS_ROLE_LAYER, err);
  uint32_t kind = m->n_kinds - 1;
  if (!b || vs_model_build_layer(b, wl, frozen, MLP_DENSE, err))
    return err->code ? err->code : VS_EINPUT;
  for (uint64_t l = 0; l < n; l++)
    m->inst_kind[l + 1] = kind;
  return 0;
}

/* The kinds of layers the builder makes: dense (kind 1), MoE (kind 3,
 * after the head, when the model has experts). */
#define DENSE_KIND 1
#define MOE_KIND 3

/* A copy of layer kind `of`, marked not_checkpointed, as *kept (made at
 * its first use; *kept is VS_ALLOC_NONE-like UINT32_MAX before). */
static int kept_copy(vs_model *m, uint32_t of, uint32_t *kept, vs_error *err)
{
  vs_block *b;
  char name[VS_OP_NAME_MAX];
  int rc;
  if (*kept != UINT32_MAX)
    return 0;
  snprintf(name, sizeof name, "%.18s_kept", m->kinds[of].name);
  if ((rc = vs_model_add_kind(m, &m->kinds[of], name, kept, &b, err)))
    return rc;
  b->not_checkpointed = true;
  return 0;
}

/* [training] checkpoint_layers or checkpoint_every: the layers full
 * checkpointing leaves alone are kinds of their own, copies of their
 * dense or MoE kind marked not_checkpointed. */
static int uncheckpointed_layers(const vs_workload *wl, vs_model *m,
                                 vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  uint32_t kept[MOE_KIND + 1] = {UINT32_MAX, UINT32_MAX, UINT32_MAX,
                                 UINT32_MAX};
  bool *ckpt;
  int rc = 0;
  if (t->checkpointing != VS_CKPT_FULL ||
      (t->checkpoint_layers == 0 && t->checkpoint_every == 0))
    return 0;
  if (!(ckpt = malloc((size_t)m->layers * sizeof *ckpt)))
    return vs_error_set(err, VS_ENOMEM,
                        "out of host memory building the model");
  vs_workload_checkpointed_layers(wl, ckpt);
  for (uint64_t l = 0; l < m->layers && rc == 0; l++) {
    uint32_t of = m->inst_kind[l + 1];
    if (ckpt[l])
      continue;
    if ((rc = kept_copy(m, of, &kept[of], err)) == 0)
      m->inst_kind[l + 1] = kept[of];
  }
  free(ckpt);
  return rc;
}

/* The three kinds of a transformer: embedding, dense layer, head; every
 * layer an instance of the dense kind (of an uncheckpointed copy for the
 * layers full checkpointing leaves alone, of a frozen one for the layers
 * before trainable_layers). */
static int build_kinds(const vs_workload *wl, const vs_dims *d, vs_model *m,
                       vs_error *err)
{
  vs_block *embed, *layer, *head;
  size_t n_inst = (size_t)m->layers + 2;
  vs_dims frozen = *d;
  frozen.frozen_base = true; /* no adapters, nothing trains */
  frozen.lora_r = 0;
  frozen.base_dtype = base_dtype(wl, d->param_dtype);
  if (!(embed = new_kind(m, "embedding", VS_ROLE_EMBED, err)) ||
      vs_model_build_embed(embed, wl, d->frozen_prefix ? &frozen : d, err) ||
      !(layer = new_kind(m, "dense", VS_ROLE_LAYER, err)) ||
      vs_model_build_layer(layer, wl, d, MLP_DENSE, err) ||
      !(head = new_kind(m, "head", VS_ROLE_HEAD, err)) ||
      vs_model_build_head(head, wl, d, err))
    return err->code ? err->code : VS_EINPUT;
  if (d->experts && (!(layer = new_kind(m, "moe", VS_ROLE_LAYER, err)) ||
                     vs_model_build_layer(layer, wl, d, MLP_MOE, err)))
    return err->code ? err->code : VS_EINPUT;
  m->kinds[0].input_bytes = m->kinds[0].ckpt_bytes = 0;
  m->kinds[2].input_bytes = m->kinds[DENSE_KIND].input_bytes;
  m->kinds[2].ckpt_bytes = 0;
  if (!(m->inst_kind = malloc(n_inst * sizeof *m->inst_kind)))
    return vs_error_set(err, VS_ENOMEM,
                        "out of host memory building the model");
  m->inst_kind[0] = 0;
  for (size_t i = 1; i + 1 < n_inst; i++)
    m->inst_kind[i] = vs_workload_moe_layer(&wl->model, i - 1) ? MOE_KIND
                                                               : DENSE_KIND;
  m->inst_kind[n_inst - 1] = 2;
  if (uncheckpointed_layers(wl, m, err))
    return err->code;
  return d->frozen_prefix ? frozen_prefix(wl, &frozen, m, err) : 0;
}

/* The LoRA adapters' parameters in the whole model (with a frozen base,
 * the layers' trainable parameters are their adapters). */
static uint64_t adapter_params(const vs_dims *d, const vs_model *m)
{
  uint64_t n = 0;
  if (!d->frozen_base || d->lora_r == 0)
    return 0;
  for (uint64_t l = 0; l < m->layers; l++) {
    const vs_block *b = &m->kinds[m->inst_kind[l + 1]];
    for (uint32_t i = 0; i < b->n_params; i++)
      n += b->params[i].trainable ? b->params[i].rows * b->params[i].cols : 0;
  }
  return n * d->t;
}

int vs_model_build(const vs_workload *wl, vs_model *m, vs_error *err)
{
  return vs_model_build_loaded(wl, VS_LOAD_HOTTEST, m, err);
}

int vs_model_build_loaded(const vs_workload *wl, vs_expert_load load,
                          vs_model *m, vs_error *err)
{
  vs_dims d;
  int rc;

  memset(m, 0, sizeof *m);
  if (check_size(wl, err))
    return VS_EINPUT;
  make_dims(wl, load, &d);
  m->layers = wl->model.layers;
  m->vocab_padded = d.vocab;
  m->act_elem_bytes = d.e;
  m->param_elem_bytes = vs_dtype_size(d.param_dtype);
  m->causal = d.causal;
  /* model FLOPs count the k T copies a rank's tokens make: not the
   * padding of capacity, nor a skewed rank's surplus. Each routed op runs
   * the etp ranks' pooled slots on 1/etp of the experts' width, the work
   * of the `arrived` slots the rank's own tok_rep tokens stand for. */
  m->routed_load = d.arrived > d.topk * d.tok_rep
                       ? (double)d.arrived / (double)(d.topk * d.tok_rep)
                       : 1.0;
  if ((rc = build_kinds(wl, &d, m, err))) {
    vs_model_fini(m);
    return rc == VS_EINPUT ? too_many_items(wl, err) : rc;
  }
  m->params_total = whole_model_params(wl, PARAMS_ALL) + adapter_params(&d, m);
  m->params_mtp = mtp_params(wl);
  m->params_active =
      whole_model_params(wl, PARAMS_ACTIVE) + adapter_params(&d, m);
  (void)embedding_params(&wl->model, &m->params_lookup);
  return 0;
}

static void block_fini(vs_block *b)
{
  free(b->ops);
  free(b->params);
  free(b->saved);
  memset(b, 0, sizeof *b);
}

void vs_model_fini(vs_model *m)
{
  for (uint32_t k = 0; k < m->n_kinds; k++)
    block_fini(&m->kinds[k]);
  free(m->kinds);
  free(m->inst_kind);
  memset(m, 0, sizeof *m);
}

const vs_block *vs_model_block(const vs_model *m, size_t inst)
{
  return &m->kinds[m->inst_kind[inst]];
}

const vs_block *vs_model_layer(const vs_model *m, uint64_t l)
{
  return vs_model_block(m, (size_t)l + 1);
}

const vs_block *vs_model_embed(const vs_model *m)
{
  return vs_model_block(m, 0);
}

const vs_block *vs_model_head(const vs_model *m)
{
  return vs_model_block(m, (size_t)m->layers + 1);
}

/* dst = a deep copy of src (dst's arrays are new). */
static int block_copy(vs_block *dst, const vs_block *src, vs_error *err)
{
  *dst = *src;
  dst->ops = malloc((src->n_ops ? src->n_ops : 1) * sizeof *dst->ops);
  dst->params =
      malloc((src->n_params ? src->n_params : 1) * sizeof *dst->params);
  dst->saved = malloc((src->n_saved ? src->n_saved : 1) * sizeof *dst->saved);
  dst->cap_ops = src->n_ops;
  dst->cap_params = src->n_params;
  dst->cap_saved = src->n_saved;
  if (!dst->ops || !dst->params || !dst->saved) {
    block_fini(dst);
    return vs_error_set(err, VS_ENOMEM,
                        "out of host memory building the model");
  }
  memcpy(dst->ops, src->ops, src->n_ops * sizeof *dst->ops);
  memcpy(dst->params, src->params, src->n_params * sizeof *dst->params);
  memcpy(dst->saved, src->saved, src->n_saved * sizeof *dst->saved);
  return 0;
}

int vs_model_add_kind(vs_model *m, const vs_block *src, const char *name,
                      uint32_t *kind, vs_block **out, vs_error *err)
{
  vs_block copy, *b;
  int rc;
  if ((rc = block_copy(&copy, src, err)))
    return rc;
  if (!(b = new_kind(m, name, copy.role, err))) {
    block_fini(&copy);
    return err->code;
  }
  *b = copy;
  snprintf(b->name, sizeof b->name, "%s", name);
  *kind = m->n_kinds - 1;
  *out = b;
  return 0;
}

int vs_model_set_layer_kind(vs_model *m, uint64_t l, uint32_t kind,
                            vs_error *err)
{
  if (l >= m->layers || kind >= m->n_kinds ||
      m->kinds[kind].role != VS_ROLE_LAYER)
    return vs_error_set(err, VS_EINPUT,
                        "model: layer %llu cannot be of kind %u (%llu layers, "
                        "%u kinds; the kind must be a layer)",
                        (unsigned long long)l, kind,
                        (unsigned long long)m->layers, m->n_kinds);
  m->inst_kind[l + 1] = kind;
  return 0;
}

size_t vs_block_freeze(vs_block *b, const char *prefix)
{
  size_t n = 0, len = strlen(prefix);
  for (uint32_t i = 0; i < b->n_params; i++) {
    if (strncmp(b->params[i].name, prefix, len) == 0) {
      b->params[i].trainable = false;
      n++;
    }
  }
  return n;
}

uint32_t vs_model_max_saved(const vs_model *m)
{
  uint32_t most = 0;
  for (uint32_t k = 0; k < m->n_kinds; k++)
    if (m->kinds[k].n_saved > most)
      most = m->kinds[k].n_saved;
  return most;
}

uint32_t vs_model_max_layer_ops(const vs_model *m)
{
  uint32_t most = 0;
  for (uint32_t k = 0; k < m->n_kinds; k++)
    if (m->kinds[k].role == VS_ROLE_LAYER && m->kinds[k].n_ops > most)
      most = m->kinds[k].n_ops;
  return most;
}

uint64_t vs_model_param_count(const vs_model *m) { return m->params_total; }

uint64_t vs_block_saved_bytes(const vs_block *b, int category,
                              vs_saved_set which)
{
  bool include_selective = which == VS_SAVED_ALL;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < b->n_saved; i++) {
    const vs_saved *s = &b->saved[i];
    if ((category < 0 || s->category == category) &&
        (include_selective || !s->selective))
      sum += s->bytes;
  }
  return sum;
}
