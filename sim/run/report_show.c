/* report_show.c - `vsim show` and `vsim keys`: the resolved configuration
 * of a workload, what it chose and why, and the table of every key (see
 * report.h). */
#include "report.h"
#include "report_int.h"

#include "units.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a key line's own comment starts with (write_loadable cuts it
 * where the line would be too long). */
#define KEY_COMMENT "    ; "

/* One "key = value" line of `vsim show`, loadable as it is; a list left
 * empty (pp_layers: an even split) has no loadable value, so it is
 * written as a comment, and so is a default that follows the GPU count
 * (dp, global_batch), which as a key would refuse another --gpus, and a
 * preset's value that follows it (Megatron-LM's bucket), which as a key
 * would keep this count's. */
static void show_key(FILE *out, const vs_key *k, const vs_workload *wl,
                     const vs_origin *origin)
{
  bool empty_list = k->type == VS_KEY_LIST &&
                    ((const vs_count_list *)(const void *)((const char *)wl +
                                                           k->offset))->n == 0;
  bool unset_path = k->type == VS_KEY_PATH &&
                    ((const char *)wl + k->offset)[0] == '\0';
  const char *needs;
  if (empty_list || unset_path) {
    fprintf(out, "; %s =" KEY_COMMENT "default: %s\n", k->name,
            k->default_doc);
    return;
  }
  if (k->type == VS_KEY_PATH) {
    /* a file relative to the workload's folder; what it gave is written
     * out as keys, so the output loads back from anywhere */
    fprintf(out, "; %s = ", k->name);
    vs_conf_print_value(out, k, wl);
    fprintf(out, KEY_COMMENT "its values are written out above\n");
    return;
  }
  if (!origin->set &&
      (needs = vs_workload_key_unused(wl, k->section, k->name))) {
    /* as a key, it would be refused without what it needs */
    fprintf(out, "; %s = ", k->name);
    vs_conf_print_value(out, k, wl);
    fprintf(out, KEY_COMMENT "default, unused without %s\n", needs);
    return;
  }
  if (!origin->set && k->follows_gpus) {
    fprintf(out, "; %s = ", k->name);
    vs_conf_print_value(out, k, wl);
    fprintf(out, KEY_COMMENT "default: %s (it follows --gpus)\n",
            k->default_doc);
    return;
  }
  fprintf(out, "%s%s = ", origin->follows_gpus ? "; " : "", k->name);
  vs_conf_print_value(out, k, wl);
  if (origin->set && origin->line == -2) {
    fprintf(out, KEY_COMMENT "framework preset: %s%s\n",
            origin->why ? origin->why : "its default",
            origin->follows_gpus ? " (it follows --gpus)" : "");
    return;
  }
  /* a value hf_config gave without a field of its file (why NULL) is its
   * model_type's default (vs_hf_key field) */
  fprintf(out, "%s\n",
          !origin->set                      ? KEY_COMMENT "default"
          : origin->line < 0 && origin->why ? KEY_COMMENT "from hf_config"
          : origin->line < 0 ? KEY_COMMENT "default for hf_config's model_type"
                             : "");
}

/* What stage s keeps in `place` (host or NVMe). */
static const vs_placed_bytes *placed_at(const vs_layout *lay, uint64_t s,
                                        int place)
{
  return place == VS_PLACE_NVME ? &lay->stages[s].nvme : &lay->stages[s].host;
}

/* The stage keeping the most in `place`; pp when none keeps anything. */
static uint64_t most_off_gpu(const vs_layout *lay, int place)
{
  uint64_t most = lay->pp;
  for (uint64_t s = 0; s < lay->pp; s++) {
    uint64_t total = vs_placed_total(placed_at(lay, s, place));
    if (total && (most == lay->pp ||
                  total > vs_placed_total(placed_at(lay, most, place))))
      most = s;
  }
  return most;
}

/* One derived line for what a GPU keeps in a place off it (the stage
 * keeping the most), when any stage keeps anything there. */
static void show_off_gpu(FILE *out, const vs_layout *lay, int place)
{
  const char *what = place == VS_PLACE_NVME ? "NVMe" : "host memory";
  uint64_t s = most_off_gpu(lay, place);
  const vs_placed_bytes *most;
  char b[5][16];
  if (s == lay->pp)
    return;
  most = placed_at(lay, s, place);
  fprintf(out, "# %s per GPU (offload) = %s params + %s grads + %s optimizer "
               "+ %s buffers = %s\n",
          what, vs_format_bytes(most->params, b[0], sizeof b[0]),
          vs_format_bytes(most->grads, b[1], sizeof b[1]),
          vs_format_bytes(most->optimizer, b[2], sizeof b[2]),
          vs_format_bytes(most->buffers, b[3], sizeof b[3]),
          vs_format_bytes(vs_placed_total(most), b[4], sizeof b[4]));
}

