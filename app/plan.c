/* plan.c - `vsim plan`: which layouts to rent (see capacity.h). Every
 * answer comes from simulations (explore.h); the layouts are those a
 * practitioner would consider, left out with a reason when impossible. */
#include "capacity.h"
#include "capacity_int.h"

#include "cost.h"
#include "mpi_split.h"
#include "outputs.h"
#include "report.h"
#include "units.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------
 * plan
 * ------------------------------------------------------------------------ */

/* One layout a practitioner would consider. */
typedef struct layout_choice {
  uint64_t gpus;         /* tp * cp * pp * dp */
  uint64_t tp;           /* tensor-parallel size (sequence parallel if > 1) */
  uint64_t cp;           /* context-parallel size */
  uint64_t pp;           /* pipeline stages */
  uint64_t dp;           /* data-parallel size */
  uint64_t ep;           /* expert-parallel size (out of dp) */
  uint64_t etp;          /* expert tensor-parallel size: tp, or 1 where
                            plan varies it (plan_state.varies_etp), else
                            the workload's */
  uint64_t zero;         /* ZeRO stage */
  uint64_t mb;           /* micro-batch */
  int ckpt;              /* vs_checkpointing */
  bool uneven;           /* pp does not divide the layers: the split of
                            vs_capacity_split as parallel.pp_layers */
  bool interleaved;      /* interleaved schedule, PLAN_VSTAGES virtual
                            stages; else 1F1B */
  int offload;           /* plan_offload */
} layout_choice;

/* What a layout keeps in host memory (plan tries offload only when
 * nothing fits without it). */
typedef enum plan_offload {
  PLAN_OFFLOAD_NONE,
  PLAN_OFFLOAD_OPTIMIZER, /* offload_optimizer = cpu (ZeRO-1/2/3) */
  PLAN_OFFLOAD_ALL,       /* also offload_params = cpu (ZeRO-3) */
  PLAN_OFFLOAD_NVME,      /* offload_optimizer = nvme, offload_params =
                             cpu (ZeRO-3: ZeRO-Infinity), where the
                             topology has NVMe */
  PLAN_OFFLOAD_N
} plan_offload;

/* The sequence length from which plan tries context parallelism: Megatron
 * Core's parallelism guide gives CP for "long sequences (8K+ tokens)"
 * (docs.nvidia.com/megatron-core/developer-guide, parallelism-guide). */
#define PLAN_CP_FROM_SEQ 8192

/* The virtual stages (model chunks per pipeline rank) plan tries with the
 * interleaved schedule. */
#define PLAN_VSTAGES 2

/* GPU types (topology files) one plan compares. */
#define PLAN_TYPES_MAX 8

/* "parallel.pp_layers=" before a split's counts in a candidate. */
#define PP_LAYERS_KEY "parallel.pp_layers="

/* Why layouts were left out before simulating, and how many. The first
 * four break a layout rule of workload.h; the last two would simulate a
 * layout already listed. */
enum {
  PRUNE_TP_SHAPES,        /* tp does not divide heads, kv_heads, ffn_hidden */
  PRUNE_TP_SEQUENCE,      /* tp does not divide seq_len (sequence parallel) */
  PRUNE_TP_PP_GPUS,       /* tp * pp does not divide the GPU count */
  PRUNE_DP_BATCH,         /* dp does not divide the global batch */
  PRUNE_ZERO_PP,          /* ZeRO-2/3 with a pipeline */
  PRUNE_ZERO_DP1,         /* ZeRO without data parallelism: ZeRO-0 */
  PRUNE_SELECTIVE_FLASH,  /* selective with flash attention: none's
                             memory but the LSE, and a re-run (not
                             under Ulysses) */
  PRUNE_SPLIT_LONG,       /* an uneven split too long for an override */
  PRUNE_INTERLEAVE_SPLIT, /* interleaved: layers per stage uneven or odd */
  PRUNE_INTERLEAVE_BATCH, /* interleaved: micro-batches not a multiple of pp */
  PRUNE_OFFLOAD,          /* offload the framework does not run
                             (vs_workload_offload_misfit) */
  PRUNE_FINETUNE_TP,      /* adapters or a bitsandbytes base with tp > 1 */
  PRUNE_FSDP2_ZERO,       /* under fsdp2, ZeRO other than 3 */
  PRUNE_DP_ONLY,          /* autocast or hf beyond data parallelism */
  PRUNE_MOE_TP,           /* MoE or latent attention with tp > 1 outside
                             Megatron-LM */
  PRUNE_FUSED_LOSS_TP,    /* fused_cross_entropy with tp > 1 */
  PRUNE_EP,               /* ep not dividing dp, or with a zero above
                             vs_workload_ep_zero_max */
  PRUNE_CP,               /* cp with a tp its sequence cannot split for */
  PRUNE_PAGED,            /* a paged optimizer with zero > 0 or offload */
  PRUNE_MEGATRON_OPT,     /* Megatron-LM with zero > 1, its
                             precision-aware optimizer or FP8 weights with
                             zero other than 1 or with offload */
  PRUNE_STEP_IN_BWD,      /* optimizer_in_backward beyond one micro-batch
                             on one GPU */
  PRUNE_ACT_OFFLOAD,      /* DeepSpeed's activation offload without full
                             checkpointing */
  PRUNE_SCHEDULE_FW,      /* a schedule the framework does not run */
  PRUNE_N
};

static const char *const prune_reasons[PRUNE_N] = {
    "(GPUs, tp) pairs: tp does not divide heads, kv_heads or ffn_hidden",
    "(GPUs, tp) pairs: tp does not divide seq_len (sequence parallelism)",
    "(GPUs, tp, cp, pp) choices: tp * cp * pp does not divide the GPU count",
    "(GPUs, tp, cp, pp) choices: dp does not divide global_batch",
    "ZeRO stages: ZeRO-2/3 cannot be "
    "combined with pipeline parallelism",
    "ZeRO and offload choices: ZeRO-1/2/3 without "
    "data (or context) parallelism is ZeRO-0",
    "checkpointing choices: selective recompute with flash attention "
    "(none's memory less the kernel's log-sum-exp, and a re-run of it; "
    "tried under cp_comm = a2a, where it drops the head-group output too)",
    "(GPUs, tp, cp, pp) choices: the uneven layer split is too long for an "
    "override (pp_layers)",
    "interleaved layouts: the layers per stage are not an even split "
    "divisible by the virtual stages (plan's search; run takes any "
    "pp_layers)",
    "interleaved layouts: the micro-batches per step are not a multiple of pp",
    "ZeRO and offload choices: offload the framework "
    "does not run (DeepSpeed: the "
    "optimizer with zero >= 1 and master weights, not adam8bit, parameters "
    "with zero = 3; FSDP2: both to the host together; Megatron-LM and the "
    "Trainer: none)",
    "(GPUs, tp) pairs: LoRA adapters and int8/nf4 bases are simulated "
    "without tensor parallelism",
    "ZeRO stages: FSDP2 (framework = "
    "fsdp2) shards every parameter: ZeRO-3 only",
    "ZeRO stages: autocast (amp_*) and "
    "framework = hf are simulated with data "
    "parallelism alone "
    "(tp = pp = 1, zero <= 2 or 0 under hf, no offload)",
    "(GPUs, tp) pairs: mixture-of-experts layers and latent attention split "
    "over tp only as Megatron-LM splits them (framework none or megatron)",
    "(GPUs, tp) pairs: the fused cross-entropy loss (fused_cross_entropy, "
    "Liger Kernel's) is not vocab-parallel",
    "expert sizes (ep, etp): expert parallelism "
    "needs etp x ep dividing tp x dp x cp (ep dividing dp x cp at etp = "
    "tp), etp dividing expert_ffn_hidden, zero <= 1 (2 under deepspeed) "
    "and, with a pipeline, "
    "order = tp-dp-pp",
    "(GPUs, tp, cp) choices: the sequence does not split into 2 x cp x tp "
    "chunks (or tp x cp does not divide the heads for cp_comm = a2a)",
    "ZeRO and offload choices: bitsandbytes' paged "
    "optimizer (paged_optimizer) runs with "
    "zero = 0 and the optimizer on the GPU",
    "ZeRO and offload choices: Megatron-LM shards "
    "with its distributed optimizer (zero <= "
    "1), its precision-aware optimizer and FP8 weights (fp8_param_gather) "
    "run within it (zero = 1), without offload",
    "micro-batch choices: "
    "optimizer_in_backward needs one micro-batch a step on one GPU "
    "(dp = cp = pp = 1) and the optimizer on it",
    "checkpointing choices: DeepSpeed's "
    "activation offload (cpu_checkpointing) is "
    "simulated with full checkpointing only",
    "interleaved layouts: DeepSpeed's pipeline engine runs 1F1B alone",
};

/* A fitting layout's place in the ranking. */
typedef struct ranked {
  double cost;           /* per step */
  double step;           /* seconds */
  size_t type;           /* which plan_state (GPU type), 0 with one */
  size_t idx;            /* into plan_state */
} ranked;

