/* report.c - terminal summary, CSV exports, trace and SVG chart (see
 * report.h; `show` is report_show.c). */
#include "report.h"
#include "report_int.h"

#include "cost.h"
#include "csvout.h"
#include "summary.h"
#include "units.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define TIMELINE_COLUMNS                                                      \
  "time_s,rank,op,category,delta_bytes,allocated_bytes,reserved_bytes"
#define OP_COLUMNS "rank,stream,op,layer,microbatch,start_s,end_s"
#define OPS_COLUMNS OP_COLUMNS ",flops,bytes"
#define OP_BOUNDS_COLUMNS                                                      \
  OP_COLUMNS ",bound,arithmetic_s,memory_s,launch_s,communication_s,"          \
             "transfer_s,cpu_s,phase"
#define HOST_TIMELINE_COLUMNS                                                 \
  "time_s,node,place,rank,op,category,delta_bytes,in_use_bytes"
#define HOST_COLUMNS                                                          \
  "node,place,params_bytes,grads_bytes,optimizer_bytes,activations_bytes,"    \
  "buffers_bytes,"                                                            \
  "peak_bytes,capacity_bytes,fits,peak_time_s"

const char *vs_report_oom_when(const vs_oom *o)
{
  return o->earlier_run ? " in the first step" : "";
}

char *vs_report_op_label(const vs_sim *sim, const vs_program *prog,
                         uint32_t op, char *buf, size_t len)
{
  const vs_pop *o = &prog->ops[op];
  char where[48];
  if (o->phase == VS_PHASE_P2P)
    snprintf(where, sizeof where, "pipeline");
  else if (vs_op_layer(prog, o) < 0)
    snprintf(where, sizeof where, "%s", o->microbatch < 0 ? "step" : "embedding");
  else if ((uint64_t)vs_op_layer(prog, o) >= sim->model.layers)
    snprintf(where, sizeof where, "head");
  else
    snprintf(where, sizeof where, "layer %d", vs_op_layer(prog, o));
  if (o->microbatch >= 0)
    snprintf(buf, len, "%s %s (%s, micro-batch %d)", vs_phase_name(o->phase),
             vs_op_name(prog, o), where, o->microbatch);
  else
    snprintf(buf, len, "%s %s (%s)", vs_phase_name(o->phase),
             vs_op_name(prog, o), where);
  return buf;
}

/* ------------------------------------------------------------------------
 * Terminal
 * ------------------------------------------------------------------------ */

/* How each routed expert is split over GPUs: "" when whole, ", split over
 * tp" at etp = tp, else ", split over etp N" (into buf). */
static const char *expert_split(const vs_parallel_conf *p, char *buf,
                                size_t size)
{
  uint64_t etp = vs_workload_etp(p);
  if (etp == 1)
    return "";
  if (etp == p->tp)
    return ", split over tp";
  snprintf(buf, size, ", split over etp %llu", (unsigned long long)etp);
  return buf;
}

/* A mixture of experts' routing and placement, for the header; with
 * per_rank_load (vs_sim) each expert group's ep rank 0 holds the hottest
 * expert, else the simulated GPU of each stage stands for it. */
static void experts_line(FILE *out, const vs_workload *wl, bool per_rank_load)
{
  const vs_model_conf *m = &wl->model;
  char routing[160], split[40];
  if (m->experts == 0)
    return;
  if (m->expert_capacity_factor > 0)
    snprintf(routing, sizeof routing, "capacity factor %g%s",
             m->expert_capacity_factor,
             m->routing_skew > 0 ? " (skew without effect: every expert "
                                   "padded to its slots)"
                                 : "");
  else if (vs_workload_skew_applies(m, wl->parallel.ep))
    snprintf(routing, sizeof routing,
             "skewed: the hottest expert gets %g x its share, on %s",
             1.0 + m->routing_skew,
             per_rank_load ? "ep rank 0 of each expert group (the others "
                             "share the rest)"
                           : "the simulated GPU");
  else
    snprintf(routing, sizeof routing, "%s (dropless)",
             m->routing_skew > 0 ? "skew without effect at ep = 1"
                                 : "balanced");
  fprintf(out, "experts   %llu of %llu a token, %llu on each GPU%s (ep %llu), "
               "routing %s\n",
          (unsigned long long)m->experts_per_token,
          (unsigned long long)m->experts,
          (unsigned long long)(m->experts / wl->parallel.ep),
          expert_split(&wl->parallel, split, sizeof split),
          (unsigned long long)wl->parallel.ep, routing);
}

/* Which of the topology's figures vsim-calibrate measured (those in
 * effect), when any: the rest are the file's nominal ones. */
static void measured_line(FILE *out, const vs_topology *topo)
{
  char text[640];
  vs_topology_measured_text(topo, text, sizeof text);
  if (text[0])
    fprintf(out, "measured  by vsim-calibrate: %s; the other figures are "
                 "nominal\n",
            text);
  vs_topology_given_curves_text(topo, text, sizeof text);
  if (text[0])
    fprintf(out, "curves    given with --set, not measured: %s\n", text);
}

void vs_report_header(FILE *out, const vs_sim *sim)
{
  const vs_workload *wl = sim->wl;
  const vs_layout *lay = &sim->layout;
  char cp[32];
  char params[96];
  char opt[48];
  size_t used;

  if (sim->model.params_active != sim->model.params_total)
    snprintf(params, sizeof params, "%.2f B (%.2f B active)",
             (double)sim->model.params_total / 1e9,
             (double)sim->model.params_active / 1e9);
  else
    snprintf(params, sizeof params, "%.2f B",
             (double)sim->model.params_total / 1e9);
  if (sim->model.params_mtp) {
    size_t n = strlen(params);
    snprintf(params + n, sizeof params - n, " + %.2f B of MTP",
             (double)sim->model.params_mtp / 1e9);
  }
  fprintf(out, "workload  %s\n", wl->origins.file);
  fprintf(out, "hardware  %llu x %s (%s)\n", (unsigned long long)lay->gpus,
          sim->topo->name, sim->topo->origins.file);
  measured_line(out, sim->topo);
  fprintf(out, "model     %s, %s parameters, %llu layers, hidden %llu, "
               "seq %llu\n",
          vs_arch_name(wl->model.arch), params,
          (unsigned long long)wl->model.layers,
          (unsigned long long)wl->model.hidden,
          (unsigned long long)wl->model.seq_len);
  fprintf(out, "layout    dp %llu x %stp %llu x pp %llu, ZeRO-%llu, "
               "micro-batch %llu, global batch %llu (%llu micro-batch%s per "
               "step)\n",
          (unsigned long long)wl->parallel.dp,
          vs_report_cp_text(lay, cp, sizeof cp), (unsigned long long)lay->tp,
          (unsigned long long)lay->pp, (unsigned long long)lay->zero,
          (unsigned long long)wl->training.micro_batch,
          (unsigned long long)wl->training.global_batch,
          (unsigned long long)lay->grad_accum,
          lay->grad_accum == 1 ? "" : "es");
  /* the optimizer, and its implementation where not the default, fused */
  used = (size_t)snprintf(opt, sizeof opt, "%s",
                          vs_optimizer_name(wl->training.optimizer));
  if (wl->training.optimizer_impl != VS_OPTIMPL_FUSED)
    snprintf(opt + used, sizeof opt - used, " (%s)",
             vs_optimizer_impl_name(wl->training.optimizer_impl));
  fprintf(out, "training  %s, %s, checkpointing %s, %s attention",
          vs_precision_name(wl->training.precision), opt,
          vs_checkpointing_name(wl->training.checkpointing),
          vs_attention_name(wl->training.attention));
  if (wl->training.kernels != VS_KERNELS_FUSED) /* the default: unsaid */
    fprintf(out, ", %s kernels", vs_kernels_name(wl->training.kernels));
  fputc('\n', out);
  experts_line(out, wl, sim->per_rank_load);
  fputc('\n', out);
}

/* The rank's place: stage, dp (and cp, where the layout has it) and tp
 * columns. */
