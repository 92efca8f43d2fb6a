/* schedule_test.c - stage programs built from small workloads: structural
 * invariants (schedule.h), which collectives appear where for each data- and
 * tensor-parallel setting, ZeRO-3 gathers, recompute ops, op times (roofline,
 * optimizer step, tied-embedding all-reduce).
 *
 * The base model is a 4-layer GPT, hidden 256, 4 heads, seq 128, vocab 1000,
 * bf16 (2-byte params and grads), tied embeddings, dropout 0.1: small enough
 * that every program builds and runs in milliseconds. Its parameters:
 *   layer  = qkv 256*768 + 768, attn_out 256*256 + 256, two LayerNorms 4*256,
 *            mlp_up 256*1024 + 1024, mlp_down 1024*256 + 256  = 789760
 *   embed  = word 1000*256 + position 128*256                = 288768
 *   head   = final LayerNorm 2*256 (output layer tied)        = 512
 *   total  = 288768 + 4*789760 + 512                          = 3448320 */
#include "testutil.h"

#include "cost.h"
#include "engine.h"
#include "layout.h"
#include "memory.h"
#include "model.h"
#include "schedule.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYERS 4
#define LAYER_PARAMS 789760ull
#define EMBED_PARAMS 288768ull
#define HEAD_PARAMS 512ull
#define ANY INT_MIN

static const char gpt_small[] =
    "[model]\narch = gpt\nlayers = 4\nhidden = 256\nheads = 4\n"
    "vocab = 1000\nseq_len = 128\n";

/* Everything a program is built from, and the program. */
typedef struct built {
  vs_workload wl;
  vs_topology topo;
  vs_model m;
  vs_recipe r;
  vs_layout lay;
  uint64_t stage;   /* the pipeline stage the program is for */
  vs_program p;
} built;

/* The program of pipeline stage `stage` of the model in ini with sets on
 * gpus GPUs. */
static built *build_model_stage(const char *ini, const char *const *sets,
                                size_t n_sets, uint64_t gpus, uint64_t stage)
{
  built *b = calloc(1, sizeof *b);
  vs_error err;
  assert_non_null(b);
  vs_error_clear(&err);
  tu_build_job(ini, sets, n_sets, gpus, &b->wl, &b->topo, &b->m, &b->r,
               &b->lay);
  {
    vs_job job = {.wl = &b->wl, .topo = &b->topo, .model = &b->m,
                  .recipe = &b->r, .layout = &b->lay};
    b->stage = stage;
    if (vs_schedule_build(&job, (int)stage, &b->p, &err))
      fail_msg("schedule: %s", err.msg);
  }
  return b;
}

/* ... of gpt_small. */
static built *build_stage(const char *const *sets, size_t n_sets,
                          uint64_t gpus, uint64_t stage)
{
  return build_model_stage(gpt_small, sets, n_sets, gpus, stage);
}

static built *build(const char *const *sets, size_t n_sets, uint64_t gpus)
{
  return build_stage(sets, n_sets, gpus, 0);
}

static void destroy(built *b)
{
  vs_program_fini(&b->p);
  vs_recipe_fini(&b->r);
  vs_model_fini(&b->m);
  free(b);
}

/* Ops named name (on layer / micro-batch, or ANY). */
static size_t count_ops(const vs_program *p, const char *name, int layer,
                        int mb)
{
  size_t n = 0;
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (strcmp(vs_op_name(p, op), name) == 0 && (layer == ANY || vs_op_layer(p, op) == layer) &&
        (mb == ANY || op->microbatch == mb))
      n++;
  }
  return n;
}

/* Sum of bytes of the ops named name in micro-batch mb (or ANY). */
static double sum_bytes(const vs_program *p, const char *name, int mb)
{
  double sum = 0;
  for (size_t i = 0; i < p->n_ops; i++)
    if (strcmp(vs_op_name(p, &p->ops[i]), name) == 0 &&
        (mb == ANY || p->ops[i].microbatch == mb))
      sum += vs_op_kind_of(p, &p->ops[i])->bytes;
  return sum;
}

/* The op that allocates buf, and the one that frees it (UINT32_MAX if
 * none). */
static void buffer_ops(const vs_program *p, uint32_t buf, uint32_t *alloc_op,
                       uint32_t *free_op)
{
  *alloc_op = *free_op = UINT32_MAX;
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    for (uint32_t k = op->first_effect; k < vs_op_effects_end(p, op);
         k++) {
      const vs_effect *e = &p->effects[k];
      if (e->buffer == buf)
        *(e->is_free ? free_op : alloc_op) = i;
    }
  }
}

/* Whether op waits for op `dep` directly. */
static bool waits_for(const vs_program *p, uint32_t op, uint32_t dep)
{
  for (uint32_t d = p->ops[op].first_dep; d < vs_op_deps_end(p, &p->ops[op]);
       d++)
    if (p->deps[d] == dep)
      return true;
  return false;
}

/* ------------------------------------------------------------------------
 * Invariants
 * ------------------------------------------------------------------------ */

enum { UNSEEN, LIVE, FREED };

/* Walks the program in op order (each op's start effects, then its end
 * effects) and checks schedule.h's invariants. Returns the buffer states. */
static unsigned char *check_program(const built *b)
{
  const vs_program *p = &b->p;
  unsigned char *st = calloc(p->n_buffers + 1, 1);
  size_t n_deps = 0, n_effects = 0, n_stream = 0;
  assert_non_null(st);
  assert_true(p->n_ops > 0);

  for (uint32_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    /* deps and effects are contiguous, in op order */
    assert_int_equal(op->first_dep, n_deps);
    assert_int_equal(op->first_effect, n_effects);
    assert_true(vs_op_deps_end(p, op) >= op->first_dep);
    assert_true(vs_op_effects_end(p, op) >= op->first_effect);
    n_deps = vs_op_deps_end(p, op);
    n_effects = vs_op_effects_end(p, op);
    for (uint32_t d = op->first_dep; d < n_deps; d++)
      if (p->deps[d] >= i)
        fail_msg("op %u (%s) depends on later op %u", i, vs_op_name(p, op),
                 p->deps[d]);
    assert_true(op->stream < VS_STREAM_N);
    for (int pass = 0; pass < 2; pass++) {
      for (uint32_t k = op->first_effect; k < n_effects; k++) {
        const vs_effect *e = &p->effects[k];
        if (e->at_end != pass)
          continue;
        assert_true(e->buffer < p->n_buffers);
        if (!e->is_free && st[e->buffer] != UNSEEN)
          fail_msg("buffer %u allocated twice (op %u %s)", e->buffer, i,
                   vs_op_name(p, op));
        if (e->is_free && st[e->buffer] != LIVE)
          fail_msg("buffer %u freed while %s (op %u %s)", e->buffer,
                   st[e->buffer] == UNSEEN ? "unallocated" : "already freed",
                   i, vs_op_name(p, op));
        st[e->buffer] = e->is_free ? FREED : LIVE;
      }
    }
  }
  assert_int_equal(n_deps, p->n_deps);
  assert_int_equal(n_effects, p->n_effects);
  for (int s = 0; s < VS_STREAM_N; s++) {
    n_stream += p->n_stream_ops[s];
    for (size_t k = 0; k < p->n_stream_ops[s]; k++) {
      const vs_pop *op = &p->ops[p->stream_ops[s][k]];
      assert_int_equal(op->stream, s);
      /* a stream runs its ops in program order (the engine's ready()
       * relies on it) */
      if (k > 0)
        assert_true(p->stream_ops[s][k] > p->stream_ops[s][k - 1]);
    }
  }
  assert_int_equal(n_stream, p->n_ops);
  /* every buffer was allocated */
  for (size_t i = 0; i < p->n_buffers; i++)
    if (st[i] == UNSEEN)
      fail_msg("buffer %zu never allocated", i);
  return st;
}

/* Op 0 is the setup op; at the end exactly its params / grads / optimizer
 * buffers remain, and those on the GPU hold the stage's resident model
 * states (of the gradients, where the step sets them to None, only the
 * Trainer's DDP buckets). */
static void check_end_state(const built *b, const unsigned char *st)
{
  const vs_program *p = &b->p;
  const vs_pop *setup = &p->ops[0];
  uint64_t kept[VS_CAT_N] = {0};
  assert_int_equal(setup->phase, VS_PHASE_SETUP);
  assert_string_equal(vs_op_name(p, setup), "model_states");
  for (uint32_t buf = 0; buf < p->n_buffers; buf++) {
    uint32_t a, f;
    buffer_ops(p, buf, &a, &f);
    if (st[buf] != LIVE)
      continue;
    if (a != 0)
      fail_msg("buffer %u (%s, %llu B) of op %u (%s layer %d) is never freed",
               buf, vs_category_name(vs_program_buffer(p, buf)->category),
               (unsigned long long)vs_program_buffer(p, buf)->bytes, a, vs_op_name(p, &p->ops[a]),
               vs_op_layer(p, &p->ops[a]));
    if (vs_program_buffer(p, buf)->place == VS_PLACE_GPU) /* not offloaded */
      kept[vs_program_buffer(p, buf)->category] += vs_program_buffer(p, buf)->bytes;
  }
  assert_int_equal(kept[VS_CAT_PARAMS], b->lay.stages[b->stage].params_bytes);
  assert_int_equal(kept[VS_CAT_GRADS],
                   b->r.grads_set_to_none || b->r.reduced_grads_set_to_none
                       ? b->lay.stages[b->stage].ddp_bucket_bytes
                       : b->lay.stages[b->stage].grads_bytes);
  assert_int_equal(kept[VS_CAT_OPTIMIZER],
                   b->lay.stages[b->stage].optimizer_bytes);
  assert_int_equal(kept[VS_CAT_ACTIVATIONS], 0);
  /* of temp, only the cuBLAS workspaces (held from the first step on) */
  assert_int_equal(kept[VS_CAT_TEMP], vs_layout_blas_bytes(&b->lay));
}

/* check_program and check_end_state of b. */
static void check_whole(const built *b)
{
  unsigned char *st = check_program(b);
  check_end_state(b, st);
  free(st);
}

/* The bytes setup allocates of each category, and how many buffers. */
static void setup_allocations(const vs_program *p, uint64_t bytes[VS_CAT_N],
                              uint32_t count[VS_CAT_N])
{
  const vs_pop *setup = &p->ops[0];
  memset(bytes, 0, VS_CAT_N * sizeof *bytes);
  memset(count, 0, VS_CAT_N * sizeof *count);
  for (uint32_t e = setup->first_effect; e < vs_op_effects_end(p, setup);
       e++) {
    const vs_buffer *buf = vs_program_buffer(p, p->effects[e].buffer);
    assert_false(p->effects[e].is_free);
    assert_false(p->effects[e].at_end);
    bytes[buf->category] += buf->bytes;
    count[buf->category]++;
  }
}

/* When op ran on r (spans are recorded, one per op). */
static const vs_op_span *span_of(const vs_rank *r, uint32_t op)
{
  for (size_t i = 0; i < r->n_spans; i++)
    if (r->spans[i].op == op)
      return &r->spans[i];
  fail_msg("op %u has no span", op);
  return NULL;
}

/* Runs the program on one rank with invariant checks and spans. */
static void run_engine(const built *b, vs_rank *r)
{
  vs_engine_opts opts = {.record_spans = true, .check_invariants = true};
  vs_engine_stats stats;
  vs_error err;
  vs_rank_init(r, 0, &b->p, b->topo.memory_bytes, b->lay.framework_bytes);
  vs_error_clear(&err);
  if (vs_engine_run(r, 1, &opts, &stats, &err))
    fail_msg("engine: %s", err.msg);
  assert_int_equal(stats.events, b->p.n_ops);
  /* after the step only the resident model states and the cuBLAS
   * workspaces are allocated */
  assert_int_equal(r->mem.allocated_bytes, vs_layout_model_states(&b->lay) +
                                               vs_layout_blas_bytes(&b->lay));
}

static void test_invariants(void **state)
{
  static const char *const configs[][4] = {
      {"training.checkpointing=none", NULL},
      {"training.checkpointing=full", "training.global_batch=2", NULL},
      {"training.checkpointing=selective", "training.attention=eager", NULL},
      {"training.checkpointing=selective", "training.attention=flash", NULL},
      {"parallel.zero=0", "training.global_batch=4", "parallel.bucket=1MiB", NULL},
      {"parallel.zero=1", "training.global_batch=4", NULL},
      {"parallel.zero=2", "training.global_batch=4", "parallel.bucket=1MiB", NULL},
      {"parallel.zero=3", "training.global_batch=4", NULL},
      {"parallel.zero=3", "training.checkpointing=full", NULL},
      {"parallel.zero=3", "training.checkpointing=selective",
       "training.attention=eager", NULL},
      {"parallel.tp=2", NULL},
      {"parallel.tp=2", "parallel.sequence_parallel=true",
       "training.checkpointing=full", NULL},
      {"model.arch=llama", "model.ffn_hidden=688", "model.kv_heads=2", NULL},
      {"model.arch=bert", "training.checkpointing=selective",
       "training.attention=eager", NULL},
      {"training.precision=fp32", "training.optimizer=sgd", NULL},
      {"training.grad_dtype=fp32", "parallel.zero=2", "parallel.bucket=1MiB",
       NULL},
      {"parallel.tp=2", "parallel.sequence_parallel=true", "parallel.zero=3",
       NULL},
  };
  /* gpus: 1 for single-GPU configs, 2 for dp=2 or tp=2, 4 for tp=2 x dp=2 */
  static const uint64_t gpus[] = {1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                  1, 1, 1, 2, 4};
  (void)state;
  for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
    size_t n = 0;
    built *b;
    unsigned char *st;
    vs_rank r;
    while (n < 4 && configs[c][n])
      n++;
    b = build(configs[c], n, gpus[c]);
    st = check_program(b);
    check_end_state(b, st);
    run_engine(b, &r);
    vs_rank_fini(&r);
    free(st);
    destroy(b);
  }
}

/* The gradient buffers b's reduce-scatters allocate: *shares (bytes, in
 * *made buffers), freed by the optimizer step, each made at micro-batch
 * `first` (the step's first reduction of its block); and the transients
 * (bytes returned) that each frees itself. */
static uint64_t reduce_scatter_grads(const built *b, int first,
                                     uint64_t *shares, uint32_t *made)
{
  const vs_program *p = &b->p;
  uint32_t step =
      p->stream_ops[VS_STREAM_COMPUTE][p->n_stream_ops[VS_STREAM_COMPUTE] - 1];
  uint64_t transient = 0;
  *shares = 0;
  *made = 0;
  assert_int_equal(p->ops[step].phase, VS_PHASE_OPTIMIZER);
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (strcmp(vs_op_name(p, op), "dp_reduce_scatter") != 0)
      continue;
    for (uint32_t e = op->first_effect; e < vs_op_effects_end(p, op); e++) {
      const vs_effect *ef = &p->effects[e];
      const vs_buffer *buf = vs_program_buffer(p, ef->buffer);
      uint32_t a, f;
      if (ef->is_free || buf->category != VS_CAT_GRADS)
        continue;
      buffer_ops(p, ef->buffer, &a, &f);
      if (f == i) {
        transient += buf->bytes;
        continue;
      }
      assert_int_equal(f, step);
      assert_int_equal(op->microbatch, first);
      *shares += buf->bytes;
      ++*made;
    }
  }
  return transient;
}

/* FSDP2 whose loop's zero_grad sets the sharded gradients to None (the
 * preset's set_grads_to_none, torchtitan's train step): none at the
 * setup; each block's share appears as its first reduce-scatter of the
 * step starts (foreach_reduce: the output becomes the sharded .grad when
 * it is None) and the shares, which add up to the stage's gradients to
 * the byte, go at the step; a later micro-batch's output is added into
 * it and dropped, a transient of its reduce-scatter. Kept (false) they
 * are resident from the setup, and every reduce-scatter's output is such
 * a transient. */
static void test_fsdp2_reduced_grads_set_to_none(void **state)
{
  const char *const sets[] = {"training.framework=fsdp2",
                              "training.global_batch=4", "parallel.bucket=1MiB",
                              "training.set_grads_to_none=false"};
  uint64_t bytes[VS_CAT_N], shares, per_mb = 0;
  uint32_t count[VS_CAT_N], made;
  built *b = build(sets, 4, 2);
  (void)state;
  assert_false(b->r.reduced_grads_set_to_none);
  assert_true(b->lay.grad_accum == 2);
  for (uint32_t inst = 0; inst < LAYERS + 2; inst++)
    per_mb += vs_recipe_shard(&b->r.grads,
                              vs_recipe_kind(&b->r, &b->m, inst)->grad_bytes);
  setup_allocations(&b->p, bytes, count);
  assert_int_equal(bytes[VS_CAT_GRADS], b->lay.stages[0].grads_bytes);
  assert_int_equal(reduce_scatter_grads(b, 0, &shares, &made), 2 * per_mb);
  assert_int_equal(made, 0);
  free(check_program(b));
  destroy(b);
  b = build(sets, 3, 2); /* the preset's */
  assert_true(b->r.reduced_grads_set_to_none);
  setup_allocations(&b->p, bytes, count);
  assert_int_equal(bytes[VS_CAT_GRADS], 0);
  assert_int_equal(reduce_scatter_grads(b, 0, &shares, &made), per_mb);
  /* every layer, the embedding and the head (tied: its share is the
   * final norm's) */
  assert_int_equal(made, LAYERS + 2);
  assert_int_equal(shares, b->lay.stages[0].grads_bytes);
  check_whole(b);
  destroy(b);
  {
    /* under a pipeline each stage reduces after its last micro-batch
     * (stage.py's post-backward): its shares appear then, once, and add
     * up to its gradients */
    const char *const piped[] = {"training.framework=fsdp2",
                                 "training.global_batch=4", "parallel.pp=2"};
    for (uint64_t stage = 0; stage < 2; stage++) {
      b = build_stage(piped, 3, 4, stage);
      assert_true(b->r.reduced_grads_set_to_none && b->lay.grad_accum == 2);
      assert_int_equal(reduce_scatter_grads(b, 1, &shares, &made), 0);
      assert_true(made > 0);
      assert_int_equal(shares, b->lay.stages[stage].grads_bytes);
      check_whole(b);
      destroy(b);
    }
  }
}

/* The names of the backward ops of micro-batch 0 that allocate gradient
 * buffers of layer `layer` (by the op's layer), one per buffer, into
 * names (at most n); returns how many. */
static size_t grads_made_by(const built *b, int layer, const char **names,
                            size_t n)
{
  const vs_program *p = &b->p;
  size_t found = 0;
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (op->phase != VS_PHASE_BWD || op->microbatch != 0 ||
        vs_op_layer(p, op) != layer)
      continue;
    for (uint32_t e = op->first_effect; e < vs_op_effects_end(p, op); e++) {
      const vs_effect *ef = &p->effects[e];
      if (!ef->is_free &&
          vs_program_buffer(p, ef->buffer)->category == VS_CAT_GRADS &&
          found < n)
        names[found++] = vs_op_name(p, op);
    }
  }
  return found;
}

/* A block's gradients appear as backward reaches the op that makes the
 * first of them (vs_kind_plan grads_op): a GPT layer's at its down
 * projection, not at the dropout before it; an untied head's at its
 * output layer, not at the loss, which makes none; a tied embedding's at
 * the head's output layer, whose backward computes it (ZeRO-2's
 * transient gradients, one buffer per block). */
