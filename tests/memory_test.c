/* memory_test.c - the per-GPU memory tracker: accounting by category, the
 * framework outside the allocator, the peak snapshot, the first OOM and the
 * invariant walker. All sizes are small round numbers so each expected
 * value is a sum that can be checked by eye. */
#include "memory.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <string.h>

#define MIB (1024ull * 1024ull)

static void assert_ok(const vs_mem *m)
{
  vs_error err;
  vs_error_clear(&err);
  if (vs_mem_check(m, &err) != 0)
    fail_msg("vs_mem_check: %s", err.msg);
}

static void test_init(void **state)
{
  vs_mem m;
  (void)state;
  vs_mem_init(&m, 1000 * MIB, 100 * MIB);
  assert_int_equal(m.capacity_bytes, 1000 * MIB);
  /* Framework lives outside the allocator (memory.h). */
  assert_int_equal(m.by_cat[VS_CAT_FRAMEWORK], 100 * MIB);
  assert_int_equal(m.allocated_bytes, 0);
  assert_int_equal(m.reserved_bytes, 0);
  /* used = reserved + framework = 0 + 100 MiB */
  assert_int_equal(vs_mem_used(&m), 100 * MIB);
  assert_int_equal(m.peak_used_bytes, 100 * MIB);
  assert_false(m.oom.happened);
  assert_ok(&m);
}

static void test_category_names(void **state)
{
  (void)state;
  assert_string_equal(vs_category_name(VS_CAT_PARAMS), "params");
  assert_string_equal(vs_category_name(VS_CAT_GRADS), "grads");
  assert_string_equal(vs_category_name(VS_CAT_OPTIMIZER), "optimizer");
  assert_string_equal(vs_category_name(VS_CAT_ACTIVATIONS), "activations");
  assert_string_equal(vs_category_name(VS_CAT_TEMP), "temp");
  assert_string_equal(vs_category_name(VS_CAT_FRAMEWORK), "framework");
  assert_string_equal(vs_category_name(-1), "?");
  assert_string_equal(vs_category_name(VS_CAT_N), "?");
}

static void test_accounting_by_category(void **state)
{
  vs_mem m;
  (void)state;
  vs_mem_init(&m, 1000 * MIB, 100 * MIB);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_PARAMS, 10 * MIB, 0, 0), 0);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_GRADS, 20 * MIB, 0, 0), 0);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_OPTIMIZER, 30 * MIB, 0, 0), 0);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_ACTIVATIONS, 40 * MIB, 1, 5), 0);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_TEMP, 50 * MIB, 2, 6), 0);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_ACTIVATIONS, 4 * MIB, 3, 7), 0);
  assert_int_equal(m.by_cat[VS_CAT_PARAMS], 10 * MIB);
  assert_int_equal(m.by_cat[VS_CAT_GRADS], 20 * MIB);
  assert_int_equal(m.by_cat[VS_CAT_OPTIMIZER], 30 * MIB);
  assert_int_equal(m.by_cat[VS_CAT_ACTIVATIONS], 44 * MIB); /* 40 + 4 */
  assert_int_equal(m.by_cat[VS_CAT_TEMP], 50 * MIB);
  /* allocated = 10 + 20 + 30 + 44 + 50 = 154 MiB; framework is not in it */
  assert_int_equal(m.allocated_bytes, 154 * MIB);
  assert_int_equal(m.by_cat[VS_CAT_FRAMEWORK], 100 * MIB);
  /* exact allocator: reserved follows allocated */
  assert_int_equal(m.reserved_bytes, 154 * MIB);
  /* used = reserved 154 + framework 100 */
  assert_int_equal(vs_mem_used(&m), 254 * MIB);
  assert_ok(&m);

  assert_int_equal(vs_mem_free(&m, VS_CAT_TEMP, 50 * MIB), 0);
  assert_int_equal(vs_mem_free(&m, VS_CAT_ACTIVATIONS, 4 * MIB), 0);
  assert_int_equal(m.by_cat[VS_CAT_TEMP], 0);
  assert_int_equal(m.by_cat[VS_CAT_ACTIVATIONS], 40 * MIB); /* 44 - 4 */
  /* 154 - 50 - 4 = 100 MiB, reserved returned at once (exact allocator) */
  assert_int_equal(m.allocated_bytes, 100 * MIB);
  assert_int_equal(m.reserved_bytes, 100 * MIB);
  assert_int_equal(vs_mem_used(&m), 200 * MIB);
  /* peaks remember the 154 / 254 MiB high-water marks */
  assert_int_equal(m.peak_allocated_bytes, 154 * MIB);
  assert_int_equal(m.peak_reserved_bytes, 154 * MIB);
  assert_int_equal(m.peak_used_bytes, 254 * MIB);
  assert_ok(&m);
}

