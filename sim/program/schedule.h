/* schedule.h - a pipeline stage's program: the ordered ops of one training
 * step on each stream, their dependencies and their memory effects.
 *
 * The program is built once per stage and shared, read-only, by every rank
 * of that stage (ranks own only cursors and memory). Invariants: ops are in
 * a topological order (every dependency precedes its dependant); each
 * stream's ops run in the order of stream_ops[]; every buffer is allocated
 * by exactly one effect and freed by at most one later effect; a program
 * that frees a buffer never frees it before allocating it. */
#ifndef VS_SCHEDULE_H
#define VS_SCHEDULE_H

#include "cost.h"
#include "error.h"
#include "layout.h"
#include "model.h"
#include "recipe.h"
#include "topology.h"
#include "workload.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum vs_phase {
  VS_PHASE_SETUP,     /* model states allocated before the step */
  VS_PHASE_FWD,
  VS_PHASE_BWD,
  VS_PHASE_RECOMPUTE,
  VS_PHASE_TP_COMM,   /* tensor-parallel collective */
  VS_PHASE_DP_COMM,   /* data-parallel collective (grads, ZeRO gathers) */
  VS_PHASE_OPTIMIZER,
  VS_PHASE_P2P,       /* pipeline send or receive */
  VS_PHASE_OFFLOAD,   /* offload: a copy between GPU and host or NVMe, or
                         the optimizer step on the host CPU */
  VS_PHASE_EP_COMM,   /* expert-parallel all-to-all (MoE dispatch and
                         combine) on the compute stream */
  VS_PHASE_CP_COMM,   /* context-parallel exchange of keys and values on
                         the compute stream */
  VS_PHASE_N
} vs_phase;

/* What a buffer is. The program keeps each distinct one once and every
 * buffer that is the same shares it (vs_program_buffer), so it never
 * changes once made; no padding (the builder hashes its bytes). */
typedef struct vs_buffer {
  uint64_t bytes;     /* size in its place */
  int32_t category;   /* vs_category */
  uint8_t place;      /* vs_place: the GPU, or the node's host or NVMe */
  bool checkpoint;    /* a full-recompute checkpoint (a layer's input),
                         which its layer's first op allocates */
  uint8_t made_on;    /* vs_made_on: whose pool it comes from */
  uint8_t unused;     /* zero */
} vs_buffer;

/* The caching-allocator pool (a stream's, 0 .. VS_STREAM_N +
 * VS_MADE_ON_N - 2) that buf comes from when an op on op_stream
 * allocates it: the op's stream's, or the one stream that only makes
 * buffers (vs_made_on) after the streams that run ops. */
static inline int vs_buffer_pool(const vs_buffer *buf, int op_stream)
{
  if (buf->made_on == VS_MADE_ON_OP_STREAM)
    return op_stream;
  return VS_STREAM_N + buf->made_on - 1;
}

/* A hash index the builder keeps over a table of items that are each
 * kept once (op kinds, buffer kinds): slots hold 1 + an item's index, 0
 * when empty; cap is a power of two, or 0. */
typedef struct vs_intern_index {
  uint32_t *slots;    /* [cap] 1 + an item's index, or 0 */
  size_t cap;         /* slots: a power of two, or 0 before the first */
  uint8_t shift;      /* 64 - log2(cap): a hash's first slot is its top
                         log2(cap) bits */
} vs_intern_index;

/* Which training step a program is for. All have the same ops; they
 * differ only in when and how the states the recipe makes in the first
 * step (vs_recipe first_step_states) are allocated: in the effects. */
typedef enum vs_step {
  VS_STEP_ONLY,      /* the only step simulated (the default): the setup
                        op allocates every model state, resident
                        gradients and optimizer states as flat buffers
                        (an empty cache holds them packed) */
  VS_STEP_FIRST,     /* the first step: under first_step_states each
                        resident gradient appears at the backward of the
                        op computing it and the optimizer states when the
                        optimizer step starts, tensor by tensor */
  VS_STEP_AFTER_FIRST /* the step after it, the one vsim reports: the
                        setup op allocates every state, those tensor by
                        tensor, taking them over from the first step's
                        cache (vs_rank_inherit) */
} vs_step;

/* Buffers a program may have: an effect names one in 28 bits. */
#define VS_PROGRAM_BUFFERS_MAX ((1u << 28) - 1)