static void test_grads_appear_at_their_op(void **state)
{
  const char *const tied[] = {"parallel.zero=2", "training.global_batch=2"};
  const char *const untied[] = {"parallel.zero=2", "training.global_batch=2",
                                "model.tied_embeddings=false"};
  const char *names[4];
  built *b;
  (void)state;
  b = build(tied, 2, 2);
  assert_true(b->r.transient_grads);
  assert_int_equal(grads_made_by(b, 0, names, 4), 1);
  assert_string_equal(names[0], "mlp_down");
  /* the embedding's at the output layer, the head's own (its final
   * norm's: the output weight is the embedding's) at the norm */
  assert_int_equal(grads_made_by(b, LAYERS, names, 4), 2);
  assert_string_equal(names[0], "lm_head");
  assert_string_equal(names[1], "final_norm");
  check_whole(b);
  destroy(b);
  b = build(untied, 3, 2);
  assert_int_equal(grads_made_by(b, LAYERS, names, 4), 1);
  assert_string_equal(names[0], "lm_head");
  check_whole(b);
  destroy(b);
  {
    /* with a multi-token prediction depth and an untied head, the
     * depth's lookup of the word embeddings makes their gradient */
    const char *const mtp[] = {"parallel.zero=2", "training.global_batch=2",
                               "model.tied_embeddings=false",
                               "model.mtp_layers=1"};
    b = build(mtp, 4, 2);
    assert_int_equal(grads_made_by(b, LAYERS, names, 4), 2);
    assert_string_equal(names[0], "lm_head");
    assert_string_equal(names[1], "mtp_embedding");
    check_whole(b);
    destroy(b);
  }
}

/* How many ops of b's program named `name` carry a rate cap (max_rate),
 * each of them checked to be the host's pageable rate at its size in the
 * direction of its resource (vs_topology_pageable_rate); *ops counts
 * them all. */
static uint32_t capped_ops(const built *b, const char *name, uint32_t *ops)
{
  uint32_t capped = 0;
  *ops = 0;
  for (uint32_t i = 0; i < b->p.n_ops; i++) {
    const vs_op_kind *k = vs_op_kind_of(&b->p, &b->p.ops[i]);
    int dir = k->resource == VS_RES_PCIE_D2H ? VS_CAL_D2H_PAGEABLE
                                             : VS_CAL_H2D_PAGEABLE;
    if (strcmp(k->name, name) != 0)
      continue;
    ++*ops;
    if (k->max_rate == 0)
      continue;
    capped++;
    assert_true(k->resource == VS_RES_PCIE_D2H ||
                k->resource == VS_RES_PCIE_SWITCH);
    tu_assert_close(k->max_rate,
                    vs_topology_pageable_rate(&b->topo, dir, k->bytes, NULL),
                    1e-12);
  }
  return capped;
}

/* offload_pin_memory = false: every copy to or from the offloaded
 * states' host buffers is capped at the host's pageable rate (DeepSpeed
 * ZeRO-2's gradients out in fp32, its host sums in and out, the updated
 * parameters back; ZeRO-3's parameter fetches from the host), the
 * activation offload's and NVMe's pinned buffers' are not, and nothing
 * is capped with the default (pinned). */
static void test_pageable_offload_copies(void **state)
{
  const char *const zero2[] = {
      "training.framework=deepspeed", "parallel.zero=2",
      "parallel.offload_optimizer=cpu", "training.global_batch=8",
      "parallel.offload_pin_memory=false"};
  const char *const zero3[] = {
      "training.framework=deepspeed",     "parallel.zero=3",
      "parallel.offload_optimizer=cpu",   "parallel.offload_params=cpu",
      "training.checkpointing=full",      "training.offload_activations=cpu",
      "parallel.offload_pin_memory=false"};
  static const char *const zero2_copies[] = {"grad_to_host", "grad_sum_in",
                                             "grad_sum_out", "params_to_gpu"};
  uint32_t ops;
  built *b;
  (void)state;
  for (int pinned = 0; pinned < 2; pinned++) {
    b = build(zero2, pinned ? 4 : 5, 2);
    assert_int_equal(b->r.offload.pageable, !pinned);
    for (size_t i = 0; i < 4; i++) {
      uint32_t capped = capped_ops(b, zero2_copies[i], &ops);
      assert_true(ops > 0);
      assert_int_equal(capped, pinned ? 0 : ops);
    }
    destroy(b);
  }
  b = build(zero3, 7, 2);
  assert_true(capped_ops(b, "param_to_gpu", &ops) == ops && ops > 0);
  assert_int_equal(capped_ops(b, "activations_to_host", &ops), 0);
  assert_true(ops > 0);
  destroy(b);
  {
    /* DeepSpeed ZeRO-3 copies the updated parameters back from fp32
     * partitions it never pins (stage3.py _create_fp32_partitions),
     * whatever pin_memory says; its gradients go to pinned ones; the
     * same layout under framework none pins both */
    const char *const ds3[] = {"training.framework=deepspeed",
                               "parallel.zero=3",
                               "parallel.offload_optimizer=cpu"};
    const char *const none3[] = {"parallel.zero=3",
                                 "parallel.offload_optimizer=cpu"};
    b = build(ds3, 3, 2);
    assert_true(b->r.offload.pageable_masters && !b->r.offload.pageable);
    assert_true(capped_ops(b, "params_to_gpu", &ops) == ops && ops > 0);
    assert_int_equal(capped_ops(b, "grad_to_host", &ops), 0);
    assert_true(ops > 0);
    destroy(b);
    b = build(none3, 2, 2);
    assert_false(b->r.offload.pageable_masters);
    assert_int_equal(capped_ops(b, "params_to_gpu", &ops), 0);
    assert_true(ops > 0);
    destroy(b);
  }
  {
    /* with NVMe the parameters and gradients pass through pinned swap
     * buffers */
    const char *const nvme[] = {
        "training.framework=deepspeed", "parallel.zero=3",
        "parallel.offload_optimizer=nvme", "parallel.offload_params=nvme",
        "parallel.offload_pin_memory=false"};
    b = build(nvme, 5, 2);
    assert_int_equal(capped_ops(b, "param_to_gpu", &ops), 0);
    assert_true(ops > 0);
    /* and the gradients go out to them (swap_out_gradients) */
    assert_int_equal(capped_ops(b, "grad_to_host", &ops), 0);
    assert_true(ops > 0);
    destroy(b);
  }
}

/* The Hugging Face Trainer's gradients in b (destroyed here): `tensors`
 * buffers made in backward, each freed by the optimizer step (the step's
 * zero_grad), in a program that keeps schedule.h's invariants. */
static void kept_grads_made_and_freed(built *b, uint32_t tensors)
{
  const vs_pop *step =
      &b->p.ops[b->p.stream_ops[VS_STREAM_COMPUTE]
                               [b->p.n_stream_ops[VS_STREAM_COMPUTE] - 1]];
  uint32_t made = 0, freed = 0;
  assert_int_equal(step->phase, VS_PHASE_OPTIMIZER);
  for (uint32_t i = 0; i < b->p.n_ops; i++) {
    const vs_pop *op = &b->p.ops[i];
    for (uint32_t e = op->first_effect; e < vs_op_effects_end(&b->p, op);
         e++) {
      const vs_effect *ef = &b->p.effects[e];
      if (vs_program_buffer(&b->p, ef->buffer)->category != VS_CAT_GRADS)
        continue;
      if (!ef->is_free)
        made += op->phase == VS_PHASE_BWD;
      else
        freed += op == step;
    }
  }
  assert_int_equal(made, tensors);
  assert_int_equal(freed, tensors);
  check_whole(b);
  destroy(b);
}

/* Model states are per tensor only in PyTorch's own loop without ZeRO
 * (vs_recipe per_tensor_states): ZeRO's partitions and Megatron-LM's
 * buffers are one allocation each. Under the Hugging Face Trainer each
 * tensor's gradient appears in backward and goes at the step's
 * zero_grad(set_to_none = True), one buffer each. */
static void test_per_tensor_states_follow_the_framework(void **state)
{
  static const char *const zero1[] = {"parallel.zero=1"};
  static const char *const megatron[] = {"training.framework=megatron"};
  static const char *const hf[] = {"training.framework=hf"};
  static const char *const frozen[] = {"training.framework=hf",
                                       "training.precision=bf16",
                                       "finetune.method=frozen",
                                       "finetune.trainable_layers=1"};
  uint64_t bytes[VS_CAT_N];
  uint32_t count[VS_CAT_N];
  built *b;
  (void)state;
  for (int i = 0; i < 2; i++) {
    b = build(i ? megatron : zero1, 1, i ? 1 : 2);
    assert_false(b->r.per_tensor_states);
    setup_allocations(&b->p, bytes, count);
    assert_int_equal(count[VS_CAT_PARAMS], 1);
    assert_int_equal(count[VS_CAT_GRADS], 1);
    assert_int_equal(count[VS_CAT_OPTIMIZER], 1);
    destroy(b);
  }
  b = build(hf, 1, 1);
  assert_true(b->r.per_tensor_states && b->r.grads_set_to_none);
  setup_allocations(&b->p, bytes, count);
  assert_int_equal(count[VS_CAT_PARAMS], 52);
  assert_int_equal(count[VS_CAT_GRADS], 0);
  kept_grads_made_and_freed(b, 52);
  /* only the trainable tensors' gradients: the last layer's 12 and the
   * final norm's 2 when one layer of a bf16 model trains (frozen
   * embeddings and layers before it make none) */
  b = build(frozen, 4, 1);
  assert_true(b->r.per_tensor_states);
  kept_grads_made_and_freed(b, 12 + 2);
  /* each pipeline stage allocates its own blocks' tensors: the first the
   * embeddings and its two layers (2 + 2 x 12), the last its two layers,
   * the final norm and its copy of the tied word embeddings for the
   * output layer (2 x 12 + 2 + 1) */
  for (uint64_t stage = 0; stage < 2; stage++) {
    static const char *const pp2[] = {"parallel.pp=2",
                                      "training.global_batch=4"};
    unsigned char *st;
    b = build_stage(pp2, 2, 2, stage);
    st = check_program(b);
    check_end_state(b, st);
    setup_allocations(&b->p, bytes, count);
    assert_int_equal(count[VS_CAT_PARAMS], stage == 0 ? 26 : 27);
    assert_int_equal(bytes[VS_CAT_PARAMS], b->lay.stages[stage].params_bytes);
    assert_int_equal(bytes[VS_CAT_OPTIMIZER],
                     b->lay.stages[stage].optimizer_bytes);
    free(st);
    destroy(b);
  }
}

/* An NF4 weight reaches the allocator as the tensors bitsandbytes'
 * quantize_4bit makes (functional.py; Params4bit keeps the packed data,
 * its QuantState the rest), each rounded on its own: with qlora the small
 * GPT's 16 linear weights (4 a layer) are 6 buffers each, the adapters
 * (q and v's A and B a layer) and every other tensor one. Layer 0's qkv,
 * 256 x 768 = 196608 weights: 98304 B packed, 3072 8-bit absmaxes, 12
 * fp32 scales of them, the nested code (256 fp32), its offset (one fp32),
 * the NF4 code (16 fp32); without double quantization 3 each. */
static void test_nf4_weight_tensors(void **state)
{
  static const char *const qlora[] = {
      "training.framework=hf", "training.precision=bf16",
      "finetune.method=qlora", "finetune.double_quant=true"};
  static const uint64_t qkv[] = {98304, 3072, 48, 1024, 4, 64};
  uint64_t bytes[VS_CAT_N];
  uint32_t count[VS_CAT_N], tensors = 0, found = 0;
  const vs_pop *setup;
  built *b;
  (void)state;
  b = build(qlora, 4, 1);
  assert_true(b->r.per_tensor_states);
  for (size_t inst = 0; inst < (size_t)b->wl.model.layers + 2; inst++)
    tensors += vs_model_block(&b->m, inst)->n_params;
  assert_int_equal(tensors, 52 + 4 * 4);
  setup_allocations(&b->p, bytes, count);
  assert_int_equal(count[VS_CAT_PARAMS], tensors + 5 * 16);
  assert_int_equal(bytes[VS_CAT_PARAMS], b->lay.params_bytes);
  setup = &b->p.ops[0];
  for (uint32_t e = setup->first_effect;
       e + 6 <= vs_op_effects_end(&b->p, setup) && !found; e++) {
    uint32_t k = 0;
    while (k < 6 &&
           vs_program_buffer(&b->p, b->p.effects[e + k].buffer)->bytes ==
               qkv[k])
      k++;
    found = k == 6;
  }
  assert_true(found);
  check_whole(b);
  destroy(b);
  /* the Trainer's default, no double quantization: the packed weight,
   * fp32 absmaxes (4 x 3072 B for qkv) and the NF4 code */
  b = build(qlora, 3, 1);
  assert_false(b->wl.finetune.double_quant);
  setup_allocations(&b->p, bytes, count);
  assert_int_equal(count[VS_CAT_PARAMS], tensors + 2 * 16);
  assert_int_equal(bytes[VS_CAT_PARAMS], b->lay.params_bytes);
  check_whole(b);
  destroy(b);
}

/* FSDP2 under pipeline parallelism gathers each block before its pass and
 * prefetches the next block of the pass, which must be one of the running
 * model chunk's: the block after a chunk's last (or before its first)
 * lives on another stage, and gathering it here left one layer's
 * unsharded parameters allocated after the step. Every stage, with one
 * chunk or two (interleaved), ends with only its model states. */
static void test_fsdp2_pipeline_frees_every_gather(void **state)
{
  static const char *const one[] = {"training.framework=fsdp2",
                                    "parallel.pp=2",
                                    "training.global_batch=4"};
  static const char *const two[] = {"training.framework=fsdp2",
                                    "parallel.pp=2",
                                    "parallel.virtual_stages=2",
                                    "parallel.schedule=interleaved",
                                    "training.global_batch=4"};
  (void)state;
  for (uint64_t stage = 0; stage < 2; stage++)
    for (int chunks = 1; chunks <= 2; chunks++) {
      built *b = build_stage(chunks == 1 ? one : two, chunks == 1 ? 3 : 5,
                             4, stage);
      unsigned char *st = check_program(b);
      assert_true(b->r.gather_params);
      check_end_state(b, st);
      free(st);
      destroy(b);
    }
}

/* FSDP2 under torch.distributed.pipelining (recipe pipelined_fsdp): every
 * backward runs without gradient sync or resharding and the post-backward
 * runs once the stage's last backward is done (stage.py). So each of the
 * stage's blocks is all-gathered once in the step and kept; its gradients
 * accumulate unsharded in fp32 over the micro-batches (made in the reduce
 * dtype); the reduce-scatters come after the stage's last backward
 * compute op, one set, and each block's gathered parameters are freed by
 * the post-backward that copies its gradients in (reduce_copy_in). */
static void test_pipelined_fsdp2_syncs_once(void **state)
{
  static const char *const sets[] = {"training.framework=fsdp2",
                                     "parallel.pp=2",
                                     "training.global_batch=8"};
  built *b = build_stage(sets, 3, 4, 0);
  const vs_program *p = &b->p;
  const vs_kind_plan *layer = vs_recipe_kind(&b->r, &b->m, 1);
  uint32_t last_bwd = 0, first_rs = UINT32_MAX, freed_by_copy = 0;
  unsigned char *st;
  (void)state;
  assert_true(b->r.pipelined_fsdp && !b->r.reduce_after_backward);
  assert_int_equal(layer->made_grad_bytes, layer->grad_bytes);
  assert_int_equal(b->lay.grad_accum, 4); /* dp 2, 8 / 2 */
  /* stage 0 holds layers 0 and 1: one gather each in the step */
  assert_int_equal(count_ops(p, "zero3_all_gather", 0, ANY), 1);
  assert_int_equal(count_ops(p, "zero3_all_gather", 1, ANY), 1);
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const char *name = vs_op_name(p, &p->ops[i]);
    if (p->ops[i].phase == VS_PHASE_BWD && strcmp(name, "reduce_copy_in") &&
        strcmp(name, "fsdp_reshard"))
      last_bwd = i;
    if (strcmp(name, "dp_reduce_scatter") == 0 && first_rs == UINT32_MAX)
      first_rs = i;
  }
  assert_true(first_rs != UINT32_MAX && first_rs > last_bwd);
  assert_int_equal(count_ops(p, "dp_reduce_scatter", ANY, 3),
                   count_ops(p, "dp_reduce_scatter", ANY, ANY));
  /* one reduce-scatter a fully_shard unit: the embedding and layers 0
   * and 1, though their 3 MB of gradients would fit one 25 MiB bucket */
  assert_int_equal(count_ops(p, "dp_reduce_scatter", ANY, ANY), 3);
  for (uint32_t buf = 0; buf < p->n_buffers; buf++) {
    uint32_t a, f;
    buffer_ops(p, buf, &a, &f);
    if (vs_program_buffer(p, buf)->category == VS_CAT_TEMP &&
        f != UINT32_MAX && strcmp(vs_op_name(p, &p->ops[f]), "reduce_copy_in") == 0)
      freed_by_copy++;
  }
  /* both layers' unsharded parameters (copied out of the all-gather's
   * flat buffer, temp), the embedding's too */
  assert_true(freed_by_copy >= 2);
  st = check_program(b);
  check_end_state(b, st);
  free(st);
  destroy(b);
  {
    /* stage 1 sends its last input gradient after its post-backward
     * (stage.py: backward_one_chunk runs it, then the schedule sends) */
    uint32_t last_copy = 0, last_send = 0;
    b = build_stage(sets, 3, 4, 1);
    p = &b->p;
    for (uint32_t i = 0; i < p->n_ops; i++) {
      const char *name = vs_op_name(p, &p->ops[i]);
      if (strcmp(name, "reduce_copy_in") == 0)
        last_copy = i;
      else if (strcmp(name, "send_gradient") == 0)
        last_send = i;
    }
    assert_true(last_copy > 0 && last_send > last_copy);
    assert_true(waits_for(p, last_send, last_copy));
    st = check_program(b);
    check_end_state(b, st);
    free(st);
    destroy(b);
  }
}

static void test_setup_and_optimizer(void **state)
{
  built *b = build(NULL, 0, 1);
  const vs_program *p = &b->p;
  const vs_pop *setup = &p->ops[0];
  const vs_pop *last;
  uint64_t bytes[VS_CAT_N];
  uint32_t count[VS_CAT_N], tensors = 0, k = setup->first_effect;
  (void)state;
  /* PyTorch's own loop without ZeRO (no framework, zero = 0): setup
   * allocates each parameter tensor as the model is built, then each one's
   * fp32 master copy (bf16 weights), then the resident gradients and the
   * optimizer's moments, each one flat buffer (the first step makes them
   * in a warm cache), then the two cuBLAS workspaces (the forward's and
   * the backward's handle, 32 MiB each on the default H100) as temp */
  assert_true(b->r.per_tensor_states);
  for (size_t inst = 0; inst < (size_t)b->wl.model.layers + 2; inst++)
    tensors += vs_model_block(&b->m, inst)->n_params;
  /* twelve a layer (qkv, projection, both MLP matrices, two norms: a
   * weight and a bias each), the word and position embeddings, and the
   * final norm's weight and bias */
  assert_int_equal(tensors, 4 * 12 + 2 + 2);
  setup_allocations(p, bytes, count);
  assert_int_equal(count[VS_CAT_PARAMS], tensors);
  assert_int_equal(count[VS_CAT_GRADS], 1);
  assert_int_equal(count[VS_CAT_OPTIMIZER], tensors + 1);
  assert_int_equal(count[VS_CAT_TEMP], 2);
  assert_int_equal(bytes[VS_CAT_PARAMS], b->lay.params_bytes);
  assert_int_equal(bytes[VS_CAT_GRADS], b->lay.grads_bytes);
  assert_int_equal(bytes[VS_CAT_OPTIMIZER], b->lay.optimizer_bytes);
  assert_int_equal(bytes[VS_CAT_TEMP], UINT64_C(64) << 20);
  /* in that order: parameters, masters, gradients, moments, workspaces */
  for (uint32_t i = 0; i < tensors; i++, k++)
    assert_int_equal(vs_program_buffer(p, p->effects[k].buffer)->category,
                     VS_CAT_PARAMS);
  for (uint32_t i = 0; i < tensors; i++, k++)
    assert_int_equal(vs_program_buffer(p, p->effects[k].buffer)->category,
                     VS_CAT_OPTIMIZER);
  assert_int_equal(vs_program_buffer(p, p->effects[k++].buffer)->category,
                   VS_CAT_GRADS);
  /* Adam's two fp32 moments of every parameter */
  assert_int_equal(vs_program_buffer(p, p->effects[k++].buffer)->bytes,
                   8 * b->lay.param_elems);
  /* the first tensor is the word embedding: 1000 x 256 bf16, and the
   * first master copy its fp32 one */
  k = setup->first_effect;
  assert_int_equal(vs_program_buffer(p, p->effects[k].buffer)->bytes,
                   2 * 256000);
  assert_int_equal(vs_program_buffer(p, p->effects[k + tensors].buffer)->bytes,
                   4 * 256000);
  /* bf16 params and grads: 2 bytes per parameter (3448320 parameters) */
  assert_int_equal(b->lay.param_elems, 3448320);
  assert_int_equal(b->lay.params_bytes, 2 * 3448320);
  /* the step ends with the optimizer on the compute stream */
  last = &p->ops[p->stream_ops[VS_STREAM_COMPUTE]
                             [p->n_stream_ops[VS_STREAM_COMPUTE] - 1]];
  assert_string_equal(vs_op_name(p, last), "optimizer_step");
  assert_int_equal(last->phase, VS_PHASE_OPTIMIZER);
  assert_int_equal(count_ops(p, "optimizer_step", ANY, ANY), 1);
  destroy(b);
}

