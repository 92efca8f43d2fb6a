/* workload_preset.c - the keys a workload leaves unset that something
 * else decides: its [model] hf_config (a Hugging Face config.json) and its
 * [training] framework's preset (see workload_int.h). */
#include "workload.h"
#include "workload_int.h"

#include "dtype.h"
#include "hfconfig.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* path as the workload file's folder sees it, into buf. */
static void beside_workload(const vs_workload *wl, const char *path,
                            char *buf, size_t len)
{
  const char *slash = strrchr(wl->origins.file, '/');
  if (path[0] == '/' || !slash)
    snprintf(buf, len, "%s", path);
  else
    snprintf(buf, len, "%.*s/%s", (int)(slash - wl->origins.file),
             wl->origins.file, path);
}

void vs_workload_hf_config_path(const vs_workload *wl, char *buf, size_t len)
{
  if (len == 0)
    return;
  buf[0] = '\0';
  if (wl->model.hf_config[0] != '\0')
    beside_workload(wl, wl->model.hf_config, buf, len);
}

/* err's message about a value the config's key k gave, followed by the
 * field the JSON file at path lacks whose transformers default gave it,
 * so that the user knows what to mend there (the message names a field
 * that gave the value itself: vs_conf_set_derived). Returns rc. */
static int name_field(vs_error *err, int rc, const vs_hf_key *k,
                      const char *path)
{
  char msg[sizeof err->msg];
  if (!k->lacked)
    return rc;
  snprintf(msg, sizeof msg, "%s", err->msg);
  vs_error_clear(err); /* the first error wins: this one replaces it */
  return vs_error_set(err, rc,
                      "%s (%s's default: %s lacks field \"%s\"; add it)", msg,
                      k->source, path, k->lacked);
}

/* Whether the config's key k shapes shared experts (their width, their
 * gate) that the workload removed (shared_experts = 0 of its own): the
 * file's shape of them then means nothing. */
static bool shapes_removed_shared(const vs_workload *wl, const vs_hf_key *k)
{
  return vs_conf_is_set(vs_workload_keys(), &wl->origins, "model",
                        "shared_experts") &&
         wl->model.shared_experts == 0 &&
         (strcmp(k->name, "shared_expert_ffn_hidden") == 0 ||
          strcmp(k->name, "shared_expert_gate") == 0);
}

/* The workload's own [model] arch where the config's key k is the arch
 * its model_type builds: the same, or VS_EINPUT (another arch would build
 * other layers from the same counts: a Llama file as GPT layers with
 * learned positions). */
static int arch_agrees(const vs_workload *wl, const vs_hf_key *k,
                       const vs_hf_model *hf, const char *path, vs_error *err)
{
  char where[400];
  if (strcmp(k->name, "arch") != 0 ||
      !vs_conf_is_set(vs_workload_keys(), &wl->origins, "model", "arch") ||
      strcmp(vs_arch_name(wl->model.arch), k->value) == 0)
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s: %s's model_type %s is built as arch = %s; "
                      "remove [model] arch (the file gives it)",
                      vs_conf_where(vs_workload_keys(), &wl->origins, "model",
                                    "arch", where, sizeof where),
                      path, hf->model_type, k->value);
}