/* How fast a copy to or from pageable offload buffers (vs_offload_plan
 * pageable) may move: the calibrated curves at each copy's size, or the
 * node's pageable rates. */
static void show_pageable(FILE *out, const vs_topology *topo,
                          const vs_recipe *r)
{
  if (!r->offload.pageable)
    return;
  if (topo->fit_parts[VS_CAL_H2D_PAGEABLE] ||
      topo->fit_parts[VS_CAL_D2H_PAGEABLE])
    fprintf(out, "# the offload buffers are pageable: each copy to or from "
                 "them moves at most at its size's rate on the calibrated "
                 "h2d_pageable / d2h_pageable curves\n");
  else
    fprintf(out,
            "# the offload buffers are pageable: each copy moves at most "
            "%.2f GB/s to the GPU and %.2f GB/s from it ([node] "
            "pageable_h2d_bandwidth, pageable_d2h_bandwidth)\n",
            topo->pageable_h2d_bandwidth / 1e9,
            topo->pageable_d2h_bandwidth / 1e9);
}

/* What DeepSpeed ZeRO-1/2's offload buffers (vs_offload_plan
 * bit16_buffers) are, on the GPU of show_off_gpu's host line. */
static void show_deepspeed_offload(FILE *out, const vs_recipe *r,
                                   const vs_layout *lay)
{
  uint64_t s = most_off_gpu(lay, VS_PLACE_HOST);
  const vs_stage_layout *st;
  uint64_t copy;
  char b[3][16];
  if (r->offload.bit16_buffers == 0 || s == lay->pp)
    return;
  st = &lay->stages[s];
  copy = vs_recipe_bit16_host_bytes(r, st->step_elems);
  fprintf(out,
          "# DeepSpeed's offload buffers per GPU (stage_1_and_2.py): "
          "%s staging of the largest tensor on the GPU (temp) and on "
          "the host\n",
          vs_format_bytes(st->grad_staging_bytes, b[0], sizeof b[0]));
  fprintf(out, "#   and on the host %s 16-bit copy of the updated partition",
          vs_format_bytes(copy, b[1], sizeof b[1]));
  if (vs_recipe_host_sums(r, lay->grad_accum))
    fprintf(out, " + %s 16-bit gradient sums over its %llu micro-batches",
            vs_format_bytes(copy, b[2], sizeof b[2]),
            (unsigned long long)lay->grad_accum);
  fprintf(out, "\n");
}

/* Rank r adapters on the targets of f, "rank 8 adapters on q,v, fp32". */
static void adapters_text(const vs_finetune_conf *f, char *buf, size_t size)
{
  char targets[64] = "";
  for (int t = 0, n = 0; t < VS_LORA_N; t++)
    if (f->lora_targets & 1u << t)
      n += snprintf(targets + n, sizeof targets - (size_t)n, "%s%s",
                    n ? "," : "", vs_lora_target_name(t));
  snprintf(buf, size, "rank %llu adapters on %s, %s",
           (unsigned long long)f->lora_rank, targets,
           vs_adapter_dtype_name(f->adapter_dtype));
}

/* Where a mixture of experts' experts live (their optimizer states
 * sharded as the recipe decides: ZeRO >= 1, or DeepSpeed's
 * BF16_Optimizer; their gradients from ZeRO-2 on) and how its tokens
 * route. */