/* b's program rebuilt for job's step (or every step), from b's inputs. */
static void rebuild_job(built *b, vs_job job)
{
  vs_error err;
  job.wl = &b->wl;
  job.topo = &b->topo;
  job.model = &b->m;
  job.recipe = &b->r;
  job.layout = &b->lay;
  vs_error_clear(&err);
  if (vs_schedule_rebuild(&job, (int)b->stage, &b->p, &err))
    fail_msg("schedule: %s", err.msg);
}

/* b's program rebuilt as `step` of training. */
static void rebuild_as(built *b, vs_step step)
{
  rebuild_job(b, (vs_job){.step = step});
}

/* Per category, the GPU buffers p allocates and never frees (with
 * `setup_only`, those of op 0): count and bytes; each one's bytes in
 * sizes[category][...] (up to 512 a category). */
static void kept_buffers(const vs_program *p, bool setup_only,
                         uint32_t count[VS_CAT_N], uint64_t bytes[VS_CAT_N],
                         uint64_t sizes[VS_CAT_N][512])
{
  bool *freed = calloc(p->n_buffers + 1, sizeof *freed);
  assert_non_null(freed);
  memset(count, 0, VS_CAT_N * sizeof *count);
  memset(bytes, 0, VS_CAT_N * sizeof *bytes);
  for (size_t e = 0; e < p->n_effects; e++)
    if (p->effects[e].is_free)
      freed[p->effects[e].buffer] = true;
  for (uint32_t i = 0; i < (setup_only ? 1u : (uint32_t)p->n_ops); i++) {
    const vs_pop *op = &p->ops[i];
    for (uint32_t e = op->first_effect; e < vs_op_effects_end(p, op); e++) {
      const vs_effect *ef = &p->effects[e];
      const vs_buffer *buf = vs_program_buffer(p, ef->buffer);
      if (ef->is_free || freed[ef->buffer] || buf->place != VS_PLACE_GPU)
        continue;
      assert_true(count[buf->category] < 512);
      sizes[buf->category][count[buf->category]++] = buf->bytes;
      bytes[buf->category] += buf->bytes;
    }
  }
  free(freed);
}

static int by_size(const void *x, const void *y)
{
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return (a > b) - (a < b);
}

/* PyTorch's own loop (no framework, zero = 0, AdamW): the first step
 * makes the resident gradients in its backward and the optimizer's
 * moments when its step starts, tensor by tensor (first_step_states);
 * the step after it allocates them all in its setup, the same tensors,
 * to take them over from the first step's cache; the only step simulated
 * keeps them flat. The three have the same ops. */
static void test_first_step_makes_states(void **state)
{
  built *b = build(NULL, 0, 1);
  static uint64_t first_sizes[VS_CAT_N][512], next_sizes[VS_CAT_N][512];
  uint32_t n_first[VS_CAT_N], n_next[VS_CAT_N], n_setup[VS_CAT_N], tensors = 0;
  uint64_t first_bytes[VS_CAT_N], next_bytes[VS_CAT_N], setup_bytes[VS_CAT_N];
  uint64_t moments = 8 * b->lay.param_elems;
  vs_program only;
  const vs_pop *step;
  uint32_t k;
  (void)state;
  assert_true(b->r.first_step_states);
  for (size_t inst = 0; inst < (size_t)b->wl.model.layers + 2; inst++)
    tensors += vs_model_block(&b->m, inst)->n_params;
  only = b->p; /* keep the default program: VS_STEP_ONLY */
  memset(&b->p, 0, sizeof b->p);
  rebuild_as(b, VS_STEP_FIRST);
  assert_int_equal(b->p.n_ops, only.n_ops);
  for (size_t i = 0; i < only.n_ops; i++) {
    assert_string_equal(vs_op_name(&b->p, &b->p.ops[i]),
                        vs_op_name(&only, &only.ops[i]));
    assert_int_equal(b->p.ops[i].stream, only.ops[i].stream);
  }
  /* the first step's setup: parameters and master copies, nothing else
   * of the model states */
  kept_buffers(&b->p, true, n_setup, setup_bytes, first_sizes);
  assert_int_equal(n_setup[VS_CAT_PARAMS], tensors);
  assert_int_equal(n_setup[VS_CAT_GRADS], 0);
  assert_int_equal(n_setup[VS_CAT_OPTIMIZER], tensors);
  assert_int_equal(setup_bytes[VS_CAT_OPTIMIZER],
                   b->lay.optimizer_bytes - moments);
  /* by its end: a gradient per tensor and two moments, exp_avg and
   * exp_avg_sq of each parameter in turn, made by the optimizer step */
  kept_buffers(&b->p, false, n_first, first_bytes, first_sizes);
  assert_int_equal(n_first[VS_CAT_GRADS], tensors);
  assert_int_equal(first_bytes[VS_CAT_GRADS], b->lay.grads_bytes);
  assert_int_equal(n_first[VS_CAT_OPTIMIZER], 3 * tensors);
  assert_int_equal(first_bytes[VS_CAT_OPTIMIZER], b->lay.optimizer_bytes);
  step = &b->p.ops[b->p.stream_ops[VS_STREAM_COMPUTE]
                                  [b->p.n_stream_ops[VS_STREAM_COMPUTE] - 1]];
  assert_string_equal(vs_op_name(&b->p, step), "optimizer_step");
  k = step->first_effect;
  for (uint32_t i = 0; i < tensors; i++, k += 2) {
    const vs_buffer *m = vs_program_buffer(&b->p, b->p.effects[k].buffer);
    const vs_buffer *v = vs_program_buffer(&b->p, b->p.effects[k + 1].buffer);
    assert_int_equal(m->category, VS_CAT_OPTIMIZER);
    assert_int_equal(m->bytes, v->bytes);
    assert_false(b->p.effects[k].is_free || b->p.effects[k].at_end);
  }
  /* the step after it: its setup allocates exactly what the first step
   * leaves, by category and size */
  rebuild_as(b, VS_STEP_AFTER_FIRST);
  assert_int_equal(b->p.n_ops, only.n_ops);
  kept_buffers(&b->p, true, n_next, next_bytes, next_sizes);
  for (int c = 0; c < VS_CAT_N; c++) {
    assert_int_equal(n_next[c], n_first[c]);
    assert_int_equal(next_bytes[c], first_bytes[c]);
    qsort(first_sizes[c], n_first[c], sizeof first_sizes[c][0], by_size);
    qsort(next_sizes[c], n_next[c], sizeof next_sizes[c][0], by_size);
    assert_memory_equal(first_sizes[c], next_sizes[c],
                        n_first[c] * sizeof first_sizes[c][0]);
  }
  /* and the only step keeps one flat gradient buffer and one of moments */
  kept_buffers(&only, true, n_setup, setup_bytes, first_sizes);
  assert_int_equal(n_setup[VS_CAT_GRADS], 1);
  assert_int_equal(n_setup[VS_CAT_OPTIMIZER], tensors + 1);
  vs_program_fini(&only);
  destroy(b);
}

/* b's program built for every step (vs_job every_step). */
static void rebuild_for_every_step(built *b)
{
  rebuild_job(b, (vs_job){.every_step = true});
}

/* Whether the effects of `every` that apply in `step`, op by op, are the
 * effects of `one` (built for that step alone): the same ops, and per op
 * the same allocations and frees in the same order, of buffers of the
 * same bytes, category and place, each buffer of one matching one buffer
 * of every throughout. one's effects apply in every step. */
static void assert_step_view(const vs_program *every, const vs_program *one,
                             vs_step step)
{
  uint32_t *to_one = malloc((every->n_buffers + 1) * sizeof *to_one);
  uint32_t *to_every = malloc((one->n_buffers + 1) * sizeof *to_every);
  size_t applied = 0;
  assert_non_null(to_one);
  assert_non_null(to_every);
  memset(to_one, 0xff, (every->n_buffers + 1) * sizeof *to_one);
  memset(to_every, 0xff, (one->n_buffers + 1) * sizeof *to_every);
  assert_int_equal(every->n_ops, one->n_ops);
  for (size_t i = 0; i < one->n_ops; i++) {
    const vs_pop *a = &every->ops[i], *o = &one->ops[i];
    uint32_t k = o->first_effect, end = vs_op_effects_end(one, o);
    assert_string_equal(vs_op_name(every, a), vs_op_name(one, o));
    for (uint32_t e = a->first_effect; e < vs_op_effects_end(every, a); e++) {
      const vs_effect *x = &every->effects[e];
      const vs_effect *y;
      const vs_buffer *bx, *by;
      if (!vs_effect_applies(x, step))
        continue;
      applied++;
      assert_true(k < end);
      y = &one->effects[k++];
      assert_int_equal(y->step, 0);
      assert_int_equal(x->at_end, y->at_end);
      assert_int_equal(x->is_free, y->is_free);
      bx = vs_program_buffer(every, x->buffer);
      by = vs_program_buffer(one, y->buffer);
      assert_int_equal(bx->bytes, by->bytes);
      assert_int_equal(bx->category, by->category);
      assert_int_equal(bx->place, by->place);
      if (to_one[x->buffer] == UINT32_MAX &&
          to_every[y->buffer] == UINT32_MAX) {
        to_one[x->buffer] = y->buffer;
        to_every[y->buffer] = x->buffer;
      }
      assert_int_equal(to_one[x->buffer], y->buffer);
      assert_int_equal(to_every[y->buffer], x->buffer);
    }
    assert_int_equal(k, end);
  }
  assert_int_equal(applied, one->n_effects);
  free(to_one);
  free(to_every);
}

/* One program serves every step (vs_simulate builds it once when the
 * first step runs): each step's view of its effects (vs_effect_applies)
 * is the program built for that step alone, under PyTorch's own loop
 * (one GPU; the last stage of two, whose head computes the tied
 * embedding's gradients too; the Trainer, whose gradients are set to
 * None) and where the steps do not differ (ZeRO-1: nothing is tagged). */
static void test_every_step_program_serves_each_step(void **state)
{
  static const char *const pp2[] = {"parallel.pp=2"};
  static const char *const hf[] = {"training.framework=hf"};
  static const char *const zero1[] = {"parallel.zero=1"};
  struct {
    const char *const *sets;
    size_t n_sets;
    uint64_t gpus, stage;
    bool first_step;
  } cases[] = {{NULL, 0, 1, 0, true},
               {pp2, 1, 2, 1, true},
               {hf, 1, 1, 0, true},
               {zero1, 1, 2, 0, false}};
  (void)state;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    built *b = build_stage(cases[c].sets, cases[c].n_sets, cases[c].gpus,
                           cases[c].stage);
    vs_program every;
    size_t tagged = 0;
    assert_int_equal(b->r.first_step_states, cases[c].first_step);
    rebuild_for_every_step(b);
    every = b->p;
    for (size_t e = 0; e < every.n_effects; e++)
      tagged += every.effects[e].step != 0;
    assert_true(cases[c].first_step ? tagged > 0 : tagged == 0);
    for (vs_step step = VS_STEP_ONLY; step <= VS_STEP_AFTER_FIRST; step++) {
      memset(&b->p, 0, sizeof b->p);
      rebuild_as(b, step);
      assert_step_view(&every, &b->p, step);
      vs_program_fini(&b->p);
    }
    b->p = every;
    destroy(b);
  }
}

/* The first step's gradients appear as AccumulateGrad takes them: each
 * at the backward of the op that computes it (op_grads_appear), not all of
 * a block's at its first backward op. Layer 0's ops of micro-batch 0: the
 * gradient buffers each backward op allocates are its own weights'
 * (vs_op_spec first_param, n_params), bf16 as the weights are. */
static void test_first_step_grads_appear_at_their_op(void **state)
{
  built *b = build(NULL, 0, 1);
  const vs_block *blk = vs_model_block(&b->m, 1); /* layer 0 */
  const vs_program *p = &b->p;
  uint32_t checked = 0;
  (void)state;
  rebuild_as(b, VS_STEP_FIRST);
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    const vs_op_spec *o = NULL;
    uint64_t want = 0, got = 0;
    uint32_t n_want = 0, n_got = 0;
    if (op->phase != VS_PHASE_BWD || op->microbatch != 0 ||
        vs_op_layer(p, op) != 0)
      continue;
    for (uint32_t k = 0; k < blk->n_ops && !o; k++)
      if (strcmp(blk->ops[k].name, vs_op_name(p, op)) == 0)
        o = &blk->ops[k];
    assert_non_null(o);
    for (uint32_t j = o->first_param; j < o->first_param + o->n_params; j++) {
      vs_tensor_states ts;
      vs_recipe_tensor_states(&b->r, &b->wl.training, &blk->params[j], &ts);
      want += ts.made_grad;
      n_want++;
    }
    for (uint32_t e = op->first_effect; e < vs_op_effects_end(p, op); e++) {
      const vs_buffer *buf = vs_program_buffer(p, p->effects[e].buffer);
      if (buf->category == VS_CAT_GRADS && !p->effects[e].is_free) {
        got += buf->bytes;
        n_got++;
      }
    }
    assert_int_equal(n_got, n_want);
    assert_int_equal(got, want);
    checked += n_want;
  }
  /* every tensor of the layer: qkv, projection and MLP weights and
   * biases, and the two norms' (each op computes its own) */
  assert_int_equal(blk->ops[0].first_param, 0);
  assert_int_equal(checked, blk->n_params);
  assert_int_equal(checked, 12);
  /* qkv_proj's: its 256 x 768 weight and 768 bias, 2 B an element */
  for (uint32_t k = 0; k < blk->n_ops; k++)
    if (strcmp(blk->ops[k].name, "qkv_proj") == 0)
      assert_int_equal(blk->ops[k].n_params, 2);
  destroy(b);
}

/* ------------------------------------------------------------------------
 * Data parallelism
 * ------------------------------------------------------------------------ */

static void test_dp1_has_no_comm(void **state)
{
  const char *const sets[] = {"parallel.zero=3", "training.global_batch=2"};
  built *b;
  (void)state;
  /* dp = 1 even with ZeRO-3 asked for: nothing to reduce or gather */
  b = build(sets, 2, 1);
  assert_int_equal(b->lay.dp, 1);
  assert_int_equal(b->p.n_stream_ops[VS_STREAM_COMM], 0);
  for (size_t i = 0; i < b->p.n_ops; i++)
    assert_int_not_equal(b->p.ops[i].phase, VS_PHASE_DP_COMM);
  destroy(b);
}

/* Forward ops named name, of layer `layer` and micro-batch mb. */
static size_t count_forward(const vs_program *p, const char *name, int layer,
                            int mb)
{
  size_t n = 0;
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    n += op->phase == VS_PHASE_FWD && op->microbatch == mb &&
         vs_op_layer(p, op) == layer && strcmp(vs_op_name(p, op), name) == 0;
  }
  return n;
}

/* Ops of every layer and micro-batch get the kind of their own name and
 * layer, although the builder finds a kind through the key of what made
 * it rather than by its contents (schedule.c kind_of): each layer's
 * qkv_proj forward appears once per micro-batch with its own layer (a
 * key without the layer gives every layer layer 0's kind), and its four
 * tensor-parallel all-reduces of each micro-batch keep their layer too
 * (Megatron-LM's g after attention and after the MLP in forward, f's
 * before each in backward; tp 2 without sequence parallelism). */
static void test_op_kinds_follow_each_op(void **state)
{
  const char *const sets[] = {"training.global_batch=3", "parallel.tp=2",
                              "parallel.sequence_parallel=false"};
  built *b;
  (void)state;
  b = build(sets, 3, 2);
  assert_int_equal(b->lay.grad_accum, 3);
  for (int layer = 0; layer < 4; layer++)
    for (int mb = 0; mb < 3; mb++) {
      assert_int_equal(count_forward(&b->p, "qkv_proj", layer, mb), 1);
      assert_int_equal(count_ops(&b->p, "tp_all_reduce", layer, mb), 4);
    }
  destroy(b);
}

static void test_dp2_all_reduce_last_microbatch(void **state)
{
  /* dp = 2, global batch 4 = micro-batch 1 * dp 2 * 2 accumulation steps */
  const char *const sets[] = {"parallel.zero=0", "training.global_batch=4"};
  built *b;
  const vs_program *p;
  (void)state;
  b = build(sets, 2, 2);
  p = &b->p;
  assert_int_equal(b->lay.dp, 2);
  assert_int_equal(b->lay.grad_accum, 2);
  /* Gradients accumulate locally in micro-batch 0; only micro-batch 1
   * reduces them. The default 25 MiB bucket holds the whole model
   * (6.9 MB), so one all-reduce. */
  assert_int_equal(count_ops(p, "dp_all_reduce", ANY, 0), 0);
  assert_int_equal(count_ops(p, "dp_all_reduce", ANY, 1), 1);
  assert_int_equal(count_ops(p, "dp_reduce_scatter", ANY, ANY), 0);
  /* ZeRO-0 gathers nothing */
  assert_int_equal(count_ops(p, "zero_param_all_gather", ANY, ANY), 0);
  /* it reduces every gradient: 3448320 params * 2 bytes = 6896640 */
  assert_int_equal(b->lay.grads_full_bytes, 6896640);
  assert_true(sum_bytes(p, "dp_all_reduce", ANY) ==
              (double)b->lay.grads_full_bytes);
  /* the optimizer waits for it, and for the backward's last kernel */
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (strcmp(vs_op_name(p, op), "optimizer_step") == 0) {
      assert_int_equal(vs_op_deps_end(p, op) - op->first_dep, 2);
      assert_int_equal(p->ops[p->deps[op->first_dep]].stream,
                       VS_STREAM_COMPUTE);
      assert_string_equal(vs_op_name(p, &p->ops[p->deps[op->first_dep + 1]]),
                          "dp_all_reduce");
    }
  }
  destroy(b);
}

static void test_dp2_buckets(void **state)
{
  const char *const sets[] = {"parallel.zero=0", "training.global_batch=4",
                              "parallel.bucket=1MiB"};
  built *b;
  const vs_program *p;
  double want[] = {
      /* backward runs head, layer 3, ..., layer 0, embedding. A 1 MiB
       * (1048576 B) bucket flushes once it is full: the head's 1024 B of
       * grads wait for layer 3 (789760 * 2 = 1579520 B), each other layer
       * fills one alone, and the embedding (288768 * 2 = 577536 B) goes at
       * the end of backward. */
      (double)(2 * HEAD_PARAMS + 2 * LAYER_PARAMS),
      (double)(2 * LAYER_PARAMS), (double)(2 * LAYER_PARAMS),
      (double)(2 * LAYER_PARAMS), (double)(2 * EMBED_PARAMS)};
  size_t k = 0;
  (void)state;
  b = build(sets, 3, 2);
  p = &b->p;
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (strcmp(vs_op_name(p, op), "dp_all_reduce") != 0)
      continue;
    assert_true(k < 5);
    assert_true(vs_op_kind_of(p, op)->bytes == want[k]);
    assert_int_equal(op->microbatch, 1);
    assert_int_equal(op->stream, VS_STREAM_COMM);
    assert_int_equal(op->phase, VS_PHASE_DP_COMM);
    /* issued after the backward op that completed the bucket */
    assert_int_equal(vs_op_deps_end(p, op) - op->first_dep, 1);
    assert_int_equal(p->ops[p->deps[op->first_dep]].stream, VS_STREAM_COMPUTE);
    assert_int_equal(p->ops[p->deps[op->first_dep]].phase, VS_PHASE_BWD);
    k++;
  }
  assert_int_equal(k, 5);
  /* the buckets add up to all the gradients */
  assert_true(sum_bytes(p, "dp_all_reduce", ANY) ==
              (double)b->lay.grads_full_bytes);
  destroy(b);
}