/* One memory effect of an op, 4 bytes (a step holds tens of millions). */
typedef struct vs_effect {
  uint32_t buffer : 28; /* index into buffers */
  uint32_t step : 2;    /* 0: applies in every step; else 1 + the vs_step
                           it alone applies in (vs_job every_step) */
  uint32_t at_end : 1;  /* applied when the op ends (else when it starts) */
  uint32_t is_free : 1; /* frees the buffer (else allocates it) */
} vs_effect;

_Static_assert(VS_STEP_AFTER_FIRST + 1 < 4,
               "vs_effect names a step in 2 bits");

/* Whether e applies in a run of `step`. */
static inline bool vs_effect_applies(const vs_effect *e, vs_step step)
{
  return e->step == 0 || e->step == 1u + (unsigned)step;
}

/* What an op does: its name, cost and the resource its bytes cross. The
 * ops that do the same thing (one op of every micro-batch, of every layer
 * of a kind) share one kind, so the per-op record stays small: a step of
 * thousands of micro-batches is millions of ops. A kind never changes
 * once made; no padding (the builder hashes its bytes). */
typedef struct vs_op_kind {
  char name[VS_OP_NAME_MAX]; /* "qkv_proj", "dp_all_reduce", ... */
  uint8_t resource;   /* vs_resource_kind its bytes move through; 0: none */
  uint8_t resource_via; /* a second kind they cross too; 0: none */
  uint8_t bound;      /* the vs_bound of all its time when split_s is all
                         0: the wire (collectives, sends), a copy to or
                         from the host or NVMe, or the host CPU */
  uint8_t unused;     /* zero */
  int32_t layer;      /* transformer layer; -1 embedding/step, layers =
                         head */
  uint64_t dur_ns;    /* run time; with a resource, the fixed part before
                         the transfer, whose time the engine decides */
  double flops;       /* work done */
  double bytes;       /* HBM bytes, or bytes on the wire for collectives,
                         or through its resource */
  double max_rate;    /* with a resource, the most bytes/s its transfer
                         moves at whatever its shares (a copy from or to
                         pageable host memory); 0: no cap */
  double split_s[VS_BOUND_SPLIT_N]; /* a compute op's dur_ns as priced, by
                         vs_bound (arithmetic, HBM, launches, collectives
                         its recompute re-runs); all 0 for other ops */
} vs_op_kind;

/* Op kinds a program may have: an op names its kind in 24 bits. */
#define VS_PROGRAM_KINDS_MAX ((1u << 24) - 1)

/* One op of the program: what it does (its kind) and where it sits, 16
 * bytes (a step of thousands of micro-batches is millions of ops). Its
 * dependencies and memory effects are contiguous and appended in op
 * order (the builder adds them to the newest op only), so each run ends
 * where the next op's begins: vs_op_deps_end, vs_op_effects_end. */
typedef struct vs_pop {
  uint32_t kind : 24;    /* index into the program's kinds (what it does,
                            in which layer) */
  uint32_t stream : 4;   /* vs_stream */
  uint32_t phase : 4;    /* vs_phase */
  uint32_t first_dep;    /* deps[first_dep .. vs_op_deps_end) */
  uint32_t first_effect; /* effects[first_effect .. vs_op_effects_end) */
  int16_t microbatch;    /* -1 for once-per-step ops */
  uint16_t notify;       /* 1 + the stage whose op depends on it; 0: none */
} vs_pop;

_Static_assert(VS_STREAM_N <= 16 && VS_PHASE_N <= 16,
               "vs_pop keeps an op's stream and phase in 4 bits");
_Static_assert(VS_MAX_MICROBATCHES <= INT16_MAX,
               "vs_pop keeps an op's micro-batch in 16 bits");

/* Where the builder began one unit of the stage's pipeline order
 * (vs_unit): the ops and buffers appended from there to the next mark
 * are that unit's. period.h maps them one micro-batch on. */
typedef struct vs_unit_mark {
  uint32_t first_op;      /* the unit's first op */
  uint32_t first_buffer;  /* the first buffer it made */
  uint32_t mb;            /* its micro-batch */
  uint16_t chunk;         /* its model chunk */
  uint8_t forward;        /* 1: a forward pass, 0: a backward pass */
  uint8_t unused;         /* zero */
  double bound_seconds[VS_BOUND_SPLIT_N]; /* the program's bound_seconds when it
                             began */
} vs_unit_mark;

