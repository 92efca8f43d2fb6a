/* layout.c - parallel layout, ZeRO partitioning and framework memory. */
#include "layout.h"

#include "units.h"

#include <string.h>

/* Adds one block instance of plan k to stage st's unsharded states. */
static void add_block(vs_stage_layout *st, const vs_kind_plan *k)
{
  st->managed_bytes += k->paged_bytes;
  /* a block that runs no backward (a frozen prefix) keeps no FP8 copy
   * of its weights past each GEMM: nothing saves it for a backward */
  st->fp8_weight_elems += k->no_backward ? 0 : k->fp8_weight_elems;
  st->fp8_copy_elems += k->no_backward ? 0 : k->fp8_copy_elems;
  st->fp8_gemms += k->fp8_gemms;
  st->param_elems += k->param_elems;
  st->trainable_elems += k->trainable_elems;
  if (k->largest_trainable_elems > st->largest_trainable_elems)
    st->largest_trainable_elems = k->largest_trainable_elems;
  st->decay_elems += k->decay_elems;
  st->params_full_bytes += k->stored_param_bytes;
  st->grads_full_bytes += k->grad_bytes;
  st->optimizer_full_bytes += k->optimizer_bytes;
  st->expert_optimizer_full_bytes += k->expert_optimizer_bytes;
  st->expert_params_full_bytes += k->expert_param_bytes;
  st->expert_grads_full_bytes += k->expert_grad_bytes;
  st->trainable_params_full_bytes += k->trainable_param_bytes;
  st->expert_trainable_elems += k->expert_trainable_elems;
  st->expert_decay_elems += k->expert_decay_elems;
}

/* Splits the layers over pp * vstages model chunks
 * (vs_workload_chunk_size). */
static void split_layers(const vs_workload *wl, vs_layout *lay)
{
  uint64_t first = 0;
  for (uint64_t g = 0; g < lay->n_chunks; g++) {
    uint64_t count = vs_workload_chunk_size(wl, lay->n_chunks, g);
    lay->chunk_first[g] = (uint32_t)first;
    lay->chunk_layers[g] = (uint32_t)count;
    first += count;
  }
}

/* Puts bytes where `place` says: *gpu, *host or *nvme. */
static void put(int place, uint64_t bytes, uint64_t *gpu, uint64_t *host,
                uint64_t *nvme)
{
  *(place == VS_PLACE_HOST ? host : place == VS_PLACE_NVME ? nvme : gpu) +=
      bytes;
}

/* This GPU's share of `elems` optimizer elements of which `expert` are
 * routed experts': the dense ones over the optimizer's degree, the
 * experts' over the expert-data-parallel one (whole when unsharded). */
static uint64_t sharded_elems(const vs_recipe *r, uint64_t elems,
                              uint64_t expert)
{
  uint64_t dense = elems - expert;
  return (r->optimizer.degree ? vs_div_ceil(dense, r->optimizer.degree)
                              : dense) +
         (r->expert_optimizer.degree
              ? vs_div_ceil(expert, r->expert_optimizer.degree)
              : expert);
}

/* This GPU's share of the larger of the dense and the experts' groups of
 * `elems` optimizer elements of which `expert` are routed experts': the
 * optimizers that make a group's copies for its step free them before the
 * next group's (DeepSpeed's stage_1_and_2.py step and Transformer
 * Engine's FusedAdam step loop over the parameter groups; the experts'
 * are groups of their own: DeepSpeed's MoE param groups, Megatron-LM's
 * expert optimizer). */
static uint64_t largest_group(const vs_recipe *r, uint64_t elems,
                              uint64_t expert)
{
  uint64_t dense = sharded_elems(r, elems - expert, 0);
  uint64_t experts = sharded_elems(r, expert, expert);
  return dense > experts ? dense : experts;
}

/* Partitions st's states as the recipe says and puts each where it lives:
 * the GPU, the host or NVMe (the GPU's figure drops by what moves). */
