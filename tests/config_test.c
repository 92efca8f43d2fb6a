/* config_test.c - table-driven INI loading (config.h) on a small key table of
 * its own: every value type, bounds, origins, and each message a bad file or
 * --set earns, checked for its text, file:line and return code. */
#include "testutil.h"

#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The target struct of the test table. */
typedef struct cfg {
  uint64_t n;              /* [a] n: count, > 0, required */
  uint64_t size_bytes;     /* [a] size: size */
  double ratio;            /* [a] ratio: real in [0, 1] */
  uint64_t small;          /* [a] small: count in [2, 10] */
  double bw;               /* [b] bw: rate */
  double lat;              /* [b] lat: latency */
  bool flag;               /* [b] flag: bool */
  int color;               /* [b] color: enum red/green/blue */
  char label[VS_NAME_MAX]; /* [b] label: name */
  vs_count_list sizes;     /* [b] sizes: list of counts, each > 0 */
  uint32_t paints;         /* [b] paints: names among colors, as bits */
} cfg;

static const char *const colors[] = {"red", "green", "blue", NULL};

#define K(sec, key, ty, field, ...)                                          \
  {.section = sec, .name = key, .type = ty, .offset = offsetof(cfg, field),  \
   __VA_ARGS__}

static const vs_key keys[] = {
    K("a", "n", VS_KEY_COUNT, n, .positive = true, .required = true, .default_doc = "required"),
    K("a", "size", VS_KEY_SIZE, size_bytes, .default_doc = "1KiB"),
    K("a", "ratio", VS_KEY_REAL, ratio, .lo = 0, .hi = 1, .default_doc = "0.5"),
    K("a", "small", VS_KEY_COUNT, small, .lo = 2, .hi = 10, .default_doc = "2"),
    K("b", "bw", VS_KEY_RATE, bw, .positive = true),
    K("b", "lat", VS_KEY_LATENCY, lat, .default_doc = "1us"),
    K("b", "flag", VS_KEY_BOOL, flag, .default_doc = "false"),
    K("b", "color", VS_KEY_ENUM, color, .choices = colors, .default_doc = "red"),
    K("b", "label", VS_KEY_NAME, label, .default_doc = "none"),
    K("b", "sizes", VS_KEY_LIST, sizes, .positive = true, .default_doc = "1"),
    K("b", "paints", VS_KEY_FLAGS, paints, .choices = colors, .default_doc = "red"),
};
#undef K

static const vs_keytab tab = {keys, sizeof keys / sizeof keys[0], "test",
                              NULL, NULL};

/* Index of each key in keys[] (for origins). */
enum { KN, KSIZE, KRATIO, KSMALL, KBW, KLAT, KFLAG, KCOLOR, KLABEL, KSIZES,
       KPAINTS };

/* A cfg with recognisable defaults in every field. */
static void defaults(cfg *c, vs_origins *o)
{
  memset(c, 0, sizeof *c);
  memset(o, 0, sizeof *o);
  c->n = 77;
  c->size_bytes = 1024;
  c->ratio = 0.5;
  c->small = 2;
  c->bw = 1e9;
  c->lat = 1e-6;
  c->color = 0;
  strcpy(c->label, "none");
  c->sizes.n = 1;
  c->sizes.values[0] = 1;
  c->paints = 1; /* red */
}

/* Loads text as "t.ini" over defaults; returns the code, message in err. */
static int load(cfg *c, vs_origins *o, const char *text, vs_error *err)
{
  defaults(c, o);
  vs_error_clear(err);
  return vs_conf_load_string(&tab, c, o, "t.ini", text, err);
}

/* Loads text that must parse. */
static void load_ok(cfg *c, vs_origins *o, const char *text)
{
  vs_error err;
  if (load(c, o, text, &err) != 0)
    fail_msg("load failed: %s", err.msg);
  assert_int_equal(err.code, VS_OK);
  assert_string_equal(err.msg, "");
}

/* Issue 21, D5: a loader given an error holding an earlier failure (or
 * stack garbage) still parses: it clears err first, where it used to stop
 * at the first line and fail with the stale code. */
static void test_load_ignores_stale_error(void **state)
{
  cfg c;
  vs_origins o;
  vs_error err;
  (void)state;
  defaults(&c, &o);
  vs_error_set(&err, VS_EINPUT, "an earlier failure");
  assert_int_equal(vs_conf_load_string(&tab, &c, &o, "t.ini",
                                       "[a]\nn = 5\n", &err), 0);
  assert_int_equal(err.code, VS_OK);
  assert_int_equal(c.n, 5);
}

