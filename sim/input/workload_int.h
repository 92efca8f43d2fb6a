/* workload_int.h - what workload.c and workload_preset.c share: the steps
 * of vs_workload_resolve that fill keys the workload leaves unset. */
#ifndef VS_WORKLOAD_INT_H
#define VS_WORKLOAD_INT_H

#include "error.h"
#include "workload.h"

/* [model] hf_config: the keys its config.json gives that the workload
 * (or --set) does not set itself. */
int vs_workload_apply_hf_config(vs_workload *wl, vs_error *err);

/* [finetune] base_dtype as resolution leaves it: the workload's own,
 * or where it sets none what its method implies (QLoRA's nf4, Dettmers
 * et al. 2023; else VS_BASE_PRECISION). The one home of "qlora implies
 * nf4": check_adapters applies it, and a framework's preset, which runs
 * before, reads it. */
int vs_workload_base_dtype(const vs_workload *wl);

/* [training] framework: the chosen framework's defaults for the keys the
 * workload leaves unset (vsim show marks them). */
int vs_workload_apply_framework(vs_workload *wl, vs_error *err);

#endif