static void show_experts(FILE *out, const vs_workload *wl,
                         const vs_recipe *r, const vs_layout *lay)
{
  const vs_model_conf *m = &wl->model;
  uint64_t ep = wl->parallel.ep;
  if (m->experts == 0)
    return;
  if (r->expert_optimizer.degree > 1)
    fprintf(out,
            "# experts: %llu of %llu on each GPU (ep %llu), their "
            "optimizer states%s sharded over %llu GPUs (%s)\n",
            (unsigned long long)(m->experts / ep),
            (unsigned long long)m->experts, (unsigned long long)ep,
            r->expert_grads.degree > 1 ? " and gradients" : "",
            (unsigned long long)r->expert_optimizer.degree,
            vs_workload_etp(&wl->parallel) == wl->parallel.tp
                ? "dp x cp / ep"
                : "tp x dp x cp / (etp x ep)");
  else
    fprintf(out, "# experts: %llu of %llu on each GPU (ep %llu), their "
                 "optimizer states whole on it\n",
            (unsigned long long)(m->experts / ep),
            (unsigned long long)m->experts, (unsigned long long)ep);
  fprintf(out, "# expert grid: etp %llu x ep %llu x edp %llu = a stage's tp x "
               "dp x cp %llu GPUs, etp innermost (Megatron-LM's order)\n",
          (unsigned long long)lay->group_size[VS_GROUP_ETP],
          (unsigned long long)lay->group_size[VS_GROUP_EP],
          (unsigned long long)lay->group_size[VS_GROUP_EXPERT_DP],
          (unsigned long long)(lay->tp * lay->dp));
  if (m->expert_capacity_factor > 0)
    fprintf(out,
            "# routing: capacity factor %g, every expert padded to its "
            "slots whatever the routing%s\n",
            m->expert_capacity_factor,
            m->routing_skew > 0 ? " (routing_skew without effect: with a "
                                  "capacity, tokens over an expert's slots "
                                  "are dropped)"
                                : "");
  else if (vs_workload_skew_applies(m, ep))
    fprintf(out, "# routing: skewed, the hottest expert receives %g x its "
                 "balanced share; each stage's simulated GPU holds it (the "
                 "worst)\n# with --ranks all: ep rank 0 of each expert group "
                 "holds it, the others share the rest\n",
            1.0 + m->routing_skew);
  else if (m->routing_skew > 0)
    fprintf(out, "# routing: skewed, but each GPU holds every expert (ep = "
                 "1): its load is kT token slots whatever the routing\n");
  else
    fprintf(out, "# routing: balanced (dropless, kT token slots a GPU)\n");
}

/* With frozen base weights: what trains (adapters, or the last layers),
 * and the base's format. Parameters on one tp rank summed over the
 * pipeline (the model's with tp = 1). */
static void show_finetune(FILE *out, const vs_workload *wl,
                          const vs_layout *lay)
{
  const vs_finetune_conf *f = &wl->finetune;
  uint64_t trainable = 0;
  char what[160];
  if (f->method == VS_FT_FULL)
    return;
  for (uint64_t s = 0; s < lay->pp; s++)
    trainable += lay->stages[s].trainable_elems;
  if (f->method == VS_FT_FROZEN)
    snprintf(what, sizeof what, "the last %llu layers and what follows them",
             (unsigned long long)f->trainable_layers);
  else
    adapters_text(f, what, sizeof what);
  fprintf(out, "# trainable parameters = %llu%s (%s: %s; the rest frozen, "
               "frozen layers' linear weights in %s)\n",
          (unsigned long long)trainable, lay->tp > 1 ? " per tp rank" : "",
          vs_finetune_name(f->method), what, vs_base_dtype_name(f->base_dtype));
}

/* What the optimizer step allocates for itself (the stage allocating the
 * most), and why, when it allocates anything. */
static void show_step_copies(FILE *out, const vs_workload *wl,
                             const vs_recipe *r, const vs_layout *lay)
{
  uint64_t most = 0;
  char b[16];
  for (uint64_t s = 0; s < lay->pp; s++)
    if (lay->stages[s].step_temp_bytes > most)
      most = lay->stages[s].step_temp_bytes;
  if (!most)
    return;
  fprintf(out, "# optimizer step temporaries = %s per GPU:",
          vs_format_bytes(most, b, sizeof b));
  if (r->step_copy != VS_STEP_COPY_NONE)
    fprintf(out, " fp32 gradient copies (%s's optimizer wrapper)",
            vs_framework_name(wl->training.framework));
  if (r->step_sqrt_list)
    fprintf(out, " foreach Adam's square roots of exp_avg_sq");
  if (r->step_unscaled)
    fprintf(out,
            " FusedAdam's fp32 copies of %u narrower state(s), a "
            "parameter group at a time",
            (unsigned)r->step_unscaled);
  fputc('\n', out);
}

/* What the framework's step moves on the GPU besides the update
 * (vs_recipe step_wrap): its passes over the gradients. */
static void show_step_passes(FILE *out, const vs_workload *wl,
                             const vs_recipe *r)
{
  const vs_step_passes *p = &r->step_passes;
  const char *sep = "";
  if (!(p->wrap > 0) && !(p->buffer > 0))
    return;
  fprintf(out, "# optimizer step around the update (%s):",
          vs_framework_name(wl->training.framework));
  if (p->wrap > 0) {
    fprintf(out,
            " %.0f B a stepped element (casts, overflow check, norm, "
            "unscaling, clipping)",
            p->wrap);
    sep = ",";
  }
  if (p->buffer > 0)
    fprintf(out,
            "%s %.0f pass(es) a step over the resident gradients (zeroing, "
            "scaling, checks)",
            sep, p->buffer);
  fputc('\n', out);
}