static void rank_place(FILE *out, const vs_rank *r, bool cp)
{
  fprintf(out, "%5u %5d %4d ", r->id, r->stage, r->dp_rank);
  if (cp)
    fprintf(out, "%4d ", r->cp_rank);
  fprintf(out, "%4d", r->tp_rank);
}

static void rank_row(FILE *out, const vs_rank *r, bool cp, const char *mark)
{
  const vs_mem *m = &r->mem;
  char b[VS_CAT_N + 4][16];
  uint64_t frag = vs_mem_fragmentation(m);
  uint64_t head = vs_mem_headroom(m->capacity_bytes, m->peak_used_bytes);

  for (int c = 0; c < VS_CAT_N; c++)
    vs_format_bytes(m->at_peak[c], b[c], sizeof b[c]);
  vs_format_bytes(frag, b[VS_CAT_N], sizeof b[0]);
  vs_format_bytes(m->peak_used_bytes, b[VS_CAT_N + 1], sizeof b[0]);
  vs_format_bytes(m->capacity_bytes, b[VS_CAT_N + 2], sizeof b[0]);
  vs_format_bytes(head, b[VS_CAT_N + 3], sizeof b[0]);
  rank_place(out, r, cp);
  fprintf(out, " %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %4s%s\n",
          b[VS_CAT_PARAMS],
          b[VS_CAT_GRADS], b[VS_CAT_OPTIMIZER], b[VS_CAT_ACTIVATIONS],
          b[VS_CAT_TEMP], b[VS_CAT_FRAMEWORK], b[VS_CAT_N], b[VS_CAT_N + 1],
          b[VS_CAT_N + 2], b[VS_CAT_N + 3], vs_rank_fits(r) ? "yes" : "NO",
          mark);
}

/* Reads like PyTorch's OutOfMemoryError, plus where in the step it happened. */
void vs_report_oom_line(FILE *out, const vs_sim *sim, const vs_rank *r)
{
  char label[160], req[16], cap[16], alloc[16], res[16], fw[16];
  const vs_oom *o = &r->mem.oom;
  vs_report_op_label(sim, r->prog, o->op, label, sizeof label);
  fprintf(out,
          "OUT OF MEMORY on rank %u at %s%s, t = %.6f s: tried to allocate "
          "%s (%s); %s total capacity; %s already allocated; %s reserved in "
          "total by the allocator; %s outside it (CUDA context, NCCL)\n",
          r->id, label, vs_report_oom_when(o),
          (double)o->t_ns * 1e-9,
          vs_format_bytes(o->requested_bytes, req, sizeof req),
          vs_category_name(o->category),
          vs_format_bytes(r->mem.capacity_bytes, cap, sizeof cap),
          vs_format_bytes(o->allocated_bytes, alloc, sizeof alloc),
          vs_format_bytes(o->reserved_bytes, res, sizeof res),
          vs_format_bytes(r->mem.by_cat[VS_CAT_FRAMEWORK], fw, sizeof fw));
}

static void summary_pair(FILE *out, const char *what, const char *pool,
                         uint64_t now, uint64_t peak)
{
  char a[16], b[16];
  fprintf(out, "  %-22s %-6s %12s %12s\n", what, pool,
          vs_format_bytes(now, a, sizeof a), vs_format_bytes(peak, b, sizeof b));
}

void vs_report_memory_summary(FILE *out, const vs_sim *sim)
{
  static const char *const pools[] = {"small", "large"};
  for (size_t i = 0; i < sim->n_ranks; i++) {
    const vs_rank *r = &sim->ranks[i];
    const vs_alloc *a = r->alloc;
    char big[16];
    fprintf(out, "\nmemory summary of rank %u (stage %d), after the step "
                 "(current) and at its peak\n",
            r->id, r->stage);
    if (!a) {
      summary_pair(out, "allocated", "all", r->mem.allocated_bytes,
                   r->mem.peak_allocated_bytes);
      fprintf(out, "  allocator = exact: no cache, reserved = allocated\n");
      continue;
    }
    fprintf(out, "  %-22s %-6s %12s %12s\n", "", "pool", "current", "peak");
    for (int p = 0; p < VS_POOL_N; p++)
      summary_pair(out, "allocated (= active)", pools[p],
                   a->stats.allocated_bytes[p], a->stats.peak_allocated_bytes[p]);
    summary_pair(out, "allocated (= active)", "all", r->mem.allocated_bytes,
                 r->mem.peak_allocated_bytes);
    for (int p = 0; p < VS_POOL_N; p++)
      summary_pair(out, "reserved", pools[p], a->stats.reserved_bytes[p],
                   a->stats.peak_reserved_bytes[p]);
    summary_pair(out, "reserved", "all", r->mem.reserved_bytes,
                 r->mem.peak_reserved_bytes);
    for (int p = 0; p < VS_POOL_N; p++)
      fprintf(out, "  %-22s %-6s %12zu segments, %zu blocks (%zu in use), "
                   "largest free block %s\n",
              "segments", pools[p], vs_alloc_count_segments(a, p),
              vs_alloc_count_blocks(a, p, VS_BLOCKS_ALL),
              vs_alloc_count_blocks(a, p, VS_BLOCKS_IN_USE),
              vs_format_bytes(vs_alloc_largest_free(a, p), big, sizeof big));
    fprintf(out, "  cudaMalloc calls %llu, cudaFree calls %llu, allocation "
                 "retries %llu, OOMs %llu%s%s\n",
            (unsigned long long)a->stats.n_cuda_malloc,
            (unsigned long long)a->stats.n_cuda_free,
            (unsigned long long)a->stats.n_retries,
            (unsigned long long)a->stats.n_ooms,
            sim->recipe.first_step_states ? ", counted from the first step on" : "",
            a->cfg.expandable_segments ? " (expandable segments: calls are "
                                         "page maps and unmaps)"
                                       : "");
  }
}

/* Says when the step time used a calibrated curve outside the sizes it was
 * measured at (never silently extrapolated). */
static void calibration_notes(FILE *out, const vs_sim *sim)
{
  vs_cal_seen seen;
  memset(&seen, 0, sizeof seen);
  for (size_t i = 0; i < sim->n_programs; i++)
    vs_cal_seen_merge(&seen, &sim->programs[i].cal_seen);
  vs_cal_warn_range(out, "note: ", sim->topo, &seen);
}

void vs_report_notes(FILE *out, const vs_sim *sim)
{
  calibration_notes(out, sim);
  if (sim->nodes_uneven)
    fprintf(out,
            "note: nodes or PCIe switches hold %s, so what GPUs share "
            "there (PCIe, CPU, host memory and NVMe bandwidth) is "
            "approximate with one rank per stage, and host memory %s; "
            "--ranks all simulates every GPU\n",
            sim->layout.pp > 1 ? "the stages' GPUs unevenly or two stages' "
                                 "GPUs together"
                               : "the GPUs unevenly",
            sim->node_like ? "through the times it gives the copies" : "too");
}

/* Decimals that show usd (> 0) in cents from a dollar up, else to 3
 * significant figures once rounded (as plan's costs: a cheap job's is not
 * $0.00; 0.09996 is 0.100); -1 below a billionth of a dollar, which
 * takes an exponent. */
static int money_decimals(double usd)
{
  char sci[16];
  int e;
  snprintf(sci, sizeof sci, "%.2e", usd); /* its 3 figures, rounded */
  e = atoi(strchr(sci, 'e') + 1);
  return e >= 0 ? 2 : e < -9 ? -1 : 2 - e;
}

/* The throughput line, with the dollars per million tokens when the
 * topology has a price (money_decimals). */
static void throughput_line(const vs_sim *sim, char *buf, size_t len)
{
  int n = snprintf(buf, len, "throughput %.0f tokens/s, MFU %.1f%%",
                   sim->tokens_per_s, 100.0 * sim->mfu);
  if (sim->topo->usd_per_gpu_hour > 0 && sim->tokens_per_s > 0 && n >= 0 &&
      (size_t)n < len) {
    double usd = vs_cost_per_tokens(
        vs_cost_usd(sim->topo->usd_per_gpu_hour, sim->layout.gpus, 1.0),
        sim->tokens_per_s, 1e6);
    int d = money_decimals(usd);
    if (d < 0)
      snprintf(buf + n, len - (size_t)n, ", $%.2e per million tokens", usd);
    else
      snprintf(buf + n, len - (size_t)n, ", $%.*f per million tokens", d, usd);
  }
}

