/* resource_test.c - shared resources: the table built from a topology and a
 * layout (which GPUs share an instance, how many users a simulated rank of
 * a stage counts for) and processor sharing driven directly through an
 * event queue. Bandwidths are round (25 GB/s = 25 bytes/ns) so every
 * expected nanosecond is exact. The engine's use of it is in
 * engine_test.c. */
#include "resource.h"
#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

/* A layout with only what the table reads: group sizes and Megatron's rank
 * strides for order tp-dp-pp (tp_pp_dp false) or tp-pp-dp. vs_layout is
 * large (per-chunk and per-stage tables): it lives on the heap. */
static vs_layout *hand_layout(uint64_t tp, uint64_t dp, uint64_t pp,
                              bool tp_pp_dp)
{
  vs_layout *lay = calloc(1, sizeof *lay);
  assert_non_null(lay);
  lay->tp = tp;
  lay->dp = dp;
  lay->pp = pp;
  lay->gpus = tp * dp * pp;
  lay->tp_stride = 1;
  lay->dp_stride = tp_pp_dp ? tp * pp : tp;
  lay->pp_stride = tp_pp_dp ? tp : tp * dp;
  return lay;
}

/* The built-in topology with round figures: PCIe 25 GB/s, 2 us, two GPUs
 * per switch; 8 GPUs per node. */
static void round_topology(vs_topology *topo)
{
  tu_default_topology(topo);
  topo->pcie_bandwidth = 25e9;
  topo->pcie_latency = 2e-6;
  topo->gpus_per_pcie_switch = 2;
  topo->gpus_per_node = 8;
}

/* vs_resource_users of stage s in stage mode for that layout. */
static uint32_t users_of(uint64_t tp, uint64_t dp, uint64_t pp, bool tp_pp_dp,
                         int kind, uint64_t s)
{
  vs_topology topo;
  vs_resource_spec specs[VS_RES_N];
  vs_layout *lay = hand_layout(tp, dp, pp, tp_pp_dp);
  uint32_t users;
  round_topology(&topo);
  vs_resource_table(&topo, specs);
  users = vs_resource_users(&specs[kind], lay, s, false);
  free(lay);
  return users;
}

/* ------------------------------------------------------------------------
 * Names and the table
 * ------------------------------------------------------------------------ */

static void test_names(void **state)
{
  (void)state;
  assert_string_equal(vs_resource_name(VS_RES_NONE), "none");
  assert_string_equal(vs_resource_name(VS_RES_PCIE_SWITCH), "pcie_switch");
  assert_string_equal(vs_resource_name(VS_RES_HOST_MEMORY), "host_memory");
  assert_string_equal(vs_resource_name(VS_RES_NVME), "nvme");
  assert_string_equal(vs_resource_name(VS_RES_NIC), "nic");
  assert_string_equal(vs_resource_name(VS_RES_NVLINK), "nvlink");
  assert_string_equal(vs_resource_name(VS_RES_COPY_ENGINE), "copy_engine");
  assert_null(vs_resource_name(VS_RES_N));
  assert_null(vs_resource_name(-1));
}

static void test_table_from_topology(void **state)
{
  vs_topology topo;
  vs_resource_spec specs[VS_RES_N];
  vs_layout *lay = hand_layout(2, 2, 1, false);
  (void)state;
  round_topology(&topo);
  vs_resource_table(&topo, specs);
  assert_true(specs[VS_RES_PCIE_SWITCH].bytes_per_s == 25e9);
  assert_int_equal(specs[VS_RES_PCIE_SWITCH].latency_ns, 2000); /* 2 us */
  assert_int_equal(specs[VS_RES_PCIE_SWITCH].gpus_per_instance, 2);
  /* every GPU simulated: each rank counts for itself */
  assert_int_equal(vs_resource_users(&specs[VS_RES_PCIE_SWITCH], lay, 0, true),
                   1);
  assert_true(specs[VS_RES_NVME].bytes_per_s == topo.nvme_bandwidth);
  assert_int_equal(specs[VS_RES_NVME].gpus_per_instance, 8); /* per node */
  assert_true(specs[VS_RES_NIC].bytes_per_s == topo.inter_bandwidth);
  assert_int_equal(specs[VS_RES_NIC].gpus_per_instance, 1);  /* per GPU */
  assert_int_equal(specs[VS_RES_NIC].latency_ns,
                   (uint64_t)llround(topo.inter_latency * 1e9));
  assert_true(specs[VS_RES_NVLINK].bytes_per_s == topo.intra_bandwidth);
  /* no topology keys yet: absent */
  assert_true(specs[VS_RES_HOST_MEMORY].bytes_per_s == 0);
  assert_true(specs[VS_RES_COPY_ENGINE].bytes_per_s == 0);
  assert_true(specs[VS_RES_NONE].bytes_per_s == 0);
  /* one rank per stage: GPUs 0-3 are the stage, GPUs 0 and 1 its switch */
  assert_int_equal(vs_resource_users(&specs[VS_RES_PCIE_SWITCH], lay, 0, false),
                   2);
  assert_int_equal(vs_resource_users(&specs[VS_RES_NVME], lay, 0, false),
                   4); /* all 4 in node 0 */
  assert_int_equal(vs_resource_users(&specs[VS_RES_NIC], lay, 0, false), 1);
  free(lay);
}