static void test_framework_is_not_allocatable(void **state)
{
  vs_mem m;
  (void)state;
  vs_mem_init(&m, 1000 * MIB, 100 * MIB);
  /* Framework is fixed at init; the allocator API rejects it and bad ids. */
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_FRAMEWORK, MIB, 0, 0), VS_EINPUT);
  assert_int_equal(vs_mem_alloc(&m, -1, MIB, 0, 0), VS_EINPUT);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_N, MIB, 0, 0), VS_EINPUT);
  assert_int_equal(vs_mem_free(&m, VS_CAT_FRAMEWORK, MIB), VS_EINPUT);
  assert_int_equal(vs_mem_free(&m, -1, 0), VS_EINPUT);
  /* nothing changed */
  assert_int_equal(m.allocated_bytes, 0);
  assert_int_equal(m.by_cat[VS_CAT_FRAMEWORK], 100 * MIB);
  assert_ok(&m);
}

/* A caching allocator's reserved bytes can peak after the allocated ones:
 * the fragmentation is peak reserved - peak allocated, so the categories
 * at the allocated peak, the framework and it add up to the device's peak
 * (reserved + framework). Here allocated peaks at 300 MiB with 300 MiB
 * reserved; after a free, a 50 MiB block that fits no cached gap raises
 * reserved to 400 MiB with 250 MiB allocated: fragmentation 100 MiB, not
 * the 0 MiB at the allocated peak. */
static void test_fragmentation_adds_up_to_the_peak(void **state)
{
  vs_mem m;
  uint64_t sum = 0;
  (void)state;
  vs_mem_init(&m, 1000 * MIB, 64 * MIB);
  assert_int_equal(vs_mem_record_alloc(&m, VS_CAT_PARAMS, 200 * MIB, 200 * MIB,
                                       200 * MIB, false, 1, 100), 0);
  assert_int_equal(vs_mem_record_alloc(&m, VS_CAT_TEMP, 100 * MIB, 100 * MIB,
                                       300 * MIB, false, 2, 200), 0);
  assert_int_equal(
      vs_mem_record_free(&m, VS_CAT_TEMP, 100 * MIB, 100 * MIB, 300 * MIB), 0);
  assert_int_equal(vs_mem_record_alloc(&m, VS_CAT_ACTIVATIONS, 50 * MIB,
                                       50 * MIB, 400 * MIB, false, 3, 300), 0);
  assert_int_equal(m.peak_allocated_bytes, 300 * MIB);
  assert_int_equal(m.peak_reserved_bytes, 400 * MIB);
  assert_int_equal(m.reserved_at_peak_bytes, 300 * MIB);
  assert_int_equal(vs_mem_fragmentation(&m), 100 * MIB);
  for (int c = 0; c < VS_CAT_N; c++)
    sum += m.at_peak[c]; /* framework included */
  assert_int_equal(sum + vs_mem_fragmentation(&m), m.peak_used_bytes);
  assert_int_equal(m.peak_used_bytes, 464 * MIB);
}

/* What the live buffers asked for, by category, beside the blocks the
 * caching allocator handed out (the steady-state proof compares it: a
 * block a little larger than asked, handed out whole, rounds allocated
 * up in some rounds and not others): a 5 MiB request in a 6 MiB block
 * counts 6 in by_cat and 5 in asked_by_cat, and a free gives both back;
 * the exact allocator's are equal; a request over its block is refused. */
static void test_asked_bytes_beside_blocks(void **state)
{
  vs_mem m;
  (void)state;
  vs_mem_init(&m, 1000 * MIB, 0);
  assert_int_equal(vs_mem_record_alloc(&m, VS_CAT_ACTIVATIONS, 6 * MIB, 5 * MIB,
                                       20 * MIB, false, 1, 10),
                   0);
  assert_int_equal(m.by_cat[VS_CAT_ACTIVATIONS], 6 * MIB);
  assert_int_equal(m.asked_by_cat[VS_CAT_ACTIVATIONS], 5 * MIB);
  assert_int_equal(
      vs_mem_record_free(&m, VS_CAT_ACTIVATIONS, 6 * MIB, 6 * MIB, 20 * MIB),
      VS_EINPUT); /* it asked for 5 */
  assert_int_equal(
      vs_mem_record_free(&m, VS_CAT_ACTIVATIONS, 6 * MIB, 5 * MIB, 20 * MIB),
      0);
  assert_int_equal(m.by_cat[VS_CAT_ACTIVATIONS], 0);
  assert_int_equal(m.asked_by_cat[VS_CAT_ACTIVATIONS], 0);
  assert_int_equal(vs_mem_record_alloc(&m, VS_CAT_TEMP, 5 * MIB, 6 * MIB,
                                       20 * MIB, false, 2, 20),
                   VS_EINPUT);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_TEMP, 7 * MIB, 3, 30), 0);
  assert_int_equal(m.asked_by_cat[VS_CAT_TEMP], m.by_cat[VS_CAT_TEMP]);
  assert_int_equal(vs_mem_free(&m, VS_CAT_TEMP, 7 * MIB), 0);
  assert_int_equal(m.asked_by_cat[VS_CAT_TEMP], 0);
}