/* The node and place the verdict names: the first that ran out, else
 * `worst` (the highest host peak) and its host memory. */
static const vs_node_mem *verdict_node(const vs_sim *sim,
                                       const vs_node_mem *worst, int *place)
{
  for (size_t i = 0; i < sim->n_nodes; i++)
    for (int p = VS_PLACE_HOST; p < VS_PLACE_N; p++)
      if (!vs_mem_fits(&sim->nodes[i].mem[p])) {
        *place = p;
        return &sim->nodes[i];
      }
  *place = VS_PLACE_HOST;
  return worst;
}

size_t vs_report_step_parts(const vs_sim *sim, vs_step_part *parts)
{
  size_t n = 0;
  parts[n++] = (vs_step_part){"compute", sim->compute_s};
  parts[n++] = (vs_step_part){"tensor-parallel comm", sim->tp_comm_s};
  parts[n++] = (vs_step_part){"pipeline bubble", sim->bubble_s};
  if (sim->imbalance_s > 0)
    parts[n++] =
        (vs_step_part){"waiting on the busiest stage", sim->imbalance_s};
  parts[n++] = (vs_step_part){"exposed data-parallel comm",
                              sim->exposed_comm_s};
  if (sim->ep_comm_s > 0)
    parts[n++] = (vs_step_part){"expert-parallel comm", sim->ep_comm_s};
  if (sim->cp_comm_s > 0)
    parts[n++] = (vs_step_part){"context-parallel comm", sim->cp_comm_s};
  if (sim->offloads) {
    parts[n++] = (vs_step_part){"exposed offload copies",
                                sim->offload_copy_s};
    parts[n++] = (vs_step_part){"CPU optimizer step", sim->cpu_optimizer_s};
  }
  return n;
}

/* The step time, then its split (vs_report_step_parts). */
static void step_line(const vs_sim *sim, char *buf, size_t len)
{
  vs_step_part parts[VS_STEP_PARTS_MAX];
  size_t n_parts = vs_report_step_parts(sim, parts);
  char t[16];
  int n = snprintf(buf, len, "step time %s =",
                   vs_format_seconds(sim->step_time_s, t, sizeof t));
  for (size_t i = 0; i < n_parts && n >= 0 && (size_t)n < len; i++)
    n += snprintf(buf + n, len - (size_t)n, "%s %s %s", i ? " +" : "",
                  parts[i].name,
                  vs_format_seconds(parts[i].seconds, t, sizeof t));
  if (sim->imbalance_s > 0 && n >= 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n,
             " (the split of stage %d, which ends last; stage %d is the "
             "busiest)",
             vs_sim_slowest_rank(sim)->stage, sim->busiest_stage);
}

/* The compute time split by what bounds each op (cost.h vs_bound). */
static void bound_line(const vs_sim *sim, char *buf, size_t len)
{
  static const char *const names[VS_BOUND_SPLIT_N] = {
      "arithmetic", "HBM traffic", "kernel launches",
      "collectives re-run by recompute"};
  double total = 0;
  char t[16];
  int n = snprintf(buf, len, "compute %s by what bounds it:",
                   vs_format_seconds(sim->compute_s, t, sizeof t));
  for (int i = 0; i < VS_BOUND_SPLIT_N; i++)
    total += sim->bound_s[i];
  for (int i = 0, shown = 0; i < VS_BOUND_SPLIT_N && n >= 0 && (size_t)n < len;
       i++) {
    if (!(sim->bound_s[i] > 0))
      continue;
    n += snprintf(buf + n, len - (size_t)n, "%s %s %s (%.0f%%)",
                  shown++ ? "," : "", names[i],
                  vs_format_seconds(sim->bound_s[i], t, sizeof t),
                  100.0 * sim->bound_s[i] / total);
  }
}

static void verdict_line(const vs_sim *sim, char *buf, size_t len)
{
  const vs_rank *worst = vs_sim_worst_rank(sim);
  char used[VS_BYTES_PAIR_LEN], cap[VS_BYTES_PAIR_LEN];
  vs_format_bytes_pair(worst->mem.peak_used_bytes, worst->mem.capacity_bytes,
                       used, cap, sizeof used);
  const vs_node_mem *node = vs_sim_worst_node(sim);
  /* out of memory in the first step alone: the figures are the step's,
   * run alone after it, which may be within capacity */
  bool first = worst->mem.oom.earlier_run;
  int n = snprintf(buf, len,
                   "verdict: %s on %llu x %s: worst rank %s %s of %s (%.0f%%)",
                   !sim->fits ? "DOES NOT FIT" : sim->tight ? "TIGHT" : "FITS",
                   (unsigned long long)sim->layout.gpus, sim->topo->name,
                   first ? "runs out of memory in the first step; run "
                           "alone, the step after it peaks at"
                   : vs_rank_fits(worst) ? "peaks at"
                                         : "needs",
                   used, cap,
                   100.0 * (double)worst->mem.peak_used_bytes /
                       (double)worst->mem.capacity_bytes);
  if (sim->tight && n >= 0 && (size_t)n < len)
    n += snprintf(buf + n, len - (size_t)n,
                  ", less than [runtime] reserve's %s free",
                  vs_format_bytes(sim->reserve_bytes, cap, sizeof cap));
  if (node && n >= 0 && (size_t)n < len) {
    int place = VS_PLACE_HOST;
    const vs_mem *m;
    node = verdict_node(sim, node, &place);
    m = &node->mem[place];
    vs_format_bytes_pair(m->peak_allocated_bytes, m->capacity_bytes, used,
                         cap, sizeof used);
    snprintf(buf + n, len - (size_t)n, "; %s of node %u %s %s of %s",
             place == VS_PLACE_HOST ? "host memory" : "NVMe", node->node,
             vs_mem_fits(m) ? "peaks at" : "needs", used, cap);
  }
}

/* The tensors held at the peak that the "held" line names. */
#define HELD_GROUPS 4

/* Layer l of sim's model as the report names it: "embedding" (or "step"
 * for once-a-step ops, microbatch < 0), "head", or its number. */
static const char *layer_word(const vs_sim *sim, int32_t l, int32_t microbatch,
                              char *buf, size_t len)
{
  if (l < 0)
    return microbatch < 0 ? "step" : "embedding";
  if ((uint64_t)l >= sim->model.layers)
    return "head";
  snprintf(buf, len, "%d", l);
  return buf;
}

/* Where group g's tensors were allocated: "head", "layer 5", "layers
 * 0-79", "8 of layers 0-19" (an interleaved stage's chunks), "embedding
 * to layer 3", "pipeline" (sends and receives), then the micro-batches
 * ("micro-batch 0", "micro-batches 0-7"). */
static void group_where(const vs_sim *sim, const vs_peak_group *g, char *buf,
                        size_t len)
{
  char n1[24], n2[24], some[24] = "";
  const char *first = layer_word(sim, g->first_layer, g->first_microbatch, n1,
                                 sizeof n1),
             *last = layer_word(sim, g->last_layer, g->last_microbatch, n2,
                                sizeof n2);
  size_t at;
  if (g->layers < (uint32_t)(g->last_layer - g->first_layer + 1))
    snprintf(some, sizeof some, "%u of ", g->layers);
  if (g->phase == VS_PHASE_P2P)
    at = (size_t)snprintf(buf, len, "pipeline");
  else if (g->first_layer == g->last_layer)
    at = (size_t)snprintf(buf, len, first == n1 ? "layer %s" : "%s", first);
  else if (first != n1)
    at = (size_t)snprintf(buf, len, "%s%s to %s%s", some, first,
                          last == n2 ? "layer " : "", last);
  else
    at = (size_t)snprintf(buf, len, "%slayers %s-%s", some, first, last);
  if (at >= len || g->first_microbatch < 0)
    return;
  if (g->first_microbatch == g->last_microbatch)
    snprintf(buf + at, len - at, ", micro-batch %d", g->first_microbatch);
  else
    snprintf(buf + at, len - at, ", micro-batches %d-%d", g->first_microbatch,
             g->last_microbatch);
}