typedef struct plan_state {
  vs_explore ex;             /* the command's, on this GPU type's topology */
  char gpu[VS_NAME_MAX];      /* the GPU type's name (topology name) */
  const char *type;          /* gpu, in tables listing several types;
                                NULL with one */
  bool loaded;               /* its inputs passed plan_inputs */
  layout_choice *choices;    /* [n] the layouts, in enumeration order */
  vs_candidate *cands;       /* [n] their simulations */
  size_t n, cap;             /* layouts held, room for */
  uint64_t pruned[PRUNE_N];  /* layouts left out, by reason */
  uint64_t max_gpus;         /* --max-gpus (512 when not given), or --gpus */
  bool exact;                /* --gpus: layouts on max_gpus GPUs only */
  uint64_t layers;           /* the model's, for the uneven splits */
  bool varies_cp;            /* plan tries cp = 1, 2, 4, ... (and the
                                workload's): plan_varies_cp */
  bool varies_ep;            /* plan tries ep = 1, 2, 4, ... (and the
                                workload's) dividing the experts */
  bool varies_etp;           /* plan tries etp = 1 beside etp = tp with
                                tp > 1 (the workload sets no etp) */
  int cp_comm;               /* the workload's (kept with cp > 1) */
  int p2p;                   /* the workload's (kept with pp > 1) */
  bool p2p_scatter_gather;   /* the workload's (dropped: see
                                candidate_sets) */
  bool overlap_grad_reduce;  /* the workload's (kept below ZeRO-3) */
  bool ckpt_choice;          /* the workload chooses which layers full
                                checkpointing recomputes */
  bool coordinator_limits;   /* the workload tunes DeepSpeed's ZeRO-3
                                coordinator (dropped below ZeRO-3) */
  bool pageable;             /* the workload's offload buffers are pageable
                                (offload_pin_memory = false: dropped
                                where nothing is offloaded) */
  double tokens_per_step;    /* global batch * sequence */
  bool priced;               /* the topology has a price per GPU-hour */
  double seconds;            /* wall time of the simulations */
  ranked *order;             /* [n_fit] the fitting layouts, cheapest first */
  size_t n_fit;              /* how many fit */
  size_t top;                /* how many to list (--top, at most n_fit) */
  size_t fastest, smallest;  /* the fastest, and the fewest GPUs */
  size_t n_refused;          /* of n_unconfirmed, those whose full
                                simulation was refused (invalid: over the
                                work or memory limits) */
  size_t n_unconfirmed;      /* fitted when extrapolated, but not in the
                                full re-simulation (now oom or invalid) */
  bool offload_pass;         /* enumerating the offload layouts (nothing
                                fitted without) */
  bool nvme;                 /* the topology has NVMe: the offload pass
                                tries the optimizer there too */
  size_t n_plain;            /* layouts without offload (the first pass) */
} plan_state;

int vs_capacity_split(uint64_t layers, uint64_t pp, uint64_t *counts)
{
  uint64_t per, excess;
  if (pp == 0 || pp > layers)
    return VS_EUSAGE;
  per = (layers + pp - 1) / pp;
  excess = per * pp - layers; /* < pp: no stage loses two */
  for (uint64_t i = 0; i < pp; i++)
    counts[i] = per;
  /* first, last, second, second to last, ... */
  for (uint64_t k = 0; k < excess; k++)
    counts[k % 2 ? pp - 1 - k / 2 : k / 2]--;
  return 0;
}

/* The uneven split of ps->layers over pp stages as "a,b,c" in buf; false
 * when it does not fit len bytes. */
static bool split_text(const plan_state *ps, uint64_t pp, char *buf, size_t len)
{
  uint64_t counts[VS_LIST_MAX];
  size_t at = 0;
  if (pp > VS_LIST_MAX || vs_capacity_split(ps->layers, pp, counts))
    return false;
  buf[0] = '\0';
  for (uint64_t i = 0; i < pp; i++) {
    int n = snprintf(buf + at, len - at, "%s%llu", i ? "," : "",
                     (unsigned long long)counts[i]);
    if (n < 0 || (size_t)n >= len - at)
      return false;
    at += (size_t)n;
  }
  return true;
}

/* The offload keys' values of lc (vs_offload). */
static int offload_optimizer(const layout_choice *lc)
{
  return lc->offload == PLAN_OFFLOAD_NONE   ? VS_OFFLOAD_NONE
         : lc->offload == PLAN_OFFLOAD_NVME ? VS_OFFLOAD_NVME
                                            : VS_OFFLOAD_CPU;
}

static int offload_params(const layout_choice *lc)
{
  return lc->offload == PLAN_OFFLOAD_ALL || lc->offload == PLAN_OFFLOAD_NVME
             ? VS_OFFLOAD_CPU
             : VS_OFFLOAD_NONE;
}

/* The pipeline schedule of lc (vs_schedule_kind) and its virtual
 * stages. */
static int schedule_of(const layout_choice *lc)
{
  return lc->interleaved ? VS_SCHED_INTERLEAVED : VS_SCHED_1F1B;
}

static int virtual_stages_of(const layout_choice *lc)
{
  return lc->interleaved ? PLAN_VSTAGES : 1;
}

/* Whether plan runs sequence parallelism at tensor-parallel size tp:
 * wherever it has tensor parallelism (Megatron-LM's recommended
 * setting). */
static bool sp_at(uint64_t tp) { return tp > 1; }

static bool sequence_parallel_of(const layout_choice *lc)
{
  return sp_at(lc->tp);
}

/* Hours of wall time a billion tokens take at c's step time. */
static double hours_per_1e9_tokens(const plan_state *ps,
                                   const vs_candidate *c)
{
  return c->step_time_s * (1e9 / ps->tokens_per_step) / 3600.0;
}

/* candidate_sets' parts, each adding its keys to c in order (nonzero
 * when one did not fit). The GPUs: tp, pp, dp and cp. */
static int size_sets(const plan_state *ps, const layout_choice *lc,
                     vs_candidate *c)
{
  int bad = 0;
  bad |= vs_candidate_set(c, "parallel.tp=%llu", (unsigned long long)lc->tp);
  bad |= vs_candidate_set(c, "parallel.pp=%llu", (unsigned long long)lc->pp);
  bad |= vs_candidate_set(c, "parallel.dp=%llu", (unsigned long long)lc->dp);
  if (ps->varies_cp) {
    bad |= vs_candidate_set(c, "parallel.cp=%llu", (unsigned long long)lc->cp);
    /* with cp = 1 nothing is exchanged (the workload says how to with
       cp > 1, and cp_comm means nothing without) */
    if (lc->cp == 1 && ps->cp_comm != VS_CP_P2P)
      bad |= vs_candidate_set(c, "parallel.cp_comm=%s",
                              vs_cp_comm_name(VS_CP_P2P));
  }
  return bad;
}

/* The pipeline's sends and the gradients' reductions. */
static int comm_sets(const plan_state *ps, const layout_choice *lc,
                     vs_candidate *c)
{
  int bad = 0;
  /* without a pipeline there are no sends to wait for; plan runs tp > 1
   * with sequence parallelism, whose pipeline tensor is already split,
   * so scatter/gather has nothing to do in any candidate */
  if (lc->pp == 1 && ps->p2p != VS_P2P_OVERLAPPED)
    bad |= vs_candidate_set(c, "parallel.p2p=%s",
                            vs_p2p_name(VS_P2P_OVERLAPPED));
  if (ps->p2p_scatter_gather)
    bad |= vs_candidate_set(c, "parallel.p2p_scatter_gather=false");
  /* ZeRO-3 reduces on a stream of its own (the workload's
   * optimizer_in_backward already refused false) */
  if (!ps->overlap_grad_reduce &&
      !vs_workload_reduce_can_wait(lc->zero, VS_OPTIMIZER_AFTER_BACKWARD))
    bad |= vs_candidate_set(c, "parallel.overlap_grad_reduce=true");
  return bad;
}

/* How the model is split: experts, ZeRO, sequence parallelism, the
 * pipeline's schedule and its layers per stage. */
static int split_sets(const plan_state *ps, const layout_choice *lc,
                      vs_candidate *c)
{
  char split[VS_EXPLORE_SET_MAX];
  int bad = 0;
  if (ps->varies_ep)
    bad |= vs_candidate_set(c, "parallel.ep=%llu", (unsigned long long)lc->ep);
  if (ps->varies_etp)
    bad |= vs_candidate_set(c, "parallel.etp=%llu",
                            (unsigned long long)lc->etp);
  bad |= vs_candidate_set(c, "parallel.zero=%llu",
                          (unsigned long long)lc->zero);
  /* ZeRO-3's coordinator limits mean nothing below it */
  if (lc->zero < 3 && ps->coordinator_limits) {
    bad |= vs_candidate_set(c, "parallel.max_live_parameters=0");
    bad |= vs_candidate_set(c, "parallel.max_reuse_distance=0");
  }
  bad |= vs_candidate_set(c, "parallel.sequence_parallel=%s",
                          sequence_parallel_of(lc) ? "true" : "false");
  bad |= vs_candidate_set(c, "parallel.schedule=%s",
                          vs_schedule_name(schedule_of(lc)));
  bad |= vs_candidate_set(c, "parallel.virtual_stages=%d",
                          virtual_stages_of(lc));
  /* enumerate_pp checked that the split fits an override */
  if (lc->uneven && split_text(ps, lc->pp, split, sizeof split))
    bad |= vs_candidate_set(c, PP_LAYERS_KEY "%s", split);
  return bad;
}

/* What the layout keeps: checkpointing, micro-batch and offload. */
static int memory_sets(const plan_state *ps, const layout_choice *lc,
                       vs_candidate *c)
{
  int bad = 0;
  bad |= vs_candidate_set(c, "training.checkpointing=%s",
                          vs_checkpointing_name(lc->ckpt));
  /* the layers full checkpointing leaves alone mean nothing without it */
  if (lc->ckpt != VS_CKPT_FULL && ps->ckpt_choice) {
    bad |= vs_candidate_set(c, "training.checkpoint_layers=0");
    bad |= vs_candidate_set(c, "training.checkpoint_every=0");
  }
  bad |= vs_candidate_set(c, "training.micro_batch=%llu",
                          (unsigned long long)lc->mb);
  bad |= vs_candidate_set(c, "parallel.offload_optimizer=%s",
                          vs_offload_name(offload_optimizer(lc)));
  bad |= vs_candidate_set(c, "parallel.offload_params=%s",
                          vs_offload_name(offload_params(lc)));
  /* pinned or pageable buffers mean nothing without offload */
  if (ps->pageable && offload_optimizer(lc) == VS_OFFLOAD_NONE &&
      offload_params(lc) == VS_OFFLOAD_NONE)
    bad |= vs_candidate_set(c, "parallel.offload_pin_memory=true");
  return bad;
}

/* The keys that make candidate c the layout lc. VS_ELIMIT when they are
 * more than a candidate holds (VS_EXPLORE_MAX_SETS): a bug. */
static int candidate_sets(const plan_state *ps, const layout_choice *lc,
                          vs_candidate *c)
{
  int bad = size_sets(ps, lc, c);
  bad |= comm_sets(ps, lc, c);
  bad |= split_sets(ps, lc, c);
  bad |= memory_sets(ps, lc, c);
  return bad ? VS_ELIMIT : 0;
}

