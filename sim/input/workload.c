/* workload.c - workload.ini's key table, defaults and validation (the
 * keys a Hugging Face config or a framework fills: workload_preset.c). */
#include "workload.h"
#include "workload_int.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const char *const arch_names[] = {"gpt", "llama", "bert", NULL};
static const char *const attention_bias_names[] = {"none", "qkv", "all", NULL};
static const char *const positions_names[] = {"learned", "rotary", NULL};
static const char *const precision_names[] = {"bf16", "fp16", "fp32", "fp8",
                                              "amp_bf16", "amp_fp16", NULL};
static const char *const grad_names[] = {"precision", "fp32", NULL};
static const char *const state_dtype_names[] = {"fp32", "bf16", "fp16", NULL};
static const char *const main_params_names[] = {"fp32", "fp16", NULL};
static const char *const optimizer_names[] = {
    "adamw", "adam", "sgd", "momentum", "adafactor", "adam8bit", "lion", NULL};
static const char *const ckpt_names[] = {"none", "selective", "full", "ops",
                                         NULL};
static const char *const framework_names[] = {"none", "megatron", "deepspeed",
                                              "fsdp2", "hf", NULL};
static const char *const attention_names[] = {"flash", "eager", NULL};
static const char *const kernels_names[] = {"fused", "eager", NULL};
static const char *const fp8_recipe_names[] = {"rowwise", "rowwise_with_gw_hp",
                                               "tensorwise", NULL};
static const char *const optimizer_impl_names[] = {"fused", "foreach", NULL};
static const char *const cp_comm_names[] = {"p2p", "a2a", "allgather", NULL};
static const char *const p2p_names[] = {"overlapped", "blocking", NULL};
static const char *const schedule_names[] = {"1f1b", "gpipe", "interleaved", NULL};
static const char *const offload_names[] = {"none", "cpu", "nvme", NULL};
/* the first two of offload_names: activations go to the host or nowhere */
static const char *const activation_offload_names[] = {"none", "cpu", NULL};
static const char *const allocator_names[] = {"caching", "exact", NULL};
static const char *const order_names[] = {"tp-dp-pp", "tp-pp-dp", NULL};
static const char *const finetune_names[] = {"full", "lora", "qlora", "frozen",
                                             NULL};
static const char *const base_dtype_names[] = {"precision", "bf16", "fp16",
                                               "fp32", "int8", "nf4", "fp8",
                                               NULL};
static const char *const adapter_dtype_names[] = {"fp32", "bf16", "fp16", NULL};
static const char *const lora_target_names[] = {"q", "k", "v", "o", "gate",
                                                "up", "down", NULL};

/* [runtime] reserve's default: the share of a GPU practitioners' tools
 * keep free, 10% (vLLM's EngineArgs gpu_memory_utilization = 0.90; the
 * Hugging Face transformers quantizers' adjust_max_memory plans with
 * val * 0.90 "for buffers"): what the simulation does not see (other
 * processes, longer samples, library workspaces) needs room. */
#define RESERVE_PERCENT 10.0
#define RESERVE_DOC "10% (vLLM's gpu_memory_utilization 0.9)"

#define K(sec, key, ty, field, ...)                                         \
  {.section = sec, .name = key, .type = ty,                                  \
   .offset = offsetof(vs_workload, field), __VA_ARGS__}

/* One key a line: a table to read across. */
/* clang-format off */
static const vs_key workload_keys[] = {
    K("model", "arch", VS_KEY_ENUM, model.arch, .choices = arch_names, .required = true, .default_doc = "required"),
    K("model", "layers", VS_KEY_COUNT, model.layers, .positive = true, .hi = 1e5, .required = true, .default_doc = "required"),
    K("model", "hidden", VS_KEY_COUNT, model.hidden, .positive = true, .hi = 1e6, .required = true, .default_doc = "required"),
    K("model", "heads", VS_KEY_COUNT, model.heads, .positive = true, .hi = 1e5, .required = true, .default_doc = "required"),
    K("model", "kv_heads", VS_KEY_COUNT, model.kv_heads, .positive = true, .hi = 1e5, .default_doc = "heads"),
    K("model", "head_dim", VS_KEY_COUNT, model.head_dim, .hi = 1e5, .default_doc = "0: hidden / heads"),
    K("model", "ffn_hidden", VS_KEY_COUNT, model.ffn_hidden, .positive = true, .hi = 1e7, .default_doc = "4*hidden (gpt, bert); required for llama"),
    K("model", "vocab", VS_KEY_COUNT, model.vocab, .positive = true, .hi = 1e8, .required = true, .default_doc = "required"),
    K("model", "seq_len", VS_KEY_COUNT, model.seq_len, .positive = true, .hi = 1e8, .required = true, .default_doc = "required"),
    K("model", "tied_embeddings", VS_KEY_BOOL, model.tied_embeddings, .default_doc = "true (gpt, bert), false (llama)"),
    K("model", "dropout", VS_KEY_REAL, model.dropout, .lo = 0, .hi = 0.999, .default_doc = "0.1 (gpt, bert), 0 (llama)"),
    K("model", "attention_bias", VS_KEY_ENUM, model.attention_bias, .choices = attention_bias_names, .default_doc = "all (gpt, bert), none (llama)"),
    K("model", "mlp_bias", VS_KEY_BOOL, model.mlp_bias, .default_doc = "true (gpt, bert), false (llama)"),
    K("model", "qk_norm", VS_KEY_BOOL, model.qk_norm, .default_doc = "false"),
    K("model", "zero_centered_norm", VS_KEY_BOOL, model.zero_centered_norm, .default_doc = "false"),
    K("model", "post_norms", VS_KEY_BOOL, model.post_norms, .default_doc = "false"),
    K("model", "attn_softcap", VS_KEY_REAL, model.attn_softcap, .lo = 0, .hi = 1e6, .default_doc = "0 (none)"),
    K("model", "logit_softcap", VS_KEY_REAL, model.logit_softcap, .lo = 0, .hi = 1e6, .default_doc = "0 (none)"),
    K("model", "positions", VS_KEY_ENUM, model.positions, .choices = positions_names, .default_doc = "learned (gpt, bert), rotary (llama)"),
    K("model", "max_positions", VS_KEY_COUNT, model.max_positions, .hi = 1e8, .default_doc = "0: seq_len (learned positions)"),
    K("model", "type_vocab", VS_KEY_COUNT, model.type_vocab, .hi = 1e6, .default_doc = "0: 2 (bert)"),
    K("model", "vocab_divisible_by", VS_KEY_COUNT, model.vocab_divisible_by, .positive = true, .hi = 1e6, .default_doc = "1 (Megatron pads to 128)"),
    K("model", "hf_config", VS_KEY_PATH, model.hf_config, .default_doc = "none"),
    K("model", "experts", VS_KEY_COUNT, model.experts, .hi = 16000, .default_doc = "0 (every layer dense)"),
    K("model", "experts_per_token", VS_KEY_COUNT, model.experts_per_token, .positive = true, .hi = 1e5, .default_doc = "2 (Mixtral's top-2)"),
    K("model", "expert_ffn_hidden", VS_KEY_COUNT, model.expert_ffn_hidden, .hi = 1e7, .default_doc = "0: ffn_hidden"),
    K("model", "shared_experts", VS_KEY_COUNT, model.shared_experts, .hi = 1e5, .default_doc = "0"),
    K("model", "shared_expert_ffn_hidden", VS_KEY_COUNT, model.shared_expert_ffn_hidden, .hi = 1e7, .default_doc = "0: expert_ffn_hidden"),
    K("model", "shared_expert_gate", VS_KEY_BOOL, model.shared_expert_gate, .default_doc = "false"),
    K("model", "dense_layers", VS_KEY_COUNT, model.dense_layers, .hi = 1e5, .default_doc = "0"),
    K("model", "moe_every", VS_KEY_COUNT, model.moe_every, .positive = true, .hi = 1e5, .default_doc = "1 (every layer after dense_layers)"),
    K("model", "expert_capacity_factor", VS_KEY_REAL, model.expert_capacity_factor, .lo = 0, .hi = 1e3, .default_doc = "0 (dropless)"),
    K("model", "routing_skew", VS_KEY_REAL, model.routing_skew, .lo = 0, .hi = 1e6, .default_doc = "0 (balanced routing)"),
    K("model", "kv_lora_rank", VS_KEY_COUNT, model.kv_lora_rank, .hi = 1e6, .default_doc = "0 (no MLA)"),
    K("model", "q_lora_rank", VS_KEY_COUNT, model.q_lora_rank, .hi = 1e6, .default_doc = "0 (a full query projection)"),
    K("model", "qk_head_dim", VS_KEY_COUNT, model.qk_head_dim, .hi = 1e5, .default_doc = "0: hidden / heads"),
    K("model", "qk_rope_head_dim", VS_KEY_COUNT, model.qk_rope_head_dim, .hi = 1e5, .default_doc = "64 (DeepSeek-V2/V3's)"),
    K("model", "v_head_dim", VS_KEY_COUNT, model.v_head_dim, .hi = 1e5, .default_doc = "0: hidden / heads"),
    K("model", "mtp_layers", VS_KEY_COUNT, model.mtp_layers, .hi = 64, .default_doc = "0 (no multi-token prediction)"),
    K("training", "micro_batch", VS_KEY_COUNT, training.micro_batch, .positive = true, .hi = 1e6, .default_doc = "1"),
    K("training", "global_batch", VS_KEY_COUNT, training.global_batch, .positive = true, .hi = 1e9, .default_doc = "micro_batch * dp", .follows_gpus = true),
    K("training", "precision", VS_KEY_ENUM, training.precision, .choices = precision_names, .default_doc = "bf16 (framework hf: amp_bf16)"),
    K("training", "master_weights", VS_KEY_BOOL, training.master_weights, .default_doc = "true unless precision = fp32 or amp_* (framework fsdp2, hf: false)"),
    K("training", "grad_dtype", VS_KEY_ENUM, training.grad_dtype, .choices = grad_names, .default_doc = "precision (framework megatron with bf16 or fp8, fsdp2: fp32)"),
    K("training", "optimizer", VS_KEY_ENUM, training.optimizer, .choices = optimizer_names, .default_doc = "adamw"),
    K("training", "optimizer_impl", VS_KEY_ENUM, training.optimizer_impl, .choices = optimizer_impl_names, .default_doc = "fused"),
    K("training", "framework", VS_KEY_ENUM, training.framework, .choices = framework_names, .default_doc = "none"),
    K("training", "checkpointing", VS_KEY_ENUM, training.checkpointing, .choices = ckpt_names, .default_doc = "none"),
    K("training", "fused_cross_entropy", VS_KEY_BOOL, training.fused_cross_entropy, .default_doc = "false"),
    K("training", "checkpoint_layers", VS_KEY_COUNT, training.checkpoint_layers, .hi = 1e5, .default_doc = "0 (every layer)"),
    K("training", "checkpoint_every", VS_KEY_COUNT, training.checkpoint_every, .hi = 1e5, .default_doc = "0 (every layer)"),
    K("training", "attention", VS_KEY_ENUM, training.attention, .choices = attention_names, .default_doc = "flash"),
    K("training", "kernels", VS_KEY_ENUM, training.kernels, .choices = kernels_names, .default_doc = "fused (framework hf, fsdp2: eager)"),
    K("training", "grad_accumulation_fusion", VS_KEY_BOOL, training.grad_accumulation_fusion, .default_doc = "true with fused kernels under framework megatron or none, else false"),
    K("training", "set_grads_to_none", VS_KEY_BOOL, training.set_grads_to_none, .default_doc = "false (framework hf, fsdp2: true)"),
    K("training", "grad_clipping", VS_KEY_BOOL, training.grad_clipping, .default_doc = "false (framework megatron, deepspeed, fsdp2, hf: true without optimizer_in_backward)"),
    K("training", "paged_optimizer", VS_KEY_BOOL, training.paged_optimizer, .default_doc = "false"),
    K("training", "optimizer_in_backward", VS_KEY_BOOL, training.optimizer_in_backward, .default_doc = "false"),
    K("training", "precision_aware_optimizer", VS_KEY_BOOL, training.precision_aware_optimizer, .default_doc = "false"),
    K("training", "exp_avg_dtype", VS_KEY_ENUM, training.exp_avg_dtype, .choices = state_dtype_names, .default_doc = "fp32"),
    K("training", "exp_avg_sq_dtype", VS_KEY_ENUM, training.exp_avg_sq_dtype, .choices = state_dtype_names, .default_doc = "fp32"),
    K("training", "main_params_dtype", VS_KEY_ENUM, training.main_params_dtype, .choices = main_params_names, .default_doc = "fp32"),
    K("training", "fp8_param_gather", VS_KEY_BOOL, training.fp8_param_gather, .default_doc = "false"),
    K("training", "fp8_recipe", VS_KEY_ENUM, training.fp8_recipe, .choices = fp8_recipe_names, .default_doc = "rowwise (torchao's float8: framework fsdp2)"),
    K("training", "offload_activations", VS_KEY_ENUM, training.offload_activations, .choices = activation_offload_names, .default_doc = "none"),
    K("parallel", "tp", VS_KEY_COUNT, parallel.tp, .positive = true, .hi = 1e6, .default_doc = "1"),
    K("parallel", "pp", VS_KEY_COUNT, parallel.pp, .positive = true, .hi = VS_MAX_STAGES, .default_doc = "1"),
    K("parallel", "dp", VS_KEY_COUNT, parallel.dp, .positive = true, .hi = 1e7, .default_doc = "gpus / (tp*cp*pp), or 1", .follows_gpus = true),
    K("parallel", "sequence_parallel", VS_KEY_BOOL, parallel.sequence_parallel, .default_doc = "false"),
    K("parallel", "schedule", VS_KEY_ENUM, parallel.schedule, .choices = schedule_names, .default_doc = "1f1b"),
    K("parallel", "virtual_stages", VS_KEY_COUNT, parallel.virtual_stages, .positive = true, .hi = 1e3, .default_doc = "1"),
    K("parallel", "zero", VS_KEY_COUNT, parallel.zero, .hi = VS_ZERO_MAX, .default_doc = "0 (framework fsdp2: 3)"),
    K("parallel", "ep", VS_KEY_COUNT, parallel.ep, .positive = true, .hi = 1e5, .default_doc = "1"),
    K("parallel", "etp", VS_KEY_COUNT, parallel.etp, .hi = 1e6, .default_doc = "0: tp"),
    K("parallel", "cp", VS_KEY_COUNT, parallel.cp, .positive = true, .hi = 1e5, .default_doc = "1"),
    K("parallel", "cp_comm", VS_KEY_ENUM, parallel.cp_comm, .choices = cp_comm_names, .default_doc = "p2p (framework deepspeed: a2a; fsdp2: allgather)"),
    K("parallel", "p2p", VS_KEY_ENUM, parallel.p2p, .choices = p2p_names, .default_doc = "overlapped (framework megatron: blocking unless interleaved; deepspeed: blocking)"),
    K("parallel", "p2p_scatter_gather", VS_KEY_BOOL, parallel.p2p_scatter_gather, .default_doc = "false"),
    K("parallel", "offload_optimizer", VS_KEY_ENUM, parallel.offload_optimizer, .choices = offload_names, .default_doc = "none"),
    K("parallel", "offload_params", VS_KEY_ENUM, parallel.offload_params, .choices = offload_names, .default_doc = "none"),
    K("parallel", "offload_pin_memory", VS_KEY_BOOL, parallel.offload_pin_memory, .default_doc = "true"),
    K("parallel", "overlap_grad_reduce", VS_KEY_BOOL, parallel.overlap_grad_reduce, .default_doc = "true (framework megatron with zero 0-1, deepspeed with zero 0-2: false)"),
    K("parallel", "bucket", VS_KEY_SIZE, parallel.bucket_bytes, .positive = true, .default_doc = "25MiB (framework megatron: max(4e7, 1e6 x dp) parameters; deepspeed: 5e8 parameters; fsdp2: 1B)"),
    K("parallel", "max_live_parameters", VS_KEY_COUNT, parallel.max_live_parameters, .hi = 1e15, .default_doc = "framework deepspeed with zero 3: 1000000000 (stage3_max_live_parameters); elsewhere 0, not used"),
    K("parallel", "max_reuse_distance", VS_KEY_COUNT, parallel.max_reuse_distance, .hi = 1e15, .default_doc = "framework deepspeed with zero 3: 1000000000 (stage3_max_reuse_distance); elsewhere 0, not used"),
    K("parallel", "pp_layers", VS_KEY_LIST, parallel.pp_layers, .positive = true, .default_doc = "even split"),
    K("parallel", "order", VS_KEY_ENUM, parallel.order, .choices = order_names, .default_doc = "tp-dp-pp"),
    K("finetune", "method", VS_KEY_ENUM, finetune.method, .choices = finetune_names, .default_doc = "full"),
    K("finetune", "base_dtype", VS_KEY_ENUM, finetune.base_dtype, .choices = base_dtype_names, .default_doc = "precision (nf4 with qlora)"),
    K("finetune", "double_quant", VS_KEY_BOOL, finetune.double_quant, .default_doc = "true (QLoRA's; framework hf: false)"),
    K("finetune", "lora_rank", VS_KEY_COUNT, finetune.lora_rank, .positive = true, .hi = 65536, .default_doc = "8 (PEFT's LoraConfig)"),
    K("finetune", "lora_alpha", VS_KEY_REAL, finetune.lora_alpha, .lo = 0, .hi = 1e6, .default_doc = "8 (PEFT's; no memory effect)"),
    K("finetune", "lora_targets", VS_KEY_FLAGS, finetune.lora_targets, .choices = lora_target_names, .default_doc = "q,v (PEFT's for Llama)"),
    K("finetune", "lora_dropout", VS_KEY_REAL, finetune.lora_dropout, .lo = 0, .hi = 0.999, .default_doc = "0 (PEFT's)"),
    K("finetune", "adapter_dtype", VS_KEY_ENUM, finetune.adapter_dtype, .choices = adapter_dtype_names, .default_doc = "fp32 (PEFT's)"),
    K("finetune", "trainable_layers", VS_KEY_COUNT, finetune.trainable_layers, .hi = 1e5, .default_doc = "0 (all)"),
    K("runtime", "allocator", VS_KEY_ENUM, runtime.allocator, .choices = allocator_names, .default_doc = "caching"),
    K("runtime", "expandable_segments", VS_KEY_BOOL, runtime.expandable_segments, .default_doc = "false (framework fsdp2: true)"),
    K("runtime", "max_split_size_mb", VS_KEY_COUNT, runtime.max_split_size_mb, .hi = 1e7, .default_doc = "0 (unlimited)"),
    K("runtime", "roundup_power2_divisions", VS_KEY_COUNT, runtime.roundup_power2_divisions, .hi = 64, .default_doc = "0 (512-byte rounding)"),
    K("runtime", "reserve", VS_KEY_MARGIN, runtime.reserve, .hi = 4398046511104.0, .default_doc = RESERVE_DOC),
};
/* clang-format on */
#undef K