int vs_workload_apply_hf_config(vs_workload *wl, vs_error *err)
{
  char path[VS_PATH_MAX + 512], where[400];
  vs_hf_model hf;
  vs_error why;
  int rc;
  if (wl->model.hf_config[0] == '\0')
    return 0;
  vs_workload_hf_config_path(wl, path, sizeof path);
  vs_error_clear(&why);
  if ((rc = vs_hf_config_read(path, &hf, &why)))
    return vs_error_set(err, rc, "%s: %s",
                        vs_conf_where(vs_workload_keys(), &wl->origins,
                                      "model", "hf_config", where,
                                      sizeof where),
                        why.msg);
  for (size_t i = 0; i < hf.n; i++) {
    const vs_hf_key *k = &hf.keys[i];
    if ((rc = arch_agrees(wl, k, &hf, path, err)))
      return rc;
    if (vs_conf_is_set(vs_workload_keys(), &wl->origins, "model", k->name) ||
        shapes_removed_shared(wl, k))
      continue;
    if (k->value[0] == '\0') /* a default vsim does not know */
      return vs_error_set(
          err, VS_EINPUT, "%s: %s " VS_HF_UNKNOWN_DEFAULT ", or set [model] %s",
          vs_conf_where(vs_workload_keys(), &wl->origins, "model", "hf_config",
                        where, sizeof where),
          path, k->lacked, hf.model_type, k->source, k->name);
    if ((rc = vs_conf_set_derived(vs_workload_keys(), wl, &wl->origins, "model",
                                  k->name, k->value, k->field, err)))
      return name_field(err, rc, k, path);
  }
  return 0;
}

/* Sets [sec] key to value as the framework preset's choice, for `why`,
 * unless the workload set it itself. */
static int preset(vs_workload *wl, const char *sec, const char *key,
                  const char *value, const char *why, vs_error *err)
{
  if (vs_conf_is_set(vs_workload_keys(), &wl->origins, sec, key))
    return 0;
  return vs_conf_set_preset(vs_workload_keys(), wl, &wl->origins, sec, key,
                            value, why, err);
}

/* grad_clipping = true for a framework that clips by default, but with
 * the optimizer in backward, which steps before any norm is known. */
static int preset_clipping(vs_workload *wl, const char *why, vs_error *err)
{
  if (wl->training.optimizer_in_backward)
    return preset(wl, "training", "grad_clipping", "false",
                  "a step in backward comes before the norm of all the "
                  "gradients exists",
                  err);
  return preset(wl, "training", "grad_clipping", "true", why, err);
}

/* A gradient bucket of `elems` elements of the gradients' dtype, as the
 * framework sizes it in elements, written as a size. */
static int preset_bucket(vs_workload *wl, uint64_t elems, const char *why,
                         vs_error *err)
{
  char text[32];
  uint64_t bytes =
      wl->training.grad_dtype == VS_GRAD_FP32
          ? 4
          : vs_dtype_size(vs_precision_param_dtype(wl->training.precision));
  snprintf(text, sizeof text, "%lluB", (unsigned long long)(elems * bytes));
  return preset(wl, "parallel", "bucket", text, why, err);
}

/* overlap_grad_reduce = false for a framework that reduces the step's
 * gradients after its backward pass, where gradients wait for the step. */
static int preset_grad_reduce_after_backward(vs_workload *wl, const char *why,
                                             vs_error *err)
{
  if (!vs_workload_grads_wait_for_step(wl->parallel.zero,
                                       vs_workload_optimizer_at(&wl->training)))
    return 0;
  return preset(wl, "parallel", "overlap_grad_reduce", "false", why, err);
}

/* DeepSpeed's overlap_comm is off below ZeRO-3 (zero/config.py,
 * overlap_comm_valid: stage == 3): ZeRO-2 reduce-scatters each bucket on
 * the current stream as backward fills it (stage_1_and_2.py
 * average_tensor, the stream of reduce_ipg_grads). */
static int preset_zero2_reduce_on_compute(vs_workload *wl, vs_error *err)
{
  if (wl->parallel.zero != 2 || wl->training.optimizer_in_backward)
    return 0;
  return preset(wl, "parallel", "overlap_grad_reduce", "false",
                "DeepSpeed's overlap_comm is off below ZeRO-3: ZeRO-2 "
                "reduce-scatters each bucket on the compute stream", err);
}

/* Megatron-LM's pipeline sends (megatron/core/pipeline_parallel/
 * p2p_communication.py, _communicate): the non-interleaved 1F1B waits on
 * every send and receive request before it computes on (wait_on_reqs,
 * and arguments.py turns overlap_p2p_comm off without virtual stages);
 * the interleaved schedule overlaps them (overlap_p2p_comm: on unless
 * --no-overlap-p2p-communication). */