static void place_states(const vs_recipe *r, bool host_sums,
                         vs_stage_layout *st)
{
  uint64_t grads = vs_recipe_grads_shard(r, st->grads_full_bytes,
                                         st->expert_grads_full_bytes);
  st->optimizer_shard_bytes =
      vs_recipe_shard(&r->optimizer, st->optimizer_full_bytes -
                                         st->expert_optimizer_full_bytes) +
      vs_recipe_shard(&r->expert_optimizer, st->expert_optimizer_full_bytes);
  st->params_shard_bytes = vs_recipe_shard(&r->params, st->params_full_bytes);
  st->step_elems = sharded_elems(r, st->trainable_elems,
                                 st->expert_trainable_elems);
  put(r->optimizer.place, st->optimizer_shard_bytes, &st->optimizer_bytes,
      &st->host.optimizer, &st->nvme.optimizer);
  /* paged states leave the GPU's figure, sharded as the rest (DeepSpeed's
   * BF16_Optimizer pages its flat partitions) */
  st->managed_bytes = vs_recipe_shard(&r->optimizer, st->managed_bytes);
  st->optimizer_bytes -= st->managed_bytes;
  put(r->params.place, st->params_shard_bytes, &st->params_bytes,
      &st->host.params, &st->nvme.params);
  if (r->grads.place == VS_PLACE_GPU && !r->step_in_backward)
    st->grads_bytes = grads; /* stepped in backward: never all at once */
  if (r->ddp_bucket_copy)
    st->ddp_bucket_bytes = grads; /* the reducer's buckets */
  st->grads_bytes += st->ddp_bucket_bytes;
  if (r->offload.cpu_step)
    st->host.grads = vs_recipe_shard(&r->offload.host_grads,
                                     4 * st->trainable_elems);
  st->host.buffers = vs_recipe_host_buffer_bytes(
      r, st->step_elems, st->largest_trainable_elems, host_sums);
  st->grad_staging_bytes =
      vs_recipe_grad_staging_bytes(r, st->largest_trainable_elems);
  if (r->step_copy == VS_STEP_COPY_FLAT)
    st->step_temp_bytes = 4 * st->step_elems + 4 * st->decay_elems;
  else if (r->step_copy == VS_STEP_COPY_PARTITION) /* a group at a time
                                                     (largest_group) */
    st->step_temp_bytes =
        4 * largest_group(r, st->decay_elems, st->expert_decay_elems);
  else if (r->step_copy == VS_STEP_COPY_MAIN_GRADS)
    st->step_temp_bytes = 4 * st->step_elems;
  else if (r->step_copy == VS_STEP_COPY_SUB_GROUP) /* the concatenation
                                                     and, of 16-bit
                                                     gradients, its fp32
                                                     copy */
    st->step_temp_bytes =
        (r->grad_elem_bytes + (r->grad_elem_bytes == 4 ? 0 : 4)) *
        vs_recipe_sub_group_elems(
            largest_group(r, st->decay_elems, st->expert_decay_elems));
  if (r->step_sqrt_list)
    st->step_temp_bytes += st->optimizer_bytes / 2;
  /* a parameter group at a time: the largest, the dense or the routed
   * experts' weight-decay group (Megatron-LM steps the experts' with an
   * optimizer of their own) */
  st->step_temp_bytes +=
      4ull * r->step_unscaled *
      largest_group(r, st->decay_elems, st->expert_decay_elems);
}

/* Transformer Engine's delayed scaling keeps an fp32 amax history of
 * 1024 entries (DelayedScaling's amax_history_len) for each FP8 tensor
 * (shared/reference/frameworks.md 7); a module's fp8_meta tracks three
 * forward tensors per GEMM (input, weight, output) and two backward ones
 * (output gradient, input gradient). */
#define FP8_AMAX_HISTORY_BYTES (1024 * 4)
#define FP8_TENSORS_PER_GEMM 5

/* Transformer Engine's FP8 state, kept through the step and counted with
 * the parameters: the amax histories, and the weight copies from each
 * weight's first quantization to the step's end, 1 B a weight not stored
 * in FP8 and 1 B a weight for the transposed copy Hopper and Ada need (an
 * FP8 weight too). ZeRO-3 gathers weights per block; their copies are
 * then saved tensors of the GEMMs (the model's weight copies, which the
 * recipe keeps there) and not kept here. */