static const vs_keytab workload_tab = {
    workload_keys, sizeof workload_keys / sizeof workload_keys[0], "workload",
    "[model] hf_config", "[training] framework"};

const vs_keytab *vs_workload_keys(void) { return &workload_tab; }

const char *vs_arch_name(int v) { return arch_names[v]; }
const char *vs_precision_name(int v) { return precision_names[v]; }
const char *vs_optimizer_name(int v) { return optimizer_names[v]; }
const char *vs_checkpointing_name(int v) { return ckpt_names[v]; }
const char *vs_framework_name(int v) { return framework_names[v]; }
const char *vs_attention_name(int v) { return attention_names[v]; }
const char *vs_kernels_name(int v) { return kernels_names[v]; }
const char *vs_fp8_recipe_name(int v) { return fp8_recipe_names[v]; }
const char *vs_optimizer_impl_name(int v) { return optimizer_impl_names[v]; }
const char *vs_cp_comm_name(int v) { return cp_comm_names[v]; }
const char *vs_p2p_name(int v) { return p2p_names[v]; }
const char *vs_offload_name(int v) { return offload_names[v]; }
const char *vs_allocator_name(int v) { return allocator_names[v]; }
const char *vs_schedule_name(int v) { return schedule_names[v]; }
const char *vs_order_name(int v) { return order_names[v]; }
const char *vs_finetune_name(int v) { return finetune_names[v]; }
const char *vs_base_dtype_name(int v) { return base_dtype_names[v]; }
const char *vs_lora_target_name(int v) { return lora_target_names[v]; }
const char *vs_adapter_dtype_name(int v) { return adapter_dtype_names[v]; }

/* Defaults that do not depend on other keys. */
static void set_defaults(vs_workload *wl)
{
  memset(wl, 0, sizeof *wl);
  wl->training.micro_batch = 1;
  wl->training.precision = VS_PREC_BF16;
  wl->training.optimizer = VS_OPT_ADAMW;
  wl->training.attention = VS_ATTN_FLASH;
  wl->parallel.tp = 1;
  wl->parallel.pp = 1;
  wl->parallel.dp = 1;
  wl->parallel.virtual_stages = 1;
  wl->parallel.ep = 1;
  wl->parallel.cp = 1;
  wl->parallel.bucket_bytes = VS_BUCKET_DEFAULT;
  wl->model.vocab_divisible_by = 1;
  wl->model.experts_per_token = 2;
  wl->model.moe_every = 1;
  wl->model.qk_rope_head_dim = 64;
  wl->runtime.allocator = VS_ALLOC_CACHING;
  wl->runtime.reserve.percent = RESERVE_PERCENT;
  /* PEFT's LoraConfig: r = 8, lora_alpha = 8, lora_dropout = 0; target
   * modules for Llama q_proj and v_proj (peft/utils/constants.py
   * TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING) */
  wl->finetune.lora_rank = 8;
  wl->finetune.lora_alpha = 8;
  /* an nf4 base's absmaxes quantized again (QLoRA, Dettmers et al. 2023,
   * Sec. 3; torchtune's to_nf4, scaler_block_size 256) */
  wl->finetune.double_quant = true;
  wl->finetune.lora_targets = 1u << VS_LORA_Q | 1u << VS_LORA_V;
}

int vs_workload_set(vs_workload *wl, const char *assignment, vs_error *err)
{
  return vs_conf_assign(&workload_tab, wl, &wl->origins, assignment, "", err);
}

/* ------------------------------------------------------------------------
 * Validation: each failure names the key (with its file and line) that the
 * user should change.
 * ------------------------------------------------------------------------ */

#define WHERE(sec, key) \
  vs_conf_where(&workload_tab, &wl->origins, sec, key, where, sizeof where)

/* " (--set section.key=value)" into buf[len] when section.key was given
 * with --set, else "": a message blaming another key's file line names
 * the option that made the conflict. */
static const char *set_note(const vs_workload *wl, const char *section,
                            const char *key, char *buf, size_t len)
{
  char where[400];
  buf[0] = '\0';
  if (vs_conf_set_by_option(&workload_tab, &wl->origins, section, key))
    snprintf(buf, len, " (%s)", WHERE(section, key));
  return buf;
}

#define N_OF(a) (sizeof(a) / sizeof(a)[0])

static const char *const expert_keys[] = {
    "experts_per_token",  "expert_ffn_hidden",
    "shared_experts",     "shared_expert_ffn_hidden",
    "shared_expert_gate", "dense_layers",
    "moe_every",          "expert_capacity_factor",
    "routing_skew"};
static const char *const mla_keys[] = {"q_lora_rank", "qk_head_dim",
                                       "qk_rope_head_dim", "v_head_dim"};
static const char *const lora_keys[] = {"lora_rank", "lora_alpha",
                                        "lora_targets", "lora_dropout",
                                        "adapter_dtype"};
static const char *const double_quant_keys[] = {"double_quant"};

static bool has_experts(const vs_workload *wl) { return wl->model.experts > 0; }

static bool has_mla(const vs_workload *wl)
{
  return wl->model.kv_lora_rank > 0;
}

static bool has_adapters(const vs_workload *wl)
{
  return vs_finetune_adapters(wl->finetune.method);
}

static bool has_nf4_base(const vs_workload *wl)
{
  return wl->finetune.base_dtype == VS_BASE_NF4;
}

/* Keys of [section] that mean something only with another of it, the
 * gate: the one home of which key needs which (key_changed refuses them,
 * vs_workload_key_unused has `vsim show` comment them out). */
typedef struct gated_keys {
  const char *section;
  const char *const *names;
  size_t n;
  const char *gate;                  /* the key that turns them on */
  bool (*on)(const vs_workload *wl); /* whether wl has it on */
  const char *needs;                 /* what show says they need */
} gated_keys;

enum { GATED_EXPERTS, GATED_MLA, GATED_LORA, GATED_DOUBLE_QUANT, GATED_N };

static const gated_keys gated[GATED_N] = {
    [GATED_EXPERTS] = {"model", expert_keys, N_OF(expert_keys), "experts",
                       has_experts, "experts"},
    [GATED_MLA] = {"model", mla_keys, N_OF(mla_keys), "kv_lora_rank", has_mla,
                   "kv_lora_rank"},
    [GATED_LORA] = {"finetune", lora_keys, N_OF(lora_keys), "method",
                    has_adapters, "method = lora or qlora"},
    [GATED_DOUBLE_QUANT] = {"finetune", double_quant_keys,
                            N_OF(double_quant_keys), "base_dtype", has_nf4_base,
                            "base_dtype = nf4"},
};

/* The first key of group g (gated) that means nothing in wl, or NULL:
 * harmless at its default where the gate is set (as `vsim show` writes
 * it, or a --set of the gate that compares a dense model), and refused
 * when set at all where it is not (a LoRA block without `method = lora`
 * would otherwise train the whole model unsaid). */