/* Which optimizer wrapper DeepSpeed's engine runs (engine.py
 * _do_optimizer_sanity_check): FP16_Optimizer, BF16_Optimizer or its
 * ZeRO optimizer; nothing (plain torch.optim) in fp32 without ZeRO. */
static void show_deepspeed_wrapper(FILE *out, const vs_workload *wl)
{
  const vs_training_conf *t = &wl->training;
  const vs_parallel_conf *p = &wl->parallel;
  switch (vs_workload_deepspeed_optimizer(t, p)) {
  case VS_DS_OPT_BF16:
    fprintf(out,
            "# deepspeed's optimizer: BF16_Optimizer (%s), its "
            "gradients accumulated in %s in a buffer of their own, "
            "beside each 16-bit .grad\n",
            p->zero == 1 ? "ZeRO-1 with fp32 gradient accumulation"
                         : "bf16 under its pipeline engine",
            t->grad_dtype == VS_GRAD_FP32 ? "fp32" : "bf16");
    break;
  case VS_DS_OPT_FP16:
    fprintf(out, "# deepspeed's optimizer: FP16_Optimizer without ZeRO%s\n",
            t->precision == VS_PREC_BF16 ? ", in bf16 mode (DDP_BFLOAT16)"
                                         : "");
    break;
  case VS_DS_OPT_ZERO:
  case VS_DS_OPT_ZERO3:
    fprintf(out, "# deepspeed's optimizer: its ZeRO stage %llu optimizer\n",
            (unsigned long long)p->zero);
    break;
  default:
    break;
  }
}

/* What autocast and DDP add to a job: the weights' 16-bit copies of one
 * layer (saved from forward to backward), and the reducer's bucket copy
 * of the gradients. */
static void show_autocast_ddp(FILE *out, const vs_workload *wl,
                              const vs_model *m, const vs_layout *lay)
{
  const vs_block *layer = vs_model_layer(m, 0);
  uint64_t copies = 0;
  char b[16];
  for (uint32_t s = 0; s < layer->n_saved; s++)
    if (layer->saved[s].weight_copy == VS_COPY_AUTOCAST)
      copies += layer->saved[s].bytes;
  if (copies)
    fprintf(out, "# autocast (%s): fp32 weights, gradients and states; each "
                 "GEMM weight's 16-bit copy from its first use to its "
                 "backward, %s a layer (in activations)\n",
            vs_precision_name(wl->training.precision),
            vs_format_bytes(copies, b, sizeof b));
  if (lay->stages[0].ddp_bucket_bytes)
    fprintf(out, "# of the grads, %s per GPU are DDP's bucket copy "
                 "(gradient_as_bucket_view = False)\n",
            vs_format_bytes(lay->stages[0].ddp_bucket_bytes, b, sizeof b));
}

/* What the layer kind keeping the most saves (dense, MoE, ...), as r
 * keeps it without checkpointing (vs_recipe_kind_saved_bytes). */
static uint64_t largest_layer_saved(const vs_model *m, const vs_recipe *r)
{
  uint64_t most = 0;
  for (uint32_t k = 0; k < m->n_kinds; k++) {
    uint64_t saved = m->kinds[k].role == VS_ROLE_LAYER
                         ? vs_recipe_kind_saved_bytes(r, m, k)
                         : 0;
    if (saved > most)
      most = saved;
  }
  return most;
}

/* The parameters: in total (the multi-token prediction module aside, as
 * DeepSeek counts its 671 B), the most loaded GPU's (its share of that
 * module included; before ZeRO-3 partitions them), a token's, where the
 * experts are, what trains. */
static void show_parameters(FILE *out, const vs_workload *wl,
                            const vs_model *m, const vs_recipe *r,
                            const vs_layout *lay)
{
  fprintf(out,
          "# "
          "parameters = %llu (%.3f B) in total%s, %llu on the most "
          "loaded GPU%s%s\n",
          (unsigned long long)m->params_total, (double)m->params_total / 1e9,
          m->params_mtp ? " without the MTP module" : "",
          (unsigned long long)lay->param_elems,
          m->params_mtp ? " with what it holds of the MTP module" : "",
          wl->parallel.zero >= 3 ? " before ZeRO-3 partitions them" : "");
  if (m->params_active != m->params_total)
    fprintf(out,
            "# active parameters = %llu (%.3f B) a token: the router "
            "and %llu of %llu routed experts%s in each MoE layer\n",
            (unsigned long long)m->params_active,
            (double)m->params_active / 1e9,
            (unsigned long long)wl->model.experts_per_token,
            (unsigned long long)wl->model.experts,
            wl->model.shared_experts ? " with the shared ones" : "");
  if (m->params_active != m->params_total && m->params_lookup)
    fprintf(out, "#   %.3f B without the embedding tables a token only "
                 "looks up (as DeepSeek counts; Mistral and Qwen count "
                 "them)\n",
            (double)(m->params_active - m->params_lookup) / 1e9);
  if (m->params_mtp)
    fprintf(out, "# multi-token prediction parameters = %llu (%.3f B) "
                 "beside them: %llu depth(s) of a layer like the last, "
                 "eh_proj and three norms (the embedding and output layer "
                 "are shared)\n",
            (unsigned long long)m->params_mtp, (double)m->params_mtp / 1e9,
            (unsigned long long)wl->model.mtp_layers);
  show_experts(out, wl, r, lay);
  show_finetune(out, wl, lay);
}