static void fp8_cache(const vs_topology *topo, const vs_recipe *r,
                      vs_stage_layout *st)
{
  st->fp8_cache_bytes = st->fp8_gemms * FP8_TENSORS_PER_GEMM *
                        FP8_AMAX_HISTORY_BYTES;
  if (!r->gather_params)
    st->fp8_cache_bytes += st->fp8_copy_elems +
                           (topo->fp8_transposes ? st->fp8_weight_elems : 0);
  st->params_bytes += st->fp8_cache_bytes;
}

/* Stage s's model states: the sum of its blocks' (the recipe's figures
 * for each instance's kind), partitioned as the recipe says. */
static void stage_states(const vs_model *m, const vs_recipe *r,
                         vs_layout *lay, uint64_t s)
{
  vs_stage_layout *st = &lay->stages[s];
  size_t last = (size_t)m->layers + 1;

  st->has_embed = s == 0;
  st->has_head = s == lay->pp - 1;
  for (uint64_t g = s; g < lay->n_chunks; g += lay->pp) {
    st->n_layers += lay->chunk_layers[g];
    for (size_t i = 0; i < lay->chunk_layers[g]; i++)
      add_block(st, vs_recipe_kind(r, m, lay->chunk_first[g] + 1 + i));
  }
  if (st->has_embed)
    add_block(st, vs_recipe_kind(r, m, 0));
  if (st->has_head)
    add_block(st, vs_recipe_kind(r, m, last));
  place_states(r, vs_recipe_host_sums(r, lay->grad_accum), st);
}

/* Megatron-LM's expert rank grid: a stage's tp x dp x cp ranks are etp
 * x ep x expert-data-parallel ones, etp innermost (its expert rank
 * generator, order "tp-ep-dp" with etp for tp). At etp = tp the ep ranks
 * are consecutive data-parallel ranks (tp apart) and the dp x cp / ep
 * holding the same experts ep data-parallel strides apart, whatever the
 * order; at another etp (order tp-dp-pp or one stage, workload.c: a
 * stage's ranks are consecutive) the etp ranks are consecutive, the ep
 * ranks etp apart and the expert-data-parallel ones etp x ep apart. */
static void place_expert_groups(const vs_workload *wl, vs_layout *lay)
{
  uint64_t etp = vs_workload_etp(&wl->parallel), ep = wl->parallel.ep;
  lay->experts_apart = vs_workload_experts_apart(&wl->parallel);
  lay->group_size[VS_GROUP_ETP] = etp;
  lay->group_size[VS_GROUP_EP] = ep;
  lay->group_size[VS_GROUP_EXPERT_DP] = vs_workload_expert_dp(&wl->parallel);
  if (etp == lay->tp) {
    lay->group_stride[VS_GROUP_ETP] = lay->tp_stride;
    lay->group_stride[VS_GROUP_EP] = lay->dp_stride;
    lay->group_stride[VS_GROUP_EXPERT_DP] = lay->dp_stride * ep;
  } else {
    lay->group_stride[VS_GROUP_ETP] = 1;
    lay->group_stride[VS_GROUP_EP] = etp;
    lay->group_stride[VS_GROUP_EXPERT_DP] = etp * ep;
  }
}

/* The span of the group of n members `stride` ranks apart from rank
 * `base` on nodes of node_gpus GPUs (ranks fill nodes in order). */
static vs_group_span span_from(uint64_t base, uint64_t n, uint64_t stride,
                               uint64_t node_gpus)
{
  vs_group_span span = {1, n};
  uint64_t node = base / node_gpus, run = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t at = (base + i * stride) / node_gpus;
    if (at != node) {
      span.per_node = run < span.per_node ? run : span.per_node;
      span.nodes++;
      node = at;
      run = 0;
    }
    run++;
  }
  span.per_node = run < span.per_node ? run : span.per_node;
  return span;
}

/* Whether a group spanning a sends more of the buffer through each NIC
 * than one spanning b (see group_span in layout.h); on a tie, whether it
 * spans more nodes. */
static bool span_worse(vs_group_span a, vs_group_span b)
{
  uint64_t wa = (a.nodes - 1) * b.nodes * b.per_node;
  uint64_t wb = (b.nodes - 1) * a.nodes * a.per_node;
  return wa != wb ? wa > wb : a.nodes > b.nodes;
}

