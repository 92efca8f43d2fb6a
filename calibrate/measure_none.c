/* measure_none.c - vs_measure_run for builds without CUDA: it explains. */
#include "measure.h"

bool vs_measure_available(void)
{
  return false;
}

int vs_measure_run(const vs_measure_opts *opts, vs_raw *raw,
                   vs_measure_info *info, vs_error *err)
{
  (void)opts, (void)raw, (void)info;
  return vs_error_set(err, VS_EUSAGE,
                      "this vsim-calibrate was built without CUDA (CMake found "
                      "no CUDA toolkit, or VSIM_WITH_CUDA=OFF), so it cannot "
                      "measure; rebuild on a machine with nvcc, or fit samples "
                      "measured elsewhere with --fit RAW.csv --out FILE.ini");
}
