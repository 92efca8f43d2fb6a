/* period.h - the steady state of built programs: the op or buffer that
 * plays the same part one micro-batch later, and whether consecutive
 * micro-batches' units are alike.
 *
 * The builder marks where each unit of the pipeline order begins
 * (vs_unit_mark). An op or buffer belongs to the unit whose span holds
 * it: the setup before the first unit, the step's end after the last.
 * The same part one micro-batch on is the op (buffer) at the same offset
 * in the unit of the same pass and chunk of the next micro-batch.
 *
 * Two units are alike when their ops match one for one: kind, stream,
 * phase, the stage they notify, micro-batch one on, dependencies one
 * micro-batch on (the setup's ops the same), the same memory effects on
 * buffers one micro-batch on, and the same kinds of new buffers. A
 * program whose units of micro-batches lo .. hi-1 are each alike the next
 * repeats itself there: what the engine's steady-state proof
 * (engine/steady.h) needs of the programs. Pure functions; a lookup is
 * O(log units). */
#ifndef VS_PERIOD_H
#define VS_PERIOD_H

#include "schedule.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* No such op or buffer. */
#define VS_PERIOD_NONE UINT32_MAX

/* Where an op or buffer sits: in the setup (before the first unit), in a
 * unit, or after the last unit (the step's end). */
typedef enum { VS_SPAN_SETUP, VS_SPAN_UNIT, VS_SPAN_END } vs_span;

/* Where op of p sits; with VS_SPAN_UNIT, *mb is its unit's micro-batch. */
vs_span vs_period_op_span(const vs_program *p, uint32_t op, uint32_t *mb);

/* Where buffer of p was made, as vs_period_op_span. */
vs_span vs_period_buffer_span(const vs_program *p, uint32_t buffer,
                              uint32_t *mb);

/* The op of p that plays op's part one micro-batch later: op itself in
 * the setup; VS_PERIOD_NONE after the last unit, or when the next
 * micro-batch has no such unit or op. */
uint32_t vs_period_op_later(const vs_program *p, uint32_t op);

/* The same for a buffer of p. */
uint32_t vs_period_buffer_later(const vs_program *p, uint32_t buffer);

/* The smallest lo such that, in each of the n_progs programs (one per
 * pipeline stage, in stage order, linked), every unit of micro-batches
 * lo .. hi-1 is alike the unit of the same pass and chunk one
 * micro-batch later; hi when the units of hi-1 are not. O(ops x their
 * dependencies and effects, each effect's buffer found in O(log units)
 * unless its unit made it). */
uint32_t vs_period_repeats_from(const vs_program *progs, size_t n_progs,
                                uint32_t hi);

#endif