/* The worst-placed group of the n-member groups `stride` apart over
 * `gpus` ranks: the groups start where a rank's coordinate along the
 * group, (rank / stride) mod n, is 0. Evenly placed groups have one span,
 * found without walking them. */
static vs_group_span worst_span(uint64_t gpus, uint64_t node_gpus,
                                uint64_t n, uint64_t stride)
{
  vs_group_span worst = {1, n};
  if (n <= 1 || gpus <= node_gpus || node_gpus % (n * stride) == 0)
    return worst;
  if (stride % node_gpus == 0)
    return (vs_group_span){n, 1};
  if (node_gpus % stride == 0 && n * stride % node_gpus == 0)
    return (vs_group_span){n * stride / node_gpus, node_gpus / stride};
  for (uint64_t base = 0; base + (n - 1) * stride < gpus; base++) {
    vs_group_span span;
    if ((base / stride) % n)
      continue;
    span = span_from(base, n, stride, node_gpus);
    if (span_worse(span, worst))
      worst = span;
  }
  return worst;
}

/* Which neighbouring stages have a rank whose peer is in another node. */
static void place_stages(const vs_topology *topo, vs_layout *lay)
{
  uint64_t node = topo->gpus_per_node, stride = lay->pp_stride;
  for (uint64_t s = 0; s < lay->pp; s++)
    lay->stage_apart[s] = false;
  if (lay->pp <= 1 || lay->gpus <= node)
    return;
  for (uint64_t r = 0; r < lay->gpus; r++) {
    uint64_t s = (r / stride) % lay->pp;
    uint64_t peer = s + 1 < lay->pp ? r + stride : r - s * stride;
    if (r / node != peer / node)
      lay->stage_apart[s] = true;
  }
}

/* Where each kind's groups sit on the nodes. The embedding group's pair
 * (the first and last stage's peers) is not one digit of the rank, so its
 * span comes from the stages' placement instead of the walk. */
static void place_on_nodes(const vs_topology *topo, vs_layout *lay)
{
  for (int g = 0; g < VS_GROUP_N; g++)
    if (g != VS_GROUP_EMBEDDING)
      lay->group_span[g] = worst_span(lay->gpus, topo->gpus_per_node,
                                      lay->group_size[g],
                                      lay->group_stride[g]);
  place_stages(topo, lay);
  if (lay->pp <= 1)
    lay->group_span[VS_GROUP_EMBEDDING] = (vs_group_span){1, 1};
  else if (lay->stage_apart[lay->pp - 1])
    lay->group_span[VS_GROUP_EMBEDDING] = (vs_group_span){2, 1};
  else
    lay->group_span[VS_GROUP_EMBEDDING] = (vs_group_span){1, 2};
}

/* The size of each group and the rank distance between its members. */
static void place_groups(const vs_workload *wl, vs_layout *lay)
{
  lay->tp_stride = 1;
  if (wl->parallel.order == VS_ORDER_TP_PP_DP) {
    lay->pp_stride = lay->tp;
    lay->dp_stride = lay->tp * lay->pp;
  } else {
    lay->dp_stride = lay->tp;
    lay->pp_stride = lay->tp * lay->dp;
  }
  for (int g = 0; g < VS_GROUP_N; g++) {
    lay->group_size[g] = 1;
    lay->group_stride[g] = 1;
  }
  lay->group_size[VS_GROUP_TP] = lay->tp;
  lay->group_stride[VS_GROUP_TP] = lay->tp_stride;
  lay->group_size[VS_GROUP_DP] = lay->dp;
  lay->group_stride[VS_GROUP_DP] = lay->dp_stride;
  lay->group_size[VS_GROUP_PP] = lay->pp;
  lay->group_stride[VS_GROUP_PP] = lay->pp_stride;
  /* the first and last stage: two members, (pp - 1) strides apart */
  lay->group_size[VS_GROUP_EMBEDDING] = lay->pp > 1 ? 2 : 1;
  lay->group_stride[VS_GROUP_EMBEDDING] = (lay->pp - 1) * lay->pp_stride;
  /* context parallelism: cp consecutive ranks of the dp x cp group */
  lay->group_size[VS_GROUP_CP] = lay->cp;
  lay->group_stride[VS_GROUP_CP] = lay->dp_stride;
  place_expert_groups(wl, lay);
}