static const char *key_changed(const vs_workload *wl, int g)
{
  const gated_keys *k = &gated[g];
  vs_workload d;
  if (!vs_conf_is_set(&workload_tab, &wl->origins, k->section, k->gate))
    for (size_t i = 0; i < k->n; i++)
      if (vs_conf_is_set(&workload_tab, &wl->origins, k->section, k->names[i]))
        return k->names[i];
  set_defaults(&d);
  return vs_conf_first_different(&workload_tab, k->section, k->names, k->n, wl,
                                 &d);
}

const char *vs_workload_key_unused(const vs_workload *wl, const char *section,
                                   const char *name)
{
  for (int g = 0; g < GATED_N; g++) {
    const gated_keys *k = &gated[g];
    if (strcmp(section, k->section) != 0 || k->on(wl))
      continue;
    for (size_t i = 0; i < k->n; i++)
      if (strcmp(name, k->names[i]) == 0)
        return k->needs;
  }
  return NULL;
}

/* [model] kv_lora_rank turns on multi-head latent attention: llama
 * layers (RMSNorm, rotary) with flash attention; its head sizes default
 * to hidden / heads. */
static int check_mla(vs_workload *wl, vs_error *err)
{
  vs_model_conf *m = &wl->model;
  const char *key = key_changed(wl, GATED_MLA);
  char where[400];
  if (m->kv_lora_rank == 0) {
    if (key)
      return vs_error_set(err, VS_EINPUT,
                          "%s: shapes multi-head latent attention, which is "
                          "off; set [model] kv_lora_rank",
                          WHERE("model", key));
    return 0;
  }
  if (m->arch != VS_ARCH_LLAMA)
    return vs_error_set(err, VS_EINPUT,
                        "%s: multi-head latent attention is DeepSeek's, "
                        "built on llama layers; set arch = llama",
                        WHERE("model", "kv_lora_rank"));
  if (m->head_dim &&
      (m->hidden % m->heads || m->head_dim != m->hidden / m->heads))
    return vs_error_set(err, VS_EINPUT,
                        "%s: multi-head latent attention's heads are "
                        "qk_head_dim + qk_rope_head_dim and v_head_dim wide; "
                        "leave head_dim unset",
                        WHERE("model", "head_dim"));
  if (m->kv_heads != m->heads)
    return vs_error_set(err, VS_EINPUT,
                        "%s: under multi-head latent attention (kv_lora_rank "
                        "> 0) every head's keys and values come from the "
                        "shared latent, so kv_heads means nothing: leave it "
                        "unset or equal to heads (%llu)",
                        WHERE("model", "kv_heads"),
                        (unsigned long long)m->heads);
  if (m->qk_head_dim == 0)
    m->qk_head_dim = m->hidden / m->heads;
  if (m->v_head_dim == 0)
    m->v_head_dim = m->hidden / m->heads;
  return 0;
}

/* [model] experts and the keys that shape MoE layers: their defaults
 * (each expert as wide as the dense FFN, shared ones as the routed), k
 * of at most E experts a token, at least one MoE layer. */
static int check_experts(vs_workload *wl, vs_error *err)
{
  vs_model_conf *m = &wl->model;
  const char *key = key_changed(wl, GATED_EXPERTS);
  char where[400];
  if (m->experts == 0) {
    if (key)
      return vs_error_set(err, VS_EINPUT,
                          "%s: shapes mixture-of-experts layers, which this "
                          "model has none of; set [model] experts",
                          WHERE("model", key));
    return 0;
  }
  if (m->expert_ffn_hidden == 0)
    m->expert_ffn_hidden = m->ffn_hidden;
  if (m->shared_experts == 0 && m->shared_expert_ffn_hidden)
    return vs_error_set(err, VS_EINPUT,
                        "%s: sizes the shared experts, which this model has "
                        "none of; set [model] shared_experts, or this key to "
                        "0",
                        WHERE("model", "shared_expert_ffn_hidden"));
  if (m->shared_experts && m->shared_expert_ffn_hidden == 0)
    m->shared_expert_ffn_hidden = m->expert_ffn_hidden;
  if (m->shared_expert_gate && m->shared_experts == 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: gates the shared experts, which this model has "
                        "none of; set [model] shared_experts, or this key to "
                        "false",
                        WHERE("model", "shared_expert_gate"));
  if (m->experts_per_token > m->experts)
    return vs_error_set(err, VS_EINPUT,
                        "%s: a token goes to at most the model's %llu "
                        "expert%s",
                        WHERE("model", "experts_per_token"),
                        (unsigned long long)m->experts,
                        m->experts == 1 ? "" : "s");
  if (m->expert_capacity_factor * (double)m->experts_per_token >
      (double)m->experts)
    return vs_error_set(err, VS_EINPUT,
                        "%s: gives each expert more slots than the tokens "
                        "(capacity factor x k / E > 1; Megatron-LM's top-k "
                        "over the tokens fails there); at most %g here",
                        WHERE("model", "expert_capacity_factor"),
                        (double)m->experts / (double)m->experts_per_token);
  if ((1.0 + m->routing_skew) * (double)m->experts_per_token >
      (double)m->experts)
    return vs_error_set(err, VS_EINPUT,
                        "%s: gives the hottest expert more than one copy of "
                        "each token ((1 + routing_skew) x k / E > 1: a "
                        "token's k copies go to k different experts); at "
                        "most %g here",
                        WHERE("model", "routing_skew"),
                        (double)m->experts / (double)m->experts_per_token -
                            1.0);
  if (m->dense_layers >= m->layers)
    return vs_error_set(err, VS_EINPUT,
                        "%s: leaves no mixture-of-experts layer (the model "
                        "has %llu layers); set it below that, or experts = 0",
                        WHERE("model", "dense_layers"),
                        (unsigned long long)m->layers);
  return 0;
}

/* Whether [model] key's value came from the hf_config file, which the
 * workload may override into a model where it means nothing (a GPT-2
 * config's n_positions under positions = rotary): then it is dropped. */
static bool from_hf_config(const vs_workload *wl, const char *key)
{
  int i = vs_conf_find(&workload_tab, "model", key);
  return i >= 0 && wl->origins.keys[i].set && wl->origins.keys[i].line == -1;
}

/* The learned position table's rows (seq_len by default), which a
 * sequence may not outgrow; none with rotary embeddings. */
static int check_positions(vs_workload *wl, vs_error *err)
{
  vs_model_conf *m = &wl->model;
  char where[400], where_seq[400];
  if (m->positions == VS_POS_ROTARY) {
    if (from_hf_config(wl, "max_positions"))
      m->max_positions = 0;
    if (m->max_positions)
      return vs_error_set(err, VS_EINPUT,
                          "%s: sizes a learned position table, and "
                          "positions = rotary has none; set it to 0 (or "
                          "leave it unset)",
                          WHERE("model", "max_positions"));
    return 0;
  }
  if (m->max_positions == 0)
    m->max_positions = m->seq_len;
  if (m->seq_len > m->max_positions) {
    vs_conf_where(&workload_tab, &wl->origins, "model", "seq_len", where_seq,
                  sizeof where_seq);
    return vs_error_set(err, VS_EINPUT,
                        "%s: the model learned %llu positions, fewer than "
                        "seq_len (%llu, %s); a longer sequence has no "
                        "position embedding",
                        WHERE("model", "max_positions"),
                        (unsigned long long)m->max_positions,
                        (unsigned long long)m->seq_len, where_seq);
  }
  return 0;
}

/* Gemma's options where vsim builds them: sandwich norms on pre-norm
 * layers (BERT's are post-norm already), the final logits capped where
 * they are the only ones (the multi-token prediction's heads are not). */
static int check_gemma_options(const vs_workload *wl, vs_error *err)
{
  const vs_model_conf *m = &wl->model;
  char where[400];
  if (m->post_norms && m->arch == VS_ARCH_BERT)
    return vs_error_set(err, VS_EINPUT,
                        "%s: BERT's layers norm each sublayer's output "
                        "already (post-norm); post_norms adds norms to "
                        "pre-norm layers (gpt, llama)",
                        WHERE("model", "post_norms"));
  if (m->logit_softcap > 0.0 && m->mtp_layers > 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: the multi-token prediction's heads are not "
                        "capped by this version; set logit_softcap = 0 or "
                        "mtp_layers = 0",
                        WHERE("model", "logit_softcap"));
  return 0;
}

/* The attention's and MLPs' biases, the positions and BERT's token types:
 * their defaults by arch (GPT and BERT have biases everywhere and a
 * learned table of seq_len positions, Llama neither), and what cannot go
 * together. */
static int check_layer_options(vs_workload *wl, vs_error *err)
{
  vs_model_conf *m = &wl->model;
  bool llama = m->arch == VS_ARCH_LLAMA;
  char where[400];
  if (!vs_conf_is_set(&workload_tab, &wl->origins, "model", "attention_bias"))
    m->attention_bias = llama ? VS_BIAS_NONE : VS_BIAS_ALL;
  if (!vs_conf_is_set(&workload_tab, &wl->origins, "model", "mlp_bias"))
    m->mlp_bias = !llama;
  if (!vs_conf_is_set(&workload_tab, &wl->origins, "model", "positions"))
    m->positions = llama ? VS_POS_ROTARY : VS_POS_LEARNED;
  if (m->kv_lora_rank && (m->attention_bias != VS_BIAS_NONE || m->qk_norm))
    return vs_error_set(err, VS_EINPUT,
                        "%s: multi-head latent attention (kv_lora_rank > 0) "
                        "is built without biases or head norms: with %s it "
                        "is not simulated",
                        m->qk_norm ? WHERE("model", "qk_norm")
                                   : WHERE("model", "attention_bias"),
                        m->qk_norm ? "head norms" : "biases");
  if (m->kv_lora_rank && m->positions == VS_POS_LEARNED)
    return vs_error_set(err, VS_EINPUT,
                        "%s: multi-head latent attention carries its own "
                        "rotary part (qk_rope_head_dim); set positions = "
                        "rotary",
                        WHERE("model", "positions"));
  if (m->arch != VS_ARCH_BERT && from_hf_config(wl, "type_vocab"))
    m->type_vocab = 0;
  if (m->type_vocab && m->arch != VS_ARCH_BERT)
    return vs_error_set(err, VS_EINPUT,
                        "%s: token types are BERT's; set it to 0 (or leave "
                        "it unset) for arch gpt or llama",
                        WHERE("model", "type_vocab"));
  if (m->arch == VS_ARCH_BERT && m->type_vocab == 0)
    m->type_vocab = 2;
  if (check_gemma_options(wl, err))
    return VS_EINPUT;
  return check_positions(wl, err);
}

static int check_model(vs_workload *wl, vs_error *err)
{
  int rc;
  vs_model_conf *m = &wl->model;
  char where[400];

  if (!vs_conf_is_set(&workload_tab, &wl->origins, "model", "kv_heads"))
    m->kv_heads = m->heads;
  if (!vs_conf_is_set(&workload_tab, &wl->origins, "model", "ffn_hidden")) {
    if (m->arch == VS_ARCH_LLAMA)
      return vs_error_set(err, VS_EINPUT,
                          "%s: missing required key 'ffn_hidden' in [model] "
                          "(required for arch = llama, e.g. 11008 for Llama-2-7B)",
                          wl->origins.file);
    m->ffn_hidden = 4 * m->hidden;
  }
  if (!vs_conf_is_set(&workload_tab, &wl->origins, "model", "tied_embeddings"))
    m->tied_embeddings = m->arch != VS_ARCH_LLAMA;
  if (!vs_conf_is_set(&workload_tab, &wl->origins, "model", "dropout"))
    m->dropout = m->arch == VS_ARCH_LLAMA ? 0.0 : 0.1;

  if (m->head_dim == 0 && m->hidden % m->heads != 0) {
    /* either may be the one to change: say where each came from */
    char where_hidden[400];
    vs_conf_where(&workload_tab, &wl->origins, "model", "hidden", where_hidden,
                  sizeof where_hidden);
    return vs_error_set(err, VS_EINPUT,
                        "%s: hidden (%llu, %s) must be divisible by heads, "
                        "or set [model] head_dim (heads of another width)",
                        WHERE("model", "heads"), (unsigned long long)m->hidden,
                        where_hidden);
  }
  if (m->kv_heads > m->heads || m->heads % m->kv_heads != 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: heads (%llu) must be divisible by kv_heads",
                        WHERE("model", "kv_heads"),
                        (unsigned long long)m->heads);
  if ((rc = check_experts(wl, err)) || (rc = check_mla(wl, err)))
    return rc;
  if (m->head_dim == 0)
    m->head_dim = m->hidden / m->heads;
  return check_layer_options(wl, err);
}

/* dp from --gpus (gpus > 0; refused when it contradicts a dp the file or
 * a --set gives), and the job's GPUs. */