/* The keys candidate_sets writes for a plain layout whatever the workload
 * (those it sets only where a layout needs them, as pp_layers for an
 * uneven split, or seeds from the workload's own value, are not among
 * them): read from candidate_sets itself, so the two cannot drift. */
bool vs_capacity_plan_sets(const char *key, size_t n)
{
  plan_state ps = {.p2p = VS_P2P_OVERLAPPED, .overlap_grad_reduce = true};
  layout_choice lc = {.gpus = 1, .tp = 1, .cp = 1, .pp = 1, .dp = 1,
                      .ep = 1, .etp = 1, .mb = 1, .ckpt = VS_CKPT_NONE};
  vs_candidate c = {0};
  if (candidate_sets(&ps, &lc, &c))
    return false;
  for (size_t i = 0; i < c.n_sets; i++)
    if (strncmp(c.sets[i], key, n) == 0 && c.sets[i][n] == '=')
      return true;
  return false;
}

static int add_layout(plan_state *ps, const layout_choice *lc)
{
  vs_candidate *c;
  if (ps->n == ps->cap) {
    size_t cap = ps->cap ? 2 * ps->cap : 1024;
    layout_choice *ch = realloc(ps->choices, cap * sizeof *ch);
    vs_candidate *cs;
    if (!ch)
      return VS_ENOMEM;
    ps->choices = ch;
    cs = realloc(ps->cands, cap * sizeof *cs);
    if (!cs)
      return VS_ENOMEM;
    ps->cands = cs;
    ps->cap = cap;
  }
  ps->choices[ps->n] = *lc;
  c = &ps->cands[ps->n++];
  memset(c, 0, sizeof *c);
  c->gpus = lc->gpus;
  return candidate_sets(ps, lc, c);
}

/* Adds lc with 1F1B and interleaved with PLAN_VSTAGES virtual stages
 * where vsim's rules (workload.h) allow it and the split is even, its
 * layers per stage divisible by the virtual stages: the search leaves out
 * the uneven interleaved splits Megatron-LM's
 * pipeline_model_parallel_layout also allows (transformer_config.py). */
static int add_schedules(plan_state *ps, const layout_choice *lc,
                         uint64_t grad_accum, int framework)
{
  int rc;
  layout_choice il = *lc;
  if ((rc = add_layout(ps, lc)))
    return rc;
  if (!vs_workload_interleave_shape_allowed(lc->pp, PLAN_VSTAGES))
    return 0; /* no pipeline to interleave: nothing left out */
  if (!vs_workload_schedule_allowed(VS_SCHED_INTERLEAVED, framework)) {
    ps->pruned[PRUNE_SCHEDULE_FW]++;
    return 0;
  }
  if (lc->uneven || (ps->layers / lc->pp) % PLAN_VSTAGES) {
    ps->pruned[PRUNE_INTERLEAVE_SPLIT]++;
    return 0;
  }
  if (!vs_workload_interleave_batch_allowed(grad_accum, lc->pp)) {
    ps->pruned[PRUNE_INTERLEAVE_BATCH]++;
    return 0;
  }
  il.interleaved = true;
  return add_layout(ps, &il);
}

/* The expert tensor-parallel size the workload gives tensor-parallel
 * size tp (its etp, or tp when it sets none). */
static uint64_t etp_at(const vs_workload *wl, uint64_t tp)
{
  vs_parallel_conf p = wl->parallel;
  p.tp = tp;
  return vs_workload_etp(&p);
}

/* The workload's parallel settings with lc's sizes. */
static vs_parallel_conf parallel_at(const vs_workload *wl,
                                    const layout_choice *lc)
{
  vs_parallel_conf p = wl->parallel;
  p.tp = lc->tp;
  p.cp = lc->cp;
  p.dp = lc->dp;
  p.ep = lc->ep;
  p.etp = lc->etp;
  return p;
}

/* The layouts of lc's ZeRO stage and offload: checkpointing,
 * micro-batches (powers of two) that keep the global batch, and the
 * schedules of add_schedules. ZeRO without data parallelism is ZeRO-0,
 * unless it offloads (ZeRO-Offload on one GPU). */
static int enumerate_zero(const vs_workload *wl, const layout_choice *base,
                          plan_state *ps)
{
  int rc;
  uint64_t global = wl->training.global_batch, dp = base->dp;
  /* selective under flash drops the kernel's LSE alone, but for Ulysses'
   * head-group output (layer.c flash_core_saves) */
  bool lse_alone = wl->training.attention == VS_ATTN_FLASH &&
                   !(base->cp > 1 && ps->cp_comm == VS_CP_A2A);
  layout_choice lc = *base;
  vs_parallel_conf at;
  const char *key;

  if (lc.offload != PLAN_OFFLOAD_NONE &&
      vs_workload_offload_misfit(lc.zero, offload_optimizer(&lc),
                                 offload_params(&lc), &wl->training, &key)) {
    ps->pruned[PRUNE_OFFLOAD]++;
    return 0;
  }
  at = parallel_at(wl, &lc);
  if (vs_workload_megatron_optimizer_misfit(&wl->training, lc.zero,
                                            offload_optimizer(&lc),
                                            wl->finetune.method, &key)) {
    ps->pruned[PRUNE_MEGATRON_OPT]++;
    return 0;
  }
  /* ZeRO shards over dp x cp (or an expert group): without data
   * parallelism it is ZeRO-0, unless ZeRO-0 is refused (Megatron-LM's
   * precision-aware optimizer and FP8 weights run within its distributed
   * optimizer, dp = 1 or not) */
  if (!vs_workload_grads_shared(&at) && lc.zero > 0 &&
      lc.offload == PLAN_OFFLOAD_NONE &&
      !vs_workload_megatron_optimizer_misfit(&wl->training, 0, VS_OFFLOAD_NONE,
                                             wl->finetune.method, &key)) {
    ps->pruned[PRUNE_ZERO_DP1]++;
    return 0;
  }
  if (!vs_workload_paged_allowed(&wl->training, lc.zero,
                                 offload_optimizer(&lc))) {
    ps->pruned[PRUNE_PAGED]++;
    return 0;
  }
  for (lc.ckpt = VS_CKPT_NONE; lc.ckpt <= VS_CKPT_FULL; lc.ckpt++) {
    if (lse_alone && lc.ckpt == VS_CKPT_SELECTIVE) {
      ps->pruned[PRUNE_SELECTIVE_FLASH]++;
      continue;
    }
    if (!vs_workload_activation_offload_allowed(&wl->training, lc.ckpt)) {
      ps->pruned[PRUNE_ACT_OFFLOAD]++;
      continue;
    }
    for (lc.mb = 1; lc.mb * dp <= global; lc.mb *= 2) {
      if (!vs_workload_batch_allowed(global, lc.mb, dp))
        continue;
      if (!vs_workload_step_in_backward_allowed(
              &wl->training, global / (lc.mb * dp), dp * lc.cp, lc.pp,
              offload_optimizer(&lc))) {
        ps->pruned[PRUNE_STEP_IN_BWD]++;
        continue;
      }
      if ((rc = add_schedules(ps, &lc, global / (lc.mb * dp),
                              wl->training.framework)))
        return rc;
    }
  }
  return 0;
}

/* The next size after v that plan tries for a parallelism the workload
 * sets to own: the powers of two, and own. */
static uint64_t next_tried(uint64_t v, uint64_t own)
{
  uint64_t pow2 = 1;
  while (pow2 <= v)
    pow2 *= 2;
  return own > v && own < pow2 ? own : pow2;
}

/* Whether lc's expert sizes (ep, etp) break a rule of workload.h (then
 * counted as PRUNE_EP). */
static bool experts_pruned(const vs_workload *wl, const layout_choice *lc,
                           const plan_state *ps)
{
  vs_parallel_conf at = parallel_at(wl, lc);
  bool apart = vs_workload_experts_apart(&at);
  return vs_workload_ep_misfit(&wl->model, lc->ep, lc->etp, lc->tp,
                               lc->dp * lc->cp, lc->zero,
                               wl->training.framework) ||
         vs_workload_tp_misfit(&wl->model, lc->tp, lc->etp, NULL) ||
         !vs_workload_ep_order_allowed(apart, wl->parallel.order, lc->pp) ||
         (apart && !vs_workload_experts_apart_allowed(ps->offload_pass));
}

/* The layouts of lc's ZeRO stage and expert sizes, without offload,
 * through enumerate_zero (with each offload in the offload pass). */
static int enumerate_offload(const vs_workload *wl, layout_choice lc,
                             plan_state *ps)
{
  int rc;
  if (!ps->offload_pass) {
    lc.offload = PLAN_OFFLOAD_NONE;
    return enumerate_zero(wl, &lc, ps);
  }
  for (lc.offload = PLAN_OFFLOAD_OPTIMIZER; lc.offload < PLAN_OFFLOAD_N;
       lc.offload++)
    if ((lc.offload != PLAN_OFFLOAD_NVME || ps->nvme) &&
        (rc = enumerate_zero(wl, &lc, ps)))
      return rc;
  return 0;
}

/* The layouts of lc's ZeRO stage with each expert-parallel size (ep = 1
 * only unless ps->varies_ep): those dividing the experts, out of the
 * dp x cp ranks; with ps->varies_etp and tp > 1 each with etp = tp and
 * etp = 1 (Megatron-LM's expert tensor parallelism at its default, and
 * whole experts), through enumerate_offload. */
static int enumerate_ep(const vs_workload *wl, const layout_choice *base,
                        plan_state *ps)
{
  int rc;
  layout_choice lc = *base;
  for (lc.ep = 1; lc.ep <= wl->model.experts || lc.ep == 1;
       lc.ep = next_tried(lc.ep, wl->parallel.ep)) {
    if (lc.ep > 1 && !ps->varies_ep)
      break;
    if (lc.ep > 1 && wl->model.experts % lc.ep)
      continue; /* not a size for these experts */
    for (int whole = 0; whole < 2; whole++) {
      if (whole && (!ps->varies_etp || lc.tp == 1))
        break;
      lc.etp = whole ? 1 : etp_at(wl, lc.tp);
      if (experts_pruned(wl, &lc, ps)) {
        ps->pruned[PRUNE_EP]++;
        continue;
      }
      if ((rc = enumerate_offload(wl, lc, ps)))
        return rc;
    }
  }
  return 0;
}