typedef struct vs_program {
  int stage;                       /* pipeline stage it belongs to */
  vs_pop *ops;                     /* all ops, topologically ordered */
  size_t n_ops, cap_ops;
  vs_op_kind *kinds;               /* what they do, each kind once */
  size_t n_kinds, cap_kinds;
  vs_intern_index kind_index;      /* the builder's, over kinds */
  uint32_t *deps;                  /* op indices that must end first, an
                                      op's own stage's before the others'
                                      (engine.c, ready) */
  int32_t *dep_stages;             /* parallel to deps: the stage whose
                                      program holds deps[i], or -1 for this
                                      program; NULL when all are local */
  size_t n_deps, cap_deps, cap_dep_stages;
  vs_effect *effects;              /* memory effects of every op */
  size_t n_effects, cap_effects;
  uint32_t *buffers;               /* every tensor the step allocates:
                                      what it is, in buffer_kinds
                                      (vs_program_buffer) */
  size_t n_buffers, cap_buffers;
  vs_buffer *buffer_kinds;         /* the tensors that differ, each once */
  size_t n_buffer_kinds, cap_buffer_kinds;
  vs_intern_index buffer_index;    /* the builder's, over buffer_kinds */
  uint32_t *stream_ops[VS_STREAM_N]; /* per stream, op indices in order */
  size_t n_stream_ops[VS_STREAM_N];
  size_t cap_stream_ops[VS_STREAM_N];
  double compute_seconds;          /* sum of compute-stream op times */
  double bound_seconds[VS_BOUND_SPLIT_N]; /* of the compute ops' times (not the
                                      collectives on the compute stream),
                                      the seconds each vs_bound takes */
  vs_cal_seen cal_seen;            /* sizes timed by calibrated curves */
  uint32_t *sends;                 /* [key] this stage's pipeline send op,
                                      then what its embedding all-reduce
                                      waits for (see vs_schedule_link),
                                      NONE if none */
  size_t n_sends, cap_sends;
  vs_unit_mark *units;             /* [n_units + 1] the units in build
                                      order, then an end mark (ops and
                                      buffers after the last unit) */
  size_t n_units, cap_units;
  uint32_t *unit_at;               /* [pass][mb][chunk] (pass 0 forward,
                                      1 backward): index into units */
  size_t cap_unit_at;
  uint32_t unit_mbs, unit_chunks;  /* micro-batches and chunks unit_at
                                      spans */
} vs_program;

/* Everything a program is built from (none of it owned). */
typedef struct vs_job {
  const vs_workload *wl;      /* the validated workload */
  const vs_topology *topo;    /* the hardware */
  const vs_model *model;      /* its blocks */
  const vs_recipe *recipe;    /* every decision about them */
  const vs_layout *layout;    /* their placement on the GPUs */
  vs_step step;               /* which step (default: VS_STEP_ONLY) */
  bool every_step;            /* instead one program for every vs_step:
                                 the effects by which the steps differ
                                 each name theirs (vs_effect step), and
                                 a run applies its own (vs_rank step) */
  bool first_unit_only;       /* the setup and each stage's first unit of
                                 work (pipeline.h's order) alone, without
                                 the step's end: the ops a run can start
                                 at time 0, for a screen of the setup
                                 (explore.c). Every op of a later unit
                                 that opens its stream waits for another
                                 op (tests/schedule_test.c), so none of
                                 the ops left out could have started
                                 then. VS_EINPUT with an interleaved
                                 schedule (its units look ahead). */
} vs_job;

/* A stage busier than this in one step (115 days) comes from figures far
 * outside real hardware; refusing it keeps every time in integer ns even
 * summed over 512 stages. The builder refuses ops of fixed time past it,
 * the simulation a step whose shared transfers take it past. */
#define VS_MAX_STEP_SECONDS 1e7

/* Builds the program of `stage` into prog (which it initialises). On error
 * prog is left empty. Cost: O(ops). */
int vs_schedule_build(const vs_job *job, int stage, vs_program *prog,
                      vs_error *err);

/* Resolves the cross-stage dependencies of a pipeline's programs (one per
 * stage, in stage order) once all are built: each receive waits for the
 * matching send of the producing stage, and the first and last stages'
 * embedding all-reduces each wait for what the other's waits for on its
 * stage (a collective starts once both have issued it); each op waited
 * for records the waiting stage in `notify`.
 * VS_EINPUT if a send is missing or an op would have two stages to
 * notify (schedule bugs). */