/* Under per_tensor_states, how the gradients and the optimizer's states
 * reach the allocator: in backward or at the setup, tensor by tensor
 * when the first step makes them (first_step_states). */
static const char *later_states(const vs_recipe *r)
{
  if (r->step_in_backward)
    return "each block's gradients in its backward, stepped there; the "
           "optimizer's moments one buffer";
  if (!r->first_step_states)
    return r->grads_set_to_none ? "each gradient in backward, the "
                                  "optimizer's moments one buffer"
                                : "the gradients and the optimizer's moments "
                                  "one buffer each";
  return r->grads_set_to_none
             ? "each gradient in backward; the first step makes each "
               "optimizer state at its step,\n#   and the step reported "
               "runs in the cache it leaves"
             : "the first step makes each gradient in its backward and each "
               "optimizer state at its step,\n#   and the step reported "
               "runs in the cache it leaves";
}

/* How the model states reach the caching allocator (vs_recipe
 * per_tensor_states). */
static void show_state_allocations(FILE *out, const vs_workload *wl,
                                   const vs_model *m, const vs_recipe *r)
{
  uint64_t tensors = 0, masters = 0;
  if (wl->training.set_grads_to_none && !r->grads_set_to_none &&
      !r->reduced_grads_set_to_none)
    fprintf(out, "# set_grads_to_none has no effect here: no gradient "
                 "stays on the GPU from one step to the next (the "
                 "optimizer steps on the host, or in backward)\n");
  if (!r->per_tensor_states) {
    fprintf(out,
            "# model states reach the allocator as one buffer per "
            "state (flat buffers or ZeRO partitions)%s\n",
            r->grads_set_to_none ? "; the gradients each block's in its "
                                   "first backward, gone after the step"
            : r->reduced_grads_set_to_none
                ? "; the gradients each block's share at its first "
                  "reduction, gone after the step"
                : "");
    return;
  }
  for (size_t inst = 0; inst < (size_t)m->layers + 2; inst++) {
    const vs_block *blk = vs_model_block(m, inst);
    for (uint32_t i = 0; i < blk->n_params; i++) {
      vs_tensor_states ts;
      vs_recipe_tensor_states(r, &wl->training, &blk->params[i], &ts);
      masters += ts.master ? 1 : 0;
    }
    tensors += blk->n_params;
  }
  fprintf(out, "# model states reach the allocator as PyTorch's own loop "
               "makes them: each of the model's %llu parameter tensors%s "
               "as it is built,\n#   %s\n",
          (unsigned long long)tensors,
          masters == 0         ? ""
          : masters == tensors ? " (and its fp32 master copy)"
                               : " (and the trainable ones' fp32 master "
                                 "copies)",
          later_states(r));
}

/* text with each control character as '?': a file name in a comment
 * line, which a line end in the name would split (and the output would
 * no longer load back). */
static void put_one_line(FILE *out, const char *text)
{
  for (const unsigned char *c = (const unsigned char *)text; *c; c++)
    fputc(*c < 0x20 || *c == 0x7f ? '?' : *c, out);
}

/* Every key of the workload as resolved, in [section] order. */
static void show_keys(FILE *out, const vs_workload *wl)
{
  const vs_keytab *tab = vs_workload_keys();
  fputs("# ", out);
  put_one_line(out, wl->origins.file);
  fputs(" resolved (every key, defaults filled in)\n", out);
  for (size_t i = 0; i < tab->n_keys; i++) {
    const vs_key *k = &tab->keys[i];
    if (i == 0 || strcmp(k->section, tab->keys[i - 1].section) != 0)
      fprintf(out, "[%s]\n", k->section);
    show_key(out, k, wl, &wl->origins.keys[i]);
  }
}