/* The layouts of one (GPUs, tp, cp, pp) choice, whose gpus, tp, cp, pp,
 * dp and split base holds: ZeRO 0-3, through enumerate_ep. */
static int enumerate_triple(const vs_workload *wl, const layout_choice *base,
                            plan_state *ps)
{
  int rc;
  layout_choice lc = *base;

  for (lc.zero = 0; lc.zero <= VS_ZERO_MAX; lc.zero++) {
    if (!vs_workload_zero_allowed(lc.zero, lc.pp, wl->training.framework)) {
      ps->pruned[wl->training.framework == VS_FW_FSDP2 ? PRUNE_FSDP2_ZERO
                                                       : PRUNE_ZERO_PP]++;
      continue;
    }
    if (vs_workload_dp_only_misfit(wl->training.precision,
                                   wl->training.framework, lc.tp, lc.pp,
                                   lc.zero, ps->offload_pass)) {
      ps->pruned[PRUNE_DP_ONLY]++;
      continue;
    }
    if ((rc = enumerate_ep(wl, &lc, ps)))
      return rc;
  }
  return 0;
}

/* The pipeline depths plan tries: the divisors of the layers, and the
 * powers of two up to them (split unevenly by vs_capacity_split). */
static bool pp_tried(uint64_t layers, uint64_t pp)
{
  return layers % pp == 0 || (pp & (pp - 1)) == 0;
}

/* The layouts of g GPUs with tensor- and context-parallel sizes tp and
 * cp: pp of pp_tried, tp * cp * pp dividing g, and dp = g / (tp * cp *
 * pp) dividing the batch. */
static int enumerate_pp(const vs_workload *wl, uint64_t g, uint64_t tp,
                        uint64_t cp, plan_state *ps)
{
  int rc;
  const vs_model_conf *m = &wl->model;
  uint64_t tcp = tp * cp;
  char split[VS_EXPLORE_SET_MAX - sizeof PP_LAYERS_KEY + 1];
  for (uint64_t pp = 1; pp <= m->layers && tcp * pp <= g; pp++) {
    layout_choice base = {.gpus = g, .tp = tp, .cp = cp, .pp = pp, .ep = 1,
                          .ckpt = VS_CKPT_NONE, .offload = PLAN_OFFLOAD_NONE};
    if (!pp_tried(m->layers, pp))
      continue;
    if (!vs_workload_gpus_allowed(g, tcp, pp)) {
      ps->pruned[PRUNE_TP_PP_GPUS]++;
      continue;
    }
    base.dp = g / (tcp * pp);
    if (!vs_workload_batch_allowed(wl->training.global_batch, 1, base.dp)) {
      ps->pruned[PRUNE_DP_BATCH]++;
      continue;
    }
    base.uneven = m->layers % pp != 0;
    if (base.uneven && !split_text(ps, pp, split, sizeof split)) {
      ps->pruned[PRUNE_SPLIT_LONG]++;
      continue;
    }
    if ((rc = enumerate_triple(wl, &base, ps)))
      return rc;
  }
  return 0;
}

/* The layouts of g GPUs with tensor-parallel size tp for each
 * context-parallel size (1 only unless ps->varies_cp) whose split of the
 * sequence works with tp, through enumerate_pp. */
static int enumerate_cp(const vs_workload *wl, uint64_t g, uint64_t tp,
                        plan_state *ps)
{
  int rc;
  for (uint64_t cp = 1; tp * cp <= g; cp = next_tried(cp, wl->parallel.cp)) {
    if (cp > 1 && !ps->varies_cp)
      break;
    if (vs_workload_cp_misfit(&wl->model, cp,
                              vs_workload_framework_cp_comm(
                                  wl->training.framework, wl->parallel.cp_comm),
                              tp, sp_at(tp))) {
      ps->pruned[PRUNE_CP]++;
      continue;
    }
    if ((rc = enumerate_pp(wl, g, tp, cp, ps)))
      return rc;
  }
  return 0;
}

/* Whether wl offloads activations, which plan keeps as the workload
 * says. */
static bool offloads_activations(const vs_workload *wl)
{
  return wl->training.offload_activations != VS_OFFLOAD_NONE;
}

/* Whether plan tries whole experts (etp = 1) beside etp = tp: a mixture
 * of experts that the framework splits as Megatron-LM does (etp other
 * than tp is refused otherwise), the workload setting no etp and
 * offloading no activations (vs_workload_experts_apart_allowed). */
static bool plan_varies_etp(const vs_workload *wl)
{
  return wl->model.experts > 0 && wl->parallel.etp == 0 &&
         vs_workload_experts_apart_allowed(offloads_activations(wl)) &&
         vs_workload_framework_runs_ep(wl->training.framework, VS_ETP_APART);
}

/* The rule of workload.h that tensor-parallel size tp breaks for wl (a
 * PRUNE_ reason), or PRUNE_N when none. */
static int tp_pruned(const vs_workload *wl, uint64_t tp)
{
  /* where plan tries whole experts, their width is no reason to drop tp
   * (experts_pruned checks each etp) */
  if (vs_workload_tp_misfit(&wl->model, tp,
                            plan_varies_etp(wl) ? 1 : etp_at(wl, tp), NULL))
    return PRUNE_TP_SHAPES;
  if (!vs_workload_finetune_tp_allowed(&wl->finetune, tp))
    return PRUNE_FINETUNE_TP;
  if (!vs_workload_moe_tp_allowed(&wl->model, tp, sp_at(tp),
                                  wl->training.framework))
    return PRUNE_MOE_TP;
  if (!vs_workload_fused_loss_tp_allowed(&wl->training, tp))
    return PRUNE_FUSED_LOSS_TP;
  if (sp_at(tp) && !vs_workload_sp_allowed(wl->model.seq_len, tp))
    return PRUNE_TP_SEQUENCE;
  return PRUNE_N;
}

/* Enumerates GPU counts (powers of two below a node, multiples of a node
 * above; only max_gpus when ps->exact), tp dividing the node and the head
 * counts, then the rest through enumerate_cp. A layout that breaks a rule
 * of workload.h is counted in ps->pruned instead. */
static int enumerate(const vs_workload *wl, const vs_topology *topo,
                     plan_state *ps)
{
  int rc;
  uint64_t node = topo->gpus_per_node;

  for (uint64_t g = ps->exact ? ps->max_gpus : 1; g <= ps->max_gpus;
       g = ps->exact ? g + 1 : (g < node ? 2 * g : g + node)) {
    for (uint64_t tp = 1; tp <= node && tp <= g; tp *= 2) {
      int why;
      if (node % tp)
        continue;
      if ((why = tp_pruned(wl, tp)) != PRUNE_N) {
        ps->pruned[why]++;
        continue;
      }
      if ((rc = enumerate_cp(wl, g, tp, ps)))
        return rc;
    }
  }
  return 0;
}

/* Cost of a step in dollars, or in GPU-hours when the topology has no price
 * (the ranking is the same either way for one GPU type). */
static double step_cost(const vs_candidate *c)
{
  return vs_cost_step_charge(c->usd_per_step, c->total_gpus, c->step_time_s);
}

/* The pipeline of lc for the table: "1f1b", "interleaved x2", or 1F1B on
 * an uneven split with runs of equal counts shortened ("1f1b 7,8x14,7"). */
static void pipeline_text(const plan_state *ps, const layout_choice *lc,
                          char *buf, size_t len)
{
  uint64_t counts[VS_LIST_MAX];
  size_t at;
  static const char *const offload_text[PLAN_OFFLOAD_N] = {
      "", " +cpu optimizer", " +cpu optimizer,params",
      " +nvme optimizer,cpu params"};
  if (lc->interleaved) {
    snprintf(buf, len, "%s x%d%s", vs_schedule_name(schedule_of(lc)),
             virtual_stages_of(lc), offload_text[lc->offload]);
    return;
  }
  at = (size_t)snprintf(buf, len, "%s", vs_schedule_name(VS_SCHED_1F1B));
  if (!lc->uneven || lc->pp > VS_LIST_MAX ||
      vs_capacity_split(ps->layers, lc->pp, counts)) {
    if (at < len)
      snprintf(buf + at, len - at, "%s", offload_text[lc->offload]);
    return;
  }
  for (uint64_t i = 0, run; i < lc->pp && at < len; i += run) {
    for (run = 1; i + run < lc->pp && counts[i + run] == counts[i]; run++)
      ;
    at += (size_t)snprintf(buf + at, len - at, run > 1 ? "%c%llux%llu" : "%c%llu",
                           i ? ',' : ' ', (unsigned long long)counts[i],
                           (unsigned long long)run);
  }
  if (at < len)
    snprintf(buf + at, len - at, "%s", offload_text[lc->offload]);
}

/* Whether a table has the $/step and $/1e9 tok columns. */
typedef enum { NO_PRICE_COLUMNS, PRICE_COLUMNS } price_columns;

/* A table row's last columns: the pipeline, and the GPU type where the
 * table has a type column (gpu, NULL: none), without trailing blanks. */
static void last_columns(FILE *out, const char *pipeline, const char *gpu)
{
  if (gpu)
    fprintf(out, "%-16s %s\n", pipeline, gpu);
  else
    fprintf(out, "%s\n", pipeline);
}

/* The price columns of ps's own tables: where its type has a price. */
static price_columns prices_of(const plan_state *ps)
{
  return ps->priced ? PRICE_COLUMNS : NO_PRICE_COLUMNS;
}

