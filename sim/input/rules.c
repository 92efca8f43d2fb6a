/* rules.c - the layout rules of workload.h ("Layout rules"): which
 * combinations of model, precision, framework and parallel sizes vsim
 * simulates, each decided once. Validation (workload.c) reports a broken
 * rule with the key's file and line, and plan's pruning leaves out the
 * layouts that break one before simulating; both read these. All are
 * O(1) and pure. */
#include "workload.h"

#include "dtype.h"

#include <stddef.h>

bool vs_precision_autocast(int precision)
{
  return precision == VS_PREC_AMP_BF16 || precision == VS_PREC_AMP_FP16;
}

bool vs_precision_has_master(int precision)
{
  return precision != VS_PREC_FP32 && !vs_precision_autocast(precision);
}

bool vs_finetune_adapters(int method)
{
  return method == VS_FT_LORA || method == VS_FT_QLORA;
}

bool vs_framework_megatron(int framework)
{
  return framework == VS_FW_NONE || framework == VS_FW_MEGATRON;
}

int vs_precision_act_dtype(int precision)
{
  int gemm = vs_precision_gemm(precision);
  return gemm == VS_PREC_FP32   ? VS_DTYPE_FP32
         : gemm == VS_PREC_FP16 ? VS_DTYPE_FP16
                                : VS_DTYPE_BF16;
}

int vs_precision_param_dtype(int precision)
{
  return vs_precision_autocast(precision) ? VS_DTYPE_FP32
                                          : vs_precision_act_dtype(precision);
}

int vs_precision_gemm(int precision)
{
  return precision == VS_PREC_AMP_BF16   ? VS_PREC_BF16
         : precision == VS_PREC_AMP_FP16 ? VS_PREC_FP16
                                         : precision;
}

vs_fp8_lib vs_workload_fp8_lib(int precision, int framework)
{
  if (precision != VS_PREC_FP8)
    return VS_FP8_NONE;
  return framework == VS_FW_FSDP2 ? VS_FP8_TORCHAO : VS_FP8_TE;
}

bool vs_workload_fp8_tp_plan(const vs_training_conf *t, uint64_t tp)
{
  return tp > 1 &&
         vs_workload_fp8_lib(t->precision, t->framework) == VS_FP8_TORCHAO &&
         t->fp8_recipe == VS_FP8_TENSORWISE;
}

bool vs_workload_dp_only(int precision, int framework)
{
  return framework == VS_FW_HF || vs_precision_autocast(precision);
}

const char *vs_workload_dp_only_misfit(int precision, int framework,
                                       uint64_t tp, uint64_t pp,
                                       uint64_t zero, bool offload)
{
  bool hf = framework == VS_FW_HF;
  if (!vs_workload_dp_only(precision, framework))
    return NULL;
  return tp > 1                  ? "tp"
         : pp > 1                ? "pp"
         : zero > (hf ? 0u : 2u) ? "zero"
         : offload               ? "offload_optimizer"
                                 : NULL;
}

bool vs_workload_moe_layer(const vs_model_conf *m, uint64_t l)
{
  return m->experts > 0 && l >= m->dense_layers &&
         (l - m->dense_layers) % m->moe_every == 0;
}

bool vs_workload_framework_runs_ep(int framework, vs_etp_split etp)
{
  bool megatron = vs_framework_megatron(framework);
  return framework != VS_FW_FSDP2 && framework != VS_FW_HF &&
         (etp == VS_ETP_AS_TP || megatron);
}

uint64_t vs_workload_ep_zero_max(int framework)
{
  /* DeepSpeed's ZeRO-1/2 optimizer partitions each MoE param group over
   * its expert-data-parallel group (stage_1_and_2.py
   * _configure_moe_settings: real_dp_process_group, partition_count);
   * its engine asserts "MoE not supported with Stage 3" (engine.py
   * _configure_zero_optimizer). Megatron-LM shards expert states with its
   * distributed optimizer alone. */
  return framework == VS_FW_DEEPSPEED ? 2 : 1;
}