static int preset_megatron_p2p(vs_workload *wl, vs_error *err)
{
  if (wl->parallel.pp == 1)
    return 0; /* no pipeline */
  if (wl->parallel.schedule == VS_SCHED_INTERLEAVED)
    return preset(wl, "parallel", "p2p", "overlapped",
                  "Megatron-LM's interleaved schedule overlaps its sends "
                  "(overlap_p2p_comm)",
                  err);
  return preset(wl, "parallel", "p2p", "blocking",
                "Megatron-LM's 1F1B waits for each send before computing on",
                err);
}

/* Megatron-LM (shared/reference/frameworks.md 3.1): bf16 forces fp32
 * main gradients (accumulate_allreduce_grads_in_fp32, arguments.py), and
 * so does FP8, which Megatron runs inside a bf16 model (--bf16 with
 * --fp8-format: Transformer Engine quantizes each GEMM's inputs, the
 * weights stay bf16; frameworks.md 7); gradient buckets of max(4e7, 1e6
 * x dp) parameters (where Megatron buckets at all: the recipe's
 * buckets_first_chunk). */
static int preset_megatron(vs_workload *wl, vs_error *err)
{
  /* Megatron counts the data-parallel ranks with the context-parallel
   * ones (get_data_parallel_world_size(with_context_parallel=True)) */
  uint64_t elems = 1000000 * vs_workload_shard_ranks(&wl->parallel);
  int rc = 0;
  if (wl->training.precision == VS_PREC_BF16 ||
      wl->training.precision == VS_PREC_FP8)
    rc = preset(wl, "training", "grad_dtype", "fp32",
                "Megatron-LM accumulates bf16 gradients in fp32 main grads",
                err);
  if (!rc)
    rc = preset_megatron_p2p(wl, err);
  if (!rc)
    rc = preset_clipping(wl, "Megatron-LM's --clip-grad defaults to 1.0", err);
  if (!rc)
    rc = preset_grad_reduce_after_backward(
        wl, "Megatron-LM reduces gradients after the backward pass unless "
            "--overlap-grad-reduce",
        err);
  if (!rc)
    rc = preset_bucket(wl, elems > 40000000 ? elems : 40000000,
                       "Megatron-LM's bucket: max(4e7, 1e6 x dp) "
                       "parameters, in the first stage's first chunk "
                       "with overlap_grad_reduce (else one a chunk)",
                       err);
  /* dp, and so the bucket, may follow --gpus: vsim show writes it as a
   * comment, so that its output takes any --gpus */
  vs_conf_preset_follows_gpus(vs_workload_keys(), &wl->origins, "parallel",
                              "bucket");
  return rc;
}

/* DeepSpeed's ZeRO-3 coordinator's defaults (runtime/zero/config.py:
 * stage3_max_live_parameters and stage3_max_reuse_distance, 1e9 each). */
static int preset_zero3_coordinator(vs_workload *wl, vs_error *err)
{
  int rc;
  if (!vs_workload_deepspeed_zero3(wl->training.framework, wl->parallel.zero))
    return 0;
  rc = preset(wl, "parallel", "max_live_parameters", "1000000000",
              "DeepSpeed's stage3_max_live_parameters: 1e9", err);
  return rc ? rc
            : preset(wl, "parallel", "max_reuse_distance", "1000000000",
                     "DeepSpeed's stage3_max_reuse_distance: 1e9", err);
}

/* DeepSpeed's engine casts every floating-point parameter to the
 * model's 16-bit dtype as it wraps the model (vs_workload_deepspeed_casts):
 * LoRA's adapters train in it, the optimizer keeping their fp32 master
 * copy. */
static int preset_deepspeed_adapters(vs_workload *wl, vs_error *err)
{
  if (!vs_finetune_adapters(wl->finetune.method) ||
      !vs_workload_deepspeed_casts(&wl->training, &wl->parallel))
    return 0;
  return preset(
      wl, "finetune", "adapter_dtype",
      vs_adapter_dtype_name(vs_workload_deepspeed_adapter_dtype(&wl->training)),
      "DeepSpeed casts every parameter to the model's dtype "
      "(engine.py _cast_module_mixed_precision)",
      err);
}