static int resolve_dp(vs_workload *wl, uint64_t gpus, vs_error *err)
{
  vs_parallel_conf *p = &wl->parallel;
  char where[400];
  /* context-parallel ranks sit beside the tensor-parallel ones */
  uint64_t cp = p->cp, tp = p->tp * cp, pp = p->pp;
  if (gpus > 0) {
    if (!vs_workload_gpus_allowed(gpus, tp, pp)) {
      /* tp, cp and pp may come from the file, a --set or their defaults */
      char where_pp[400], where_cp[400] = "";
      vs_conf_where(&workload_tab, &wl->origins, "parallel", "pp", where_pp,
                    sizeof where_pp);
      if (cp > 1) {
        vs_conf_where(&workload_tab, &wl->origins, "parallel", "cp", where_cp,
                      sizeof where_cp - 2);
        strcat(where_cp, "; ");
      }
      return vs_error_set(err, VS_EINPUT,
                          "--gpus %llu is not divisible by tp*%spp = %llu (%s; "
                          "%s%s)",
                          (unsigned long long)gpus, cp > 1 ? "cp*" : "",
                          (unsigned long long)(tp * pp),
                          WHERE("parallel", "tp"), where_cp, where_pp);
    }
    if (vs_conf_is_set(&workload_tab, &wl->origins, "parallel", "dp") &&
        p->dp * tp * pp != gpus)
      return vs_error_set(err, VS_EINPUT,
                          "--gpus %llu contradicts %s: tp*%spp*dp = %llu; drop "
                          "dp or --gpus",
                          (unsigned long long)gpus, WHERE("parallel", "dp"),
                          cp > 1 ? "cp*" : "",
                          (unsigned long long)(p->dp * tp * pp));
    p->dp = gpus / (tp * pp);
  }
  if (__builtin_mul_overflow(tp * pp, p->dp, &wl->gpus) ||
      wl->gpus > VS_MAX_GPUS)
    return vs_error_set(err, VS_EINPUT,
                        "%s: tp*%spp*dp = %llu x %llu GPUs, more than vsim "
                        "simulates (at most %u)",
                        WHERE("parallel", "dp"), cp > 1 ? "cp*" : "",
                        (unsigned long long)(tp * pp),
                        (unsigned long long)p->dp, VS_MAX_GPUS);
  return 0;
}

/* tp, sequence parallelism, cp and pp against the model's sizes, then dp
 * (resolve_dp). */
static int check_layout(vs_workload *wl, uint64_t gpus, vs_error *err)
{
  vs_model_conf *m = &wl->model;
  vs_parallel_conf *p = &wl->parallel;
  char where[400], note[420];
  uint64_t tp = p->tp, pp = p->pp, cp = p->cp, size = 0;
  const char *misfit = vs_workload_tp_misfit(m, tp, vs_workload_etp(p), &size);
  /* the framework's exchange: its preset comes later (DeepSpeed's a2a) */
  int comm = vs_workload_framework_cp_comm(wl->training.framework, p->cp_comm);
  const char *cp_why =
      vs_workload_cp_misfit(m, cp, comm, tp, vs_workload_sp(p));
  const char *seq_why =
      vs_workload_cp_seq_misfit(m->seq_len, cp, tp, vs_workload_sp(p));

  if (misfit && p->etp && strcmp(misfit, "expert_ffn_hidden") == 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: etp splits each routed expert's FFN: it must "
                        "divide expert_ffn_hidden (%llu)",
                        WHERE("parallel", "etp"), (unsigned long long)size);
  if (misfit)
    return vs_error_set(err, VS_EINPUT, "%s: tp must divide %s (%llu)",
                        WHERE("parallel", "tp"), misfit,
                        (unsigned long long)size);
  if (p->sequence_parallel && !vs_workload_sp_allowed(m->seq_len, tp))
    return vs_error_set(err, VS_EINPUT,
                        "%s: sequence parallelism needs seq_len (%llu) divisible "
                        "by tp (%llu)",
                        WHERE("parallel", "sequence_parallel"),
                        (unsigned long long)m->seq_len, (unsigned long long)tp);
  if (seq_why) { /* either may be the one to change: say where each is */
    char where_seq[400];
    vs_conf_where(&workload_tab, &wl->origins, "model", "seq_len", where_seq,
                  sizeof where_seq);
    return vs_error_set(err, VS_EINPUT, "%s: seq_len (%llu, %s) %s",
                        WHERE("parallel", "cp"), (unsigned long long)m->seq_len,
                        where_seq, seq_why);
  }
  if (cp_why) /* the heads rule of a2a, the framework's exchange or own */
    return vs_error_set(
        err, VS_EINPUT,
        "%s: %s (heads %llu, kv_heads %llu, tp x cp = "
        "%llu)%s%s%s",
        WHERE("parallel", "cp"), cp_why, (unsigned long long)m->heads,
        (unsigned long long)m->kv_heads, (unsigned long long)(tp * cp),
        comm != p->cp_comm ? "; framework = " : "",
        comm != p->cp_comm ? vs_framework_name(wl->training.framework) : "",
        comm != p->cp_comm ? " exchanges by all-to-all" : "");
  if (pp > m->layers)
    return vs_error_set(err, VS_EINPUT,
                        "%s: pp must not exceed layers (%llu)%s: every stage "
                        "needs a layer",
                        WHERE("parallel", "pp"), (unsigned long long)m->layers,
                        set_note(wl, "model", "layers", note, sizeof note));
  return resolve_dp(wl, gpus, err);
}

/* torchtune's optimizer_in_bwd steps each gradient as soon as it is made:
 * no accumulation over micro-batches, no reduction across replicas first
 * (its single-device recipe), no optimizer elsewhere. */
static int check_step_in_backward(const vs_workload *wl, vs_error *err)
{
  const vs_parallel_conf *p = &wl->parallel;
  char where[400];
  int fw = wl->training.framework;
  if (wl->training.optimizer_in_backward &&
      (fw == VS_FW_DEEPSPEED || fw == VS_FW_MEGATRON))
    return vs_error_set(err, VS_EINPUT,
                        "%s: stepping each gradient as backward makes it is "
                        "torchtune's (optimizer_in_bwd, PyTorch's "
                        "post-accumulate-grad hooks); %s's engine steps "
                        "after backward: use framework = hf, fsdp2 or none",
                        WHERE("training", "optimizer_in_backward"),
                        vs_framework_name(fw));
  if (vs_workload_step_in_backward_allowed(&wl->training, wl->grad_accum,
                                           vs_workload_shard_ranks(p), p->pp,
                                           p->offload_optimizer))
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: stepping each gradient as backward makes it "
                      "(torchtune's optimizer_in_bwd) needs one micro-batch "
                      "per step, dp = cp = 1, pp = 1 and the optimizer on "
                      "the GPU (here %llu micro-batches, dp x cp %llu, pp "
                      "%llu)",
                      WHERE("training", "optimizer_in_backward"),
                      (unsigned long long)wl->grad_accum,
                      (unsigned long long)(vs_workload_shard_ranks(p)),
                      (unsigned long long)p->pp);
}

/* Clipping takes the norm of all the gradients before any is stepped;
 * torchtune raises for clip_grad_norm with optimizer_in_bwd. */
static int check_clip_in_backward(const vs_workload *wl, vs_error *err)
{
  char where[400];
  if (!wl->training.optimizer_in_backward || !wl->training.grad_clipping)
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: clipping needs the norm of all the gradients "
                      "before any step, and optimizer_in_backward steps "
                      "each block as backward makes its gradients "
                      "(torchtune refuses clip_grad_norm with "
                      "optimizer_in_bwd); set it false",
                      WHERE("training", "grad_clipping"));
}

/* bitsandbytes' paged optimizers page each tensor's own states: not the
 * flat partitions of ZeRO, not states moved to the host. */
static int check_paged(const vs_workload *wl, vs_error *err)
{
  const vs_parallel_conf *p = &wl->parallel;
  char where[400];
  if (!vs_workload_paged_allowed(&wl->training, p->zero,
                                 p->offload_optimizer))
    return vs_error_set(err, VS_EINPUT,
                        "%s: bitsandbytes' paged optimizers page each tensor's "
                        "states in CUDA managed memory; they run with zero = 0 "
                        "and the optimizer on the GPU",
                        WHERE("training", "paged_optimizer"));
  return 0;
}

/* The offload keys against ZeRO and the optimizer. */
static int check_offload(const vs_workload *wl, vs_error *err)
{
  const vs_parallel_conf *p = &wl->parallel;
  const char *key, *why;
  char where[400];
  why = vs_workload_offload_misfit(p->zero, p->offload_optimizer,
                                   p->offload_params, &wl->training, &key);
  if (why)
    return vs_error_set(err, VS_EINPUT, "%s: %s", WHERE("parallel", key), why);
  return 0;
}

/* [parallel] offload_pin_memory: true unless set; false (pageable host
 * buffers) says how offloaded states or parameters are held, so it needs
 * some. */
static int check_pin_memory(vs_workload *wl, vs_error *err)
{
  vs_parallel_conf *p = &wl->parallel;
  char where[400];
  if (!vs_conf_is_set(&workload_tab, &wl->origins, "parallel",
                      "offload_pin_memory")) {
    p->offload_pin_memory = true;
    return 0;
  }
  if (p->offload_pin_memory || p->offload_optimizer != VS_OFFLOAD_NONE ||
      p->offload_params != VS_OFFLOAD_NONE)
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: says whether the host buffers of offloaded "
                      "optimizer states and parameters are pinned, and "
                      "offload_optimizer and offload_params are none: "
                      "offload one or leave it true",
                      WHERE("parallel", "offload_pin_memory"));
}

/* DeepSpeed's activation offload goes with full checkpointing
 * (vs_workload_activation_offload_allowed). */
static int check_activation_offload(const vs_workload *wl, vs_error *err)
{
  char where[400];
  if (vs_workload_activation_offload_allowed(&wl->training,
                                             wl->training.checkpointing))
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: DeepSpeed offloads activations with its "
                      "activation checkpointing (cpu_checkpointing), the "
                      "checkpointed layers' inputs, which vsim simulates "
                      "with checkpointing = full (here %s)",
                      WHERE("training", "offload_activations"),
                      vs_checkpointing_name(wl->training.checkpointing));
}

/* DeepSpeed accumulates 16-bit gradients in fp32 only under ZeRO:
 * without it engine.py _do_optimizer_sanity_check raises on a model and
 * a gradient-accumulation dtype that differ (since #7790, January 2026). */
static int check_deepspeed_grad_dtype(const vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  char where[400];
  if (t->framework != VS_FW_DEEPSPEED ||
      (t->precision != VS_PREC_BF16 && t->precision != VS_PREC_FP16) ||
      wl->parallel.zero != 0 || t->grad_dtype != VS_GRAD_FP32)
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: DeepSpeed accumulates %s gradients in fp32 "
                      "(grad_accum_dtype) only with ZeRO; without it its "
                      "engine refuses the mix (engine.py, since #7790): "
                      "use zero >= 1 (with bf16, zero = 1 runs its "
                      "BF16_Optimizer) or grad_dtype = precision",
                      WHERE("training", "grad_dtype"),
                      vs_precision_name(t->precision));
}

/* [parallel] max_live_parameters and max_reuse_distance tune DeepSpeed's
 * ZeRO-3 coordinator: elsewhere a value other than their 0 (what `vsim
 * show` writes back) would be ignored. */
static int check_coordinator_keys(const vs_workload *wl, vs_error *err)
{
  const vs_parallel_conf *p = &wl->parallel;
  const char *key =
      p->max_live_parameters ? "max_live_parameters" : "max_reuse_distance";
  char where[400];
  if (vs_workload_deepspeed_zero3(wl->training.framework, p->zero) ||
      (!p->max_live_parameters && !p->max_reuse_distance))
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: %s is DeepSpeed's ZeRO-3 parameter coordinator's "
                      "(stage3_%s): it needs framework = deepspeed and "
                      "zero = 3 (here %s, zero = %llu)",
                      WHERE("parallel", key), key, key,
                      vs_framework_name(wl->training.framework),
                      (unsigned long long)p->zero);
}

/* [training] fp8_recipe chooses torchao's recipe: another than its
 * default (rowwise, which nothing else reads) needs torchao's float8
 * (vs_workload_fp8_lib). */
static int check_fp8_recipe(const vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  char where[400];
  if (t->fp8_recipe == VS_FP8_ROWWISE ||
      vs_workload_fp8_lib(t->precision, t->framework) == VS_FP8_TORCHAO)
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: fp8_recipe chooses the recipe of torchao's "
                      "float8, which vsim simulates with precision = fp8 "
                      "under framework = fsdp2 (here %s under %s; "
                      "Transformer Engine's delayed scaling elsewhere)",
                      WHERE("training", "fp8_recipe"),
                      vs_precision_name(t->precision),
                      vs_framework_name(t->framework));
}

/* checkpointing = ops is modelled as torchtitan runs it: Llama blocks
 * with flash attention (its save list names the SDPA kernels), without
 * tensor parallelism (whose collectives it saves too). */