const char *vs_workload_ep_misfit(const vs_model_conf *m, uint64_t ep,
                                  uint64_t etp, uint64_t tp, uint64_t dp,
                                  uint64_t zero, int framework)
{
  bool runs;
  if (ep == 1 && etp == tp)
    return NULL;
  runs = vs_workload_framework_runs_ep(framework,
                                       etp != tp ? VS_ETP_APART : VS_ETP_AS_TP);
  return m->experts == 0 || m->experts % ep          ? "experts"
         : (tp * dp) % (etp * ep)                    ? "dp"
         : !runs                                     ? "framework"
         : zero > vs_workload_ep_zero_max(framework) ? "zero"
                                                     : NULL;
}

bool vs_workload_skew_applies(const vs_model_conf *m, uint64_t ep)
{
  return m->experts > 1 && m->expert_capacity_factor <= 0.0 &&
         m->routing_skew > 0.0 && ep > 1;
}

uint64_t vs_workload_etp(const vs_parallel_conf *p)
{
  return p->etp ? p->etp : p->tp;
}

uint64_t vs_workload_expert_dp(const vs_parallel_conf *p)
{
  return p->tp * p->dp * p->cp / (vs_workload_etp(p) * p->ep);
}

bool vs_workload_experts_apart(const vs_parallel_conf *p)
{
  return p->ep > 1 || vs_workload_etp(p) != p->tp;
}

bool vs_workload_experts_apart_allowed(bool offloads) { return !offloads; }

uint64_t vs_workload_shard_ranks(const vs_parallel_conf *p)
{
  return p->dp * p->cp;
}

/* DeepSpeed's BF16_Optimizer (vs_ds_optimizer): bf16 at ZeRO-1 with
 * fp32 accumulation and the optimizer on the GPU, or bf16 without ZeRO
 * under the pipeline engine. */
static bool deepspeed_bf16_optimizer(const vs_training_conf *t,
                                     const vs_parallel_conf *p)
{
  if (t->precision != VS_PREC_BF16 || p->offload_optimizer != VS_OFFLOAD_NONE)
    return false;
  if (p->zero == 1)
    return t->grad_dtype == VS_GRAD_FP32;
  return p->zero == 0 && p->pp > 1;
}

vs_ds_optimizer vs_workload_deepspeed_optimizer(const vs_training_conf *t,
                                                const vs_parallel_conf *p)
{
  if (t->framework != VS_FW_DEEPSPEED)
    return VS_DS_OPT_NONE;
  if (deepspeed_bf16_optimizer(t, p))
    return VS_DS_OPT_BF16;
  if (p->zero >= 3)
    return VS_DS_OPT_ZERO3;
  if (p->zero >= 1)
    return VS_DS_OPT_ZERO;
  return t->precision == VS_PREC_FP16 || t->precision == VS_PREC_BF16
             ? VS_DS_OPT_FP16
             : VS_DS_OPT_TORCH;
}

bool vs_workload_deepspeed_casts(const vs_training_conf *t,
                                 const vs_parallel_conf *p)
{
  return t->framework == VS_FW_DEEPSPEED && p->zero < 3 &&
         (t->precision == VS_PREC_BF16 || t->precision == VS_PREC_FP16);
}

int vs_workload_deepspeed_adapter_dtype(const vs_training_conf *t)
{
  return t->precision == VS_PREC_BF16 ? VS_ADAPTER_BF16 : VS_ADAPTER_FP16;
}

int vs_workload_deepspeed_base_dtype(const vs_training_conf *t)
{
  return t->precision == VS_PREC_BF16 ? VS_BASE_BF16 : VS_BASE_FP16;
}

bool vs_workload_deepspeed_engine_allreduce(const vs_training_conf *t,
                                            const vs_parallel_conf *p)
{
  vs_ds_optimizer opt = vs_workload_deepspeed_optimizer(t, p);
  return opt != VS_DS_OPT_NONE && opt != VS_DS_OPT_ZERO &&
         opt != VS_DS_OPT_ZERO3;
}