/* What PyTorch's libraries keep on every GPU. lay->framework_bytes,
 * outside the caching allocator: the CUDA context and one buffer per
 * communicator, added with overflow checks (sizes from a topology can be
 * absurd, and a sum that wraps would claim a fit); each stage's, where
 * the embedding group (`embedding_group`: the recipe's embedding_sync)
 * has no communicator on the stages between the first and the last
 * (Megatron-LM parallel_state: embedding_ranks = [ranks[0], ranks[-1]]
 * of each pipeline group; the others create none). The cuBLAS
 * workspaces go through the allocator (lay->blas_workspaces:
 * VS_BLAS_WORKSPACES). */
static int framework_memory(const vs_topology *topo, bool embedding_group,
                            vs_layout *lay, vs_error *err)
{
  uint64_t comms, total;
  if (!vs_mul_bytes((uint64_t)lay->n_communicators, topo->nccl_bytes, &comms) ||
      !vs_add_bytes(topo->context_bytes, comms, &total))
    return vs_error_set(err, VS_EINPUT,
                        "%s: [gpu] context_memory + %d x nccl_memory add up "
                        "to over 16 EiB: each is a size per GPU, which has "
                        "%llu bytes",
                        topo->origins.file, lay->n_communicators,
                        (unsigned long long)topo->memory_bytes);
  lay->framework_bytes = total;
  for (uint64_t s = 0; s < lay->pp; s++)
    lay->stages[s].framework_bytes =
        embedding_group && s != 0 && s + 1 != lay->pp ? total - topo->nccl_bytes
                                                      : total;
  lay->blas_workspaces = VS_BLAS_WORKSPACES;
  lay->blas_workspace_bytes = topo->cublas_workspace_bytes;
  return 0;
}

/* Each stage's model states; the layout's are its worst stage's (the
 * most model-state bytes). */
static void all_stage_states(const vs_topology *topo, const vs_model *m,
                             const vs_recipe *r, vs_layout *lay)
{
  const vs_stage_layout *worst = &lay->stages[0];
  for (uint64_t s = 0; s < lay->pp; s++) {
    stage_states(m, r, lay, s);
    fp8_cache(topo, r, &lay->stages[s]);
    if (vs_layout_stage_model_states(lay, s) >
        vs_layout_stage_model_states(lay, (uint64_t)(worst - lay->stages)))
      worst = &lay->stages[s];
  }
  lay->param_elems = worst->param_elems;
  lay->params_full_bytes = worst->params_full_bytes;
  lay->grads_full_bytes = worst->grads_full_bytes;
  lay->optimizer_full_bytes = worst->optimizer_full_bytes;
  lay->params_bytes = worst->params_bytes;
  lay->grads_bytes = worst->grads_bytes;
  lay->optimizer_bytes = worst->optimizer_bytes;
}

/* NCCL communicators: tp, dp, pp groups, and the embedding group that
 * keeps tied input and output embeddings in sync across the pipeline. */
static int communicators(const vs_workload *wl, const vs_recipe *r,
                         const vs_layout *lay)
{
  return (lay->tp > 1) + (lay->dp > 1) + (lay->pp > 1) + (lay->cp > 1) +
         r->embedding_sync + (wl->parallel.ep > 1) +
         (lay->experts_apart && lay->group_size[VS_GROUP_EXPERT_DP] > 1) +
         (lay->group_size[VS_GROUP_ETP] > 1 &&
          lay->group_size[VS_GROUP_ETP] != lay->tp);
}

/* What the workload asks of hardware that the topology does not have,
 * refused naming both sides: FP8 precision on a GPU without FP8 tensor
 * cores; optimizer states or parameters on NVMe on a node without NVMe
 * ([node] nvme_capacity = 0, the default). */