/* Loads text that must fail with VS_EINPUT and a message containing want. */
static void load_bad(const char *text, const char *want)
{
  cfg c;
  vs_origins o;
  vs_error err;
  int rc = load(&c, &o, text, &err);
  assert_int_equal(rc, VS_EINPUT);
  assert_int_equal(err.code, VS_EINPUT);
  if (!strstr(err.msg, want))
    fail_msg("message \"%s\" lacks \"%s\"", err.msg, want);
}

/* ------------------------------------------------------------------------
 * Values of every type
 * ------------------------------------------------------------------------ */

static void test_every_type_is_stored_in_base_units(void **state)
{
  cfg c;
  vs_origins o;
  (void)state;
  load_ok(&c, &o,
          "[a]\n"
          "n = 7.5e9\n"        /* line 2 */
          "size = 80GiB\n"
          "ratio = 0.25\n"
          "small = 10\n"
          "[b]\n"
          "bw = 3350GB/s\n"    /* line 7 */
          "lat = 3us\n"
          "flag = yes\n"
          "color = blue\n"
          "label = H100-SXM\n"
          "sizes = 1, 2,30\n"); /* line 12 */
  assert_true(c.n == 7500000000ull);        /* 7.5e9 */
  assert_true(c.size_bytes == 80ull << 30); /* 80GiB = 80 * 2^30 */
  assert_true(c.ratio == 0.25);             /* exact in binary */
  assert_true(c.small == 10);               /* hi bound is inclusive */
  assert_true(fabs(c.bw - 3.35e12) < 1);    /* 3350 * 10^9 B/s */
  assert_true(fabs(c.lat - 3e-6) < 1e-18);  /* 3 * 10^-6 s */
  assert_true(c.flag);
  assert_int_equal(c.color, 2);             /* index of "blue" in colors */
  assert_string_equal(c.label, "H100-SXM");
  assert_int_equal(c.sizes.n, 3);
  assert_true(c.sizes.values[0] == 1 && c.sizes.values[1] == 2 &&
              c.sizes.values[2] == 30);
  /* Origins: the file's name, the 1-based line, the text as written. */
  assert_string_equal(o.file, "t.ini");
  assert_true(o.keys[KN].set);
  assert_int_equal(o.keys[KN].line, 2);
  assert_string_equal(o.keys[KN].text, "7.5e9");
  assert_int_equal(o.keys[KBW].line, 7);
  assert_int_equal(o.keys[KSIZES].line, 12);
  assert_string_equal(o.keys[KSIZES].text, "1, 2,30");
}

/* Names: a set of choices, each once, written back in the choices' order. */
static void test_flags(void **state)
{
  cfg c;
  vs_origins o;
  vs_error err;
  char text[64] = "";
  FILE *f;
  (void)state;
  load_ok(&c, &o, "[a]\nn = 1\n[b]\npaints = blue, red\n");
  assert_int_equal(c.paints, 1u << 2 | 1u << 0);
  f = fmemopen(text, sizeof text, "w");
  assert_non_null(f);
  vs_conf_print_value(f, &keys[KPAINTS], &c);
  fclose(f);
  assert_string_equal(text, "red,blue");
  assert_int_equal(load(&c, &o, "[a]\nn = 1\n[b]\npaints = red,pink\n", &err),
                   VS_EINPUT);
  assert_non_null(strstr(err.msg, "t.ini:4: [b] paints = red,pink: 'pink' is "
                                  "not one of red, green or blue"));
  assert_int_equal(c.paints, 1); /* unchanged */
  assert_int_equal(load(&c, &o, "[a]\nn = 1\n[b]\npaints = red,green,red\n",
                        &err),
                   VS_EINPUT);
  assert_non_null(strstr(err.msg, "'red' is listed twice"));
  assert_int_equal(load(&c, &o, "[a]\nn = 1\n[b]\npaints = ,green\n", &err),
                   VS_EINPUT);
  assert_non_null(strstr(err.msg, "'' is not one of"));
}