bool vs_deepspeed_clip_matters(const vs_training_conf *t,
                               const vs_parallel_conf *p)
{
  return vs_workload_deepspeed_optimizer(t, p) == VS_DS_OPT_TORCH &&
         t->precision == VS_PREC_FP32;
}

bool vs_workload_grads_shared(const vs_parallel_conf *p)
{
  return vs_workload_shard_ranks(p) > 1 ||
         (vs_workload_experts_apart(p) && vs_workload_expert_dp(p) > 1);
}

bool vs_workload_cpu_step(const vs_parallel_conf *p)
{
  return p->offload_optimizer != VS_OFFLOAD_NONE;
}

bool vs_workload_grads_bucketed(const vs_parallel_conf *p)
{
  return vs_workload_grads_shared(p) || vs_workload_cpu_step(p);
}

unsigned vs_workload_ipg_buffers(const vs_workload *wl, uint64_t stage,
                                 vs_ipg_made *made)
{
  const vs_parallel_conf *p = &wl->parallel;
  bool from_backward = stage + 1 >= p->pp;
  *made = from_backward ? VS_IPG_IN_BACKWARD : VS_IPG_AT_BOUNDARY;
  if (vs_workload_deepspeed_optimizer(&wl->training, p) != VS_DS_OPT_ZERO)
    return 0;
  return from_backward && p->overlap_grad_reduce ? 2 : 1;
}

bool vs_workload_bucket_matters(const vs_workload *wl)
{
  vs_ipg_made made;
  return vs_workload_grads_bucketed(&wl->parallel) ||
         vs_workload_ipg_buffers(wl, wl->parallel.pp - 1, &made) > 0;
}

vs_optimizer_at vs_workload_optimizer_at(const vs_training_conf *t)
{
  return t->optimizer_in_backward ? VS_OPTIMIZER_IN_BACKWARD
                                  : VS_OPTIMIZER_AFTER_BACKWARD;
}

bool vs_workload_grads_wait_for_step(uint64_t zero, vs_optimizer_at step)
{
  return zero < 2 && step == VS_OPTIMIZER_AFTER_BACKWARD;
}

bool vs_workload_reduce_can_wait(uint64_t zero, vs_optimizer_at step)
{
  return zero <= 2 && step == VS_OPTIMIZER_AFTER_BACKWARD;
}

uint64_t vs_workload_seq_multiple(uint64_t cp, uint64_t tp, bool sp)
{
  return (cp > 1 ? 2 * cp : 1) * (sp ? tp : 1);
}

const char *vs_workload_cp_seq_misfit(uint64_t seq_len, uint64_t cp,
                                      uint64_t tp, bool sp)
{
  if (cp == 1 || seq_len % vs_workload_seq_multiple(cp, tp, sp) == 0)
    return NULL;
  return sp ? "must be a multiple of 2 x cp x tp (causal load balancing "
              "cuts each sequence into 2 cp chunks, sequence parallelism "
              "each chunk by tp)"
            : "must be a multiple of 2 x cp (causal load balancing cuts "
              "each sequence into 2 cp chunks)";
}

const char *vs_workload_cp_misfit(const vs_model_conf *m, uint64_t cp,
                                  int cp_comm, uint64_t tp, bool sp)
{
  if (cp == 1)
    return NULL;
  if (vs_workload_cp_seq_misfit(m->seq_len, cp, tp, sp))
    return "seq_len does not split over the cp ranks";
  if (cp_comm == VS_CP_A2A && (m->heads % (tp * cp) || m->kv_heads % (tp * cp)))
    return "cp_comm = a2a gives each rank whole heads: tp x cp must divide "
           "heads and kv_heads";
  return NULL;
}

