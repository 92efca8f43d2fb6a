/* pipeline.h - the order in which one pipeline stage runs its units of
 * work (the forward or backward pass of one micro-batch through one model
 * chunk), as Megatron-LM orders them.
 *
 * Pure functions of the schedule's shape: no model, no time. The schedule
 * builder turns each unit into ops, sends and receives; how many
 * micro-batches a stage holds at once follows from this order, never from a
 * formula. Invariant: every (micro-batch, chunk) appears once forward and
 * once backward, its forward first. */
#ifndef VS_PIPELINE_H
#define VS_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct vs_unit {
  bool forward;        /* forward pass (else backward) */
  uint32_t mb;         /* micro-batch */
  uint32_t chunk;      /* model chunk on this stage (0 .. vstages-1) */
} vs_unit;

typedef struct vs_pipeline {
  int schedule;           /* vs_schedule: gpipe, 1f1b or interleaved */
  uint64_t microbatches;  /* per step (gradient accumulation) */
  uint64_t stages;        /* pp */
  uint64_t vstages;       /* model chunks per stage (1 unless interleaved) */
} vs_pipeline;

/* Units of one stage's step: 2 x microbatches x vstages. */
size_t vs_pipeline_units(const vs_pipeline *pl);

/* The forwards stage runs before its first backward (Megatron-LM's
 * num_warmup_microbatches, in units of the stage's chunks; all of them
 * under GPipe, and at most all of them): when it is every forward, the
 * stage has no steady state. */
uint64_t vs_pipeline_warmup(const vs_pipeline *pl, uint64_t stage);

/* Writes stage's order into order[vs_pipeline_units(pl)] and returns its
 * length. GPipe: every forward, then every backward. 1F1B (Narayanan et
 * al. 2021): stages - stage - 1 warm-up forwards, then one forward and one
 * backward alternately, then the remaining backwards. Interleaved
 * (Megatron-LM forward_backward_pipelining_with_interleaving):
 * (stages - stage - 1) * 2 + (vstages - 1) * stages warm-up units, unit k
 * running chunk (k mod stages*v) / stages (reversed for backward) of
 * micro-batch (k / (stages*v)) * stages + k mod stages. */
size_t vs_pipeline_order(const vs_pipeline *pl, uint64_t stage,
                         vs_unit *order);

/* An upper bound on the micro-batches whose tensors one block holds at
 * once: all of them with GPipe; with 1F1B at most stages (interleaved: its
 * warm-up, under (vstages + 1) * stages units). Sizes per-micro-batch
 * tables, never the memory. */
size_t vs_pipeline_ring(const vs_pipeline *pl);

#endif
