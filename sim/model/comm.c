/* comm.c - names of collectives and groups (see comm.h). */
#include "comm.h"

const char *vs_coll_name(int kind)
{
  static const char *const names[VS_COLL_N] = {
      "none", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
      "send_recv"};
  return kind > VS_COLL_NONE && kind < VS_COLL_N ? names[kind] : "none";
}

const char *vs_group_name(int group)
{
  static const char *const names[VS_GROUP_N] = {
      "tp", "dp", "pp", "ep", "cp", "embedding", "edp", "etp"};
  return group >= 0 && group < VS_GROUP_N ? names[group] : "?";
}

/* One name per (group, collective), so that naming an op formats nothing:
 * a plan builds millions of them. */
#define OP_NAMES(g)                                                           \
  {g "_none", g "_all_reduce", g "_all_gather", g "_reduce_scatter",          \
   g "_all_to_all", g "_send_recv"}

const char *vs_coll_op_name(int group, int kind)
{
  static const char *const names[VS_GROUP_N][VS_COLL_N] = {
      OP_NAMES("tp"), OP_NAMES("dp"), OP_NAMES("pp"),
      OP_NAMES("ep"), OP_NAMES("cp"), OP_NAMES("embedding"),
      OP_NAMES("edp"), OP_NAMES("etp")};
  if (group < 0 || group >= VS_GROUP_N)
    group = VS_GROUP_TP;
  if (kind < 0 || kind >= VS_COLL_N)
    kind = VS_COLL_NONE;
  return names[group][kind];
}