vs_cp_misfit vs_workload_cp_settings_misfit(const vs_training_conf *t,
                                            int order)
{
  if (t->attention != VS_ATTN_FLASH)
    return VS_CP_MISFIT_ATTENTION;
  if (order != VS_ORDER_TP_DP_PP)
    return VS_CP_MISFIT_ORDER;
  if (vs_workload_dp_only(t->precision, t->framework))
    return VS_CP_MISFIT_DP_ONLY;
  return VS_CP_FITS;
}

int vs_workload_framework_cp_comm(int framework, int own)
{
  return framework == VS_FW_DEEPSPEED ? VS_CP_A2A : own;
}

bool vs_workload_moe_tp_split_allowed(const vs_model_conf *m, uint64_t tp,
                                      int framework)
{
  return tp == 1 || (m->experts == 0 && m->kv_lora_rank == 0) ||
         vs_framework_megatron(framework);
}

bool vs_workload_moe_tp_allowed(const vs_model_conf *m, uint64_t tp, bool sp,
                                int framework)
{
  return vs_workload_moe_tp_split_allowed(m, tp, framework) &&
         (tp == 1 || m->experts == 0 || sp);
}

bool vs_workload_ep_order_allowed(bool apart, int order, uint64_t pp)
{
  return !apart || pp == 1 || order == VS_ORDER_TP_DP_PP;
}

bool vs_workload_step_in_backward_allowed(const vs_training_conf *t,
                                          uint64_t grad_accum, uint64_t dp_cp,
                                          uint64_t pp, int offload_optimizer)
{
  return !t->optimizer_in_backward ||
         (grad_accum == 1 && dp_cp == 1 && pp == 1 &&
          offload_optimizer == VS_OFFLOAD_NONE);
}

bool vs_workload_activation_offload_allowed(const vs_training_conf *t,
                                            int checkpointing)
{
  return t->offload_activations == VS_OFFLOAD_NONE ||
         t->framework != VS_FW_DEEPSPEED || checkpointing == VS_CKPT_FULL;
}

bool vs_workload_paged_allowed(const vs_training_conf *t, uint64_t zero,
                               int offload_optimizer)
{
  return !t->paged_optimizer ||
         (zero == 0 && offload_optimizer == VS_OFFLOAD_NONE);
}

/* The first of t's optimizer-state dtype keys set other than fp32, or
 * NULL. */
static const char *state_dtype_set(const vs_training_conf *t)
{
  return t->exp_avg_dtype != VS_STATE_FP32      ? "exp_avg_dtype"
         : t->exp_avg_sq_dtype != VS_STATE_FP32 ? "exp_avg_sq_dtype"
         : t->main_params_dtype != VS_MAIN_FP32 ? "main_params_dtype"
                                                : NULL;
}

const char *vs_workload_precision_aware_misfit(const vs_training_conf *t,
                                               uint64_t zero,
                                               int offload_optimizer,
                                               int method, const char **key)
{
  *key = state_dtype_set(t);
  if (!t->precision_aware_optimizer)
    return *key ? "optimizer states below fp32 are Megatron-LM's "
                  "precision-aware optimizer (Transformer Engine's "
                  "FusedAdam): set precision_aware_optimizer = true"
                : NULL;
  *key = "precision_aware_optimizer";
  if (!vs_framework_megatron(t->framework))
    return "it is Megatron-LM's --use-precision-aware-optimizer: use "
           "framework = megatron (or none)";
  if (t->optimizer != VS_OPT_ADAM && t->optimizer != VS_OPT_ADAMW)
    return "Megatron-LM runs it with adam only (Transformer Engine's "
           "FusedAdam, decoupled weight decay): use optimizer = adam or "
           "adamw";
  if (!t->master_weights)
    return "it steps main parameters kept beside 16-bit weights: use "
           "precision = bf16, fp16 or fp8 with master_weights = true";
  if (method != VS_FT_FULL) {
    *key = "method";
    return "Megatron-LM's precision-aware optimizer is simulated for whole "
           "models trained in 16 bits; adapters and frozen layers are not "
           "(use method = full)";
  }
  if (offload_optimizer != VS_OFFLOAD_NONE) {
    *key = "offload_optimizer";
    return "vsim steps an offloaded optimizer on ZeRO-Offload's fp32 host "
           "states; Megatron-LM's hybrid CPU optimizer with narrower "
           "states is not simulated by this version: set "
           "offload_optimizer = none";
  }
  if (zero != 1) {
    *key = "zero";
    return "Megatron-LM runs the precision-aware optimizer only within "
           "its distributed optimizer (megatron/core/optimizer/"
           "__init__.py): set zero = 1";
  }
  *key = NULL;
  return NULL;
}