static void test_zero1_reduce_scatter_then_gather(void **state)
{
  const char *const sets[] = {"parallel.zero=1", "training.global_batch=4"};
  built *b;
  const vs_program *p;
  (void)state;
  b = build(sets, 2, 2);
  p = &b->p;
  /* ZeRO-1 reduces when ZeRO-0 does (last micro-batch only), but only each
   * rank's partition (a reduce-scatter of all the gradients: Megatron-LM's
   * distributed optimizer, DeepSpeed's stage 1), then all-gathers the
   * updated parameters once after the optimizer */
  assert_int_equal(count_ops(p, "dp_all_reduce", ANY, ANY), 0);
  assert_int_equal(count_ops(p, "dp_reduce_scatter", ANY, 0), 0);
  assert_true(count_ops(p, "dp_reduce_scatter", ANY, 1) > 0);
  assert_true(sum_bytes(p, "dp_reduce_scatter", ANY) ==
              (double)b->lay.grads_full_bytes);
  assert_int_equal(count_ops(p, "zero_param_all_gather", ANY, ANY), 1);
  assert_true(sum_bytes(p, "zero_param_all_gather", ANY) ==
              (double)b->lay.params_full_bytes);
  destroy(b);
}

static void test_zero2_reduce_scatter_every_microbatch(void **state)
{
  const char *const sets[] = {"parallel.zero=2", "training.global_batch=6"};
  built *b;
  const vs_program *p;
  (void)state;
  /* dp 2, micro-batch 1, global batch 6: 3 accumulation steps */
  b = build(sets, 2, 2);
  p = &b->p;
  assert_int_equal(b->lay.grad_accum, 3);
  assert_int_equal(count_ops(p, "dp_all_reduce", ANY, ANY), 0);
  for (int mb = 0; mb < 3; mb++) {
    /* ZeRO-2 keeps only a shard of the grads, so every micro-batch
     * reduce-scatters all of them (6896640 B, one 25 MiB bucket) */
    assert_int_equal(count_ops(p, "dp_reduce_scatter", ANY, mb), 1);
    assert_true(sum_bytes(p, "dp_reduce_scatter", mb) ==
                (double)b->lay.grads_full_bytes);
  }
  assert_int_equal(count_ops(p, "zero_param_all_gather", ANY, ANY), 1);
  /* the resident grads are the shard: ceil(6896640 / 2) = 3448320 */
  assert_int_equal(b->lay.grads_bytes, 3448320);
  destroy(b);
}


/* Megatron-LM buckets gradients only in the first stage's first model
 * chunk and only with --overlap-grad-reduce (distributed_data_parallel.py
 * sets bucket_size = None otherwise, and for pipeline ranks > 0): with 1
 * MiB buckets stage 0 reduces in several all-reduces, stage 1 in one; a
 * stage reducing after the backward pass (the preset's default) in one;
 * the same job under framework none buckets both stages. */
static void test_megatron_buckets_first_chunk_only(void **state)
{
  static const char *const sets[] = {
      "training.framework=megatron", "parallel.zero=0", "parallel.pp=2",
      "training.global_batch=4", "parallel.bucket=1MiB",
      "parallel.overlap_grad_reduce=true"};
  static const char *const after[] = {
      "training.framework=megatron", "parallel.zero=0", "parallel.pp=2",
      "training.global_batch=4", "parallel.bucket=1MiB"};
  static const char *const plain[] = {
      "parallel.zero=0", "parallel.pp=2", "training.global_batch=4",
      "parallel.bucket=1MiB"};
  built *b;
  (void)state;
  b = build_stage(sets, 6, 4, 0);
  assert_true(b->r.buckets_first_chunk && !b->r.reduce_after_backward);
  assert_true(count_ops(&b->p, "dp_all_reduce", ANY, ANY) > 1);
  destroy(b);
  b = build_stage(sets, 6, 4, 1);
  assert_int_equal(count_ops(&b->p, "dp_all_reduce", ANY, ANY), 1);
  assert_true(sum_bytes(&b->p, "dp_all_reduce", ANY) ==
              (double)b->lay.stages[1].grads_full_bytes);
  destroy(b);
  b = build_stage(after, 5, 4, 0);
  assert_true(b->r.reduce_after_backward);
  assert_int_equal(count_ops(&b->p, "dp_all_reduce", ANY, ANY), 1);
  destroy(b);
  for (uint64_t stage = 0; stage < 2; stage++) {
    b = build_stage(plain, 4, 4, stage);
    assert_false(b->r.buckets_first_chunk);
    assert_true(count_ops(&b->p, "dp_all_reduce", ANY, ANY) > 1);
    destroy(b);
  }
}

/* ZeRO-2 frees each bucket's gradients once reduce-scattered, so backward
 * must not outrun the reductions (recipe reduce_depth = 1: DeepSpeed's
 * average_tensor, FSDP2's post_backward): the first compute op after a
 * bucket's reduce-scatter is issued waits for the bucket before's. With
 * 1 MiB buckets each micro-batch has several; the first bucket of the
 * step waits for nothing. */
static void test_zero2_backward_waits_for_the_bucket_before(void **state)
{
  const char *const sets[] = {"parallel.zero=2", "training.global_batch=4",
                              "parallel.bucket=1MiB"};
  built *b = build(sets, 3, 2);
  const vs_program *p = &b->p;
  uint32_t prev = UINT32_MAX, checked = 0;
  (void)state;
  assert_int_equal(b->r.reduce_depth, 1);
  assert_true(count_ops(p, "dp_reduce_scatter", ANY, 0) > 2);
  for (uint32_t i = 0; i < p->n_ops; i++) {
    if (strcmp(vs_op_name(p, &p->ops[i]), "dp_reduce_scatter") != 0)
      continue;
    for (uint32_t j = i + 1; j < p->n_ops; j++) {
      if (p->ops[j].stream != VS_STREAM_COMPUTE)
        continue;
      if (prev != UINT32_MAX)
        assert_true(waits_for(p, j, prev));
      else /* the step's first bucket: no reduce-scatter to wait for */
        for (uint32_t k = 0; k < i; k++)
          assert_false(waits_for(p, j, k) &&
                       strcmp(vs_op_name(p, &p->ops[k]), "dp_reduce_scatter") == 0);
      checked++;
      break;
    }
    prev = i;
  }
  assert_true(checked > 4);
  destroy(b);
}

/* DeepSpeed's ZeRO-2 with expert parallelism (stage_1_and_2.py at
 * 38327e07): one ipg bucket takes every param group's gradients as
 * backward makes them (reduce_independent_p_g_buckets_and_remove_grads,
 * closed by elements whatever the group; ipg_bucket_has_moe_params), and
 * average_tensor reduces each slice over its parameter's group: an
 * expert's over expert_dp_process_group, the rest over dp (lines
 * 1081-1082, buckets keyed by process group, 1127-1128). 8 GPUs as dp 8
 * with ep 2: the experts' gradients reduce-scatter over the 4 ranks
 * holding the same experts, 2 apart, the dense ones over the 8, every
 * micro-batch; the bucket each layer's (1 MiB under a layer's), its
 * experts' reduction after its dense one. */
static void test_deepspeed_zero2_expert_reduce_scatters(void **state)
{
  static const char moe[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 256\nheads = 4\n"
      "ffn_hidden = 512\nvocab = 1000\nseq_len = 128\nexperts = 4\n"
      "experts_per_token = 2\n"
      "[training]\nframework = deepspeed\nglobal_batch = 16\n"
      "[parallel]\nzero = 2\nep = 2\nbucket = 1MiB\n";
  built *b = build_model_stage(moe, NULL, 0, 8, 0);
  const vs_program *p = &b->p;
  const vs_stage_layout *st = &b->lay.stages[0];
  uint64_t expert = st->expert_grads_full_bytes;
  vs_rank r;
  (void)state;
  check_whole(b);
  run_engine(b, &r);
  vs_rank_fini(&r);
  assert_int_equal(b->lay.grad_accum, 2);
  assert_int_equal(b->lay.group_size[VS_GROUP_DP], 8);
  assert_int_equal(b->lay.group_size[VS_GROUP_EXPERT_DP], 4);
  assert_int_equal(b->lay.group_stride[VS_GROUP_EXPERT_DP], 2);
  /* 2 layers x 2 local experts x (fc1 2 x 256 x 512 + fc2 512 x 256) x
   * 2 B */
  assert_int_equal(expert, 2 * 2 * 3 * 256 * 512 * 2);
  assert_int_equal(count_ops(p, "dp_all_reduce", ANY, ANY), 0);
  assert_int_equal(count_ops(p, "edp_all_reduce", ANY, ANY), 0);
  for (int mb = 0; mb < 2; mb++) {
    assert_true(sum_bytes(p, "dp_reduce_scatter", mb) ==
                (double)(st->grads_full_bytes - expert));
    assert_true(sum_bytes(p, "edp_reduce_scatter", mb) == (double)expert);
    assert_int_equal(count_ops(p, "edp_reduce_scatter", ANY, mb), 2);
  }
  for (uint32_t i = 1; i < p->n_ops; i++) {
    if (strcmp(vs_op_name(p, &p->ops[i]), "edp_reduce_scatter") != 0)
      continue;
    /* its bucket's dense reduce-scatter, on the same stream, before it */
    assert_string_equal(vs_op_name(p, &p->ops[i - 1]), "dp_reduce_scatter");
    assert_true(waits_for(p, i, i - 1));
    assert_int_equal(p->ops[i].stream, p->ops[i - 1].stream);
  }
  /* the resident partition: the dense gradients' over 8, the experts'
   * over 4 */
  assert_int_equal(b->lay.grads_bytes,
                   (st->grads_full_bytes - expert) / 8 + expert / 4);
  destroy(b);
}

/* The buffer op allocates with its only allocation effect (UINT32_MAX:
 * none). */
static uint32_t allocated_by(const vs_program *p, uint32_t op)
{
  const vs_pop *o = &p->ops[op];
  for (uint32_t k = o->first_effect; k < vs_op_effects_end(p, o); k++)
    if (!p->effects[k].is_free)
      return p->effects[k].buffer;
  return UINT32_MAX;
}

/* FSDP2's gradient path (frameworks.md 4.3): backward makes bf16
 * gradients (half the fp32 ones it reduces); each unit's post-backward
 * (reduce_copy_in, on the compute stream) waits for the unit before's
 * reduce-scatter, copies the bf16 gradients into a new fp32
 * reduce-scatter input and frees them; the input lives until the next
 * post-backward frees it as it starts (reduce_scatter_state), and the
 * last one of a backward pass until the next compute op, which waits for
 * its reduce-scatter (finalize_backward). */
static void test_fsdp2_reduce_scatter_input_held(void **state)
{
  const char *const sets[] = {"training.framework=fsdp2",
                              "training.global_batch=4",
                              "parallel.bucket=1MiB"};
  built *b = build(sets, 3, 2);
  const vs_program *p = &b->p;
  const vs_kind_plan *layer = vs_recipe_kind(&b->r, &b->m, 1);
  uint32_t prev_copy = UINT32_MAX, prev_rs = UINT32_MAX, held = 0;
  (void)state;
  assert_true(b->r.reduce_copy);
  assert_int_equal(2 * layer->made_grad_bytes, layer->grad_bytes);
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const char *name = vs_op_name(p, &p->ops[i]);
    if (strcmp(name, "dp_reduce_scatter") == 0) {
      assert_true(prev_copy != UINT32_MAX && waits_for(p, i, prev_copy));
      prev_rs = i;
      continue;
    }
    if (strcmp(name, "reduce_copy_in") != 0)
      continue;
    assert_int_equal(p->ops[i].stream, VS_STREAM_COMPUTE);
    if (prev_copy != UINT32_MAX && p->ops[i].microbatch ==
                                       p->ops[prev_copy].microbatch) {
      uint32_t a, f;
      /* the input before is freed as this copy starts, after its
       * reduce-scatter */
      buffer_ops(p, allocated_by(p, prev_copy), &a, &f);
      assert_int_equal(f, i);
      assert_true(waits_for(p, i, prev_rs));
      held++;
    }
    prev_copy = i;
  }
  /* 1 MiB buckets: each of the 4 layers' 3.16 MB of fp32 gradients is a
   * bucket of its own, so each micro-batch has at least 3 copies that
   * follow another */
  assert_true(held >= 3 * b->lay.grad_accum);
  /* torchtitan does not reshard the last layer after forward (its
   * backward comes next): one gather a micro-batch, the others two */
  assert_true(b->r.keep_last_gathered);
  assert_int_equal(count_ops(p, "zero3_all_gather", LAYERS - 1, ANY),
                   b->lay.grad_accum);
  assert_int_equal(count_ops(p, "zero3_all_gather", 0, ANY),
                   2 * b->lay.grad_accum);
  /* the root unit (embedding, head) is gathered once a micro-batch */
  assert_true(b->r.root_kept);
  assert_int_equal(count_ops(p, "zero3_all_gather", -1, ANY),
                   b->lay.grad_accum);
  assert_int_equal(count_ops(p, "zero3_all_gather", LAYERS, ANY),
                   b->lay.grad_accum);
  check_whole(b);
  destroy(b);
  {
    /* the root's gradients wait for its post-backward at the end of
     * backward: with an output layer of its own (untied, 1 MB of fp32
     * gradients, over the 256 KiB bucket) the head's are not reduced
     * before the last transformer layer's backward starts */
    const char *const untied[] = {"training.framework=fsdp2",
                                  "training.global_batch=4",
                                  "parallel.bucket=256KiB",
                                  "model.tied_embeddings=false"};
    unsigned char *st;
    b = build(untied, 4, 2);
    p = &b->p;
    for (int mb = 0; mb < (int)b->lay.grad_accum; mb++) {
      uint32_t first_copy = UINT32_MAX, last_layer_bwd = UINT32_MAX;
      for (uint32_t i = 0; i < p->n_ops; i++) {
        const vs_pop *op = &p->ops[i];
        if (op->microbatch != mb)
          continue;
        if (first_copy == UINT32_MAX &&
            strcmp(vs_op_name(p, op), "reduce_copy_in") == 0)
          first_copy = i;
        if (last_layer_bwd == UINT32_MAX && op->phase == VS_PHASE_BWD &&
            vs_op_layer(p, op) == LAYERS - 1)
          last_layer_bwd = i;
      }
      assert_true(last_layer_bwd != UINT32_MAX);
      assert_true(first_copy > last_layer_bwd);
    }
    st = check_program(b);
    check_end_state(b, st);
    free(st);
    destroy(b);
  }
  {
    /* with the optimizer on the host no compute op follows the last
     * input: it goes with the step's newest op, after its reduce-scatter */
    const char *const host[] = {
        "training.framework=fsdp2", "training.global_batch=4",
        "parallel.offload_optimizer=cpu", "parallel.offload_params=cpu"};
    unsigned char *st;
    b = build(host, 4, 2);
    assert_true(b->r.reduce_copy && b->r.offload.cpu_step);
    st = check_program(b);
    check_end_state(b, st);
    free(st);
    destroy(b);
  }
}

/* ------------------------------------------------------------------------
 * ZeRO-3
 * ------------------------------------------------------------------------ */

/* The compute op that waits for gather op g (the block's first op of the
 * pass), or NULL. */
static const vs_pop *waiter_of(const vs_program *p, uint32_t g)
{
  for (size_t i = g + 1; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    for (uint32_t d = op->first_dep; d < vs_op_deps_end(p, op); d++)
      if (p->deps[d] == g && op->stream == VS_STREAM_COMPUTE)
        return op;
  }
  return NULL;
}

static void test_zero3_gathers_per_block_per_pass(void **state)
{
  const char *const sets[] = {"parallel.zero=3", "training.global_batch=4"};
  /* [mb][block: embedding, layers 0-3, head][pass: 0 forward, 1 backward] */
  int seen[2][LAYERS + 2][2];
  built *b;
  const vs_program *p;
  (void)state;
  memset(seen, 0, sizeof seen);
  b = build(sets, 2, 2);
  p = &b->p;
  /* 6 blocks * 2 passes * 2 micro-batches */
  assert_int_equal(count_ops(p, "zero3_all_gather", ANY, ANY), 24);
  /* ZeRO-3 keeps the updated shard: no separate parameter all-gather */
  assert_int_equal(count_ops(p, "zero_param_all_gather", ANY, ANY), 0);
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i], *w;
    uint64_t elems;
    int pass;
    if (strcmp(vs_op_name(p, op), "zero3_all_gather") != 0)
      continue;
    assert_int_equal(op->stream, VS_STREAM_COMM);
    w = waiter_of(p, i);
    assert_non_null(w);
    /* the gather feeds its own block, in its own micro-batch */
    assert_int_equal(vs_op_layer(p, w), vs_op_layer(p, op));
    assert_int_equal(w->microbatch, op->microbatch);
    assert_true(w->phase == VS_PHASE_FWD || w->phase == VS_PHASE_BWD);
    pass = w->phase == VS_PHASE_BWD;
    seen[op->microbatch][vs_op_layer(p, op) + 1][pass]++;
    /* it gathers the whole block at 2 bytes per parameter */
    elems = vs_op_layer(p, op) < 0         ? EMBED_PARAMS
            : vs_op_layer(p, op) == LAYERS ? HEAD_PARAMS
                                  : LAYER_PARAMS;
    assert_true(vs_op_kind_of(p, op)->bytes == (double)(2 * elems));
  }
  for (int mb = 0; mb < 2; mb++)
    for (int blk = 0; blk < LAYERS + 2; blk++)
      for (int pass = 0; pass < 2; pass++)
        assert_int_equal(seen[mb][blk][pass], 1);
  destroy(b);
}

/* Is buffer buf allocated by a zero3_all_gather op? */
static bool is_gather_buf(const vs_program *p, uint32_t buf)
{
  uint32_t a, f;
  buffer_ops(p, buf, &a, &f);
  return a != UINT32_MAX && strcmp(vs_op_name(p, &p->ops[a]), "zero3_all_gather") == 0;
}

