/* summary.c - summary.csv rows (see summary.h). */
#include "summary.h"

#include <stdio.h>
#include <string.h>


#define SUMMARY_COLUMNS                                                       \
  "rank,stage,dp_rank,tp_rank,params_bytes,grads_bytes,optimizer_bytes,"      \
  "activations_bytes,temp_bytes,framework_bytes,fragmentation_bytes,"         \
  "model_states_bytes,peak_allocated_bytes,peak_reserved_bytes,"              \
  "capacity_bytes,fits,peak_time_s,peak_op,step_time_s"
enum { SUMMARY_FIELDS = 19 };

void vs_summary_of(const vs_sim *sim, const vs_rank *r, vs_summary *sum)
{
  const vs_mem *m = &r->mem;
  memset(sum, 0, sizeof *sum);
  sum->rank = r->id;
  sum->stage = r->stage;
  sum->dp_rank = r->dp_rank;
  sum->tp_rank = r->tp_rank;
  memcpy(sum->at_peak, m->at_peak, sizeof sum->at_peak);
  sum->fragmentation_bytes = vs_mem_fragmentation(m);
  sum->model_states_bytes =
      vs_layout_stage_model_states(&sim->layout, (uint64_t)r->stage);
  sum->peak_allocated_bytes = m->peak_allocated_bytes;
  sum->peak_reserved_bytes = m->peak_reserved_bytes;
  sum->peak_used_bytes = m->peak_used_bytes;
  sum->capacity_bytes = m->capacity_bytes;
  sum->fits = vs_rank_fits(r);
  sum->peak_time_s = (double)m->peak_t_ns * 1e-9;
  snprintf(sum->peak_op, sizeof sum->peak_op, "%s",
           vs_op_name(r->prog, &r->prog->ops[m->peak_op]));
  sum->step_time_s = (double)r->end_ns * 1e-9;
  sum->timed = !sim->stats.stopped;
}

void vs_summary_csv_header(vs_csv *csv)
{
  vs_csv_fields(csv, SUMMARY_COLUMNS);
}

void vs_summary_csv_row(vs_csv *c, const vs_summary *s)
{
  vs_csv_u64(c, s->rank);
  vs_csv_i64(c, s->stage);
  vs_csv_i64(c, s->dp_rank);
  vs_csv_i64(c, s->tp_rank);
  for (int cat = 0; cat < VS_CAT_N; cat++)
    vs_csv_u64(c, s->at_peak[cat]);
  vs_csv_u64(c, s->fragmentation_bytes);
  vs_csv_u64(c, s->model_states_bytes);
  vs_csv_u64(c, s->peak_allocated_bytes);
  vs_csv_u64(c, s->peak_reserved_bytes);
  vs_csv_u64(c, s->capacity_bytes);
  vs_csv_text(c, s->fits ? "true" : "false");
  vs_csv_seconds(c, s->peak_time_s);
  vs_csv_text(c, s->peak_op);
  if (s->timed)
    vs_csv_seconds(c, s->step_time_s);
  else
    vs_csv_text(c, "");
}

void vs_summary_csv_empty(vs_csv *csv)
{
  for (int i = 0; i < SUMMARY_FIELDS; i++)
    vs_csv_text(csv, "");
}