/* "largest activations and temporaries at the peak: ..." for the worst
 * rank (the model states are the table's columns already); with every
 * GPU simulated, whose tensors are not noted (vs_sim_opts.peak_tensors),
 * why and where to see them; "" where none is noted live. */
static void held_line(const vs_sim *sim, char *buf, size_t len)
{
  const vs_rank *worst = vs_sim_worst_rank(sim);
  vs_peak_group *g;
  size_t n, at, shown = 0;
  buf[0] = '\0';
  if (sim->all_ranks && !worst->lifetimes) {
    snprintf(buf, len,
             "largest activations and temporaries at the peak: not listed "
             "with --ranks all, which would note every tensor of every GPU; "
             "without it, one GPU per stage has the same peaks and lists "
             "them");
    return;
  }
  if (vs_sim_peak_groups(worst, &g, &n) || n == 0)
    return;
  at = (size_t)snprintf(buf, len,
                        "largest activations and temporaries at the peak:");
  for (size_t i = 0; i < n && shown < HELD_GROUPS && at < len; i++) {
    char b[16], where[96];
    if (g[i].category != VS_CAT_ACTIVATIONS && g[i].category != VS_CAT_TEMP)
      continue;
    group_where(sim, &g[i], where, sizeof where);
    at += (size_t)snprintf(buf + at, len - at, "%s %s %s of %s (%s, %llu "
                           "tensor%s)",
                           shown++ ? ";" : "",
                           vs_format_bytes(g[i].bytes, b, sizeof b),
                           vs_category_name(g[i].category),
                           g[i].checkpoint ? "checkpointed layer inputs"
                                           : g[i].op,
                           where,
                           (unsigned long long)g[i].tensors,
                           g[i].tensors == 1 ? "" : "s");
  }
  if (shown == 0)
    buf[0] = '\0';
  free(g);
}

/* Paged optimizer states: on the GPU but outside the allocator's figures
 * and the fit (their pages move to the host when the GPU runs short), and
 * what of them moves out and back each step where they do not fit beside
 * the peak; empty without them. */
static void managed_line(const vs_sim *sim, char *buf, size_t len)
{
  uint64_t most = 0, out;
  const vs_rank *moving = vs_sim_most_paged_out(sim);
  char b[16], o[16];
  for (size_t i = 0; i < sim->n_ranks; i++)
    if (sim->ranks[i].managed.peak_allocated_bytes > most)
      most = sim->ranks[i].managed.peak_allocated_bytes;
  buf[0] = '\0';
  if (most == 0)
    return;
  int n = snprintf(buf, len,
                   "paged optimizer states: up to %s a GPU in CUDA managed "
                   "memory, beside the figures above (PyTorch's memory "
                   "statistics do not count them; their pages move to host "
                   "memory when the GPU runs short, so they do not decide "
                   "the fit)",
                   vs_format_bytes(most, b, sizeof b));
  if (moving && n >= 0 && (size_t)n < len) {
    out = vs_rank_paged_out_bytes(moving);
    snprintf(buf + n, len - (size_t)n,
             "; beside rank %u's peak %s of them do not fit, and move to "
             "host memory and back each step: at least %.3f s over PCIe "
             "at the node's pinned rates, which the step time leaves out",
             moving->id, vs_format_bytes(out, o, sizeof o),
             (double)out / sim->topo->pcie_d2h_bandwidth +
                 (double)out / sim->topo->pcie_bandwidth);
  }
}

char *vs_report_line(const vs_sim *sim, vs_report_line_kind kind, char *buf,
                     size_t len)
{
  const vs_rank *worst = vs_sim_worst_rank(sim);
  char label[160];
  switch (kind) {
  case VS_LINE_PEAK:
    vs_report_op_label(sim, worst->prog, worst->mem.peak_op, label, sizeof label);
    snprintf(buf, len, "peak of rank %u at %s, t = %.6f s", worst->id, label,
             (double)worst->mem.peak_t_ns * 1e-9);
    break;
  case VS_LINE_STEP:
    step_line(sim, buf, len);
    break;
  case VS_LINE_BOUND:
    bound_line(sim, buf, len);
    break;
  case VS_LINE_THROUGHPUT:
    throughput_line(sim, buf, len);
    break;
  case VS_LINE_VERDICT:
    verdict_line(sim, buf, len);
    break;
  case VS_LINE_HELD:
    held_line(sim, buf, len);
    break;
  case VS_LINE_MANAGED:
    managed_line(sim, buf, len);
    break;
  }
  return buf;
}

void vs_report_node_table(FILE *out, const vs_sim *sim)
{
  uint64_t others = sim->layout.nodes - sim->n_nodes; /* untracked */
  if (sim->n_nodes == 0)
    return;
  fprintf(out, "\nhost memory and NVMe of each node at its peak (all its "
               "GPUs' shares)\n");
  fprintf(out, "%5s %-5s %10s %10s %10s %11s %10s %10s %10s %10s %4s\n",
          "node", "place", "params", "grads", "optimizer", "activations",
          "buffers", "peak", "capacity", "headroom", "fits");
  for (size_t i = 0; i < sim->n_nodes; i++)
    for (int p = VS_PLACE_HOST; p < VS_PLACE_N; p++) {
      const vs_mem *m = &sim->nodes[i].mem[p];
      char b[8][16];
      if (p == VS_PLACE_NVME && m->peak_allocated_bytes == 0)
        continue;
      vs_format_bytes(m->at_peak[VS_CAT_PARAMS], b[0], sizeof b[0]);
      vs_format_bytes(m->at_peak[VS_CAT_GRADS], b[1], sizeof b[1]);
      vs_format_bytes(m->at_peak[VS_CAT_OPTIMIZER], b[2], sizeof b[2]);
      vs_format_bytes(m->at_peak[VS_CAT_ACTIVATIONS], b[7], sizeof b[7]);
      vs_format_bytes(m->at_peak[VS_CAT_TEMP], b[3], sizeof b[3]);
      vs_format_bytes(m->peak_allocated_bytes, b[4], sizeof b[4]);
      vs_format_bytes(m->capacity_bytes, b[5], sizeof b[5]);
      vs_format_bytes(m->capacity_bytes > m->peak_allocated_bytes
                          ? m->capacity_bytes - m->peak_allocated_bytes
                          : 0,
                      b[6], sizeof b[6]);
      fprintf(out, "%5u %-5s %10s %10s %10s %11s %10s %10s %10s %10s %4s\n",
              sim->nodes[i].node, vs_place_name(p), b[0], b[1], b[2], b[7],
              b[3], b[4], b[5], b[6], vs_mem_fits(m) ? "yes" : "NO");
    }
  if (others > 0)
    fprintf(out,
            "  (the job's other %llu node%s hold%s what %s holds, as "
            "host.csv lists them; host_timeline.csv and the trace have "
            "the nodes above only; --ranks all simulates each)\n",
            (unsigned long long)others, others == 1 ? "" : "s",
            others == 1 ? "s" : "",
            sim->node_like ? "the one above with as many GPUs of each stage"
            : others == 1  ? "the node of its stage"
                           : "the node of their stage");
}

void vs_report_node_oom_lines(FILE *out, const vs_sim *sim)
{
  for (size_t i = 0; i < sim->n_nodes; i++)
    for (int p = VS_PLACE_HOST; p < VS_PLACE_N; p++) {
      const vs_node_mem *n = &sim->nodes[i];
      const vs_oom *o = &n->mem[p].oom;
      const vs_rank *r = NULL;
      char label[160] = "?", req[16], cap[16], used[16], whose[64];
      if (!o->happened)
        continue;
      for (size_t k = 0; k < sim->n_ranks && !r; k++)
        if (sim->ranks[k].id == n->oom_rank[p])
          r = &sim->ranks[k];
      if (r)
        vs_report_op_label(sim, r->prog, o->op, label, sizeof label);
      /* stage mode's rank may stand for its stage's GPUs on another node */
      if (r && r->id / sim->topo->gpus_per_node != n->node)
        snprintf(whose, sizeof whose,
                 "stage %d's GPUs there (rank %u simulated)", r->stage, r->id);
      else
        snprintf(whose, sizeof whose, "rank %u", n->oom_rank[p]);
      fprintf(out,
              "OUT OF %s MEMORY on node %u at %s of %s, t = %.6f s: "
              "tried to allocate %s (%s, all the node's GPUs' shares); %s "
              "total capacity ([node] %s); %s already in use\n",
              p == VS_PLACE_HOST ? "HOST" : "NVME", n->node, label, whose,
              (double)o->t_ns * 1e-9,
              vs_format_bytes(o->requested_bytes, req, sizeof req),
              vs_place_category_name(p, o->category),
              vs_format_bytes(n->mem[p].capacity_bytes, cap, sizeof cap),
              p == VS_PLACE_HOST ? "host_memory" : "nvme_capacity",
              vs_format_bytes(o->allocated_bytes, used, sizeof used));
    }
}