static void test_zero3_at_most_two_blocks_gathered(void **state)
{
  /* Micro-batch 64 (8192 tokens) makes a layer's forward (~14 GFLOP, tens
   * of microseconds) outlast its gather (1.58 MB over NVLink, ~5 us), so a
   * prefetch issued too early would overlap a third block in time. dp 2 *
   * 64 * 2 accumulation steps = global batch 256. */
  const char *const sets[] = {"parallel.zero=3", "training.micro_batch=64",
                              "training.global_batch=256"};
  built *b;
  const vs_program *p;
  vs_rank r;
  int live = 0, max_live = 0;
  uint64_t life[64][2], layer_fwd_ns = 0, gather_ns = 0;
  size_t n_life;
  (void)state;
  b = build(sets, 3, 2);
  p = &b->p;
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (vs_op_layer(p, op) == 0 && op->microbatch == 0 && op->phase == VS_PHASE_FWD)
      layer_fwd_ns += vs_op_kind_of(p, op)->dur_ns;
    if (vs_op_layer(p, op) == 0 && op->microbatch == 0 &&
        strcmp(vs_op_name(p, op), "zero3_all_gather") == 0)
      gather_ns = vs_op_kind_of(p, op)->dur_ns;
  }
  assert_true(gather_ns > 0);
  assert_true(layer_fwd_ns > 2 * gather_ns);

  /* In program order. */
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    for (int pass = 0; pass < 2; pass++) {
      for (uint32_t k = op->first_effect; k < vs_op_effects_end(p, op);
           k++) {
        const vs_effect *e = &p->effects[k];
        if (e->at_end != pass || !is_gather_buf(p, e->buffer))
          continue;
        live += e->is_free ? -1 : 1;
        if (live > max_live)
          max_live = live;
      }
    }
  }
  assert_int_equal(live, 0);
  assert_int_equal(max_live, 2); /* the block running and the one prefetched */

  /* In simulated time: each gathered buffer lives from its gather's start
   * to the end of the op that frees it; at any instant at most two. The
   * engine frees at an op's end before starting what that end released,
   * so lifetimes are half-open [start, end): count, at each allocation,
   * the lifetimes that contain it. */
  run_engine(b, &r);
  n_life = 0;
  for (uint32_t buf = 0; buf < p->n_buffers; buf++) {
    uint32_t a, f;
    if (!is_gather_buf(p, buf))
      continue;
    buffer_ops(p, buf, &a, &f);
    assert_true(f != UINT32_MAX);
    assert_true(n_life < 64);
    life[n_life][0] = span_of(&r, a)->start_ns;
    life[n_life][1] = span_of(&r, f)->end_ns;
    n_life++;
  }
  assert_int_equal(n_life, 24); /* every gather of the step */
  max_live = 0;
  for (size_t i = 0; i < n_life; i++) {
    live = 0;
    for (size_t j = 0; j < n_life; j++)
      if (life[j][0] <= life[i][0] && life[i][0] < life[j][1])
        live++;
    if (live > max_live)
      max_live = live;
  }
  /* two while a block runs and the next is prefetched */
  assert_int_equal(max_live, 2);
  vs_rank_fini(&r);
  destroy(b);
}

/* In program order, the most gathered blocks held at once and their most
 * elements (a gather buffer holds 2 bytes a parameter). */
static void max_gathered(const vs_program *p, int *blocks, uint64_t *elems)
{
  int live = 0;
  uint64_t bytes = 0;
  *blocks = 0;
  *elems = 0;
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    for (int end = 0; end < 2; end++)
      for (uint32_t k = op->first_effect; k < vs_op_effects_end(p, op); k++) {
        const vs_effect *e = &p->effects[k];
        uint64_t size = vs_program_buffer(p, e->buffer)->bytes;
        if (e->at_end != end || !is_gather_buf(p, e->buffer))
          continue;
        live += e->is_free ? -1 : 1;
        bytes = e->is_free ? bytes - size : bytes + size;
        if (live > *blocks)
          *blocks = live;
        if (bytes / 2 > *elems)
          *elems = bytes / 2;
      }
  }
  assert_int_equal(live, 0);
}

/* DeepSpeed's ZeRO-3 coordinator, block by block (schedule_block.c): the
 * trace of a micro-batch is embedding, layers 0-3, head, then their
 * backwards in reverse; 2 micro-batches. The output layer is tied: the
 * head's passes fetch the embedding's block too (a head pass is 289,280
 * elements of the trace). */
static void test_deepspeed_zero3_coordinator(void **state)
{
  static const char *const none[] = {
      "training.framework=deepspeed", "parallel.zero=3",
      "training.global_batch=4", "parallel.max_live_parameters=1",
      "parallel.max_reuse_distance=1"};
  static const char *const zeros[] = {
      "training.framework=deepspeed", "parallel.zero=3",
      "training.global_batch=4", "parallel.max_live_parameters=0",
      "parallel.max_reuse_distance=0"};
  static const char *const two[] = {
      "training.framework=deepspeed", "parallel.zero=3",
      "training.global_batch=4", "parallel.max_live_parameters=1579520",
      "parallel.max_reuse_distance=1"};
  static const char *const fills[] = {
      "training.framework=deepspeed", "parallel.zero=3",
      "training.global_batch=4", "parallel.max_live_parameters=789760",
      "parallel.max_reuse_distance=1"};
  static const char *const ckpt[] = {"training.framework=deepspeed",
                                     "parallel.zero=3",
                                     "training.global_batch=4",
                                     "parallel.max_live_parameters=1",
                                     "parallel.max_reuse_distance=2500000",
                                     "training.checkpointing=full"};
  static const char *const defaults[] = {"training.framework=deepspeed",
                                         "parallel.zero=3",
                                         "training.global_batch=4"};
  built *b;
  int blocks;
  uint64_t elems;
  (void)state;
  /* no room to prefetch, and every block but the head (its backward next:
   * 0 elements between) released after its forward; the embedding
   * gathered again at the head's forward, kept with it, released after
   * its backward: 7 gathers forward and 5 backward a micro-batch, at most
   * two blocks at once (the head and the embedding), at most a layer's
   * elements */
  b = build(none, 5, 2);
  assert_true(b->r.gather_live_elems == 1 && b->r.gather_reuse_elems == 1);
  assert_int_equal(count_ops(&b->p, "zero3_all_gather", ANY, ANY), 2 * 12);
  assert_int_equal(count_ops(&b->p, "zero3_all_gather", LAYERS, ANY), 2);
  assert_int_equal(count_ops(&b->p, "zero3_all_gather", -1, ANY), 2 * 3);
  max_gathered(&b->p, &blocks, &elems);
  assert_int_equal(blocks, 2);
  assert_true(elems == LAYER_PARAMS); /* more than the two's 289,280 */
  destroy(b);
  /* 0 each, as DeepSpeed reads them: the head, and the embedding it ties,
   * are gathered again for the head's backward: 7 gathers each way */
  b = build(zeros, 5, 2);
  assert_true(b->r.gather_traced);
  assert_int_equal(count_ops(&b->p, "zero3_all_gather", ANY, ANY), 2 * 14);
  destroy(b);
  /* room for two layers: the embedding's pass (288,768 gathered) has
   * 1,290,752 free, which layer 0 (789,760) does not fill, so layer 1 is
   * prefetched too, overshooting as DeepSpeed's check before each
   * parameter does; layer 0's pass then has none free. Layer 3's pass
   * (789,760 free) prefetches the head with the embedding, meets layer 3
   * in the backward half (kept) and gathers layer 2 again: 4 blocks at
   * once; 7 gathers forward, 4 backward */
  b = build(two, 5, 2);
  assert_int_equal(count_ops(&b->p, "zero3_all_gather", ANY, ANY), 2 * 11);
  max_gathered(&b->p, &blocks, &elems);
  assert_int_equal(blocks, 4);
  assert_true(elems == EMBED_PARAMS + 2 * LAYER_PARAMS + HEAD_PARAMS);
  destroy(b);
  /* a window of one layer's elements, which each layer alone fills: its
   * largest tensor (256 x 1024) fits, so a layer counts as 789,759 and
   * the next block is prefetched (one ahead); at layer 3's pass that is
   * the head with the embedding, so layer 3 is released after its forward
   * and prefetched again at the head's pass (500,480 free); 7 gathers
   * forward and 5 backward, at most 3 blocks (the head, the embedding and
   * layer 3) and two layers' elements at once */
  b = build(fills, 5, 2);
  assert_int_equal(count_ops(&b->p, "zero3_all_gather", ANY, ANY), 2 * 12);
  assert_int_equal(count_ops(&b->p, "zero3_all_gather", LAYERS - 1, ANY), 4);
  max_gathered(&b->p, &blocks, &elems);
  assert_int_equal(blocks, 3);
  assert_true(elems == 2 * LAYER_PARAMS);
  destroy(b);
  /* a checkpointed layer's forward re-run is a pass of the trace too:
   * from layer 3's forward to its backward lie the head's two passes
   * (578,560 elements), from layer 2's also layer 3's three (2,947,840):
   * within 2,500,000 layer 3 stays gathered, layer 2 does not (it would,
   * counting layer 3's backward once: 2,158,080); the embedding is
   * gathered again at the head and after its backward: 7 gathers
   * forward, 4 backward */
  b = build(ckpt, 6, 2);
  assert_int_equal(count_ops(&b->p, "zero3_all_gather", LAYERS - 1, ANY), 2);
  assert_int_equal(count_ops(&b->p, "zero3_all_gather", LAYERS - 2, ANY), 4);
  assert_int_equal(count_ops(&b->p, "zero3_all_gather", ANY, ANY), 2 * 11);
  destroy(b);
  {
    /* the embedding's next use is the head that ties it, 3,159,040
     * elements of passes on (the layers' forwards): within 3,500,000 it
     * stays gathered through the forward, and from the head's backward
     * to its own (the layers' backwards, 3,159,040 too); layers 2 and 3
     * stay (2,158,080 and 578,560 to their backwards), layers 0 and 1 are
     * gathered again: 6 gathers forward, 2 backward, the embedding once */
    static const char *const tied[] = {
        "training.framework=deepspeed", "parallel.zero=3",
        "training.global_batch=4", "parallel.max_live_parameters=1",
        "parallel.max_reuse_distance=3500000"};
    b = build(tied, 5, 2);
    assert_int_equal(count_ops(&b->p, "zero3_all_gather", -1, ANY), 2);
    assert_int_equal(count_ops(&b->p, "zero3_all_gather", ANY, ANY), 2 * 8);
    destroy(b);
  }
  {
    /* parameters on the host: the prefetch copies each block's partition
     * in before its gather, so at 1e9 (the whole model) each block comes
     * in once a micro-batch; a frozen prefix (embedding, layers 0-1) runs
     * no backward: the queue passes over their backwards and the layers
     * are released after their forwards, the embedding after the head
     * that ties it (3,159,040 elements of passes on, within 1e9): each
     * block gathered once too */
    static const char *const host[] = {
        "training.framework=deepspeed", "parallel.zero=3",
        "training.global_batch=4", "parallel.offload_params=cpu"};
    static const char *const frozen[] = {
        "training.framework=deepspeed", "parallel.zero=3",
        "training.global_batch=4", "finetune.method=frozen",
        "finetune.trainable_layers=2"};
    b = build(host, 4, 2);
    assert_true(b->r.offload.fetch_params && b->r.gather_traced);
    assert_int_equal(count_ops(&b->p, "param_to_gpu", ANY, ANY),
                     2 * (LAYERS + 2));
    assert_int_equal(count_ops(&b->p, "zero3_all_gather", ANY, ANY),
                     2 * (LAYERS + 2));
    destroy(b);
    b = build(frozen, 5, 2);
    assert_int_equal(count_ops(&b->p, "zero3_all_gather", ANY, ANY),
                     2 * (LAYERS + 2));
    max_gathered(&b->p, &blocks, &elems);
    assert_int_equal(blocks, LAYERS + 2);
    destroy(b);
  }
  /* DeepSpeed's 1e9 each: the embedding's pass prefetches the whole model
   * (3.4M elements), which stays gathered to its backward: one gather a
   * block a micro-batch */
  b = build(defaults, 3, 2);
  assert_true(b->r.gather_live_elems == 1000000000 &&
              b->r.gather_reuse_elems == 1000000000);
  assert_int_equal(count_ops(&b->p, "zero3_all_gather", ANY, ANY),
                   2 * (LAYERS + 2));
  max_gathered(&b->p, &blocks, &elems);
  assert_int_equal(blocks, LAYERS + 2);
  assert_true(elems == EMBED_PARAMS + LAYERS * LAYER_PARAMS + HEAD_PARAMS);
  destroy(b);
}

/* ------------------------------------------------------------------------
 * Activation checkpointing
 * ------------------------------------------------------------------------ */

static void test_full_checkpointing_recomputes_each_layer(void **state)
{
  const char *const sets[] = {"training.checkpointing=full",
                              "training.global_batch=3"};
  built *b;
  const vs_program *p;
  (void)state;
  b = build(sets, 2, 1);
  p = &b->p;
  assert_int_equal(b->lay.grad_accum, 3);
  /* one per transformer layer per micro-batch: 4 * 3; none for the
   * embedding (-1) or the head (4), whose tensors are always kept */
  assert_int_equal(count_ops(p, "recompute_layer", ANY, ANY), LAYERS * 3);
  for (int mb = 0; mb < 3; mb++)
    for (int l = 0; l < LAYERS; l++)
      assert_int_equal(count_ops(p, "recompute_layer", l, mb), 1);
  assert_int_equal(count_ops(p, "recompute_layer", -1, ANY), 0);
  assert_int_equal(count_ops(p, "recompute_layer", LAYERS, ANY), 0);
  assert_int_equal(count_ops(p, "recompute_attn", ANY, ANY), 0);
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (strcmp(vs_op_name(p, op), "recompute_layer") != 0)
      continue;
    assert_int_equal(op->phase, VS_PHASE_RECOMPUTE);
    /* it re-runs the layer's forward: same FLOPs as the forward ops */
    {
      double fwd = 0;
      for (uint32_t k = 0; k < vs_model_layer(&b->m, 0)->n_ops; k++)
        fwd += vs_model_layer(&b->m, 0)->ops[k].fwd_flops;
      assert_true(vs_op_kind_of(p, op)->flops == fwd);
    }
    /* and precedes the layer's backward on the compute stream */
    assert_int_equal(p->ops[i + 1].phase, VS_PHASE_BWD);
    assert_int_equal(vs_op_layer(p, &p->ops[i + 1]), vs_op_layer(p, op));
  }
  destroy(b);
}

/* The bytes selective checkpointing drops from layer's saved tensors. */
static uint64_t selective_dropped(const vs_block *layer)
{
  return vs_block_saved_bytes(layer, -1, VS_SAVED_ALL) -
         vs_block_saved_bytes(layer, -1, VS_SAVED_KEPT_BY_SELECTIVE);
}

/* The one buffer recompute_attn op makes: a temp of `bytes`. */
static const vs_effect *recompute_attn_buffer(const vs_program *p,
                                              const vs_pop *op, uint64_t bytes)
{
  const vs_effect *e = &p->effects[op->first_effect];
  assert_int_equal(op->phase, VS_PHASE_RECOMPUTE);
  assert_int_equal(vs_op_effects_end(p, op) - op->first_effect, 1);
  assert_false(e->is_free);
  assert_int_equal(vs_program_buffer(p, e->buffer)->bytes, bytes);
  assert_int_equal(vs_program_buffer(p, e->buffer)->category, VS_CAT_TEMP);
  return e;
}

static void test_selective_eager_recomputes_attention(void **state)
{
  const char *const sets[] = {"training.checkpointing=selective",
                              "training.attention=eager",
                              "training.global_batch=2"};
  built *b;
  const vs_program *p;
  uint64_t dropped;
  size_t n = 0;
  (void)state;
  b = build(sets, 3, 1);
  p = &b->p;
  /* one per layer per micro-batch: 4 * 2 */
  assert_int_equal(count_ops(p, "recompute_attn", ANY, ANY), LAYERS * 2);
  assert_int_equal(count_ops(p, "recompute_layer", ANY, ANY), 0);
  /* It re-creates exactly the tensors selective checkpointing dropped (the
   * s^2 softmax output, dropout mask and dropped-out probabilities), as one
   * temp buffer. */
  dropped = selective_dropped(vs_model_layer(&b->m, 0));
  /* a=4 heads, s=128, b=1: softmax 2*a*s^2 + mask a*s^2 + probs 2*a*s^2
   * = 5 * 4 * 16384 = 327680 B (Korthikanti's 5as^2b term) */
  assert_int_equal(dropped, 327680);
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    const vs_effect *e;
    if (strcmp(vs_op_name(p, op), "recompute_attn") != 0)
      continue;
    n++;
    e = recompute_attn_buffer(p, op, dropped);
    /* It lives until the backward of the first attention-core op (the
     * scores matmul, which needs the recomputed tensors last), in the same
     * layer and micro-batch. */
    {
      uint32_t a, f;
      buffer_ops(p, e->buffer, &a, &f);
      assert_int_equal(a, i);
      assert_true(f != UINT32_MAX);
      assert_string_equal(vs_op_name(p, &p->ops[f]), "attn_scores");
      assert_int_equal(p->ops[f].phase, VS_PHASE_BWD);
      assert_int_equal(vs_op_layer(p, &p->ops[f]), vs_op_layer(p, op));
      assert_int_equal(p->ops[f].microbatch, op->microbatch);
    }
  }
  assert_int_equal(n, LAYERS * 2);
  destroy(b);
}

/* Selective under flash attention is Megatron-LM's core_attn recompute
 * of the flash kernel (attention.py, _checkpointed_attention_forward):
 * its fp32 LSE is dropped, and the kernel re-runs before each backward. */
static void test_selective_flash_reruns_the_kernel(void **state)
{
  const char *const sets[] = {"training.checkpointing=selective",
                              "training.attention=flash",
                              "training.global_batch=2"};
  built *b;
  const vs_program *p;
  const vs_block *layer;
  size_t n = 0;
  (void)state;
  b = build(sets, 3, 1);
  p = &b->p;
  layer = vs_model_layer(&b->m, 0);
  assert_int_equal(count_ops(p, "recompute_attn", ANY, ANY), LAYERS * 2);
  assert_int_equal(count_ops(p, "recompute_layer", ANY, ANY), 0);
  /* a = 4 heads, s = 128, b = 1: the LSE, 4 B a row and head = 2048 B */
  assert_int_equal(selective_dropped(layer), 4 * 4 * 128);
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (strcmp(vs_op_name(p, op), "recompute_attn") != 0)
      continue;
    n++;
    recompute_attn_buffer(p, op, 4 * 4 * 128);
    for (uint32_t k = 0; k < layer->n_ops; k++)
      if (strcmp(layer->ops[k].name, "flash_attn") == 0)
        assert_true(vs_op_kind_of(p, op)->flops == layer->ops[k].fwd_flops);
  }
  assert_int_equal(n, LAYERS * 2);
  destroy(b);
}

/* The run time of the first op named `name` of `phase` in layer 0. */
static uint64_t first_dur_ns(const vs_program *p, const char *name, int phase)
{
  for (size_t i = 0; i < p->n_ops; i++)
    if (p->ops[i].phase == phase && vs_op_layer(p, &p->ops[i]) == 0 &&
        strcmp(vs_op_name(p, &p->ops[i]), name) == 0)
      return vs_op_kind_of(p, &p->ops[i])->dur_ns;
  fail_msg("no %s", name);
  return 0;
}

/* Under context parallelism the selective re-run of the flash kernel
 * repeats its exchange (Megatron-LM's checkpoint re-runs the whole core
 * attention, Transformer Engine's context-parallel one included): longer
 * than the kernel's forward alone; under Ulysses (a2a) it also drops the
 * head-group output, e * s / cp * h = 2 * 2048 * 256 B a layer more. */
static void test_selective_flash_reruns_the_exchange(void **state)
{
  const char *sets[] = {"training.checkpointing=selective",
                        "training.attention=flash", "model.seq_len=4096",
                        "parallel.cp=2", "parallel.cp_comm=p2p"};
  built *b;
  uint64_t p2p_dropped;
  (void)state;
  b = build(sets, 5, 2);
  assert_true(first_dur_ns(&b->p, "recompute_attn", VS_PHASE_RECOMPUTE) >
              first_dur_ns(&b->p, "flash_attn", VS_PHASE_FWD));
  p2p_dropped = selective_dropped(vs_model_layer(&b->m, 0));
  destroy(b);
  sets[4] = "parallel.cp_comm=a2a";
  b = build(sets, 5, 2);
  assert_int_equal(selective_dropped(vs_model_layer(&b->m, 0)) - p2p_dropped,
                   2 * 2048 * 256);
  destroy(b);
}

/* ------------------------------------------------------------------------
 * Tensor parallelism
 * ------------------------------------------------------------------------ */

/* Counts tp collectives named name per layer and pass. A tp collective
 * belongs to the pass of the nearest preceding fwd/bwd compute op. */
static void count_tp(const vs_program *p, const char *name,
                     int counts[][2], int n_layers_plus_2)
{
  int pass = -1;
  for (size_t k = 0; k < p->n_stream_ops[VS_STREAM_COMPUTE]; k++) {
    const vs_pop *op = &p->ops[p->stream_ops[VS_STREAM_COMPUTE][k]];
    if (op->phase == VS_PHASE_FWD)
      pass = 0;
    else if (op->phase == VS_PHASE_BWD)
      pass = 1;
    if (strcmp(vs_op_name(p, op), name) != 0)
      continue;
    assert_int_equal(op->phase, VS_PHASE_TP_COMM);
    assert_true(pass >= 0);
    assert_true(vs_op_layer(p, op) + 1 >= 0 && vs_op_layer(p, op) + 1 < n_layers_plus_2);
    counts[vs_op_layer(p, op) + 1][pass]++;
  }
}