static void test_peak_snapshot_first_time(void **state)
{
  vs_mem m;
  (void)state;
  vs_mem_init(&m, 1000 * MIB, 100 * MIB);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_PARAMS, 100 * MIB, 0, 0), 0);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_ACTIVATIONS, 60 * MIB, 7, 1000), 0);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_TEMP, 40 * MIB, 8, 2000), 0);
  /* peak reached: 100 + 60 + 40 = 200 MiB at op 8, t = 2000 ns */
  assert_int_equal(vs_mem_free(&m, VS_CAT_TEMP, 40 * MIB), 0);
  /* Back to 200 MiB with a different mix (100 params + 100 activations):
   * equal, not greater, so the first snapshot stays. */
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_ACTIVATIONS, 40 * MIB, 9, 3000), 0);
  assert_int_equal(m.allocated_bytes, 200 * MIB);
  assert_int_equal(m.peak_allocated_bytes, 200 * MIB);
  assert_int_equal(m.peak_op, 8);
  assert_int_equal(m.peak_t_ns, 2000);
  assert_int_equal(m.at_peak[VS_CAT_PARAMS], 100 * MIB);
  assert_int_equal(m.at_peak[VS_CAT_ACTIVATIONS], 60 * MIB);
  assert_int_equal(m.at_peak[VS_CAT_TEMP], 40 * MIB);
  assert_int_equal(m.at_peak[VS_CAT_GRADS], 0);
  assert_int_equal(m.at_peak[VS_CAT_FRAMEWORK], 100 * MIB);
  assert_int_equal(m.reserved_at_peak_bytes, 200 * MIB);
  /* the snapshot's categories sum to the peak: 100 + 60 + 40 */
  assert_int_equal(m.at_peak[VS_CAT_PARAMS] + m.at_peak[VS_CAT_ACTIVATIONS] +
                       m.at_peak[VS_CAT_TEMP],
                   m.peak_allocated_bytes);

  /* One byte more is a new peak, at the new op and time. */
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_GRADS, 1, 10, 4000), 0);
  assert_int_equal(m.peak_allocated_bytes, 200 * MIB + 1);
  assert_int_equal(m.peak_op, 10);
  assert_int_equal(m.peak_t_ns, 4000);
  assert_int_equal(m.at_peak[VS_CAT_ACTIVATIONS], 100 * MIB); /* 60 + 40 */
  assert_int_equal(m.at_peak[VS_CAT_TEMP], 0);
  assert_int_equal(m.at_peak[VS_CAT_GRADS], 1);
  assert_ok(&m);
}

static void test_oom_first_allocation(void **state)
{
  vs_mem m;
  (void)state;
  /* 100 MiB GPU with 10 MiB framework: 90 MiB for the allocator. */
  vs_mem_init(&m, 100 * MIB, 10 * MIB);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_PARAMS, 50 * MIB, 1, 10), 0);
  /* 10 + 50 + 40 = 100 MiB: exactly full is not out of memory */
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_ACTIVATIONS, 40 * MIB, 2, 20), 0);
  assert_false(m.oom.happened);
  assert_int_equal(vs_mem_free(&m, VS_CAT_ACTIVATIONS, 40 * MIB), 0);
  /* 10 + 50 + 45 = 105 MiB > 100: the first OOM, and the tracker goes on
   * so the report can show by how much (memory.h). */
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_TEMP, 45 * MIB, 3, 30), 0);
  assert_true(m.oom.happened);
  assert_int_equal(m.oom.op, 3);
  assert_int_equal(m.oom.t_ns, 30);
  assert_int_equal(m.oom.requested_bytes, 45 * MIB);
  /* in use before it: reserved 50 + framework 10 */
  assert_int_equal(m.oom.in_use_bytes, 60 * MIB);
  assert_int_equal(m.oom.category, VS_CAT_TEMP);
  assert_int_equal(m.allocated_bytes, 95 * MIB); /* 50 + 45, still counted */
  assert_int_equal(m.peak_used_bytes, 105 * MIB);
  /* A second, larger overflow does not overwrite the first. */
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_GRADS, 80 * MIB, 4, 40), 0);
  assert_int_equal(m.oom.op, 3);
  assert_int_equal(m.oom.requested_bytes, 45 * MIB);
  assert_int_equal(m.oom.category, VS_CAT_TEMP);
  assert_ok(&m);
}