void vs_report_summary(FILE *out, const vs_sim *sim)
{
  const vs_rank *worst = vs_sim_worst_rank(sim);
  char line[512];

  vs_report_header(out, sim);
  fprintf(out, "memory at each rank's peak (allocated by category; peak = "
               "reserved + framework)\n");
  fprintf(out, "%5s %5s %4s ", "rank", "stage", "dp");
  if (sim->layout.cp > 1)
    fprintf(out, "%4s ", "cp");
  fprintf(out, "%4s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %4s\n",
          "tp", "params", "grads", "optimizer",
          "activations", "temp", "framework", "frag", "peak", "capacity",
          "headroom", "fits");
  for (size_t i = 0; i < sim->n_ranks; i++) {
    const vs_rank *r = &sim->ranks[i];
    char mark[48] = "";
    if (sim->layout.pp > 1 || sim->n_ranks > 1)
      snprintf(mark, sizeof mark, "%s%s%s",
               r == worst ? "  <- worst" : "",
               r->stage == 0 && r->slot == 0 && sim->layout.pp > 1
                   ? "  <- first stage"
                   : "",
               (uint64_t)r->stage == sim->layout.pp - 1 && r->slot == 0 &&
                       sim->layout.pp > 1
                   ? "  <- last stage"
                   : "");
    rank_row(out, r, sim->layout.cp > 1, mark);
  }

  vs_report_node_table(out, sim);
  if (vs_report_line(sim, VS_LINE_MANAGED, line, sizeof line)[0])
    fprintf(out, "\n%s\n", line);
  fprintf(out, "\n%s\n", vs_report_line(sim, VS_LINE_PEAK, line, sizeof line));
  if (vs_report_line(sim, VS_LINE_HELD, line, sizeof line)[0])
    fprintf(out, "%s\n", line);
  for (size_t i = 0; i < sim->n_ranks; i++)
    if (sim->ranks[i].mem.oom.happened)
      vs_report_oom_line(out, sim, &sim->ranks[i]);
  vs_report_node_oom_lines(out, sim);
  fprintf(out, "%s\n", vs_report_line(sim, VS_LINE_STEP, line, sizeof line));
  fprintf(out, "%s\n", vs_report_line(sim, VS_LINE_BOUND, line, sizeof line));
  fprintf(out, "%s\n", vs_report_line(sim, VS_LINE_THROUGHPUT, line, sizeof line));
  vs_report_notes(out, sim);
  fprintf(out, "%s\n", vs_report_line(sim, VS_LINE_VERDICT, line, sizeof line));
}

/* ------------------------------------------------------------------------
 * CSV
 * ------------------------------------------------------------------------ */

static void write_summary(const vs_sim *sim, vs_csv *c)
{
  vs_summary_csv_header(c);
  vs_csv_row(c);
  for (size_t i = 0; i < sim->n_ranks; i++) {
    vs_summary sum;
    vs_summary_of(sim, &sim->ranks[i], &sum);
    vs_summary_csv_row(c, &sum);
    vs_csv_row(c);
  }
}

static void write_timeline(const vs_sim *sim, vs_csv *c)
{
  vs_csv_header(c, TIMELINE_COLUMNS);
  for (size_t i = 0; i < sim->n_ranks; i++) {
    const vs_rank *r = &sim->ranks[i];
    for (size_t k = 0; k < r->n_timeline; k++) {
      const vs_mem_event *e = &r->timeline[k];
      vs_csv_ns(c, e->t_ns);
      vs_csv_u64(c, r->id);
      vs_csv_text(c, vs_op_name(r->prog, &r->prog->ops[e->op]));
      vs_csv_text(c, vs_category_name(e->category));
      vs_csv_i64(c, e->delta_bytes);
      vs_csv_u64(c, e->allocated_bytes);
      vs_csv_u64(c, e->reserved_bytes);
      vs_csv_row(c);
    }
  }
}

/* The columns ops.csv and op_bounds.csv begin with: which op ran when. */
static void op_cells(vs_csv *c, const vs_rank *r, const vs_op_span *s)
{
  const vs_pop *op = &r->prog->ops[s->op];
  vs_csv_u64(c, r->id);
  vs_csv_text(c, vs_stream_name(op->stream));
  vs_csv_text(c, vs_op_name(r->prog, op));
  vs_csv_i64(c, vs_op_layer(r->prog, op));
  vs_csv_i64(c, op->microbatch);
  vs_csv_ns(c, s->start_ns);
  vs_csv_ns(c, s->end_ns);
}

static void write_ops(const vs_sim *sim, vs_csv *c)
{
  vs_csv_header(c, OPS_COLUMNS);
  for (size_t i = 0; i < sim->n_ranks; i++) {
    const vs_rank *r = &sim->ranks[i];
    for (size_t k = 0; k < r->n_spans; k++) {
      const vs_op_kind *kind =
          vs_op_kind_of(r->prog, &r->prog->ops[r->spans[k].op]);
      op_cells(c, r, &r->spans[k]);
      vs_csv_real(c, kind->flops);
      /* bytes as integers (DESIGN's CSV contract), rounded: a priced
       * traffic can be fractional (an 8-bit optimizer's step) */
      vs_csv_u64(c, (uint64_t)llround(kind->bytes));
      vs_csv_row(c);
    }
  }
}

/* The run of span s of r split by what bounds it (vs_op_bounds) into
 * part; returns the name of the largest part (op_bounds.csv's column
 * names without "_s"), "none" for an op that takes no time. */
static const char *span_bounds(const vs_rank *r, const vs_op_span *s,
                               double part[VS_BOUND_N])
{
  static const char *const names[VS_BOUND_N] = {
      "arithmetic", "memory", "launch", "communication", "transfer", "cpu"};
  int most = 0;
  vs_op_bounds(r->prog, &r->prog->ops[s->op],
               (double)(s->end_ns - s->start_ns) * 1e-9, part);
  for (int b = 1; b < VS_BOUND_N; b++)
    if (part[b] > part[most])
      most = b;
  return part[most] > 0 ? names[most] : "none";
}

/* op_bounds.csv: each op of ops.csv (the same rows, in the same order)
 * with its run split by what bounds it, the largest part, and its phase
 * (the trace's `cat`: ops.csv repeats an op's name, layer and micro-batch
 * in forward, backward and recompute). */
static void write_op_bounds(const vs_sim *sim, vs_csv *c)
{
  vs_csv_header(c, OP_BOUNDS_COLUMNS);
  for (size_t i = 0; i < sim->n_ranks; i++) {
    const vs_rank *r = &sim->ranks[i];
    for (size_t k = 0; k < r->n_spans; k++) {
      double part[VS_BOUND_N];
      const char *most = span_bounds(r, &r->spans[k], part);
      op_cells(c, r, &r->spans[k]);
      vs_csv_text(c, most);
      for (int b = 0; b < VS_BOUND_N; b++)
        vs_csv_seconds_sparse(c, part[b]);
      vs_csv_text(c, vs_phase_name(r->prog->ops[r->spans[k].op].phase));
      vs_csv_row(c);
    }
  }
}

/* host.csv: each node's host and NVMe memory at its peak, a node stage
 * mode does not track as the one that stands for it (vs_sim_node_like). */
