/* readme_test.c - README.md documents every INI key with the default the
 * code applies, in the key tables' order (`vsim keys`'s), so the table
 * cannot drift from the key tables. */
#include "testutil.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_table(const char *readme, const vs_keytab *tab)
{
  const char *prev = readme;
  for (size_t i = 0; i < tab->n_keys; i++) {
    const vs_key *k = &tab->keys[i];
    char name[128];
    const char *row, *end;
    char line[512];
    size_t n;

    snprintf(name, sizeof name, "| `[%s] %s` |", k->section, k->name);
    row = strstr(readme, name);
    if (!row)
      fail_msg("README.md does not document %s", name);
    if (row < prev)
      fail_msg("README.md documents %s above the key before it (the order "
               "of `vsim keys`)", name);
    prev = row;
    end = strchr(row, '\n');
    n = end ? (size_t)(end - row) : strlen(row);
    if (n >= sizeof line)
      n = sizeof line - 1;
    memcpy(line, row, n);
    line[n] = '\0';
    /* the row ends with the documented default */
    snprintf(name, sizeof name, "| %s |", k->default_doc);
    if (!strstr(line, name))
      fail_msg("README.md row '%s' lacks default '%s'", line, k->default_doc);
  }
}

static void test_every_key_documented_with_its_default(void **state)
{
  char *readme = tu_read_file(VSIM_SOURCE_DIR "/README.md");
  (void)state;
  assert_non_null(readme);
  check_table(readme, vs_workload_keys());
  check_table(readme, vs_topology_keys());
  free(readme);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_key_documented_with_its_default),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