static int check_ops_checkpointing(vs_workload *wl, vs_error *err)
{
  char where[400];
  if (wl->training.checkpointing != VS_CKPT_OPS)
    return 0;
  if (vs_finetune_adapters(wl->finetune.method))
    return vs_error_set(err, VS_EINPUT,
                        "%s: torchtitan's op-level policy is simulated for "
                        "whole layers; a LoRA adapter's two matmuls would "
                        "shift its every-other-matmul rule (use full)",
                        WHERE("training", "checkpointing"));
  if (wl->model.arch != VS_ARCH_LLAMA || wl->training.attention != VS_ATTN_FLASH ||
      wl->parallel.tp != 1)
    return vs_error_set(err, VS_EINPUT,
                        "%s: torchtitan's op-level policy is simulated for "
                        "llama layers with flash attention and tp = 1 (here "
                        "arch = %s, attention = %s, tp = %llu); use selective "
                        "or full",
                        WHERE("training", "checkpointing"),
                        vs_arch_name(wl->model.arch),
                        wl->training.attention == VS_ATTN_FLASH ? "flash"
                                                                : "eager",
                        (unsigned long long)wl->parallel.tp);
  /* a linear with a bias runs aten.addmm, which the policy neither saves
   * nor counts among its matmuls (_save_list names aten.mm) */
  if (wl->model.attention_bias != VS_BIAS_NONE || wl->model.mlp_bias)
    return vs_error_set(err, VS_EINPUT,
                        "%s: torchtitan's op-level policy counts and saves "
                        "aten.mm alone, and a linear with a bias runs "
                        "aten.addmm; set attention_bias = none and mlp_bias "
                        "= false, or use selective or full",
                        wl->model.mlp_bias ? WHERE("model", "mlp_bias")
                                           : WHERE("model", "attention_bias"));
  return 0;
}

/* Liger Kernel's fused loss runs on whole logits rows: no tensor
 * parallelism (Megatron's vocab-parallel loss is the in-place one). */
static int check_fused_loss(vs_workload *wl, vs_error *err)
{
  char where[400];
  if (vs_workload_fused_loss_tp_allowed(&wl->training, wl->parallel.tp))
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: Liger Kernel's fused loss is not vocab-parallel; "
                      "use tp = 1 (with tp > 1, framework = megatron has "
                      "Megatron's in-place vocab-parallel loss)",
                      WHERE("training", "fused_cross_entropy"));
}

/* FSDP2 as the fsdp2 preset models it: fully_shard over dp > 1
 * (torchtitan applies it only when dp_shard > 1), every parameter
 * sharded (zero = 3), stepped in fp32 without a master copy. */
static int check_fsdp2(vs_workload *wl, vs_error *err)
{
  char where[400];
  if (wl->training.framework != VS_FW_FSDP2)
    return 0;
  if (vs_workload_shard_ranks(&wl->parallel) < 2)
    return vs_error_set(err, VS_EINPUT,
                        "%s: FSDP2 shards over data (and context) "
                        "parallelism, which this layout has not (dp = cp = "
                        "1; torchtitan applies fully_shard only when "
                        "dp_shard x cp > 1)",
                        WHERE("training", "framework"));
  if (wl->parallel.zero != 3)
    return vs_error_set(err, VS_EINPUT,
                        "%s: FSDP2's fully_shard shards every parameter; "
                        "with framework = fsdp2 use zero = 3",
                        WHERE("parallel", "zero"));
  if (wl->training.master_weights)
    return vs_error_set(err, VS_EINPUT,
                        "%s: FSDP2 steps its fp32 sharded parameters: there "
                        "is no master copy",
                        WHERE("training", "master_weights"));
  return 0;
}

/* The key that offloads something, or NULL. */
static const char *offload_key(const vs_workload *wl)
{
  return wl->parallel.offload_optimizer != VS_OFFLOAD_NONE ? "offload_optimizer"
         : wl->parallel.offload_params != VS_OFFLOAD_NONE  ? "offload_params"
         : wl->training.offload_activations != VS_OFFLOAD_NONE
             ? "offload_activations"
             : NULL;
}

/* Context parallelism as this version simulates it
 * (vs_workload_cp_settings_misfit), and cp_comm only with cp > 1. */
static int check_cp(vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  char where[400];
  if (wl->parallel.cp == 1 && wl->parallel.cp_comm != VS_CP_P2P)
    return vs_error_set(err, VS_EINPUT,
                        "%s: says how context-parallel ranks exchange keys "
                        "and values, and cp = 1; set [parallel] cp",
                        WHERE("parallel", "cp_comm"));
  if (wl->parallel.cp == 1)
    return 0;
  switch (vs_workload_cp_settings_misfit(t, wl->parallel.order)) {
  case VS_CP_MISFIT_ATTENTION:
    return vs_error_set(err, VS_EINPUT,
                        "%s: context parallelism runs flash attention on each "
                        "chunk (Megatron-LM's and PyTorch's context parallel "
                        "attention); set attention = flash",
                        WHERE("training", "attention"));
  case VS_CP_MISFIT_ORDER:
    return vs_error_set(err, VS_EINPUT,
                        "%s: context-parallel ranks sit next to the tensor-"
                        "parallel ones, which this version places with order "
                        "= tp-dp-pp only",
                        WHERE("parallel", "order"));
  case VS_CP_MISFIT_DP_ONLY:
    return vs_error_set(err, VS_EINPUT,
                        "%s: %s is simulated with data parallelism alone; use "
                        "cp = 1",
                        WHERE("parallel", "cp"),
                        t->framework == VS_FW_HF
                            ? "the Hugging Face Trainer (framework = hf)"
                            : "autocast");
  default:
    break;
  }
  if (wl->parallel.cp_comm !=
      vs_workload_framework_cp_comm(t->framework, wl->parallel.cp_comm))
    return vs_error_set(err, VS_EINPUT,
                        "%s: DeepSpeed's sequence parallelism (DeepSpeed-"
                        "Ulysses) exchanges heads by all-to-all and runs no "
                        "ring; set cp_comm = a2a",
                        WHERE("parallel", "cp_comm"));
  return 0;
}

/* Multi-head latent attention as this version simulates it: flash
 * attention (DeepSeek's kernels), trained whole, under none of the
 * policies written for standard attention. */
static int check_mla_training(vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  const char *key = t->attention != VS_ATTN_FLASH   ? "attention"
                    : wl->finetune.method != VS_FT_FULL ? "method"
                    : vs_precision_autocast(t->precision) ? "precision"
                    : t->checkpointing == VS_CKPT_OPS ? "checkpointing"
                                                      : NULL;
  char where[400];
  if (!key)
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: multi-head latent attention is simulated with "
                      "flash attention, method = full, a 16-bit or fp32 "
                      "precision and checkpointing none, selective or full",
                      WHERE(strcmp(key, "method") == 0 ? "finetune"
                                                       : "training",
                            key));
}

/* Expert parallelism's rules (vs_workload_ep_misfit), each refusal
 * naming its key (etp where only expert tensor parallelism breaks it). */
static int check_ep(vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  const vs_parallel_conf *p = &wl->parallel;
  uint64_t etp = vs_workload_etp(p);
  const char *key =
      vs_workload_ep_misfit(&wl->model, p->ep, etp, p->tp,
                            vs_workload_shard_ranks(p), p->zero, t->framework);
  bool by_ep = p->ep > 1; /* the key a refusal names: ep, else etp */
  char where[400];
  /* etp other than tp set on a dense model; etp = tp, what it means
   * unset, is plan.csv's parallel.etp there and replays as it */
  if (p->etp && p->etp != p->tp && wl->model.experts == 0 && !by_ep)
    key = "experts";
  if (key && wl->model.experts == 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: expert %s experts, which this model has none "
                        "of; set [model] experts",
                        WHERE("parallel", by_ep ? "ep" : "etp"),
                        by_ep ? "parallelism spreads"
                              : "tensor parallelism splits");
  if (key && strcmp(key, "experts") == 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: each of the ep ranks holds experts / ep experts: "
                        "ep must divide experts (%llu)",
                        WHERE("parallel", "ep"),
                        (unsigned long long)wl->model.experts);
  if (key && strcmp(key, "dp") == 0 && etp == p->tp)
    return vs_error_set(err, VS_EINPUT,
                        "%s: the ep ranks come out of the data- and "
                        "context-parallel ones (Megatron-LM's rule): ep must "
                        "divide dp x cp (%llu)",
                        WHERE("parallel", "ep"),
                        (unsigned long long)(vs_workload_shard_ranks(p)));
  if (key && strcmp(key, "dp") == 0)
    return vs_error_set(
        err, VS_EINPUT,
        "%s: the expert grid (etp x ep x expert-data-parallel "
        "ranks) is made of a stage's tp x dp x cp = %llu "
        "ranks (Megatron-LM's rule): etp x ep = %llu must "
        "divide them",
        WHERE("parallel", "etp"),
        (unsigned long long)(p->tp * vs_workload_shard_ranks(p)),
        (unsigned long long)(etp * p->ep));
  if (key && strcmp(key, "framework") == 0) {
    /* blame ep where the framework runs no expert parallelism at all */
    bool no_ep =
        by_ep && !vs_workload_framework_runs_ep(t->framework, VS_ETP_AS_TP);
    return vs_error_set(err, VS_EINPUT,
                        "%s: expert %sparallelism is simulated as Megatron-LM "
                        "runs it; %s has none here: use %s",
                        WHERE("parallel", no_ep ? "ep" : "etp"),
                        no_ep ? "" : "tensor ", vs_framework_name(t->framework),
                        no_ep ? "ep = 1" : "etp = tp");
  }
  /* DeepSpeed runs ZeRO-0 to 2 with expert parallelism
   * (vs_workload_ep_zero_max; its tests/unit/moe/test_moe.py TestMoE runs
   * ep_size 2 and 4 at zero stages 0, 1 and 2), not ZeRO-3: its refusal,
   * not Megatron-LM's rule */
  if (key && t->framework == VS_FW_DEEPSPEED)
    return vs_error_set(
        err, VS_EINPUT,
        "%s: with ep > 1 deepspeed partitions the experts' states and "
        "gradients over their expert-data-parallel group up to ZeRO-2; its "
        "engine refuses ZeRO-3 with MoE layers (\"MoE not supported with "
        "Stage 3\"): use zero = 2 or less, or ep = 1",
        WHERE("parallel", "zero"));
  if (key)
    return vs_error_set(err, VS_EINPUT,
                        "%s: with ep > 1 (or etp other than tp) the expert "
                        "states shard over the expert-data-parallel group as "
                        "Megatron-LM's distributed optimizer does; use zero = "
                        "0 or 1 (or ep = 1 and etp = tp)",
                        WHERE("parallel", "zero"));
  return 0;
}

/* What a mixture of experts is simulated with: sequence parallelism
 * beside tp, full fine-tuning, 16-bit weights, Megatron's checkpointing
 * policies. */
static int check_experts_training(const vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  char where[400];
  if (!vs_workload_moe_tp_allowed(&wl->model, wl->parallel.tp,
                                  wl->parallel.sequence_parallel,
                                  t->framework))
    return vs_error_set(err, VS_EINPUT,
                        "%s: mixture-of-experts layers with tp > 1 run as "
                        "Megatron-LM runs them, with sequence parallelism "
                        "(the dispatcher gathers each expert's tokens over "
                        "tp); set sequence_parallel = true",
                        WHERE("parallel", "sequence_parallel"));
  if (wl->finetune.method != VS_FT_FULL)
    return vs_error_set(err, VS_EINPUT,
                        "%s: fine-tuning a mixture of experts with frozen "
                        "weights or adapters is not simulated; use method = "
                        "full",
                        WHERE("finetune", "method"));
  if (vs_precision_autocast(t->precision))
    return vs_error_set(err, VS_EINPUT,
                        "%s: autocast over a mixture of experts is not "
                        "simulated; use precision = bf16 or fp16",
                        WHERE("training", "precision"));
  if (t->checkpointing == VS_CKPT_OPS)
    return vs_error_set(err, VS_EINPUT,
                        "%s: torchtitan's op-level policy is simulated for "
                        "dense Llama blocks; use full or selective",
                        WHERE("training", "checkpointing"));
  return 0;
}

/* Mixtures of experts as this version simulates them: Megatron-LM's
 * layers (expert and tensor parallelism as it runs them), trained whole,
 * under none of the policies written for dense layers (autocast's casts,
 * torchtitan's op-level checkpointing). */
static int check_moe(vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  const vs_parallel_conf *p = &wl->parallel;
  int rc;
  char where[400];
  if ((rc = check_ep(wl, err)))
    return rc;
  if (!vs_workload_moe_tp_split_allowed(&wl->model, p->tp, t->framework))
    return vs_error_set(err, VS_EINPUT,
                        "%s: mixture-of-experts layers and latent attention "
                        "with tp > 1 are simulated as Megatron-LM splits "
                        "them; %s splits them otherwise: use tp = 1 or "
                        "framework = megatron",
                        WHERE("parallel", "tp"),
                        vs_framework_name(t->framework));
  if (!vs_workload_ep_order_allowed(vs_workload_experts_apart(p), p->order,
                                    p->pp))
    return vs_error_set(err, VS_EINPUT,
                        "%s: with ep > 1 (or etp other than tp) and a "
                        "pipeline, Megatron-LM places "
                        "the expert groups with order = tp-dp-pp (its "
                        "tp-pp-dp mapping leaves the pipeline outermost); "
                        "use order = tp-dp-pp",
                        WHERE("parallel", "order"));
  if (vs_workload_experts_apart(p) &&
      !vs_workload_experts_apart_allowed(offload_key(wl) != NULL))
    return vs_error_set(err, VS_EINPUT,
                        "%s: offload is not simulated where the routed "
                        "experts have groups of their own (ep > 1, or etp "
                        "other than tp): offload none, or use ep = 1 with "
                        "etp = tp",
                        WHERE(strcmp(offload_key(wl), "offload_activations")
                                  ? "parallel"
                                  : "training",
                              offload_key(wl)));
  if (wl->model.kv_lora_rank > 0 && (rc = check_mla_training(wl, err)))
    return rc;
  return wl->model.experts ? check_experts_training(wl, err) : 0;
}