int vs_schedule_link(vs_program *progs, size_t n_progs, vs_error *err);

/* vs_schedule_build into a program built before (or zeroed), reusing its
 * arrays: sweeps and plans build thousands of programs, and fresh memory
 * costs more to touch than the building itself. */
int vs_schedule_rebuild(const vs_job *job, int stage, vs_program *prog,
                        vs_error *err);

/* An estimate, from above, of the ops vs_schedule_rebuild would put in
 * stage's program (what it reserves): 2 x micro-batches x chunks units of
 * (chunk layers + 2) x (layer ops + 4) + 16 ops, plus 64. O(1); builds
 * nothing, so it can refuse a job before its memory is spent. In double:
 * no input overflows it. */
double vs_schedule_estimate_ops(const vs_job *job, int stage);

/* Memory effects reserved per op: an allocation and a free for most ops,
 * more for those that save tensors; an estimate from above of the memory
 * events (timeline rows) a program makes per op. */
#define VS_SCHEDULE_EFFECTS_PER_OP 3

/* Host bytes a program reserves per op of that estimate. */
size_t vs_schedule_bytes_per_op(void);

/* An estimate, from above, of the op kinds stage's program keeps (one
 * micro-batch's units make them; later ones repeat them), at most the ops.
 * O(1). */
double vs_schedule_estimate_kinds(const vs_job *job, int stage);

/* Host bytes of one op kind with its share of the builder's indexes. */
size_t vs_schedule_bytes_per_kind(void);

void vs_program_fini(vs_program *prog);

/* Where prog->unit_at keeps the unit of (pass, micro-batch, chunk). */
static inline size_t vs_unit_slot(const vs_program *prog, bool forward,
                                  uint32_t mb, uint32_t chunk)
{
  return ((size_t)!forward * prog->unit_mbs + mb) * prog->unit_chunks + chunk;
}

/* What op (of prog) does. */
static inline const vs_op_kind *vs_op_kind_of(const vs_program *prog,
                                              const vs_pop *op)
{
  return &prog->kinds[op->kind];
}

/* The first place in stream s of p whose op is op or a later one
 * (p->n_stream_ops[s] when none is): a stream's ops ascend. O(log n). */
static inline size_t vs_stream_place(const vs_program *p, int s, uint32_t op)
{
  size_t lo = 0, hi = p->n_stream_ops[s];
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (p->stream_ops[s][mid] < op)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* What buffer b of prog is. */
static inline const vs_buffer *vs_program_buffer(const vs_program *prog,
                                                 uint32_t b)
{
  return &prog->buffer_kinds[prog->buffers[b]];
}

/* Where op's dependencies (in prog->deps) end: where the next op's
 * begin, or the last op's at the end of deps. */
static inline uint32_t vs_op_deps_end(const vs_program *prog, const vs_pop *op)
{
  return op + 1 < prog->ops + prog->n_ops ? op[1].first_dep
                                          : (uint32_t)prog->n_deps;
}

/* Where op's memory effects (in prog->effects) end, as vs_op_deps_end. */
static inline uint32_t vs_op_effects_end(const vs_program *prog,
                                         const vs_pop *op)
{
  return op + 1 < prog->ops + prog->n_ops ? op[1].first_effect
                                          : (uint32_t)prog->n_effects;
}

/* The layer of op (of prog): -1 the embedding or the step, the model's
 * layer count the head. */
static inline int32_t vs_op_layer(const vs_program *prog, const vs_pop *op)
{
  return prog->kinds[op->kind].layer;
}

/* The name of op (of prog). */
static inline const char *vs_op_name(const vs_program *prog, const vs_pop *op)
{
  return prog->kinds[op->kind].name;
}

/* What bounds op (of prog) over a run of `seconds` (its end less its
 * start), by vs_bound, into out: a compute op's split as priced, scaled
 * to its run (the two differ by the rounding to nanoseconds); any other
 * op's whole run in its kind's bound (the wire, a copy to or from the
 * host or NVMe, the host CPU), the time its resource took included. The
 * parts add up to `seconds`. */
void vs_op_bounds(const vs_program *prog, const vs_pop *op, double seconds,
                  double out[VS_BOUND_N]);

const char *vs_stream_name(int stream);
const char *vs_phase_name(int phase);

#endif