bool vs_workload_python_rmsnorm(const vs_workload *wl)
{
  int fw = wl->training.framework;
  return (fw == VS_FW_HF || fw == VS_FW_FSDP2) &&
         wl->training.kernels == VS_KERNELS_EAGER &&
         wl->model.arch == VS_ARCH_LLAMA;
}

const char *vs_workload_fp8_params_misfit(const vs_training_conf *t,
                                          uint64_t zero, int offload_optimizer,
                                          int method, const char **key)
{
  *key = NULL;
  if (!t->fp8_param_gather)
    return NULL;
  *key = "fp8_param_gather";
  if (t->precision != VS_PREC_FP8 || !vs_framework_megatron(t->framework))
    return "FP8 primary weights are Transformer Engine's FP8 modules' "
           "(Megatron-LM's --fp8-param-gather, \"fp8_param must be used "
           "together with fp8 mode\"): use precision = fp8 under framework "
           "= megatron or none";
  if (method != VS_FT_FULL) {
    *key = "method";
    return "FP8 primary weights are trained ones (a frozen FP8 base is "
           "[finetune] base_dtype = fp8): use method = full";
  }
  if (!t->master_weights) {
    *key = "master_weights";
    return "FP8 weights are updated from the distributed optimizer's fp32 "
           "main parameters: set master_weights = true";
  }
  if (t->precision_aware_optimizer)
    return "whether Transformer Engine's FusedAdam keeps int16 remainders "
           "of FP8 weights' masters is not established, so vsim does not "
           "simulate the two together: set precision_aware_optimizer = "
           "false";
  if (offload_optimizer != VS_OFFLOAD_NONE) {
    *key = "offload_optimizer";
    return "Megatron-LM's CPU optimizer over FP8 weights is not simulated "
           "by this version: set offload_optimizer = none";
  }
  if (zero != 1) {
    *key = "zero";
    return "Megatron-LM gathers FP8 parameters within its distributed "
           "optimizer (arguments.py: \"--fp8-param-gather only supported "
           "with distributed optimizer\"): set zero = 1";
  }
  *key = NULL;
  return NULL;
}

const char *vs_workload_megatron_optimizer_misfit(const vs_training_conf *t,
                                                  uint64_t zero,
                                                  int offload_optimizer,
                                                  int method, const char **key)
{
  const char *why;
  if (t->framework == VS_FW_MEGATRON && zero >= 2) {
    *key = "zero";
    return "Megatron-LM shards the optimizer states with its distributed "
           "optimizer (zero = 1); sharding gradients and parameters is its "
           "FSDP (--use-megatron-fsdp), which vsim does not simulate: use "
           "zero = 1, or framework = deepspeed or fsdp2";
  }
  why = vs_workload_precision_aware_misfit(t, zero, offload_optimizer, method,
                                           key);
  return why ? why
             : vs_workload_fp8_params_misfit(t, zero, offload_optimizer, method,
                                             key);
}

bool vs_workload_fused_loss_tp_allowed(const vs_training_conf *t, uint64_t tp)
{
  return tp == 1 || !t->fused_cross_entropy;
}

bool vs_workload_finetune_tp_allowed(const vs_finetune_conf *f, uint64_t tp)
{
  bool adapters = vs_finetune_adapters(f->method);
  bool bnb_base = f->method != VS_FT_FULL && (f->base_dtype == VS_BASE_INT8 ||
                                              f->base_dtype == VS_BASE_NF4);
  return tp == 1 || (!adapters && !bnb_base);
}