static void write_host(const vs_sim *sim, vs_csv *c)
{
  vs_csv_header(c, HOST_COLUMNS);
  for (uint64_t node = 0; sim->n_nodes && node < sim->layout.nodes; node++)
    for (int p = VS_PLACE_HOST; p < VS_PLACE_N; p++) {
      const vs_mem *m = &vs_sim_node_like(sim, node)->mem[p];
      if (p == VS_PLACE_NVME && m->peak_allocated_bytes == 0)
        continue;
      vs_csv_u64(c, node);
      vs_csv_text(c, vs_place_name(p));
      vs_csv_u64(c, m->at_peak[VS_CAT_PARAMS]);
      vs_csv_u64(c, m->at_peak[VS_CAT_GRADS]);
      vs_csv_u64(c, m->at_peak[VS_CAT_OPTIMIZER]);
      vs_csv_u64(c, m->at_peak[VS_CAT_ACTIVATIONS]);
      vs_csv_u64(c, m->at_peak[VS_CAT_TEMP]);
      vs_csv_u64(c, m->peak_allocated_bytes);
      vs_csv_u64(c, m->capacity_bytes);
      vs_csv_text(c, vs_mem_fits(m) ? "true" : "false");
      vs_csv_ns(c, m->peak_t_ns);
      vs_csv_row(c);
    }
}

/* host_timeline.csv: every change of a tracked node's host or NVMe
 * memory, with the rank whose op made it. */
static void write_host_timeline(const vs_sim *sim, vs_csv *c)
{
  vs_csv_header(c, HOST_TIMELINE_COLUMNS);
  for (size_t i = 0; i < sim->n_nodes; i++) {
    const vs_node_mem *n = &sim->nodes[i];
    for (size_t k = 0; k < n->n_timeline; k++) {
      const vs_node_event *e = &n->timeline[k];
      const vs_rank *r = &sim->ranks[e->rank];
      vs_csv_ns(c, e->t_ns);
      vs_csv_u64(c, n->node);
      vs_csv_text(c, vs_place_name(e->place));
      vs_csv_u64(c, r->id);
      vs_csv_text(c, vs_op_name(r->prog, &r->prog->ops[e->op]));
      vs_csv_text(c, vs_place_category_name(e->place, e->category));
      vs_csv_i64(c, e->delta_bytes);
      vs_csv_u64(c, e->in_use_bytes);
      vs_csv_row(c);
    }
  }
}

const char *const vs_report_csv_names[VS_REPORT_CSV_FILES] = {
    "summary.csv", "timeline.csv", "ops.csv", "host.csv", "host_timeline.csv",
    "op_bounds.csv"};

int vs_report_files_commit(vs_report_files *out, vs_error *err)
{
  size_t n = out->n;
  out->n = 0;
  return vs_csv_commit_all(out->files, n, err);
}

void vs_report_files_abort(vs_report_files *out)
{
  for (size_t i = 0; i < out->n; i++)
    vs_csv_abort(&out->files[i]);
  out->n = 0;
}

vs_csv *vs_report_files_open(vs_report_files *out, const char *path,
                             vs_error *err)
{
  size_t cap = sizeof out->files / sizeof out->files[0];
  if (out->n == cap) {
    vs_error_set(err, VS_EINPUT, "%s: more than %zu output files in one run",
                 path, cap);
    return NULL;
  }
  if (vs_csv_open(&out->files[out->n], path, err))
    return NULL;
  return &out->files[out->n++];
}

int vs_report_write_csv(const vs_sim *sim, const char *dir,
                        vs_report_files *out, vs_error *err)
{
  static void (*const writers[VS_REPORT_CSV_FILES])(const vs_sim *, vs_csv *) = {
      write_summary, write_timeline, write_ops, write_host,
      write_host_timeline, write_op_bounds};
  char path[4096];
  int rc;

  if ((rc = vs_make_dir(dir, err)))
    return rc;
  for (size_t i = 0; i < VS_REPORT_CSV_FILES; i++) {
    vs_csv *file;
    snprintf(path, sizeof path, "%s/%s", dir, vs_report_csv_names[i]);
    if (!(file = vs_report_files_open(out, path, err)))
      return err->code;
    writers[i](sim, file);
  }
  return 0;
}

/* ------------------------------------------------------------------------
 * Chrome trace
 * ------------------------------------------------------------------------ */

/* Whether rank id is one sel asks for (every rank when sel is empty). */
static bool trace_wants(const vs_trace_ranks *sel, uint32_t id)
{
  if (!sel || sel->n == 0)
    return true;
  for (size_t i = 0; i < sel->n; i++)
    if (sel->ids[i] == id)
      return true;
  return false;
}

/* The trace being written: its file, and whether an event was written
 * (every later one is preceded by a comma). */
typedef struct trace_out {
  vs_csv *f;
  bool any;
} trace_out;

