/* collective_test.c - alpha-beta ring collective costs (Thakur, Rabenseifner
 * & Gropp 2005, "Optimization of Collective Communication Operations in
 * MPICH"; NCCL's bus-bandwidth convention in nccl-tests PERFORMANCE.md):
 *   all-reduce      2(n-1) alpha + 2(n-1)/n * bytes / bw
 *   all-gather,
 *   reduce-scatter   (n-1) alpha +  (n-1)/n * bytes / bw
 * with bytes the full (gathered) buffer, alpha the per-step latency and bw
 * the per-GPU one-direction link bandwidth. */
#include "collective.h"
#include "cost.h"
#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>

#include <string.h>

/* Within 1e-12 relative (+1e-18 s); inf and NaN always fail. */
static void assert_close(double actual, double expected)
{
  double diff = actual - expected;
  if (diff < 0)
    diff = -diff;
  if (!isfinite(actual) || !isfinite(expected) ||
      !(diff <= 1e-12 * (expected < 0 ? -expected : expected) + 1e-18))
    fail_msg("%.17g != %.17g", actual, expected);
}

static const vs_link nvlink = {.bandwidth = 450e9, .latency = 3e-6};
static const vs_link ib = {.bandwidth = 50e9, .latency = 5e-6};

static void test_all_reduce(void **state)
{
  static const uint64_t ns[] = {2, 4, 8, 64, 1024};
  const uint64_t bytes = 1ull << 30;
  (void)state;
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    double n = (double)ns[i];
    /* ring all-reduce: 2(n-1) alpha + 2(n-1)/n * bytes / bw */
    assert_close(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, bytes, ns[i], nvlink),
                 2.0 * (n - 1) * nvlink.latency +
                     2.0 * (n - 1) / n * (double)bytes / nvlink.bandwidth);
    assert_close(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, bytes, ns[i], ib),
                 2.0 * (n - 1) * ib.latency +
                     2.0 * (n - 1) / n * (double)bytes / ib.bandwidth);
  }
  /* worked: 8 GPUs, 1 GiB on NVLink 450 GB/s, 3 us: 14 x 3 us +
   * 1.75 x 2^30 / 450e9 = 42e-6 + 4.17550e-3 s */
  assert_close(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, bytes, 8, nvlink),
               42e-6 + 1.75 * 1073741824.0 / 450e9);
}

static void test_all_gather_reduce_scatter(void **state)
{
  static const uint64_t ns[] = {2, 3, 8, 16, 512};
  const uint64_t bytes = 25ull << 20; /* one 25 MiB bucket */
  (void)state;
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    double n = (double)ns[i];
    /* ring all-gather / reduce-scatter: (n-1) alpha + (n-1)/n bytes/bw */
    double want_nv =
        (n - 1) * nvlink.latency + (n - 1) / n * (double)bytes / nvlink.bandwidth;
    double want_ib =
        (n - 1) * ib.latency + (n - 1) / n * (double)bytes / ib.bandwidth;
    assert_close(vs_cost_collective_seconds(VS_COLL_ALL_GATHER, bytes, ns[i], nvlink),
                 want_nv);
    assert_close(
        vs_cost_collective_seconds(VS_COLL_REDUCE_SCATTER, bytes, ns[i], nvlink),
        want_nv);
    assert_close(vs_cost_collective_seconds(VS_COLL_ALL_GATHER, bytes, ns[i], ib),
                 want_ib);
    assert_close(vs_cost_collective_seconds(VS_COLL_REDUCE_SCATTER, bytes, ns[i], ib),
                 want_ib);
    /* all-reduce = reduce-scatter + all-gather (the ring's two phases) */
    assert_close(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, bytes, ns[i], ib),
                 2.0 * want_ib);
  }
}

/* One rank (or none) communicates with no one: 0 s. No collective: 0 s. */
static void test_trivial(void **state)
{
  (void)state;
  assert_true(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, 1ull << 30, 1, ib) == 0.0);
  assert_true(vs_cost_collective_seconds(VS_COLL_ALL_GATHER, 1ull << 30, 1, ib) == 0.0);
  assert_true(vs_cost_collective_seconds(VS_COLL_REDUCE_SCATTER, 1ull << 30, 1, ib) ==
              0.0);
  assert_true(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, 1ull << 30, 0, ib) == 0.0);
  assert_true(vs_cost_collective_seconds(VS_COLL_NONE, 1ull << 30, 8, ib) == 0.0);
  /* an empty buffer still pays the latency of every ring step */
  assert_close(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, 0, 8, ib),
               14.0 * ib.latency);
}

static void test_names(void **state)
{
  (void)state;
  assert_string_equal(vs_coll_name(VS_COLL_ALL_REDUCE), "all_reduce");
  assert_string_equal(vs_coll_name(VS_COLL_ALL_GATHER), "all_gather");
  assert_string_equal(vs_coll_name(VS_COLL_REDUCE_SCATTER), "reduce_scatter");
  assert_string_equal(vs_coll_name(VS_COLL_NONE), "none");
}

/* A group whose span fits in one node uses NVLink (intra), otherwise the
 * NIC (inter): the built-in topology has 8 GPUs per node. */
static void test_link_choice(void **state)
{
  vs_topology topo;
  vs_link l;
  (void)state;
  tu_default_topology(&topo);
  assert_int_equal(topo.gpus_per_node, 8);
  for (uint64_t span = 1; span <= 8; span++) {
    l = vs_collective_link(&topo, span);
    assert_true(l.bandwidth == topo.intra_bandwidth);
    assert_true(l.latency == topo.intra_latency);
  }
  for (uint64_t span = 9; span <= 4096; span *= 2) {
    l = vs_collective_link(&topo, span);
    assert_true(l.bandwidth == topo.inter_bandwidth);
    assert_true(l.latency == topo.inter_latency);
  }
  /* the boundary moves with gpus per node */
  topo.gpus_per_node = 4;
  l = vs_collective_link(&topo, 4);
  assert_true(l.bandwidth == topo.intra_bandwidth);
  l = vs_collective_link(&topo, 5);
  assert_true(l.bandwidth == topo.inter_bandwidth);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_reduce),
      cmocka_unit_test(test_all_gather_reduce_scatter),
      cmocka_unit_test(test_trivial),
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_link_choice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