static void test_tp2_all_reduces(void **state)
{
  const char *const sets[] = {"parallel.tp=2"};
  int counts[LAYERS + 2][2];
  built *b;
  const vs_program *p;
  (void)state;
  memset(counts, 0, sizeof counts);
  b = build(sets, 1, 2);
  p = &b->p;
  assert_int_equal(b->lay.tp, 2);
  assert_int_equal(b->lay.dp, 1);
  /* tp collectives ride the compute stream; dp = 1 leaves comm empty */
  assert_int_equal(p->n_stream_ops[VS_STREAM_COMM], 0);
  count_tp(p, "tp_all_reduce", counts, LAYERS + 2);
  for (int l = 0; l < LAYERS; l++) {
    /* Megatron: forward g after attn_out and mlp_down; backward f after
     * qkv and mlp_up (Shoeybi et al. 2019, Fig. 3) */
    assert_int_equal(counts[l + 1][0], 2);
    assert_int_equal(counts[l + 1][1], 2);
  }
  /* vocab-parallel embedding: one forward all-reduce; the output layer's
   * input gradient: one backward all-reduce */
  assert_int_equal(counts[0][0], 1);
  assert_int_equal(counts[0][1], 0);
  assert_int_equal(counts[LAYERS + 1][0], 0);
  assert_int_equal(counts[LAYERS + 1][1], 1);
  assert_int_equal(count_ops(p, "tp_all_gather", ANY, ANY), 0);
  assert_int_equal(count_ops(p, "tp_reduce_scatter", ANY, ANY), 0);
  /* each moves the full activation: 2 bytes * s 128 * b 1 * h 256 */
  for (size_t i = 0; i < p->n_ops; i++)
    if (strcmp(vs_op_name(p, &p->ops[i]), "tp_all_reduce") == 0)
      assert_true(vs_op_kind_of(p, &p->ops[i])->bytes == 2.0 * 128 * 256);
  destroy(b);
}

static void test_tp2_sequence_parallel(void **state)
{
  const char *const sets[] = {"parallel.tp=2", "parallel.sequence_parallel=true"};
  int ag[LAYERS + 2][2], rs[LAYERS + 2][2];
  built *b;
  (void)state;
  memset(ag, 0, sizeof ag);
  memset(rs, 0, sizeof rs);
  b = build(sets, 2, 2);
  /* all-reduces become all-gather + reduce-scatter (Korthikanti Sec. 4.2.2) */
  assert_int_equal(count_ops(&b->p, "tp_all_reduce", ANY, ANY), 0);
  count_tp(&b->p, "tp_all_gather", ag, LAYERS + 2);
  count_tp(&b->p, "tp_reduce_scatter", rs, LAYERS + 2);
  for (int l = 0; l < LAYERS; l++) {
    /* forward: gather before qkv and mlp_up, scatter after attn_out and
     * mlp_down */
    assert_int_equal(ag[l + 1][0], 2);
    assert_int_equal(rs[l + 1][0], 2);
    /* backward: gather the output grad of attn_out and mlp_down, and re-
     * gather the inputs of qkv and mlp_up; scatter their input grads */
    assert_int_equal(ag[l + 1][1], 4);
    assert_int_equal(rs[l + 1][1], 2);
  }
  destroy(b);
}

/* ------------------------------------------------------------------------
 * Roofline
 * ------------------------------------------------------------------------ */

/* The bytes of the one optimizer step of the base model on one GPU with
 * `sets`, as a multiple of its P = 3448320 parameters (header), with 12
 * FLOPs per element (sim/cost: vs_cost_optimizer_work). */
static double step_bytes_on(const char *const *sets, size_t n_sets,
                            uint64_t gpus)
{
  built *b = build(sets, n_sets, gpus);
  const double P = 3448320.0;
  double bytes = -1;
  size_t found = 0;
  for (size_t i = 0; i < b->p.n_ops; i++) {
    const vs_program *p = &b->p;
    const vs_pop *op = &p->ops[i];
    if (strcmp(vs_op_name(p, op), "optimizer_step") != 0)
      continue;
    found++;
    tu_assert_close(vs_op_kind_of(p, op)->flops, 12.0 * P, 0);
    bytes = vs_op_kind_of(p, op)->bytes / P;
  }
  assert_int_equal(found, 1);
  destroy(b);
  return bytes;
}

/* ... on one GPU. */
static double step_bytes_per_param(const char *const *sets, size_t n_sets)
{
  return step_bytes_on(sets, n_sets, 1);
}

/* The recipe's passes around the update for the base model with sets. */
static vs_step_passes passes_of(const char *const *sets, size_t n_sets)
{
  built *b = build(sets, n_sets, 1);
  vs_step_passes p = b->r.step_passes;
  destroy(b);
  return p;
}

/* The optimizer step of the base model on one GPU (bf16, AdamW with fp32
 * master weights, no ZeRO): 12 FLOPs per element, and bytes: optimizer
 * states 12P read and written (24P), bf16 grads 2P read, bf16 weights 2P
 * read and written (4P) = 30P. */
static void test_optimizer_step_work(void **state)
{
  built *b = build(NULL, 0, 1);
  const double P = 3448320.0;
  (void)state;
  tu_assert_close(step_bytes_per_param(NULL, 0), 30.0, 1e-12);
  for (size_t i = 0; i < b->p.n_ops; i++) {
    const vs_program *p = &b->p;
    const vs_pop *op = &p->ops[i];
    if (strcmp(vs_op_name(p, op), "optimizer_step") != 0)
      continue;
    /* memory-bound on an H100 (topologies/h100-sxm-8x.ini): 30P bytes /
     * (3350 GB/s x 0.87) = 35.49 us beats 12P / (67 TFLOP/s x 0.8) */
    assert_int_equal(vs_op_kind_of(p, op)->dur_ns,
                     (uint64_t)ceil(30.0 * P / (3350e9 * 0.87) * 1e9));
  }
  destroy(b);
}

/* The framework's passes around the update (vs_recipe step_wrap), on the
 * same step (30P without them; 32P where the gradients are fp32):
 * - megatron, bf16 (fp32 main grads, 4P: the update reads 4 B, 32P): the
 *   norm (4) and the clip's multiply (8) of each, and over the buffer its
 *   zeroing (4) and the NaN check's norm (4): 32 + 20 = 52;
 * - megatron, fp16 (fp16 grad buffer): main_grad.float() (2 + 4), the
 *   loss scaler's unscaling (8), norm (4), multiply (8); the buffer
 *   zeroed (2), no NaN check with fp16's loss scaler: 30 + 28 = 58;
 * - deepspeed ZeRO-1, bf16: the overflow check (2 + 4 + 5 + 5 + 3 + 5 +
 *   4 = 28), the norm of each gradient's .double() (2 + 8 + 8), the
 *   partition flattened (2 + 2) and cast (2 + 4), the multiply (8):
 *   30 + 64 = 94;
 * - hf, amp_fp16 (fp32 weights and gradients, no master copy: the
 *   moments 16P, gradients 4P, weights 8P, 28P) with gradients zeroed,
 *   not set to None: GradScaler's unscaling (8), clip_grad_norm_'s norm
 *   and multiply (12), the zeroing (4): 28 + 24 = 52;
 * - none: nothing around the update (test_optimizer_step_work), but
 *   with grad_clipping PyTorch's clip_grad_norm_ (2 + 4 of bf16
 *   gradients: 36);
 * - without grad_clipping neither norm nor multiply: megatron bf16
 *   52 - 12 = 40, hf amp_fp16 52 - 12 = 40; DeepSpeed's step takes them
 *   anyway (94);
 * - megatron bf16 over 2 GPUs (dp 2): the buffer also scaled by 1/dp
 *   before its reduction (2 passes more of 4P): 52 + 8 = 60; hf over 2
 *   GPUs as on one;
 * - deepspeed ZeRO-3 fp16: isinf().any() and isnan().any() (2 x (2 +
 *   2)), the .double() norm (18), the sub-group's concatenation (4) and
 *   cast (6), the multiply (8): 30 + 44 = 74;
 * - deepspeed, bf16 at ZeRO-1 with fp32 gradients: BF16_Optimizer (32)
 *   takes the norm of its whole buffer (4) and zeroes it twice
 *   (clear_hp_grads in its step and the engine's zero_grad: 8): 44;
 *   under the pipeline engine without ZeRO, accumulating in bf16, 6 B a
 *   stepped element (the cast) and 3 passes over the buffer;
 * - deepspeed, ZeRO off: fp16's FP16_Optimizer its overflow check (6 +
 *   4), cast (6), flatten (8), norm (4) and multiply (8): 30 + 36 = 66,
 *   and bf16's too (DDP_BFLOAT16, FP16_Optimizer in bf16); fp32 (no
 *   master: moments
 *   16P, gradients 4P, weights 8P, 28P) clips with the engine's
 *   clip_fp32_gradients (4 + 8) only with grad_clipping: 40 and 28. */
static void test_optimizer_step_wrap(void **state)
{
  static const char *const mg_bf16[] = {"training.framework=megatron"};
  static const char *const mg_fp16[] = {"training.framework=megatron",
                                        "training.precision=fp16"};
  static const char *const ds_zero1[] = {"training.framework=deepspeed",
                                         "parallel.zero=1"};
  static const char *const hf_fp16[] = {"training.framework=hf",
                                        "training.precision=amp_fp16",
                                        "training.set_grads_to_none=false"};
  static const char *const none_clip[] = {"training.grad_clipping=true"};
  static const char *const mg_off[] = {"training.framework=megatron",
                                       "training.grad_clipping=false"};
  static const char *const hf_off[] = {
      "training.framework=hf", "training.precision=amp_fp16",
      "training.set_grads_to_none=false", "training.grad_clipping=false"};
  static const char *const ds_off[] = {"training.framework=deepspeed",
                                       "parallel.zero=1",
                                       "training.grad_clipping=false"};
  static const char *const ds_zero3[] = {"training.framework=deepspeed",
                                         "parallel.zero=3",
                                         "training.precision=fp16"};
  static const char *const ds_bf16[] = {"training.framework=deepspeed"};
  static const char *const ds_bf16_z1[] = {"training.framework=deepspeed",
                                           "parallel.zero=1",
                                           "training.grad_dtype=fp32"};
  static const char *const ds_fp16[] = {"training.framework=deepspeed",
                                        "training.precision=fp16"};
  static const char *const ds_fp32[] = {"training.framework=deepspeed",
                                        "training.precision=fp32"};
  static const char *const ds_fp32_off[] = {"training.framework=deepspeed",
                                            "training.precision=fp32",
                                            "training.grad_clipping=false"};
  (void)state;
  tu_assert_close(step_bytes_per_param(mg_bf16, 1), 52.0, 1e-12);
  tu_assert_close(step_bytes_per_param(mg_fp16, 2), 58.0, 1e-12);
  tu_assert_close(step_bytes_per_param(ds_zero1, 2), 94.0, 1e-12);
  tu_assert_close(step_bytes_per_param(hf_fp16, 3), 52.0, 1e-12);
  tu_assert_close(step_bytes_per_param(none_clip, 1), 36.0, 1e-12);
  tu_assert_close(step_bytes_per_param(mg_off, 2), 40.0, 1e-12);
  tu_assert_close(step_bytes_per_param(hf_off, 4), 40.0, 1e-12);
  tu_assert_close(step_bytes_per_param(ds_off, 3), 94.0, 1e-12);
  tu_assert_close(step_bytes_on(mg_bf16, 1, 2), 60.0, 1e-12);
  /* the Trainer's zeroing over dp 2 writes the gradients, not DDP's
   * bucket copy of them: 52 as on one GPU */
  tu_assert_close(step_bytes_on(hf_fp16, 3, 2), 52.0, 1e-12);
  tu_assert_close(step_bytes_per_param(ds_zero3, 3), 74.0, 1e-12);
  tu_assert_close(step_bytes_per_param(ds_bf16, 1), 66.0, 1e-12);
  tu_assert_close(step_bytes_per_param(ds_bf16_z1, 3), 44.0, 1e-12);
  {
    /* bf16 without ZeRO under the pipeline engine: BF16_Optimizer
     * accumulating in bf16, the partition's cast to fp32 for the update
     * (2 + 4) around it, its whole buffer's norm and two zeroings */
    static const char *const ds_bf16_pp[] = {"training.framework=deepspeed",
                                             "parallel.pp=2"};
    built *b = build(ds_bf16_pp, 2, 2);
    tu_assert_close(b->r.step_passes.wrap, 6.0, 1e-12);
    tu_assert_close(b->r.step_passes.buffer, 3.0, 1e-12);
    destroy(b);
  }
  tu_assert_close(step_bytes_per_param(ds_fp16, 2), 66.0, 1e-12);
  tu_assert_close(step_bytes_per_param(ds_fp32, 2), 40.0, 1e-12);
  tu_assert_close(step_bytes_per_param(ds_fp32_off, 3), 28.0, 1e-12);
}

/* Where the step has no passes around the update, or other gradients:
 * an optimizer in backward and one on the host move none (the host's are
 * not priced); fp32 LoRA adapters under hf are stepped as fp32 gradients
 * (norm 4 + multiply 8), bf16 ones as bf16 (2 + 4). */
static void test_optimizer_step_wrap_cases(void **state)
{
  static const char *const in_bwd[] = {"training.framework=hf",
                                       "training.precision=bf16",
                                       "training.optimizer_in_backward=true",
                                       "training.set_grads_to_none=false"};
  static const char *const host[] = {"training.framework=deepspeed",
                                     "parallel.zero=2",
                                     "parallel.offload_optimizer=cpu"};
  static const char *const lora[] = {"training.framework=hf",
                                     "training.precision=bf16",
                                     "finetune.method=lora"};
  static const char *const lora16[] = {
      "training.framework=hf", "training.precision=bf16",
      "finetune.method=lora", "finetune.adapter_dtype=bf16"};
  vs_step_passes p;
  (void)state;
  p = passes_of(in_bwd, 4);
  tu_assert_close(p.wrap, 0, 0);
  tu_assert_close(p.buffer, 0, 0);
  p = passes_of(host, 3);
  tu_assert_close(p.wrap, 0, 0);
  tu_assert_close(p.buffer, 0, 0);
  tu_assert_close(passes_of(lora, 3).wrap, 12.0, 0);
  tu_assert_close(passes_of(lora16, 4).wrap, 6.0, 0);
}

/* How many of b's ops are named name, each checked to move `bytes`. */
static size_t ops_moving(const built *b, const char *name, double bytes)
{
  size_t found = 0;
  for (size_t i = 0; i < b->p.n_ops; i++) {
    const vs_pop *op = &b->p.ops[i];
    if (strcmp(vs_op_name(&b->p, op), name) != 0)
      continue;
    found++;
    tu_assert_close(vs_op_kind_of(&b->p, op)->bytes, bytes, 0);
  }
  return found;
}

/* ZeRO-1 all-gathers after the step only what the optimizer updated:
 * with LoRA (rank 8 on q and v, fp32 adapters) the base model's
 * 3448320 frozen parameters stay, and the gather moves the adapters,
 * 4 layers x 2 x 8 x (256 + 256) = 32768 fp32 elements: 131072 bytes
 * (it moved every parameter). Full training gathers all: 2 B x P. */
static void test_updated_gather_is_trainable(void **state)
{
  static const char *const lora[] = {"parallel.zero=1", "finetune.method=lora"};
  static const char *const full[] = {"parallel.zero=1"};
  const char *const *sets[] = {lora, full};
  const size_t n_sets[] = {2, 1};
  const double want[] = {131072.0, 2.0 * 3448320.0};
  (void)state;
  for (int c = 0; c < 2; c++) {
    built *b = build(sets[c], n_sets[c], 2);
    assert_int_equal(ops_moving(b, "zero_param_all_gather", want[c]), 1);
    destroy(b);
  }
}

/* With the parameters on the host or NVMe and the optimizer on the GPU,
 * the step sends back the updated parameters only: with LoRA the
 * adapters' 32768 fp32 elements (131072 bytes), this GPU's half of them
 * over dp 2, 65536 bytes, to the host and on to NVMe (they sent the
 * whole frozen base's shard). */
static void test_updated_params_go_back(void **state)
{
  static const char *const host[] = {"parallel.zero=3", "finetune.method=lora",
                                     "parallel.offload_params=cpu"};
  static const char *const nvme[] = {"parallel.zero=3", "finetune.method=lora",
                                     "parallel.offload_params=nvme"};
  const char *const *sets[] = {host, nvme};
  const size_t n_sets[] = {3, 3};
  (void)state;
  for (int c = 0; c < 2; c++) {
    built *b = build(sets[c], n_sets[c], 2);
    assert_int_equal(ops_moving(b, "params_to_host", 65536.0), 1);
    assert_int_equal(ops_moving(b, "params_swap_out", 65536.0), (size_t)c);
    destroy(b);
  }
}

/* Tied embeddings split over a pipeline: the first (and last) stage
 * all-reduce the word embedding's gradient between the two of them
 * (Megatron's embedding group): padded vocab 1000 (vocab_divisible_by 1)
 * x hidden 256 x 2 bytes (bf16 grads) = 512000 bytes, over 2 ranks: a ring
 * all-reduce of 2 x (2 - 1) = 2 steps of 256000 bytes each on NVLink
 * (stages 0 and 1 are GPUs 0 and 1 of one node): 2 x (3 us + 256000 B /
 * 450 GB/s). Untied, or without a pipeline, there is none. */
static void test_tied_embedding_all_reduce(void **state)
{
  static const char *const tied[] = {"parallel.pp=2"};
  static const char *const untied[] = {"parallel.pp=2",
                                       "model.tied_embeddings=false"};
  built *b = build(tied, 1, 2);
  size_t found = 0;
  (void)state;
  for (size_t i = 0; i < b->p.n_ops; i++) {
    const vs_program *p = &b->p;
    const vs_pop *op = &p->ops[i];
    if (strcmp(vs_op_name(p, op), "embedding_all_reduce") != 0)
      continue;
    found++;
    assert_int_equal(op->stream, VS_STREAM_COMM);
    tu_assert_close(vs_op_kind_of(p, op)->bytes, 512000.0, 0);
    assert_int_equal(vs_op_kind_of(p, op)->dur_ns,
                     (uint64_t)ceil(2.0 * (3e-6 + 256000.0 / 450e9) * 1e9));
  }
  assert_int_equal(found, 1);
  destroy(b);
  b = build(untied, 2, 2);
  assert_int_equal(count_ops(&b->p, "embedding_all_reduce", ANY, ANY), 0);
  destroy(b);
  b = build(NULL, 0, 1);
  assert_int_equal(count_ops(&b->p, "embedding_all_reduce", ANY, ANY), 0);
  destroy(b);
}

/* Flash attention at FlashAttention-2's measured rate: at 4096 tokens,
 * head dim 64, causal, the H100's table gives 257 TFLOP/s forward +
 * backward, far below the GEMM rate (0.8 x 989), and the op is
 * compute-bound there: its forward takes its FLOPs at 257 TFLOP/s and one
 * kernel's floor, its backward (2.5 x the FLOPs) three floors. */