static void test_unset_keys_keep_defaults(void **state)
{
  cfg c;
  vs_origins o;
  (void)state;
  load_ok(&c, &o, "[a]\nn = 3\n");
  assert_true(c.n == 3);
  /* Everything else holds what defaults() put there. */
  assert_true(c.size_bytes == 1024);
  assert_true(c.ratio == 0.5);
  assert_string_equal(c.label, "none");
  assert_false(o.keys[KSIZE].set);
  assert_true(vs_conf_is_set(&tab, &o, "a", "n"));
  assert_false(vs_conf_is_set(&tab, &o, "a", "size"));
  assert_false(vs_conf_is_set(&tab, &o, "a", "nope")); /* unknown key */
}

static void test_find(void **state)
{
  (void)state;
  assert_int_equal(vs_conf_find(&tab, "a", "n"), KN);
  assert_int_equal(vs_conf_find(&tab, "b", "sizes"), KSIZES);
  assert_int_equal(vs_conf_find(&tab, "b", "n"), -1); /* n lives in [a] */
  assert_int_equal(vs_conf_find(&tab, "c", "x"), -1);
}

static void test_empty_text_loads(void **state)
{
  cfg c;
  vs_origins o;
  (void)state;
  load_ok(&c, &o, "");
  load_ok(&c, &o, "\n\n; only a comment\n[a]\n[b]\n");
  assert_true(c.n == 77); /* default */
}

static void test_comments_and_indentation(void **state)
{
  cfg c;
  vs_origins o;
  (void)state;
  load_ok(&c, &o,
          "; a comment with a semicolon\n"
          "# a comment with a hash\n"
          "  [a]\n"                 /* an indented header */
          "   n = 5   ; inline comment after a blank\n"
          "\tsize = 2KiB\n"         /* a tab-indented key is a key */
          "    ; an indented comment\n"
          "    # and another\n"
          "ratio = 0.75\n"          /* line 8 */
          "\n");
  assert_true(c.n == 5);
  assert_true(c.size_bytes == 2048); /* 2KiB = 2 * 1024 */
  assert_true(c.ratio == 0.75);
  assert_int_equal(o.keys[KRATIO].line, 8); /* comments still count lines */
  /* The inline comment is not part of the recorded text. */
  assert_string_equal(o.keys[KN].text, "5");
}

static void test_inline_hash_is_not_a_comment(void **state)
{
  (void)state;
  /* Only ';' starts an inline comment; "5 # x" is a value with junk. */
  load_bad("[a]\nn = 5 # x\n", "t.ini:2: [a] n = 5 # x: unexpected text");
}

static void test_crlf_and_bom(void **state)
{
  cfg c;
  vs_origins o;
  (void)state;
  load_ok(&c, &o, "\xEF\xBB\xBF[a]\r\nn = 9\r\n[b]\r\ncolor = green\r\n");
  assert_true(c.n == 9);
  assert_int_equal(c.color, 1); /* "green" */
}

static void test_load_file(void **state)
{
  char path[128], where[256], want[256];
  cfg c;
  vs_origins o;
  vs_error err;
  (void)state;
  tu_write_temp("[a]\n\nn = 4\n", ".ini", path, sizeof path);
  defaults(&c, &o);
  vs_error_clear(&err);
  assert_int_equal(vs_conf_load_file(&tab, &c, &o, path, &err), 0);
  assert_true(c.n == 4);
  assert_string_equal(o.file, path);
  /* "<path>:3: [a] n = 4" (config.h's vs_conf_where format). */
  snprintf(want, sizeof want, "%s:3: [a] n = 4", path);
  assert_string_equal(vs_conf_where(&tab, &o, "a", "n", where, sizeof where),
                      want);
  unlink(path);
}

/* A directory or a binary file given as an INI file gets a message that
 * says what it is, not a parse error full of raw bytes. */
static void test_directory_and_binary_content(void **state)
{
  cfg c;
  vs_origins o;
  vs_error err;
  char dir[64];
  (void)state;
  defaults(&c, &o);
  vs_error_clear(&err);
  tu_temp_dir(dir, sizeof dir);
  assert_int_equal(vs_conf_load_file(&tab, &c, &o, dir, &err), VS_EIO);
  assert_non_null(strstr(err.msg, "is a directory, not a test file"));
  tu_remove_dir(dir);
  load_bad("[a]\nn = 1\x01\x02\n", ":2: not a line of text (control characters)");
  load_bad("\x7f\x03garbage = 1\n", ":1: not a line of text");
}

/* Writes len bytes of text (NULs included) to a temporary .ini; path[64]. */
static void write_bytes(const char *text, size_t len, char *path)
{
  tu_write_temp_bytes(text, len, ".ini", path, 64);
}

