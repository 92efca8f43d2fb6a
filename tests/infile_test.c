/* infile_test.c - opening text inputs (infile.h): a regular file opens;
 * anything else is refused at once with the path and what it should have
 * been; the UTF-8 byte-order mark's length. */
#include "infile.h"
#include "testutil.h"

#include <setjmp.h> /* before cmocka.h, which needs it */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

/* path must be refused as input `what` with VS_EIO and a message that
 * starts with path and holds want. */
static void refused(const char *path, const char *want)
{
  vs_error err;
  vs_error_clear(&err);
  assert_null(vs_open_input(path, "test file", &err));
  assert_int_equal(err.code, VS_EIO);
  assert_int_equal(strncmp(err.msg, path, strlen(path)), 0);
  assert_non_null(strstr(err.msg, want));
}

static void test_regular_file_opens(void **state)
{
  char path[128], line[32];
  vs_error err;
  FILE *f;
  (void)state;
  tu_write_temp("[model]\n", ".ini", path, sizeof path);
  vs_error_clear(&err);
  f = vs_open_input(path, "test file", &err);
  assert_non_null(f);
  assert_int_equal(err.code, VS_OK);
  assert_non_null(fgets(line, sizeof line, f));
  assert_string_equal(line, "[model]\n");
  fclose(f);
  unlink(path);
}

/* A directory, a device and a FIFO (opened without waiting for a writer,
 * else this test would hang) are refused, as is a missing file. */
static void test_other_files_refused(void **state)
{
  char dir[64], fifo[128];
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  refused(dir, ": is a directory, not a test file");
  refused("/dev/null", ": not a regular file (a device, FIFO or socket), "
                       "not a test file");
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  refused(fifo, ": not a regular file");
  unlink(fifo);
  refused("/nonexistent/x.ini",
          ": cannot read test file: No such file or directory");
  tu_remove_dir(dir);
}

static void test_byte_order_mark(void **state)
{
  (void)state;
  assert_int_equal(vs_utf8_bom_len("\xEF\xBB\xBF{}", 5), 3);
  assert_int_equal(vs_utf8_bom_len("\xEF\xBB\xBF", 3), 3);
  assert_int_equal(vs_utf8_bom_len("\xEF\xBB\xBF", 2), 0); /* cut short */
  assert_int_equal(vs_utf8_bom_len("\xEF\xBB{}", 4), 0);
  assert_int_equal(vs_utf8_bom_len("{}", 2), 0);
  assert_int_equal(vs_utf8_bom_len("", 0), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_regular_file_opens),
      cmocka_unit_test(test_other_files_refused),
      cmocka_unit_test(test_byte_order_mark),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