static void print_layout(FILE *out, int rank_no, const plan_state *ps, size_t i,
                         price_columns prices)
{
  char pipeline[VS_EXPLORE_SET_MAX];
  const layout_choice *lc = &ps->choices[i];
  const vs_candidate *c = &ps->cands[i];
  char peak[16], step[16];
  fprintf(out, "%3d %6llu %4llu %3llu %3llu ", rank_no,
          (unsigned long long)lc->gpus, (unsigned long long)lc->dp,
          (unsigned long long)lc->tp, (unsigned long long)lc->pp);
  if (ps->varies_cp)
    fprintf(out, "%3llu ", (unsigned long long)lc->cp);
  if (ps->varies_ep)
    fprintf(out, "%3llu ", (unsigned long long)lc->ep);
  if (ps->varies_etp)
    fprintf(out, "%3llu ", (unsigned long long)lc->etp);
  fprintf(out, "%4llu %-9s %4llu %10s %10s %12.0f ",
          (unsigned long long)lc->zero, vs_checkpointing_name(lc->ckpt),
          (unsigned long long)lc->mb,
          vs_format_bytes(c->worst.peak_used_bytes, peak, sizeof peak),
          vs_format_seconds(c->step_time_s, step, sizeof step), c->tokens_per_s);
  if (prices == PRICE_COLUMNS)
    fprintf(out, "%10.3g %12.4g ", c->usd_per_step,
            vs_cost_per_tokens(c->usd_per_step, ps->tokens_per_step, 1e9));
  else /* what the tables rank by without prices */
    fprintf(out, "%10.3g ", (double)c->total_gpus * c->step_time_s / 3600.0);
  pipeline_text(ps, lc, pipeline, sizeof pipeline);
  fprintf(out, "%10.1f  ", hours_per_1e9_tokens(ps, c));
  last_columns(out, pipeline, ps->type);
}

static int by_cost(const void *x, const void *y)
{
  const ranked *a = x, *b = y;
  if (a->cost != b->cost)
    return a->cost < b->cost ? -1 : 1;
  if (a->step != b->step)
    return a->step < b->step ? -1 : 1;
  if (a->type != b->type)
    return a->type < b->type ? -1 : 1;
  return a->idx < b->idx ? -1 : (a->idx > b->idx);
}

/* Whether a table's rows name their GPU type (a last `gpu` column). */
typedef enum { ONE_GPU_TYPE, GPU_TYPE_COLUMN } type_column;

/* The column header of print_layout's rows (cp and ep where ps varies
 * them). */
static void plan_header(FILE *out, const plan_state *ps, price_columns prices,
                        type_column types)
{
  fprintf(out, "%3s %6s %4s %3s %3s ", "#", "gpus", "dp", "tp", "pp");
  if (ps->varies_cp)
    fprintf(out, "%3s ", "cp");
  if (ps->varies_ep)
    fprintf(out, "%3s ", "ep");
  if (ps->varies_etp)
    fprintf(out, "%3s ", "etp");
  fprintf(out, "%4s %-9s %4s %10s %10s %12s ", "zero", "ckpt", "mb", "peak",
          "step", "tokens/s");
  if (prices == PRICE_COLUMNS)
    fprintf(out, "%10s %12s ", "$/step", "$/1e9 tok");
  else
    fprintf(out, "%10s ", "GPU-h/step");
  fprintf(out, "%10s  ", "h/1e9 tok");
  last_columns(out, "pipeline", types == GPU_TYPE_COLUMN ? "gpu" : NULL);
}

/* Confirmations run ahead of the order that keeps them: candidates
 * re-simulated with every micro-batch (no extrapolation), so that what
 * plan prints is what `vsim run` would report, several at once on the
 * plan's threads. A copy waits here until the order of confirmation
 * (confirmed) comes to its candidate, which keeps it; every simulation
 * is deterministic, so the answers are those of confirming one by one. */
typedef struct ahead {
  vs_candidate *done;   /* [n] the confirmed copies */
  size_t *idx;          /* [n] whose (SIZE_MAX once kept) */
  size_t n, cap;
} ahead;

static void ahead_fini(ahead *a)
{
  free(a->done);
  free(a->idx);
}

/* Confirms the extrapolated ones of candidates idx[0 .. n) into a (what
 * it held before is dropped), at once on ps's threads. VS_ENOMEM when the
 * host runs out. */
static int confirm_ahead(const plan_state *ps, ahead *a, const size_t *idx,
                         size_t n)
{
  vs_explore full = ps->ex;
  vs_error err;
  a->n = 0;
  if (n > a->cap) {
    vs_candidate *done = realloc(a->done, n * sizeof *done);
    size_t *at = done ? realloc(a->idx, n * sizeof *at) : NULL;
    if (done)
      a->done = done;
    if (!at)
      return VS_ENOMEM;
    a->idx = at;
    a->cap = n;
  }
  for (size_t k = 0; k < n; k++) {
    if (idx[k] == SIZE_MAX || !ps->cands[idx[k]].extrapolated)
      continue;
    a->done[a->n] = ps->cands[idx[k]];
    a->done[a->n].extrapolated = false;
    a->idx[a->n++] = idx[k];
  }
  if (a->n == 0)
    return 0;
  full.max_microbatches = 0;
  full.progress = false;
  vs_error_clear(&err);
  return vs_explore_all(&full, a->done, a->n, &err) ? VS_ENOMEM : 0;
}

/* Gives candidate i its copy confirmed ahead in a, if a holds one. */
static bool take_ahead(plan_state *ps, ahead *a, size_t i)
{
  for (size_t k = 0; k < a->n; k++)
    if (a->idx[k] == i) {
      a->idx[k] = SIZE_MAX;
      ps->cands[i] = a->done[k];
      return true;
    }
  return false;
}

/* Confirms candidate i: keeps its copy confirmed ahead (a) if there is
 * one, else confirms it now, alone (confirm_ahead into a store of its
 * own, so that a's copies wait on); one that was not extrapolated is kept
 * as it is. VS_ENOMEM when the host runs out. */
static int confirm(plan_state *ps, ahead *a, size_t i)
{
  ahead alone = {NULL, NULL, 0, 0};
  int rc;
  if (take_ahead(ps, a, i))
    return 0;
  if ((rc = confirm_ahead(ps, &alone, &i, 1)) == 0)
    take_ahead(ps, &alone, i);
  ahead_fini(&alone);
  return rc;
}

/* plan.csv's schedule, virtual stages and pp_layers (empty when even). */
static void plan_csv_pipeline(vs_csv *c, const plan_state *ps,
                              const layout_choice *lc)
{
  char split[VS_EXPLORE_SET_MAX] = "";
  vs_csv_text(c, vs_schedule_name(schedule_of(lc)));
  vs_csv_u64(c, (uint64_t)virtual_stages_of(lc));
  if (lc->uneven && !split_text(ps, lc->pp, split, sizeof split))
    split[0] = '\0';
  vs_csv_text(c, split);
}

/* plan.csv's rows of one GPU type. */
static void plan_csv_rows(vs_csv *c, const plan_state *ps)
{
  for (size_t i = 0; i < ps->n; i++) {
    const layout_choice *lc = &ps->choices[i];
    const vs_candidate *cand = &ps->cands[i];
    double tokens = ps->tokens_per_step;
    vs_csv_text(c, ps->gpu);
    vs_csv_u64(c, lc->gpus);
    vs_csv_u64(c, lc->dp);
    vs_csv_u64(c, lc->tp);
    vs_csv_u64(c, lc->pp);
    vs_csv_u64(c, lc->cp);
    vs_csv_u64(c, lc->ep);
    vs_csv_u64(c, lc->etp);
    vs_csv_u64(c, lc->zero);
    vs_csv_text(c, vs_checkpointing_name(lc->ckpt));
    vs_csv_u64(c, lc->mb);
    vs_csv_text(c, sequence_parallel_of(lc) ? "true" : "false");
    plan_csv_pipeline(c, ps, lc);
    vs_csv_text(c, vs_offload_name(offload_optimizer(lc)));
    vs_csv_text(c, vs_offload_name(offload_params(lc)));
    vs_cap_summary_or_empty(c, cand);
    vs_cap_tail_columns(c, cand);
    vs_cap_price_cell(c, cand,
                      vs_cost_per_tokens(cand->usd_per_step, tokens, 1e9));
    vs_cap_derived_cell(c, cand, hours_per_1e9_tokens(ps, cand));
    vs_csv_text(c, cand->extrapolated ? "true" : "false");
    vs_csv_row(c);
  }
}

/* plan.csv: the layouts of the n_types GPU types, one after the other. */
static int write_plan_csv(const char *path, const plan_state *types,
                          size_t n_types, vs_error *err)
{
  vs_csv c;
  int rc = vs_csv_open(&c, path, err);
  if (rc)
    return rc;
  vs_csv_fields(&c, "gpu,gpus,parallel.dp,parallel.tp,parallel.pp,"
                    "parallel.cp,parallel.ep,parallel.etp,parallel.zero,training.checkpointing,training.micro_batch,"
                    "parallel.sequence_parallel,parallel.schedule,"
                    "parallel.virtual_stages,parallel.pp_layers,"
                    "parallel.offload_optimizer,parallel.offload_params");
  vs_summary_csv_header(&c);
  vs_cap_tail_header(&c);
  vs_csv_header(&c, "usd_per_1e9_tokens,hours_per_1e9_tokens,extrapolated");
  for (size_t t = 0; t < n_types; t++)
    plan_csv_rows(&c, &types[t]);
  return vs_csv_commit(&c, err);
}

/* Resolves the job for what plan keeps fixed: on the workload's own GPU
 * count (each layout replaces its layout, so --gpus is not its), or,
 * where that fails, on the most GPUs plan tries, for a workload whose dp
 * follows the GPU count (FSDP2 needs dp > 1; a step of more micro-batches
 * than vsim simulates at dp = 1 may have fewer on more replicas). The
 * first failure is the one reported. Exit status. */
static int plan_base(const plan_state *ps, vs_workload *wl, vs_topology *topo,
                     FILE *errs)
{
  vs_error err, again;
  vs_error_clear(&err);
  if (vs_explore_load(&ps->ex, NULL, 0, 0, topo, wl, &err) == 0)
    return VS_EXIT_OK;
  vs_error_clear(&again);
  if (ps->max_gpus > 1 &&
      vs_explore_load(&ps->ex, NULL, 0, ps->max_gpus, topo, wl, &again) == 0)
    return VS_EXIT_OK;
  fprintf(errs, "vsim: %s\n", err.msg);
  return err.code == VS_EUSAGE ? VS_EXIT_USAGE : VS_EXIT_ERROR;
}

/* Resolves the job (plan_base) and checks what plan needs of it: a global
 * batch to keep fixed, and a --csv that is not an input. Exit status. */