/* Starts one event of the traceEvents array. */
static void trace_event(trace_out *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void trace_event(trace_out *t, const char *fmt, ...)
{
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  vs_csv_printf(t->f, "%s%s", t->any ? ",\n" : "", buf);
  t->any = true;
}

/* The names Perfetto shows: the rank as a process ("rank 8 (stage 1, dp
 * 0, tp 0)", with cp its index in its context-parallel group where `cp`),
 * each stream as a thread. */
static void trace_names(trace_out *t, const vs_rank *r, bool cp)
{
  char where[24] = "";
  if (cp)
    snprintf(where, sizeof where, ", cp %d", r->cp_rank);
  trace_event(t, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,"
                 "\"args\":{\"name\":\"rank %u (stage %d, dp %d%s, tp "
                 "%d)\"}}",
              r->id, r->id, r->stage, r->dp_rank, where, r->tp_rank);
  for (int st = 0; st < VS_STREAM_N; st++)
    trace_event(t, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,"
                   "\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                r->id, st, vs_stream_name(st));
}

/* One complete event per op of r. */
static void trace_ops(trace_out *t, const vs_rank *r)
{
  for (size_t k = 0; k < r->n_spans; k++) {
    const vs_op_span *sp = &r->spans[k];
    const vs_pop *op = &r->prog->ops[sp->op];
    double part[VS_BOUND_N];
    trace_event(t, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\","
                   "\"pid\":%u,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                   "\"args\":{\"layer\":%d,\"microbatch\":%d,"
                   "\"bound\":\"%s\"}}",
                vs_op_name(r->prog, op), vs_phase_name(op->phase), r->id,
                op->stream,
                (double)sp->start_ns / 1e3,
                (double)(sp->end_ns - sp->start_ns) / 1e3,
                vs_op_layer(r->prog, op),
                op->microbatch, span_bounds(r, sp, part));
  }
}

/* A counter sample: track `name` of r at t_ns holds bytes. */
static void trace_counter(trace_out *t, const vs_rank *r, const char *name,
                          uint64_t t_ns, uint64_t bytes)
{
  trace_event(t, "{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%u,"
                 "\"ts\":%.3f,\"args\":{\"bytes\":%llu}}",
              name, r->id, (double)t_ns / 1e3, (unsigned long long)bytes);
}

/* Memory as counter tracks: one per category and one for the allocator's
 * reserved bytes, a sample wherever one changes (the timeline's events). */
static void trace_memory(trace_out *t, const vs_rank *r)
{
  uint64_t by_cat[VS_CAT_N] = {0}, reserved = 0;
  by_cat[VS_CAT_FRAMEWORK] = r->mem.by_cat[VS_CAT_FRAMEWORK];
  trace_counter(t, r, vs_category_name(VS_CAT_FRAMEWORK), 0,
                by_cat[VS_CAT_FRAMEWORK]);
  for (size_t i = 0; i < r->n_timeline; i++) {
    const vs_mem_event *e = &r->timeline[i];
    by_cat[e->category] =
        (uint64_t)((int64_t)by_cat[e->category] + e->delta_bytes);
    trace_counter(t, r, vs_category_name(e->category), e->t_ns,
                  by_cat[e->category]);
    if (e->reserved_bytes != reserved)
      trace_counter(t, r, "reserved", e->t_ns, e->reserved_bytes);
    reserved = e->reserved_bytes;
  }
}

/* A paged optimizer's CUDA managed memory as counter track `managed`, a
 * sample at every change; no track for a rank without any. */
static void trace_managed(trace_out *t, const vs_rank *r)
{
  for (size_t i = 0; i < r->n_managed_timeline; i++)
    trace_counter(t, r, vs_place_name(VS_PLACE_MANAGED),
                  r->managed_timeline[i].t_ns,
                  r->managed_timeline[i].allocated_bytes);
}

/* The trace process id of node 0; node n is this + n. Ranks' process ids
 * are their GPU numbers, far below it in any job. */
#define TRACE_NODE_PID 2000000000u

/* A node's host and NVMe memory as a process of counter tracks, one per
 * place and category ("host activations"), a sample at every change. */
static void trace_node(trace_out *t, const vs_node_mem *n)
{
  uint64_t by[VS_PLACE_N][VS_CAT_N] = {{0}};
  uint32_t pid = TRACE_NODE_PID + n->node;
  trace_event(t, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,"
                 "\"args\":{\"name\":\"node %u host memory and NVMe\"}}",
              pid, n->node);
  for (size_t k = 0; k < n->n_timeline; k++) {
    const vs_node_event *e = &n->timeline[k];
    uint64_t *v = &by[e->place][e->category];
    *v = (uint64_t)((int64_t)*v + e->delta_bytes);
    trace_event(t,
                "{\"name\":\"%s %s\",\"ph\":\"C\",\"pid\":%u,"
                "\"ts\":%.3f,\"args\":{\"bytes\":%llu}}",
                vs_place_name(e->place),
                vs_place_category_name(e->place, e->category), pid,
                (double)e->t_ns / 1e3, (unsigned long long)*v);
  }
}

int vs_report_write_trace(const vs_sim *sim, const char *path,
                          const vs_trace_ranks *sel, vs_report_files *out,
                          vs_error *err)
{
  vs_csv *file = vs_report_files_open(out, path, err); /* its atomic file, its errors */
  trace_out t = {file, false};
  if (!file)
    return err->code;
  vs_csv_printf(file, "{\"traceEvents\":[\n");
  for (size_t i = 0; i < sim->n_ranks; i++) {
    const vs_rank *r = &sim->ranks[i];
    if (!trace_wants(sel, r->id))
      continue;
    trace_names(&t, r, sim->layout.cp > 1);
    trace_ops(&t, r);
    trace_memory(&t, r);
    trace_managed(&t, r);
  }
  for (size_t i = 0; i < sim->n_nodes; i++)
    trace_node(&t, &sim->nodes[i]);
  vs_csv_printf(file, "\n]}\n");
  return 0;
}

/* ------------------------------------------------------------------------
 * SVG
 * ------------------------------------------------------------------------ */

enum { SVG_W = 960, SVG_H = 420, SVG_LEFT = 70, SVG_RIGHT = 170, SVG_TOP = 40,
       SVG_BOTTOM = 50, SVG_COLS = SVG_W - SVG_LEFT - SVG_RIGHT };

void vs_report_moments(const vs_rank *r, size_t n, vs_report_moment *out)
{
  double step_s = (double)r->end_ns * 1e-9;
  uint64_t by_cat[VS_CAT_N] = {0};
  uint64_t framework = r->mem.by_cat[VS_CAT_FRAMEWORK];
  by_cat[VS_CAT_FRAMEWORK] = framework;
  for (size_t i = 0; n > 0 && i < r->n_timeline; i++) {
    const vs_mem_event *e = &r->timeline[i];
    size_t x = step_s > 0 ? (size_t)((double)e->t_ns * 1e-9 / step_s *
                                     (double)(n - 1))
                          : 0;
    uint64_t alloc = 0, used = e->reserved_bytes + framework;
    if (x >= n)
      x = n - 1;
    by_cat[e->category] = (uint64_t)((int64_t)by_cat[e->category] + e->delta_bytes);
    for (int c = 0; c < VS_CAT_FRAMEWORK; c++)
      alloc += by_cat[c];
    if (out[x].set && out[x].used > used)
      used = out[x].used; /* the slice's most, whichever moment had it */
    if (!out[x].set || alloc > out[x].allocated) {
      memcpy(out[x].by_cat, by_cat, sizeof by_cat);
      out[x].allocated = alloc;
      out[x].t_ns = e->t_ns;
      out[x].op = e->op;
      out[x].set = true;
    }
    out[x].used = used;
  }
}

/* Pixel column x shows moment x of the step; columns without events hold
 * the state before them. */
static void svg_columns(const vs_rank *r, vs_report_moment *cols)
{
  vs_report_moments(r, SVG_COLS, cols);
  for (size_t x = 1; x < SVG_COLS; x++)
    if (!cols[x].set)
      cols[x] = cols[x - 1];
}

/* The length of the well-formed UTF-8 sequence at p (1 to 4), or 0 for
 * a byte that starts none (a stray continuation byte, an overlong form, a
 * surrogate, past U+10FFFF, or cut short). */
static size_t utf8_length(const unsigned char *p)
{
  size_t n = p[0] < 0x80                    ? 1
             : p[0] >= 0xC2 && p[0] <= 0xDF ? 2
             : p[0] >= 0xE0 && p[0] <= 0xEF ? 3
             : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4
                                            : 0;
  unsigned lo = p[0] == 0xE0 ? 0xA0 : p[0] == 0xF0 ? 0x90 : 0x80;
  unsigned hi = p[0] == 0xED ? 0x9F : p[0] == 0xF4 ? 0x8F : 0xBF;
  for (size_t i = 1; i < n; i++, lo = 0x80, hi = 0xBF)
    if (p[i] < lo || p[i] > hi)
      return 0;
  return n;
}

void vs_report_xml_text(vs_csv *f, const char *text)
{
  const unsigned char *p = (const unsigned char *)text, *run = p;
  while (*p) {
    size_t n = utf8_length(p);
    bool markup =
        *p == '<' || *p == '>' || *p == '&' || *p == '"' || *p == '\'';
    /* XML has no place for a control character or a byte that is no
     * UTF-8 (a Latin-1 name): the replacement character stands in */
    bool foreign = n == 0 || *p < 0x20 || *p == 0x7f;
    if (!markup && !foreign) {
      p += n; /* plain text: written with its run */
      continue;
    }
    vs_csv_printf(f, "%.*s", (int)(p - run), (const char *)run);
    vs_csv_printf(f, "%s",
                  *p == '<'    ? "&lt;"
                  : *p == '>'  ? "&gt;"
                  : *p == '&'  ? "&amp;"
                  : *p == '"'  ? "&quot;"
                  : *p == '\'' ? "&#39;"
                               : "\xEF\xBF\xBD");
    run = ++p;
  }
  vs_csv_printf(f, "%.*s", (int)(p - run), (const char *)run);
}

/* Category colours, and the order the areas stack in, bottom first. */
static const char *const svg_colors[VS_CAT_N] = {
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#bab0ac"};
static const int svg_order[VS_CAT_N] = {VS_CAT_FRAMEWORK, VS_CAT_PARAMS,
                                        VS_CAT_GRADS, VS_CAT_OPTIMIZER,
                                        VS_CAT_ACTIVATIONS, VS_CAT_TEMP};

const char *vs_report_category_color(int c)
{
  return c >= 0 && c < VS_CAT_N ? svg_colors[c] : "#000000";
}

int vs_report_stack_order(int k)
{
  return k >= 0 && k < VS_CAT_N ? svg_order[k] : 0;
}

/* The vertical scale: bytes to pixels. */
typedef struct svg_scale {
  double top;                  /* bytes at the top of the plot */
  double plot_h;               /* plot height in pixels */
} svg_scale;

static double svg_x(double column) { return SVG_LEFT + column; }

static double svg_y(const svg_scale *s, double bytes)
{
  return SVG_TOP + s->plot_h - s->plot_h * bytes / s->top;
}

static void svg_title(vs_csv *f, const vs_sim *sim, const vs_rank *r)
{
  vs_csv_printf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" "
                   "width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
                   "font-size=\"12\">\n"
                   "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                SVG_W, SVG_H);
  vs_csv_printf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\">memory of rank %u "
                   "(stage %d) over one step: ",
                SVG_LEFT, r->id, r->stage);
  vs_report_xml_text(f, sim->wl->origins.file);
  vs_csv_printf(f, " on ");
  vs_report_xml_text(f, sim->topo->name);
  vs_csv_printf(f, "</text>\n");
}

/* The stacked categories, bottom to top: area k lies between the sum of
 * the categories below it and that sum plus its own. */
static void svg_areas(vs_csv *f, const svg_scale *s, const vs_report_moment *cols)
{
  for (int k = 0; k < VS_CAT_N; k++) {
    vs_csv_printf(f, "<polygon fill=\"%s\" fill-opacity=\"0.85\" points=\"",
                  svg_colors[svg_order[k]]);
    for (size_t x = 0; x < SVG_COLS; x++) {
      uint64_t sum = 0;
      for (int j = 0; j <= k; j++)
        sum += cols[x].by_cat[svg_order[j]];
      vs_csv_printf(f, "%.1f,%.1f ", svg_x((double)x), svg_y(s, (double)sum));
    }
    for (size_t x = SVG_COLS; x-- > 0;) {
      uint64_t sum = 0;
      for (int j = 0; j < k; j++)
        sum += cols[x].by_cat[svg_order[j]];
      vs_csv_printf(f, "%.1f,%.1f ", svg_x((double)x), svg_y(s, (double)sum));
    }
    vs_csv_printf(f, "\"/>\n");
  }
}

/* Device use (reserved + framework) as a line, capacity as a dashed one. */
static void svg_use(vs_csv *f, const svg_scale *s, const vs_report_moment *cols,
                    uint64_t capacity_bytes)
{
  double cap = svg_y(s, (double)capacity_bytes);
  vs_csv_printf(f, "<polyline fill=\"none\" stroke=\"black\" "
                   "stroke-width=\"1.5\" points=\"");
  for (size_t x = 0; x < SVG_COLS; x++)
    vs_csv_printf(f, "%.1f,%.1f ", svg_x((double)x),
                  svg_y(s, (double)cols[x].used));
  vs_csv_printf(f, "\"/>\n<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"red\" stroke-dasharray=\"6,4\"/>\n",
                SVG_LEFT, SVG_LEFT + SVG_COLS, cap, cap);
}

/* Axes: five byte ticks up to the larger of capacity and peak, five time
 * ticks over the step. */
static void svg_axes(vs_csv *f, const svg_scale *s, double step)
{
  char label[32];
  vs_csv_printf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"black\"/>\n",
                SVG_LEFT, SVG_LEFT + SVG_COLS, svg_y(s, 0), svg_y(s, 0));
  for (int i = 0; i <= 4; i++) {
    double v = s->top / 1.05 * i / 4;
    vs_csv_printf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s"
                     "</text>\n",
                  SVG_LEFT - 6, svg_y(s, v) + 4,
                  vs_format_bytes((uint64_t)v, label, sizeof label));
    vs_csv_printf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s"
                     "</text>\n",
                  svg_x((SVG_COLS - 1) * i / 4.0), SVG_H - SVG_BOTTOM + 18,
                  vs_format_seconds(step * i / 4, label, sizeof label));
  }
  vs_csv_printf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">time in "
                   "the step</text>\n",
                svg_x(SVG_COLS / 2), SVG_H - 12);
}

