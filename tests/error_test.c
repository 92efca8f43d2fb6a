/* error_test.c - the error type: the first error wins, and a message too
 * long for it keeps its start and its end (the reason), never only the
 * start. */
#include "error.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

/* A second error keeps the first's code and message. */
static void test_first_error_wins(void **state)
{
  vs_error err;
  (void)state;
  vs_error_clear(&err);
  assert_int_equal(vs_error_set(&err, VS_EINPUT, "a.ini:%d: bad", 3),
                   VS_EINPUT);
  assert_int_equal(vs_error_set(&err, VS_EIO, "later"), VS_EIO);
  assert_int_equal(err.code, VS_EINPUT);
  assert_string_equal(err.msg, "a.ini:3: bad");
}

/* A message with a path near PATH_MAX: its start, " ... " and its end,
 * the reason whole, in at most VS_ERROR_MSG_MAX - 1 bytes; a multi-byte
 * character at either cut is kept whole or left out, never split. */
static void test_long_message_keeps_its_reason(void **state)
{
  char path[4000]; /* 1333 x "é/", its last byte the NUL */
  vs_error err;
  const char *reason = ": cannot read topology file: No such file";
  size_t n;
  (void)state;
  for (size_t i = 0; i + 2 < sizeof path; i += 3)
    memcpy(path + i, "\xc3\xa9/", 3); /* "é/" */
  path[sizeof path - 1] = '\0';
  vs_error_clear(&err);
  vs_error_set(&err, VS_EIO, "%s%s", path, reason);
  n = strlen(err.msg);
  assert_true(n < VS_ERROR_MSG_MAX);
  assert_true(n > VS_ERROR_MSG_MAX - 8);
  assert_int_equal(strncmp(err.msg, "\xc3\xa9/", 3), 0);
  assert_non_null(strstr(err.msg, "/ ... "));
  assert_string_equal(err.msg + n - strlen(reason), reason);
  for (size_t i = 0; i < n; i++) /* whole characters: no lone byte */
    if (((unsigned char)err.msg[i] & 0xE0) == 0xC0)
      assert_true(((unsigned char)err.msg[i + 1] & 0xC0) == 0x80);
    else if (((unsigned char)err.msg[i] & 0xC0) == 0x80)
      assert_true(i > 0 && ((unsigned char)err.msg[i - 1] & 0xE0) == 0xC0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_first_error_wins),
      cmocka_unit_test(test_long_message_keeps_its_reason),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