static void test_stage_users_by_order(void **state)
{
  (void)state;
  /* tp 8, dp 2, pp 2 (tp-dp-pp): a stage is 16 consecutive GPUs, so it
   * fills its switch (2) and its node (8) */
  assert_int_equal(users_of(8, 2, 2, false, VS_RES_PCIE_SWITCH, 1), 2);
  assert_int_equal(users_of(8, 2, 2, false, VS_RES_NVME, 1), 8);
  /* tp 2, pp 2, dp 2 in order tp-pp-dp: stage 0 is GPUs 0, 1, 4, 5; its
   * switch holds 0 and 1, its node all four (stage 1's rank, GPU 2, is
   * on the node too and counts for its own four) */
  assert_int_equal(users_of(2, 2, 2, true, VS_RES_PCIE_SWITCH, 0), 2);
  assert_int_equal(users_of(2, 2, 2, true, VS_RES_NVME, 0), 4);
  assert_int_equal(users_of(2, 2, 2, true, VS_RES_NVME, 1), 4);
  /* tp 1, pp 2, dp 2 (tp-pp-dp): stage 0 is GPUs 0 and 2, on different
   * switches; GPU 1 on its switch is stage 1's, whose rank it is */
  assert_int_equal(users_of(1, 2, 2, true, VS_RES_PCIE_SWITCH, 0), 1);
  assert_int_equal(users_of(1, 2, 2, true, VS_RES_PCIE_SWITCH, 1), 1);
  /* tp 1, dp 3, pp 2: stage 0 (GPUs 0-2) has 2 on the switch of GPU 0;
   * stage 1's rank, GPU 3, shares its switch with GPU 2 of stage 0, whose
   * rank is elsewhere: it counts for both */
  assert_int_equal(users_of(1, 3, 2, false, VS_RES_PCIE_SWITCH, 0), 2);
  assert_int_equal(users_of(1, 3, 2, false, VS_RES_PCIE_SWITCH, 1), 2);
  /* tp 1, dp 6, pp 2 on nodes of 8: node 0 holds stage 0's six and two of
   * stage 1, both ranks there: 6 + 2, its eight GPUs, not 6 + 6 */
  assert_int_equal(users_of(1, 6, 2, false, VS_RES_CPU, 0), 6);
  assert_int_equal(users_of(1, 6, 2, false, VS_RES_CPU, 1), 2);
  /* one GPU: itself */
  assert_int_equal(users_of(1, 1, 1, false, VS_RES_NVME, 0), 1);
}

/* ------------------------------------------------------------------------
 * Processor sharing through an event queue
 * ------------------------------------------------------------------------ */

/* PCIe at 25 GB/s, latency_ns, two GPUs per switch. */
static void pcie_specs(vs_resource_spec specs[VS_RES_N], uint64_t latency_ns)
{
  memset(specs, 0, VS_RES_N * sizeof *specs);
  specs[VS_RES_PCIE_SWITCH] = (vs_resource_spec){25e9, latency_ns, 2};
}

/* Pops the next event and hands it to the flow of slot (= its op here). */
static vs_event pop_into(vs_res_state *st, vs_evq *q, bool *ended)
{
  vs_event ev;
  uint64_t tag;
  assert_true(vs_evq_pop(q, &ev));
  assert_int_equal(vs_res_event(st, q, ev.op, ev.t_ns, ended, &tag), 0);
  if (*ended)
    assert_int_equal(tag, 100 + ev.op);
  return ev;
}