static void load_file_bad(const char *text, size_t len, const char *want)
{
  char path[64];
  cfg c;
  vs_origins o;
  vs_error err;
  write_bytes(text, len, path);
  defaults(&c, &o);
  vs_error_clear(&err);
  assert_int_equal(vs_conf_load_file(&tab, &c, &o, path, &err), VS_EINPUT);
  tu_assert_message_at(err.msg, want, path);
  unlink(path);
}

/* What a file read byte by byte can hold that a string cannot: a NUL byte
 * cut values short and hid whole lines; a device that never ends
 * (/dev/zero) was read forever, and is no regular file. */
static void test_nul_bytes_and_endless_input(void **state)
{
  static const char cut[] = "[a]\nn = 4\0002\n";
  static const char hidden[] = "[a]\nn = 1\n\0bogus = 7\n";
  char path[64];
  cfg c;
  vs_origins o;
  vs_error err;
  (void)state;
  load_file_bad(cut, sizeof cut - 1,
                "@:2: a NUL byte: not a line of text (is this a test INI file?)");
  load_file_bad(hidden, sizeof hidden - 1, "@:3: a NUL byte");
  defaults(&c, &o);
  vs_error_clear(&err);
  if (access("/dev/zero", R_OK) == 0) {
    assert_int_equal(vs_conf_load_file(&tab, &c, &o, "/dev/zero", &err),
                     VS_EIO);
    assert_string_equal(err.msg, "/dev/zero: not a regular file (a device, "
                                 "FIFO or socket), not a test file");
  }
  /* a file past 1 MiB is not an INI file, whatever it holds */
  {
    static char big[(1u << 20) + 64];
    for (size_t i = 0; i < sizeof big; i += 8)
      memcpy(big + i, "; pad \n\n", 8);
    write_bytes(big, sizeof big, path);
    defaults(&c, &o);
    vs_error_clear(&err);
    assert_int_equal(vs_conf_load_file(&tab, &c, &o, path, &err), VS_EINPUT);
    tu_assert_message_at(err.msg, "@: over 1048576 bytes: not a test INI file", path);
    unlink(path);
    /* exactly 1 MiB is still read */
    write_bytes(big, 1u << 20, path);
    defaults(&c, &o);
    vs_error_clear(&err);
    if (vs_conf_load_file(&tab, &c, &o, path, &err))
      fail_msg("%s", err.msg);
    unlink(path);
  }
}

static void test_unreadable_file_is_eio(void **state)
{
  cfg c;
  vs_origins o;
  vs_error err;
  (void)state;
  defaults(&c, &o);
  vs_error_clear(&err);
  assert_int_equal(vs_conf_load_file(&tab, &c, &o, "/nonexistent/x.ini", &err),
                   VS_EIO);
  assert_int_equal(err.code, VS_EIO);
  /* "/nonexistent/x.ini: cannot read test file: No such file or directory" */
  assert_non_null(strstr(err.msg, "/nonexistent/x.ini: cannot read test file"));
  assert_non_null(strstr(err.msg, "No such file"));
}

/* ------------------------------------------------------------------------
 * Bad files
 * ------------------------------------------------------------------------ */

static void test_unknown_section(void **state)
{
  (void)state;
  load_bad("[a]\nn = 1\n[c]\nx = 1\n",
           "t.ini:3: unknown section [c] in test file; valid sections: [a], [b]");
  /* Section names are exact: no case folding, no trimming. */
  load_bad("[A]\n", "t.ini:1: unknown section [A]");
  load_bad("[ a ]\n", "t.ini:1: unknown section [ a ]");
  /* a control character is not shown raw as if it were a name */
  load_bad("[a\x1b[2K]\n", "t.ini:1: not a line of text (control characters)");
  {
    char line[160];
    memset(line, 'x', sizeof line);
    line[0] = '[';
    memcpy(line + 140, "]\n", 3);
    load_bad(line, "t.ini:1: section name too long (over 127 characters)");
  }
}

/* inih drops whatever follows a section's ], keys included; and a file
 * with carriage returns alone for line ends reads as one line. */
static void test_text_after_section_and_cr_line_ends(void **state)
{
  cfg c;
  vs_origins o;
  (void)state;
  load_bad("[a] n = 4\n", "t.ini:1: text after [a]: put each key = value on a "
                          "line of its own");
  load_bad("[a]\nn = 1\n[b] junk\n", "t.ini:3: text after [b]");
  load_bad("[a]\rn = 4\r", "t.ini:1: a carriage return inside the line (old "
                            "Mac line ends?): end lines with \\n or \\r\\n");
  /* a comment may follow */
  load_ok(&c, &o, "[a] ; the a section\nn = 3\n[b]  # b\n");
  assert_true(c.n == 3);
}