uint64_t vs_workload_chunk_size(const vs_workload *wl, uint64_t n, uint64_t g)
{
  uint64_t layers = wl->model.layers;
  return wl->parallel.pp_layers.n ? wl->parallel.pp_layers.values[g]
                                  : layers / n + (g < layers % n);
}

uint64_t vs_workload_chunk_first(const vs_workload *wl, uint64_t n, uint64_t g)
{
  uint64_t layers = wl->model.layers, first = 0;
  if (!wl->parallel.pp_layers.n)
    return g * (layers / n) + (g < layers % n ? g : layers % n);
  for (uint64_t i = 0; i < g; i++)
    first += wl->parallel.pp_layers.values[i];
  return first;
}

void vs_workload_checkpointed_layers(const vs_workload *wl, bool *ckpt)
{
  const vs_training_conf *t = &wl->training;
  uint64_t pp = wl->parallel.pp, n = pp * wl->parallel.virtual_stages;
  for (uint64_t s = 0; s < pp; s++) {
    uint64_t counter = 0;
    for (uint64_t g = s; g < n; g += pp) {
      uint64_t first = vs_workload_chunk_first(wl, n, g);
      uint64_t size = vs_workload_chunk_size(wl, n, g);
      for (uint64_t i = 0; i < size; i++)
        ckpt[first + i] = t->checkpoint_every ? ++counter % t->checkpoint_every == 0
                          : t->checkpoint_layers ? i < t->checkpoint_layers
                                                 : true;
    }
  }
}

bool vs_workload_zero_allowed(uint64_t zero, uint64_t pp, int framework)
{
  if (framework == VS_FW_FSDP2)
    return zero == 3; /* fully_shard, pipelines or not */
  return !(pp > 1 && zero >= 2);
}

bool vs_workload_deepspeed_zero3(int framework, uint64_t zero)
{
  return framework == VS_FW_DEEPSPEED && zero == 3;
}

bool vs_workload_schedule_allowed(int schedule, int framework)
{
  if (framework == VS_FW_DEEPSPEED)
    return schedule == VS_SCHED_1F1B;
  return framework != VS_FW_MEGATRON || schedule != VS_SCHED_GPIPE;
}

/* DeepSpeed's offload rules (runtime/zero/config.py, offload_config.py;
 * docs/_pages/config-json.md), which FSDP's CPU offload also keeps: what
 * moves off the GPU is a ZeRO partition. */