static void test_sharing_staggered(void **state)
{
  vs_resource_spec specs[VS_RES_N];
  vs_res_state st;
  vs_evq q;
  vs_event ev;
  bool ended;
  /* ops 0 and 1 of GPUs 0 and 1 (one switch), 10 GB each */
  vs_res_op a = {0,   0, 0,     VS_RES_PCIE_SWITCH, VS_RES_NONE, 1e10, 0,
                 100, 0, {0, 0}};
  vs_res_op b = {1,   1, 1,     VS_RES_PCIE_SWITCH, VS_RES_NONE, 1e10, 0,
                 101, 0, {0, 0}};
  (void)state;
  pcie_specs(specs, 0);
  vs_evq_init(&q);
  vs_res_init(&st, specs, VS_RES_N, 2);
  assert_int_equal(vs_res_start(&st, &q, 0, &a, 0), 0);
  /* alone: 1e10 B / 25 B/ns = 4e8 ns */
  assert_int_equal(vs_evq_peek(&q)->t_ns, 400000000);
  /* b joins half-way: a has 5e9 B left, now at 12.5 B/ns: 4e8 ns more */
  assert_int_equal(vs_res_start(&st, &q, 1, &b, 200000000), 0);
  ev = pop_into(&st, &q, &ended);
  assert_true(ended);
  assert_int_equal(ev.op, 0);
  assert_int_equal(ev.t_ns, 600000000);
  /* b moved 4e8 ns x 12.5 = 5e9 B shared, the other 5e9 B alone: 2e8 ns */
  ev = pop_into(&st, &q, &ended);
  assert_true(ended);
  assert_int_equal(ev.op, 1);
  assert_int_equal(ev.t_ns, 800000000);
  assert_int_equal(vs_evq_size(&q), 0);
  assert_int_equal(st.instances[VS_RES_PCIE_SWITCH][0].weight, 0);
  vs_res_fini(&st);
  vs_evq_fini(&q);
}

/* A capped op (a copy from pageable host memory) moves at the smaller of
 * its cap and its share, and the share it leaves unused is not handed to
 * the others (equal shares): a (cap 5 B/ns) and b share the 25 B/ns
 * switch, a at 5 B/ns and b at 12.5 B/ns, so b's 1e10 B end at 8e8 ns;
 * a, 4e9 B moved by then, moves its last 6e9 B alone at its cap: 2e9 ns
 * in all. A negative or infinite cap is refused. */
static void test_cap(void **state)
{
  vs_resource_spec specs[VS_RES_N];
  vs_res_state st;
  vs_evq q;
  vs_event ev;
  bool ended;
  vs_res_op a = {0,   0,   0,     VS_RES_PCIE_SWITCH, VS_RES_NONE, 1e10, 0,
                 100, 5e9, {0, 0}};
  vs_res_op b = {1,   1, 1,     VS_RES_PCIE_SWITCH, VS_RES_NONE, 1e10, 0,
                 101, 0, {0, 0}};
  (void)state;
  pcie_specs(specs, 0);
  vs_evq_init(&q);
  vs_res_init(&st, specs, VS_RES_N, 2);
  assert_int_equal(vs_res_start(&st, &q, 0, &a, 0), 0);
  assert_int_equal(vs_evq_peek(&q)->t_ns, 2000000000); /* alone: its cap */
  assert_int_equal(vs_res_start(&st, &q, 1, &b, 0), 0);
  ev = pop_into(&st, &q, &ended);
  assert_true(ended);
  assert_int_equal(ev.op, 1);
  assert_int_equal(ev.t_ns, 800000000);
  ev = pop_into(&st, &q, &ended);
  assert_true(ended);
  assert_int_equal(ev.op, 0);
  assert_int_equal(ev.t_ns, 2000000000);
  a.max_bytes_per_s = -1;
  assert_int_equal(vs_res_start(&st, &q, 0, &a, 0), VS_EINPUT);
  a.max_bytes_per_s = HUGE_VAL;
  assert_int_equal(vs_res_start(&st, &q, 0, &a, 0), VS_EINPUT);
  vs_res_fini(&st);
  vs_evq_fini(&q);
}

/* A copy crosses its switch and the host's memory and moves at the smaller
 * share. GPUs 0 and 2 sit behind two switches (25 B/ns each) and share one
 * host memory of 30 B/ns: alone a copy gets min(25, 30) = 25 B/ns; both at
 * once get min(25, 15) = 15 B/ns each. Both move 1e10 B; b starts at
 * 2e8 ns. */
static void test_two_resources_smaller_share(void **state)
{
  vs_resource_spec specs[VS_RES_N];
  vs_res_state st;
  vs_evq q;
  vs_event ev;
  bool ended;
  vs_res_op a = {0,   0, 0,     VS_RES_PCIE_SWITCH, VS_RES_HOST_MEMORY, 1e10, 0,
                 100, 0, {0, 0}};
  vs_res_op b = {1,   1, 2,     VS_RES_PCIE_SWITCH, VS_RES_HOST_MEMORY, 1e10, 0,
                 101, 0, {0, 0}};
  (void)state;
  pcie_specs(specs, 0);
  specs[VS_RES_HOST_MEMORY] = (vs_resource_spec){30e9, 0, 8};
  vs_evq_init(&q);
  vs_res_init(&st, specs, VS_RES_N, 2);
  assert_int_equal(vs_res_start(&st, &q, 0, &a, 0), 0);
  assert_int_equal(vs_evq_peek(&q)->t_ns, 400000000); /* 1e10 / 25 */
  /* at 2e8 ns a has 5e9 B left; both now move at 15 B/ns */
  assert_int_equal(vs_res_start(&st, &q, 1, &b, 200000000), 0);
  ev = pop_into(&st, &q, &ended);
  assert_true(ended);
  assert_int_equal(ev.op, 0);
  assert_int_equal(ev.t_ns, 200000000 + 333333334); /* 5e9 / 15, rounded up */
  /* b moved 5e9 B at 15 B/ns, then the other 5e9 alone at 25 B/ns */
  ev = pop_into(&st, &q, &ended);
  assert_true(ended);
  assert_int_equal(ev.op, 1);
  assert_int_equal(ev.t_ns, 533333334 + 200000000);
  assert_int_equal(st.instances[VS_RES_HOST_MEMORY][0].weight, 0);
  assert_int_equal(st.instances[VS_RES_PCIE_SWITCH][1].weight, 0);
  /* a second kind the table lacks is an error */
  specs[VS_RES_HOST_MEMORY].bytes_per_s = 0;
  assert_int_equal(vs_res_start(&st, &q, 0, &a, 0), VS_EINPUT);
  vs_res_fini(&st);
  vs_evq_fini(&q);
}