/* DeepSpeed (shared/reference/frameworks.md 2.1-2.2): gradient buckets
 * of reduce_bucket_size = 5e8 elements; gradients accumulated in the
 * model's dtype (grad_accum_dtype's default since #7515), which picks
 * its optimizer wrapper (vs_workload_deepspeed_optimizer). */
static int preset_deepspeed(vs_workload *wl, vs_error *err)
{
  const vs_parallel_conf *p = &wl->parallel;
  int rc = 0;
  /* deepspeed/runtime/pipe/p2p.py: send and recv are dist.send and
   * dist.recv (async_op is asserted False) */
  if (p->pp > 1)
    rc = preset(wl, "parallel", "p2p", "blocking",
                "DeepSpeed's pipeline engine sends with dist.send", err);
  if (!rc && p->cp > 1)
    rc = preset(wl, "parallel", "cp_comm",
                vs_cp_comm_name(
                    vs_workload_framework_cp_comm(VS_FW_DEEPSPEED, p->cp_comm)),
                "DeepSpeed's sequence parallelism is DeepSpeed-Ulysses "
                "(deepspeed/sequence/layer.py DistributedAttention): "
                "all-to-alls of heads",
                err);
  /* engine.py allreduce_gradients: below ZeRO-2 the gradients are reduced
   * at the accumulation boundary, once backward is done */
  if (!rc)
    rc = preset_grad_reduce_after_backward(
        wl, "DeepSpeed reduces ZeRO-0/1 gradients once backward is done", err);
  if (!rc)
    rc = preset_zero2_reduce_on_compute(wl, err);
  if (!rc)
    rc = preset_zero3_coordinator(wl, err);
  if (!rc)
    rc = preset_deepspeed_adapters(wl, err);
  if (!rc)
    rc = preset_clipping(wl,
                         "DeepSpeed's gradient_clipping defaults to 1.0 "
                         "(#8068, June 2026; 0 before)",
                         err);
  return rc ? rc
            : preset_bucket(wl, VS_DEEPSPEED_BUCKET_ELEMS,
                            "DeepSpeed's reduce_bucket_size: 5e8 elements",
                            err);
}

/* FSDP2 as torchtitan runs it (shared/reference/frameworks.md 4.3): every
 * parameter sharded (zero = 3) and kept in fp32, which the optimizer
 * steps without a master copy; gradients reduced in fp32
 * (mixed_precision_reduce), each fully_shard unit's (a block's) in a
 * reduce-scatter of its own: no bucket merges blocks; eager modules
 * (train_configs' training.compile = false, torchtitan 9dec370); the
 * caching allocator's expandable segments, as its launch script runs
 * it; the sharded gradients set to None at each step's start
 * (optimizers.zero_grad() in 9dec370's train.py; since #3559, August
 * 2026, torchtitan/trainer.py keeps them only under its CUDA graphs, off
 * by default with pipeline parallelism; vsim models no CUDA graph). */