/* Autocast over fp32 weights is the Trainer's and plain PyTorch's: no
 * other framework's mixed precision. */
static int check_autocast_framework(const vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  char where[400];
  if (!vs_precision_autocast(t->precision) || t->framework == VS_FW_NONE ||
      t->framework == VS_FW_HF)
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: autocast over fp32 weights is the Hugging Face "
                      "Trainer's and plain PyTorch's recipe; %s runs its "
                      "own mixed precision (16-bit weights, or per-module "
                      "casts): use precision = bf16 or fp16",
                      WHERE("training", "precision"),
                      vs_framework_name(t->framework));
}

/* The Trainer and autocast run data parallelism alone, without offload
 * (vs_workload_dp_only_misfit names the key that breaks it). */
static int check_dp_only_layout(const vs_workload *wl, vs_error *err)
{
  const vs_parallel_conf *p = &wl->parallel;
  const vs_training_conf *t = &wl->training;
  const char *off = offload_key(wl), *who;
  const char *key = vs_workload_dp_only_misfit(t->precision, t->framework,
                                               p->tp, p->pp, p->zero,
                                               off != NULL);
  char where[400];
  if (!key)
    return 0;
  who = t->framework == VS_FW_HF ? "the Hugging Face Trainer (framework = hf)"
                                 : "autocast";
  if (strcmp(key, "offload_optimizer") == 0 &&
      strcmp(off, "offload_activations") == 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: %s is simulated without activation offload "
                        "(Megatron-LM's, which offloads with its own mixed "
                        "precision: precision = bf16 or fp16)",
                        WHERE("training", off), who);
  if (strcmp(key, "offload_optimizer") == 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: %s is simulated without offload (DeepSpeed "
                        "offloads with its own mixed precision: framework = "
                        "deepspeed, precision = bf16 or fp16)",
                        WHERE("parallel", off), who);
  return vs_error_set(err, VS_EINPUT,
                      "%s: %s is simulated with data parallelism alone: tp = "
                      "1, pp = 1 "
                      "and %s (here tp = %llu, pp = %llu, zero = %llu)",
                      WHERE("parallel", key), who,
                      t->framework == VS_FW_HF
                          ? "zero = 0 (the Trainer's DDP; for ZeRO use "
                            "framework = deepspeed or fsdp2)"
                          : "zero <= 2 (ZeRO-3 and FSDP cast per module: "
                            "framework = fsdp2 with precision = bf16)",
                      (unsigned long long)p->tp, (unsigned long long)p->pp,
                      (unsigned long long)p->zero);
}

/* The precisions, fine-tunes and checkpointing the Trainer and autocast
 * are simulated with. */
static int check_dp_only_recipe(const vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  bool amp = vs_precision_autocast(t->precision);
  char where[400];
  if (t->framework == VS_FW_HF && t->precision == VS_PREC_FP8)
    return vs_error_set(err, VS_EINPUT,
                        "%s: the Trainer's FP8 goes through Accelerate's "
                        "Transformer Engine integration, not simulated under "
                        "framework = hf; use amp_bf16, bf16 or fp16",
                        WHERE("training", "precision"));
  if (t->framework == VS_FW_HF && t->precision == VS_PREC_FP16 &&
      wl->finetune.method == VS_FT_FULL)
    return vs_error_set(err, VS_EINPUT,
                        "%s: the Trainer's fp16 = True unscales fp16 "
                        "gradients, which GradScaler refuses (\"Attempting "
                        "to unscale FP16 gradients\"): train fp32 weights "
                        "under precision = amp_fp16, or fp16 ones only "
                        "frozen (method = lora, qlora or frozen)",
                        WHERE("training", "precision"));
  if (amp && wl->finetune.method != VS_FT_FULL)
    return vs_error_set(err, VS_EINPUT,
                        "%s: autocast is simulated over an fp32 model trained "
                        "whole; PEFT fine-tunes load the base in 16 bits "
                        "(torch_dtype = bfloat16): use precision = bf16 (the "
                        "adapters stay fp32: adapter_dtype)",
                        WHERE("training", "precision"));
  if (amp && t->checkpointing == VS_CKPT_OPS)
    return vs_error_set(err, VS_EINPUT,
                        "%s: torchtitan's op-level policy runs under FSDP2's "
                        "per-module casts, not autocast; use full or "
                        "selective",
                        WHERE("training", "checkpointing"));
  return 0;
}

/* Autocast and the Hugging Face Trainer: data parallelism alone
 * (vs_workload_dp_only_misfit); autocast as the Trainer and plain
 * PyTorch run it: a whole fp32 model, under no other framework's
 * mixed precision. */
static int check_dp_only(vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  int rc;
  if (!vs_workload_dp_only(t->precision, t->framework))
    return 0;
  if ((rc = check_autocast_framework(wl, err)) ||
      (rc = check_dp_only_layout(wl, err)))
    return rc;
  return check_dp_only_recipe(wl, err);
}

/* [training] checkpoint_layers and checkpoint_every choose layers for
 * full checkpointing, one way or the other. */
static int check_checkpoint_choice(vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  const char *key = t->checkpoint_layers ? "checkpoint_layers"
                    : t->checkpoint_every ? "checkpoint_every"
                                          : NULL;
  char where[400];
  if (!key)
    return 0;
  if (t->checkpoint_layers && t->checkpoint_every)
    return vs_error_set(err, VS_EINPUT,
                        "%s: choose the checkpointed layers one way: the "
                        "first N of each model chunk (checkpoint_layers, "
                        "Megatron-LM's block method) or every N-th "
                        "(checkpoint_every, torchtitan), not both",
                        WHERE("training", "checkpoint_every"));
  if (t->checkpointing != VS_CKPT_FULL)
    return vs_error_set(err, VS_EINPUT,
                        "%s: chooses which layers full checkpointing "
                        "recomputes; set checkpointing = full",
                        WHERE("training", key));
  if ((t->checkpoint_layers ? t->checkpoint_layers : t->checkpoint_every) >
      wl->model.layers)
    return vs_error_set(err, VS_EINPUT, "%s: more than the model's %llu layers",
                        WHERE("training", key),
                        (unsigned long long)wl->model.layers);
  return 0;
}

/* [parallel] p2p and p2p_scatter_gather say how pipeline stages send:
 * refused where there is nothing for them to do. */
static int check_p2p(vs_workload *wl, vs_error *err)
{
  const vs_parallel_conf *p = &wl->parallel;
  char where[400];
  if (p->pp == 1 && p->p2p != VS_P2P_OVERLAPPED)
    return vs_error_set(err, VS_EINPUT,
                        "%s: says whether a pipeline stage waits for its "
                        "sends, and pp = 1; set [parallel] pp",
                        WHERE("parallel", "p2p"));
  if (!p->p2p_scatter_gather)
    return 0;
  if (p->pp == 1 || p->tp == 1)
    return vs_error_set(err, VS_EINPUT,
                        "%s: splits each pipeline send over the "
                        "tensor-parallel ranks, and %s = 1; set [parallel] "
                        "%s",
                        WHERE("parallel", "p2p_scatter_gather"),
                        p->pp == 1 ? "pp" : "tp", p->pp == 1 ? "pp" : "tp");
  if (p->sequence_parallel)
    return vs_error_set(err, VS_EINPUT,
                        "%s: with sequence parallelism each rank's pipeline "
                        "tensor is already its 1/tp (Megatron-LM skips "
                        "scatter/gather then); set one of the two false",
                        WHERE("parallel", "p2p_scatter_gather"));
  return 0;
}

/* [parallel] overlap_grad_reduce: true unless set (or a preset's);
 * false needs a reduction that can wait (vs_workload_reduce_can_wait). */
static int check_grad_reduce(vs_workload *wl, vs_error *err)
{
  vs_parallel_conf *p = &wl->parallel;
  char where[400];
  if (!vs_conf_is_set(&workload_tab, &wl->origins, "parallel",
                      "overlap_grad_reduce")) {
    p->overlap_grad_reduce = true;
    return 0;
  }
  if (p->overlap_grad_reduce ||
      vs_workload_reduce_can_wait(p->zero,
                                  vs_workload_optimizer_at(&wl->training)))
    return 0;
  if (p->zero >= 3)
    return vs_error_set(err, VS_EINPUT,
                        "%s: ZeRO-3 reduce-scatters on a stream of its own "
                        "(DeepSpeed's reduce_and_partition_stream, FSDP2's) "
                        "whatever overlap_comm says: use zero = 0, 1 or 2, "
                        "or overlap_grad_reduce = true",
                        WHERE("parallel", "overlap_grad_reduce"));
  return vs_error_set(err, VS_EINPUT,
                      "%s: reduces the step's gradients once its backward "
                      "pass is done, but optimizer_in_backward steps each "
                      "block as its gradients appear: set one of them "
                      "otherwise",
                      WHERE("parallel", "overlap_grad_reduce"));
}

/* Gradient-accumulation fusion is Megatron-LM's fused kernel
 * (--gradient-accumulation-fusion, on unless --no-gradient-accumulation-
 * fusion: the weight-gradient GEMM accumulates into the fp32 main
 * gradient, apex's fused_weight_gradient_mlp_cuda), which framework =
 * none's fused kernels stand for; eager PyTorch, and the Trainer,
 * DeepSpeed and FSDP2 even compiled, add each new gradient in a kernel
 * of its own (AccumulateGrad, or their hooks). */
static int check_grad_accumulation(vs_workload *wl, vs_error *err)
{
  vs_training_conf *t = &wl->training;
  bool has_fusion = vs_framework_megatron(t->framework);
  bool eager = t->kernels == VS_KERNELS_EAGER;
  char where[400];
  if (!vs_conf_is_set(&workload_tab, &wl->origins, "training",
                      "grad_accumulation_fusion"))
    t->grad_accumulation_fusion = has_fusion && !eager;
  else if (t->grad_accumulation_fusion && (eager || !has_fusion))
    return vs_error_set(err, VS_EINPUT,
                        "%s: gradient-accumulation fusion is Megatron-LM's "
                        "fused weight-gradient GEMM; %s add each gradient "
                        "in a kernel of its own: set grad_accumulation_fusion "
                        "= false",
                        WHERE("training", "grad_accumulation_fusion"),
                        eager ? "eager kernels (kernels = eager)"
                              : "the Trainer, DeepSpeed and FSDP2");
  return 0;
}

/* [training] set_grads_to_none is what the training loop's
 * optimizer.zero_grad() does to gradients PyTorch keeps per parameter:
 * the Trainer's and torchtitan's loops (framework hf, fsdp2). Megatron-LM
 * zeroes its contiguous gradient buffer in place (zero_grad_buffer),
 * DeepSpeed keeps its own partitions, and framework none keeps resident
 * gradients. */
static int check_zero_grad(const vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  char where[400];
  if (!t->set_grads_to_none || t->framework == VS_FW_HF ||
      t->framework == VS_FW_FSDP2)
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: a PyTorch loop's optimizer.zero_grad() sets "
                      "gradients to None (framework = hf or fsdp2), and "
                      "framework = %s keeps them: Megatron-LM zeroes its "
                      "contiguous gradient buffer in place, DeepSpeed keeps "
                      "its own partitions and framework none resident "
                      "gradients; set it false",
                      WHERE("training", "set_grads_to_none"),
                      vs_framework_name(t->framework));
}

/* Why wl cannot step with PyTorch's foreach implementation, or NULL:
 * it is torch.optim's (Adam, AdamW, SGD with or without momentum), on
 * the GPU, over the whole parameter list at once, and the frameworks
 * with their own optimizers step fused. */
static const char *foreach_refused(const vs_workload *wl)
{
  const vs_training_conf *t = &wl->training;
  if (t->optimizer != VS_OPT_ADAMW && t->optimizer != VS_OPT_ADAM &&
      t->optimizer != VS_OPT_SGD && t->optimizer != VS_OPT_MOMENTUM)
    return "foreach is torch.optim's implementation, for adamw, adam, sgd "
           "and momentum";
  if (t->framework == VS_FW_MEGATRON || t->framework == VS_FW_DEEPSPEED)
    return "Megatron-LM and DeepSpeed step with their own fused Adam "
           "(apex's or Transformer Engine's, DeepSpeed's FusedAdam)";
  if (wl->parallel.offload_optimizer != VS_OFFLOAD_NONE)
    return "an offloaded optimizer steps on the host "
           "([node] cpu_optimizer_rate)";
  if (t->paged_optimizer || t->optimizer_in_backward)
    return "paged optimizers and the optimizer in backward step tensor by "
           "tensor";
  if (t->master_weights)
    return "torch.optim steps the model's own parameters, and master "
           "weights are a mixed-precision wrapper's (master_weights = "
           "true, the default below fp32 without autocast: set it false)";
  return NULL;
}