static int plan_inputs(const vs_capacity_opts *o, const plan_state *ps,
                       vs_workload *wl, vs_topology *topo, FILE *errs)
{
  int code;
  if ((code = plan_base(ps, wl, topo, errs)) != VS_EXIT_OK)
    return code;
  if (!vs_conf_is_set(vs_workload_keys(), &wl->origins, "training",
                      "global_batch")) {
    fprintf(errs, "vsim: %s: plan keeps the global batch fixed: set [training] "
                  "global_batch (sequences per optimizer step), e.g. --set "
                  "training.global_batch=1024\n",
            wl->origins.file);
    return VS_EXIT_ERROR;
  }
  if (o->csv && vs_split_root()) { /* only rank 0 of an MPI job writes */
    char hf[VS_OUTPUTS_PATH_LEN];
    vs_workload_hf_config_path(wl, hf, sizeof hf);
    return vs_outputs_check_not_input(errs, "--csv", o->csv, ps->ex.workload,
                                      ps->ex.topology, hf);
  }
  return VS_EXIT_OK;
}

/* Whether plan varies the context-parallel size: the workload uses it,
 * or its sequence is long (PLAN_CP_FROM_SEQ) and nothing else in it stops
 * context parallelism. */
static bool plan_varies_cp(const vs_workload *wl)
{
  return (wl->parallel.cp > 1 || wl->model.seq_len >= PLAN_CP_FROM_SEQ) &&
         vs_workload_cp_settings_misfit(&wl->training, wl->parallel.order) ==
             VS_CP_FITS;
}

/* Whether plan varies the expert-parallel size: the model has experts,
 * the framework runs expert parallelism, and the workload offloads no
 * activations (plan keeps that choice; vs_workload_experts_apart_allowed). */
static bool plan_varies_ep(const vs_workload *wl)
{
  return wl->model.experts > 1 &&
         vs_workload_experts_apart_allowed(offloads_activations(wl)) &&
         vs_workload_framework_runs_ep(wl->training.framework, VS_ETP_AS_TP);
}

/* Enumerates the layouts (of the pass ps is in: without offload, or with),
 * appends them, simulates the new ones (timed), and lists the ones that fit
 * in ps->order by cost. Exit status. */