/* With a pipeline: each stage's layers, parameters and model states. */
static void show_stages(FILE *out, const vs_layout *lay)
{
  char b1[16];
  if (lay->pp <= 1)
    return;
  fprintf(out, "# "
               "pipeline: %llu stages, %llu virtual stage(s) each\n",
          (unsigned long long)lay->pp, (unsigned long long)lay->vstages);
  for (uint64_t s = 0; s < lay->pp; s++) {
    const vs_stage_layout *st = &lay->stages[s];
    fprintf(out, "# "
                 "  stage %llu: %llu layers%s%s, %llu parameters, model "
                 "states %s\n",
            (unsigned long long)s, (unsigned long long)st->n_layers,
            st->has_embed ? " + embedding" : "", st->has_head ? " + head" : "",
            (unsigned long long)st->param_elems,
            vs_format_bytes(vs_layout_stage_model_states(lay, s), b1,
                            sizeof b1));
  }
}

/* A derived line for each key set to something that changes nothing in
 * this job, which vsim accepts as the frameworks do. */
static void show_idle_keys(FILE *out, const vs_workload *wl)
{
  const vs_parallel_conf *p = &wl->parallel;
  if (p->sequence_parallel && !vs_workload_sp(p))
    fprintf(out, "# sequence_parallel has no effect at tp = 1: there is "
                 "nothing to split (Megatron-LM turns it off too)\n");
  if (p->order != VS_ORDER_TP_DP_PP && (p->pp == 1 || p->dp == 1))
    fprintf(out,
            "# order = %s has no effect at %s = 1: both orders place "
            "the ranks alike\n",
            vs_order_name(p->order), p->pp == 1 ? "pp" : "dp");
  if (!vs_workload_bucket_matters(wl) &&
      (!p->overlap_grad_reduce || p->bucket_bytes != VS_BUCKET_DEFAULT))
    fprintf(out, "# overlap_grad_reduce and bucket have no effect here: no "
                 "gradient leaves the GPU (dp x cp = 1, no optimizer "
                 "offload)\n");
  if (vs_workload_deepspeed_engine_allreduce(&wl->training, p) &&
      vs_workload_bucket_matters(wl) &&
      vs_conf_set_by_user(vs_workload_keys(), &wl->origins, "parallel",
                          "bucket"))
    fprintf(out, "# bucket has no effect here: deepspeed's engine "
                 "all-reduces the gradients in buckets of 5e8 elements "
                 "(MEMORY_OPT_ALLREDUCE_SIZE; its BF16_Optimizer's buffer "
                 "whole) whatever reduce_bucket_size says\n");
  if (!wl->training.master_weights &&
      vs_finetune_adapters(wl->finetune.method) &&
      wl->finetune.adapter_dtype == VS_ADAPTER_FP32)
    fprintf(out, "# master_weights = false has no effect: the only "
                 "trainable weights, the fp32 adapters, have no 16-bit "
                 "copy to keep a master of\n");
  if (!wl->training.grad_clipping &&
      wl->training.framework == VS_FW_DEEPSPEED &&
      !vs_deepspeed_clip_matters(&wl->training, p))
    fprintf(out, "# grad_clipping = false has no effect under deepspeed: "
                 "its step takes the gradients' norm and multiplies them "
                 "whatever gradient_clipping says\n");
  if (wl->training.grad_clipping && vs_workload_cpu_step(p))
    fprintf(out, "# grad_clipping has no effect here: the optimizer steps "
                 "on the host, where vsim prices no pass over the "
                 "gradients\n");
  if (wl->training.paged_optimizer && wl->training.optimizer == VS_OPT_SGD)
    fprintf(out, "# paged_optimizer has no effect with sgd: plain SGD keeps "
                 "no optimizer states to page\n");
  if (wl->model.zero_centered_norm && !vs_workload_python_rmsnorm(wl))
    fprintf(out, "# zero_centered_norm has no effect here: a fused norm "
                 "saves its input whatever its scale; only the eager Python "
                 "RMSNorm (arch llama, framework hf or fsdp2, kernels = "
                 "eager) keeps more for it\n");
  if (wl->model.attn_softcap > 0.0 && wl->training.attention == VS_ATTN_FLASH)
    fprintf(out, "# attn_softcap costs nothing under flash attention: a "
                 "kernel that caps keeps no scores (FlashAttention 2.6's "
                 "softcap, which transformers' flash_attention_2 passes; "
                 "its sdpa path ignores the cap)\n");
}

/* The topology's keys given by --set: not part of the workload written
 * here, so a comment each, to give again with it. */