static void test_unknown_key(void **state)
{
  (void)state;
  load_bad("[a]\nn = 1\nzz = 2\n",
           "t.ini:3: unknown key 'zz' in [a]; valid keys: n, size, ratio, small");
  /* Keys belong to their section: bw is a [b] key. */
  load_bad("[a]\nbw = 2\n", "t.ini:2: unknown key 'bw' in [a]");
}

static void test_key_before_any_section(void **state)
{
  (void)state;
  load_bad("n = 1\n[a]\n", "t.ini:1: key 'n' appears before any [section]");
}

static void test_key_set_twice(void **state)
{
  (void)state;
  load_bad("[a]\nn = 1\n; x\nn = 2\n",
           "t.ini:4: [a] n = 2: key set twice (first on line 2)");
  /* Reopening a section does not make it legal. */
  load_bad("[a]\nn = 1\n[b]\n[a]\nn = 1\n", "key set twice (first on line 2)");
}

static void test_missing_value(void **state)
{
  (void)state;
  load_bad("[a]\nn =\n", "t.ini:2: [a] n = : missing value");
  load_bad("[a]\nn =    ; comment only\n", "t.ini:2: [a] n = : missing value");
}

static void test_malformed_line(void **state)
{
  (void)state;
  load_bad("[a]\nn 5\n",
           "t.ini:2: malformed line: expected [section], key = value, or a ; "
           "comment");
  load_bad("[a\nn = 5\n", "t.ini:1: malformed line");
  /* inih's "key: value", which the message does not offer (bad-input
   * review: it was read as n = 5); a ':' in a value is the value's */
  load_bad("[a]\nn : 5\n", "t.ini:2: malformed line");
  /* The first problem is reported even when a later line is bad too. */
  load_bad("[a]\njunk\nzz = 1\n", "t.ini:2: malformed line");
}

static void test_line_too_long(void **state)
{
  char text[2048];
  cfg c;
  vs_origins o;
  vs_error err;
  (void)state;
  /* inih's line buffer holds 200 bytes: 198 characters, "\n" and NUL. A
   * comment line of exactly 198 characters is fine... */
  snprintf(text, sizeof text, "[a]\n;%0197d\nn = 1\n", 0);
  assert_int_equal(strlen(strchr(text, ';')), 198 + strlen("\nn = 1\n"));
  load_ok(&c, &o, text);
  /* ...and so with a \r\n line end (198 characters less the line end,
   * whichever it is)... */
  snprintf(text, sizeof text, "[a]\r\n;%0197d\r\nn = 1\r\n", 0);
  load_ok(&c, &o, text);
  /* ...one of 199 is too long. */
  snprintf(text, sizeof text, "[a]\r\n;%0198d\r\nn = 1\r\n", 0);
  assert_int_equal(load(&c, &o, text, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "t.ini:2: line too long (over 198"));
  snprintf(text, sizeof text, "[a]\n;%0198d\nn = 1\n", 0);
  assert_int_equal(load(&c, &o, text, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "t.ini:2: line too long (over 198 characters; a "
                                  "list of counts can write a run of equal "
                                  "ones as VxN, e.g. 8x14)"));
  /* A line longer than the reader's own 1 KiB buffer is caught too. */
  snprintf(text, sizeof text, "[a]\nn = 1\n;%01500d\n", 0);
  assert_int_equal(load(&c, &o, text, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "t.ini:3: line too long"));
}

static void test_bad_numbers_name_key_and_line(void **state)
{
  (void)state;
  load_bad("[a]\nn = abc\n", "t.ini:2: [a] n = abc: not a number");
  load_bad("[a]\nn = 1.5\n", "t.ini:2: [a] n = 1.5: must be a whole number");
  load_bad("[a]\nn = -1\n", "[a] n = -1: must not be negative");
  load_bad("[a]\nsize = 80GB/s\n", "t.ini:2: [a] size = 80GB/s: unknown unit");
  load_bad("[b]\nbw = 3TB\n", "[b] bw = 3TB: unknown unit");
  load_bad("[b]\nlat = 3 weeks\n", "[b] lat = 3 weeks: unknown unit");
  load_bad("[b]\nflag = maybe\n", "[b] flag = maybe: expected true or false");
  load_bad("[a]\nratio = half\n", "[a] ratio = half: not a number");
}