/* framework = megatron steps with the optimizers Megatron-LM's
 * --optimizer offers (megatron/training/arguments.py: adam, sgd with
 * --sgd-momentum, lion, and the Muon and SOAP ones vsim has no key for):
 * not Adafactor or bitsandbytes' 8-bit Adam. */
static int check_megatron_optimizer_kind(const vs_workload *wl, vs_error *err)
{
  char where[400];
  int o = wl->training.optimizer;
  if (wl->training.framework != VS_FW_MEGATRON ||
      (o != VS_OPT_ADAFACTOR && o != VS_OPT_ADAM8BIT))
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: Megatron-LM's --optimizer offers adam, sgd "
                      "(vsim's momentum with its default --sgd-momentum "
                      "0.9, sgd with 0) and lion; use one of adamw, adam, "
                      "sgd, momentum or lion",
                      WHERE("training", "optimizer"));
}

/* The section of workload key `name` (the key names are unique). */
static const char *section_of(const char *name)
{
  for (size_t i = 0; i < workload_tab.n_keys; i++)
    if (strcmp(workload_keys[i].name, name) == 0)
      return workload_keys[i].section;
  return "training";
}

/* Megatron-LM's precision-aware optimizer with its state dtypes, and its
 * FP8 primary weights, where their misfit rules allow them. */
static int check_megatron_optimizer(const vs_workload *wl, vs_error *err)
{
  char where[400];
  const char *key;
  const vs_parallel_conf *p = &wl->parallel;
  const char *why = vs_workload_megatron_optimizer_misfit(
      &wl->training, p->zero, p->offload_optimizer, wl->finetune.method, &key);
  if (!why)
    return 0;
  return vs_error_set(err, VS_EINPUT, "%s: %s", WHERE(section_of(key), key),
                      why);
}

/* [training] optimizer_impl = foreach where foreach_refused allows it. */
static int check_optimizer_impl(const vs_workload *wl, vs_error *err)
{
  char where[400];
  const char *why = foreach_refused(wl);
  if (wl->training.optimizer_impl != VS_OPTIMPL_FOREACH || !why)
    return 0;
  return vs_error_set(err, VS_EINPUT, "%s: %s; use optimizer_impl = fused",
                      WHERE("training", "optimizer_impl"), why);
}

/* The micro-batches per step (grad_accum) from global_batch, micro_batch
 * and dp; global_batch defaults to one micro-batch per replica. */
static int resolve_grad_accum(vs_workload *wl, vs_error *err)
{
  vs_training_conf *t = &wl->training;
  vs_parallel_conf *p = &wl->parallel;
  char where[400];
  uint64_t replica_batch;

  /* A product that wraps to 0 would divide by zero below. */
  if (__builtin_mul_overflow(t->micro_batch, p->dp, &replica_batch))
    return vs_error_set(err, VS_EINPUT,
                        "%s: micro_batch * dp = %llu * %llu does not fit 64 bits",
                        WHERE("training", "micro_batch"),
                        (unsigned long long)t->micro_batch,
                        (unsigned long long)p->dp);
  if (!vs_conf_is_set(&workload_tab, &wl->origins, "training", "global_batch"))
    t->global_batch = replica_batch;
  if (!vs_workload_batch_allowed(t->global_batch, t->micro_batch, p->dp))
    return vs_error_set(err, VS_EINPUT,
                        "%s: global_batch must be a multiple of micro_batch * dp "
                        "= %llu * %llu = %llu",
                        WHERE("training", "global_batch"),
                        (unsigned long long)t->micro_batch,
                        (unsigned long long)p->dp,
                        (unsigned long long)replica_batch);
  wl->grad_accum = t->global_batch / replica_batch;
  if (wl->grad_accum > VS_MAX_MICROBATCHES)
    return vs_error_set(err, VS_EINPUT,
                        "%s: %llu micro-batches per step (global_batch / "
                        "(micro_batch * dp)) are more than vsim simulates "
                        "(%d); raise micro_batch or dp, or lower global_batch",
                        WHERE("training", "global_batch"),
                        (unsigned long long)wl->grad_accum,
                        VS_MAX_MICROBATCHES);
  return 0;
}

/* master_weights: by default wherever the precision can have them
 * (vs_precision_has_master); set, only there. */
static int resolve_master_weights(vs_workload *wl, vs_error *err)
{
  vs_training_conf *t = &wl->training;
  char where[400];
  if (!vs_conf_is_set(&workload_tab, &wl->origins, "training", "master_weights"))
    t->master_weights = vs_precision_has_master(t->precision);
  else if (t->master_weights && t->precision == VS_PREC_FP32)
    return vs_error_set(err, VS_EINPUT,
                        "%s: master weights only exist when precision is below "
                        "fp32 (precision = fp32 here)",
                        WHERE("training", "master_weights"));
  else if (t->master_weights && vs_precision_autocast(t->precision))
    return vs_error_set(err, VS_EINPUT,
                        "%s: autocast (precision = %s) keeps the weights in "
                        "fp32 and casts them per op: there is no master copy",
                        WHERE("training", "master_weights"),
                        vs_precision_name(t->precision));
  return 0;
}

/* The [training] keys: the step's micro-batches and master weights
 * resolved, then offload, paged optimizers, gradient accumulation, the
 * optimizer's implementation and a step in backward checked. */
static int check_training(vs_workload *wl, vs_error *err)
{
  int rc;
  if ((rc = resolve_grad_accum(wl, err)) ||
      (rc = resolve_master_weights(wl, err)) || (rc = check_offload(wl, err)) ||
      (rc = check_pin_memory(wl, err)) ||
      (rc = check_activation_offload(wl, err)) ||
      (rc = check_fp8_recipe(wl, err)) || (rc = check_paged(wl, err)) ||
      (rc = check_coordinator_keys(wl, err)) ||
      (rc = check_deepspeed_grad_dtype(wl, err)) ||
      (rc = check_grad_accumulation(wl, err)) ||
      (rc = check_zero_grad(wl, err)) || (rc = check_optimizer_impl(wl, err)) ||
      (rc = check_megatron_optimizer_kind(wl, err)) ||
      (rc = check_megatron_optimizer(wl, err)))
    return rc;
  if ((rc = check_step_in_backward(wl, err)))
    return rc;
  return check_clip_in_backward(wl, err);
}

/* [finetune] method = full: every weight trains, in the training
 * precision, so neither LoRA's keys, a base format nor a frozen prefix
 * mean anything. */
static int check_full(vs_workload *wl, const char *lora_key, vs_error *err)
{
  const vs_finetune_conf *f = &wl->finetune;
  char where[400], note[420];
  if (lora_key)
    return vs_error_set(
        err, VS_EINPUT,
        "%s: LoRA's keys mean nothing with method = full%s%s; "
        "set method = lora or qlora",
        WHERE("finetune", lora_key),
        vs_conf_is_set(&workload_tab, &wl->origins, "finetune", "method")
            ? ""
            : " (the default)",
        set_note(wl, "finetune", "method", note, sizeof note));
  if (f->base_dtype != VS_BASE_PRECISION)
    return vs_error_set(err, VS_EINPUT,
                        "%s: with method = full every weight is trained in "
                        "the training precision; a base format of its own "
                        "needs frozen weights (method = frozen, lora or "
                        "qlora)",
                        WHERE("finetune", "base_dtype"));
  if (f->trainable_layers > 0 && f->trainable_layers < wl->model.layers)
    return vs_error_set(err, VS_EINPUT,
                        "%s: with method = full every layer trains; to train "
                        "only the last %llu, set method = frozen",
                        WHERE("finetune", "trainable_layers"),
                        (unsigned long long)f->trainable_layers);
  return 0;
}

/* [finetune] method = frozen: the base frozen but for its last
 * trainable_layers layers, which train whole; no adapters. */
static int check_frozen(vs_workload *wl, const char *lora_key, vs_error *err)
{
  const vs_finetune_conf *f = &wl->finetune;
  char where[400];
  if (lora_key)
    return vs_error_set(err, VS_EINPUT,
                        "%s: method = frozen trains whole layers and has no "
                        "adapters; for adapters set method = lora or qlora",
                        WHERE("finetune", lora_key));
  if (wl->model.layers < 2)
    return vs_error_set(err, VS_EINPUT,
                        "%s: method = frozen trains the last trainable_layers "
                        "layers and freezes the rest, which needs a model of "
                        "at least 2 layers; use method = full",
                        WHERE("finetune", "method"));
  if (f->trainable_layers == 0 || f->trainable_layers >= wl->model.layers)
    return vs_error_set(
        err, VS_EINPUT,
        "%s: method = frozen trains the last trainable_layers layers and "
        "freezes the rest; set [finetune] trainable_layers from 1 to %llu "
        "(with every layer trained, use method = full)",
        /* unset, it is the method the user wrote that asks for it */
        vs_conf_is_set(&workload_tab, &wl->origins, "finetune",
                       "trainable_layers")
            ? WHERE("finetune", "trainable_layers")
            : WHERE("finetune", "method"),
        (unsigned long long)wl->model.layers - 1);
  return 0;
}

int vs_workload_base_dtype(const vs_workload *wl)
{
  if (wl->finetune.method == VS_FT_QLORA &&
      !vs_conf_is_set(&workload_tab, &wl->origins, "finetune", "base_dtype"))
    return VS_BASE_NF4;
  return wl->finetune.base_dtype; /* its own, or the default: precision */
}

/* [finetune] method = lora or qlora: adapters on a frozen base, QLoRA's
 * base in nf4 (its default: vs_workload_base_dtype) and no other's. */
static int check_adapters(vs_workload *wl, vs_error *err)
{
  vs_finetune_conf *f = &wl->finetune;
  char where[400];
  f->base_dtype = vs_workload_base_dtype(wl);
  if (f->method == VS_FT_QLORA && f->base_dtype != VS_BASE_NF4)
    return vs_error_set(err, VS_EINPUT,
                        "%s: QLoRA stores the frozen base in nf4 (Dettmers et "
                        "al. 2023); for adapters on a %s base use method = lora",
                        WHERE("finetune", "base_dtype"),
                        vs_base_dtype_name(f->base_dtype));
  if (f->method == VS_FT_LORA && f->base_dtype == VS_BASE_NF4)
    return vs_error_set(err, VS_EINPUT,
                        "%s: adapters on a 4-bit base are QLoRA; use method = "
                        "qlora",
                        WHERE("finetune", "base_dtype"));
  if (wl->model.arch != VS_ARCH_LLAMA && (f->lora_targets & 1u << VS_LORA_GATE))
    return vs_error_set(err, VS_EINPUT,
                        "%s: a %s MLP has no gate projection; targets are q, "
                        "k, v, o, up and down",
                        WHERE("finetune", "lora_targets"),
                        vs_arch_name(wl->model.arch));
  return 0;
}

/* Where DeepSpeed casts every floating-point parameter to the model's
 * dtype (vs_workload_deepspeed_casts): adapters (the preset's
 * adapter_dtype) and a frozen base stored in floating point are in the
 * training precision; bitsandbytes' int8 and nf4 storage is not cast. */
static int check_deepspeed_casts(const vs_workload *wl, vs_error *err)
{
  const vs_finetune_conf *f = &wl->finetune;
  int prec = wl->training.precision;
  int adapter = vs_workload_deepspeed_adapter_dtype(&wl->training);
  int base = vs_workload_deepspeed_base_dtype(&wl->training);
  bool floating_base = f->base_dtype != VS_BASE_PRECISION &&
                       f->base_dtype != VS_BASE_INT8 &&
                       f->base_dtype != VS_BASE_NF4;
  const char *key = NULL;
  char where[400];
  if (!vs_workload_deepspeed_casts(&wl->training, &wl->parallel))
    return 0;
  if (vs_finetune_adapters(f->method) && f->adapter_dtype != adapter)
    key = "adapter_dtype";
  else if (floating_base && f->base_dtype != base)
    key = "base_dtype";
  if (!key)
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: DeepSpeed casts every floating-point parameter to "
                      "the model's dtype (engine.py "
                      "_cast_module_mixed_precision), so under precision = "
                      "%s %s must be %s%s; only at zero = 3 (a model built "
                      "under zero.Init) does it keep them as they are",
                      WHERE("finetune", key), vs_precision_name(prec), key,
                      vs_precision_name(prec),
                      key[0] == 'b' ? " (or precision, int8 or nf4)" : "");
}

/* [finetune] double_quant is NF4's (bitsandbytes' compress_statistics):
 * away from its default it needs an nf4 base (after check_adapters, which
 * gives qlora its nf4). */