static void test_flash_at_its_measured_rate(void **state)
{
  static const char *const long_seq[] = {"model.seq_len=4096"};
  built *b = build(long_seq, 1, 1);
  const vs_block *l0 = vs_model_layer(&b->m, 0);
  const vs_op_spec *flash = NULL;
  size_t found = 0;
  (void)state;
  for (uint32_t k = 0; k < l0->n_ops; k++)
    if (l0->ops[k].flash.seq)
      flash = &l0->ops[k];
  assert_non_null(flash);
  assert_true(flash->flash.seq == 4096 && flash->flash.head_dim == 64 &&
              flash->flash.causal);
  for (size_t i = 0; i < b->p.n_ops; i++) {
    const vs_program *p = &b->p;
    const vs_pop *op = &p->ops[i];
    if (vs_op_layer(p, op) != 0 || op->microbatch != 0 ||
        strcmp(vs_op_name(p, op), flash->name) != 0)
      continue;
    if (op->phase == VS_PHASE_FWD)
      assert_int_equal(vs_op_kind_of(p, op)->dur_ns,
                       (uint64_t)ceil((flash->fwd_flops / 257e12 + 3e-6) * 1e9));
    else
      assert_int_equal(vs_op_kind_of(p, op)->dur_ns,
                       (uint64_t)ceil((2.5 * flash->fwd_flops / 257e12 + 9e-6) *
                                      1e9));
    found++;
  }
  assert_int_equal(found, 2);
  destroy(b);
  {
    /* under context parallelism: this rank's 2048 queries, the
     * bidirectional rates (only the diagonal blocks are causal) */
    static const char *const cp[] = {"model.seq_len=4096", "parallel.cp=2"};
    b = build(cp, 2, 2);
    l0 = vs_model_layer(&b->m, 0);
    found = 0;
    for (uint32_t k = 0; k < l0->n_ops; k++)
      if (l0->ops[k].flash.seq) {
        assert_true(l0->ops[k].flash.seq == 2048 && !l0->ops[k].flash.causal);
        found++;
      }
    assert_int_equal(found, 1);
    destroy(b);
  }
}

/* A GEMM op's backward is its input gradient's GEMM and its weight
 * gradient's, each priced by its own shape (dA: m x k over n; dW: k x n
 * over m) and launched as its own kernel. */
static void test_backward_gemms_by_shape(void **state)
{
  built *b = build(NULL, 0, 1);
  const vs_program *p = &b->p;
  size_t found = 0;
  (void)state;
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    const vs_block *blk = vs_model_layer(&b->m, 0);
    if (op->phase != VS_PHASE_BWD || vs_op_layer(p, op) != 0 || op->microbatch != 0)
      continue;
    for (uint32_t k = 0; k < blk->n_ops; k++) {
      const vs_op_spec *o = &blk->ops[k];
      double t;
      if (strcmp(o->name, vs_op_name(p, op)) != 0 || !o->gemm.batch)
        continue;
      assert_true(o->bwd_flops == 2.0 * o->fwd_flops);
      t = vs_cost_gemm_seconds(&b->topo, VS_PREC_BF16, vs_gemm_dgrad(o->gemm),
                               o->fwd_flops, o->fwd_bytes, NULL) +
          vs_cost_gemm_seconds(&b->topo, VS_PREC_BF16, vs_gemm_wgrad(o->gemm),
                               o->fwd_flops, o->bwd_bytes - o->fwd_bytes,
                               NULL) +
          2 * 3e-6;
      assert_int_equal(vs_op_kind_of(p, op)->dur_ns, (uint64_t)ceil(t * 1e9));
      found++;
    }
  }
  assert_true(found >= 4); /* qkv, out, mlp up, mlp down */
  destroy(b);
}

/* Op `name`'s duration in layer 0, micro-batch 0, phase `phase`. */
static uint64_t layer0_dur_ns(const vs_program *p, const char *name,
                              int phase)
{
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (op->phase == phase && vs_op_layer(p, op) == 0 &&
        op->microbatch == 0 && strcmp(vs_op_name(p, op), name) == 0)
      return vs_op_kind_of(p, op)->dur_ns;
  }
  fail_msg("no %s in layer 0", name);
  return 0;
}

/* Under autocast the casts are kernels of their own, after one another
 * on the stream, so their time adds to the GEMM's instead of hiding under
 * it. GPT's fused QKV projection (128 tokens, hidden 256, 768 outputs)
 * casts its fp32 weight (4 B read, 2 B written: 6 x 256 x 768) and its
 * fp32 input (6 x 128 x 256) forward; backward casts the input's
 * gradient (16 to 32 bits, 6 x 128 x 256) and the weight's. */
static void test_autocast_casts_are_kernels_of_their_own(void **state)
{
  static const char *const amp[] = {"training.precision=amp_bf16"};
  built *b = build(amp, 1, 1);
  const vs_block *l0 = vs_model_layer(&b->m, 0);
  const vs_op_spec *o = &l0->ops[1];
  double gemm, side, t;
  (void)state;
  assert_string_equal(o->name, "qkv_proj");
  assert_true(o->fwd_side.bytes == 6.0 * 256 * 768 + 6.0 * 128 * 256);
  assert_int_equal(o->fwd_side.kernels, 2);
  assert_true(o->wgrad_side.bytes == 6.0 * 256 * 768);
  assert_int_equal(o->wgrad_side.kernels, 1);
  assert_true(o->bwd_side.bytes == 6.0 * 128 * 256);
  assert_int_equal(o->bwd_side.kernels, 1);
  gemm = o->fwd_bytes - o->fwd_side.bytes;
  t = vs_cost_gemm_seconds(&b->topo, VS_PREC_BF16, o->gemm, o->fwd_flops,
                           gemm, NULL) +
      vs_cost_roofline_seconds(&b->topo, VS_PREC_BF16, VS_FLOPS_OTHER, 0,
                               o->fwd_side.bytes, NULL) +
      3 * 3e-6;
  assert_true(llabs((long long)layer0_dur_ns(&b->p, o->name, VS_PHASE_FWD) -
                    (long long)ceil(t * 1e9)) <= 1);
  side = o->bwd_side.bytes + o->wgrad_side.bytes;
  t = vs_cost_gemm_seconds(&b->topo, VS_PREC_BF16, vs_gemm_dgrad(o->gemm),
                           o->fwd_flops, gemm, NULL) +
      vs_cost_gemm_seconds(&b->topo, VS_PREC_BF16, vs_gemm_wgrad(o->gemm),
                           o->fwd_flops, o->bwd_bytes - side - gemm, NULL) +
      vs_cost_roofline_seconds(&b->topo, VS_PREC_BF16, VS_FLOPS_OTHER, 0, side,
                               NULL) +
      4 * 3e-6;
  assert_true(llabs((long long)layer0_dur_ns(&b->p, o->name, VS_PHASE_BWD) -
                    (long long)ceil(t * 1e9)) <= 1);
  destroy(b);
}

/* Op `name`'s backward in layer 0, micro-batch mb. */
static const vs_op_kind *layer0_bwd_of(const vs_program *p, const char *name,
                                       int mb)
{
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (op->phase == VS_PHASE_BWD && vs_op_layer(p, op) == 0 &&
        op->microbatch == mb && strcmp(vs_op_name(p, op), name) == 0)
      return vs_op_kind_of(p, op);
  }
  fail_msg("no backward %s in layer 0, micro-batch %d", name, mb);
  return NULL;
}

static const vs_op_kind *layer0_bwd(const vs_program *p, const char *name)
{
  return layer0_bwd_of(p, name, 0);
}

/* With kernels = eager each backward adds the new weight gradients into
 * the resident ones (AccumulateGrad), a kernel a parameter, and so does
 * every backward but a step's first where the step sets them to None:
 * GPT's QKV
 * weight and bias (256 x 768 + 768 bf16 elements: 2 B read twice and 2 B
 * written). Its LayerNorm stays one fused kernel, and GPT has no rotary
 * embedding, so that is all QKV's backward gains. Under ZeRO-2 backward
 * makes the gradients and reduce-scatters them: nothing to add into. */
static void test_eager_backward_accumulates_gradients(void **state)
{
  static const char *const eager[] = {"training.kernels=eager"};
  static const char *const zero2[] = {"parallel.zero=2"};
  static const char *const zero2_eager[] = {"parallel.zero=2",
                                            "training.kernels=eager"};
  const double acc = 6.0 * (256 * 768 + 768);
  built *f = build(NULL, 0, 1), *e = build(eager, 1, 1);
  const vs_op_kind *kf = layer0_bwd(&f->p, "qkv_proj");
  const vs_op_kind *ke = layer0_bwd(&e->p, "qkv_proj");
  double t = vs_cost_roofline_seconds(&e->topo, VS_PREC_BF16, VS_FLOPS_OTHER, 0,
                                      acc, NULL) +
             2 * 3e-6;
  (void)state;
  assert_true(ke->bytes - kf->bytes == acc);
  assert_true(llabs((long long)(ke->dur_ns - kf->dur_ns) -
                    (long long)llround(t * 1e9)) <= 1);
  destroy(f);
  destroy(e);
  f = build(zero2, 1, 2);
  e = build(zero2_eager, 2, 2);
  assert_true(layer0_bwd(&e->p, "qkv_proj")->bytes ==
              layer0_bwd(&f->p, "qkv_proj")->bytes);
  assert_int_equal(layer0_bwd(&e->p, "qkv_proj")->dur_ns,
                   layer0_bwd(&f->p, "qkv_proj")->dur_ns);
  destroy(f);
  destroy(e);
  {
    /* The Trainer (framework = hf: eager, autocast's fp32 weights) sets
     * the gradients to None at each step: the step's first backward makes
     * them, the second adds into them, 4 B read twice and written */
    static const char *const hf[] = {"training.framework=hf",
                                     "training.global_batch=2"};
    e = build(hf, 2, 1);
    assert_true(layer0_bwd_of(&e->p, "qkv_proj", 1)->bytes -
                    layer0_bwd_of(&e->p, "qkv_proj", 0)->bytes ==
                12.0 * (256 * 768 + 768));
    assert_true(layer0_bwd_of(&e->p, "qkv_proj", 1)->dur_ns >
                layer0_bwd_of(&e->p, "qkv_proj", 0)->dur_ns);
    destroy(e);
  }
}

/* Whether op `name` of layer 0's backward in micro-batch mb allocates and
 * frees a temporary of exactly `bytes` itself. */
static bool has_transient(const vs_program *p, const char *name, int mb,
                          uint64_t bytes)
{
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (op->phase != VS_PHASE_BWD || vs_op_layer(p, op) != 0 ||
        op->microbatch != mb || strcmp(vs_op_name(p, op), name) != 0)
      continue;
    for (uint32_t k = op->first_effect; k < vs_op_effects_end(p, op); k++) {
      const vs_effect *e = &p->effects[k];
      uint32_t a, f;
      buffer_ops(p, e->buffer, &a, &f);
      if (!e->is_free && a == i && f == i &&
          vs_program_buffer(p, e->buffer)->bytes == bytes)
        return true;
    }
  }
  return false;
}

/* Megatron-LM without gradient-accumulation fusion
 * (--no-gradient-accumulation-fusion) adds each bf16 weight gradient into
 * its fp32 main gradient in a kernel of its own
 * (param.main_grad.add_(param.grad)): 4 B and 2 B read and 4 B written an
 * element of GPT's QKV weight and bias, in every micro-batch, since the
 * main gradients are zeroed, never None; with the fusion (the default)
 * the GEMM adds. The new bf16 gradients are the op's temporaries until
 * added (the weight's 256 x 768 and the bias's 768 elements, 2 B each). */
static void test_unfused_grad_accumulation(void **state)
{
  static const char *const fused[] = {"training.framework=megatron",
                                      "training.global_batch=2"};
  static const char *const unfused[] = {
      "training.framework=megatron", "training.global_batch=2",
      "training.grad_accumulation_fusion=false"};
  const double acc = 10.0 * (256 * 768 + 768);
  built *f = build(fused, 2, 1), *u = build(unfused, 3, 1);
  (void)state;
  for (int mb = 0; mb < 2; mb++) {
    const vs_op_kind *kf = layer0_bwd_of(&f->p, "qkv_proj", mb);
    const vs_op_kind *ku = layer0_bwd_of(&u->p, "qkv_proj", mb);
    double t = vs_cost_roofline_seconds(&u->topo, VS_PREC_BF16, VS_FLOPS_OTHER,
                                        0, acc, NULL) +
               2 * 3e-6;
    assert_true(ku->bytes - kf->bytes == acc);
    assert_true(llabs((long long)(ku->dur_ns - kf->dur_ns) -
                      (long long)llround(t * 1e9)) <= 1);
    assert_true(has_transient(&u->p, "qkv_proj", mb, 2 * (256 * 768 + 768)));
    assert_false(
        has_transient(&f->p, "qkv_proj", mb, 2 * (256 * 768 + 768)));
  }
  destroy(f);
  destroy(u);
  {
    /* LoRA: the frozen QKV weight has no gradient to add; its adapters do */
    static const char *const lora[] = {"finetune.method=lora",
                                       "training.global_batch=2"};
    static const char *const lora_u[] = {
        "finetune.method=lora", "training.global_batch=2",
        "training.grad_accumulation_fusion=false"};
    f = build(lora, 2, 1);
    u = build(lora_u, 3, 1);
    assert_true(layer0_bwd_of(&u->p, "qkv_proj", 1)->bytes ==
                layer0_bwd_of(&f->p, "qkv_proj", 1)->bytes);
    assert_true(layer0_bwd_of(&u->p, "lora_qkv", 1)->bytes >
                layer0_bwd_of(&f->p, "lora_qkv", 1)->bytes);
    destroy(f);
    destroy(u);
  }
  {
    /* FSDP2 under a pipeline adds each micro-batch's 16-bit gradients
     * into its unsharded fp32 ones (4 B and 2 B read, 4 B written) */
    static const char *const piped[] = {
        "training.framework=fsdp2", "parallel.pp=2", "parallel.dp=2",
        "training.global_batch=4"};
    const vs_kind_plan *plan;
    const vs_block *blk;
    uint32_t k = 0;
    u = build(piped, 4, 4);
    plan = &u->r.kinds[u->m.inst_kind[1]];
    blk = vs_model_block(&u->m, 1);
    while (strcmp(blk->ops[k].name, "qkv_proj") != 0)
      k++;
    assert_true(layer0_bwd_of(&u->p, "qkv_proj", 1)->bytes -
                    plan->bwd_bytes[k] ==
                10.0 * (256 * 768 + 768));
    destroy(u);
  }
}

/* The bytes of layer 0's recompute_layer in micro-batch 0. */
static double layer0_recompute_bytes(const vs_program *p)
{
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (op->phase == VS_PHASE_RECOMPUTE && vs_op_layer(p, op) == 0 &&
        op->microbatch == 0 &&
        strcmp(vs_op_name(p, op), "recompute_layer") == 0)
      return vs_op_kind_of(p, op)->bytes;
  }
  fail_msg("no recompute_layer in layer 0");
  return 0;
}

/* torchtitan's op-level checkpointing keeps some matmuls' outputs and
 * re-runs the rest, but no policy keeps a rotary embedding's or a
 * residual add's output: a recompute re-runs them whole, whatever share
 * of their op's GEMM it re-runs (none of mlp_down's, whose residual add
 * it still re-runs). Llama, 128 tokens, hidden 256, 4 heads of q and k:
 * the eager rotary embedding moves 10 x 2 bytes an element of q and k
 * (2 x 128 x 256) where the fused one moves 2 x 2; each add moves 3 x 2
 * of 128 x 256 either way. */
static void test_eager_recompute_reruns_elementwise_ops(void **state)
{
  static const char llama[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 256\nheads = 4\n"
      "ffn_hidden = 512\nvocab = 1000\nseq_len = 128\n"
      "[training]\nprecision = bf16\ncheckpointing = ops\n";
  static const char *const eager[] = {"training.kernels=eager"};
  built *f = build_model_stage(llama, NULL, 0, 1, 0);
  built *e = build_model_stage(llama, eager, 1, 1, 0);
  const vs_block *lf = vs_model_layer(&f->m, 0), *le = vs_model_layer(&e->m, 0);
  double expect = 0;
  (void)state;
  /* what eager changes beside the whole element-wise work: the norms'
   * and the SwiGLU product's own bytes, at their ops' shares */
  for (uint32_t k = 0; k < le->n_ops; k++)
    expect += le->ops[k].recompute_share *
              (le->ops[k].fwd_bytes - le->ops[k].fwd_eager.bytes -
               (lf->ops[k].fwd_bytes - lf->ops[k].fwd_eager.bytes));
  tu_assert_close(layer0_recompute_bytes(&e->p) -
                      layer0_recompute_bytes(&f->p),
                  expect + (20.0 - 4.0) * 2 * 128 * 256, 1e-12);
  /* the fused layer's recompute re-runs its rotary embedding and adds */
  expect = (4.0 * 2 + 2 * 6.0) * 128 * 256;
  for (uint32_t k = 0; k < lf->n_ops; k++)
    expect += lf->ops[k].recompute_share *
              (lf->ops[k].fwd_bytes - lf->ops[k].fwd_eager.bytes);
  tu_assert_close(layer0_recompute_bytes(&f->p), expect, 1e-12);
  destroy(f);
  destroy(e);
}

static void test_op_durations_follow_roofline(void **state)
{
  built *b = build(NULL, 0, 1);
  const vs_program *p = &b->p;
  double compute = 0;
  (void)state;
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    if (op->phase == VS_PHASE_FWD && vs_op_layer(p, op) == 0) {
      const vs_op_spec *spec = NULL;
      double t;
      for (uint32_t k = 0; k < vs_model_layer(&b->m, 0)->n_ops; k++)
        if (strcmp(vs_model_layer(&b->m, 0)->ops[k].name, vs_op_name(p, op)) == 0)
          spec = &vs_model_layer(&b->m, 0)->ops[k];
      assert_non_null(spec);
      /* a GEMM by its shape, anything else by the roofline, each kernel
       * kernel_floor (3 us) more */
      t = spec->gemm.batch
              ? vs_cost_gemm_seconds(&b->topo, VS_PREC_BF16, spec->gemm,
                                     spec->fwd_flops, spec->fwd_bytes, NULL)
          : spec->flash.seq
              ? vs_cost_flash_seconds(&b->topo, VS_PREC_BF16, spec->flash,
                                      spec->fwd_flops, spec->fwd_bytes, NULL)
              : vs_cost_roofline_seconds(
                    &b->topo, VS_PREC_BF16,
                    spec->matmul ? VS_FLOPS_MATMUL : VS_FLOPS_OTHER,
                    spec->fwd_flops, spec->fwd_bytes, NULL);
      t += 3e-6 * spec->fwd_kernels;
      /* durations are that rounded up to a whole nanosecond */
      assert_int_equal(vs_op_kind_of(p, op)->dur_ns, (uint64_t)ceil(t * 1e9));
    }
    if (op->stream == VS_STREAM_COMPUTE)
      compute += (double)vs_op_kind_of(p, op)->dur_ns * 1e-9;
  }
  /* compute_seconds sums the compute stream */
  tu_assert_close(p->compute_seconds, compute, 1e-12);
  destroy(b);
}

/* The compute ops' times split by bound add up to their durations (to the
 * nanosecond each is rounded up to), and the launch part is 3 us a
 * kernel: each forward op of layer 0 is one kernel (its norms, GEMMs,
 * flash attention, elementwise ops). */
static void test_bound_split_adds_up(void **state)
{
  built *b = build(NULL, 0, 1);
  const vs_program *p = &b->p;
  double ops = 0, split = 0;
  size_t n = 0;
  (void)state;
  for (size_t i = 0; i < p->n_stream_ops[VS_STREAM_COMPUTE]; i++) {
    const vs_pop *op = &p->ops[p->stream_ops[VS_STREAM_COMPUTE][i]];
    if (op->phase != VS_PHASE_TP_COMM && op->phase != VS_PHASE_EP_COMM &&
        op->phase != VS_PHASE_CP_COMM) {
      ops += (double)vs_op_kind_of(p, op)->dur_ns * 1e-9;
      n++;
    }
  }
  for (int k = 0; k < VS_BOUND_SPLIT_N; k++) {
    assert_true(p->bound_seconds[k] >= 0);
    split += p->bound_seconds[k];
  }
  assert_true(split <= ops && ops - split <= (double)n * 1e-9);
  assert_true(p->bound_seconds[VS_BOUND_MATH] > 0);
  assert_true(p->bound_seconds[VS_BOUND_MEMORY] > 0);
  assert_true(p->bound_seconds[VS_BOUND_COMM] == 0); /* no recompute */
  {
    unsigned kernels = 0;
    const vs_block *l0 = vs_model_layer(&b->m, 0);
    for (uint32_t k = 0; k < l0->n_ops; k++)
      kernels += l0->ops[k].fwd_kernels;
    assert_int_equal(kernels, l0->n_ops);
  }
  assert_true(p->bound_seconds[VS_BOUND_LAUNCH] > 0);
  destroy(b);
}