static void test_enum_lists_valid_choices(void **state)
{
  (void)state;
  load_bad("[b]\ncolor = pink\n",
           "t.ini:2: [b] color = pink: expected red, green or blue");
  /* Enum names are case-sensitive. */
  load_bad("[b]\ncolor = Red\n", "expected red, green or blue");
}

static void test_bounds(void **state)
{
  cfg c;
  vs_origins o;
  (void)state;
  /* positive: n > 0 */
  load_bad("[a]\nn = 0\n", "t.ini:2: [a] n = 0: must be greater than 0");
  /* lo = 2, hi = 10, both inclusive */
  load_bad("[a]\nsmall = 1\n", "t.ini:2: [a] small = 1: must be at least 2");
  load_bad("[a]\nsmall = 11\n", "t.ini:2: [a] small = 11: must be at most 10");
  load_ok(&c, &o, "[a]\nsmall = 2\n");
  assert_true(c.small == 2);
  /* real in [0, 1] */
  load_bad("[a]\nratio = 1.5\n", "[a] ratio = 1.5: must be at most 1");
  load_bad("[a]\nratio = -0.1\n", "[a] ratio = -0.1: must be at least 0");
  load_ok(&c, &o, "[a]\nratio = 0\n");
  assert_true(c.ratio == 0);
  /* positive on a rate: 0 GB/s is not a bandwidth */
  load_bad("[b]\nbw = 0\n", "[b] bw = 0: must be greater than 0");
  /* each list item is checked */
  load_bad("[b]\nsizes = 1,0,3\n", "[b] sizes = 1,0,3: must be greater than 0");
}

static void test_names(void **state)
{
  char text[256];
  cfg c;
  vs_origins o;
  (void)state;
  load_bad("[b]\nlabel = two words\n",
           "[b] label = two words: expected a name of 1-63 characters without "
           "blanks or commas");
  load_bad("[b]\nlabel = a,b\n", "expected a name of 1-63 characters");
  /* VS_NAME_MAX = 64 holds 63 characters and the NUL. */
  snprintf(text, sizeof text, "[b]\nlabel = %063d\n", 0);
  load_ok(&c, &o, text);
  assert_int_equal(strlen(c.label), 63);
  snprintf(text, sizeof text, "[b]\nlabel = %064d\n", 0);
  load_bad(text, "expected a name of 1-63 characters");
}

static void test_lists(void **state)
{
  char text[256];
  size_t used;
  cfg c;
  vs_origins o;
  (void)state;
  load_bad("[b]\nsizes = 1,,2\n", "[b] sizes = 1,,2: empty value");
  load_bad("[b]\nsizes = 1,x\n", "[b] sizes = 1,x: not a number");
  load_bad("[b]\nsizes = 1,2.5\n", "must be a whole number");
  /* a trailing comma is an item left out, not nothing */
  load_bad("[b]\nsizes = 2,2,\n", "[b] sizes = 2,2,: empty list item after "
                                  "the last comma");
  /* A value longer than the 95 characters an origin keeps is still parsed
   * whole: 60 items "1," .. make 119 characters. */
  used = (size_t)snprintf(text, sizeof text, "[b]\nsizes = ");
  for (int i = 0; i < 60; i++)
    used += (size_t)snprintf(text + used, sizeof text - used, "%s1",
                             i ? "," : "");
  snprintf(text + used, sizeof text - used, "\n");
  load_ok(&c, &o, text);
  assert_int_equal(c.sizes.n, 60);
  /* The recorded text is cut to fit vs_origin.text (96 bytes). */
  assert_int_equal(strlen(o.keys[KSIZES].text), sizeof o.keys[KSIZES].text - 1);
}

static void test_long_value_not_cut_before_parsing(void **state)
{
  char text[256];
  cfg c;
  vs_origins o;
  (void)state;
  /* 100 zeros then 5: a count of 5. Cut at 95 characters it would read 0
   * and fail "greater than 0". */
  snprintf(text, sizeof text, "[a]\nn = %0101d\n", 5);
  load_ok(&c, &o, text);
  assert_true(c.n == 5);
  /* a message quotes such a value cut, and says so: 92 characters and
   * "...", never a number that looks whole */
  snprintf(text, sizeof text, "[a]\nn = %0101dx\n", 5);
  {
    char want[160];
    snprintf(want, sizeof want, "[a] n = %092d...: unknown unit", 0);
    load_bad(text, want);
  }
}