static int check_double_quant(const vs_workload *wl, vs_error *err)
{
  const vs_finetune_conf *f = &wl->finetune;
  char where[400];
  if (f->base_dtype == VS_BASE_NF4 || !key_changed(wl, GATED_DOUBLE_QUANT))
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: double quantization is nf4's (bitsandbytes' "
                      "compress_statistics), but base_dtype is %s; remove "
                      "double_quant or use base_dtype = nf4 (method = qlora)",
                      WHERE("finetune", "double_quant"),
                      vs_base_dtype_name(f->base_dtype));
}

/* [finetune]: each method's own rules, then what every frozen base
 * shares: its layers fit the model, and adapters and bitsandbytes'
 * formats run without tensor parallelism. */
static int check_finetune(vs_workload *wl, vs_error *err)
{
  const vs_finetune_conf *f = &wl->finetune;
  const char *lora_key = key_changed(wl, GATED_LORA);
  char where[400];
  int rc;

  if (f->trainable_layers > wl->model.layers)
    return vs_error_set(err, VS_EINPUT, "%s: more than the model's %llu layers%s",
                        WHERE("finetune", "trainable_layers"),
                        (unsigned long long)wl->model.layers,
                        f->method == VS_FT_FROZEN ? "" : "; 0 trains all");
  rc = f->method == VS_FT_FULL     ? check_full(wl, lora_key, err)
       : f->method == VS_FT_FROZEN ? check_frozen(wl, lora_key, err)
                                   : check_adapters(wl, err);
  if (rc || (rc = check_deepspeed_casts(wl, err)) ||
      (rc = check_double_quant(wl, err)))
    return rc;
  if (!vs_workload_finetune_tp_allowed(f, wl->parallel.tp))
    return vs_error_set(err, VS_EINPUT,
                        "%s: %s simulated without tensor parallelism (PEFT's "
                        "and bitsandbytes' layers are not tensor-parallel); "
                        "use tp = 1",
                        WHERE("parallel", "tp"),
                        vs_finetune_adapters(f->method)
                            ? "LoRA adapters are"
                            : "an int8 or nf4 base is");
  /* bitsandbytes' Linear8bitLt and Linear4bit are no Transformer Engine
   * modules: their GEMMs run on 16-bit copies of the weights */
  if (wl->training.precision == VS_PREC_FP8 && f->method != VS_FT_FULL &&
      (f->base_dtype == VS_BASE_INT8 || f->base_dtype == VS_BASE_NF4))
    return vs_error_set(
        err, VS_EINPUT,
        "%s: an %s base is bitsandbytes' layers, which "
        "%s does not run; use precision = bf16 or fp16%s",
        WHERE("training", "precision"), vs_base_dtype_name(f->base_dtype),
        vs_workload_fp8_lib(wl->training.precision, wl->training.framework) ==
                VS_FP8_TORCHAO
            ? "torchao's float8"
            : "Transformer Engine",
        f->method == VS_FT_QLORA
            ? ""
            : " (or base_dtype = fp8, Transformer Engine's "
              "own FP8 weights)");
  return 0;
}

/* The smallest max_split_size_mb PyTorch takes: kLargeBuffer (20 MiB, the
 * large pool's segment) in MiB (c10/core/AllocatorConfig.cpp
 * parseMaxSplitSize: "max_split_size_mb too small, must be >= 20"; the
 * CUDA allocator's own parser before it wanted more than 20). */
#define MIN_MAX_SPLIT_MB 20

/* The caching allocator's settings. */
static int check_runtime(const vs_workload *wl, vs_error *err)
{
  char where[400];

  if (wl->runtime.allocator == VS_ALLOC_EXACT &&
      (wl->runtime.expandable_segments || wl->runtime.max_split_size_mb ||
       wl->runtime.roundup_power2_divisions))
    return vs_error_set(err, VS_EINPUT,
                        "%s: expandable_segments, max_split_size_mb and "
                        "roundup_power2_divisions configure the caching "
                        "allocator; they mean nothing with allocator = exact",
                        WHERE("runtime", "allocator"));
  if (wl->runtime.max_split_size_mb &&
      wl->runtime.max_split_size_mb < MIN_MAX_SPLIT_MB)
    return vs_error_set(err, VS_EINPUT,
                        "%s: must be 0 (no limit) or at least %d (PyTorch's "
                        "smallest, its 20 MiB large segment)",
                        WHERE("runtime", "max_split_size_mb"),
                        MIN_MAX_SPLIT_MB);
  if (wl->runtime.roundup_power2_divisions > 1 &&
      (wl->runtime.roundup_power2_divisions &
       (wl->runtime.roundup_power2_divisions - 1)) != 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: must be a power of 2 (PyTorch's rule)",
                        WHERE("runtime", "roundup_power2_divisions"));
  return 0;
}

/* The layer split [parallel] pp_layers, when given: one count per model
 * chunk, adding up to the layers. */
static int check_pp_layers(const vs_workload *wl, uint64_t chunks, vs_error *err)
{
  const vs_count_list *split = &wl->parallel.pp_layers;
  uint64_t sum = 0;
  char where[400], note[420], note2[420];

  if (split->n == 0)
    return 0;
  if (split->n != chunks)
    return vs_error_set(
        err, VS_EINPUT,
        "%s: expected %llu counts (one per pipeline stage%s), "
        "got %zu%s%s",
        WHERE("parallel", "pp_layers"), (unsigned long long)chunks,
        wl->parallel.virtual_stages > 1 ? " and virtual stage" : "", split->n,
        set_note(wl, "parallel", "pp", note, sizeof note),
        set_note(wl, "parallel", "virtual_stages", note2, sizeof note2));
  /* each count is at most the layers, so the sum cannot wrap around */
  for (size_t i = 0; i < split->n; i++) {
    if (split->values[i] > wl->model.layers)
      return vs_error_set(err, VS_EINPUT,
                          "%s: count %zu is %llu, more than the model's %llu "
                          "layers%s",
                          WHERE("parallel", "pp_layers"), i + 1,
                          (unsigned long long)split->values[i],
                          (unsigned long long)wl->model.layers,
                          set_note(wl, "model", "layers", note, sizeof note));
    sum += split->values[i];
  }
  if (sum != wl->model.layers)
    return vs_error_set(err, VS_EINPUT,
                        "%s: the counts add up to %llu, but the model has %llu "
                        "layers%s",
                        WHERE("parallel", "pp_layers"), (unsigned long long)sum,
                        (unsigned long long)wl->model.layers,
                        set_note(wl, "model", "layers", note, sizeof note));
  return 0;
}

/* Pipeline schedule and layer split; needs grad_accum. */
static int check_pipeline(vs_workload *wl, vs_error *err)
{
  const vs_parallel_conf *p = &wl->parallel;
  uint64_t v = p->virtual_stages, chunks = p->pp * p->virtual_stages;
  char where[400];

  if (chunks > VS_MAX_CHUNKS)
    return vs_error_set(err, VS_EINPUT,
                        "%s: pp * virtual_stages = %llu model chunks; vsim "
                        "simulates at most %d",
                        WHERE("parallel", "virtual_stages"),
                        (unsigned long long)chunks, VS_MAX_CHUNKS);
  if (!vs_workload_schedule_allowed(p->schedule, wl->training.framework))
    return vs_error_set(err, VS_EINPUT,
                        wl->training.framework == VS_FW_DEEPSPEED
                            ? "%s: framework = deepspeed runs one pipeline "
                              "schedule, 1f1b (its PipelineEngine's "
                              "TrainSchedule), not %s"
                            : "%s: framework = megatron runs 1f1b or "
                              "interleaved (Megatron-LM's pipeline "
                              "schedules), not %s",
                        WHERE("parallel", "schedule"),
                        schedule_names[p->schedule]);
  if (p->schedule == VS_SCHED_INTERLEAVED) {
    if (!vs_workload_interleave_shape_allowed(p->pp, v))
      return vs_error_set(err, VS_EINPUT,
                          "%s: the interleaved schedule needs pp >= 2 and "
                          "virtual_stages >= 2 (pp = %llu, virtual_stages = %llu)",
                          WHERE("parallel", "schedule"),
                          (unsigned long long)p->pp, (unsigned long long)v);
    if (!vs_workload_interleave_batch_allowed(wl->grad_accum, p->pp))
      return vs_error_set(err, VS_EINPUT,
                          "%s: the interleaved schedule needs the micro-batches "
                          "per step (%llu = global_batch / (micro_batch * dp)) "
                          "to be a multiple of pp (%llu), as Megatron-LM does",
                          WHERE("parallel", "schedule"),
                          (unsigned long long)wl->grad_accum,
                          (unsigned long long)p->pp);
  } else if (v != 1) {
    return vs_error_set(err, VS_EINPUT,
                        "%s: virtual_stages > 1 needs schedule = interleaved",
                        WHERE("parallel", "virtual_stages"));
  }
  if (chunks > wl->model.layers)
    return vs_error_set(err, VS_EINPUT,
                        "%s: pp * virtual_stages = %llu model chunks, more than "
                        "the %llu layers",
                        WHERE("parallel", "virtual_stages"),
                        (unsigned long long)chunks,
                        (unsigned long long)wl->model.layers);
  if (!vs_workload_zero_allowed(p->zero, p->pp, wl->training.framework))
    return vs_error_set(err, VS_EINPUT,
                        "%s: ZeRO-2/3 partition gradients across micro-batches, "
                        "which pipeline parallelism does not allow (DeepSpeed "
                        "and Megatron-LM reject it); use zero = 0 or 1 with pp > 1, "
                        "or framework = fsdp2 (torchtitan runs FSDP2 under its "
                        "pipelines)",
                        WHERE("parallel", "zero"));
  return check_pp_layers(wl, chunks, err);
}

/* [model] mtp_layers: DeepSeek-V3's multi-token prediction as Megatron-LM
 * builds it, for a causal model trained whole. */
static int check_mtp(vs_workload *wl, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  char where[400];
  if (wl->model.mtp_layers == 0)
    return 0;
  if (wl->model.arch == VS_ARCH_BERT)
    return vs_error_set(err, VS_EINPUT,
                        "%s: multi-token prediction extends a causal "
                        "language model (arch = gpt or llama); BERT's "
                        "masked-language head has none",
                        WHERE("model", "mtp_layers"));
  if (!vs_framework_megatron(t->framework))
    return vs_error_set(err, VS_EINPUT,
                        "%s: multi-token prediction is simulated as "
                        "Megatron-LM builds it (--mtp-num-layers); %s has "
                        "no such module: use framework = megatron or none",
                        WHERE("model", "mtp_layers"),
                        vs_framework_name(t->framework));
  if (wl->finetune.method != VS_FT_FULL)
    return vs_error_set(err, VS_EINPUT,
                        "%s: multi-token prediction is simulated for a model "
                        "trained whole; use method = full",
                        WHERE("finetune", "method"));
  if (vs_precision_autocast(t->precision))
    return vs_error_set(err, VS_EINPUT,
                        "%s: multi-token prediction under autocast is not "
                        "simulated; use precision = bf16, fp16, fp8 or fp32",
                        WHERE("training", "precision"));
  return 0;
}

#undef WHERE

int vs_workload_resolve(vs_workload *wl, uint64_t gpus, vs_error *err)
{
  int rc;
  if ((rc = vs_workload_apply_hf_config(wl, err)) ||
      (rc = vs_conf_check_required(&workload_tab, &wl->origins, err)))
    return rc;
  if ((rc = check_model(wl, err)))
    return rc;
  if ((rc = check_layout(wl, gpus, err)) ||
      (rc = vs_workload_apply_framework(wl, err)) ||
      (rc = check_grad_reduce(wl, err)) || (rc = check_p2p(wl, err)) ||
      (rc = check_training(wl, err)) ||
      (rc = check_checkpoint_choice(wl, err)) ||
      (rc = check_ops_checkpointing(wl, err)) ||
      (rc = check_fused_loss(wl, err)) || (rc = check_fsdp2(wl, err)) ||
      (rc = check_dp_only(wl, err)) || (rc = check_moe(wl, err)) ||
      (rc = check_mtp(wl, err)) || (rc = check_cp(wl, err)) ||
      (rc = check_finetune(wl, err)) || (rc = check_runtime(wl, err)))
    return rc;
  return check_pipeline(wl, err);
}

int vs_workload_load(vs_workload *wl, const char *path,
                     const char *const *sets, size_t n_sets, uint64_t gpus,
                     vs_error *err)
{
  int rc = vs_workload_load_base(wl, path, err);
  return rc ? rc : vs_workload_finish(wl, sets, n_sets, gpus, err);
}

int vs_workload_load_base(vs_workload *wl, const char *path, vs_error *err)
{
  set_defaults(wl);
  return vs_conf_load_file(&workload_tab, wl, &wl->origins, path, err);
}

int vs_workload_finish(vs_workload *wl, const char *const *sets,
                       size_t n_sets, uint64_t gpus, vs_error *err)
{
  int rc;
  for (size_t i = 0; i < n_sets; i++) {
    if ((rc = vs_workload_set(wl, sets[i], err)))
      return rc;
  }
  return vs_workload_resolve(wl, gpus, err);
}