const char *vs_workload_offload_misfit(uint64_t zero, int offload_optimizer,
                                       int offload_params,
                                       const vs_training_conf *t,
                                       const char **key)
{
  int optimizer = t->optimizer;
  bool autocast =
      t->precision == VS_PREC_AMP_BF16 || t->precision == VS_PREC_AMP_FP16;
  *key = offload_optimizer != VS_OFFLOAD_NONE ? "offload_optimizer"
                                              : "offload_params";
  if (t->framework == VS_FW_HF && (offload_optimizer != VS_OFFLOAD_NONE ||
                                   offload_params != VS_OFFLOAD_NONE))
    return "the Hugging Face Trainer (framework = hf) is simulated with its "
           "DDP, without offload: for ZeRO-Offload use framework = "
           "deepspeed, for FSDP's CPU offload framework = fsdp2";
  if (t->framework == VS_FW_MEGATRON && (offload_optimizer != VS_OFFLOAD_NONE ||
                                         offload_params != VS_OFFLOAD_NONE))
    return "Megatron-LM offloads its optimizer with HybridDeviceOptimizer "
           "(--optimizer-cpu-offload, with --use-precision-aware-optimizer), "
           "which vsim does not simulate, nor Megatron's parameters off "
           "the GPU; vsim's offload is DeepSpeed's ZeRO-Offload and FSDP2's "
           "CPU "
           "offload: use framework = deepspeed or fsdp2";
  if (t->framework == VS_FW_FSDP2 && (offload_optimizer != offload_params ||
                                      offload_optimizer == VS_OFFLOAD_NVME))
    return "FSDP2's CPUOffloadPolicy keeps the sharded parameters, their "
           "gradients and the optimizer states on the host together, where "
           "the CPU steps them (it has no NVMe): set offload_optimizer and "
           "offload_params both to cpu";
  *key = "offload_optimizer";
  if (offload_optimizer != VS_OFFLOAD_NONE && !t->master_weights &&
      t->framework != VS_FW_FSDP2)
    return autocast ? "optimizer offload is simulated as ZeRO-Offload steps a "
                      "16-bit model, on its fp32 master partition on the host; "
                      "autocast keeps fp32 weights with no master copy: use "
                      "precision = bf16 or fp16 with master_weights = true"
                    : "optimizer offload is simulated as ZeRO-Offload steps a "
                      "16-bit model, on its fp32 master partition on the host; "
                      "fp32 training (or master_weights = false) is not: use a "
                      "precision below fp32 with master_weights = true";
  if (offload_optimizer != VS_OFFLOAD_NONE && zero == 0)
    return "optimizer offload moves ZeRO's partitioned optimizer states "
           "(ZeRO-Offload); it needs zero >= 1";
  if (offload_optimizer == VS_OFFLOAD_NVME && zero < 3)
    return "NVMe offload is ZeRO-Infinity, which DeepSpeed offers with "
           "zero = 3 only";
  if (offload_optimizer != VS_OFFLOAD_NONE && optimizer == VS_OPT_ADAM8BIT)
    return "adam8bit's blockwise kernels (bitsandbytes) run on the GPU only; "
           "offload adam, adamw, lion, sgd, momentum or adafactor";
  *key = "offload_params";
  if (offload_params != VS_OFFLOAD_NONE && zero < 3)
    return "only partitioned parameters can live off the GPU (ZeRO-3's "
           "offload_param, FSDP's CPUOffload); it needs zero = 3";
  *key = NULL;
  return NULL;
}

const char *vs_workload_tp_misfit(const vs_model_conf *m, uint64_t tp,
                                  uint64_t etp, uint64_t *size)
{
  const struct {
    const char *name;       /* the key */
    uint64_t value;         /* its value in m */
    uint64_t by;            /* the ranks it is split over */
  } split[] = {{"heads", m->heads, tp},
               {"kv_heads", m->kv_heads, tp},
               {"ffn_hidden", m->ffn_hidden, tp},
               {"expert_ffn_hidden", m->expert_ffn_hidden, etp},
               {"shared_expert_ffn_hidden", m->shared_expert_ffn_hidden, tp}};
  for (size_t i = 0; i < sizeof split / sizeof split[0]; i++) {
    if (split[i].value % split[i].by != 0) {
      if (size)
        *size = split[i].value;
      return split[i].name;
    }
  }
  return NULL;
}

bool vs_workload_sp_allowed(uint64_t seq_len, uint64_t tp)
{
  return tp > 0 && seq_len % tp == 0;
}

bool vs_workload_sp(const vs_parallel_conf *p)
{
  return p->sequence_parallel && p->tp > 1;
}

bool vs_workload_gpus_allowed(uint64_t gpus, uint64_t tp, uint64_t pp)
{
  return gpus % (tp * pp) == 0;
}

bool vs_workload_interleave_shape_allowed(uint64_t pp, uint64_t virtual_stages)
{
  return pp >= 2 && virtual_stages >= 2;
}

bool vs_workload_interleave_batch_allowed(uint64_t grad_accum, uint64_t pp)
{
  return pp > 0 && grad_accum % pp == 0;
}

bool vs_workload_batch_allowed(uint64_t global_batch, uint64_t micro_batch,
                               uint64_t dp)
{
  uint64_t replica_batch;
  if (__builtin_mul_overflow(micro_batch, dp, &replica_batch) ||
      replica_batch == 0)
    return false;
  return global_batch % replica_batch == 0;
}