/* ------------------------------------------------------------------------
 * --set
 * ------------------------------------------------------------------------ */

static void test_set_good_value(void **state)
{
  char where[256];
  cfg c;
  vs_origins o;
  vs_error err;
  (void)state;
  load_ok(&c, &o, "[a]\nn = 1\n");
  vs_error_clear(&err);
  /* --set overrides a key the file set; that is not "set twice". */
  assert_int_equal(vs_conf_set(&tab, &c, &o, "a", "n", "12", &err), 0);
  assert_true(c.n == 12);
  assert_true(o.keys[KN].set);
  assert_int_equal(o.keys[KN].line, 0); /* 0 marks --set */
  assert_string_equal(vs_conf_where(&tab, &o, "a", "n", where, sizeof where),
                      "--set a.n=12");
  /* A second --set of the same key wins too. */
  assert_int_equal(vs_conf_set(&tab, &c, &o, "a", "n", "13", &err), 0);
  assert_true(c.n == 13);
  assert_int_equal(vs_conf_set(&tab, &c, &o, "b", "sizes", "4,5", &err), 0);
  assert_int_equal(c.sizes.n, 2);
  assert_int_equal(err.code, VS_OK);
  /* control characters are refused as in a file's line, and not echoed
   * (a name with a line end would split a report's line in two) */
  {
    char label[sizeof c.label];
    memcpy(label, c.label, sizeof label);
    assert_int_equal(vs_conf_assign(&tab, &c, &o, "b.label=H1\nX\r", "",
                                    &err), VS_EINPUT);
    assert_string_equal(err.msg, "--set b.label: not text (control "
                                 "characters in it)");
    assert_memory_equal(c.label, label, sizeof label);
  }
  /* the blanks around a value go, as inih takes them off a file's (hunt:
   * "--set b.color= blue" was "expected red, green or blue") */
  assert_int_equal(vs_conf_assign(&tab, &c, &o, "b.color= blue\t ", "", &err),
                   0);
  assert_int_equal(c.color, 2);
  assert_string_equal(
      vs_conf_where(&tab, &o, "b", "color", where, sizeof where),
      "--set b.color=blue");
  assert_int_equal(vs_conf_assign(&tab, &c, &o, "b.color=  ", "", &err),
                   VS_EINPUT);
}

/* --set section.name=value must fail with want and leave c exactly as it
 * was. */
static void set_bad(const char *section, const char *name, const char *value,
                    const char *want)
{
  cfg c, before;
  vs_origins o;
  vs_error err;
  load_ok(&c, &o, "[a]\nn = 1\n[b]\ncolor = green\nlabel = x\n");
  before = c;
  vs_error_clear(&err);
  assert_int_equal(vs_conf_set(&tab, &c, &o, section, name, value, &err),
                   VS_EINPUT);
  if (!strstr(err.msg, want))
    fail_msg("message \"%s\" lacks \"%s\"", err.msg, want);
  assert_memory_equal(&c, &before, sizeof c);
  /* The origin still names the file's line, not --set. */
  assert_int_equal(o.keys[KN].line, 2);
}

static void test_set_bad_leaves_target_unchanged(void **state)
{
  (void)state;
  set_bad("a", "zz", "1",
          "--set a.zz: unknown key 'zz' in [a]; valid keys: n, size, ratio, small");
  set_bad("c", "n", "1", "--set c.n: unknown section [c]; valid sections: [a], [b]");
  set_bad("a", "n", "x", "--set a.n=x: not a number");
  set_bad("a", "n", "0", "--set a.n=0: must be greater than 0");
  set_bad("a", "n", "", "--set a.n=: missing value");
  set_bad("a", "n", NULL, "--set a.n=: missing value");
  set_bad("a", "small", "11", "--set a.small=11: must be at most 10");
  set_bad("b", "color", "pink", "--set b.color=pink: expected red, green or blue");
  set_bad("b", "label", "a b", "--set b.label=a b: expected a name");
  set_bad("b", "flag", "2", "--set b.flag=2: expected true or false");
  set_bad("b", "sizes", "1,0", "--set b.sizes=1,0: must be greater than 0");
  set_bad("b", "sizes", "1,x", "--set b.sizes=1,x: not a number");
}

/* ------------------------------------------------------------------------
 * Origins, required keys, choices
 * ------------------------------------------------------------------------ */