static void test_latency_and_weight(void **state)
{
  vs_resource_spec specs[VS_RES_N];
  vs_res_state st;
  vs_evq q;
  vs_event ev;
  bool ended;
  /* 1000 ns of its own, then the 2000 ns latency, then 10 GB */
  vs_res_op a = {0,   0, 0,     VS_RES_PCIE_SWITCH, VS_RES_NONE, 1e10, 1000,
                 100, 0, {2, 0}}; /* stands for 2 GPUs on the switch */
  (void)state;
  pcie_specs(specs, 2000);
  vs_evq_init(&q);
  vs_res_init(&st, specs, VS_RES_N, 1);
  assert_int_equal(vs_res_start(&st, &q, 0, &a, 0), 0);
  ev = pop_into(&st, &q, &ended);
  assert_false(ended);                  /* the wait ends, bytes start */
  assert_int_equal(ev.t_ns, 3000);
  ev = pop_into(&st, &q, &ended);
  assert_true(ended);
  /* 3000 + 1e10 B at 25/2 B/ns */
  assert_int_equal(ev.t_ns, 3000 + 800000000);
  vs_res_fini(&st);
  vs_evq_fini(&q);
}

static void test_errors(void **state)
{
  vs_resource_spec specs[VS_RES_N];
  vs_res_state st;
  vs_evq q;
  bool ended;
  uint64_t tag;
  vs_res_op op = {0, 0, 0, VS_RES_NVME, VS_RES_NONE, 1e10, 0, 0, 0, {0, 0}};
  (void)state;
  pcie_specs(specs, 0);
  vs_evq_init(&q);
  vs_res_init(&st, specs, VS_RES_N, 1);
  /* no bandwidth for nvme in this table, none for an unknown kind */
  assert_false(vs_res_available(&st, VS_RES_NVME));
  assert_int_equal(vs_res_start(&st, &q, 0, &op, 0), VS_EINPUT);
  op.kind = VS_RES_N;
  assert_int_equal(vs_res_start(&st, &q, 0, &op, 0), VS_EINPUT);
  /* negative or not finite byte counts */
  op.kind = VS_RES_PCIE_SWITCH;
  op.bytes = -1;
  assert_int_equal(vs_res_start(&st, &q, 0, &op, 0), VS_EINPUT);
  op.bytes = NAN;
  assert_int_equal(vs_res_start(&st, &q, 0, &op, 0), VS_EINPUT);
  op.bytes = INFINITY;
  assert_int_equal(vs_res_start(&st, &q, 0, &op, 0), VS_EINPUT);
  /* a time past 2^63 ns: 1e30 B at 25 B/ns */
  op.bytes = 1e30;
  assert_int_equal(vs_res_start(&st, &q, 0, &op, 0), VS_EINPUT);
  vs_res_fini(&st);
  /* an event for an idle slot; a slot out of range */
  vs_res_init(&st, specs, VS_RES_N, 1);
  assert_int_equal(vs_res_event(&st, &q, 0, 0, &ended, &tag), VS_EINPUT);
  op.bytes = 1;
  assert_int_equal(vs_res_start(&st, &q, 1, &op, 0), VS_EINPUT);
  /* no table at all */
  vs_res_fini(&st);
  vs_res_init(&st, NULL, VS_RES_N, 1);
  assert_false(vs_res_available(&st, VS_RES_PCIE_SWITCH));
  vs_res_fini(&st);
  vs_evq_fini(&q);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_table_from_topology),
      cmocka_unit_test(test_stage_users_by_order),
      cmocka_unit_test(test_sharing_staggered),
      cmocka_unit_test(test_cap),
      cmocka_unit_test(test_two_resources_smaller_share),
      cmocka_unit_test(test_latency_and_weight),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