static void test_free_more_than_held(void **state)
{
  vs_mem m;
  (void)state;
  vs_mem_init(&m, 1000 * MIB, 0);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_TEMP, 10 * MIB, 0, 0), 0);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_ACTIVATIONS, 30 * MIB, 0, 0), 0);
  /* 10 MiB of temp held: 10 MiB + 1 is a schedule bug, even though the
   * total allocated (40 MiB) would cover it. */
  assert_int_equal(vs_mem_free(&m, VS_CAT_TEMP, 10 * MIB + 1), VS_EINPUT);
  assert_int_equal(vs_mem_free(&m, VS_CAT_GRADS, 1), VS_EINPUT);
  /* inputs unchanged on error */
  assert_int_equal(m.by_cat[VS_CAT_TEMP], 10 * MIB);
  assert_int_equal(m.allocated_bytes, 40 * MIB);
  assert_ok(&m);
  /* exactly what is held is fine */
  assert_int_equal(vs_mem_free(&m, VS_CAT_TEMP, 10 * MIB), 0);
  assert_int_equal(m.allocated_bytes, 30 * MIB);
  assert_ok(&m);
}

static void test_counter_overflow(void **state)
{
  vs_mem m;
  (void)state;
  vs_mem_init(&m, UINT64_MAX, 0);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_PARAMS, UINT64_MAX - 5, 0, 0), 0);
  /* (2^64 - 6) + 10 wraps: refused, nothing changes */
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_TEMP, 10, 1, 1), VS_ELIMIT);
  assert_int_equal(m.by_cat[VS_CAT_TEMP], 0);
  assert_int_equal(m.allocated_bytes, UINT64_MAX - 5);
  assert_ok(&m);
}

static void test_check_detects_tampering(void **state)
{
  vs_mem m, bad;
  vs_error err;
  (void)state;
  vs_mem_init(&m, 1000 * MIB, 10 * MIB);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_PARAMS, 100 * MIB, 0, 0), 0);
  assert_int_equal(vs_mem_alloc(&m, VS_CAT_TEMP, 50 * MIB, 1, 0), 0);
  assert_ok(&m);

  /* categories no longer sum to allocated: 100 + 51 != 150 MiB */
  bad = m;
  bad.by_cat[VS_CAT_TEMP] += MIB;
  vs_error_clear(&err);
  assert_int_equal(vs_mem_check(&bad, &err), VS_EINPUT);
  assert_int_equal(err.code, VS_EINPUT);
  assert_non_null(strstr(err.msg, "categories sum to"));
  /* the message gives both numbers: 151 MiB = 158334976, 150 MiB = 157286400 */
  assert_non_null(strstr(err.msg, "158334976"));
  assert_non_null(strstr(err.msg, "157286400"));

  /* reserved below allocated */
  bad = m;
  bad.reserved_bytes = 149 * MIB;
  vs_error_clear(&err);
  assert_int_equal(vs_mem_check(&bad, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "reserved"));

  /* a peak below its current value */
  bad = m;
  bad.peak_allocated_bytes = 10 * MIB;
  vs_error_clear(&err);
  assert_int_equal(vs_mem_check(&bad, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "peak"));

  /* framework changes are outside the category sum but break peak_used */
  bad = m;
  bad.by_cat[VS_CAT_FRAMEWORK] += MIB;
  vs_error_clear(&err);
  assert_int_equal(vs_mem_check(&bad, &err), VS_EINPUT);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_init),
      cmocka_unit_test(test_fragmentation_adds_up_to_the_peak),
      cmocka_unit_test(test_asked_bytes_beside_blocks),
      cmocka_unit_test(test_category_names),
      cmocka_unit_test(test_accounting_by_category),
      cmocka_unit_test(test_framework_is_not_allocatable),
      cmocka_unit_test(test_peak_snapshot_first_time),
      cmocka_unit_test(test_oom_first_allocation),
      cmocka_unit_test(test_free_more_than_held),
      cmocka_unit_test(test_counter_overflow),
      cmocka_unit_test(test_check_detects_tampering),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