static void test_where_texts(void **state)
{
  char where[256];
  cfg c;
  vs_origins o;
  (void)state;
  load_ok(&c, &o, "[a]\n\n\n\nn = 3\n");
  /* Set from the file: "file:line: [sec] key = text" (config.h). */
  assert_string_equal(vs_conf_where(&tab, &o, "a", "n", where, sizeof where),
                      "t.ini:5: [a] n = 3");
  /* Unset: the file and the documented default. */
  assert_string_equal(vs_conf_where(&tab, &o, "a", "size", where, sizeof where),
                      "t.ini: [a] size (default 1KiB)");
  /* Unset with no default_doc: "derived". */
  assert_string_equal(vs_conf_where(&tab, &o, "b", "bw", where, sizeof where),
                      "t.ini: [b] bw (default derived)");
  /* Not in the table at all. */
  assert_string_equal(vs_conf_where(&tab, &o, "x", "y", where, sizeof where),
                      "[x] y");
  /* A short buffer is cut, never overrun. */
  assert_string_equal(vs_conf_where(&tab, &o, "a", "n", where, 6), "t.ini");
}

static void test_required_keys(void **state)
{
  cfg c;
  vs_origins o;
  vs_error err;
  (void)state;
  load_ok(&c, &o, "[a]\nsize = 1B\n");
  vs_error_clear(&err);
  assert_int_equal(vs_conf_check_required(&tab, &o, &err), VS_EINPUT);
  assert_string_equal(err.msg, "t.ini: missing required key 'n' in [a]");
  /* A --set satisfies it as well as the file does. */
  vs_error_clear(&err);
  assert_int_equal(vs_conf_set(&tab, &c, &o, "a", "n", "1", &err), 0);
  assert_int_equal(vs_conf_check_required(&tab, &o, &err), 0);
  assert_int_equal(err.code, VS_OK);
}

static void test_choices_text(void **state)
{
  static const char *const one[] = {"only", NULL};
  static const char *const two[] = {"x", "y", NULL};
  char buf[64];
  (void)state;
  assert_string_equal(vs_conf_choices(one, buf, sizeof buf), "only");
  assert_string_equal(vs_conf_choices(two, buf, sizeof buf), "x or y");
  assert_string_equal(vs_conf_choices(colors, buf, sizeof buf),
                      "red, green or blue");
}

static void test_first_error_wins(void **state)
{
  cfg c;
  vs_origins o;
  vs_error err;
  (void)state;
  /* Parsing stops at the first bad line: its message is the one kept. */
  assert_int_equal(load(&c, &o, "[a]\nn = 0\nzz = 1\n[c]\n", &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "t.ini:2: [a] n = 0: must be greater than 0"));
  assert_null(strstr(err.msg, "zz"));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_type_is_stored_in_base_units),
      cmocka_unit_test(test_flags),
      cmocka_unit_test(test_unset_keys_keep_defaults),
      cmocka_unit_test(test_find),
      cmocka_unit_test(test_load_ignores_stale_error),
      cmocka_unit_test(test_empty_text_loads),
      cmocka_unit_test(test_comments_and_indentation),
      cmocka_unit_test(test_inline_hash_is_not_a_comment),
      cmocka_unit_test(test_crlf_and_bom),
      cmocka_unit_test(test_load_file),
      cmocka_unit_test(test_nul_bytes_and_endless_input),
      cmocka_unit_test(test_text_after_section_and_cr_line_ends),
      cmocka_unit_test(test_unreadable_file_is_eio),
      cmocka_unit_test(test_directory_and_binary_content),
      cmocka_unit_test(test_unknown_section),
      cmocka_unit_test(test_unknown_key),
      cmocka_unit_test(test_key_before_any_section),
      cmocka_unit_test(test_key_set_twice),
      cmocka_unit_test(test_missing_value),
      cmocka_unit_test(test_malformed_line),
      cmocka_unit_test(test_line_too_long),
      cmocka_unit_test(test_bad_numbers_name_key_and_line),
      cmocka_unit_test(test_enum_lists_valid_choices),
      cmocka_unit_test(test_bounds),
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_lists),
      cmocka_unit_test(test_long_value_not_cut_before_parsing),
      cmocka_unit_test(test_set_good_value),
      cmocka_unit_test(test_set_bad_leaves_target_unchanged),
      cmocka_unit_test(test_where_texts),
      cmocka_unit_test(test_required_keys),
      cmocka_unit_test(test_choices_text),
      cmocka_unit_test(test_first_error_wins),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