static int preset_fsdp2(vs_workload *wl, vs_error *err)
{
  int rc = preset(wl, "parallel", "zero", "3",
                  "fully_shard shards every parameter", err);
  if (!rc && wl->training.precision != VS_PREC_FP32)
    rc = preset(wl, "training", "master_weights", "false",
                "the sharded parameters are fp32: no master copy", err);
  if (!rc && wl->training.precision != VS_PREC_FP32)
    rc = preset(wl, "training", "grad_dtype", "fp32",
                "torchtitan reduces gradients in fp32", err);
  if (!rc)
    rc = preset(wl, "training", "kernels", "eager",
                "torchtitan compiles nothing unless training.compile = "
                "true: its modules run eagerly",
                err);
  if (!rc && wl->runtime.allocator == VS_ALLOC_CACHING)
    rc = preset(wl, "runtime", "expandable_segments", "true",
                "torchtitan's launch script sets PYTORCH_CUDA_ALLOC_CONF="
                "expandable_segments:True (run_llama_train.sh since "
                "a5e57e4a9, October 2024; run_train.sh)",
                err);
  if (!rc)
    rc = preset(wl, "training", "set_grads_to_none", "true",
                "torchtitan's train step begins with optimizers.zero_grad(), "
                "set_to_none (false since August 2026 under CUDA graphs)",
                err);
  if (!rc)
    rc =
        preset_clipping(wl, "torchtitan clips at training.max_norm = 1.0", err);
  /* job_config.py (9dec370): context_parallel_rotate_method = "allgather",
   * PyTorch's context parallel gathering every K, V shard after the first
   * sub-SDPA ("alltoall" shuffles them round) */
  if (!rc && wl->parallel.cp > 1)
    rc = preset(wl, "parallel", "cp_comm", "allgather",
                "torchtitan's context_parallel_rotate_method defaults to "
                "allgather",
                err);
  return rc ? rc
            : preset(wl, "parallel", "bucket", "1B",
                     "fully_shard reduce-scatters each block's gradients "
                     "on their own",
                     err);
}

/* The Hugging Face Trainer (frameworks.md 1.2): bf16 = True runs
 * torch.autocast over the fp32 model; its data parallelism is DDP, whose
 * gradient buckets hold bucket_cap_mb = 25 MiB
 * (torch.nn.parallel.DistributedDataParallel's default); the modules run
 * eagerly (TrainingArguments.torch_compile defaults to False); its
 * model.zero_grad() sets the gradients to None after each step. */
static int preset_hf(vs_workload *wl, vs_error *err)
{
  char bucket[32];
  int rc = preset(wl, "training", "precision", "amp_bf16",
                  "the Trainer's bf16 = True runs torch.autocast over the "
                  "fp32 model",
                  err);
  snprintf(bucket, sizeof bucket, "%lluB", VS_BUCKET_DEFAULT);
  if (!rc && vs_precision_has_master(wl->training.precision))
    rc = preset(wl, "training", "master_weights", "false",
                "the Trainer steps the model's own 16-bit weights: no "
                "master copy",
                err);
  if (!rc)
    rc = preset(wl, "training", "kernels", "eager",
                "the Trainer runs the model's modules eagerly unless "
                "torch_compile = True",
                err);
  if (!rc)
    rc = preset(wl, "training", "set_grads_to_none", "true",
                "the Trainer's model.zero_grad() after each step sets them "
                "to None (set_to_none, PyTorch's default since 2.0)",
                err);
  if (!rc)
    rc =
        preset_clipping(wl, "the Trainer's max_grad_norm defaults to 1.0", err);
  /* transformers' BitsAndBytesConfig (utils/quantization_config.py):
   * bnb_4bit_use_double_quant=False, which Linear4bit passes on as
   * compress_statistics (integrations/bitsandbytes.py); QLoRA's base is
   * nf4 unless the workload says otherwise */
  if (!rc && vs_workload_base_dtype(wl) == VS_BASE_NF4)
    rc = preset(wl, "finetune", "double_quant", "false",
                "transformers' BitsAndBytesConfig defaults "
                "bnb_4bit_use_double_quant to False",
                err);
  return rc ? rc
            : preset(wl, "parallel", "bucket", bucket,
                     "DDP's bucket_cap_mb = 25", err);
}

int vs_workload_apply_framework(vs_workload *wl, vs_error *err)
{
  switch (wl->training.framework) {
  case VS_FW_MEGATRON:
    return preset_megatron(wl, err);
  case VS_FW_DEEPSPEED:
    return preset_deepspeed(wl, err);
  case VS_FW_FSDP2:
    return preset_fsdp2(wl, err);
  case VS_FW_HF:
    return preset_hf(wl, err);
  default:
    return 0;
  }
}