static int plan_simulate(const vs_workload *wl, const vs_topology *topo,
                         plan_state *ps, FILE *errs)
{
  struct timespec t0, t1;
  vs_error err;
  size_t from = ps->n;
  ranked *order;
  int rc;

  vs_error_clear(&err);
  ps->priced = topo->usd_per_gpu_hour > 0;
  ps->layers = wl->model.layers;
  ps->varies_cp = plan_varies_cp(wl);
  ps->varies_ep = plan_varies_ep(wl);
  ps->varies_etp = plan_varies_etp(wl) && ps->max_gpus > 1; /* tp > 1 */
  ps->cp_comm = wl->parallel.cp_comm;
  ps->p2p = wl->parallel.p2p;
  ps->p2p_scatter_gather = wl->parallel.p2p_scatter_gather;
  ps->overlap_grad_reduce = wl->parallel.overlap_grad_reduce;
  ps->ckpt_choice = wl->training.checkpoint_layers ||
                    wl->training.checkpoint_every;
  ps->coordinator_limits =
      wl->parallel.max_live_parameters || wl->parallel.max_reuse_distance;
  ps->pageable = !wl->parallel.offload_pin_memory;
  ps->tokens_per_step =
      (double)(wl->training.global_batch * wl->model.seq_len);
  if ((rc = enumerate(wl, topo, ps))) {
    fprintf(errs, "vsim: %s\n",
            rc == VS_ENOMEM ? "out of host memory for the layouts"
                            : "a layout sets more keys than a candidate "
                              "holds (VS_EXPLORE_MAX_SETS)");
    return VS_EXIT_ERROR;
  }
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (vs_split_explore(&ps->ex, ps->cands + from, ps->n - from, &err)) {
    fprintf(errs, "vsim: %s\n", err.msg);
    return VS_EXIT_ERROR;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ps->seconds += (double)(t1.tv_sec - t0.tv_sec) +
                 (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  order = realloc(ps->order, (ps->n ? ps->n : 1) * sizeof *order);
  if (!order) {
    fprintf(errs, "vsim: out of host memory ranking %zu layouts\n", ps->n);
    return VS_EXIT_ERROR;
  }
  ps->order = order;
  for (size_t i = from; i < ps->n; i++) {
    if (ps->cands[i].status != VS_EVAL_FITS)
      continue;
    ps->order[ps->n_fit++] =
        (ranked){step_cost(&ps->cands[i]), ps->cands[i].step_time_s, 0, i};
  }
  return VS_EXIT_OK;
}

/* Whether plan goes on to the offload layouts (*want): none of the first
 * pass fit, and some ran out of memory rather than being invalid; rank 0
 * decides for all (the others hold only their share of the outcomes).
 * Exit status. */
static int plan_wants_offload(const plan_state *ps, bool *want, FILE *errs)
{
  vs_error err;
  bool ran_out = false;
  for (size_t i = 0; i < ps->n; i++)
    ran_out = ran_out || ps->cands[i].status == VS_EVAL_OOM ||
              ps->cands[i].status == VS_EVAL_TIGHT;
  *want = ps->n_fit == 0 && ran_out;
  vs_error_clear(&err);
  if (vs_split_agree(want, &err) == 0)
    return VS_EXIT_OK;
  fprintf(errs, "vsim: %s\n", err.msg);
  return VS_EXIT_ERROR;
}

/* The offload pass: the same layouts with the optimizer (ZeRO-1/2/3) and
 * the parameters (ZeRO-3) in host memory, appended to the first pass's.
 * The layout rules the first pass counted are not counted twice. */
static int plan_offload_pass(const vs_workload *wl, const vs_topology *topo,
                        plan_state *ps, FILE *errs)
{
  uint64_t pruned[PRUNE_N];
  int code;
  memcpy(pruned, ps->pruned, sizeof pruned);
  ps->n_plain = ps->n;
  ps->offload_pass = true;
  ps->nvme = topo->nvme_capacity_bytes > 0;
  code = plan_simulate(wl, topo, ps, errs);
  pruned[PRUNE_OFFLOAD] = ps->pruned[PRUNE_OFFLOAD];
  memcpy(ps->pruned, pruned, sizeof pruned);
  return code;
}

/* "up to" --max-gpus, or "exactly" --gpus. */
static const char *gpus_bound(const plan_state *ps)
{
  return ps->exact ? "exactly" : "up to";
}

/* What was asked, what was simulated, and what was left out. */
static void plan_intro(FILE *out, const vs_workload *wl, const vs_topology *topo,
                       const plan_state *ps)
{
  double seconds = ps->seconds;
  char host[16];
  vs_format_bytes(topo->host_memory_bytes, host, sizeof host);
  fprintf(out, "plan for %s on %s %llu x %s (%s); global batch %llu x %llu "
               "tokens\n",
          wl->origins.file, gpus_bound(ps), (unsigned long long)ps->max_gpus, topo->name,
          topo->origins.file, (unsigned long long)wl->training.global_batch,
          (unsigned long long)wl->model.seq_len);
  size_t fit = 0, tight = 0, invalid = 0; /* as plan.csv says, confirmed */
  for (size_t i = 0; i < ps->n; i++) {
    fit += ps->cands[i].status == VS_EVAL_FITS;
    tight += ps->cands[i].status == VS_EVAL_TIGHT;
    invalid += ps->cands[i].status == VS_EVAL_INVALID;
  }
  invalid -= ps->n_refused; /* simulated, their confirmation refused */
  fprintf(out,
          "%zu layouts simulated in %.2f s (%.0f layouts/s on %u "
          "thread(s)); %zu fit",
          ps->n - invalid, seconds,
          (double)(ps->n - invalid) / (seconds > 0 ? seconds : 1e-9),
          ps->ex.jobs ? ps->ex.jobs : 1, fit);
  if (tight)
    fprintf(out, " with [runtime] reserve free (%zu more without it)",
            tight);
  if (invalid)
    fprintf(out, "; %zu invalid, not simulated (--csv gives each one's "
                 "reason)",
            invalid);
  fprintf(out, "; left out before simulating (each rule counts the "
               "choices it decides: of GPUs, tp, cp and pp; then of ZeRO, "
               "expert sizes and offload; then of checkpointing, "
               "micro-batch and schedule):\n");
  for (int r = 0; r < PRUNE_N; r++)
    if (ps->pruned[r])
      fprintf(out, "  %llu %s\n", (unsigned long long)ps->pruned[r],
              prune_reasons[r]);
  if (ps->offload_pass && ps->n == ps->n_plain)
    fprintf(out,
            "nothing fits without offload (%zu layouts), and the job "
            "allows no offload layout (the reasons above)\n",
            ps->n_plain);
  else if (ps->offload_pass)
    fprintf(out,
            "nothing fits without offload (%zu layouts), so plan also "
            "tried the optimizer (ZeRO-1/2/3) and the parameters "
            "(ZeRO-3) in host memory%s (%zu layouts, [node] host_memory "
            "%s a node)\n",
            ps->n_plain,
            ps->nvme ? ", and the optimizer on NVMe with the parameters "
                       "in host memory (ZeRO-3)"
                     : "",
            ps->n - ps->n_plain, host);
}

/* The verdict when no layout fits, with the one that came closest (the
 * smallest share of its capacity among those that ran out). VS_EXIT_OOM. */
static int plan_no_fit(FILE *out, const plan_state *ps)
{
  size_t closest = 0;
  bool any = false;
  for (size_t i = 0; i < ps->n; i++) {
    const vs_candidate *c = &ps->cands[i];
    if (c->status != VS_EVAL_OOM && c->status != VS_EVAL_TIGHT)
      continue;
    if (!any || c->need_ratio < ps->cands[closest].need_ratio)
      closest = i;
    any = true;
  }
  fprintf(out, "verdict: DOES NOT FIT on any layout of %s %llu %s%sGPUs",
          gpus_bound(ps), (unsigned long long)ps->max_gpus,
          ps->type ? ps->type : "", ps->type ? " " : "");
  if (any) {
    const layout_choice *lc = &ps->choices[closest];
    char cp[32] = "", ep[48] = "", pipeline[VS_EXPLORE_SET_MAX];
    pipeline_text(ps, lc, pipeline, sizeof pipeline);
    if (ps->varies_cp)
      snprintf(cp, sizeof cp, ", cp %llu", (unsigned long long)lc->cp);
    if (ps->varies_ep)
      snprintf(ep, sizeof ep, ", ep %llu", (unsigned long long)lc->ep);
    if (ps->varies_etp)
      snprintf(ep + strlen(ep), sizeof ep - strlen(ep), ", etp %llu",
               (unsigned long long)lc->etp);
    fprintf(out,
            "; the closest, %llu GPU%s (dp %llu, tp %llu%s, pp %llu%s, "
            "ZeRO-%llu, micro-batch %llu, %s): %s",
            (unsigned long long)lc->gpus, lc->gpus == 1 ? "" : "s",
            (unsigned long long)lc->dp, (unsigned long long)lc->tp, cp,
            (unsigned long long)lc->pp, ep, (unsigned long long)lc->zero,
            (unsigned long long)lc->mb, pipeline, ps->cands[closest].reason);
  }
  fprintf(out, "\n%s%s or shrink the job (micro-batch, sequence, "
               "checkpointing)\n",
          ps->exact ? "raise --gpus" : "raise --max-gpus",
          any && ps->cands[closest].status == VS_EVAL_TIGHT
              ? ", lower [runtime] reserve"
              : "");
  return VS_EXIT_OOM;
}

/* Confirms candidate idx (confirm): true when it still fits. One that
 * no longer does (its full simulation ran out of memory or over the work
 * budget where the extrapolated one did not) is counted and its new
 * status kept, so it is never printed as an answer. *rc: VS_ENOMEM when
 * the host runs out. */
static bool confirmed(plan_state *ps, ahead *a, size_t idx, int *rc)
{
  if (confirm(ps, a, idx)) {
    *rc = VS_ENOMEM;
    return false;
  }
  if (ps->cands[idx].status == VS_EVAL_FITS)
    return true;
  ps->n_unconfirmed++;
  ps->n_refused += ps->cands[idx].status == VS_EVAL_INVALID;
  return false;
}

/* Keeps at the front of ps->order the first ps->top layouts that the full
 * simulation confirms, in order of cost; ps->top becomes their count.
 * While k more are needed, the next k (up to a thread each) are
 * confirmed ahead: one by one, each of them would be tried too. */
static int confirm_top(plan_state *ps, ahead *a)
{
  size_t kept = 0, k = 0, next[256];
  size_t jobs = ps->ex.jobs ? ps->ex.jobs : 1; /* as vs_explore_all */
  int rc = 0;
  while (k < ps->n_fit && kept < ps->top && !rc) {
    size_t n = ps->top - kept;
    if (n > ps->n_fit - k)
      n = ps->n_fit - k;
    if (n > jobs)
      n = jobs;
    if (n > sizeof next / sizeof next[0])
      n = sizeof next / sizeof next[0];
    for (size_t j = 0; j < n; j++)
      next[j] = ps->order[k + j].idx;
    if ((rc = confirm_ahead(ps, a, next, n)) != 0)
      break;
    for (size_t j = 0; j < n && !rc; j++, k++)
      if (confirmed(ps, a, ps->order[k].idx, &rc))
        ps->order[kept++] = ps->order[k];
  }
  ps->top = kept;
  return rc;
}

/* Which best layout plan answers with besides the cheapest. */
typedef enum best_by { FASTEST, FEWEST_GPUS } best_by;

/* Among the layouts still fitting, the best by `by`; SIZE_MAX when none
 * is left. */
static size_t best_fitting(const plan_state *ps, best_by by)
{
  bool by_gpus = by == FEWEST_GPUS;
  size_t best = SIZE_MAX;
  for (size_t k = 0; k < ps->n_fit; k++) {
    size_t i = ps->order[k].idx;
    const vs_candidate *c = &ps->cands[i];
    if (c->status != VS_EVAL_FITS)
      continue;
    if (best == SIZE_MAX ||
        (by_gpus ? c->total_gpus < ps->cands[best].total_gpus
                 : c->step_time_s < ps->cands[best].step_time_s))
      best = i;
  }
  return best;
}

/* best_fitting, confirmed in full; the next is tried when one is not.
 * SIZE_MAX when none is left. */
static size_t confirmed_best(plan_state *ps, ahead *a, best_by by, int *rc)
{
  for (;;) {
    size_t best = best_fitting(ps, by);
    if (best == SIZE_MAX || confirmed(ps, a, best, rc) || *rc)
      return best;
  }
}

/* Picks the top cheapest, the fastest and the smallest fitting layouts,
 * each confirmed with a full simulation (the fastest and the smallest
 * ahead, at once, as the top leaves them), and re-ranks the top on the
 * confirmed costs. ps->top is 0 when no layout survives its confirmation.
 * VS_ENOMEM when the host runs out. */
static int plan_choose(plan_state *ps)
{
  ranked *order = ps->order;
  ahead a = {NULL, NULL, 0, 0};
  size_t best[2];
  int rc;
  qsort(order, ps->n_fit, sizeof *order, by_cost);
  if (ps->top > ps->n_fit)
    ps->top = ps->n_fit;
  if ((rc = confirm_top(ps, &a)) == 0) {
    best[0] = best_fitting(ps, FASTEST);
    best[1] = best_fitting(ps, FEWEST_GPUS);
    if (best[1] == best[0])
      best[1] = SIZE_MAX;
    rc = confirm_ahead(ps, &a, best, 2); /* both are confirmed next */
  }
  if (!rc)
    ps->fastest = confirmed_best(ps, &a, FASTEST, &rc);
  if (!rc)
    ps->smallest = confirmed_best(ps, &a, FEWEST_GPUS, &rc);
  ahead_fini(&a);
  if (rc)
    return rc;
  if (ps->fastest == SIZE_MAX || ps->smallest == SIZE_MAX)
    ps->top = 0; /* nothing fits once confirmed */
  for (size_t k = 0; k < ps->top; k++)
    order[k].cost = step_cost(&ps->cands[order[k].idx]);
  qsort(order, ps->top, sizeof *order, by_cost);
  return 0;
}

/* The three answers: cheapest per step, fastest, fewest GPUs. */
static void plan_answers(FILE *out, const plan_state *ps)
{
  type_column types = ps->type ? GPU_TYPE_COLUMN : ONE_GPU_TYPE;
  fprintf(out, "\ncheapest per step (each re-simulated with every "
               "micro-batch):\n");
  plan_header(out, ps, prices_of(ps), types);
  for (size_t k = 0; k < ps->top; k++)
    print_layout(out, (int)k + 1, ps, ps->order[k].idx, prices_of(ps));
  fprintf(out, "\nfastest:\n");
  plan_header(out, ps, prices_of(ps), types);
  print_layout(out, 1, ps, ps->fastest, prices_of(ps));
  /* offload is searched only where nothing fits without it: say so where
     it was not, as it may fit on fewer (a review: one RTX 4090) */
  fprintf(out, "\nfewest GPUs on which it fits%s: %llu\n",
          ps->offload_pass ? "" : " without optimizer or parameter offload",
          (unsigned long long)ps->cands[ps->smallest].total_gpus);
  plan_header(out, ps, prices_of(ps), types);
  print_layout(out, 1, ps, ps->smallest, prices_of(ps));
  if (ps->n_unconfirmed > ps->n_refused)
    fprintf(out,
            "\n%zu layout(s) that fitted when extrapolated were left out: "
            "their full re-simulation did not fit (plan.csv has why)\n",
            ps->n_unconfirmed - ps->n_refused);
  if (ps->n_refused)
    fprintf(out,
            "\n%zu layout(s) that fitted when extrapolated were left out: "
            "their full re-simulation was refused, over the limits "
            "(plan.csv has why)\n",
            ps->n_refused);
}

/* True when no layout was simulated to a verdict: every one was invalid
 * (or none was left to simulate), so the input is wrong, not the memory
 * short (sweep and fit say the same with exit 1). */
static bool plan_all_invalid(const plan_state *ps)
{
  for (size_t i = 0; i < ps->n; i++)
    if (ps->cands[i].status != VS_EVAL_INVALID)
      return false;
  return true;
}

/* The message and exit status when nothing fits: VS_EXIT_ERROR when no
 * layout could be simulated, else plan_no_fit's verdict. */
static int plan_nothing_fits(FILE *out, FILE *errs, const plan_state *ps)
{
  /* with several GPU types, which one it is */
  const char *on = ps->type ? " on " : "", *gpu = ps->type ? ps->gpu : "";
  if (!plan_all_invalid(ps))
    return plan_no_fit(out, ps);
  if (ps->n == 0)
    fprintf(errs,
            "vsim: every layout of %s %llu GPUs%s%s was left out "
            "before simulating (the reasons above); %s or change the "
            "job\n",
            gpus_bound(ps), (unsigned long long)ps->max_gpus, on, gpu,
            ps->exact ? "change --gpus" : "raise --max-gpus");
  else
    fprintf(errs,
            "vsim: every layout%s%s is invalid, so nothing was "
            "simulated; the first: %s\n",
            on, gpu, ps->cands[0].reason);
  return VS_EXIT_ERROR;
}

/* The cheapest and the fastest layout of one GPU type among several. */
static void plan_type_answers(FILE *out, const plan_state *ps)
{
  fprintf(out, "\ncheapest per step on %s (re-simulated with every "
               "micro-batch):\n", ps->gpu);
  plan_header(out, ps, prices_of(ps), GPU_TYPE_COLUMN);
  print_layout(out, 1, ps, ps->order[0].idx, prices_of(ps));
  fprintf(out, "fastest on %s:\n", ps->gpu);
  plan_header(out, ps, prices_of(ps), GPU_TYPE_COLUMN);
  print_layout(out, 1, ps, ps->fastest, prices_of(ps));
}

/* Everything after the inputs are checked: simulate and report. Exit
 * status of this GPU type alone. */
static int plan_run(const vs_workload *wl, const vs_topology *topo,
                    plan_state *ps, FILE *out, FILE *errs)
{
  int code;
  bool offload;

  if ((code = plan_simulate(wl, topo, ps, errs)) != VS_EXIT_OK ||
      (code = plan_wants_offload(ps, &offload, errs)) != VS_EXIT_OK ||
      (offload && (code = plan_offload_pass(wl, topo, ps, errs)) != VS_EXIT_OK))
    return code;
  if (!vs_split_root())
    return VS_EXIT_OK; /* another MPI rank: only its share was simulated;
                          rank 0 confirms, reports and writes */
  if (ps->type)
    fprintf(out, "== %s (%s) ==\n", ps->gpu, topo->origins.file);
  if (ps->n_fit > 0 && plan_choose(ps)) {
    fprintf(errs, "vsim: out of host memory\n");
    return VS_EXIT_ERROR;
  }
  plan_intro(out, wl, topo, ps); /* its counts are the confirmed ones */
  if (ps->n_fit == 0 || ps->top == 0)
    return plan_nothing_fits(out, errs, ps);
  if (ps->type)
    plan_type_answers(out, ps);
  else
    plan_answers(out, ps);
  return VS_EXIT_OK;
}

/* Loads one GPU type's job and plans it. Exit status of this type. */
static int plan_type(const vs_capacity_opts *o, plan_state *ps, FILE *out,
                     FILE *errs)
{
  vs_workload *wl = malloc(sizeof *wl);
  vs_topology *topo = malloc(sizeof *topo);
  int code;

  if (!wl || !topo) {
    fprintf(errs, "vsim: out of host memory\n");
    code = VS_EXIT_ERROR;
  } else if ((code = plan_inputs(o, ps, wl, topo, errs)) == VS_EXIT_OK) {
    snprintf(ps->gpu, sizeof ps->gpu, "%s", topo->name);
    ps->loaded = true;
    code = plan_run(wl, topo, ps, out, errs);
  }
  free(wl);
  free(topo);
  return code;
}

/* Records type t's GPU name in names[t]; an error when an earlier type
 * has the same one: the tables and plan.csv tell types apart by it. */
static int check_type_name(const plan_state *types, char (*names)[VS_NAME_MAX],
                           size_t t, const char *name, FILE *errs)
{
  snprintf(names[t], sizeof names[t], "%s", name);
  for (size_t u = 0; u < t; u++)
    if (strcmp(names[u], names[t]) == 0) {
      fprintf(errs,
              "vsim: --topology %s and %s both name their GPU '%s' "
              "([gpu] name): the tables and plan.csv tell GPU types "
              "apart by it; give each type its own name\n",
              types[u].ex.topology, types[t].ex.topology, name);
      return VS_EXIT_ERROR;
    }
  return VS_EXIT_OK;
}

/* Every GPU type's files and what plan needs of them (plan_inputs),
 * before any type is searched: a bad second topology is refused before
 * the first one's results are printed. Exit status. */
static int plan_check_types(const vs_capacity_opts *o, const plan_state *types,
                            size_t n, FILE *errs)
{
  char names[PLAN_TYPES_MAX][VS_NAME_MAX];
  int code = VS_EXIT_OK;
  for (size_t t = 0; t < n && code == VS_EXIT_OK; t++) {
    vs_workload *wl = malloc(sizeof *wl);
    vs_topology *topo = malloc(sizeof *topo);
    if (!wl || !topo) {
      fprintf(errs, "vsim: out of host memory\n");
      code = VS_EXIT_ERROR;
    } else if ((code = plan_inputs(o, &types[t], wl, topo, errs)) ==
               VS_EXIT_OK) {
      code = check_type_name(types, names, t, topo->name, errs);
    }
    free(wl);
    free(topo);
  }
  return code;
}

/* The layouts plan lists: --top's, 5 by default (confirm_top lowers a
 * type's own to those that fit). */
static size_t requested_top(const vs_capacity_opts *o)
{
  return o->top ? o->top : 5;
}

/* Across n GPU types, the top layouts of every type that fit, ranked by
 * cost per step (each type's own price). */
static void plan_overall(FILE *out, const plan_state *types, size_t n,
                         size_t top)
{
  size_t n_all = 0;
  bool priced = true;
  price_columns columns;
  ranked *all;
  for (size_t t = 0; t < n; t++) {
    n_all += types[t].n_fit ? types[t].top : 0;
    priced = priced && types[t].priced;
  }
  if (n_all == 0 || !(all = malloc(n_all * sizeof *all)))
    return;
  n_all = 0;
  for (size_t t = 0; t < n; t++)
    for (size_t k = 0; types[t].n_fit && k < types[t].top; k++) {
      all[n_all] = types[t].order[k];
      all[n_all].type = t;
      /* dollars and GPU-hours do not compare: without a price on every
       * type, every type is ranked by its GPU-hours */
      if (!priced) {
        const vs_candidate *c = &types[t].cands[all[n_all].idx];
        all[n_all].cost = vs_cost_gpu_hours(c->total_gpus, c->step_time_s);
      }
      n_all++;
    }
  columns = priced ? PRICE_COLUMNS : NO_PRICE_COLUMNS;
  qsort(all, n_all, sizeof *all, by_cost);
  fprintf(out, "\ncheapest per step across the %zu GPU types%s:\n", n,
          priced ? ""
                 : " (not every type has a price: all ranked by GPU-hours)");
  /* every type varies cp and ep alike (they follow from the workload) */
  plan_header(out, &types[all[0].type], columns, GPU_TYPE_COLUMN);
  for (size_t k = 0; k < n_all && k < top; k++)
    print_layout(out, (int)k + 1, &types[all[k].type], all[k].idx, columns);
  free(all);
}

/* The exit status of several GPU types: 0 when one fits, else 3 when one
 * ran out of memory, else the first type's. */
static int plan_code(const int *codes, size_t n)
{
  for (size_t t = 0; t < n; t++)
    if (codes[t] == VS_EXIT_OK)
      return VS_EXIT_OK;
  for (size_t t = 0; t < n; t++)
    if (codes[t] == VS_EXIT_OOM)
      return VS_EXIT_OOM;
  return codes[0];
}

/* Whether paths a and b name one file, however spelled. */
static bool same_file(const char *a, const char *b)
{
  char x[VS_OUTPUTS_PATH_LEN], y[VS_OUTPUTS_PATH_LEN];
  vs_outputs_file_key(a, x, sizeof x);
  vs_outputs_file_key(b, y, sizeof y);
  return strcmp(x, y) == 0;
}

/* Splits --topology's comma list into files[PLAN_TYPES_MAX] (pointers into
 * buf); NULL alone for the built-in. The count, or 0 after a message. */
static size_t plan_topologies(const char *list, char *buf, size_t len,
                              const char **files, FILE *errs)
{
  size_t n = 0;
  if (!list) {
    files[0] = NULL;
    return 1;
  }
  if (strlen(list) >= len) {
    fprintf(errs, "vsim: --topology list too long\n");
    return 0;
  }
  strcpy(buf, list);
  for (char *p = buf, *comma; p; p = comma ? comma + 1 : NULL) {
    if ((comma = strchr(p, ',')))
      *comma = '\0';
    if (*p == '\0' || n == PLAN_TYPES_MAX) {
      fprintf(errs, "vsim: --topology takes one file or a comma list of at "
                    "most %d files, got '%s'\n", PLAN_TYPES_MAX, list);
      return 0;
    }
    for (size_t i = 0; i < n; i++)
      if (same_file(files[i], p)) {
        bool respelled = strcmp(files[i], p) != 0;
        fprintf(errs, "vsim: --topology lists %s twice%s%s%s: each GPU "
                      "type once\n", p, respelled ? " (as " : "",
                respelled ? files[i] : "", respelled ? ")" : "");
        return 0;
      }
    files[n++] = p;
  }
  return n;
}

/* Plans each GPU type; with several, the ranking across them. The CSV
 * holds them all. */
static int plan_types(const vs_capacity_opts *o, plan_state *types, size_t n,
                      FILE *out, FILE *errs)
{
  int codes[PLAN_TYPES_MAX];
  vs_error err;
  int code;

  vs_error_clear(&err);
  if ((code = plan_check_types(o, types, n, errs)) != VS_EXIT_OK)
    return code; /* bad input: nothing planned, nothing written */
  for (size_t t = 0; t < n; t++) {
    if (t > 0)
      fprintf(out, "\n");
    codes[t] = plan_type(o, &types[t], out, errs);
    if (!types[t].loaded)
      return codes[t];
  }
  if (!vs_split_root())
    return VS_EXIT_OK; /* another MPI rank: rank 0 ranks and writes */
  code = plan_code(codes, n);
  if (n > 1 && code == VS_EXIT_OK)
    plan_overall(out, types, n, requested_top(o));
  if (code == VS_EXIT_ERROR)
    return code; /* nothing could be simulated: nothing is written */
  if (o->csv && write_plan_csv(o->csv, types, n, &err)) {
    fprintf(errs, "vsim: --csv %s\n", err.msg);
    code = VS_EXIT_ERROR;
  }
  return code;
}

int vs_capacity_plan(const vs_capacity_opts *o, FILE *out, FILE *errs)
{
  char buf[4096];
  const char *files[PLAN_TYPES_MAX];
  size_t n = plan_topologies(o->ex.topology, buf, sizeof buf, files, errs);
  plan_state *types = calloc(n ? n : 1, sizeof *types);
  int code;

  if (n == 0 || !types) {
    free(types);
    return n == 0 ? VS_EXIT_USAGE : VS_EXIT_ERROR;
  }
  for (size_t t = 0; t < n; t++) {
    plan_state *ps = &types[t];
    ps->ex = o->ex;
    ps->ex.topology = files[t];
    ps->type = n > 1 ? ps->gpu : NULL;
    ps->top = requested_top(o);
    ps->exact = o->gpus > 0;
    ps->max_gpus = o->gpus ? o->gpus : (o->max_gpus ? o->max_gpus : 512);
  }
  code = plan_types(o, types, n, out, errs);
  for (size_t t = 0; t < n; t++) {
    free(types[t].order);
    free(types[t].choices);
    free(types[t].cands);
  }
  free(types);
  return code;
}