static int hardware_refusals(const vs_workload *wl, const vs_topology *topo,
                             vs_error *err)
{
  const char *nvme_key =
      wl->parallel.offload_optimizer == VS_OFFLOAD_NVME ? "offload_optimizer"
      : wl->parallel.offload_params == VS_OFFLOAD_NVME  ? "offload_params"
                                                        : NULL;
  char where[400], hw[400];
  if (wl->training.precision == VS_PREC_FP8 && topo->peak_tflops_fp8 <= 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: needs a GPU with FP8 tensor cores, but %s has "
                        "none (%s)",
                        vs_conf_where(vs_workload_keys(), &wl->origins,
                                      "training", "precision", where,
                                      sizeof where),
                        topo->name,
                        vs_conf_where(vs_topology_keys(), &topo->origins, "gpu",
                                      "peak_tflops_fp8", hw, sizeof hw));
  if (nvme_key && topo->nvme_capacity_bytes == 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: needs NVMe on the node, but the topology has "
                        "none (%s); offload to cpu, or give the node's NVMe "
                        "capacity",
                        vs_conf_where(vs_workload_keys(), &wl->origins,
                                      "parallel", nvme_key, where,
                                      sizeof where),
                        vs_conf_where(vs_topology_keys(), &topo->origins,
                                      "node", "nvme_capacity", hw, sizeof hw));
  return 0;
}

int vs_layout_build(const vs_workload *wl, const vs_topology *topo,
                    const vs_model *m, const vs_recipe *r, vs_layout *lay,
                    vs_error *err)
{
  int rc;

  memset(lay, 0, sizeof *lay);
  if ((rc = hardware_refusals(wl, topo, err)))
    return rc;
  lay->tp = wl->parallel.tp;
  lay->pp = wl->parallel.pp;
  lay->cp = wl->parallel.cp;
  lay->dp = wl->parallel.dp * lay->cp;
  lay->vstages = wl->parallel.virtual_stages;
  lay->n_chunks = lay->pp * lay->vstages;
  /* the bounds of the layout's arrays: a loaded workload is within them
   * (workload.c refuses the keys past them at their lines) */
  if (lay->pp > VS_MAX_STAGES || lay->n_chunks > VS_MAX_CHUNKS)
    return vs_error_set(err, VS_EINPUT,
                        "%s: %llu pipeline stages x %llu virtual stages: vsim "
                        "simulates at most %d stages and %d chunks",
                        wl->origins.file, (unsigned long long)lay->pp,
                        (unsigned long long)lay->vstages, VS_MAX_STAGES,
                        VS_MAX_CHUNKS);
  lay->gpus = wl->gpus;
  lay->nodes = vs_div_ceil(lay->gpus, topo->gpus_per_node);
  lay->zero = wl->parallel.zero;
  lay->grad_accum = wl->grad_accum;
  place_groups(wl, lay);
  place_on_nodes(topo, lay);
  lay->param_elem_bytes = m->param_elem_bytes;
  lay->grad_elem_bytes = r->grad_elem_bytes;

  split_layers(wl, lay);
  all_stage_states(topo, m, r, lay);
  lay->n_communicators = communicators(wl, r, lay);
  return framework_memory(topo, r->embedding_sync, lay, err);
}

uint64_t vs_layout_stage_model_states(const vs_layout *lay, uint64_t s)
{
  const vs_stage_layout *st = &lay->stages[s];
  return st->params_bytes + st->grads_bytes + st->optimizer_bytes;
}

uint64_t vs_placed_total(const vs_placed_bytes *b)
{
  return b->params + b->grads + b->optimizer + b->buffers;
}

uint64_t vs_layout_blas_bytes(const vs_layout *lay)
{
  return (uint64_t)lay->blas_workspaces * lay->blas_workspace_bytes;
}

uint64_t vs_layout_model_states(const vs_layout *lay)
{
  return lay->params_bytes + lay->grads_bytes + lay->optimizer_bytes;
}

vs_link vs_layout_stage_link(const vs_topology *topo, const vs_layout *lay,
                             uint64_t s, uint64_t t)
{
  uint64_t first = (s + 1) % lay->pp == t ? s : t;
  return vs_collective_link(topo, lay->stage_apart[first]
                                      ? topo->gpus_per_node + 1
                                      : 1);
}