static void show_topology_sets(FILE *out, const vs_topology *topo)
{
  const vs_keytab *tab = vs_topology_keys();
  for (size_t i = 0; i < tab->n_keys; i++) {
    const vs_key *k = &tab->keys[i];
    char where[400];
    if (!vs_conf_set_by_option(tab, &topo->origins, k->section, k->name))
      continue;
    fprintf(out,
            "# topology: %s (not written above: give it again with "
            "this file)\n",
            vs_conf_where(tab, &topo->origins, k->section, k->name, where,
                          sizeof where));
  }
}

static void show_text(FILE *out, const vs_workload *wl,
                      const vs_topology *topo, const vs_model *m,
                      const vs_recipe *r, const vs_layout *lay)
{
  char cp[32];
  char b1[16], b2[16], b3[16], b4[16];

  show_keys(out, wl);
  fprintf(out, "\n# derived (comments, so that this output loads back)\n");
  fprintf(out, "# gpus = %llu (dp %llu x %stp %llu x pp %llu), %llu node(s) "
               "of %llu x %s\n",
          (unsigned long long)lay->gpus, (unsigned long long)wl->parallel.dp,
          vs_report_cp_text(lay, cp, sizeof cp),
          (unsigned long long)lay->tp, (unsigned long long)lay->pp,
          (unsigned long long)lay->nodes,
          (unsigned long long)topo->gpus_per_node, topo->name);
  show_topology_sets(out, topo);
  fprintf(out, "# "
                 "micro-batches per step = %llu\n",
          (unsigned long long)lay->grad_accum);
  show_idle_keys(out, wl);
  if (m->vocab_padded != wl->model.vocab)
    fprintf(out, "# "
                 "vocab padded from %llu to %llu (a multiple of vocab_divisible_by * tp)\n",
            (unsigned long long)wl->model.vocab,
            (unsigned long long)m->vocab_padded);
  show_parameters(out, wl, m, r, lay);
  fprintf(out, "# "
                 "model states per GPU = %s params + %s grads + %s optimizer = "
               "%s\n",
          vs_format_bytes(lay->params_bytes, b1, sizeof b1),
          vs_format_bytes(lay->grads_bytes, b2, sizeof b2),
          vs_format_bytes(lay->optimizer_bytes, b3, sizeof b3),
          vs_format_bytes(vs_layout_model_states(lay), b4, sizeof b4));
  show_state_allocations(out, wl, m, r);
  show_off_gpu(out, lay, VS_PLACE_HOST);
  show_pageable(out, topo, r);
  show_deepspeed_offload(out, r, lay);
  show_off_gpu(out, lay, VS_PLACE_NVME);
  show_deepspeed_wrapper(out, wl);
  show_step_copies(out, wl, r, lay);
  show_step_passes(out, wl, r);
  show_autocast_ddp(out, wl, m, lay);
  show_stages(out, lay);
  fprintf(out,
          "# "
          "activations per layer per micro-batch without "
          "checkpointing = %s%s\n",
          vs_format_bytes(largest_layer_saved(m, r), b1, sizeof b1),
          m->n_kinds > 3 ? " (the layer kind keeping the most)" : "");
  fprintf(out, "# framework per GPU = %s (context, %d NCCL communicator(s))",
          vs_format_bytes(lay->framework_bytes, b1, sizeof b1),
          lay->n_communicators);
  if (lay->pp > 2 && lay->stages[1].framework_bytes < lay->framework_bytes)
    fprintf(out,
            "; %s on the stages between the first and the last, "
            "outside the embedding group",
            vs_format_bytes(lay->stages[1].framework_bytes, b1, sizeof b1));
  fputc('\n', out);
  fprintf(out, "# cuBLAS workspaces per GPU = %d x %s (allocated, in temp: "
               "the forward's and the backward thread's handle)\n",
          lay->blas_workspaces,
          vs_format_bytes(lay->blas_workspace_bytes, b1, sizeof b1));
}

/* Where the line's own comment (KEY_COMMENT) starts, or n. */
static size_t own_comment_at(const char *line, size_t n)
{
  size_t m = sizeof KEY_COMMENT - 1;
  for (size_t i = 0; i + m <= n; i++)
    if (memcmp(line + i, KEY_COMMENT, m) == 0)
      return i;
  return n;
}

/* How write_loadable writes a line of show's text. */
typedef struct line_plan {
  size_t keep;   /* its first characters written; SIZE_MAX: it cannot be */
  bool dots;     /* "..." after them: a comment cut short */
  bool compact;  /* a key line written name=value (the blanks around its
                    = and its own comment dropped), as short as a file
                    could have given it */
  size_t name_end; /* with compact: where its " = " starts */
} line_plan;