/* The legend, top category first, then the two lines; closes the SVG. */
static void svg_legend(vs_csv *f)
{
  for (int k = VS_CAT_N - 1, row = 0; k >= 0; k--, row++)
    vs_csv_printf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" "
                     "fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
                  SVG_W - SVG_RIGHT + 16, SVG_TOP + 20 * row,
                  svg_colors[svg_order[k]], SVG_W - SVG_RIGHT + 34,
                  SVG_TOP + 20 * row + 11, vs_category_name(svg_order[k]));
  vs_csv_printf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" "
                   "stroke=\"black\" stroke-width=\"1.5\"/><text x=\"%d\" "
                   "y=\"%d\">reserved + framework</text>\n",
                SVG_W - SVG_RIGHT + 16, SVG_W - SVG_RIGHT + 28, SVG_TOP + 126,
                SVG_TOP + 126, SVG_W - SVG_RIGHT + 34, SVG_TOP + 130);
  vs_csv_printf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" "
                   "stroke=\"red\" stroke-dasharray=\"6,4\"/><text x=\"%d\" "
                   "y=\"%d\">capacity</text>\n</svg>\n",
                SVG_W - SVG_RIGHT + 16, SVG_W - SVG_RIGHT + 28, SVG_TOP + 146,
                SVG_TOP + 146, SVG_W - SVG_RIGHT + 34, SVG_TOP + 150);
}

/* A vertical line at t_ns across the plot, labelled at its top (row 0
 * or 1 below the plot's top edge, towards the middle of the chart): the
 * peak, and the first out-of-memory in red. */
static void svg_marker(vs_csv *f, const svg_scale *s, double step,
                       uint64_t t_ns, const char *color, int row,
                       const char *label)
{
  double x = svg_x(step > 0 ? (double)t_ns * 1e-9 / step * (SVG_COLS - 1) : 0);
  bool right_half = x > svg_x(SVG_COLS / 2.0);
  vs_csv_printf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.1f\" "
                   "stroke=\"%s\" stroke-width=\"1\"/>\n",
                x, x, SVG_TOP, svg_y(s, 0), color);
  vs_csv_printf(f, "<text x=\"%.1f\" y=\"%d\" fill=\"%s\" "
                   "text-anchor=\"%s\">",
                right_half ? x - 4 : x + 4, SVG_TOP + 12 + 14 * row, color,
                right_half ? "end" : "start");
  vs_report_xml_text(f, label);
  vs_csv_printf(f, "</text>\n");
}

/* The rank's peak (op and time) and its first out-of-memory, if any, as
 * the terminal report names them. The op and time are the allocated
 * peak's, so the label gives its bytes: the reserved bytes (and with them
 * the device's use) may peak later, at another op. */
static void svg_events(vs_csv *f, const svg_scale *s, const vs_sim *sim,
                       const vs_rank *r, double step)
{
  char op[160], bytes[16], label[224];
  vs_report_op_label(sim, r->prog, r->mem.peak_op, op, sizeof op);
  snprintf(label, sizeof label, "allocated peak %s at %s, t = %.6f s",
           vs_format_bytes(r->mem.peak_allocated_bytes, bytes, sizeof bytes),
           op, (double)r->mem.peak_t_ns * 1e-9);
  svg_marker(f, s, step, r->mem.peak_t_ns, "black", 0, label);
  if (!r->mem.oom.happened)
    return;
  vs_report_op_label(sim, r->prog, r->mem.oom.op, op, sizeof op);
  snprintf(label, sizeof label, "out of memory at %s, t = %.6f s: %s of %s",
           op, (double)r->mem.oom.t_ns * 1e-9,
           vs_format_bytes(r->mem.oom.requested_bytes, bytes, sizeof bytes),
           vs_category_name(r->mem.oom.category));
  svg_marker(f, s, step, r->mem.oom.t_ns, "red", 1, label);
}

int vs_report_write_svg(const vs_sim *sim, const char *path,
                        vs_report_files *out, vs_error *err)
{
  const vs_rank *r = vs_sim_worst_rank(sim);
  double step = (double)r->end_ns * 1e-9;
  vs_report_moment *cols = calloc(SVG_COLS, sizeof *cols);
  vs_csv *file; /* its atomic file and its write errors */
  svg_scale scale = {0, SVG_H - SVG_TOP - SVG_BOTTOM};

  if (!cols)
    return vs_error_set(err, VS_ENOMEM, "out of host memory for the chart");
  if (!(file = vs_report_files_open(out, path, err))) {
    free(cols);
    return err->code;
  }
  svg_columns(r, cols);
  scale.top = (double)(r->mem.capacity_bytes > r->mem.peak_used_bytes
                           ? r->mem.capacity_bytes
                           : r->mem.peak_used_bytes) * 1.05;
  svg_title(file, sim, r);
  svg_areas(file, &scale, cols);
  svg_use(file, &scale, cols, r->mem.capacity_bytes);
  svg_axes(file, &scale, step);
  svg_events(file, &scale, sim, r, step);
  svg_legend(file);
  free(cols);
  return 0;
}