/* A job's settings besides a global batch of 8 (up to 4, NULL ended). */
typedef const char *const job_config[5];

/* What each_stage checks on one built stage: b, built from sets on gpus
 * GPUs. */
typedef void stage_check(built *b, const char *const *sets, size_t n_sets,
                         uint64_t gpus, void *ctx);

/* Builds every pipeline stage of each config (a global batch of 8 and
 * its settings) on gpus[c] GPUs and checks it. */
static void each_stage(const job_config *configs, size_t n_configs,
                       const uint64_t *gpus, stage_check *check, void *ctx)
{
  for (size_t c = 0; c < n_configs; c++) {
    const char *sets[6] = {"training.global_batch=8"};
    size_t n = 1;
    while (n < 6 && configs[c][n - 1])
      sets[n] = configs[c][n - 1], n++;
    for (uint64_t stage = 0;; stage++) {
      built *b = build_stage(sets, n, gpus[c], stage);
      uint64_t pp = b->lay.pp;
      check(b, sets, n, gpus[c], ctx);
      destroy(b);
      if (stage + 1 >= pp)
        break;
    }
  }
}

/* Whether phase is one of a compute op (priced with a split). */
static bool compute_phase(int phase)
{
  return phase == VS_PHASE_SETUP || phase == VS_PHASE_FWD ||
         phase == VS_PHASE_BWD || phase == VS_PHASE_RECOMPUTE ||
         phase == VS_PHASE_OPTIMIZER;
}

/* op's run of `seconds` split by vs_op_bounds: the parts add up to it,
 * and an op priced as a whole goes wholly to `whole`'s bound. */
static void assert_bounds_of(const vs_program *p, const vs_pop *op,
                             double seconds, int whole)
{
  double part[VS_BOUND_N], sum = 0;
  vs_op_bounds(p, op, seconds, part);
  for (int k = 0; k < VS_BOUND_N; k++) {
    assert_true(isfinite(part[k]) && part[k] >= 0);
    assert_true(whole < 0 || k == whole || part[k] == 0);
    /* a compute op's parts are its priced split's */
    assert_true(whole >= 0 || k < VS_BOUND_SPLIT_N || part[k] == 0);
    sum += part[k];
  }
  assert_true(fabs(sum - seconds) <= 1e-12 * seconds);
  if (whole >= 0)
    assert_true(part[whole] == seconds);
}

/* One program's ops split by what bounds them: a compute op as it was
 * priced (its split adds up to its duration, to the nanosecond it is
 * rounded up to, and over the program to bound_seconds, with nothing on
 * copies or the CPU); a collective or a send wholly on the wire, an
 * offload copy wholly a transfer, the CPU's optimizer step wholly the
 * CPU's, whatever their run took (2.5 s here). Counts each kind of
 * bound met in seen. */
static void assert_program_bounds(const vs_program *p, size_t seen[])
{
  double sums[VS_BOUND_SPLIT_N] = {0};
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    const vs_op_kind *k = vs_op_kind_of(p, op);
    double dur = (double)k->dur_ns * 1e-9, split = 0;
    for (int b = 0; b < VS_BOUND_SPLIT_N; b++) {
      split += k->split_s[b];
      sums[b] += k->split_s[b];
    }
    if (compute_phase(op->phase)) {
      assert_true(split <= dur && dur - split <= 1e-9);
      assert_bounds_of(p, op, dur, -1);
      seen[VS_BOUND_MATH] += k->split_s[VS_BOUND_MATH] > 0;
      continue;
    }
    assert_true(split == 0);
    int whole = op->phase != VS_PHASE_OFFLOAD ? VS_BOUND_COMM
                : strcmp(k->name, "cpu_optimizer_step") == 0
                    ? VS_BOUND_CPU
                    : VS_BOUND_TRANSFER;
    assert_bounds_of(p, op, 2.5, whole);
    seen[whole]++;
  }
  for (int b = 0; b < VS_BOUND_SPLIT_N; b++)
    tu_assert_close(sums[b], p->bound_seconds[b], 1e-9);
}

static void check_program_bounds(built *b, const char *const *sets,
                                 size_t n_sets, uint64_t gpus, void *seen)
{
  (void)sets, (void)n_sets, (void)gpus;
  assert_program_bounds(&b->p, seen);
}

/* Every stage of jobs with collectives, sends, recompute, offload copies
 * to the host and NVMe and the CPU's optimizer step: their ops split by
 * what bounds them (assert_program_bounds), each bound met. */
static void test_op_bounds_by_what_ops_do(void **state)
{
  static job_config configs[] = {
      {"parallel.tp=2", "training.checkpointing=full", NULL},
      {"parallel.pp=2", "parallel.dp=2", "parallel.zero=1", NULL},
      {"parallel.zero=2", "parallel.dp=2", "parallel.offload_optimizer=cpu",
       NULL},
      {"parallel.zero=3", "parallel.offload_params=nvme",
       "parallel.offload_optimizer=nvme", NULL},
      {"training.offload_activations=cpu", "training.checkpointing=full",
       NULL},
  };
  static const uint64_t gpus[] = {2, 4, 2, 1, 1};
  size_t seen[VS_BOUND_N] = {0};
  (void)state;
  each_stage(configs, sizeof configs / sizeof configs[0], gpus,
             check_program_bounds, seen);
  for (int b = 0; b < VS_BOUND_N; b++)
    if (b != VS_BOUND_MEMORY && b != VS_BOUND_LAUNCH)
      assert_true(seen[b] > 0);
}

static void test_names(void **state)
{
  (void)state;
  assert_string_equal(vs_stream_name(VS_STREAM_COMPUTE), "compute");
  assert_string_equal(vs_stream_name(VS_STREAM_COMM), "comm");
  assert_string_equal(vs_phase_name(VS_PHASE_SETUP), "setup");
  assert_string_equal(vs_phase_name(VS_PHASE_RECOMPUTE), "recompute");
  assert_string_equal(vs_phase_name(VS_PHASE_OPTIMIZER), "optimizer");
  assert_string_equal(vs_phase_name(-1), "?");
  assert_string_equal(vs_stream_name(VS_STREAM_SEND), "send");
  assert_string_equal(vs_stream_name(VS_STREAM_RECV), "recv");
  assert_string_equal(vs_phase_name(VS_PHASE_P2P), "p2p");
  assert_string_equal(vs_phase_name(VS_PHASE_OFFLOAD), "offload");
  assert_string_equal(vs_phase_name(VS_PHASE_EP_COMM), "ep_comm");
  assert_string_equal(vs_phase_name(VS_PHASE_CP_COMM), "cp_comm");
  assert_string_equal(vs_phase_name(VS_PHASE_CP_COMM + 1), "?");
  assert_string_equal(vs_stream_name(VS_STREAM_D2H), "d2h");
  assert_string_equal(vs_stream_name(VS_STREAM_H2D), "h2d");
  assert_string_equal(vs_stream_name(VS_STREAM_HOST), "host");
}

/* The layer of the op that first allocates a gradient buffer of `bytes`
 * (INT_MIN: none). */
static int grads_first_layer(const vs_program *p, uint64_t bytes)
{
  for (uint32_t i = 0; i < p->n_ops; i++) {
    const vs_pop *op = &p->ops[i];
    for (uint32_t k = op->first_effect; k < vs_op_effects_end(p, op);
         k++) {
      const vs_effect *e = &p->effects[k];
      const vs_buffer *buf = vs_program_buffer(p, e->buffer);
      if (!e->is_free && buf->category == VS_CAT_GRADS && buf->bytes == bytes)
        return vs_op_layer(p, op);
    }
  }
  return INT_MIN;
}

/* ZeRO-2 (gradients appear in backward) on one stage with untied
 * embeddings: the word embeddings' gradient appears in the embedding's
 * own backward, but with multi-token prediction the head's lookups write
 * it first, so it appears in the head's backward (layer index LAYERS);
 * 2-byte gradients of the embedding's EMBED_PARAMS. */
static void test_mtp_embedding_grads_in_head(void **state)
{
  static const char *const plain[] = {"model.tied_embeddings=false",
                                      "parallel.zero=2", "parallel.dp=2",
                                      "training.global_batch=2"};
  static const char *const mtp[] = {"model.tied_embeddings=false",
                                    "parallel.zero=2", "parallel.dp=2",
                                    "training.global_batch=2",
                                    "model.mtp_layers=1"};
  built *a = build(plain, 4, 2), *b = build(mtp, 5, 2);
  (void)state;
  assert_int_equal(grads_first_layer(&a->p, 2 * EMBED_PARAMS), -1);
  assert_int_equal(grads_first_layer(&b->p, 2 * EMBED_PARAMS), LAYERS);
  destroy(a);
  destroy(b);
}

/* Whether programs a and b hold the same ops, kinds, dependencies,
 * effects and buffers, byte for byte. */
static bool same_program(const vs_program *a, const vs_program *b)
{
  return a->n_ops == b->n_ops && a->n_kinds == b->n_kinds &&
         a->n_deps == b->n_deps && a->n_effects == b->n_effects &&
         a->n_buffers == b->n_buffers &&
         a->n_buffer_kinds == b->n_buffer_kinds &&
         memcmp(a->ops, b->ops, a->n_ops * sizeof *a->ops) == 0 &&
         memcmp(a->kinds, b->kinds, a->n_kinds * sizeof *a->kinds) == 0 &&
         memcmp(a->deps, b->deps, a->n_deps * sizeof *a->deps) == 0 &&
         memcmp(a->effects, b->effects,
                a->n_effects * sizeof *a->effects) == 0 &&
         memcmp(a->buffers, b->buffers,
                a->n_buffers * sizeof *a->buffers) == 0 &&
         memcmp(a->buffer_kinds, b->buffer_kinds,
                a->n_buffer_kinds * sizeof *a->buffer_kinds) == 0;
}

/* Fails unless the n_part items at part (elem bytes each) are the first
 * of the n_all at all. */
static void assert_start_of(const void *part, size_t n_part, const void *all,
                            size_t n_all, size_t elem)
{
  assert_true(n_part <= n_all);
  assert_true(n_part == 0 || memcmp(part, all, n_part * elem) == 0);
}

/* Whether op of p waits for an op other than a setup (op 0 of its own
 * stage; another stage's ops it waits for are sends, made in units). */
static bool waits_past_setup(const vs_program *p, const vs_pop *op)
{
  for (uint32_t d = op->first_dep; d < vs_op_deps_end(p, op); d++)
    if ((p->dep_stages && p->dep_stages[d] >= 0) || p->deps[d] != 0)
      return true;
  return false;
}

/* A program built with first_unit_only (`unit`) is the setup and first
 * unit of the whole one (`whole`), op for op, and none of the ops left out
 * could start at time 0, or once a setup ended: each one that opens its
 * stream waits for an op past the setups (what plan's setup screen relies
 * on, explore.c). */
static void assert_first_unit_starts(const vs_program *unit,
                                     const vs_program *whole)
{
  size_t ops;
  assert_int_equal(unit->n_units, 1);
  assert_true(whole->n_units > 1);
  ops = whole->units[1].first_op;
  assert_int_equal(unit->n_ops, ops);
  assert_start_of(unit->ops, ops, whole->ops, whole->n_ops, sizeof *unit->ops);
  assert_start_of(unit->kinds, unit->n_kinds, whole->kinds, whole->n_kinds,
                  sizeof *unit->kinds);
  assert_start_of(unit->deps, unit->n_deps, whole->deps, whole->n_deps,
                  sizeof *unit->deps);
  for (size_t d = 0; d < unit->n_deps; d++) /* the same stages (-1: own) */
    assert_int_equal(unit->dep_stages ? unit->dep_stages[d] : -1,
                     whole->dep_stages ? whole->dep_stages[d] : -1);
  assert_start_of(unit->effects, unit->n_effects, whole->effects,
                  whole->n_effects, sizeof *unit->effects);
  assert_start_of(unit->buffers, unit->n_buffers, whole->buffers,
                  whole->n_buffers, sizeof *unit->buffers);
  assert_start_of(unit->buffer_kinds, unit->n_buffer_kinds,
                  whole->buffer_kinds, whole->n_buffer_kinds,
                  sizeof *unit->buffer_kinds);
  for (int s = 0; s < VS_STREAM_N; s++) {
    const vs_pop *first;
    if (whole->n_stream_ops[s] == 0 || whole->stream_ops[s][0] < ops)
      continue;
    first = &whole->ops[whole->stream_ops[s][0]];
    if (!waits_past_setup(whole, first))
      fail_msg("stream %s opens with op %u (%s), outside the first unit "
               "and waiting for nothing past the setup",
               vs_stream_name(s), whole->stream_ops[s][0],
               vs_op_kind_of(whole, first)->name);
  }
}

static void check_first_unit(built *whole, const char *const *sets,
                             size_t n_sets, uint64_t gpus, void *ctx)
{
  built *unit = build_stage(sets, n_sets, gpus, whole->stage);
  (void)ctx;
  rebuild_job(unit, (vs_job){.first_unit_only = true});
  assert_first_unit_starts(&unit->p, &whole->p);
  destroy(unit);
}

/* Every stage of each of these 1F1B jobs: its setup and first unit built
 * alone (vs_job first_unit_only) are the start of its whole program, the
 * only ops that can start at time 0 (assert_first_unit_starts). */
static void test_first_unit_alone_is_the_start(void **state)
{
  static job_config configs[] = {
      {"parallel.zero=0", "parallel.dp=2", NULL},
      {"parallel.zero=1", "parallel.dp=2", NULL},
      {"parallel.zero=2", "parallel.dp=2", "parallel.bucket=1MiB", NULL},
      {"parallel.zero=3", "parallel.dp=2", NULL},
      {"parallel.zero=3", "parallel.dp=2", "parallel.offload_params=cpu",
       "parallel.offload_optimizer=cpu", NULL},
      {"parallel.zero=2", "parallel.dp=2", "parallel.offload_optimizer=cpu",
       NULL},
      {"training.framework=fsdp2", "parallel.dp=2", NULL},
      {"training.framework=deepspeed", "parallel.zero=2", "parallel.dp=2",
       NULL},
      {"training.framework=hf", "training.precision=amp_bf16", NULL},
      {"training.offload_activations=cpu", "training.checkpointing=full",
       NULL},
      {"parallel.pp=2", "parallel.dp=2", NULL},
      {"parallel.pp=4", "parallel.tp=2", "parallel.sequence_parallel=true",
       "training.checkpointing=selective", NULL},
      {"parallel.pp=2", "parallel.p2p_scatter_gather=true", "parallel.tp=2",
       NULL},
  };
  static const uint64_t gpus[] = {2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 4, 8, 4};
  (void)state;
  each_stage(configs, sizeof configs / sizeof configs[0], gpus,
             check_first_unit, NULL);
}

/* What ops and buffers are is kept once: 16 micro-batches repeat the same
 * kinds (none twice), so there are far fewer kinds than ops; and a
 * program rebuilt for another layout in a used one's storage (as plan
 * reuses programs) is the one a fresh build makes. */
static void test_kinds_kept_once_and_rebuilt(void **state)
{
  static const char *const many[] = {"training.global_batch=16"};
  static const char *const other[] = {"training.global_batch=4",
                                      "training.checkpointing=full",
                                      "parallel.zero=3", "parallel.dp=2"};
  built *a = build(many, 1, 1), *b = build(other, 4, 2);
  vs_job job = {.wl = &b->wl, .topo = &b->topo, .model = &b->m,
                .recipe = &b->r, .layout = &b->lay};
  vs_error err;
  (void)state;
  assert_true(a->p.n_ops > 16 * 40);
  assert_true(a->p.n_kinds * 8 < a->p.n_ops);
  assert_true(a->p.n_buffer_kinds * 8 < a->p.n_buffers);
  for (size_t i = 0; i < a->p.n_kinds; i++)
    for (size_t j = i + 1; j < a->p.n_kinds; j++)
      assert_true(memcmp(&a->p.kinds[i], &a->p.kinds[j],
                         sizeof a->p.kinds[i]) != 0);
  for (size_t i = 0; i < a->p.n_buffer_kinds; i++)
    for (size_t j = i + 1; j < a->p.n_buffer_kinds; j++)
      assert_true(memcmp(&a->p.buffer_kinds[i], &a->p.buffer_kinds[j],
                         sizeof a->p.buffer_kinds[i]) != 0);
  vs_error_clear(&err);
  assert_int_equal(vs_schedule_rebuild(&job, 0, &a->p, &err), 0);
  assert_true(same_program(&a->p, &b->p));
  destroy(a);
  destroy(b);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_invariants),
      cmocka_unit_test(test_op_kinds_follow_each_op),
      cmocka_unit_test(test_first_unit_alone_is_the_start),
      cmocka_unit_test(test_fsdp2_pipeline_frees_every_gather),
      cmocka_unit_test(test_pipelined_fsdp2_syncs_once),
      cmocka_unit_test(test_setup_and_optimizer),
      cmocka_unit_test(test_first_step_makes_states),
      cmocka_unit_test(test_first_step_grads_appear_at_their_op),
      cmocka_unit_test(test_every_step_program_serves_each_step),
      cmocka_unit_test(test_per_tensor_states_follow_the_framework),
      cmocka_unit_test(test_nf4_weight_tensors),
      cmocka_unit_test(test_dp1_has_no_comm),
      cmocka_unit_test(test_dp2_all_reduce_last_microbatch),
      cmocka_unit_test(test_dp2_buckets),
      cmocka_unit_test(test_megatron_buckets_first_chunk_only),
      cmocka_unit_test(test_zero1_reduce_scatter_then_gather),
      cmocka_unit_test(test_zero2_reduce_scatter_every_microbatch),
      cmocka_unit_test(test_zero2_backward_waits_for_the_bucket_before),
      cmocka_unit_test(test_deepspeed_zero2_expert_reduce_scatters),
      cmocka_unit_test(test_fsdp2_reduce_scatter_input_held),
      cmocka_unit_test(test_fsdp2_reduced_grads_set_to_none),
      cmocka_unit_test(test_pageable_offload_copies),
      cmocka_unit_test(test_grads_appear_at_their_op),
      cmocka_unit_test(test_zero3_gathers_per_block_per_pass),
      cmocka_unit_test(test_zero3_at_most_two_blocks_gathered),
      cmocka_unit_test(test_deepspeed_zero3_coordinator),
      cmocka_unit_test(test_full_checkpointing_recomputes_each_layer),
      cmocka_unit_test(test_selective_eager_recomputes_attention),
      cmocka_unit_test(test_selective_flash_reruns_the_kernel),
      cmocka_unit_test(test_selective_flash_reruns_the_exchange),
      cmocka_unit_test(test_tp2_all_reduces),
      cmocka_unit_test(test_tp2_sequence_parallel),
      cmocka_unit_test(test_op_durations_follow_roofline),
      cmocka_unit_test(test_backward_gemms_by_shape),
      cmocka_unit_test(test_autocast_casts_are_kernels_of_their_own),
      cmocka_unit_test(test_eager_backward_accumulates_gradients),
      cmocka_unit_test(test_unfused_grad_accumulation),
      cmocka_unit_test(test_eager_recompute_reruns_elementwise_ops),
      cmocka_unit_test(test_bound_split_adds_up),
      cmocka_unit_test(test_flash_at_its_measured_rate),
      cmocka_unit_test(test_optimizer_step_work),
      cmocka_unit_test(test_optimizer_step_wrap),
      cmocka_unit_test(test_optimizer_step_wrap_cases),
      cmocka_unit_test(test_updated_gather_is_trainable),
      cmocka_unit_test(test_updated_params_go_back),
      cmocka_unit_test(test_tied_embedding_all_reduce),
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_op_bounds_by_what_ops_do),
      cmocka_unit_test(test_kinds_kept_once_and_rebuilt),
      cmocka_unit_test(test_mtp_embedding_grads_in_head),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