/* How to write `line` (n characters, a line of show's text) so that the
 * reader takes it (max characters): a comment is cut, then a key line's
 * own comment, then its blanks; never a key's value. */
static line_plan plan_line(const char *line, size_t n, size_t max)
{
  size_t value_end = own_comment_at(line, n);
  const char *eq = strstr(line, " = ");
  line_plan lp = {.keep = n, .dots = false, .compact = false};
  if (n <= max)
    return lp;
  if (line[0] == '#' || line[0] == ';' ||
      value_end + (sizeof KEY_COMMENT - 1) + 3 <= max) {
    lp.keep = max - 3;
    lp.dots = true;
  } else if (value_end <= max) {
    lp.keep = value_end;
  } else if (eq && eq < line + value_end && value_end - 2 <= max) {
    lp.keep = value_end;
    lp.compact = true;
    lp.name_end = (size_t)(eq - line);
  } else {
    lp.keep = SIZE_MAX;
  }
  return lp;
}

/* Writes line as lp says. */
static void write_line(FILE *out, const char *line, line_plan lp)
{
  if (lp.compact) {
    fprintf(out, "%.*s=%.*s\n", (int)lp.name_end, line,
            (int)(lp.keep - lp.name_end - 3), line + lp.name_end + 3);
    return;
  }
  fprintf(out, "%.*s%s\n", (int)lp.keep, line, lp.dots ? "..." : "");
}

/* The error of a key line no line can hold: where its value came from
 * (only --set can give one that long). */
static int line_too_long(const vs_workload *wl, const char *section,
                         const char *line, size_t n, size_t max,
                         vs_error *err)
{
  char sec[64] = "", key[64] = "", where[VS_ERROR_MSG_MAX / 2];
  size_t shortest = own_comment_at(line, n) - 2; /* name=value */
  sscanf(section, "[%63[^]]", sec);
  sscanf(line, "%63[^ =]", key);
  vs_conf_where(vs_workload_keys(), &wl->origins, sec, key, where,
                sizeof where);
  return vs_error_set(err, VS_EINPUT,
                      "%s: show would write it on a line of %zu "
                      "characters, over the %zu a workload's line can have, "
                      "so its output would not load back",
                      where, shortest, max);
}

/* Writes show's text to out, each line one the reader takes (plan_line);
 * VS_EINPUT, writing nothing, when a key = value alone is longer than a
 * line can be: the output would not load back. */
static int write_loadable(FILE *out, const vs_workload *wl, const char *text,
                          vs_error *err)
{
  size_t max = vs_conf_line_max();
  for (int pass = 0; pass < 2; pass++) {
    const char *section = "";
    for (const char *p = text; *p;) {
      size_t n = strcspn(p, "\n");
      line_plan lp = plan_line(p, n, max);
      if (p[0] == '[')
        section = p;
      if (lp.keep == SIZE_MAX)
        return line_too_long(wl, section, p, n, max, err);
      if (pass == 1)
        write_line(out, p, lp);
      p += n + (p[n] == '\n');
    }
  }
  return 0;
}

int vs_report_show(FILE *out, const vs_workload *wl, const vs_topology *topo,
                   const vs_model *m, const vs_recipe *r,
                   const vs_layout *lay, vs_error *err)
{
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  int rc;
  if (!mem)
    return vs_error_set(err, VS_ENOMEM, "out of host memory");
  show_text(mem, wl, topo, m, r, lay);
  rc = fclose(mem) != 0 || !text
           ? vs_error_set(err, VS_ENOMEM, "out of host memory")
           : write_loadable(out, wl, text, err);
  free(text);
  return rc;
}

static void key_table(FILE *out, const vs_keytab *tab)
{
  static const char *const types[] = {"count", "size", "real", "rate",
                                      "latency", "bool", "enum", "name",
                                      "list", "list of rates",
                                      "list of latencies", "names", "path",
                                      "size or %", "list of reals"};
  fprintf(out, "| key | type | default |\n|---|---|---|\n");
  for (size_t i = 0; i < tab->n_keys; i++) {
    const vs_key *k = &tab->keys[i];
    char choices[256] = "";
    if (k->type == VS_KEY_ENUM || k->type == VS_KEY_FLAGS)
      vs_conf_choices(k->choices, choices, sizeof choices);
    fprintf(out, "| `[%s] %s` | %s%s%s | %s |\n", k->section, k->name,
            types[k->type], choices[0] ? ": " : "", choices, k->default_doc);
  }
}

void vs_report_keys(FILE *out)
{
  fprintf(out, "### workload.ini\n\n");
  key_table(out, vs_workload_keys());
  fprintf(out, "\n### topology.ini\n\n");
  key_table(out, vs_topology_keys());
}
