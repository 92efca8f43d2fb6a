/* cli_test.c - end-to-end tests: run the built vsim binary on files in
 * tests/data/ and workloads/, and check exit status, messages and CSV. */
#include "report.h"
#include "testutil.h"
#include "units.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <csv.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA "tests/data/"

static tu_run r; /* large; one at a time */

static void run(const char *const *args) { tu_run_vsim(&r, args); }

static void assert_contains(const char *text, const char *needle)
{
  if (!strstr(text, needle))
    fail_msg("expected to find \"%s\" in:\n%s", needle, text);
}

/* ------------------------------------------------------------------------
 * A tiny CSV reader on libcsv: rows of string fields.
 * ------------------------------------------------------------------------ */

#define MAX_FIELDS 48 /* plan.csv has 38 columns */
#define MAX_ROWS 8

typedef struct table {
  char cells[MAX_ROWS][MAX_FIELDS][64];
  int n_fields[MAX_ROWS];
  int n_rows;  /* rows read (header included), at most MAX_ROWS kept */
  int total_rows;
} table;

static void on_field(void *data, size_t len, void *user)
{
  table *t = user;
  int row = t->total_rows;
  if (row < MAX_ROWS && t->n_fields[row] < MAX_FIELDS) {
    size_t n = len < 63 ? len : 63;
    memcpy(t->cells[row][t->n_fields[row]], data, n);
    t->cells[row][t->n_fields[row]][n] = '\0';
    t->n_fields[row]++;
  }
}

static void on_row(int c, void *user)
{
  table *t = user;
  (void)c;
  t->total_rows++;
  if (t->n_rows < MAX_ROWS)
    t->n_rows++;
}

/* Parses the CSV file at path through libcsv's callbacks on user. */
static void parse_csv(const char *path, void (*field)(void *, size_t, void *),
                      void (*row)(int, void *), void *user)
{
  struct csv_parser p;
  char *text = tu_read_file(path);
  if (!text)
    fail_msg("cannot read %s", path);
  assert_int_equal(csv_init(&p, CSV_APPEND_NULL), 0);
  assert_int_equal(csv_parse(&p, text, strlen(text), field, row, user),
                   strlen(text));
  csv_fini(&p, field, row, user);
  csv_free(&p);
  free(text);
}

static void read_csv(const char *path, table *t)
{
  memset(t, 0, sizeof *t);
  parse_csv(path, on_field, on_row, t);
}

static const char *cell(const table *t, int row, const char *column)
{
  for (int i = 0; i < t->n_fields[0]; i++)
    if (strcmp(t->cells[0][i], column) == 0)
      return t->cells[row][i];
  fail_msg("no column %s", column);
  return NULL;
}

static char *path_in(const char *dir, const char *name, char *buf, size_t len)
{
  snprintf(buf, len, "%s/%s", dir, name);
  return buf;
}

/* Runs args, which must exit with `status` and print `needle`. */
static void expect_run(const char *const *args, int status, const char *needle)
{
  run(args);
  assert_int_equal(r.status, status);
  assert_contains(r.out, needle);
}

/* ------------------------------------------------------------------------
 * Help and usage
 * ------------------------------------------------------------------------ */

static void test_help_on_every_command(void **state)
{
  static const char *const a1[] = {"--help", NULL};
  static const char *const a2[] = {"run", "--help", NULL};
  static const char *const a3[] = {"show", "--help", NULL};
  (void)state;
  run(a1);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "run WORKLOAD.ini");
  run(a2);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "--csv DIR");
  run(a3);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "parameter count");
  {
    /* vsim help COMMAND prints what vsim COMMAND --help does */
    static const char *const help_run[] = {"help", "run", NULL};
    static const char *const help_keys[] = {"help", "keys", NULL};
    static const char *const bad[][4] = {{"help", "frob", NULL},
                                         {"help", "run", "plan", NULL},
                                         {"--help", "run", NULL}};
    char *want;
    run(a2);
    assert_non_null(want = strdup(r.out));
    run(help_run);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, want);
    free(want);
    run(help_keys);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "usage: vsim keys\n");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      run(bad[i]);
      assert_int_equal(r.status, 2);
      assert_string_equal(r.out, "");
    }
  }
}

/* What `vsim [cmd] flag` prints (cmd NULL: `vsim flag`), which must exit 0
 * with nothing on stderr; malloc'd, the caller frees it. */
static char *help_of(const char *cmd, const char *flag)
{
  const char *args[] = {cmd ? cmd : flag, cmd ? flag : NULL, NULL};
  char *text;
  run(args);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.err, "");
  assert_non_null(text = strdup(r.out));
  return text;
}

/* -h is --help, before or after a command: exit 0 and the same text, and
 * the help texts that list --help say so, "-h, --help" (-h was accepted
 * but named nowhere). */
static void test_h_is_help(void **state)
{
  static const char *const commands[] = {NULL,  "run",  "show", "sweep",
                                         "fit", "plan", "keys"};
  (void)state;
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    char *want = help_of(commands[i], "--help");
    char *got = help_of(commands[i], "-h");
    assert_string_equal(got, want);
    if (!commands[i])
      assert_contains(got, "options: -h, --help (also after a command");
    else if (strcmp(commands[i], "run") == 0)
      assert_contains(got, "\n  -h, --help            this text\n");
    free(want);
    free(got);
  }
}

/* Usage mistakes exit 2 with a message on stderr (DESIGN.md exit codes). */
static void test_usage_errors_exit_2(void **state)
{
  static const char *const cases[][8] = {
      {NULL},
      {"frobnicate", NULL},
      {"run", NULL},
      {"run", DATA "gpt-small.ini", "--gpus", "zero", NULL},
      {"run", DATA "gpt-small.ini", "--bogus", NULL},
      {"run", DATA "gpt-small.ini", "--ranks", "some", NULL},
      {"run", DATA "gpt-small.ini", "--set", "nodot", NULL},
      {"plan", DATA "gpt-small.ini", "--top", "0", NULL},
      {"plan", DATA "gpt-small.ini", "--max-gpus", "x", NULL},
      {"sweep", DATA "gpt-small.ini", "--vary", "gpus=1", "--jobs", "0", NULL},
      /* more threads than a search runs is refused, not cut down */
      {"plan", DATA "gpt-small.ini", "--jobs", "257", NULL},
      /* an option a command does not use, or a single one given twice, is
       * refused rather than ignored or overridden */
      {"fit", DATA "gpt-small.ini", "--csv", "f.csv", NULL},
      {"plan", DATA "gpt-small.ini", "--gpus", "8", "--max-gpus", "8", NULL},
      {"show", DATA "gpt-small.ini", "--trace", "t.json", NULL},
      {"run", DATA "gpt-small.ini", "--gpus", "1", "--gpus", "2", NULL},
      /* a value that is the next option is not taken as the value */
      {"run", DATA "gpt-small.ini", "--csv", "--memory-summary", NULL},
      {"--version", "extra", NULL},
      /* an option with nothing after it says so */
      {"run", DATA "gpt-small.ini", "--gpus", NULL},
      /* a list ending in a comma has an empty last item (hunt) */
      {"run", DATA "gpt-small.ini", "--trace", "t.json", "--trace-ranks", "0,",
       NULL},
  };
  /* each message names the option it is about */
  static const char *const expect[] = {
      "missing command",
      "unknown command 'frobnicate'",
      "needs a WORKLOAD.ini",
      "--gpus needs a whole number",
      "unknown option '--bogus'",
      "--ranks takes stage or all",
      "expected section.key=value",
      "vsim: --top needs a whole number from 1 to 1000000, got '0'",
      "vsim: --max-gpus needs a whole number from 1 to 1000000, got 'x'",
      "vsim: --jobs needs a whole number from 1 to 256, got '0'",
      "vsim: --jobs needs a whole number from 1 to 256, got '257'",
      "vsim: --csv is not an option of vsim fit",
      "vsim: plan takes --gpus N (layouts on exactly N GPUs) or --max-gpus N "
      "(up to N), not both",
      "vsim: --trace is not an option of vsim show",
      "vsim: --gpus given twice",
      "vsim: --csv needs a directory (the next argument, '--memory-summary', "
      "is an option)",
      "vsim: --version takes no arguments, got 'extra'",
      "vsim: --gpus needs a whole number from 1 to 1000000, got nothing\n",
      "vsim: --trace-ranks takes rank numbers and ranges such as 0,8 or 0..7 "
      "(at most 1024 ranks), got '0,'"};
  (void)state;
  for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
    run(cases[i]);
    assert_int_equal(r.status, 2);
    assert_contains(r.err, expect[i]);
  }
}

/* ------------------------------------------------------------------------
 * Bad input: exit 1, one message naming file, line and key
 * ------------------------------------------------------------------------ */

static void test_every_bad_input_class_exits_1_with_its_message(void **state)
{
  static const struct {
    const char *file;
    const char *message;
  } cases[] = {
      {DATA "bad/unknown-key.ini",
       "unknown-key.ini:4: unknown key 'hiden' in [model]"},
      {DATA "bad/unknown-section.ini",
       "unknown-section.ini:10: unknown section [optimiser]"},
      {DATA "bad/missing-key.ini", "missing required key 'vocab' in [model]"},
      {DATA "bad/missing-value.ini",
       "missing-value.ini:7: [model] seq_len = : missing value"},
      {DATA "bad/bad-number.ini",
       "bad-number.ini:3: [model] layers = four: not a number"},
      {DATA "bad/bad-size.ini",
       "bad-size.ini:11: [parallel] bucket = 25XB: unknown unit"},
      {DATA "bad/bad-enum.ini", "precision = fp12: expected bf16, fp16, fp32, "
                                "fp8, amp_bf16 or amp_fp16"},
      {DATA "bad/zero-layers.ini", "layers = 0: must be greater than 0"},
      {DATA "bad/negative-hidden.ini", "hidden = -512: must not be negative"},
      {DATA "bad/kv-heads.ini", "kv-heads.ini:6: [model] kv_heads = 3: heads "
                                "(8) must be divisible by kv_heads"},
      {DATA "bad/global-batch.ini", "global_batch = 7: global_batch must be a "
                                    "multiple of micro_batch * dp = 1 * 2 = 2"},
      {DATA "bad/tp-heads.ini",
       "tp-heads.ini:11: [parallel] tp = 3: tp must divide heads (8)"},
      {DATA "bad/autocast-tp.ini",
       "autocast-tp.ini:13: [parallel] tp = 2: autocast is simulated with data "
       "parallelism alone"},
      {DATA "bad/ep-experts.ini",
       "ep-experts.ini:15: [parallel] ep = 3: each of the ep ranks holds "
       "experts / ep experts: ep must divide experts (8)"},
      {DATA "bad/ep-deepspeed-zero3.ini",
       "ep-deepspeed-zero3.ini:17: [parallel] zero = 3: with ep > 1 deepspeed "
       "partitions the experts' states and gradients over their "
       "expert-data-parallel group up to ZeRO-2; its engine refuses ZeRO-3 "
       "with MoE layers (\"MoE not supported with Stage 3\"): use zero = 2 "
       "or less, or ep = 1"},
      {DATA "bad/cp-seq.ini", "cp-seq.ini:12: [parallel] cp = 8: seq_len (100, "
                              "tests/data/bad/cp-seq.ini:8: [model] seq_len = "
                              "100) must be a multiple of 2 x cp"},
      {DATA "bad/malformed-line.ini", "malformed-line.ini:6: malformed line"},
      {DATA "no-such-file.ini", "no-such-file.ini: cannot read workload file"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *args[] = {"run", cases[i].file, NULL};
    run(args);
    if (r.status != 1 || !strstr(r.err, cases[i].message))
      fail_msg("%s: status %d, stderr: %s (wanted: %s)", cases[i].file,
               r.status, r.err, cases[i].message);
    /* one message, on one line */
    assert_non_null(strchr(r.err, '\n'));
    assert_null(strchr(r.err, '\n') + 1 < r.err + strlen(r.err)
                    ? strchr(strchr(r.err, '\n') + 1, '\n')
                    : NULL);
    assert_string_equal(r.out, "");
  }
}

static void test_layout_errors_name_the_layout(void **state)
{
  static const char *const gpus[] = {"run", DATA "bad/tp-heads.ini", "--set",
                                     "parallel.tp=2", "--gpus", "3", NULL};
  static const char *const set[] = {"run", DATA "gpt-small.ini", "--set",
                                    "model.heads=x", NULL};
  static const char *const topo[] = {"run", DATA "gpt-small.ini", "--topology",
                                     DATA "gpt-small.ini", NULL};
  const char *tset[] = {"run", DATA "gpt-small.ini", "--set",
                        "topology.gpu.memory=lots", NULL};
  (void)state;
  run(gpus);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "--gpus 3 is not divisible by tp*pp = 2");
  run(set);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "--set model.heads=x: not a number");
  /* a workload given as a topology: its [model] section is unknown there */
  run(topo);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "gpt-small.ini:2: unknown section [model] in topology file");
  run(tset);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "--set topology.gpu.memory=lots: not a number");
  /* a bound error also names the key as typed, with "topology." */
  tset[3] = "topology.gpu.memory=0";
  run(tset);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "vsim: --set topology.gpu.memory=0: must be greater "
                         "than 0");
}

/* README's examples are this build's output word for word (they went
 * stale as the cost model grew: step 2.22 s printed 2.29 s): each
 * "$ build/vsim ..." command of the run and fit examples is run, and what
 * the README shows under it, up to the next command or the block's end,
 * is what it prints. */
static void test_readme_examples_are_real_output(void **state)
{
  static const char *const commands[][8] = {
      {"run", "workloads/llama2-7b.ini", "--gpus", "8", NULL},
      {"fit", "workloads/llama2-7b.ini", "--gpus", "8", NULL},
      {"fit", "workloads/llama2-7b.ini", "--gpus", "8", "--set",
       "runtime.reserve=0", NULL},
      {"fit", "workloads/llama2-7b.ini", "--gpus", "8", "--vary-key",
       "model.seq_len", NULL}};
  char *readme = tu_read_file(VSIM_SOURCE_DIR "/README.md");
  (void)state;
  assert_non_null(readme);
  for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++) {
    char line[256] = "$ build/vsim";
    const char *shown, *end, *next;
    for (size_t a = 0; commands[k][a]; a++)
      snprintf(line + strlen(line), sizeof line - strlen(line), " %s",
               commands[k][a]);
    strcat(line, "\n");
    assert_non_null(shown = strstr(readme, line));
    shown += strlen(line);
    end = strstr(shown, "```");
    next = strstr(shown, "$ build/vsim");
    if (next && next < end)
      end = next;
    run((const char *const *)commands[k]);
    assert_true(r.status == 0);
    if (strlen(r.out) != (size_t)(end - shown) ||
        strncmp(r.out, shown, (size_t)(end - shown)) != 0)
      fail_msg("README shows under %s%.*s\nbut it prints\n%s", line,
               (int)(end - shown), shown, r.out);
  }
  free(readme);
}

/* ------------------------------------------------------------------------
 * run, CSV and show
 * ------------------------------------------------------------------------ */

static const char summary_header[] =
    "rank,stage,dp_rank,tp_rank,params_bytes,grads_bytes,optimizer_bytes,"
    "activations_bytes,temp_bytes,framework_bytes,fragmentation_bytes,"
    "model_states_bytes,peak_allocated_bytes,peak_reserved_bytes,"
    "capacity_bytes,fits,peak_time_s,peak_op,step_time_s\n";

static void test_llama2_7b_on_8_gpus_fits_and_writes_csv(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"run", "workloads/llama2-7b.ini", "--gpus", "8",
                        "--csv", NULL, NULL};
  table t;
  char *text;
  double psi = 6738415616.0; /* Llama-2-7B: 32*(4h^2+3hf+2h) + 2Vh + h */
  (void)state;

  args[5] = tu_temp_dir(dir, sizeof dir);
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "verdict: FITS on 8 x H100-SXM-80GB");
  assert_contains(r.out, "6.74 B parameters");

  text = tu_read_file(path_in(dir, "summary.csv", p, sizeof p));
  assert_non_null(text);
  assert_memory_equal(text, summary_header, strlen(summary_header));
  free(text);
  read_csv(p, &t);
  assert_int_equal(t.total_rows, 2); /* header + one simulated rank */
  assert_string_equal(cell(&t, 1, "fits"), "true");
  /* ZeRO-3, bf16 + fp32 master + AdamW: 16*Psi/Nd bytes (ZeRO paper,
   * Table 1), Nd = 8, within shard padding (< 1 element per buffer) */
  assert_true(fabs(strtod(cell(&t, 1, "model_states_bytes"), NULL) -
                   16 * psi / 8) < 16);
  assert_int_equal(strtoull(cell(&t, 1, "capacity_bytes"), NULL, 10),
                   81089ull << 20); /* topologies/h100-sxm-8x.ini memory */

  /* outside the allocator: the CUDA context (400 MiB) and dp's NCCL
   * communicator (1 GiB) of topologies/h100-sxm-8x.ini; the two 32 MiB
   * cuBLAS workspaces (the forward's and the backward thread's handle,
   * PyTorch's CublasHandlePool.cpp) are allocated with the model states */
  assert_int_equal(strtoull(cell(&t, 1, "framework_bytes"), NULL, 10),
                   (400ull << 20) + (1ull << 30));

  text = tu_read_file(path_in(dir, "timeline.csv", p, sizeof p));
  assert_non_null(text);
  assert_true(strncmp(text, "time_s,rank,op,category,delta_bytes,"
                            "allocated_bytes,reserved_bytes\n", 67) == 0);
  free(text);
  read_csv(p, &t);
  for (int row = 4; row <= 5; row++) { /* after params, grads, optimizer */
    assert_string_equal(cell(&t, row, "op"), "model_states");
    assert_string_equal(cell(&t, row, "category"), "temp");
    assert_string_equal(cell(&t, row, "delta_bytes"), "33554432");
  }
  text = tu_read_file(path_in(dir, "ops.csv", p, sizeof p));
  assert_non_null(text);
  assert_true(strncmp(text, "rank,stream,op,layer,microbatch,start_s,end_s,"
                            "flops,bytes\n", 55) == 0);
  {
    /* bytes as integers (DESIGN's contract), also past 1e9: the
     * optimizer step's HBM traffic, 25269058560 B, was written
     * 2.52690586e+10 (%.9g) */
    size_t rows = 0, big = 0;
    for (char *line = strchr(text, '\n'); line && line[1];
         line = strchr(line + 1, '\n')) {
      char *last = line;
      for (char *c = line + 1; *c && *c != '\n'; c++)
        if (*c == ',')
          last = c;
      assert_true(last > line && isdigit((unsigned char)last[1]));
      for (char *c = last + 1; *c && *c != '\n'; c++)
        assert_true(isdigit((unsigned char)*c));
      big += strtod(last + 1, NULL) >= 1e9;
      rows++;
    }
    assert_true(rows > 1000 && big > 0);
  }
  free(text);
  tu_remove_dir(dir);
}

/* vsim show names the cuBLAS workspaces beside the framework memory: two
 * of [gpu] cublas_workspace each (PyTorch's CublasHandlePool.cpp: 32 MiB
 * on Hopper, 8320 KiB before), allocated, not outside the allocator. */
static void test_show_names_the_cublas_workspaces(void **state)
{
  const char *h100[] = {"show", "workloads/llama2-7b.ini", "--gpus", "8", NULL};
  const char *a100[] = {"show", "workloads/llama2-7b.ini", "--gpus", "8",
                        "--topology", "topologies/a100-sxm-80g-8x.ini", NULL};
  (void)state;
  run(h100);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "# framework per GPU = 1.39 GiB (context, 1 NCCL "
                         "communicator(s))");
  assert_contains(r.out, "# cuBLAS workspaces per GPU = 2 x 32.0 MiB "
                         "(allocated, in temp");
  run(a100);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "# cuBLAS workspaces per GPU = 2 x 8.12 MiB");
  /* a layer's activations are the figure without checkpointing, and say
   * so (with full checkpointing a run keeps only each layer's input: the
   * unlabelled figure read 22 times too large) */
  {
    const char *full[] = {"show", DATA "gpt-small.ini", "--set",
                          "training.checkpointing=full", NULL};
    run(full);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "# activations per layer per micro-batch without "
                           "checkpointing = ");
  }
}

/* show's activations of a layer without checkpointing leave out what a
 * fine-tune never saves: a frozen weight's input for its gradient
 * (autograd saves what the gradients it computes need). QLoRA on
 * Llama-2-70B (T = 1280 tokens, h = 8192, f = 28672, kv 1024, rank 64 on
 * all seven linears) keeps 5 x 2Th (norm inputs and outputs, attention's
 * output, the residual), flash attention's q, k and v (2Th + 2 x 2T x
 * 1024) and log-sum-exp (4 x 64 heads x T), 4 x 2Tf (SwiGLU's) and the
 * seven adapters' A outputs (7 x 2Tr): 426,147,840 B, what the run keeps
 * a layer (it printed 516 MiB, the frozen linears' inputs counted
 * again). LoRA on q and v of Llama-3-8B keeps less than its full
 * fine-tune (it printed more). */
/* A key that means something only with another writes as a comment
 * where that other is off and the workload left it unset (as a key it
 * would be refused: workload_test's test_experts), and the output loads
 * back. */
static void test_show_comments_unused_keys(void **state)
{
  char path[64];
  const char *show[] = {"show", "workloads/llama2-7b.ini", NULL};
  const char *again[] = {"show", path, NULL};
  const char *lines[] = {
      "\n; experts_per_token = 2    ; default, unused without experts\n",
      "\n; q_lora_rank = 0    ; default, unused without kv_lora_rank\n",
      "\n; double_quant = true    ; default, unused without base_dtype = "
      "nf4\n",
      "\n; lora_rank = 8    ; default, unused without method = lora or "
      "qlora\n",
      "\nexperts = 0    ; default\n"};
  (void)state;
  run(show);
  assert_int_equal(r.status, 0);
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
    assert_contains(r.out, lines[i]);
  tu_write_temp(r.out, ".ini", path, sizeof path);
  run(again);
  unlink(path);
  assert_int_equal(r.status, 0);
  /* loaded back, they are still unset, and shown so again */
  for (size_t i = 0; i + 1 < sizeof lines / sizeof lines[0]; i++)
    assert_contains(r.out, lines[i]);
}

static void test_show_layer_activations_leave_out_frozen_inputs(void **state)
{
  const char *line = "# activations per layer per micro-batch without "
                     "checkpointing = ";
  const char *cases[][4] = {
      {"workloads/llama2-70b-qlora.ini", "finetune.method=qlora", "406 MiB"},
      {"workloads/llama3-8b-lora.ini", "finetune.method=lora", "272 MiB"},
      {"workloads/llama3-8b-lora.ini", "finetune.method=full", "328 MiB"}};
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *argv[] = {"show",  cases[i][0], "--gpus", "1",
                          "--set", cases[i][1], NULL};
    char want[160];
    run(argv);
    assert_int_equal(r.status, 0);
    snprintf(want, sizeof want, "%s%s\n", line, cases[i][2]);
    assert_contains(r.out, want);
  }
}

/* Stage mode's one rank stands for its stage's GPUs on its node and PCIe
 * switch (vs_resource_users): where nodes or switches are filled
 * unevenly (12 GPUs in two stages on 8-GPU nodes; 3 GPUs on switches of
 * 2) or shared by two stages (8 GPUs in two stages on one node), the
 * report says its offload figures are approximate, and only there (16
 * GPUs, a stage a node; one GPU a switch; --ranks all); without a
 * pipeline it names no stages (a review finding). */
static void test_stage_mode_notes_uneven_nodes_and_switches(void **state)
{
  const char *note = "note: nodes or PCIe switches hold ";
  const char *cases[][3] = {{"12", "parallel.pp=2", "1"},
                            {"16", "parallel.pp=2", "0"},
                            {"8", "parallel.pp=2", "1"},
                            {"3", "parallel.pp=1", "1"},
                            {"3", "topology.node.gpus_per_pcie_switch=1", "0"}};
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *argv[] = {"run",    DATA "gpt-small.ini",
                          "--gpus", cases[i][0],
                          "--set",  cases[i][1],
                          "--set",  "parallel.zero=1",
                          "--set",  "parallel.offload_optimizer=cpu",
                          "--set",  "training.global_batch=48",
                          NULL,     NULL};
    run(argv);
    assert_int_equal(r.status, 0);
    if (cases[i][2][0] == '1')
      assert_contains(r.out, note);
    else
      assert_null(strstr(r.out, note));
    if (i == 3) { /* one stage; every GPU simulated: exact */
      assert_contains(r.out, "hold the GPUs unevenly, so");
      argv[12] = "--ranks=all";
      run(argv);
      assert_int_equal(r.status, 0);
      assert_null(strstr(r.out, note));
    }
  }
}

/* Sequence parallelism asked for at tp = 1 has nothing to split: show
 * says so (Megatron-LM turns it off with a warning), and only there, and
 * the run is the run without it; so for a rank order at pp = 1 and a
 * paged optimizer over SGD's no states (hunt findings). */
static void test_show_says_sequence_parallel_idle_at_tp_1(void **state)
{
  const char *idle[] = {"show",   DATA "gpt-small.ini",
                        "--gpus", "2",
                        "--set",  "parallel.sequence_parallel=true",
                        NULL};
  const char *split[] = {"show",   DATA "gpt-small.ini",
                         "--gpus", "2",
                         "--set",  "parallel.tp=2",
                         "--set",  "parallel.sequence_parallel=true",
                         NULL};
  const char *on[] = {"run",    DATA "gpt-small.ini",
                      "--gpus", "2",
                      "--set",  "parallel.sequence_parallel=true",
                      NULL};
  const char *off[] = {"run", DATA "gpt-small.ini", "--gpus", "2", NULL};
  const char *line = "# sequence_parallel has no effect at tp = 1";
  char *first;
  (void)state;
  run(idle);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, line);
  run(split);
  assert_int_equal(r.status, 0);
  assert_null(strstr(r.out, line));
  /* the rank order at pp = 1 and a paged optimizer without states too */
  {
    const char *idle2[] = {"show",  DATA "gpt-small.ini",
                           "--set", "parallel.order=tp-pp-dp",
                           "--set", "training.paged_optimizer=true",
                           "--set", "training.optimizer=sgd",
                           NULL};
    const char *busy[] = {"show",   DATA "gpt-small.ini",
                          "--gpus", "4",
                          "--set",  "parallel.pp=2",
                          "--set",  "parallel.order=tp-pp-dp",
                          "--set",  "training.paged_optimizer=true",
                          NULL};
    run(idle2);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "# order = tp-pp-dp has no effect at pp = 1");
    assert_contains(r.out, "# paged_optimizer has no effect with sgd");
    run(busy);
    assert_int_equal(r.status, 0);
    assert_null(strstr(r.out, "no effect"));
  }
  /* the rank order at dp = 1; a bucket where no gradient leaves the GPU
   * (one GPU, no offload), not where two GPUs reduce theirs; fp32 LoRA
   * adapters without a master copy */
  {
    const char *order[] = {
        "show",  DATA "gpt-small.ini", "--gpus", "2",
        "--set", "parallel.pp=2",      "--set",  "parallel.order=tp-pp-dp",
        NULL};
    const char *lone[] = {"show",  DATA "gpt-small.ini",   "--gpus", "1",
                          "--set", "parallel.bucket=1MiB", NULL};
    const char *pair[] = {"show",  DATA "gpt-small.ini",   "--gpus", "2",
                          "--set", "parallel.bucket=1MiB", NULL};
    const char *lora[] = {"show", "workloads/llama3-8b-lora.ini", "--set",
                          "training.master_weights=false", NULL};
    run(order);
    assert_contains(r.out, "# order = tp-pp-dp has no effect at dp = 1");
    run(lone);
    assert_contains(r.out, "# overlap_grad_reduce and bucket have no effect "
                           "here: no gradient leaves the GPU");
    run(pair);
    assert_int_equal(r.status, 0);
    assert_null(strstr(r.out, "no effect"));
    run(lora);
    assert_contains(r.out, "# master_weights = false has no effect");
  }
  run(on);
  assert_int_equal(r.status, 0);
  assert_non_null(first = strdup(r.out));
  run(off);
  assert_int_equal(r.status, 0);
  assert_string_equal(strstr(first, "\nhardware"), strstr(r.out, "\nhardware"));
  free(first);
}

/* vsim show says how the model states reach the allocator: per tensor
 * in PyTorch's own loop (gpt-small: 4 layers of 12 tensors, two
 * embeddings, the final norm's two; bf16 weights with fp32 masters; the
 * gradients and moments made by the first step; the Trainer's gradients
 * in each backward; with the exact allocator, no first step), one buffer
 * per state under ZeRO or Megatron-LM. */
static void test_show_says_how_states_are_allocated(void **state)
{
  const char *plain[] = {"show", DATA "gpt-small.ini", NULL};
  const char *hf[] = {"show", DATA "gpt-small.ini", "--set",
                      "training.framework=hf", NULL};
  const char *zero[] = {"show", DATA "gpt-small.ini", "--gpus", "2", "--set",
                        "parallel.zero=1", NULL};
  const char *exact[] = {"show", DATA "gpt-small.ini", "--set",
                         "runtime.allocator=exact", NULL};
  (void)state;
  run(plain);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "# model states reach the allocator as PyTorch's "
                         "own loop makes them: each of the model's 52 "
                         "parameter tensors (and its fp32 master copy) as "
                         "it is built,\n#   the first step makes each "
                         "gradient in its backward and each optimizer "
                         "state at its step,\n#   and the step reported "
                         "runs in the cache it leaves\n");
  run(hf);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "each of the model's 52 parameter tensors as it is "
                         "built,\n#   each gradient in backward; the first "
                         "step makes each optimizer state at its step");
  run(exact);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "(and its fp32 master copy) as it is built,\n#   "
                         "the gradients and the optimizer's moments one "
                         "buffer each\n");
  run(zero);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "# model states reach the allocator as one buffer "
                         "per state (flat buffers or ZeRO partitions)\n");
}

/* Offload end to end: the 13B sample fits one 32 GB V100 only with its
 * partitions in host memory, and host.csv holds the node's host bytes:
 * fp16 params 2 Psi, fp32 grads 4 Psi, master + Adam 12 Psi (one GPU). */
static void test_offload_sample_fits_and_writes_host_csv(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"run", "workloads/gpt-13b-offload.ini", "--topology",
                        "topologies/v100-sxm-32g-8x.ini", "--gpus", "1",
                        "--csv", NULL, NULL, NULL, NULL, NULL};
  table t;
  double psi;
  (void)state;
  args[7] = tu_temp_dir(dir, sizeof dir);
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "verdict: FITS on 1 x V100-SXM2-32GB");
  assert_contains(r.out, "host memory of node 0 peaks at");
  assert_contains(r.out, "CPU optimizer step");
  read_csv(path_in(dir, "host.csv", p, sizeof p), &t);
  assert_int_equal(t.total_rows, 2); /* header + node 0's host memory */
  assert_string_equal(cell(&t, 1, "place"), "host");
  assert_string_equal(cell(&t, 1, "fits"), "true");
  psi = strtod(cell(&t, 1, "params_bytes"), NULL) / 2;
  /* 12Lh^2 + 13Lh + Vh + sh + 2h, L = 65, h = 4096, V = 50257, s = 1024 */
  tu_assert_close(psi, 13299744768.0, 0);
  tu_assert_close(strtod(cell(&t, 1, "grads_bytes"), NULL), 4 * psi, 1e-9);
  tu_assert_close(strtod(cell(&t, 1, "optimizer_bytes"), NULL), 12 * psi,
                  1e-9);
  /* host_timeline.csv: the states arrive at setup and stay (18 Psi) */
  read_csv(path_in(dir, "host_timeline.csv", p, sizeof p), &t);
  assert_int_equal(t.total_rows, 1 + 3);
  assert_string_equal(cell(&t, 1, "op"), "model_states");
  tu_assert_close(strtod(cell(&t, 3, "in_use_bytes"), NULL), 18 * psi, 1e-9);
  tu_remove_dir(dir);
  /* without offload it does not fit */
  args[6] = "--set";
  args[7] = "parallel.offload_params=none";
  args[8] = "--set";
  args[9] = "parallel.offload_optimizer=none";
  run(args);
  assert_int_equal(r.status, 3);
}

/* host.csv of stage mode (args, --csv at args[csv]) equals --ranks
 * all's (args[csv + 2] and on free for it). */
static void host_csv_as_all_ranks(const char **args, size_t csv)
{
  char stage_dir[64], all_dir[64], p[128];
  char *stage, *all;
  args[csv] = tu_temp_dir(stage_dir, sizeof stage_dir);
  run(args);
  assert_int_equal(r.status, 0);
  stage = tu_read_file(path_in(stage_dir, "host.csv", p, sizeof p));
  args[csv] = tu_temp_dir(all_dir, sizeof all_dir);
  args[csv + 1] = "--ranks";
  args[csv + 2] = "all";
  run(args);
  assert_int_equal(r.status, 0);
  all = tu_read_file(path_in(all_dir, "host.csv", p, sizeof p));
  assert_string_equal(stage, all);
  args[csv + 1] = args[csv + 2] = NULL;
  free(stage);
  free(all);
  tu_remove_dir(stage_dir);
  tu_remove_dir(all_dir);
}

/* The nodes host_timeline.csv in dir has rows of: a bit per node 0, 1,
 * ... (a node past 30 sets bit 31). */
static unsigned timeline_nodes(const char *dir)
{
  char p[128], *text, *line, *save = NULL;
  unsigned bits = 0;
  assert_non_null(
      text = tu_read_file(path_in(dir, "host_timeline.csv", p, sizeof p)));
  line = strtok_r(text, "\n", &save);
  assert_true(line && strncmp(line, "time_s,node,", 12) == 0);
  while ((line = strtok_r(NULL, "\n", &save))) {
    const char *comma = strchr(line, ',');
    unsigned long node;
    assert_non_null(comma);
    node = strtoul(comma + 1, NULL, 10);
    bits |= 1u << (node < 31 ? node : 31);
  }
  free(text);
  return bits;
}

/* host.csv has a row for every node the offload uses: in stage mode the
 * second node of a 16-GPU ZeRO-3 job, which no simulated rank is on,
 * holds what node 0 holds, as --ranks all finds it; so do the second and
 * fourth nodes of a 32-GPU two-stage pipeline, in either rank order, and
 * the nodes of other make-ups (a node shared by two stages, a node half
 * full), which stage mode tracks one of each. */
static void test_host_csv_lists_every_node(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"run",    "workloads/llama2-7b.ini",
                        "--gpus", "16",
                        "--set",  "model.layers=4",
                        "--set",  "parallel.offload_optimizer=cpu",
                        "--set",  "parallel.offload_params=cpu",
                        "--csv",  NULL,
                        NULL,     NULL,
                        NULL};
  table t;
  (void)state;
  args[11] = tu_temp_dir(dir, sizeof dir);
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "(the job's other 1 node holds what the one above "
                         "with as many GPUs of each stage holds, as host.csv "
                         "lists them; host_timeline.csv and the trace have "
                         "the nodes above only;");
  read_csv(path_in(dir, "host.csv", p, sizeof p), &t);
  assert_int_equal(t.total_rows, 3);
  assert_string_equal(cell(&t, 2, "node"), "1");
  assert_string_equal(cell(&t, 2, "peak_bytes"), cell(&t, 1, "peak_bytes"));
  /* host_timeline.csv has the tracked node's changes only (export
   * review: host.csv's node 1 has no rows there in stage mode) */
  assert_int_equal(timeline_nodes(dir), 1);
  tu_remove_dir(dir);
  args[11] = tu_temp_dir(dir, sizeof dir);
  args[12] = "--ranks";
  args[13] = "all";
  run(args);
  assert_int_equal(r.status, 0);
  assert_null(strstr(r.out, "the job's other"));
  assert_int_equal(timeline_nodes(dir), 3); /* --ranks all: nodes 0, 1 */
  args[12] = args[13] = NULL;
  tu_remove_dir(dir);
  host_csv_as_all_ranks(args, 11);
  {
    const char *pipe[] = {"run",    "workloads/llama2-7b.ini",
                          "--gpus", "32",
                          "--set",  "model.layers=4",
                          "--set",  "parallel.pp=2",
                          "--set",  "parallel.zero=1",
                          "--set",  "parallel.offload_optimizer=cpu",
                          "--set",  "parallel.order=tp-dp-pp",
                          "--csv",  NULL,
                          NULL,     NULL,
                          NULL};
    host_csv_as_all_ranks(pipe, 15);
    pipe[13] = "parallel.order=tp-pp-dp";
    host_csv_as_all_ranks(pipe, 15);
  }
  {
    /* nodes of other make-ups, each tracked: 24 GPUs in stages of 1 and
     * 3 layers (node 1 holds 4 GPUs of each); 12 GPUs, a node half full */
    const char *makeups[] = {"run",    "workloads/llama2-7b.ini",
                             "--gpus", "24",
                             "--set",  "model.layers=4",
                             "--set",  "parallel.pp=2",
                             "--set",  "parallel.zero=1",
                             "--set",  "parallel.offload_optimizer=cpu",
                             "--set",  "parallel.pp_layers=1,3",
                             "--set",  "training.global_batch=48",
                             "--csv",  NULL,
                             NULL,     NULL,
                             NULL};
    host_csv_as_all_ranks(makeups, 17);
    /* node 2, holding 4 GPUs of each stage, runs out of a 7 GiB host as
     * --ranks all finds (8 GiB holds it); no simulated rank is on it, so
     * the line names the stage whose GPUs there asked */
    makeups[16] = "--set";
    makeups[17] = "topology.node.host_memory=7GiB";
    run(makeups);
    assert_int_equal(r.status, 3);
    assert_contains(r.out, "OUT OF HOST MEMORY on node 2 at setup "
                           "model_states (step) of stage 1's GPUs there "
                           "(rank 12 simulated)");
    makeups[16] = "--csv";
    makeups[17] = NULL;
    makeups[3] = "12";
    makeups[7] = "parallel.pp=1";
    makeups[13] = "parallel.order=tp-dp-pp";
    host_csv_as_all_ranks(makeups, 17);
  }
}

/* op_bounds.csv read row by row (libcsv): each row's parts checked as
 * it ends, rank 0's compute parts summed, bounds met by op counted,
 * phases checked against the trace's `cat` names. */
#define BOUND_COLS 15 /* rank .. end_s, bound, six parts, phase */
typedef struct bounds_read {
  char f[BOUND_COLS][64];
  int n, rows;
  double compute[4]; /* rank 0's arithmetic, memory, launch and
                        communication inside compute ops */
  int cpu_steps, copies, collectives; /* rows bound by cpu, transfer,
                                          communication */
  int recomputes, recompute_ops;      /* rows of phase recompute, rows of op
                                         recompute_layer */
  char mlp_down[64]; /* rank 0's mlp_down of layer 0, micro-batch 0: the
                        phases of its rows, in order, comma-separated */
} bounds_read;

static void bounds_field(void *data, size_t len, void *user)
{
  bounds_read *b = user;
  if (b->n < BOUND_COLS) {
    size_t n = len < 63 ? len : 63;
    memcpy(b->f[b->n], data, n);
    b->f[b->n][n] = '\0';
  }
  b->n++;
}

static void bounds_row(int c, void *user)
{
  static const char *const names[6] = {
      "arithmetic", "memory", "launch", "communication", "transfer", "cpu"};
  static const char *const header[BOUND_COLS] = {
      "rank",     "stream",          "op",         "layer",        "microbatch",
      "start_s",  "end_s",           "bound",      "arithmetic_s", "memory_s",
      "launch_s", "communication_s", "transfer_s", "cpu_s",        "phase"};
  /* schedule.c vs_phase_name's names, the trace's `cat` */
  static const char phases[] = ",setup,forward,backward,recompute,tp_comm,"
                               "dp_comm,optimizer,p2p,offload,ep_comm,"
                               "cp_comm,";
  char phase[80];
  bounds_read *b = user;
  double part[6], sum = 0, span;
  int most = 0;
  (void)c;
  assert_int_equal(b->n, BOUND_COLS);
  b->n = 0;
  if (b->rows++ == 0) {
    for (int k = 0; k < BOUND_COLS; k++)
      assert_string_equal(b->f[k], header[k]);
    return;
  }
  span = strtod(b->f[6], NULL) - strtod(b->f[5], NULL);
  for (int k = 0; k < 6; k++) {
    part[k] = strtod(b->f[8 + k], NULL);
    assert_true(isfinite(part[k]) && part[k] >= 0);
    sum += part[k];
    if (part[k] > part[most])
      most = k;
  }
  /* each part printed to the nanosecond */
  assert_true(fabs(sum - span) <= 4e-9);
  assert_string_equal(b->f[7], part[most] > 0 ? names[most] : "none");
  b->cpu_steps += strcmp(b->f[7], "cpu") == 0;
  b->copies += strcmp(b->f[7], "transfer") == 0;
  b->collectives += strcmp(b->f[7], "communication") == 0;
  snprintf(phase, sizeof phase, ",%s,", b->f[14]);
  assert_non_null(strstr(phases, phase));
  b->recomputes += strcmp(b->f[14], "recompute") == 0;
  b->recompute_ops += strcmp(b->f[2], "recompute_layer") == 0;
  if (strcmp(b->f[0], "0") == 0 && strcmp(b->f[2], "mlp_down") == 0 &&
      strcmp(b->f[3], "0") == 0 && strcmp(b->f[4], "0") == 0)
    snprintf(b->mlp_down + strlen(b->mlp_down),
             sizeof b->mlp_down - strlen(b->mlp_down), "%s%s",
             b->mlp_down[0] ? "," : "", b->f[14]);
  if (strcmp(b->f[0], "0") == 0 && strcmp(b->f[1], "compute") == 0 &&
      part[4] == 0 && !(part[3] > 0 && part[0] + part[1] + part[2] == 0))
    for (int k = 0; k < 4; k++)
      b->compute[k] += part[k];
}

static void read_bounds(const char *path, bounds_read *b)
{
  memset(b, 0, sizeof *b);
  parse_csv(path, bounds_field, bounds_row, b);
}

/* Seconds of `what` in the report's "compute ... by what bounds it"
 * line ("arithmetic 9.63 s (92%)"), 0 when it names none. */
static double bound_in_report(const char *out, const char *what)
{
  const char *line = strstr(out, "by what bounds it:");
  const char *at;
  char unit[4] = "";
  double v = 0;
  assert_non_null(line);
  at = strstr(line, what);
  if (!at || at > strchr(line, '\n'))
    return 0;
  assert_int_equal(sscanf(at + strlen(what), " %lf %3s", &v, unit), 2);
  return strcmp(unit, "s") == 0    ? v
         : strcmp(unit, "ms") == 0 ? v * 1e-3
                                   : v * 1e-6;
}

/* op_bounds.csv has ops.csv's rows, each op's run split by what bounds
 * it: the parts add up to the run, the bound is the largest part, rank
 * 0's compute ops add up to the report's split (printed to 3 digits);
 * the 13B offload sample's CPU step is the CPU's, its gradient and
 * parameter copies transfers, and Llama-2-7B's collectives on 8 GPUs
 * communication. Its phase tells apart the rows ops.csv cannot: layer
 * 0's mlp_down of micro-batch 0 runs in forward, then in backward (its
 * recompute is inside recompute_layer, the only op of phase recompute,
 * in the 13B sample's full checkpointing). */
static void test_op_bounds_csv_splits_each_op(void **state)
{
  static const char *const labels[4] = {
      "arithmetic", "HBM traffic", "kernel launches",
      "collectives re-run by recompute"};
  char dir[64], p[128];
  const char *offload[] = {"run", "workloads/gpt-13b-offload.ini",
                           "--topology", "topologies/v100-sxm-32g-8x.ini",
                           "--csv", dir, NULL};
  const char *dp[] = {"run", "workloads/llama2-7b.ini", "--gpus", "8",
                      "--csv", dir, NULL};
  bounds_read b;
  table t;
  (void)state;
  assert_non_null(tu_temp_dir(dir, sizeof dir));
  run(offload);
  assert_int_equal(r.status, 0);
  read_bounds(path_in(dir, "op_bounds.csv", p, sizeof p), &b);
  read_csv(path_in(dir, "ops.csv", p, sizeof p), &t);
  assert_int_equal(b.rows, t.total_rows);
  assert_true(b.rows > 1000);
  for (int k = 0; k < 4; k++) {
    double shown = bound_in_report(r.out, labels[k]);
    assert_true(fabs(b.compute[k] - shown) <= 0.005 * shown + 1e-9);
  }
  assert_true(b.compute[0] > 0 && b.compute[1] > 0 && b.compute[2] > 0);
  assert_int_equal(b.cpu_steps, 1);
  assert_true(b.copies > 0);
  assert_string_equal(b.mlp_down, "forward,backward");
  assert_true(b.recomputes > 0);
  assert_int_equal(b.recomputes, b.recompute_ops);
  tu_remove_dir(dir);
  assert_non_null(tu_temp_dir(dir, sizeof dir));
  run(dp);
  assert_int_equal(r.status, 0);
  read_bounds(path_in(dir, "op_bounds.csv", p, sizeof p), &b);
  assert_true(b.collectives > 0 && b.copies == 0 && b.cpu_steps == 0);
  assert_string_equal(b.mlp_down, "forward,backward");
  assert_int_equal(b.recomputes, 0); /* llama2-7b: no checkpointing */
  tu_remove_dir(dir);
}

/* PyTorch builds the model one parameter at a time, into an empty cache
 * (framework none, no ZeRO): each tensor of 10 MiB or more gets a segment
 * rounded to 2 MiB, handed out whole when 1 MiB or less would remain
 * (CUDACachingAllocator.cpp: kRoundLarge, should_split). Llama-3B's
 * shapes in fp32 (autocast): each 3200 x 3200 projection, 40960000 B,
 * takes a 40 MiB block, each 3200 x 8640 MLP matrix, 110592000 B, a 106
 * MiB one; the 409600000 B embeddings leave 1.375 MiB and are split; the
 * norms are small. So vsim's timeline allocates the parameters 26 x (4 x
 * 983040 + 3 x 557056) = 145686528 B past their 4 x 3426473600 B, where
 * the H200 measured 146505728 (tests/data/groundtruth/h200.csv, llama-3b
 * allocated_after_model_bytes - 4 x params). */
static void test_parameters_allocated_tensor_by_tensor(void **state)
{
  static const char llama3b[] =
      "[model]\narch = llama\nlayers = 26\nhidden = 3200\nheads = 32\n"
      "ffn_hidden = 8640\nvocab = 32000\nseq_len = 2048\n[training]\n"
      "micro_batch = 2\nglobal_batch = 2\nprecision = amp_bf16\n";
  char ini[128], dir[64], p[128];
  const char *args[] = {"run", ini, "--topology",
                        "topologies/h200-calibrated.ini", "--csv", dir, NULL};
  char *text, *line, *save = NULL;
  uint64_t params = 0;
  unsigned tensors = 0;
  (void)state;
  assert_non_null(tu_write_temp(llama3b, ".ini", ini, sizeof ini));
  assert_non_null(tu_temp_dir(dir, sizeof dir));
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "3.43 B parameters");
  text = tu_read_file(path_in(dir, "timeline.csv", p, sizeof p));
  assert_non_null(text);
  for (line = strtok_r(text, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    char op[32], category[32];
    unsigned long long delta;
    if (sscanf(line, "%*[^,],%*[^,],%31[^,],%31[^,],%llu", op, category,
               &delta) == 3 &&
        strcmp(op, "model_states") == 0 && strcmp(category, "params") == 0) {
      params += delta;
      tensors++;
    }
  }
  free(text);
  assert_int_equal(tensors, 26 * 9 + 3); /* 7 matrices and 2 norms a layer */
  assert_int_equal(params, 4 * UINT64_C(3426473600) + UINT64_C(145686528));
  unlink(ini);
  tu_remove_dir(dir);
}

/* A run on a calibrated topology says which figures vsim-calibrate
 * measured (issue 17: "says which figures are calibrated and which are
 * defaults"): the shipped H200 file's keys in effect, and the fits that
 * replaced nominal figures (hbm_bandwidth, pcie_bandwidth and
 * pcie_latency, whose own values are not then in effect); --set takes a
 * key out, and a fit with it where nothing else of it is used (d2h_pinned
 * times only what pcie_bandwidth would), and a fit that still gives one
 * figure is named with it (h2d_pinned's PCIe latency or bandwidth); the
 * d2d_kernel fit still gives hbm_bandwidth with memory_efficiency --set,
 * but no longer the curve that times memory-bound ops, and says so (hunt:
 * the line named the whole curve). A nominal topology says nothing of
 * it. */
static void test_run_says_what_was_measured(void **state)
{
  const char *args[] = {"run", DATA "gpt-small.ini", "--topology",
                        "topologies/h200-calibrated.ini", NULL, NULL,
                        NULL, NULL, NULL, NULL, NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "\nmeasured  by vsim-calibrate: name, memory, sms, "
                         "context_memory, compute_efficiency, "
                         "compute_efficiency_shape, gemm_k_overhead, "
                         "kernel_floor; curves h2d_pinned (PCIe), d2h_pinned "
                         "(PCIe), h2d_pageable (pageable copies), "
                         "d2h_pageable (pageable copies), d2d_kernel (HBM); "
                         "the other figures are nominal\nmodel ");
  args[4] = "--set";
  args[5] = "topology.gpu.kernel_floor=3us";
  args[6] = "--set";
  args[7] = "topology.node.pcie_bandwidth=10GB/s";
  args[8] = "--set";
  args[9] = "topology.gpu.memory_efficiency=0.9";
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "gemm_k_overhead; curves h2d_pinned (PCIe "
                         "latency), h2d_pageable (pageable copies), "
                         "d2h_pageable (pageable copies), d2d_kernel (HBM "
                         "bandwidth); the other");
  /* a fit whose other figure --set gave says which one it gives (the
   * line named the whole curve) */
  args[7] = "topology.node.pcie_latency=500us";
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "gemm_k_overhead; curves h2d_pinned (PCIe "
                         "bandwidth), d2h_pinned (PCIe), h2d_pageable "
                         "(pageable copies), d2h_pageable (pageable copies), "
                         "d2d_kernel (HBM bandwidth); the other");
  args[2] = "--set"; /* the built-in topology */
  args[3] = "topology.gpu.kernel_floor=3us";
  args[4] = NULL;
  run(args);
  assert_int_equal(r.status, 0);
  assert_null(strstr(r.out, "measured  "));
  assert_null(strstr(r.out, "curves    "));
  /* a curve --set made, or one of whose shaping keys --set changed, is
   * the user's, not measured (bad-input review: the line said "measured
   * by vsim-calibrate: curves p2p (NVLink)"); its record of the fit
   * (r2 and the like) shapes nothing */
  args[3] = "topology.calibration.p2p_bandwidth=1MB/s";
  run(args);
  assert_int_equal(r.status, 0);
  assert_null(strstr(r.out, "measured  "));
  assert_contains(r.out, "\ncurves    given with --set, not measured: p2p "
                         "(NVLink)\nmodel ");
  args[2] = "--topology";
  args[3] = "topologies/h200-calibrated.ini";
  args[4] = "--set";
  args[5] = "topology.calibration.d2h_pinned_breakpoints=7983,13669";
  args[6] = "--set";
  args[7] = "topology.calibration.h2d_pinned_r2=0.5";
  args[8] = NULL;
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "; curves h2d_pinned (PCIe), h2d_pageable "
                         "(pageable copies), d2h_pageable (pageable copies), "
                         "d2d_kernel (HBM); the other figures are nominal\n"
                         "curves    given with --set, not measured: "
                         "d2h_pinned (PCIe)\nmodel ");
}

/* Offload copies through PCIe are timed by the pinned curves' fits, so a
 * copy outside the sizes they were measured at is told, as the other
 * curves' are (it was extrapolated silently): here both ranges are cut
 * to 64 MiB, below the 13B model's layer fetches and gradient copies;
 * the whole measured range (to 1 GiB) tells nothing. */
static void test_pinned_copies_outside_their_range_told(void **state)
{
  const char *args[] = {"run", "workloads/gpt-13b-offload.ini", "--gpus", "1",
                        "--topology", "topologies/h200-calibrated.ini",
                        "--set", "topology.calibration.h2d_pinned_max_bytes="
                                 "64MiB",
                        "--set", "topology.calibration.d2h_pinned_max_bytes="
                                 "64MiB",
                        NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, ": [calibration] h2d_pinned was measured from 4 B "
                         "to 64.0 MiB; this run needs up to ");
  assert_contains(r.out, ": [calibration] d2h_pinned was measured from 4 B "
                         "to 64.0 MiB; this run needs up to ");
  args[6] = NULL;
  run(args);
  assert_int_equal(r.status, 0);
  assert_null(strstr(r.out, "pinned was measured"));
}

/* The ZeRO-Offload paper's 13B sample as DeepSpeed ran it fits one V100
 * only just, its step mostly the host sums' copies; show names them. */
static void test_zero_offload_sample(void **state)
{
  const char *args[] = {"run",        "workloads/zero-offload-13b.ini",
                        "--topology", "topologies/v100-sxm-32g-8x.ini",
                        "--gpus",     "1",
                        NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "verdict: TIGHT on 1 x V100-SXM2-32GB");
  assert_contains(r.out, "exposed offload copies");
  args[0] = "show";
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "16-bit gradient sums over its 128 micro-batches");
}

/* Occurrences of `what` in text. */
static int count_in(const char *text, const char *what)
{
  int n = 0;
  for (const char *at = strstr(text, what); at; at = strstr(at + 1, what))
    n++;
  return n;
}

/* DeepSpeed ZeRO-2 with the optimizer on the CPU over two micro-batches a
 * step (vs_recipe_host_sums): micro-batch 0 copies its 16-bit gradients
 * out, micro-batch 1 copies their sum in, adds it and goes out in fp32;
 * the host holds the 16-bit sums, half the fp32 gradient partition's
 * bytes, in its buffers column beyond one micro-batch a step's. */
static void test_deepspeed_offload_host_sums_end_to_end(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"run",    DATA "gpt-small.ini",
                        "--gpus", "2",
                        "--set",  "training.framework=deepspeed",
                        "--set",  "parallel.zero=2",
                        "--set",  "parallel.offload_optimizer=cpu",
                        "--set",  "training.global_batch=4",
                        "--csv",  NULL,
                        NULL};
  table t;
  char *ops;
  double buffers, grads;
  (void)state;
  args[13] = tu_temp_dir(dir, sizeof dir);
  run(args);
  assert_int_equal(r.status, 0);
  ops = tu_read_file(path_in(dir, "ops.csv", p, sizeof p));
  assert_non_null(ops);
  assert_true(count_in(ops, ",grad_sum_out,-1,0,") > 0);
  assert_int_equal(count_in(ops, ",grad_sum_in,-1,1,"),
                   count_in(ops, ",grad_sum_out,-1,0,"));
  assert_int_equal(count_in(ops, ",grad_sum_add,-1,1,"),
                   count_in(ops, ",grad_sum_out,-1,0,"));
  assert_int_equal(count_in(ops, ",grad_sum_in,-1,0,") +
                       count_in(ops, ",grad_to_host,-1,0,"),
                   0);
  assert_true(count_in(ops, ",grad_to_host,-1,1,") > 0);
  free(ops);
  read_csv(path_in(dir, "host.csv", p, sizeof p), &t);
  buffers = strtod(cell(&t, 1, "buffers_bytes"), NULL);
  grads = strtod(cell(&t, 1, "grads_bytes"), NULL);
  tu_remove_dir(dir);
  args[11] = "training.global_batch=2";
  args[13] = tu_temp_dir(dir, sizeof dir);
  run(args);
  assert_int_equal(r.status, 0);
  read_csv(path_in(dir, "host.csv", p, sizeof p), &t);
  assert_true(grads > 0);
  tu_assert_close(buffers - strtod(cell(&t, 1, "buffers_bytes"), NULL),
                  grads / 2, 1e-12);
  tu_remove_dir(dir);
  /* show says what the buffers are */
  args[0] = "show";
  args[11] = "training.global_batch=4";
  args[12] = NULL;
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "# DeepSpeed's offload buffers per GPU "
                         "(stage_1_and_2.py): 2.00 MiB staging of the "
                         "largest tensor on the GPU (temp) and on the host\n"
                         "#   and on the host 12.6 MiB 16-bit copy of the "
                         "updated partition + 12.6 MiB 16-bit gradient sums "
                         "over its 2 micro-batches\n");
}

/* Activation offload end to end: saved tensors go out after each layer's
 * forward and come back before its backward, so the host's activations
 * rise and return to 0; the trace has the node's counter tracks. */
static void test_activation_offload_timeline_and_trace(void **state)
{
  char dir[64], p[128], trace[160];
  const char *args[] = {"run", DATA "gpt-small.ini", "--gpus", "2", "--set",
                        "training.offload_activations=cpu", "--csv", NULL,
                        "--trace", NULL, NULL};
  char *json, *text, *line, *last = NULL, *save = NULL;
  int out = 0, back = 0, rows = 0;
  (void)state;
  args[7] = tu_temp_dir(dir, sizeof dir);
  args[9] = path_in(dir, "trace.json", trace, sizeof trace);
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "exposed offload copies");
  /* every row of the file (read whole: it may be longer than a table) */
  text = tu_read_file(path_in(dir, "host_timeline.csv", p, sizeof p));
  assert_non_null(text);
  static const char header[] =
      "time_s,node,place,rank,op,category,delta_bytes,in_use_bytes\n";
  assert_true(strncmp(text, header, sizeof header - 1) == 0);
  for (line = strtok_r(text + sizeof header - 1, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save), rows++) {
    out += strstr(line, ",activations_to_host,activations,") != NULL;
    back += strstr(line, ",activations_to_gpu,activations,") != NULL;
    last = line;
  }
  assert_true(out > 0);
  assert_int_equal(out, back);
  assert_int_equal(out + back, rows); /* nothing else changes host memory */
  assert_non_null(last);
  assert_string_equal(strrchr(last, ',') + 1, "0"); /* all came back */
  free(text);
  json = tu_read_file(trace);
  assert_non_null(json);
  assert_non_null(strstr(json, "\"node 0 host memory and NVMe\""));
  assert_non_null(strstr(json, "\"name\":\"host activations\""));
  free(json);
  tu_remove_dir(dir);
}

/* Off the GPU, the pinned staging and swap buffers are "buffers" in every
 * output that names them, as host.csv's buffers_bytes column and the node
 * table do (CSV review: host_timeline.csv and the trace called the same
 * bytes "temp"): with the optimizer and parameters on NVMe, host.csv's
 * buffers at the peak are the running sum of host_timeline.csv's
 * "buffers" rows, and no row says "temp". */
static void test_host_buffers_are_named_alike(void **state)
{
  char dir[64], p[128], trace[160];
  const char *args[] = {"run",     DATA "gpt-small.ini",
                        "--gpus",  "2",
                        "--set",   "parallel.zero=3",
                        "--set",   "parallel.offload_optimizer=nvme",
                        "--set",   "parallel.offload_params=nvme",
                        "--csv",   NULL,
                        "--trace", NULL,
                        NULL};
  uint64_t sum = 0;
  char *json;
  table t;
  (void)state;
  args[11] = tu_temp_dir(dir, sizeof dir);
  args[13] = path_in(dir, "trace.json", trace, sizeof trace);
  run(args);
  assert_int_equal(r.status, 0);
  read_csv(path_in(dir, "host_timeline.csv", p, sizeof p), &t);
  for (int row = 1; row < t.n_rows; row++) {
    assert_string_not_equal(cell(&t, row, "category"), "temp");
    if (strcmp(cell(&t, row, "category"), "buffers") == 0)
      sum += strtoull(cell(&t, row, "delta_bytes"), NULL, 10);
  }
  assert_true(sum > 0);
  read_csv(path_in(dir, "host.csv", p, sizeof p), &t);
  assert_string_equal(cell(&t, 1, "place"), "host");
  assert_int_equal(strtoull(cell(&t, 1, "buffers_bytes"), NULL, 10), sum);
  json = tu_read_file(trace);
  assert_non_null(json);
  assert_non_null(strstr(json, "\"name\":\"host buffers\""));
  assert_null(strstr(json, "\"name\":\"host temp\""));
  free(json);
  tu_remove_dir(dir);
}

/* Offload to NVMe on a node without NVMe ([node] nvme_capacity = 0, the
 * default) is bad input, not an out-of-memory (bad-input review: exit 3,
 * "needs 176 MiB of 0 B"): one message naming both keys, exit 1,
 * nothing written; in a sweep the row is invalid. */
static void test_nvme_offload_needs_nvme(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"run",   DATA "gpt-small.ini",
                        "--set", "parallel.zero=3",
                        "--set", "parallel.offload_params=nvme",
                        "--set", "topology.node.nvme_capacity=0",
                        "--csv", NULL,
                        NULL};
  const char *sweep[] = {"sweep",  DATA "gpt-small.ini",
                         "--set",  "parallel.zero=3",
                         "--set",  "parallel.offload_optimizer=nvme",
                         "--vary", "topology.node.nvme_capacity=0,1TB",
                         NULL};
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  args[9] = path_in(dir, "out", p, sizeof p);
  run(args);
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err, "vsim: --set parallel.offload_params=nvme: needs "
                             "NVMe on the node, but the topology has none "
                             "(--set topology.node.nvme_capacity=0); offload "
                             "to cpu, or give the node's NVMe capacity\n");
  assert_int_equal(access(p, F_OK), -1);
  run(sweep);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "invalid  --set parallel.offload_optimizer=nvme: "
                         "needs NVMe on the node");
  assert_contains(r.out, "1 fit, 0 out of memory, 1 invalid");
  tu_remove_dir(dir);
}

/* A conflict that a --set made with a file's key blames the file's line
 * and names the option too (bad-input review: the file's unchanged line
 * alone was blamed): the layers against pp_layers, LoRA's keys against
 * method = full, a calibrated curve's last piece against its rate. */
static void test_set_conflicts_name_the_option(void **state)
{
  char ppl[128], lora[128];
  struct {
    const char *file, *set, *want;
  } cases[] = {
      {ppl, "model.layers=6",
       "the counts add up to 4, but the model has 6 layers (--set "
       "model.layers=6)\n"},
      {ppl, "model.layers=1",
       "pp must not exceed layers (1) (--set model.layers=1): every stage "
       "needs a layer\n"},
      {lora, "finetune.method=full",
       "LoRA's keys mean nothing with method = full (--set "
       "finetune.method=full); set method = lora or qlora\n"},
      {"tests/data/gpt-small.ini",
       "topology.calibration.d2h_pinned_latency=5us",
       "[calibration] d2h_pinned_piece_latencies = "},
  };
  (void)state;
  tu_write_temp("[model]\narch = gpt\nlayers = 4\nhidden = 512\n"
                "heads = 8\nvocab = 1000\nseq_len = 128\n[parallel]\n"
                "pp = 2\npp_layers = 2,2\n",
                ".ini", ppl, sizeof ppl);
  tu_write_temp("[model]\narch = llama\nlayers = 4\nhidden = 512\n"
                "heads = 8\nffn_hidden = 1024\nvocab = 1000\n"
                "seq_len = 128\n[finetune]\nmethod = lora\nlora_rank = 4\n",
                ".ini", lora, sizeof lora);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *args[] = {
        "run",   cases[i].file, "--gpus",     "2",
        "--set", cases[i].set,  "--topology", "topologies/h200-calibrated.ini",
        NULL};
    run(args);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, cases[i].want);
  }
  assert_true(strncmp(r.err, "vsim: topologies/h200-calibrated.ini:", 37) ==
              0); /* the file's line, then the option */
  assert_contains(r.err, ": the last piece must equal d2h_pinned_latency "
                         "(--set topology.calibration.d2h_pinned_latency="
                         "5us)\n");
  unlink(ppl);
  unlink(lora);
}

/* The fine-tune samples end to end, each on the GPU it names: show prints
 * PEFT's trainable count; LoRA on Llama-3.1-8B fits one 24 GB RTX 4090,
 * QLoRA's 70B in NF4 one 48 GB L40S with its optimizer states paged, if
 * tightly (less than the 10% reserve free: exit 0, TIGHT), and the full
 * fine-tune of the 8B with paged 8-bit Adam in backward one 80 GB H100.
 * The QLoRA run does not fit 48 GB without paging. */
static void test_finetune_samples(void **state)
{
  const char *show[] = {"show", "workloads/llama3-8b-lora.ini", NULL};
  const char *lora[] = {"run", "workloads/llama3-8b-lora.ini", "--gpus", "1",
                        "--topology", "topologies/rtx4090-24g-1x.ini", NULL};
  const char *qlora[] = {"run", "workloads/llama2-70b-qlora.ini", "--gpus",
                         "1", "--topology", "topologies/l40s-48g-8x.ini",
                         NULL};
  const char *unpaged[] = {"run", "workloads/llama2-70b-qlora.ini", "--gpus",
                           "1", "--topology", "topologies/l40s-48g-8x.ini",
                           "--set", "training.paged_optimizer=false", NULL};
  const char *full[] = {"run", "workloads/llama3-8b-full-adam8bit.ini",
                        "--gpus", "1", NULL};
  (void)state;
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "# trainable parameters = 3407872 (lora: rank 8 "
                         "adapters on q,v");
  expect_run(lora, 0, "verdict: FITS on 1 x RTX-4090-24GB");
  expect_run(qlora, 0, "verdict: TIGHT on 1 x L40S-48GB");
  assert_contains(r.out, "less than [runtime] reserve's 4.44 GiB free");
  assert_contains(r.out, "paged optimizer states: up to ");
  /* unpaged, the same bf16 adapters stepped by PyTorch's AdamW (no
   * master copy: zeros_like states, 2 bytes each) on the GPU */
  expect_run(unpaged, 0, "verdict: TIGHT on 1 x L40S-48GB");
  assert_null(strstr(r.out, "paged optimizer states"));
  expect_run(full, 0, "verdict: FITS on 1 x H100-SXM-80GB");
  assert_null(strstr(r.out, "do not fit, and move"));
  {
    /* at micro-batch 16 the peak (71.4 GiB) and the paged states (15.0
     * GiB: 2 B of 8.03e9 elements) exceed the GPU's 79.2 GiB by 7.14 GiB,
     * which pages out while the activations need it and back for the
     * step: said, with its PCIe time (2 x 7.14 GiB at the H100's 55
     * GB/s), by run; fit's answer (13: 14 to 16 leave less than the
     * reserve free) says its own share, 68.7 + 15.0 - 79.2 GiB */
    const char *big[] = {"run",    "workloads/llama3-8b-full-adam8bit.ini",
                         "--gpus", "1",
                         "--set",  "training.micro_batch=16",
                         "--set",  "training.global_batch=16",
                         NULL};
    const char *fit[] = {"fit", "workloads/llama3-8b-full-adam8bit.ini",
                         "--gpus", "1", NULL};
    expect_run(big, 0, "peaks at 71.4 GiB of 79.2 GiB");
    assert_contains(r.out, "paged optimizer states: up to 15.0 GiB a GPU");
    assert_contains(r.out, "beside rank 0's peak 7.14 GiB of them do not "
                           "fit, and move to host memory and back each "
                           "step: at least 0.279 s over PCIe");
    expect_run(fit, 0, "largest training.micro_batch that fits: 13 (");
    assert_contains(r.out, "; 4.47 GiB of its paged optimizer states move "
                           "to host memory and back each step");
  }
  {
    /* paged states on 2 GPUs: 6.09 GiB of bitsandbytes' 32-bit AdamW
     * moments for the bf16 adapters, under the Trainer too (its paged
     * optimizer is bitsandbytes', whatever the weights' dtype), and
     * under DeepSpeed without ZeRO, whose FP16_Optimizer (in bf16)
     * replicates them; each left the GPU's optimizer figure without
     * wrapping it below zero */
    const char *none[] = {"run", "workloads/llama2-70b-qlora.ini", "--gpus",
                          "2", NULL};
    const char *hf[] = {"run", "workloads/llama2-70b-qlora.ini", "--gpus", "2",
                        "--set", "training.framework=hf", NULL};
    const char *ds[] = {"run", "workloads/llama2-70b-qlora.ini", "--gpus", "2",
                        "--set", "training.framework=deepspeed", NULL};
    expect_run(none, 0, "paged optimizer states: up to 6.09 GiB a GPU");
    expect_run(hf, 0, "paged optimizer states: up to 6.09 GiB a GPU");
    expect_run(ds, 0, "paged optimizer states: up to 6.09 GiB a GPU");
  }
}

/* Megatron-LM's precision-aware optimizer end to end on the Megatron
 * sample (1,713,299,456 parameters a GPU at tp 4): bf16 moments and the
 * int16 remainder of each fp32 master make its states 6 B a parameter
 * (12 without), fp16 moments 2 + 2 + 2 with an fp32 copy of the one the
 * step unpacks (4 B a parameter: the sample's weights are matrices but for
 * 0.05%); plan tries its layouts with zero = 1 only. */
static void test_precision_aware_optimizer(void **state)
{
  const char *w = "workloads/megatron-gpt-7b.ini";
  const char *pa = "training.precision_aware_optimizer=true";
  const char *bf16[] = {"show",  w,
                        "--set", pa,
                        "--set", "training.exp_avg_dtype=bf16",
                        "--set", "training.exp_avg_sq_dtype=bf16",
                        NULL};
  const char *fp16[] = {
      "show", w, "--set", pa, "--set", "training.exp_avg_dtype=fp16", NULL};
  const char *go[] = {"run", w, "--gpus", "8", "--set", pa, NULL};
  const char *plan[] = {"plan",  w,   "--max-gpus", "8",
                        "--set", pa,  "--set",      "training.global_batch=16",
                        "--top", "1", "--csv",      NULL,
                        NULL};
  char dir[64], p[128], *text, *line;
  int rows = 0;
  (void)state;
  plan[11] = path_in(tu_temp_dir(dir, sizeof dir), "plan.csv", p, sizeof p);
  expect_run(bf16, 0,
             "# model states per GPU = 3.19 GiB params + 6.38 GiB "
             "grads + 9.57 GiB optimizer = 19.1 GiB");
  expect_run(fp16, 0,
             "# optimizer step temporaries = 6.38 GiB per GPU: "
             "FusedAdam's fp32 copies of 1 narrower state(s)");
  expect_run(go, 0, "verdict: FITS on 8 x H100-SXM-80GB");
  expect_run(plan, 0,
             "ZeRO and offload choices: Megatron-LM "
             "shards with its distributed optimizer (zero <= 1), its "
             "precision-aware optimizer and FP8 weights "
             "(fp8_param_gather) run within it (zero = 1)");
  text = tu_read_file(p);
  assert_non_null(text);
  for (line = strchr(text, '\n'); line && line[1]; rows++) {
    const char *f = ++line; /* the ninth field: parallel.zero */
    for (int i = 0; i < 8 && f; i++)
      f = strchr(f, ',') ? strchr(f, ',') + 1 : NULL;
    assert_non_null(f);
    assert_memory_equal(f, "1,", 2);
    line = strchr(line, '\n');
  }
  assert_true(rows > 100);
  free(text);
}

/* Megatron-LM's FP8 primary weights end to end on the Megatron sample
 * under fp8 (tp 4): the GEMM weights' bf16 copies (2 B) and quantized ones
 * (1 B) give way to the FP8 weights themselves (1 B); the transposes
 * Hopper needs stay. 5.82 GiB of parameters a GPU become 3.19. */
static void test_fp8_primary_weights(void **state)
{
  const char *w = "workloads/megatron-gpt-7b.ini";
  const char *fp8 = "training.precision=fp8";
  const char *before[] = {"show", w, "--set", fp8, NULL};
  const char *after[] = {
      "show", w, "--set", fp8, "--set", "training.fp8_param_gather=true", NULL};
  const char *go[] = {"run",   w,   "--gpus", "8",
                      "--set", fp8, "--set",  "training.fp8_param_gather=true",
                      NULL};
  (void)state;
  expect_run(before, 0, "# model states per GPU = 5.82 GiB params + ");
  expect_run(after, 0, "# model states per GPU = 3.19 GiB params + ");
  expect_run(go, 0, "verdict: FITS on 8 x H100-SXM-80GB");
}

/* Gemma-2-9B from its config end to end (4096 tokens, DeepSpeed ZeRO-3 on
 * 8 H100s): under eager attention the soft-capped scores are what tanh
 * keeps, 16 heads x 4096^2 x 2 B = 0.5 GiB a layer over 42 layers; under
 * flash attention show says the capping costs nothing. */
static void test_gemma2_end_to_end(void **state)
{
  char ini[512], path[64];
  const char *eager[] = {"run", path, "--gpus", "8", NULL};
  const char *flash[] = {"show", path, "--set", "training.attention=flash",
                         NULL};
  (void)state;
  snprintf(ini, sizeof ini,
           "[model]\nhf_config = %s/models/gemma-2-9b.json\nseq_len = 4096\n"
           "[training]\nframework = deepspeed\nattention = eager\n"
           "[parallel]\nzero = 3\n",
           VSIM_SOURCE_DIR);
  tu_write_temp(ini, ".ini", path, sizeof path);
  expect_run(eager, 3,
             "21.0 GiB activations of attn_softcap (layers 0-41, "
             "micro-batch 0, 42 tensors)");
  expect_run(flash, 0, "# attn_softcap costs nothing under flash attention");
  /* DeepSpeed's fused norms: Gemma's 1 + weight keeps nothing more */
  assert_contains(r.out, "# zero_centered_norm has no effect here");
  {
    /* the sample: QLoRA under the Trainer, whose peak is the loss over
     * 2 x 4096 x 256000 logits, the capped ones' tanh output (2 B each,
     * 3.91 GiB) kept beside it */
    const char *q[] = {"run", "workloads/gemma2-9b-qlora.ini", "--gpus", "1",
                       NULL};
    expect_run(q, 0, "3.91 GiB temp of logit_softcap (head, micro-batch 1");
    assert_contains(r.out, "verdict: FITS on 1 x H100-SXM-80GB");
  }
}

/* show names what each framework's step moves around the update
 * (vs_recipe step_wrap): Megatron-LM at bf16 with fp32 main grads reads
 * them for the norm (4) and multiplies them (8), and zeroes and checks
 * its whole buffer (2 passes: no data parallelism to scale by);
 * DeepSpeed ZeRO-2 at fp16 checks for overflow (28), takes the norm of
 * each gradient's .double() (18), flattens (4), casts (6) and multiplies
 * (8) its partition; the Trainer, under amp_fp16, unscales (8) and clips
 * (12); framework none moves nothing more. */
static void test_step_passes_shown(void **state)
{
  const char *mg[] = {"show", "workloads/megatron-gpt-7b.ini", NULL};
  const char *ds[] = {"show", "workloads/deepspeed-gpt-zero2.ini", NULL};
  const char *hf[] = {"show", "workloads/hf-bert-large.ini", NULL};
  const char *none[] = {"show", "workloads/llama2-7b.ini", NULL};
  (void)state;
  expect_run(mg, 0,
             "# optimizer step around the update (megatron): 12 B a stepped "
             "element (casts, overflow check, norm, unscaling, clipping), 2 "
             "pass(es) a step over the resident gradients (zeroing, scaling, "
             "checks)\n");
  expect_run(ds, 0,
             "# optimizer step around the update (deepspeed): 64 B a stepped "
             "element (casts, overflow check, norm, unscaling, clipping)\n");
  expect_run(hf, 0,
             "# optimizer step around the update (hf): 20 B a stepped "
             "element (casts, overflow check, norm, unscaling, clipping)\n");
  const char *mg_off[] = {"show", "workloads/megatron-gpt-7b.ini", "--set",
                          "training.grad_clipping=false", NULL};
  const char *ds_off[] = {"show", "workloads/deepspeed-gpt-zero2.ini", "--set",
                          "training.grad_clipping=false", NULL};
  const char *in_bwd[] = {"run",   "workloads/hf-bert-large.ini",
                          "--set", "parallel.dp=1",
                          "--set", "training.global_batch=8",
                          "--set", "training.optimizer_in_backward=true",
                          "--set", "training.grad_clipping=true",
                          NULL};
  run(none);
  assert_int_equal(r.status, 0);
  assert_null(strstr(r.out, "around the update"));
  /* without clipping Megatron-LM's bf16 step keeps its buffer passes
   * alone; DeepSpeed's takes the norm and multiplies anyway */
  expect_run(mg_off, 0,
             "# optimizer step around the update (megatron): 2 pass(es) a "
             "step over the resident gradients (zeroing, scaling, "
             "checks)\n");
  expect_run(ds_off, 0,
             "# grad_clipping = false has no effect under deepspeed");
  assert_contains(r.out, "(deepspeed): 64 B a stepped element");
  run(in_bwd);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "--set training.grad_clipping=true: clipping needs "
                         "the norm of all the gradients before any step, and "
                         "optimizer_in_backward steps each block");
}

/* The framework samples end to end: each fits its 8 H100s, and show says
 * which keys its preset chose (Megatron's fp32 main grads, DeepSpeed's
 * bucket and step copies, FSDP2's fp32 sharded parameters). */
static void test_framework_samples(void **state)
{
  static const struct {
    const char *file, *shown;
  } samples[] = {
      {"workloads/megatron-gpt-7b.ini",
       "grad_dtype = fp32    ; framework preset: Megatron-LM accumulates bf16 "
       "gradients in fp32 main grads"},
      {"workloads/deepspeed-gpt-zero2.ini",
       "# optimizer step temporaries = 5.80 GiB per GPU: fp32 gradient "
       "copies (deepspeed's optimizer wrapper)"},
      {"workloads/torchtitan-llama3-8b.ini",
       "master_weights = false    ; framework preset: the sharded parameters "
       "are fp32: no master copy"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
    const char *show[] = {"show", samples[i].file, NULL};
    const char *go[] = {"run", samples[i].file, "--gpus", "8", NULL};
    run(show);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, samples[i].shown);
    run(go);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "verdict: FITS on 8 x H100-SXM-80GB");
  }
  {
    /* DeepSpeed refuses fp32 accumulation of bf16 gradients without ZeRO
     * (engine.py, #7790): one message naming the key, exit 1, and show
     * names the wrapper each bf16 layout gets */
    const char *mix[] = {"run",   "workloads/llama2-7b.ini",
                         "--set", "training.framework=deepspeed",
                         "--set", "parallel.zero=0",
                         "--set", "training.grad_dtype=fp32",
                         NULL};
    static const struct {
      const char *zero, *grad_dtype, *pp, *shown;
    } wrappers[] = {
        {"0", "precision", "1",
         "# deepspeed's optimizer: FP16_Optimizer without ZeRO, in bf16 "
         "mode (DDP_BFLOAT16)\n"},
        {"0", "precision", "2",
         "# deepspeed's optimizer: BF16_Optimizer (bf16 under its pipeline "
         "engine), its gradients accumulated in bf16"},
        {"1", "fp32", "1",
         "# deepspeed's optimizer: BF16_Optimizer (ZeRO-1 with fp32 "
         "gradient accumulation), its gradients accumulated in fp32"},
        {"1", "precision", "1",
         "# deepspeed's optimizer: its ZeRO stage 1 optimizer\n"},
    };
    run(mix);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "--set training.grad_dtype=fp32: DeepSpeed "
                           "accumulates bf16 gradients in fp32");
    assert_null(strstr(r.out, "verdict"));
    for (size_t i = 0; i < sizeof wrappers / sizeof wrappers[0]; i++) {
      char zero[32], grad[48], pp[32];
      const char *show[] = {"show",   "workloads/llama2-7b.ini",
                            "--gpus", "8",
                            "--set",  "training.framework=deepspeed",
                            "--set",  zero,
                            "--set",  grad,
                            "--set",  pp,
                            NULL};
      snprintf(zero, sizeof zero, "parallel.zero=%s", wrappers[i].zero);
      snprintf(grad, sizeof grad, "training.grad_dtype=%s",
               wrappers[i].grad_dtype);
      snprintf(pp, sizeof pp, "parallel.pp=%s", wrappers[i].pp);
      run(show);
      assert_int_equal(r.status, 0);
      assert_contains(r.out, wrappers[i].shown);
    }
  }
  {
    /* DeepSpeed casts the adapters to the model's dtype (engine.py
     * _cast_module_mixed_precision): show says so, run refuses fp32 ones */
    const char *lora[] = {"show", "workloads/llama3-8b-lora.ini", "--set",
                          "training.framework=deepspeed", NULL};
    const char *fp32[] = {"run",   "workloads/llama3-8b-lora.ini",
                          "--set", "training.framework=deepspeed",
                          "--set", "finetune.adapter_dtype=fp32",
                          NULL};
    run(lora);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "adapter_dtype = bf16    ; framework preset: "
                           "DeepSpeed casts every parameter to the model's "
                           "dtype (engine.py _cast_module_mixed_precision)");
    run(fp32);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "--set finetune.adapter_dtype=fp32: DeepSpeed "
                           "casts every floating-point parameter");
    assert_null(strstr(r.out, "verdict"));
  }
  {
    /* its engine all-reduce ignores reduce_bucket_size: show says so
     * where the user set bucket, not where the preset did */
    const char *set[] = {
        "show",  "workloads/llama2-7b.ini",      "--gpus", "8",
        "--set", "training.framework=deepspeed", "--set",  "parallel.zero=0",
        "--set", "parallel.bucket=100MB",        NULL};
    const char *preset[] = {
        "show",  "workloads/llama2-7b.ini",      "--gpus", "8",
        "--set", "training.framework=deepspeed", "--set",  "parallel.zero=0",
        NULL};
    const char *note = "# bucket has no effect here: deepspeed's engine "
                       "all-reduces the gradients";
    run(set);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, note);
    run(preset);
    assert_int_equal(r.status, 0);
    assert_null(strstr(r.out, note));
  }
}

/* The time in seconds that run printed after `label` ("X s|ms|us"). */
static double seconds_after(const char *out, const char *label)
{
  const char *at = strstr(out, label);
  double v;
  char unit[4] = "";
  assert_non_null(at);
  assert_int_equal(sscanf(at + strlen(label), "%lf %3s", &v, unit), 2);
  assert_true(isfinite(v) && v > 0);
  if (strcmp(unit, "ms") == 0)
    return v * 1e-3;
  return strcmp(unit, "us") == 0 ? v * 1e-6 : v;
}

/* The step time that run printed. */
static double step_seconds(const char *out)
{
  return seconds_after(out, "step time ");
}


/* Runs args, which must succeed, and returns the step time it printed. */
static double run_step(const char *const *args)
{
  run(args);
  assert_int_equal(r.status, 0);
  return step_seconds(r.out);
}

/* kernels = eager, end to end: torchtitan's preset chooses it and says
 * why; on Llama-2-7B it lengthens the step by HBM traffic and kernel
 * launches alone (the same arithmetic, the same memory), and a value
 * that is neither fused nor eager is refused with both. */
static void test_eager_kernels_end_to_end(void **state)
{
  static const char *const show[] = {
      "show", "workloads/torchtitan-llama3-8b.ini", NULL};
  static const char *const titan[] = {
      "run", "workloads/torchtitan-llama3-8b.ini", "--gpus", "8", NULL};
  static const char *const fused[] = {"run", "workloads/llama2-7b.ini",
                                      "--gpus", "8", NULL};
  static const char *const eager[] = {"run", "workloads/llama2-7b.ini",
                                      "--gpus", "8", "--set",
                                      "training.kernels=eager", NULL};
  static const char *const bad[] = {"run", "workloads/llama2-7b.ini", "--set",
                                    "training.kernels=compiled", NULL};
  char verdict[200];
  double tf, te, af, ae;
  (void)state;
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "kernels = eager    ; framework preset: torchtitan "
                         "compiles nothing unless training.compile = true");
  run(titan);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "flash attention, eager kernels\n");
  tf = run_step(fused);
  af = seconds_after(r.out, "arithmetic ");
  snprintf(verdict, sizeof verdict, "%s", strstr(r.out, "verdict: "));
  assert_null(strstr(r.out, "eager kernels"));
  te = run_step(eager);
  ae = seconds_after(r.out, "arithmetic ");
  assert_true(te > 1.1 * tf);
  tu_assert_close(ae, af, 1e-12);
  assert_string_equal(strstr(r.out, "verdict: "), verdict);
  run(bad);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "--set training.kernels=compiled: expected fused or "
                         "eager");
}

/* Whether run `longer`'s step is longer than run `base`'s over the same
 * arithmetic (a change of HBM traffic and kernels alone). */
static void assert_longer_same_arithmetic(const char *const *base,
                                          const char *const *longer)
{
  double tb = run_step(base), ab = seconds_after(r.out, "arithmetic ");
  double tl = run_step(longer), al = seconds_after(r.out, "arithmetic ");
  assert_true(tl > tb);
  tu_assert_close(al, ab, 1e-12);
}

/* grad_accumulation_fusion = false, end to end: Megatron-LM's GPT 7B
 * sample adds each weight gradient into its fp32 main gradient in a
 * kernel of its own, which lengthens the step by HBM traffic and
 * launches alone (the same arithmetic); over eager kernels, which have no
 * fused weight-gradient GEMM, true is refused naming the key. */
static void test_grad_accumulation_fusion_end_to_end(void **state)
{
  static const char *const fused[] = {
      "run", "workloads/megatron-gpt-7b.ini", "--gpus", "8", NULL};
  static const char *const unfused[] = {
      "run", "workloads/megatron-gpt-7b.ini", "--gpus", "8", "--set",
      "training.grad_accumulation_fusion=false", NULL};
  static const char *const bad[] = {
      "run", "workloads/megatron-gpt-7b.ini", "--set",
      "training.kernels=eager", "--set",
      "training.grad_accumulation_fusion=true", NULL};
  (void)state;
  assert_longer_same_arithmetic(fused, unfused);
  run(bad);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "--set training.grad_accumulation_fusion=true: "
                         "gradient-accumulation fusion is Megatron-LM's "
                         "fused weight-gradient GEMM");
}

/* optimizer_impl = foreach, end to end: the Hugging Face Trainer's
 * BERT-large sample under PyTorch's foreach AdamW takes longer over the same
 * arithmetic, and `vsim show` says so; over Megatron-LM's own optimizer
 * it is refused naming the key. */
static void test_optimizer_impl_end_to_end(void **state)
{
  static const char *const fused[] = {
      "run", "workloads/hf-bert-large.ini", "--gpus", "8", NULL};
  static const char *const foreach[] = {
      "run", "workloads/hf-bert-large.ini", "--gpus", "8", "--set",
      "training.optimizer_impl=foreach", NULL};
  static const char *const show[] = {
      "show", "workloads/hf-bert-large.ini", "--set",
      "training.optimizer_impl=foreach", NULL};
  static const char *const bad[] = {
      "run", "workloads/megatron-gpt-7b.ini", "--set",
      "training.optimizer_impl=foreach", NULL};
  (void)state;
  assert_longer_same_arithmetic(fused, foreach);
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "optimizer_impl = foreach");
  run(bad);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "--set training.optimizer_impl=foreach: Megatron-LM "
                         "and DeepSpeed step with their own fused Adam");
}

/* DeepSpeed's ZeRO-2 without overlap_comm (its default below ZeRO-3):
 * show says the preset chose overlap_grad_reduce = false and why, and
 * the reduce-scatters on the compute stream lengthen the step over the
 * same job with overlap_comm, by their time, which the split shows as
 * exposed data-parallel time. */
static void test_deepspeed_zero2_reduces_on_compute(void **state)
{
  const char *show[] = {"show", "workloads/deepspeed-gpt-zero2.ini", NULL};
  const char *serial[] = {"run", "workloads/deepspeed-gpt-zero2.ini",
                          "--gpus", "8", NULL};
  const char *overlapped[] = {"run", "workloads/deepspeed-gpt-zero2.ini",
                              "--gpus", "8", "--set",
                              "parallel.overlap_grad_reduce=true", NULL};
  double t_serial, t_overlapped, dp_serial;
  (void)state;
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "overlap_grad_reduce = false    ; framework preset: "
                         "DeepSpeed's overlap_comm is off below ZeRO-3");
  t_serial = run_step(serial);
  dp_serial = seconds_after(r.out, "exposed data-parallel comm ");
  t_overlapped = run_step(overlapped);
  assert_true(t_serial > t_overlapped);
  /* the step grows by less than the reductions it now waits for */
  assert_true(t_serial - t_overlapped < dp_serial + 1e-3);
}

/* Rank 0's `column` in DIR/summary.csv (at its peak), as a number. */
static unsigned long long summary_u64(const char *dir, const char *column)
{
  char p[128];
  table t;
  read_csv(path_in(dir, "summary.csv", p, sizeof p), &t);
  assert_true(t.n_rows > 1);
  return strtoull(cell(&t, 1, column), NULL, 10);
}

/* DeepSpeed's ZeRO-3 coordinator end to end on Llama-2-7B, 8 GPUs: show
 * says the preset chose its two limits; with both at 0 (no prefetch,
 * nothing kept for reuse) the peak holds at least two blocks fewer
 * (layers 30 and 31 stay gathered into backward at 1e9: the elements
 * between their forwards and backwards are under it), and every gather
 * waits: more exposed data-parallel time. A limit outside it is refused. */
static void test_deepspeed_zero3_coordinator_end_to_end(void **state)
{
  /* a Llama-2-7B block: 4 x 4096^2 + 3 x 4096 x 11008, 2 B each */
  const unsigned long long block = 2ull * (4 * 4096 * 4096 + 3 * 4096 * 11008);
  const char *show[] = {"show", "workloads/llama2-7b.ini", "--set",
                        "training.framework=deepspeed", NULL};
  const char *ds[] = {"run",   "workloads/llama2-7b.ini",      "--gpus", "8",
                      "--set", "training.framework=deepspeed", "--csv",  NULL,
                      NULL};
  const char *none[] = {"run",    "workloads/llama2-7b.ini",
                        "--gpus", "8",
                        "--set",  "training.framework=deepspeed",
                        "--set",  "parallel.max_live_parameters=0",
                        "--set",  "parallel.max_reuse_distance=0",
                        "--csv",  NULL,
                        NULL};
  const char *bad[] = {
      "run",   "workloads/llama2-7b.ini",          "--gpus", "8",
      "--set", "parallel.max_live_parameters=100", NULL};
  char d1[64], d2[64];
  unsigned long long t1, t2;
  double dp1, dp2;
  (void)state;
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "max_live_parameters = 1000000000    ; framework "
                         "preset: DeepSpeed's stage3_max_live_parameters");
  assert_contains(r.out, "max_reuse_distance = 1000000000    ; framework "
                         "preset: DeepSpeed's stage3_max_reuse_distance");
  tu_temp_dir(d1, sizeof d1);
  tu_temp_dir(d2, sizeof d2);
  ds[7] = d1;
  none[11] = d2;
  run_step(ds);
  dp1 = seconds_after(r.out, "exposed data-parallel comm ");
  run_step(none);
  dp2 = seconds_after(r.out, "exposed data-parallel comm ");
  t1 = summary_u64(d1, "temp_bytes");
  t2 = summary_u64(d2, "temp_bytes");
  assert_true(t1 >= t2 + 2 * block);
  assert_true(dp2 > dp1);
  tu_remove_dir(d1);
  tu_remove_dir(d2);
  run(bad);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "max_live_parameters is DeepSpeed's ZeRO-3 "
                         "parameter coordinator's");
}

/* Seconds the first op of rank 0 named `name` of layer `layer` took in
 * DIR/ops.csv (rank,stream,op,layer,microbatch,start_s,end_s,flops,
 * bytes), and its bytes through its resource in *bytes. */
static double op_seconds(const char *dir, const char *name, const char *layer,
                         double *bytes)
{
  char p[128], want[96];
  char *text = tu_read_file(path_in(dir, "ops.csv", p, sizeof p));
  const char *at;
  double start = 0, end = 0, flops;
  assert_non_null(text);
  snprintf(want, sizeof want, ",%s,%s,", name, layer);
  for (at = strstr(text, want); at; at = strstr(at + 1, want)) {
    const char *line = at;
    while (line > text && line[-1] != '\n')
      line--;
    if (strncmp(line, "0,", 2) == 0 &&
        sscanf(at + strlen(want), "%*[^,],%lf,%lf,%lf,%lf", &start, &end,
               &flops, bytes) == 4)
      break;
  }
  free(text);
  if (!at)
    fail_msg("no %s of layer %s in %s", name, layer, p);
  return end - start;
}

/* Pageable offload buffers end to end (DeepSpeed ZeRO-3, parameters and
 * optimizer on the host, 2 GPUs of one PCIe switch on the built-in H100
 * node: 55 GB/s shared, 2 us): a layer's parameter fetch takes 2 us +
 * bytes / 27.5 GB/s pinned, 2 us + bytes / 7.44 GB/s pageable (the
 * host's rate, under its share), and the gradients out 2 us + bytes /
 * 15.07 GB/s; the step grows; show says so; with nothing offloaded it is
 * refused, and plan sets it back in its layouts without offload. */
static void test_pageable_offload_end_to_end(void **state)
{
  const char *args[] = {"run",    DATA "gpt-small.ini",
                        "--gpus", "2",
                        "--set",  "training.framework=deepspeed",
                        "--set",  "parallel.zero=3",
                        "--set",  "parallel.offload_optimizer=cpu",
                        "--set",  "parallel.offload_params=cpu",
                        "--set",  "parallel.offload_pin_memory=true",
                        "--csv",  NULL,
                        NULL};
  const char *idle[] = {"run", DATA "gpt-small.ini", "--set",
                        "parallel.offload_pin_memory=false", NULL};
  const char *plan[] = {"plan",       DATA "gpt-small.ini",
                        "--set",      "training.global_batch=4",
                        "--set",      "parallel.offload_pin_memory=false",
                        "--set",      "parallel.zero=1",
                        "--set",      "parallel.offload_optimizer=cpu",
                        "--max-gpus", "2",
                        NULL};
  char d1[64], d2[64];
  double bytes, out_bytes, pinned, pageable, out, t1, t2;
  (void)state;
  args[15] = tu_temp_dir(d1, sizeof d1);
  t1 = run_step(args);
  pinned = op_seconds(d1, "param_to_gpu", "0", &bytes);
  args[13] = "parallel.offload_pin_memory=false";
  args[15] = tu_temp_dir(d2, sizeof d2);
  t2 = run_step(args);
  pageable = op_seconds(d2, "param_to_gpu", "0", &bytes);
  out = op_seconds(d2, "grad_to_host", "-1", &out_bytes);
  assert_true(bytes > 1e6 && out_bytes > 1e6);
  assert_true(fabs(pinned - (2e-6 + bytes / 27.5e9)) < 2e-9);
  assert_true(fabs(pageable - (2e-6 + bytes / 7.44e9)) < 2e-9);
  assert_true(fabs(out - (2e-6 + out_bytes / 15.07e9)) < 2e-9);
  assert_true(t2 > t1);
  tu_remove_dir(d1);
  tu_remove_dir(d2);
  args[0] = "show";
  args[14] = NULL;
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "\noffload_pin_memory = false\n");
  assert_contains(r.out, "# the offload buffers are pageable: each copy "
                         "moves at most 7.44 GB/s to the GPU and 15.07 GB/s "
                         "from it");
  run(idle);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "--set parallel.offload_pin_memory=false: says "
                         "whether the host buffers of offloaded optimizer "
                         "states and parameters are pinned");
  run(plan);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "fewest GPUs on which it fits without optimizer or "
                         "parameter offload: 1");
}

/* torchtitan's Llama 3.1 8B on 8 GPUs: its preset sets the sharded
 * gradients to None at each step's start, as its train step's zero_grad
 * does (show says why); so they are not there yet at the peak, in the
 * loss's backward before any reduce-scatter, where kept from step to step
 * (set_grads_to_none = false, torchtitan's CUDA graphs) they are: the
 * peak differs by exactly the stage's sharded fp32 gradients (4 B x
 * 8,030,261,248 / 8), which show says appear at each block's first
 * reduction. */
static void test_fsdp2_grads_set_to_none_end_to_end(void **state)
{
  const unsigned long long grads = 4ull * 8030261248ull / 8;
  const char *show[] = {"show", "workloads/torchtitan-llama3-8b.ini", NULL};
  const char *kept[] = {"run",   "workloads/torchtitan-llama3-8b.ini",
                        "--set", "training.set_grads_to_none=false",
                        "--csv", NULL,
                        NULL};
  const char *none[] = {"run", "workloads/torchtitan-llama3-8b.ini", "--csv",
                        NULL, NULL};
  char d1[64], d2[64];
  (void)state;
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "set_grads_to_none = true    ; framework preset: "
                         "torchtitan's train step begins with "
                         "optimizers.zero_grad(), set_to_none");
  assert_contains(r.out, "; the gradients each block's share at its first "
                         "reduction, gone after the step");
  tu_temp_dir(d1, sizeof d1);
  tu_temp_dir(d2, sizeof d2);
  kept[5] = d1;
  none[3] = d2;
  run_step(kept);
  run_step(none);
  assert_int_equal(summary_u64(d1, "grads_bytes"),
                   summary_u64(d2, "grads_bytes") + grads);
  assert_int_equal(summary_u64(d1, "peak_allocated_bytes"),
                   summary_u64(d2, "peak_allocated_bytes") + grads);
  assert_int_equal(summary_u64(d1, "model_states_bytes"),
                   summary_u64(d2, "model_states_bytes"));
  tu_remove_dir(d1);
  tu_remove_dir(d2);
}

/* Groups that straddle nodes: tp 4 on 6-GPU nodes puts the tp group of
 * ranks 4-7 half in each of two nodes, so its all-reduces cross the NIC
 * (47 GB/s against NVLink's 450) and the tensor-parallel time grows; on
 * 8-GPU nodes every tp group is inside one node. */
static void test_groups_straddling_nodes(void **state)
{
  const char *even[] = {"run", "workloads/llama2-7b.ini", "--gpus", "24",
                        "--set", "parallel.tp=4", "--set",
                        "training.global_batch=48", NULL};
  const char *uneven[] = {"run", "workloads/llama2-7b.ini", "--gpus", "24",
                          "--set", "parallel.tp=4", "--set",
                          "training.global_batch=48", "--set",
                          "topology.node.gpus=6", NULL};
  double inside, across;
  (void)state;
  run(even);
  assert_int_equal(r.status, 0);
  inside = seconds_after(r.out, "tensor-parallel comm ");
  run(uneven);
  assert_int_equal(r.status, 0);
  across = seconds_after(r.out, "tensor-parallel comm ");
  /* the straddling group's inter-node part alone moves 1/2 of each
   * all-reduce's buffer over a link 9.6x slower than NVLink */
  assert_true(across > 2.0 * inside);
}

/* Pipeline sends and the gradient reduction end to end: Megatron's
 * preset makes a 1F1B pipeline's sends blocking and reduces gradients
 * after backward (show says why), which lengthens the step over the same
 * job with both overlapped; scatter/gather under sequence parallelism
 * exits 1 naming the key. */
static void test_pipeline_sends_and_reduction(void **state)
{
  const char *show[] = {"show", "workloads/megatron-gpt-7b.ini", "--set",
                        "parallel.pp=2", "--set",
                        "parallel.overlap_grad_reduce=false", NULL};
  const char *mg[] = {"run", "workloads/megatron-gpt-7b.ini", "--gpus", "16",
                      "--set", "parallel.pp=2", "--set",
                      "parallel.overlap_grad_reduce=false", NULL};
  const char *ov[] = {"run", "workloads/megatron-gpt-7b.ini", "--gpus", "16",
                      "--set", "parallel.pp=2", "--set",
                      "parallel.p2p=overlapped", NULL};
  const char *bad[] = {"run", "workloads/megatron-gpt-7b.ini", "--gpus", "16",
                       "--set", "parallel.pp=2", "--set",
                       "parallel.sequence_parallel=true", "--set",
                       "parallel.p2p_scatter_gather=true", NULL};
  double blocking, overlapped;
  (void)state;
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "p2p = blocking    ; framework preset: Megatron-LM's "
                         "1F1B waits for each send before computing on");
  blocking = run_step(mg);
  overlapped = run_step(ov);
  assert_true(blocking > overlapped);
  run(bad);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "--set parallel.p2p_scatter_gather=true: with "
                         "sequence parallelism each rank's pipeline tensor is "
                         "already its 1/tp");
}

/* The Hugging Face Trainer samples (framework = hf) end to end: BERT-large
 * under fp16 autocast over DDP, whose show says what autocast and DDP add
 * and why the preset chose its bucket; Llama-3.1-8B with LoRA on a bf16
 * base (the user's precision over the preset's). Both fit their GPUs. */
static void test_hf_samples(void **state)
{
  static const char *const bert_show[] = {"show", "workloads/hf-bert-large.ini",
                                          NULL};
  static const char *const bert[] = {"run", "workloads/hf-bert-large.ini",
                                     "--gpus", "8", "--topology",
                                     "topologies/a100-sxm-80g-8x.ini", NULL};
  static const char *const lora_show[] = {"show",
                                          "workloads/hf-llama3-8b-lora.ini",
                                          NULL};
  static const char *const lora[] = {"run", "workloads/hf-llama3-8b-lora.ini",
                                     "--gpus", "8", "--topology",
                                     "topologies/l40s-48g-8x.ini", NULL};
  (void)state;
  run(bert_show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "bucket = 25MiB    ; framework preset: DDP's "
                         "bucket_cap_mb = 25");
  assert_contains(r.out, "# autocast (amp_fp16): fp32 weights, gradients and "
                         "states");
  assert_contains(r.out, "# of the grads, 1.25 GiB per GPU are DDP's bucket "
                         "copy");
  run(bert);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "training  amp_fp16, adamw");
  assert_contains(r.out, "verdict: FITS on 8 x A100-SXM4-80GB");
  run(lora_show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "\nprecision = bf16\n");
  run(lora);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "verdict: FITS on 8 x L40S-48GB");
}


/* Each row of DIR/summary.csv adds up: the categories at the allocated
 * peak, the framework's bytes and the fragmentation make the report's
 * peak, peak_reserved_bytes + framework_bytes, to the byte. */
static void assert_summary_adds_up(const char *dir)
{
  static const char *const parts[] = {
      "params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
      "temp_bytes", "framework_bytes", "fragmentation_bytes"};
  char p[128];
  table t;
  read_csv(path_in(dir, "summary.csv", p, sizeof p), &t);
  assert_true(t.n_rows > 1);
  for (int row = 1; row < t.n_rows; row++) {
    unsigned long long sum = 0;
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++)
      sum += strtoull(cell(&t, row, parts[k]), NULL, 10);
    assert_int_equal(sum, strtoull(cell(&t, row, "peak_reserved_bytes"), NULL, 10) +
                              strtoull(cell(&t, row, "framework_bytes"), NULL, 10));
  }
}
/* The MoE sample end to end: Mixtral-8x7B on 16 GPUs (ZeRO-3) fits,
 * and the report gives the parameters in total and a token's. */
static void test_moe_sample(void **state)
{
  static const char *const go[] = {"run", "workloads/mixtral-8x7b.ini",
                                   "--gpus", "16", NULL};
  static const char *const eight[] = {"run", "workloads/mixtral-8x7b.ini",
                                      "--gpus", "8", NULL};
  (void)state;
  run(go);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "model     llama, 46.70 B (12.88 B active) "
                         "parameters");
  assert_contains(r.out, "verdict: FITS on 16 x H100-SXM-80GB");
  /* its 18 bytes a parameter over 8 GPUs alone take 98 GiB each */
  run(eight);
  assert_int_equal(r.status, 3);
  assert_contains(r.out, "verdict: DOES NOT FIT on 8 x H100-SXM-80GB");
  {
    /* expert parallelism with a skewed router: the header says so, the
     * step counts the all-to-alls, and it fits its 64 GPUs */
    const char *ep[] = {"run", "workloads/mixtral-8x7b-ep8.ini",
                        "--gpus", "64", "--csv", NULL, NULL};
    char dir[64];
    ep[5] = tu_temp_dir(dir, sizeof dir);
    run(ep);
    assert_int_equal(r.status, 0);
    /* its reserved bytes peak after the allocated ones (336 MiB more) */
    assert_summary_adds_up(dir);
    tu_remove_dir(dir);
    assert_contains(r.out, "experts   2 of 8 a token, 1 on each GPU (ep 8), "
                           "routing skewed: the hottest expert gets 1.5 x "
                           "its share");
    assert_contains(r.out, " + expert-parallel comm ");
    assert_contains(r.out, "verdict: FITS on 64 x H100-SXM-80GB");
  }
  {
    /* show says where the experts' optimizer states are as the recipe
     * places them: whole without ZeRO, sharded over dp by DeepSpeed's
     * BF16_Optimizer without ZeRO under its pipeline engine (8 GPUs a
     * stage) */
    static const char *const plain[] = {
        "show", "workloads/mixtral-8x7b.ini", "--gpus", "16", "--set",
        "parallel.zero=0", NULL};
    static const char *const bf16_opt[] = {
        "show",   "workloads/mixtral-8x7b.ini",
        "--gpus", "16",
        "--set",  "parallel.zero=0",
        "--set",  "training.framework=deepspeed",
        "--set",  "parallel.pp=2",
        NULL};
    static const char *const h200[] = {
        "show", "workloads/mixtral-8x7b-h200.ini", "--topology",
        "topologies/h200-sxm-8x.ini", NULL};
    run(plain);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "their optimizer states whole on it\n");
    run(bf16_opt);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "their optimizer states sharded over 8 GPUs");
    /* sharded over one GPU is whole: ep 8 on 8 GPUs, ZeRO-1 */
    run(h200);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "# experts: 1 of 8 on each GPU (ep 8), their "
                           "optimizer states whole on it\n");
  }
  {
    /* expert tensor parallelism other than tp: 16 GPUs as tp 2 x dp 8
     * with each expert whole (etp = 1) on ep = 8 ranks, its states
     * sharded over the other 2 that hold it; etp x ep beyond tp x dp is
     * refused naming etp */
    static const char *const etp[] = {
        "run", "workloads/mixtral-8x7b-ep8.ini", "--gpus", "16", "--set",
        "parallel.tp=2", "--set", "parallel.sequence_parallel=true", "--set",
        "parallel.dp=8", "--set", "parallel.etp=1", NULL};
    static const char *const show[] = {
        "show", "workloads/mixtral-8x7b-ep8.ini", "--gpus", "16", "--set",
        "parallel.tp=2", "--set", "parallel.sequence_parallel=true", "--set",
        "parallel.dp=8", "--set", "parallel.etp=1", NULL};
    static const char *const wide[] = {
        "run", "workloads/mixtral-8x7b-ep8.ini", "--gpus", "16", "--set",
        "parallel.tp=2", "--set", "parallel.sequence_parallel=true", "--set",
        "parallel.dp=8", "--set", "parallel.etp=4", NULL};
    run(etp);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "layout    dp 8 x tp 2 x pp 1");
    assert_contains(r.out, "experts   2 of 8 a token, 1 on each GPU (ep 8), "
                           "routing skewed");
    assert_contains(r.out, "verdict: FITS on 16 x H100-SXM-80GB");
    run(show);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "# experts: 1 of 8 on each GPU (ep 8), their "
                           "optimizer states sharded over 2 GPUs (tp x dp x "
                           "cp / (etp x ep))");
    assert_contains(r.out, "# expert grid: etp 1 x ep 8 x edp 2 = a stage's "
                           "tp x dp x cp 16 GPUs");
    run(wide);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "--set parallel.etp=4: the expert grid");
    assert_contains(r.err, "etp x ep = 32 must divide them");
  }
  {
    /* one node: ep = 8 leaves each expert's states whole on its GPU
     * (dp / ep = 1), 100 GiB: an H200 node holds it, an H100 node not */
    static const char *const h200[] = {"run", "workloads/mixtral-8x7b-h200.ini",
                                       "--gpus", "8", "--topology",
                                       "topologies/h200-sxm-8x.ini", NULL};
    static const char *const h100[] = {"run", "workloads/mixtral-8x7b-h200.ini",
                                       "--gpus", "8", NULL};
    run(h200);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "verdict: FITS on 8 x H200-SXM-141GB");
    run(h100);
    assert_int_equal(r.status, 3);
  }
  {
    /* the same node with selective recompute (the attention core's s^2
     * tensors recomputed, every other activation kept) at sequence 3072:
     * the model states alone are 92.2 GiB a GPU (7.24e9 parameters held,
     * 1.60e9 shared + 45.10e9 / 8 experts, at 2 B of weight and 2 of
     * gradient, with 12 B of Adam states on 5.84e9 of them: ZeRO-1
     * shards only the shared ones over dp 8), over the H100's 79.2 GiB,
     * and the activations kept (57.9 GiB) take the peak to 156 GiB: over
     * the H200's 139.8 GiB, inside the B200's 178.35 GiB (torch's
     * total_memory 182631 MiB) with more than [runtime] reserve's 10%
     * free, so FITS, not TIGHT */
    static const char *const b200[] = {
        "run",        "workloads/mixtral-8x7b-h200.ini",
        "--gpus",     "8",
        "--topology", "topologies/b200-sxm-8x.ini",
        "--set",      "training.checkpointing=selective",
        "--set",      "model.seq_len=3072",
        NULL};
    static const char *const h200[] = {
        "run",        "workloads/mixtral-8x7b-h200.ini",
        "--gpus",     "8",
        "--topology", "topologies/h200-sxm-8x.ini",
        "--set",      "training.checkpointing=selective",
        "--set",      "model.seq_len=3072",
        NULL};
    static const char *const h100[] = {
        "run",    "workloads/mixtral-8x7b-h200.ini",
        "--gpus", "8",
        "--set",  "training.checkpointing=selective",
        "--set",  "model.seq_len=3072",
        NULL};
    run(b200);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "hardware  8 x B200-SXM-180GB");
    assert_contains(r.out, "verdict: FITS on 8 x B200-SXM-180GB: worst rank "
                           "peaks at 156 GiB of 178 GiB (87%)");
    run(h200);
    assert_int_equal(r.status, 3);
    assert_contains(r.out, "verdict: DOES NOT FIT on 8 x H200-SXM-141GB: "
                           "worst rank needs 156 GiB of 140 GiB");
    run(h100);
    assert_int_equal(r.status, 3);
    assert_contains(r.out, "needs 156 GiB of 79.2 GiB");
  }
  {
    /* DeepSeek-V3 on 256 GPUs: 16 stages, 16 experts a GPU; the first
     * stage (3 dense layers of its 4) is not the worst: a stage of 4 MoE
     * layers is (stage 2, rank 32) */
    static const char *const ds[] = {"run", "workloads/deepseek-v3.ini",
                                     "--gpus", "256", NULL};
    const char *row;
    run(ds);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "model     llama, 671.03 B (37.55 B active) "
                           "parameters, 61 layers");
    assert_contains(r.out, "experts   8 of 256 a token, 16 on each GPU "
                           "(ep 16)");
    row = strstr(r.out, "\n   32     2    0    0 ");
    assert_non_null(row);
    assert_true(strstr(row, "<- worst") &&
                strstr(row, "<- worst") < strchr(row + 1, '\n'));
    assert_contains(r.out, "verdict: FITS on 256 x H100-SXM-80GB");
  }
}

/* vsim show labels what hf_config's file gave ("; from hf_config") apart
 * from what its model_type's transformers class defaults for a field the
 * file lacks (DeepseekV3Config q_lora_rank 1536 and first_k_dense_replace
 * 3); the parameters line says the total leaves the MTP module out while
 * the most loaded GPU's count holds its share, and that under ZeRO-3 that
 * count comes before partitioning. */
static void test_show_hf_defaults_and_parameters(void **state)
{
  static const char json[] =
      "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 256, "
      "\"intermediate_size\": 688, \"num_hidden_layers\": 8, "
      "\"num_attention_heads\": 8, \"vocab_size\": 1000, "
      "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, "
      "\"moe_intermediate_size\": 96, \"n_shared_experts\": 1, "
      "\"kv_lora_rank\": 32, \"qk_nope_head_dim\": 32, "
      "\"qk_rope_head_dim\": 16, \"v_head_dim\": 32}";
  static const char *const mtp[] = {"show", "workloads/deepseek-v3.ini",
                                    "--set", "model.mtp_layers=1", NULL};
  static const char *const zero3[] = {"show", "workloads/mixtral-8x7b.ini",
                                      "--gpus", "16", NULL};
  char jpath[64], ini[256], path[64];
  const char *args[] = {"show", path, NULL};
  (void)state;
  tu_write_temp(json, ".json", jpath, sizeof jpath);
  snprintf(ini, sizeof ini, "[model]\nhf_config = %s\nseq_len = 128\n", jpath);
  tu_write_temp(ini, ".ini", path, sizeof path);
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "q_lora_rank = 1536    ; default for hf_config's "
                         "model_type\n");
  assert_contains(r.out, "dense_layers = 3    ; default for hf_config's "
                         "model_type\n");
  assert_contains(r.out, "shared_experts = 1    ; from hf_config\n");
  assert_contains(r.out, "kv_lora_rank = 32    ; from hf_config\n");
  /* a field the file gives is the file's, a step of 1 too (a review
   * found Qwen1.5-MoE's decoder_sparse_step 1 shown as a default) */
  snprintf(ini, sizeof ini,
           "[model]\nhf_config = %s/models/qwen1.5-moe-a2.7b.json\n"
           "seq_len = 128\n",
           VSIM_SOURCE_DIR);
  remove(path);
  tu_write_temp(ini, ".ini", path, sizeof path);
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "dense_layers = 0    ; from hf_config\n");
  assert_contains(r.out, "moe_every = 1    ; from hf_config\n");
  run(mtp);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "(671.026 B) in total without the MTP module, ");
  assert_contains(r.out, "on the most loaded GPU with what it holds of the "
                         "MTP module");
  run(zero3);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "# parameters = 46702792704 (46.703 B) in total, "
                         "46702792704 on the most loaded GPU before ZeRO-3 "
                         "partitions them\n");
}

/* Multi-token prediction end to end. DeepSeek-V3 with its one depth: the
 * depth's own parameters (its MoE layer, eh_proj, three norms) beside the
 * model's; with the embedding and output layer its released checkpoint
 * repeats (2 V h) they make the 685 B that DeepSeek-V3's model card gives
 * for the Hugging Face weights (671 B main model + 14 B MTP module).
 * Then a small GPT over a pipeline with untied embeddings: the last stage
 * runs the depth's output layer (forward and backward in ops.csv), and
 * both ends all-reduce the word embeddings' gradient (V h x 2 bytes). */
static void test_mtp_sample(void **state)
{
  static const char *const show[] = {"show", "workloads/deepseek-v3.ini",
                                     "--set", "model.mtp_layers=1", NULL};
  char dir[64], p[128];
  const char *go[] = {"run", "tests/data/gpt-small.ini", "--gpus", "2",
                      "--set", "parallel.pp=2", "--set", "model.mtp_layers=1",
                      "--set", "model.tied_embeddings=false", "--csv", NULL,
                      NULL};
  const char *at;
  char *text, *line;
  double main_params, mtp, copies = 2.0 * 129280 * 7168;
  size_t lm = 0, sync = 0;
  (void)state;
  run(show);
  assert_int_equal(r.status, 0);
  assert_non_null(at = strstr(r.out, "# parameters = "));
  main_params = strtod(at + 15, NULL);
  assert_non_null(at = strstr(r.out, "# multi-token prediction parameters = "));
  mtp = strtod(at + 38, NULL);
  tu_assert_close(main_params, 671e9, 0.005);
  tu_assert_close(main_params + mtp + copies, 685e9, 0.005);

  go[11] = tu_temp_dir(dir, sizeof dir);
  run(go);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "+ 0.00 B of MTP parameters");
  /* rank,stream,op,layer,microbatch,start_s,end_s,flops,bytes */
  assert_non_null(text = tu_read_file(path_in(dir, "ops.csv", p, sizeof p)));
  for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (strstr(line, ",mtp_lm_head,")) {
      assert_true(strncmp(line, "1,compute,", 10) == 0);
      lm++;
    }
    if (strstr(line, ",embedding_all_reduce,")) {
      assert_true(strtod(strrchr(line, ',') + 1, NULL) == 1000.0 * 512 * 2);
      sync++;
    }
  }
  free(text);
  assert_int_equal(lm, 2);
  assert_int_equal(sync, 2);
  tu_remove_dir(dir);
}

/* DeepSpeed's ZeRO-2 with expert parallelism end to end (the refusal
 * it replaced said vsim did not simulate it): 2 layers of 8 experts at
 * ep 2 and 4 on 8 GPUs (dp 8). A GPU holds its E / ep experts' 16-bit
 * weights whole and, as stage_1_and_2.py partitions an MoE param group
 * over its expert-data-parallel group (dp / ep ranks), their gradient,
 * fp32 master and Adam partitions over dp / ep, the dense ones' over dp:
 * 2 (Psi_d + Psi_e) + 14 (Psi_d / dp + Psi_e / (dp / ep)), Psi_d =
 * 3131904, Psi_e = 2 x (8 / ep) x 3 x 512 x 1024 (layout_test derives
 * it). Each micro-batch reduce-scatters the experts' gradients (2 Psi_e
 * bytes) over that group, the dense ones (2 Psi_d) over dp; show says
 * where both partitions are. */
static void test_deepspeed_zero2_experts(void **state)
{
  const char *go[] = {"run",    DATA "moe-deepspeed-zero2.ini",
                      "--gpus", "8",
                      "--set",  "parallel.ep=2",
                      "--csv",  NULL,
                      NULL};
  static const char *const show[] = {"show", DATA "moe-deepspeed-zero2.ini",
                                     "--gpus", "8", NULL};
  const unsigned long long dense = 3131904, dp = 8;
  char dir[64], p[128], *text, *line;
  (void)state;
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "# experts: 4 of 8 on each GPU (ep 2), their "
                         "optimizer states and gradients sharded over 4 "
                         "GPUs (dp x cp / ep)");
  for (unsigned long long ep = 2; ep <= 4; ep *= 2) {
    unsigned long long expert = 2 * (8 / ep) * 3 * 512 * 1024;
    unsigned long long edp = dp / ep;
    double dense_rs = 0, expert_rs = 0;
    char ep_set[32];
    snprintf(ep_set, sizeof ep_set, "parallel.ep=%llu", ep);
    go[5] = ep_set;
    go[7] = tu_temp_dir(dir, sizeof dir); /* after --csv */
    run(go);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "ZeRO-2, micro-batch 1");
    assert_int_equal(summary_u64(dir, "model_states_bytes"),
                     2 * (dense + expert) + 14 * (dense / dp + expert / edp));
    assert_non_null(text = tu_read_file(path_in(dir, "ops.csv", p, sizeof p)));
    for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
      double bytes = strtod(strrchr(line, ',') + 1, NULL);
      dense_rs += strstr(line, ",dp_reduce_scatter,") ? bytes : 0;
      expert_rs += strstr(line, ",edp_reduce_scatter,") ? bytes : 0;
    }
    free(text);
    /* one micro-batch a step (global batch = dp) */
    assert_true(dense_rs == 2.0 * (double)dense);
    assert_true(expert_rs == 2.0 * (double)expert);
    tu_remove_dir(dir);
  }
}

/* Experts apart without data parallelism: Mixtral's two layers on tp 2
 * with each expert whole (etp = 1, ep = 1) make an expert-data-parallel
 * group of the 2 tp ranks (Megatron-LM's tp x dp x cp / (etp x ep)): the
 * experts' gradients are all-reduced over it, a layer's bucket at a time
 * (8 experts x 3 x 4096 x 14336 bf16, 2,818,572,288 bytes), and ZeRO-1's
 * all-gather brings back their updated weights (both layers'), while the
 * dense ones, dp = 1, move nowhere. */
static void test_expert_data_parallel_without_dp(void **state)
{
  const char *go[] = {"run", "workloads/mixtral-8x7b-ep8.ini", "--gpus", "2",
                      "--set", "parallel.tp=2",
                      "--set", "parallel.sequence_parallel=true",
                      "--set", "parallel.dp=1", "--set", "parallel.ep=1",
                      "--set", "parallel.etp=1", "--set", "model.layers=2",
                      "--set", "training.global_batch=2", "--csv", NULL,
                      NULL};
  const double layer = 8.0 * 3 * 4096 * 14336 * 2;
  char dir[64], p[128], *text, *line;
  size_t reduces = 0, gathers = 0, dense = 0;
  (void)state;
  go[19] = tu_temp_dir(dir, sizeof dir); /* after --csv */
  run(go);
  assert_int_equal(r.status, 0);
  assert_non_null(text = tu_read_file(path_in(dir, "ops.csv", p, sizeof p)));
  for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    double bytes = strtod(strrchr(line, ',') + 1, NULL);
    if (strstr(line, ",edp_reduce_scatter,")) {
      tu_assert_close(bytes, layer, 1e-8);
      reduces++;
    }
    if (strstr(line, ",edp_all_gather,")) {
      tu_assert_close(bytes, 2 * layer, 1e-8);
      gathers++;
    }
    if (strstr(line, ",dp_all_reduce,") || strstr(line, ",param_all_gather,"))
      dense++;
  }
  free(text);
  assert_int_equal(reduces, 2);
  assert_int_equal(gathers, 1);
  assert_int_equal(dense, 0);
  tu_remove_dir(dir);
}

/* The long-context sample end to end: 128k tokens over cp = 8 fit one
 * node, the header and the step's split say so. */
static void test_context_parallel_sample(void **state)
{
  static const char *const go[] = {"run", "workloads/llama3-8b-128k-cp8.ini",
                                   "--gpus", "8", NULL};
  (void)state;
  run(go);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "layout    dp 1 x cp 8 x tp 1 x pp 1, ZeRO-1");
  assert_contains(r.out, " + context-parallel comm ");
  assert_contains(r.out, "verdict: FITS on 8 x H100-SXM-80GB");
  /* issue 16, item 6: what limits it, after the peak line: the output
   * layer's backward (the logits' gradient, 131072 / 8 tokens x 128256 x
   * 2 B = 3.91 GiB, and its input's, 128 MiB) and the 32 layer inputs
   * full checkpointing keeps, each 16384 x 4096 x 2 B = 128 MiB */
  assert_contains(r.out, "\nlargest activations and temporaries at the peak: "
                         "4.04 GiB temp of lm_head (head, micro-batch 0, 2 "
                         "tensors); 4.00 GiB activations of checkpointed "
                         "layer inputs (layers 0-31, micro-batch 0, 32 "
                         "tensors);");
  {
    /* 70B at 128k on 4 nodes: tp 8 inside each, cp 4 across them */
    static const char *const big[] = {"run",
                                      "workloads/llama3-70b-128k-cp4.ini",
                                      "--gpus", "32", NULL};
    run(big);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "layout    dp 1 x cp 4 x tp 8 x pp 1, ZeRO-3");
    assert_contains(r.out, "verdict: FITS on 32 x H100-SXM-80GB");
  }
  {
    /* with every rank, dp counts data-parallel replicas, not the cp
     * ranks within one: dp 2 x cp 2 x tp 2 orders tp, cp, dp (ranks 2
     * and 3 are cp 1 of replica 0), and the table says cp */
    static const char *const all[] = {
        "run", "workloads/llama3-8b-128k-cp8.ini", "--gpus", "8",
        "--ranks", "all", "--set", "model.layers=2", "--set",
        "parallel.cp=2", "--set", "parallel.tp=2", "--set",
        "model.seq_len=8192", "--set", "training.global_batch=2", "--set",
        "training.fused_cross_entropy=false", NULL};
    run(all);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "\n rank stage   dp   cp   tp     params");
    assert_contains(r.out, "\n    3     0    0    1    1 ");
    assert_contains(r.out, "\n    6     0    1    1    0 ");
  }
}

/* Each shipped config.json gives its model's parameters: a dense model's
 * exactly as transformers counts the model class (its tensors summed:
 * embeddings, each layer's projections with the biases and norms its
 * modeling file builds, the output layer unless tied; BERT as
 * BertForMaskedLM, whose MLM head vsim builds, with 512 positions and 2
 * token types), checked by hand from the config's fields (Qwen2-7B's
 * layer: 2 x 3584^2 + 2 x 3584 x 512 q/k/v/o weights, 3584 + 2 x 512
 * q/k/v biases, 3 x 3584 x 18944 MLP, 2 x 3584 norms; Qwen3-8B's adds 2
 * x 128 head norms; GPT-NeoX-20B has no position table); the mixtures of
 * experts within 0.5% of their published figures, and the parameters a
 * token uses too, counted as their vendor counts them: with the
 * embedding tables a token looks up (Mistral, Qwen) or without them
 * (DeepSeek). Mixtral's and Qwen-MoE's totals are also exact (Qwen's
 * shared-expert gate, h a layer, and q/k/v biases included). */
static void test_shipped_model_configs(void **state)
{
  static const struct {
    const char *file;
    unsigned seq;
    double params, active; /* active: 0 for a dense model */
    bool active_without_lookups; /* the vendor leaves the embedding
                                    tables out of its active count */
    double active_with_tables;   /* then, what vsim gives with them */
    double exact;                /* a mixture's exact total, or 0 */
  } models[] = {
      {"llama-2-7b.json", 4096, 6738415616.0, 0, false, 0, 0},
      {"llama-2-70b.json", 4096, 68976648192.0, 0, false, 0, 0},
      {"llama-3.1-8b.json", 8192, 8030261248.0, 0, false, 0, 0},
      {"llama-3.1-70b.json", 8192, 70553706496.0, 0, false, 0, 0},
      {"mistral-7b-v0.1.json", 4096, 7241732096.0, 0, false, 0, 0},
      {"qwen2-7b.json", 4096, 7615616512.0, 0, false, 0, 0},
      {"qwen3-8b.json", 4096, 8190735360.0, 0, false, 0, 0},
      {"gemma-2b.json", 8192, 2506172416.0, 0, false, 0, 0},
      /* heads wider than hidden / heads: 16 x 256 over 3072, 32 x 128
       * over 5120 (q and o 4096 x 3072 and 5120 x 4096) */
      {"gemma-7b.json", 8192, 8537680896.0, 0, false, 0, 0},
      {"mistral-nemo-12b.json", 8192, 12247782400.0, 0, false, 0, 0},
      /* Gemma 2's four norms a layer (transformers' parameter counts,
       * 9,241,705,984 and 27,227,128,320); Gemma 3's head norms too
       * (999,885,952) */
      {"gemma-2-9b.json", 8192, 9241705984.0, 0, false, 0, 0},
      {"gemma-2-27b.json", 8192, 27227128320.0, 0, false, 0, 0},
      {"gemma-3-1b.json", 8192, 999885952.0, 0, false, 0, 0},
      /* Phi-3-mini: Llama's layers, fused q/k/v and gate/up (3.82 B) */
      {"phi-3-mini.json", 4096, 3821079552.0, 0, false, 0, 0},
      {"gpt2.json", 512, 124439808.0, 0, false, 0, 0},
      {"gpt-neox-20b.json", 2048, 20554567680.0, 0, false, 0, 0},
      {"bert-base-uncased.json", 128, 109514298.0, 0, false, 0, 0},
      /* Mistral AI's announcement: 46.7 B in total, 12.9 B a token */
      {"mixtral-8x7b.json", 4096, 46.7e9, 12.9e9, false, 0, 46702792704.0},
      /* Qwen's Qwen1.5-MoE-A2.7B card: 14.3 B in total, 2.7 B activated */
      {"qwen1.5-moe-a2.7b.json", 4096, 14.3e9, 2.7e9, false, 0, 14315784192.0},
      /* Qwen's Qwen3-30B-A3B card: 30.5 B in total, 3.3 B activated (by
       * hand from the config: 48 x (attention 18,874,368 + head norms 256
       * + router 262,144 + 8 of 128 experts x 3 x 2048 x 768 + norms
       * 4096) + both embeddings 622,329,856 + 2048 = 3,353,032,704) */
      {"qwen3-30b-a3b.json", 4096, 30.5e9, 3.353e9, false, 0, 30532122624.0},
      /* DeepSeek-V3 (arXiv 2412.19437): 671 B in total (its multi-token
       * prediction module aside); its README_WEIGHTS.md: "Activation
       * parameters: 36.6B (including 0.9B for the output Head)", the
       * paper's rounded "37 B": the config's tensors a token uses (both
       * embeddings, 61 MLA blocks, 3 dense MLPs, 58 x (router, 8
       * experts, the shared one)) are 37,552,282,624, less the
       * 129,280 x 7168 input embedding */
      {"deepseek-v3.json", 4096, 671e9, 36.6e9, true, 37552282624.0, 0},
  };
  (void)state;
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    char ini[512], path[64];
    const char *args[] = {"show", path, NULL};
    const char *at;
    snprintf(ini, sizeof ini, "[model]\nhf_config = %s/models/%s\nseq_len = %u\n",
             VSIM_SOURCE_DIR, models[i].file, models[i].seq);
    tu_write_temp(ini, ".ini", path, sizeof path);
    run(args);
    if (r.status != 0)
      fail_msg("%s: %s", models[i].file, r.err);
    assert_non_null(at = strstr(r.out, "# parameters = "));
    if (models[i].exact > 0)
      assert_int_equal(strtoull(at + 15, NULL, 10),
                       (unsigned long long)models[i].exact);
    if (models[i].active > 0)
      tu_assert_close(strtod(at + 15, NULL), models[i].params, 0.005);
    else /* a dense model's count is exact */
      assert_int_equal(strtoull(at + 15, NULL, 10),
                       (unsigned long long)models[i].params);
    at = strstr(r.out, "# active parameters = ");
    if (models[i].active > 0) {
      double active;
      assert_non_null(at);
      active = strtod(at + 22, NULL);
      if (models[i].active_without_lookups) { /* "#   36.626 B without" */
        const char *w = strstr(at, " B without the embedding tables");
        assert_non_null(w);
        while (w > at && w[-1] != ' ')
          w--;
        assert_int_equal((unsigned long long)active,
                         (unsigned long long)models[i].active_with_tables);
        active = strtod(w, NULL) * 1e9;
      }
      tu_assert_close(active, models[i].active, 0.005);
    } else {
      assert_null(at);
    }
    unlink(path);
  }
}

/* A host too small for the offloaded states: exit 3, naming host memory. */
static void test_host_out_of_memory_exits_3(void **state)
{
  const char *args[] = {"run", "workloads/llama2-70b-finetune-offload.ini",
                        "--gpus", "8", "--set", "topology.node.host_memory=512GiB",
                        NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 3);
  assert_contains(r.out, "OUT OF HOST MEMORY on node 0 at setup model_states");
  assert_contains(r.out, "[node] host_memory");
  assert_contains(r.out, "verdict: DOES NOT FIT");
  assert_contains(r.out, "host memory of node 0 needs");
}

/* A sweep row whose GPU fits but whose node runs out of host memory
 * names the node's host memory on the terminal too, not only in
 * sweep.csv's reason (a review read the row's GPU peak as the cause). */
static void test_sweep_names_host_out_of_memory(void **state)
{
  const char *args[] = {
      "sweep",  "workloads/llama2-70b-finetune-offload.ini", "--gpus", "8",
      "--vary", "topology.node.host_memory=512GiB,2TiB",     "--jobs", "2",
      NULL};
  const char *row;
  (void)state;
  run(args);
  assert_int_equal(r.status, 0);
  assert_non_null(row = strstr(r.out, "\n512GiB "));
  assert_true(strstr(row, " oom ") < strchr(row + 1, '\n'));
  assert_true(strstr(row, "  node 0 needs ") < strchr(row + 1, '\n'));
  assert_contains(row, "([node] host_memory)\n2TiB ");
}

/* Offload that no framework runs is one message naming file, line, key. */
static void test_offload_combinations_refused(void **state)
{
  const char *args[] = {"run", "workloads/gpt-13b-offload.ini", "--set",
                        "parallel.zero=2", NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "workloads/gpt-13b-offload.ini:26: [parallel] "
                         "offload_params = cpu: only partitioned parameters");
  /* DeepSpeed's activation offload without full checkpointing */
  {
    const char *acts[] = {"run",   DATA "gpt-small.ini",
                          "--set", "training.framework=deepspeed",
                          "--set", "training.offload_activations=cpu",
                          NULL};
    run(acts);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "--set training.offload_activations=cpu: "
                           "DeepSpeed offloads activations with its "
                           "activation checkpointing");
    assert_string_equal(r.out, "");
  }
  /* the Trainer offloads nothing: its refusal says where offload is, not
   * a fix it then refuses (zero >= 1), and autocast's says what to train
   * in rather than master_weights = true, which autocast refuses (a
   * review went round both chains) */
  {
    const char *hf[] = {"run",   DATA "gpt-small.ini",
                        "--set", "training.framework=hf",
                        "--set", "parallel.offload_optimizer=cpu",
                        NULL,    NULL,
                        NULL};
    run(hf);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "--set parallel.offload_optimizer=cpu: the "
                           "Hugging Face Trainer (framework = hf) is "
                           "simulated with its DDP, without offload: for "
                           "ZeRO-Offload use framework = deepspeed");
    hf[3] = "training.precision=amp_bf16";
    hf[6] = "--set";
    hf[7] = "parallel.zero=1";
    run(hf);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "autocast keeps fp32 weights with no master "
                           "copy: use precision = bf16 or fp16 with "
                           "master_weights = true");
  }
}

/* Mixtral with a capacity factor: the routing_skew it still sets has no
 * effect, and the header and show say so (a review found it unmentioned);
 * offload with expert groups of their own is refused saying what runs,
 * and blaming the groups, not ep, which may be 1 (etp other than tp). */
static void test_moe_capacity_skew_and_offload_said(void **state)
{
  const char *args[] = {
      "run",   "workloads/mixtral-8x7b-ep8.ini",    "--gpus", "64",
      "--set", "model.expert_capacity_factor=1.25", NULL,     NULL,
      NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "routing capacity factor 1.25 (skew without "
                         "effect: every expert padded to its slots)\n");
  args[0] = "show";
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "(routing_skew without effect: with a capacity, "
                         "tokens over an expert's slots are dropped)");
  args[0] = "run";
  args[5] = "parallel.offload_optimizer=cpu";
  args[6] = "--set";
  args[7] = "parallel.zero=1";
  run(args);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "offload is not simulated where the routed experts "
                         "have groups of their own (ep > 1, or etp other "
                         "than tp): offload none, or use ep = 1 with etp = "
                         "tp");
}

/* Two identical runs write byte-identical CSV (no clock, no randomness). */
static void test_identical_runs_write_identical_csv(void **state)
{
  char d1[64], d2[64], p1[128], p2[128];
  const char *const *names = vs_report_csv_names;
  const char *args[] = {"run", DATA "gpt-small.ini", "--gpus", "4", "--set",
                        "parallel.zero=3", "--csv", NULL, NULL};
  (void)state;
  args[7] = tu_temp_dir(d1, sizeof d1);
  run(args);
  assert_int_equal(r.status, 0);
  args[7] = tu_temp_dir(d2, sizeof d2);
  run(args);
  assert_int_equal(r.status, 0);
  for (size_t i = 0; i < VS_REPORT_CSV_FILES; i++) {
    char *a = tu_read_file(path_in(d1, names[i], p1, sizeof p1));
    char *b = tu_read_file(path_in(d2, names[i], p2, sizeof p2));
    assert_non_null(a);
    assert_non_null(b);
    assert_string_equal(a, b);
    free(a);
    free(b);
  }
  tu_remove_dir(d1);
  tu_remove_dir(d2);
}

/* A 7.5e9-parameter GPT on 64 GPUs: model_states_bytes follows the ZeRO
 * paper's Table 1 for every stage (2+2+12 bytes/param, Psi = vsim's own
 * parameter count 7,463,923,712 from `vsim show`), within shard padding,
 * and the paper's worked figures for Psi = 7.5e9 (120, 31.4, 16.6 and
 * 1.88 GB) within the 0.5% by which this Psi differs from 7.5e9. */
static void test_zero_model_states_on_64_gpus(void **state)
{
  static const double paper_gb[4] = {120, 31.4, 16.6, 1.88};
  const double psi = 7463923712.0, nd = 64;
  const double formula[4] = {16 * psi, 4 * psi + 12 * psi / nd,
                             2 * psi + 14 * psi / nd, 16 * psi / nd};
  char dir[64], p[128], set[32];
  const char *args[] = {"run", DATA "gpt-7.5b.ini", "--gpus", "64", "--set",
                        set, "--csv", NULL, NULL};
  table t;
  (void)state;
  args[7] = tu_temp_dir(dir, sizeof dir);
  for (int zero = 0; zero <= 3; zero++) {
    double got;
    snprintf(set, sizeof set, "parallel.zero=%d", zero);
    run(args);
    assert_true(r.status == 0 || r.status == 3);
    read_csv(path_in(dir, "summary.csv", p, sizeof p), &t);
    got = strtod(cell(&t, 1, "model_states_bytes"), NULL);
    assert_true(fabs(got - formula[zero]) <= 3 * 4 * nd); /* padding */
    assert_true(fabs(got / 1e9 - paper_gb[zero]) / paper_gb[zero] < 0.01);
  }
  tu_remove_dir(dir);
}

/* Out of memory: exit 3, the report names the op, and summary.csv is still
 * written with fits = false. */
static void test_out_of_memory_exits_3_and_still_writes_csv(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"run", DATA "llama2-70b.ini", "--gpus", "1", "--csv",
                        NULL, NULL};
  table t;
  (void)state;
  args[5] = tu_temp_dir(dir, sizeof dir);
  run(args);
  assert_int_equal(r.status, 3);
  assert_contains(r.out, "OUT OF MEMORY on rank 0 at setup model_states");
  assert_contains(r.out, "tried to allocate");
  assert_contains(r.out, "verdict: DOES NOT FIT");
  read_csv(path_in(dir, "summary.csv", p, sizeof p), &t);
  assert_string_equal(cell(&t, 1, "fits"), "false");
  tu_remove_dir(dir);
}

/* An output that cannot be written is an error (exit 1) and leaves nothing
 * half-written: here --csv names an existing regular file. */
static void test_unwritable_output_is_an_error(void **state)
{
  char file[64], dir[64];
  const char *args[] = {"run", DATA "gpt-small.ini", "--csv", NULL, NULL};
  const char *targs[] = {"run", DATA "gpt-small.ini", "--trace", NULL, NULL};
  char trace[128];
  (void)state;
  args[3] = tu_write_temp("not a directory", ".txt", file, sizeof file);
  run(args);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "exists and is not a directory");
  unlink(file);
  /* a trace into a missing directory */
  tu_temp_dir(dir, sizeof dir);
  snprintf(trace, sizeof trace, "%s/missing/trace.json", dir);
  targs[3] = trace;
  run(targs);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "cannot create");
  tu_remove_dir(dir);
}

static bool exists(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0;
}

/* True when dir holds a file left by the output check's probe. */
static bool probe_left_in(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  bool found = false;
  assert_non_null(d);
  while ((e = readdir(d)) != NULL)
    found = found || strncmp(e->d_name, ".vsim-probe", 11) == 0;
  closedir(d);
  return found;
}

/* Every output is checked before simulating: an --svg into a missing
 * directory fails (exit 1, the option and path named) before the report
 * is printed or the --csv directory created. */
static void test_outputs_are_checked_before_simulating(void **state)
{
  char dir[64], csv[128], svg[256], missing[128];
  const char *args[] = {"run", DATA "gpt-small.ini", "--csv", csv, "--svg",
                        svg, NULL};
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  path_in(dir, "out", csv, sizeof csv);
  path_in(dir, "nodir", missing, sizeof missing);
  path_in(missing, "m.svg", svg, sizeof svg);
  run(args);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "--svg ");
  assert_contains(r.err, "nodir/m.svg: cannot create: directory '");
  assert_contains(r.err, "nodir': No such file or directory");
  assert_string_equal(r.out, "");
  assert_false(exists(csv));
  /* the --csv directory itself may be new: it is created at the end, as
   * before, and the check leaves nothing behind */
  args[4] = NULL;
  run(args);
  assert_int_equal(r.status, 0);
  assert_true(exists(path_in(csv, "summary.csv", svg, sizeof svg)));
  assert_false(probe_left_in(csv));
  assert_false(probe_left_in(dir));
  tu_remove_dir(csv);
  /* a file output in that new --csv directory: the directory is made
   * first, and the file written into it */
  path_in(csv, "m.svg", svg, sizeof svg);
  args[4] = "--svg";
  run(args);
  assert_int_equal(r.status, 0);
  assert_true(exists(svg));
  {
    char summary[256];
    assert_true(exists(path_in(csv, "summary.csv", summary, sizeof summary)));
  }
  tu_remove_dir(csv);
  /* ... whose name is checked before simulating all the same */
  path_in(csv, "..", svg, sizeof svg);
  run(args);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--svg needs a file name, got '");
  assert_string_equal(r.out, "");
  assert_false(exists(csv));
  tu_remove_dir(dir);
}

/* More that the checks find before simulating (hunt: each was found only
 * after the whole report): a --csv that is a link to nothing, a file
 * output that is the --csv folder, paths longer than the checks take
 * (two of which were said to "both write" one file). */
static void test_outputs_checked_before_simulating_more(void **state)
{
  char dir[64], csv[128], link[128], *a = malloc(5000), *b = malloc(5000);
  const char *args[] = {"run", DATA "gpt-small.ini", "--csv", link, NULL};
  const char *twice[] = {"run", DATA "gpt-small.ini", "--csv", csv,
                         "--html", csv, NULL};
  const char *lengthy[] = {"run", DATA "gpt-small.ini", "--trace", a,
                           "--svg", b, NULL};
  (void)state;
  assert_non_null(a);
  assert_non_null(b);
  tu_temp_dir(dir, sizeof dir);
  path_in(dir, "out", csv, sizeof csv);
  path_in(dir, "link", link, sizeof link);
  assert_int_equal(symlink(csv, link), 0);
  run(args);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "link: is a symbolic link to a path that does not "
                         "exist; point it at a directory or remove it");
  assert_string_equal(r.out, "");
  run(twice);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "names the --csv folder");
  assert_string_equal(r.out, "");
  for (size_t i = 0; i < 4500; i++)
    a[i] = b[i] = (i + 1) % 100 == 0 ? '/' : 'a';
  snprintf(a + 4500, 16, "/x.json");
  snprintf(b + 4500, 16, "/y.svg");
  run(lengthy);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, ": path too long (vsim takes up to 4095 "
                         "characters)");
  assert_string_equal(r.out, "");
  assert_false(exists(csv));
  unlink(link);
  tu_remove_dir(dir);
  free(a);
  free(b);
}

/* sweep and plan check their --csv FILE before simulating too. */
static void test_capacity_csv_checked_before_simulating(void **state)
{
  char dir[64], file[128];
  const char *sweep[] = {"sweep", DATA "gpt-small.ini", "--vary", "gpus=1",
                         "--csv", file, NULL};
  const char *plan[] = {"plan", DATA "gpt-small.ini", "--set",
                        "training.global_batch=4", "--max-gpus", "1", "--csv",
                        file, NULL};
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(file, sizeof file, "%s/nodir/out.csv", dir);
  run(sweep);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "vsim: --csv ");
  assert_contains(r.err, "nodir/out.csv: cannot create: directory '");
  assert_string_equal(r.out, "");
  run(plan);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "nodir/out.csv: cannot create: directory '");
  assert_string_equal(r.out, "");
  /* a directory is not a file */
  run((const char *const[]){"sweep", DATA "gpt-small.ini", "--vary", "gpus=1",
                            "--csv", dir, NULL});
  assert_int_equal(r.status, 1);
  assert_contains(r.err, ": is a directory");
  tu_remove_dir(dir);
}

/* Two outputs naming one file, however spelled, would overwrite each
 * other: usage error (exit 2), nothing written. */
static void test_outputs_naming_one_file_are_refused(void **state)
{
  char dir[64], dd[128], a[256], b[256];
  const char *args[] = {"run", DATA "gpt-small.ini", NULL, NULL, NULL, NULL,
                        NULL};
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  path_in(dir, "dd", dd, sizeof dd);
  args[2] = "--csv";
  args[3] = dd;
  args[4] = "--trace";
  args[5] = path_in(dd, "summary.csv", a, sizeof a);
  run(args);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "both write");
  assert_contains(r.err, "give each output its own file");
  assert_false(exists(dd));
  /* another spelling of the same file, in a directory that exists */
  snprintf(b, sizeof b, "%s/./dd//ops.csv", dir);
  assert_int_equal(mkdir(dd, 0777), 0);
  args[5] = b;
  run(args);
  assert_int_equal(r.status, 2);
  assert_false(exists(path_in(dd, "ops.csv", a, sizeof a)));
  /* --trace and --svg on one file */
  args[2] = "--svg";
  args[3] = path_in(dd, "x", a, sizeof a);
  snprintf(b, sizeof b, "%s/../dd/x", dd);
  run(args);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--svg ");
  /* a link to a file not written yet, and that file: writing through the
   * link (a relative one, two links deep) makes the file */
  path_in(dd, "link", b, sizeof b);
  assert_int_equal(symlink("link2", b), 0);
  assert_int_equal(symlink("x", path_in(dd, "link2", a, sizeof a)), 0);
  path_in(dd, "x", a, sizeof a);
  run(args);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "both write");
  assert_false(exists(a));
  unlink(b);
  unlink(path_in(dd, "link2", a, sizeof a));
  tu_remove_dir(dd);
  tu_remove_dir(dir);
}

/* A job whose first step runs out of memory (a huge micro-batch: the
 * first step's lazily made gradients leave no room for micro-batch 1's
 * loss) while the step after it, run alone, stays within capacity: the
 * verdict and a sweep's reason say it runs out in the first step and give
 * the step's figures as the step's, not a need below capacity (hunt). */
static void test_first_step_out_of_memory_is_told(void **state)
{
  char wl[128], dir[64], csv[128], *text;
  const char *common[] = {"--set", "runtime.reserve=0", "--set",
                          "topology.gpu.memory=4TiB"};
  const char *run_args[] = {"run", wl, common[0], common[1], common[2],
                            common[3], "--set", "training.micro_batch=184721",
                            "--set", "training.global_batch=369442", NULL};
  const char *sweep[] = {"sweep", wl, common[0], common[1], common[2],
                         common[3], "--set", "training.global_batch=369442",
                         "--vary", "training.micro_batch=184721", "--csv",
                         csv, NULL};
  (void)state;
  tu_write_temp("[model]\narch = llama\nlayers = 4\nhidden = 512\n"
                "heads = 8\nffn_hidden = 1376\nvocab = 1000\nseq_len = 256\n",
                ".ini", wl, sizeof wl);
  run(run_args);
  assert_int_equal(r.status, 3);
  assert_contains(r.out, "in the first step, t = ");
  assert_contains(r.out, "verdict: DOES NOT FIT on 1 x H100-SXM-80GB: worst "
                         "rank runs out of memory in the first step; run "
                         "alone, the step after it peaks at 3.91 TiB of "
                         "4.00 TiB (98%)");
  tu_temp_dir(dir, sizeof dir);
  path_in(dir, "sweep.csv", csv, sizeof csv);
  run(sweep);
  assert_non_null(text = tu_read_file(csv));
  assert_contains(text, "rank 0 (stage 0) runs out of memory in the first "
                        "step at backward cross_entropy (head, micro-batch "
                        "1) allocating 176 GiB of temp; run alone, the step "
                        "after it peaks at 3.91 TiB of 4.00 TiB");
  free(text);
  unlink(csv);
  tu_remove_dir(dir);
  unlink(wl);
}

/* An output that names the workload or topology file would destroy it:
 * run's --trace, a sweep's or a plan's --csv. */
static void test_outputs_never_overwrite_inputs(void **state)
{
  char path[128], *before, *after;
  const char *trace[] = {"run", NULL, "--trace", NULL, NULL};
  const char *sweep[] = {"sweep", NULL, "--vary", "training.micro_batch=1,2",
                         "--csv", NULL, NULL};
  const char *plan[] = {"plan", NULL, "--set", "training.global_batch=4",
                        "--max-gpus", "2", "--csv", NULL, NULL};
  const char *topo[] = {"run", DATA "gpt-small.ini", "--topology",
                        VSIM_SOURCE_DIR "/topologies/h100-sxm-8x.ini", "--svg",
                        VSIM_SOURCE_DIR "/topologies/../topologies/h100-sxm-8x.ini",
                        NULL};
  const char **cmds[] = {trace, sweep, plan};
  (void)state;
  assert_non_null(before = tu_read_file(VSIM_TEST_DATA "/gpt-small.ini"));
  tu_write_temp(before, ".ini", path, sizeof path);
  trace[1] = trace[3] = sweep[1] = sweep[5] = plan[1] = plan[7] = path;
  for (size_t k = 0; k < 3; k++) {
    run(cmds[k]);
    assert_int_equal(r.status, 2);
    assert_contains(r.err, "would overwrite the input file");
  }
  assert_non_null(after = tu_read_file(path));
  assert_string_equal(after, before);
  free(after);
  free(before);
  unlink(path);
  run(topo);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--svg ");
  assert_contains(r.err, "would overwrite the input file");
}

/* The config.json that [model] hf_config names is an input too: run's
 * --svg and --csv DIR (a config that is one of its files), a sweep's and a
 * plan's --csv are refused before anything is written onto it (they wrote
 * over it before), and so is a sweep's --csv onto the config of one of
 * its --vary model.hf_config values (hunt). */
static void test_outputs_never_overwrite_hf_config(void **state)
{
  char dir[64], cfg[128], ops[128], ini[128], text[512], *json, *after;
  const char *svg[] = {"run", ini, "--svg", cfg, NULL};
  const char *csv[] = {"run", ini, "--set", NULL, "--csv", dir, NULL};
  const char *sweep[] = {"sweep", ini, "--vary", "training.micro_batch=1,2",
                         "--csv", cfg, NULL};
  const char *plan[] = {"plan", ini, "--max-gpus", "2", "--csv", cfg, NULL};
  /* a file only a --vary value reads (beside the workload, as it is) */
  const char *varied[] = {"sweep", ini, "--vary",
                          "model.hf_config=config.json,ops.csv", "--csv",
                          ops, NULL};
  const char **cmds[] = {svg, csv, sweep, plan, varied};
  FILE *f;
  (void)state;
  assert_non_null(json = tu_read_file(VSIM_SOURCE_DIR "/models/llama-2-7b.json"));
  tu_temp_dir(dir, sizeof dir);
  path_in(dir, "config.json", cfg, sizeof cfg);
  path_in(dir, "ops.csv", ops, sizeof ops);
  for (size_t k = 0; k < 2; k++) {
    assert_non_null(f = fopen(k ? ops : cfg, "w"));
    fputs(json, f);
    fclose(f);
  }
  snprintf(text, sizeof text,
           "[model]\nhf_config = config.json\nlayers = 2\nseq_len = 256\n"
           "[training]\nglobal_batch = 4\n");
  assert_non_null(f = fopen(path_in(dir, "w.ini", ini, sizeof ini), "w"));
  fputs(text, f);
  fclose(f);
  csv[3] = "model.hf_config=ops.csv";
  for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++) {
    run(cmds[k]);
    assert_int_equal(r.status, 2);
    assert_contains(r.err, "would overwrite the input file");
  }
  for (size_t k = 0; k < 2; k++) {
    assert_non_null(after = tu_read_file(k ? ops : cfg));
    assert_string_equal(after, json);
    free(after);
  }
  free(json);
  tu_remove_dir(dir);
}

/* A paged optimizer's CUDA managed memory is the trace's counter track
 * `managed` (export review: the report named it, no file had it): the
 * setup op (model_states, at t = 0) makes the states, held all step, so
 * the track has one sample, the bytes the report's "up to 99.9 MiB a GPU"
 * prints to 3 digits; without a paged optimizer there is no track. */
static void test_trace_has_managed_track(void **state)
{
  static const char sample[] = "{\"name\":\"managed\",\"ph\":\"C\","
                               "\"pid\":0,\"ts\":0.000,\"args\":"
                               "{\"bytes\":";
  char dir[64], p[128];
  const char *args[] = {"run",     DATA "gpt-small.ini",
                        "--set",   "training.paged_optimizer=true",
                        "--trace", NULL,
                        NULL};
  const char *at;
  char *text;
  double shown;
  unsigned long long bytes;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  args[5] = path_in(dir, "trace.json", p, sizeof p);
  run(args);
  assert_int_equal(r.status, 0);
  assert_non_null(at = strstr(r.out, "paged optimizer states: up to "));
  assert_int_equal(sscanf(at, "paged optimizer states: up to %lf MiB", &shown),
                   1);
  assert_non_null(text = tu_read_file(p));
  assert_non_null(at = strstr(text, sample));
  assert_int_equal(sscanf(at + strlen(sample), "%llu", &bytes), 1);
  assert_true(fabs((double)bytes / 1048576.0 - shown) <= 0.05);
  assert_null(strstr(at + strlen(sample), "\"name\":\"managed\""));
  free(text);
  args[3] = "training.paged_optimizer=false";
  run(args);
  assert_int_equal(r.status, 0);
  assert_non_null(text = tu_read_file(p));
  assert_contains(text, "{\"name\":\"optimizer\",\"ph\":\"C\",\"pid\":0,");
  assert_null(strstr(text, "\"name\":\"managed\""));
  free(text);
  tu_remove_dir(dir);
}

/* The first trace event of op `name` says it is bound by `bound`. */
static void assert_event_bound(const char *trace, const char *name,
                               const char *bound)
{
  char key[64], want[64];
  const char *at, *end;
  snprintf(key, sizeof key, "{\"name\":\"%s\",\"cat\"", name);
  snprintf(want, sizeof want, "\"bound\":\"%s\"}}", bound);
  assert_non_null(at = strstr(trace, key));
  assert_non_null(end = strstr(at, "}}"));
  if (strncmp(end - strlen(want) + 2, want, strlen(want)) != 0)
    fail_msg("%s's event is not bound by %s: %.*s", name, bound,
             (int)(end + 2 - at), at);
}

static void test_trace_is_chrome_json(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"run", DATA "gpt-small.ini", "--trace", NULL, NULL};
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  args[3] = path_in(dir, "trace.json", p, sizeof p);
  run(args);
  assert_int_equal(r.status, 0);
  text = tu_read_file(p);
  assert_non_null(text);
  assert_true(strncmp(text, "{\"traceEvents\":[", 16) == 0);
  assert_contains(text, "\"name\":\"qkv_proj\"");
  assert_contains(text, "]}\n");
  /* issue 18, item 3: named ranks and streams, memory counter tracks */
  assert_contains(text, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,"
                        "\"args\":{\"name\":\"rank 0 (stage 0, dp 0, tp 0)\"}}");
  assert_contains(text, "\"tid\":0,\"args\":{\"name\":\"compute\"}}");
  assert_contains(text, "{\"name\":\"activations\",\"ph\":\"C\",\"pid\":0,");
  assert_contains(text, "{\"name\":\"reserved\",\"ph\":\"C\",\"pid\":0,");
  free(text);
  {
    /* --trace-ranks keeps only the ranks named: rank 8, the second
     * stage's, of a 2-stage job on 16 GPUs */
    const char *two[] = {"run", "workloads/llama2-7b.ini", "--gpus", "16",
                         "--set", "parallel.pp=2", "--set", "parallel.zero=1",
                         "--trace", p, "--trace-ranks", "8", NULL};
    run(two);
    assert_int_equal(r.status, 0);
    assert_non_null(text = tu_read_file(p));
    assert_contains(text, "\"pid\":8,");
    assert_null(strstr(text, "\"pid\":0,"));
    /* each op names what bounds it (op_bounds.csv's largest part): a
     * 7B model's GEMMs their arithmetic, its norms HBM, its pipeline
     * sends the wire */
    assert_event_bound(text, "qkv_proj", "arithmetic");
    assert_event_bound(text, "norm1", "memory");
    assert_event_bound(text, "send_gradient", "communication");
    free(text);
    two[11] = "1";
    run(two);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "vsim: --trace-ranks: rank 1 is not simulated; one "
                           "GPU per pipeline stage is: 0, 8 (--ranks all "
                           "simulates every GPU)");
    /* a rank past the job's GPUs is no GPU at all (hunt: it was called
     * "not simulated") */
    two[11] = "16";
    run(two);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "vsim: --trace-ranks: rank 16 does not exist: the "
                           "job has 16 GPUs (0..15)\n");
    {
      /* and before the run, not after it (a 16,384-GPU --ranks all run
       * with offload takes minutes): with --max-events 1 the run would
       * be refused, so the only message is the rank's */
      const char *early[] = {
          "run", "workloads/llama2-7b.ini", "--gpus", "16",           "--trace",
          p,     "--trace-ranks",           "0,16",   "--max-events", "1",
          NULL};
      run(early);
      assert_int_equal(r.status, 1);
      assert_string_equal(r.err, "vsim: --trace-ranks: rank 16 does not "
                                 "exist: the job has 16 GPUs (0..15)\n");
    }
  }
  {
    /* a trace estimated over 100 MB is announced before the run: 2048
     * micro-batches of a small GPT, about 160 MB */
    const char *big[] = {"run", DATA "gpt-small.ini", "--set",
                         "training.global_batch=2048", "--trace", "/dev/null",
                         NULL};
    run(big);
    assert_int_equal(r.status, 0);
    assert_contains(r.err, "vsim: note: the trace is estimated at ");
    assert_contains(r.err, "--trace-ranks (e.g. 0 or 0..7) keeps only the "
                           "ranks you name");
  }
  tu_remove_dir(dir);
}

/* Issue 18, item 3: the chart marks the peak with the op and time the
 * terminal report (r.out) gives for it: "peak of rank R at OP, t = T s". */
static void assert_peak_marked(const char *svg)
{
  const char *p = strstr(r.out, "\npeak of rank ");
  char want[256];
  const char *at;
  assert_non_null(p);
  at = strstr(p, " at ");
  assert_non_null(at);
  snprintf(want, sizeof want, "%.*s</text>",
           (int)strcspn(at + 1, "\n"), at + 1);
  assert_contains(svg, want);
}

/* --svg charts the worst GPU's memory: stacked categories, the device's
 * use and the capacity, with a legend naming each. */
static void test_svg_chart(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"run", DATA "gpt-small.ini", "--svg", NULL, NULL};
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  args[3] = path_in(dir, "memory.svg", p, sizeof p);
  run(args);
  assert_int_equal(r.status, 0);
  text = tu_read_file(p);
  assert_non_null(text);
  assert_true(strncmp(text, "<svg ", 5) == 0);
  assert_contains(text, ">activations</text>");
  assert_contains(text, ">capacity</text>");
  assert_contains(text, "</svg>\n");
  assert_peak_marked(text);
  assert_null(strstr(text, "out of memory at"));
  free(text);
  {
    /* issue 18, item 3: an out-of-memory is marked in red where the
     * terminal says it happened (70B on one GPU: the parameters, one
     * tensor at a time as PyTorch allocates them; the first that does
     * not fit is an 8192 x 8192 bf16 projection) */
    const char *oom[] = {"run", DATA "llama2-70b.ini", "--svg", p, NULL};
    run(oom);
    assert_int_equal(r.status, 3);
    assert_non_null(text = tu_read_file(p));
    assert_peak_marked(text);
    assert_contains(text, "fill=\"red\" text-anchor=\"start\">out of memory "
                          "at setup model_states (step), t = 0.000000 s: "
                          "128 MiB of params</text>");
    free(text);
  }
  {
    /* the peak's bytes are the allocated peak's, whose op and time it
     * marks (hunt: it gave reserved + framework, 8.50 GiB, which the
     * 13B offload run reaches only later, at another op) */
    const char *offload[] = {
        "run", "workloads/gpt-13b-offload.ini", "--svg", p, "--csv", dir, NULL};
    char path[128], want[64], bytes[16];
    table t;
    run(offload);
    assert_int_equal(r.status, 0);
    assert_non_null(text = tu_read_file(p));
    assert_peak_marked(text);
    read_csv(path_in(dir, "summary.csv", path, sizeof path), &t);
    snprintf(
        want, sizeof want, ">allocated peak %s at ",
        vs_format_bytes(strtoull(cell(&t, 1, "peak_allocated_bytes"), NULL, 10),
                        bytes, sizeof bytes));
    assert_contains(text, want);
    assert_contains(text, ">allocated peak 5.36 GiB at backward mlp_down");
    free(text);
  }
  {
    /* a GPU name with markup characters stays text (XML-escaped) */
    const char *named[] = {"run", DATA "gpt-small.ini", "--set",
                           "topology.gpu.name=H100<&b>", "--svg", p, NULL};
    run(named);
    assert_int_equal(r.status, 0);
    assert_non_null(text = tu_read_file(p));
    assert_contains(text, " on H100&lt;&amp;b&gt;</text>");
    assert_null(strstr(text, "<&b>"));
    free(text);
  }
  {
    /* ... and a byte that is no UTF-8 (a Latin-1 name) becomes U+FFFD,
     * where it left the SVG no well-formed XML (hunt) */
    const char *latin1[] = {"run",   DATA "gpt-small.ini",
                            "--set", "topology.gpu.name=M\xfcller",
                            "--svg", p,
                            NULL};
    run(latin1);
    assert_int_equal(r.status, 0);
    assert_non_null(text = tu_read_file(p));
    assert_contains(text, " on M\xef\xbf\xbdller</text>");
    assert_null(strstr(text, "\xfc"));
    free(text);
  }
  tu_remove_dir(dir);
}

/* "http" occurs in text only as the SVG namespace URL, if at all: the page
 * fetches nothing. */
static void assert_no_url(const char *text)
{
  for (const char *p = strstr(text, "http"); p; p = strstr(p + 4, "http"))
    assert_true(strncmp(p, "http://www.w3.org/2000/svg\"", 27) == 0);
}

/* The report's peak of a rank (the HTML page's peak_bytes, which its
 * #peak line prints) is summary.csv's peak_reserved_bytes +
 * framework_bytes, to the byte (docs/DESIGN.md: summary.csv has no column
 * of its own for it). */
static void test_summary_gives_the_peak(void **state)
{
  char dir[64], html[128], csv[128];
  const char *args[] = {"run", "workloads/llama2-7b.ini", "--gpus", "8",
                        "--html", NULL, "--csv", NULL, NULL};
  const char *at;
  char *text;
  table t;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  args[5] = path_in(dir, "report.html", html, sizeof html);
  args[7] = dir;
  run(args);
  assert_int_equal(r.status, 0);
  assert_non_null(text = tu_read_file(html));
  assert_non_null(at = strstr(text, "\"peak_bytes\":"));
  read_csv(path_in(dir, "summary.csv", csv, sizeof csv), &t);
  assert_int_equal(strtoull(at + 13, NULL, 10),
                   strtoull(cell(&t, 1, "peak_reserved_bytes"), NULL, 10) +
                       strtoull(cell(&t, 1, "framework_bytes"), NULL, 10));
  assert_true(strtoull(cell(&t, 1, "framework_bytes"), NULL, 10) > 0);
  free(text);
  tu_remove_dir(dir);
}

/* Runs args (exit 0) with its NULL at args[at] given a report.html in a
 * new folder dir (of 64); returns the page (free it, then remove dir). */
static char *run_for_page(const char **args, size_t at, char *dir)
{
  char p[128];
  char *text;
  tu_temp_dir(dir, 64);
  args[at] = path_in(dir, "report.html", p, sizeof p);
  run(args);
  assert_int_equal(r.status, 0);
  assert_non_null(text = tu_read_file(p));
  return text;
}

/* The largest of the page's chart points in column `col` (0: time). */
static double page_points_max(const char *text, int col)
{
  const char *at = strstr(text, "\"points\":[");
  double most = 0;
  assert_non_null(at);
  for (at = strstr(at, "\n["); at && at[1] == '['; at = strstr(at + 1, "\n[")) {
    const char *p = at + 2;
    for (int k = 0; k < col; k++)
      p = strchr(p, ',') + 1;
    if (strtod(p, NULL) > most)
      most = strtod(p, NULL);
  }
  return most;
}

/* The page's chart reaches its own peak and spans the job's step (metamorphic
 * hunt): a LoRA job with the optimizer on the CPU, whose reserved memory
 * peaks after its allocated memory (at the gradients' copy to the host),
 * and a pipeline whose memory-worst rank (stage 0) ends before the job's
 * step does. The device-use series (column 7) reaches peak_bytes, and
 * "step" is the step line's. */
static void test_html_chart_reaches_peak_and_step(void **state)
{
  char dir[64], wl[128];
  const char *args[] = {"run", wl, "--html", NULL, NULL};
  char csv[64], path[128];
  const char *pipe[] = {"run",    DATA "gpt-small.ini",
                        "--set",  "parallel.pp=2",
                        "--set",  "parallel.pp_layers=1,3",
                        "--set",  "training.global_batch=4",
                        "--set",  "model.tied_embeddings=false",
                        "--csv",  csv,
                        "--html", NULL,
                        NULL};
  const char *at;
  char *text;
  double step = 0;
  table t;
  (void)state;
  tu_write_temp("[model]\narch = llama\nlayers = 6\nhidden = 512\n"
                "heads = 8\nkv_heads = 1\nffn_hidden = 1024\n"
                "vocab = 128256\nseq_len = 2048\n[training]\n"
                "framework = deepspeed\nprecision = bf16\n"
                "checkpointing = selective\nglobal_batch = 4\n"
                "[parallel]\nzero = 1\noffload_optimizer = cpu\n"
                "[finetune]\nmethod = lora\n",
                ".ini", wl, sizeof wl);
  text = run_for_page(args, 3, dir);
  assert_non_null(at = strstr(text, "\"peak_bytes\":"));
  assert_true(page_points_max(text, 7) == strtod(at + 13, NULL));
  free(text);
  tu_remove_dir(dir);
  unlink(wl);
  tu_temp_dir(csv, sizeof csv);
  text = run_for_page(pipe, 13, dir);
  read_csv(path_in(csv, "summary.csv", path, sizeof path), &t);
  for (int row = 1; row <= 2; row++)
    if (strtod(cell(&t, row, "step_time_s"), NULL) > step)
      step = strtod(cell(&t, row, "step_time_s"), NULL);
  /* the worst rank, stage 1, ends before stage 0's last backward; untied
   * embeddings: tied, stage 1's all-reduce of their gradients ends with
   * stage 0's, and its optimizer after it ends the step (1.859 ms, stage
   * 0 at 1.795 ms) */
  assert_string_equal(cell(&t, 2, "stage"), "1");
  assert_true(strtod(cell(&t, 2, "step_time_s"), NULL) < step);
  assert_non_null(at = strstr(text, "\"step\":"));
  tu_assert_close(strtod(at + 7, NULL), step, 1e-9);
  free(text);
  tu_remove_dir(dir);
  tu_remove_dir(csv);
}

/* The page repeats the summary's lines on what the peak holds and on
 * the paged optimizer's managed memory (user-journey review: a QLoRA
 * page said TIGHT and never named the 6 GiB the GPU also pages), and
 * only where the summary has them. */
static void test_html_names_paged_states_and_held(void **state)
{
  char dir[64];
  const char *paged[] = {"run",    DATA "gpt-small.ini",
                         "--set",  "training.paged_optimizer=true",
                         "--html", NULL,
                         NULL};
  const char *plain[] = {"run", DATA "gpt-small.ini", "--html", NULL, NULL};
  const char *lines[] = {"paged optimizer states: up to 99.9 MiB a GPU in "
                         "CUDA managed memory, beside the figures above",
                         "largest activations and temporaries at the peak: "};
  char *text;
  (void)state;
  text = run_for_page(paged, 5, dir);
  for (size_t i = 0; i < 2; i++) {
    char want[160];
    assert_contains(r.out, lines[i]);
    snprintf(want, sizeof want, "<p id=\"%s\">%s", i ? "held" : "managed",
             lines[i]);
    assert_contains(text, want);
  }
  free(text);
  tu_remove_dir(dir);
  text = run_for_page(plain, 3, dir);
  assert_null(strstr(r.out, "paged optimizer states"));
  assert_null(strstr(text, "id=\"managed\""));
  free(text);
  tu_remove_dir(dir);
}

/* The page's per-GPU table has the summary's cp column where the layout
 * has one (consistency hunt: ranks 0-7 of a cp 8 job all read dp 0, tp 0
 * there): rank 1 is cp 1; one row, the worst rank's (rank 0, the first
 * of equal peaks), is marked worst. */
static void test_html_ranks_name_cp(void **state)
{
  char dir[64];
  const char *args[] = {"run", "workloads/llama3-8b-128k-cp8.ini", "--ranks",
                        "all", "--html", NULL, NULL};
  char *text;
  const char *worst;
  (void)state;
  text = run_for_page(args, 5, dir);
  assert_contains(text, "<th>rank</th><th>stage</th><th>dp</th><th>cp</th>"
                        "<th>tp</th>");
  assert_contains(text, "<tr><td>1</td><td>0</td><td>0</td><td>1</td>"
                        "<td>0</td>");
  /* rank 0: stage 0, dp 0, cp 0, tp 0 */
  assert_contains(text, "<tr class=\"worst\"><td>0</td><td>0</td><td>0</td>"
                        "<td>0</td><td>0</td>");
  worst = strstr(text, "<tr class=\"worst\">");
  assert_null(strstr(worst + 1, "<tr class=\"worst\">"));
  free(text);
  tu_remove_dir(dir);
}

/* The page's step-time bar splits the step as the summary's step line
 * does, offload parts included (consistency hunt: with CPU offload the
 * bar gave compute 100.0%, 40% of the step): the keys' shares add up to
 * 100% and name the offload copies and the CPU step. */
static void test_html_step_split_has_every_part(void **state)
{
  char dir[64];
  const char *args[] = {"run", "workloads/gpt-13b-offload.ini", "--html",
                        NULL, NULL};
  const char *at;
  char *text;
  double share, sum = 0, compute = 0;
  (void)state;
  text = run_for_page(args, 3, dir);
  assert_contains(text, "</span>exposed offload copies ");
  assert_contains(text, "</span>CPU optimizer step ");
  at = strstr(text, "<ul class=\"keys\">");
  assert_non_null(at);
  for (; (at = strstr(at, "</span>")) && at < strstr(text, "</ul>"); at++) {
    const char *open = strchr(at, '(');
    assert_int_equal(sscanf(open, "(%lf%%)", &share), 1);
    if (strncmp(at, "</span>compute ", 15) == 0)
      compute = share;
    sum += share;
  }
  assert_true(fabs(sum - 100.0) < 0.3);
  assert_true(compute > 1.0 && compute < 90.0);
  free(text);
  tu_remove_dir(dir);
}

/* The page shows the host memory offload uses as the terminal does
 * (audit: the node table and a host out-of-memory line were the
 * terminal's only, so a page whose verdict blamed the host said nothing
 * of what it held): the table in #nodes and the OUT OF HOST MEMORY line,
 * word for word; without offload neither. */
static void test_html_shows_host_memory(void **state)
{
  char dir[64], p[128], want[512];
  const char *args[] = {"run",    "workloads/gpt-13b-offload.ini",
                        "--set",  "topology.node.host_memory=64GiB",
                        "--html", NULL,
                        NULL};
  const char *plain[] = {"run", DATA "gpt-small.ini", "--html", NULL, NULL};
  const char *line;
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  args[5] = path_in(dir, "report.html", p, sizeof p);
  run(args);
  assert_int_equal(r.status, 3);
  assert_non_null(text = tu_read_file(p));
  assert_non_null(line = strstr(r.out, "\n    0 host "));
  snprintf(want, sizeof want, "%.*s</pre>", (int)strcspn(line + 1, "\n"),
           line + 1);
  assert_contains(text, "<pre id=\"nodes\">host memory and NVMe of each "
                        "node at its peak (all its GPUs&#39; shares)\n");
  assert_contains(text, want);
  assert_non_null(line = strstr(r.out, "\nOUT OF HOST MEMORY on node 0 "));
  snprintf(want, sizeof want, "<p class=\"oom\">%.*s</p>",
           (int)strcspn(line + 1, "\n"), line + 1);
  for (char *q = strstr(want, "'"); q; q = strstr(q, "'")) {
    memmove(q + 5, q + 1, strlen(q + 1) + 1); /* ' as the page writes it */
    memcpy(q, "&#39;", 5);
  }
  assert_contains(text, want);
  free(text);
  tu_remove_dir(dir);
  text = run_for_page(plain, 3, dir);
  assert_null(strstr(text, "id=\"nodes\""));
  assert_null(strstr(text, "OUT OF HOST"));
  free(text);
  tu_remove_dir(dir);
}

/* The page carries the terminal's notes (audit: they were the
 * terminal's only, so a page whose step time rested on a calibrated curve
 * extended past its measured sizes, or on shared links approximated for
 * unevenly filled nodes, did not say so): each note line in #notes,
 * word for word; a run without notes has none. */
static void test_html_shows_notes(void **state)
{
  char dir[64], p[128], want[512];
  const char *args[] = {
      "run",        DATA "gpt-small.ini",
      "--gpus",     "12",
      "--set",      "parallel.pp=2",
      "--set",      "parallel.zero=1",
      "--set",      "parallel.offload_optimizer=cpu",
      "--set",      "training.global_batch=48",
      "--topology", "topologies/h200-calibrated.ini",
      "--set",      "topology.calibration.d2d_kernel_max_bytes=1MiB",
      "--html",     NULL,
      NULL};
  const char *plain[] = {"run", DATA "gpt-small.ini", "--html", NULL, NULL};
  const char *line;
  int notes = 0;
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  args[17] = path_in(dir, "report.html", p, sizeof p);
  run(args);
  assert_int_equal(r.status, 0);
  assert_non_null(text = tu_read_file(p));
  assert_contains(text, "<p id=\"notes\">note: ");
  for (line = strstr(r.out, "\nnote: "); line;
       line = strstr(line + 1, "\nnote: "), notes++) {
    snprintf(want, sizeof want, "%.*s", (int)strcspn(line + 1, "\n"), line + 1);
    for (char *q = strstr(want, "'"); q; q = strstr(q, "'")) {
      memmove(q + 5, q + 1, strlen(q + 1) + 1); /* ' as the page has it */
      memcpy(q, "&#39;", 5);
    }
    assert_contains(text, want);
  }
  assert_int_equal(notes, 2); /* the d2d_kernel curve, the uneven nodes */
  free(text);
  tu_remove_dir(dir);
  text = run_for_page(plain, 3, dir);
  assert_null(strstr(text, "id=\"notes\""));
  free(text);
  tu_remove_dir(dir);
}

/* Issue 18, item 2: --html writes one self-contained page with the peak
 * line the terminal printed (in #peak), the per-rank table, the step-time
 * split, the timeline as JSON and no URL; input text is escaped. */
static void test_html_report(void **state)
{
  char dir[64], p[128], want[256];
  const char *args[] = {"run", DATA "gpt-small.ini", "--html", NULL, NULL};
  const char *peak;
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  args[3] = path_in(dir, "report.html", p, sizeof p);
  run(args);
  assert_int_equal(r.status, 0);
  assert_non_null(text = tu_read_file(p));
  assert_true(strncmp(text, "<!DOCTYPE html>\n", 16) == 0);
  assert_contains(text, "<th>dp</th><th>tp</th>"); /* no cp column */
  /* the terminal's header keeps its lines; nothing is replaced */
  assert_contains(text, "<pre class=\"meta\">workload  ");
  assert_contains(text, "gpt-small.ini\nhardware  ");
  assert_null(strstr(text, "\xEF\xBF\xBD"));
  assert_non_null(peak = strstr(r.out, "\npeak of rank "));
  snprintf(want, sizeof want, "<p id=\"peak\">%.*s</p>",
           (int)strcspn(peak + 1, "\n"), peak + 1);
  assert_contains(text, want);
  assert_contains(text, "<table id=\"ranks\">");
  assert_contains(text, "<p id=\"step\">step time ");
  assert_contains(text, "<p id=\"bound\">compute ");
  assert_contains(text, "<p id=\"throughput\">throughput ");
  /* the terminal's split of compute by bound, every part named */
  assert_contains(r.out, " by what bounds it: arithmetic ");
  assert_contains(r.out, ", HBM traffic ");
  assert_contains(r.out, ", kernel launches ");
  assert_contains(text, "\"points\":[");
  assert_contains(text, "</html>\n");
  assert_no_url(text);
  assert_null(strstr(text, "<script src"));
  free(text);
  {
    /* a GPU name with markup characters stays text: escaped in the HTML,
     * \u-escaped in the JSON the script reads */
    const char *named[] = {"run", DATA "gpt-small.ini", "--set",
                           "topology.gpu.name=H100<&b>", "--html", p, NULL};
    run(named);
    assert_int_equal(r.status, 0);
    assert_non_null(text = tu_read_file(p));
    assert_contains(text, " x H100&lt;&amp;b&gt;</title>");
    assert_null(strstr(text, "<&b>"));
    free(text);
  }
  {
    /* --html and --svg on one file are refused before simulating */
    const char *both[] = {"run", DATA "gpt-small.ini", "--svg", p, "--html",
                          p, NULL};
    run(both);
    assert_int_equal(r.status, 2);
    assert_contains(r.err, "--html ");
    assert_contains(r.err, "give each output its own file");
  }
  {
    /* checked before simulating: into a missing folder, nothing printed */
    char missing[192];
    const char *nodir[] = {"run", DATA "gpt-small.ini", "--html", missing,
                           NULL};
    snprintf(missing, sizeof missing, "%s/nodir/r.html", dir);
    run(nodir);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "vsim: --html ");
    assert_string_equal(r.out, "");
  }
  {
    /* an out-of-memory is on the page as the terminal says it (70B on
     * one GPU: an 8192 x 8192 bf16 parameter) */
    const char *oom[] = {"run", DATA "llama2-70b.ini", "--html", p, NULL};
    run(oom);
    assert_int_equal(r.status, 3);
    assert_non_null(text = tu_read_file(p));
    assert_contains(text, "<p class=\"oom\">OUT OF MEMORY on rank 0 at setup "
                          "model_states (step), t = 0.000000 s: tried to "
                          "allocate 128 MiB (params)");
    assert_contains(text, "<p id=\"verdict\" class=\"oom\">verdict: DOES "
                          "NOT FIT on ");
    assert_null(strstr(text, "\xEF\xBF\xBD"));
    free(text);
  }
  tu_remove_dir(dir);
}

/* Past a file-size limit (ulimit -f 4: 2 KiB in dash's 512-byte blocks,
 * 4 KiB in bash's; the trace is about 11 KB, the chart 110 KB, the summary
 * on stdout 1 KB) the trace and the chart fail with the write's own
 * reason, EFBIG, not "Input/output error", after the option that named
 * the file; exit 1, nothing left behind. */
static void test_trace_svg_past_file_size_limit(void **state)
{
  static const char *const options[] = {"--trace", "--svg"};
  char dir[64], p[128];
  const char *args[] = {"-c", "ulimit -f 4 && exec \"$0\" \"$@\"", VSIM_BIN,
                        "run", DATA "gpt-small.ini", NULL, NULL, NULL};
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  for (size_t i = 0; i < 2; i++) {
    args[5] = options[i];
    args[6] = path_in(dir, i == 0 ? "t.json" : "m.svg", p, sizeof p);
    tu_run_program(&r, "/bin/sh", args);
    assert_int_equal(r.status, 1);
    tu_assert_message_at(r.err,
                         i == 0 ? "vsim: --trace @: write failed: File too "
                                  "large\n"
                                : "vsim: --svg @: write failed: File too "
                                  "large\n",
                         p);
    assert_int_equal(tu_count_entries(dir), 0);
  }
  tu_remove_dir(dir);
}

/* What `show` writes loads back, a long uneven split too: 200 layers over
 * 100 stages (3, 98 x 2, 1) is one line of 199 characters, over what the
 * INI reader takes (198), which show writes with a run (3,2x98,1), the
 * form plan prints. */
static void test_show_writes_long_splits_as_runs(void **state)
{
  char list[256] = "3", path[128];
  const char *show[] = {"show", DATA "gpt-small.ini", "--gpus", "100",
                        "--set", "model.layers=200", "--set",
                        "parallel.pp=100", "--set",
                        "training.global_batch=100", "--set", NULL, NULL};
  char set[300];
  (void)state;
  for (int i = 0; i < 98; i++)
    strcat(list, ",2");
  strcat(list, ",1");
  snprintf(set, sizeof set, "parallel.pp_layers=%s", list);
  show[11] = set;
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "pp_layers = 3,2x98,1\n");
  tu_write_temp(r.out, ".ini", path, sizeof path);
  {
    const char *const again[] = {"run", path, "--gpus", "100", NULL};
    run(again);
  }
  unlink(path);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "verdict: FITS");
  /* a run of two counts of two digits is shorter as VxN; a split with no
   * runs to shorten that no line can hold is refused, nothing written */
  snprintf(set, sizeof set, "parallel.pp_layers=10,10,1,1,2x96");
  show[5] = "model.layers=214";
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "pp_layers = 10x2,1,1,2x96\n");
  strcpy(list, "1");
  for (int i = 1; i < 100; i++)
    strcat(list, i % 2 ? ",2" : ",1");
  snprintf(set, sizeof set, "parallel.pp_layers=%s", list);
  show[5] = "model.layers=150";
  run(show);
  assert_int_equal(r.status, 1);
  assert_string_equal(r.out, "");
  assert_contains(r.err, "vsim: --set parallel.pp_layers=1,2,1,2");
  assert_contains(r.err, ": show would write it on a line of 209 "
                         "characters, over the 198 a workload's line can "
                         "have, so its output would not load back");
  {
    /* the longest such split a file can give (pp_layers=... in 197
     * characters) is written as compactly, and loads back */
    char ini[1024], again[600];
    const char *from_file[] = {"show", path, "--gpus", "94", NULL};
    strcpy(list, "1");
    for (int i = 1; i < 94; i++)
      strcat(list, i % 2 ? ",2" : ",1");
    snprintf(ini, sizeof ini,
             "[model]\narch = gpt\nlayers = 141\nhidden = 512\nheads = 8\n"
             "vocab = 1000\nseq_len = 128\n[training]\nmicro_batch = 1\n"
             "global_batch = 94\n[parallel]\npp = 94\npp_layers=%s\n",
             list);
    tu_write_temp(ini, ".ini", path, sizeof path);
    run(from_file);
    unlink(path);
    assert_int_equal(r.status, 0);
    snprintf(again, sizeof again, "\npp_layers=%s\n", list);
    assert_contains(r.out, again);
    tu_write_temp(r.out, ".ini", path, sizeof path);
    run(from_file);
    unlink(path);
    assert_int_equal(r.status, 0);
  }
}

/* An unknown key's message lists the section's keys by whole names;
 * [calibration] has too many for one message, and says where they all
 * are. */
static void test_unknown_key_lists_whole_names(void **state)
{
  const char *const show[] = {"show", DATA "gpt-small.ini", "--gpus", "8",
                              "--set", "topology.calibration.foo=1", NULL};
  const char *tail = "... (`vsim keys` lists them all)\n";
  const char *line_end;
  (void)state;
  run(show);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "unknown key 'foo' in [calibration]; valid keys: "
                         "measured, ");
  line_end = strchr(r.err, '\n');
  assert_non_null(line_end);
  assert_true((size_t)(line_end + 1 - r.err) >= strlen(tail));
  assert_string_equal(line_end + 1 - strlen(tail), tail);
}

/* Writes text to a new file at path. */
static void write_text(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

/* A comment show writes past the 198 characters a line can have (the
 * workload's path in its header) is cut short, so that the output still
 * loads back. */
static void test_show_output_of_a_long_path_loads_back(void **state)
{
  char dir[64], deep[512], path[600], ini[700];
  const char *show[] = {"show", path, "--gpus", "8", NULL};
  char *text = tu_read_file(VSIM_SOURCE_DIR "/" DATA "gpt-small.ini");
  (void)state;
  assert_non_null(text);
  tu_temp_dir(dir, sizeof dir);
  snprintf(deep, sizeof deep, "%s/%0200d", dir, 0);
  assert_int_equal(mkdir(deep, 0700), 0);
  snprintf(path, sizeof path, "%s/w.ini", deep);
  write_text(path, text);
  free(text);
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "...\n");
  for (const char *p = r.out; *p; p += strcspn(p, "\n") + 1)
    assert_true(strcspn(p, "\n") <= 198);
  snprintf(ini, sizeof ini, "%s/again.ini", dir);
  write_text(ini, r.out);
  show[1] = ini;
  run(show);
  assert_int_equal(r.status, 0);
  /* a line end in the file's name is no line end in its comment (hunt:
   * the output of a workload named "a\n[x].ini" did not load back) */
  snprintf(path, sizeof path, "%s/a\n[x].ini", dir);
  write_text(path, "[model]\narch = gpt\nlayers = 2\nhidden = 64\n"
                   "heads = 4\nvocab = 100\nseq_len = 32\n");
  show[1] = path;
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "/a?[x].ini resolved");
  write_text(ini, r.out);
  show[1] = ini;
  run(show);
  assert_int_equal(r.status, 0);
  tu_remove_dir(dir);
}

/* The outputs of one run are put in place together (vs_report_files):
 * when --html cannot be written (/dev/full), neither the --csv files nor
 * the trace replace what was there, the --csv folder the run made is
 * gone again, and the message names the option. */
static void test_outputs_put_in_place_together(void **state)
{
  char dir[64], csv[128], trace[128];
  FILE *f;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  path_in(dir, "c", csv, sizeof csv);
  path_in(dir, "t.json", trace, sizeof trace);
  assert_non_null(f = fopen(trace, "w"));
  fputs("old\n", f);
  fclose(f);
  {
    const char *const args[] = {"run", DATA "gpt-small.ini", "--csv", csv,
                                "--trace", trace, "--html", "/dev/full",
                                NULL};
    run(args);
  }
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "vsim: --html /dev/full: write failed: No space "
                         "left on device\n");
  assert_int_equal(tu_count_entries(dir), 1); /* the old trace alone */
  assert_non_null(f = fopen(trace, "r"));
  {
    char line[16] = "";
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "old\n");
  }
  fclose(f);
  tu_remove_dir(dir);
}

/* `vsim run --csv DIR | head`: a reader that closes at once makes every
 * write to stdout fail (the summary with --memory-summary --ranks all is
 * over 8 KB, so stdio writes it before the CSV files); the three files are
 * still written, whole: byte for byte those of the same run to a file. How
 * vsim reports the stdout failure is app/cli.c's matter, not checked here. */
static void test_csv_written_when_stdout_closes(void **state)
{
  const char *const *names = vs_report_csv_names;
  char dir[64], piped[128], plain[128], a[192], b[192];
  const char *sh[] = {"-c", "\"$0\" \"$@\" | true", VSIM_BIN, "run",
                      "workloads/llama2-7b.ini", "--gpus", "8", "--ranks",
                      "all", "--memory-summary", "--csv", piped, NULL};
  const char *direct[] = {"run", "workloads/llama2-7b.ini", "--gpus", "8",
                          "--ranks", "all", "--memory-summary", "--csv",
                          plain, NULL};
  table t;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  path_in(dir, "piped", piped, sizeof piped);
  path_in(dir, "plain", plain, sizeof plain);
  tu_run_program(&r, "/bin/sh", sh);
  run(direct);
  assert_int_equal(r.status, 0);
  /* summary.csv: its header and one row per GPU (--ranks all, 8) */
  read_csv(path_in(piped, "summary.csv", a, sizeof a), &t);
  assert_int_equal(t.total_rows, 1 + 8);
  assert_string_equal(t.cells[0][0], "rank");
  for (size_t i = 0; i < VS_REPORT_CSV_FILES; i++) {
    char *want = tu_read_file(path_in(plain, names[i], a, sizeof a));
    char *got = tu_read_file(path_in(piped, names[i], b, sizeof b));
    if (!got)
      fail_msg("%s was not written", b);
    assert_non_null(want);
    assert_string_equal(got, want);
    free(want);
    free(got);
    unlink(a);
    unlink(b);
  }
  rmdir(piped);
  rmdir(plain);
  tu_remove_dir(dir);
}

/* --ranks all simulates every GPU; each row matches the one-rank result.
 * The report and the page say why the peak's tensors are not listed, and
 * where they are (the line was left out without a word). */
static void test_ranks_all_writes_a_row_per_gpu(void **state)
{
  static const char held[] = "largest activations and temporaries at the "
                             "peak: not listed with --ranks all, which would "
                             "note every tensor of every GPU; without it, one "
                             "GPU per stage has the same peaks and lists them";
  char dir[64], p[128], html[128];
  const char *args[] = {"run",     DATA "gpt-small.ini",
                        "--gpus",  "4",
                        "--ranks", "all",
                        "--html",  NULL,
                        "--csv",   NULL,
                        NULL};
  const char *stage[] = {"run", DATA "gpt-small.ini", "--gpus", "4", NULL};
  char *page;
  table t;
  (void)state;
  args[9] = tu_temp_dir(dir, sizeof dir);
  args[7] = path_in(dir, "report.html", html, sizeof html);
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, held);
  assert_non_null(page = tu_read_file(html));
  assert_non_null(strstr(page, held));
  free(page);
  unlink(html);
  read_csv(path_in(dir, "summary.csv", p, sizeof p), &t);
  assert_int_equal(t.total_rows, 5);
  for (int row = 1; row <= 4; row++) {
    char want[8];
    snprintf(want, sizeof want, "%d", row - 1);
    assert_string_equal(cell(&t, row, "dp_rank"), want);
    assert_string_equal(cell(&t, row, "peak_allocated_bytes"),
                        cell(&t, 1, "peak_allocated_bytes"));
    assert_string_equal(cell(&t, row, "step_time_s"), cell(&t, 1, "step_time_s"));
  }
  tu_remove_dir(dir);
  run(stage);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "largest activations and temporaries at the peak: ");
  assert_null(strstr(r.out, "not listed with --ranks all"));
}

/* --ranks all with an output to record for: the ranks given a copy of
 * their slot's run share its timeline and op spans instead of copying
 * them, so the 405B job on 1024 GPUs (64 ranks a stage, 1.5e6 op events
 * each) asks what one slot's records take. Each rank had its own copies:
 * 13.7 GiB estimated (6.6 GB used, 68 s) for a 150 KB chart, refused at
 * 16,384 GPUs under the default --max-memory, where the run without it
 * takes 430 MB; the copies' records are what the twin's are (the CSV
 * rows of every rank, test_ranks_all_writes_a_row_per_gpu). */
static void test_ranks_all_records_once_per_slot(void **state)
{
  char dir[64], svg[128];
  const char *args[] = {"run",
                        "workloads/llama3-405b.ini",
                        "--gpus",
                        "1024",
                        "--ranks",
                        "all",
                        "--max-memory",
                        "2GiB",
                        "--svg",
                        NULL,
                        NULL};
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  args[9] = path_in(dir, "peak.svg", svg, sizeof svg);
  run(args);
  assert_int_equal(r.status, 0); /* the report: 1024 rows, past r.out */
  text = tu_read_file(svg);
  assert_non_null(text);
  assert_non_null(strstr(text, "</svg>"));
  free(text);
  tu_remove_dir(dir);
}

/* A pipeline: one row per stage (first and last marked), the bubble in the
 * step time and, apart, stage 0's wait for the last stage (which computes
 * the logits besides its layers), and summary.csv rows with each stage's
 * rank (tp-dp-pp order: stage 1 starts at rank tp*dp = 2). */
static void test_pipeline_report_and_csv(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"run", DATA "gpt-small.ini", "--gpus", "4", "--set",
                        "parallel.pp=2", "--set", "training.global_batch=8",
                        "--csv", NULL, NULL};
  table t;
  (void)state;
  args[9] = tu_temp_dir(dir, sizeof dir);
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "<- first stage");
  assert_contains(r.out, "<- last stage");
  assert_contains(r.out, "+ pipeline bubble ");
  assert_contains(r.out, "+ waiting on the busiest stage ");
  assert_contains(r.out, "(the split of stage 0, which ends last; stage 1 "
                         "is the busiest)\n");
  read_csv(path_in(dir, "summary.csv", p, sizeof p), &t);
  assert_int_equal(t.total_rows, 3);
  assert_string_equal(cell(&t, 1, "stage"), "0");
  assert_string_equal(cell(&t, 2, "stage"), "1");
  assert_string_equal(cell(&t, 2, "rank"), "2");
  tu_remove_dir(dir);
  {
    /* with --ranks all, ranks of one stage on different PCIe switches
     * end apart; the last one's wait on its pipeline is compared with
     * its own pipeline's ranks only (pipeline review: another slot's
     * rank of its own stage was named "the busiest stage") */
    const char *uneven[] = {"run",     "workloads/zero-offload-13b.ini",
                            "--gpus",  "6",
                            "--set",   "parallel.pp=2",
                            "--set",   "parallel.zero=1",
                            "--set",   "training.global_batch=12",
                            "--set",   "training.micro_batch=1",
                            "--ranks", "all",
                            NULL};
    run(uneven);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "+ pipeline bubble ");
    assert_null(strstr(r.out, "stage 0, which ends last; stage 0"));
  }
}

/* The caching allocator's fragmentation can make a step OOM although its
 * tensors fit: on Llama-2-7B (8 GPUs, ZeRO-3) the exact allocator's peak
 * (tensors + framework) is below 55.3 GiB, so the bytes fit; the caching
 * allocator, whose segments are split and cached, runs out at that
 * capacity even after releasing its free segments; expandable segments
 * (pages mapped where they are needed) make the same step fit again. */
static void test_fragmentation_oom_fixed_by_expandable_segments(void **state)
{
  const char *args[] = {"run",
                        "workloads/llama2-7b.ini",
                        "--gpus",
                        "8",
                        "--set",
                        "topology.gpu.memory=55.3GiB",
                        "--set",
                        NULL,
                        "--memory-summary",
                        NULL};
  (void)state;
  args[7] = "runtime.allocator=exact";
  run(args);
  assert_int_equal(r.status, 0);
  args[7] = "runtime.allocator=caching";
  run(args);
  assert_int_equal(r.status, 3);
  assert_contains(r.out, "OUT OF MEMORY on rank 0");
  assert_contains(r.out, "reserved in total by the allocator");
  assert_contains(r.out, "allocation retries ");
  assert_null(strstr(r.out, "allocation retries 0,"));
  args[7] = "runtime.expandable_segments=true";
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "expandable segments: calls are page maps");
}

static void test_memory_summary_per_gpu(void **state)
{
  static const char *const args[] = {"run", DATA "gpt-small.ini", "--gpus", "2",
                                     "--set", "parallel.pp=2",
                                     "--memory-summary", NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "memory summary of rank 0 (stage 0)");
  assert_contains(r.out, "memory summary of rank 1 (stage 1)");
  assert_contains(r.out, "reserved               large");
  assert_contains(r.out, "cudaMalloc calls ");
}

/* ------------------------------------------------------------------------
 * fit, sweep, plan
 * ------------------------------------------------------------------------ */

/* Runs `vsim fit` and returns the value it reports. */
static unsigned long long fit_value(const char *const *args, const char *key)
{
  char prefix[96];
  const char *at;
  run(args);
  assert_int_equal(r.status, 0);
  snprintf(prefix, sizeof prefix, "largest %s that fits: ", key);
  at = strstr(r.out, prefix);
  if (!at)
    fail_msg("no '%s' in: %s", prefix, r.out);
  return strtoull(at + strlen(prefix), NULL, 10);
}

/* [runtime] reserve end to end: a run that leaves less free is TIGHT
 * (exit 0), sweep marks it tight in its table and CSV, and plan counts
 * nothing within the reserve as fitting (exit 3, naming the reserve). */
static void test_reserve_tight(void **state)
{
  char dir[64], csv[128], *text;
  const char *tight_run[] = {"run", DATA "gpt-small.ini", "--set",
                             "runtime.reserve=79GiB", NULL};
  const char *sweep[] = {"sweep", DATA "gpt-small.ini", "--vary",
                         "runtime.reserve=0,79GiB", "--csv", csv, NULL};
  const char *plan[] = {"plan", DATA "gpt-small.ini", "--max-gpus", "2",
                        "--set", "training.global_batch=2", "--set",
                        "runtime.reserve=79GiB", NULL};
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(csv, sizeof csv, "%s/sweep.csv", dir);
  run(tight_run);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "verdict: TIGHT on 1 x H100-SXM-80GB");
  assert_contains(r.out, "less than [runtime] reserve's 79.0 GiB free");
  run(sweep);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "2 combinations: 1 fit, 1 tight (less than "
                         "[runtime] reserve free), 0 out of memory, 0 invalid");
  assert_non_null(text = tu_read_file(csv));
  assert_contains(text, ",fits,");
  assert_contains(text, ",tight,\"rank 0 (stage 0) peaks at ");
  free(text);
  run(plan);
  assert_int_equal(r.status, 3);
  assert_contains(r.out, "verdict: DOES NOT FIT on any layout");
  assert_contains(r.out, "less than [runtime] reserve's 79.0 GiB free");
  assert_contains(r.out, "lower [runtime] reserve");
  {
    /* a reserve of the whole GPU or more is refused, naming both keys */
    const char *whole[] = {"run", DATA "gpt-small.ini", "--set",
                           "runtime.reserve=200GiB", NULL};
    run(whole);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "--set runtime.reserve=200GiB: keeps at least the "
                           "GPU's whole 79.2 GiB ([gpu] memory) free");
  }
  tu_remove_dir(dir);
}

/* plan checks the base workload on its own GPU count, or, where that
 * fails, on the most GPUs it tries: an fsdp2 workload whose dp follows
 * the GPU count (dp = 1 on its own, which FSDP2 refuses), and a step of
 * 65,536 micro-batches at dp = 1, plan both (they were refused before
 * any layout was tried); a base no GPU count mends is still refused with
 * the first reason. */
/* Fails when a line of text ends with a blank (a table padding its last
 * column). */
static void assert_no_trailing_blank(const char *text)
{
  for (const char *nl = strchr(text, '\n'); nl; nl = strchr(nl + 1, '\n'))
    if (nl > text && nl[-1] == ' ')
      fail_msg("a line ends with a blank: ...%.60s",
               nl - 60 > text ? nl - 60 : text);
}

static void test_plan_base_on_its_gpus(void **state)
{
  static const char *const fsdp2[] = {
      "plan", DATA "gpt-small.ini", "--max-gpus", "4", "--set",
      "training.framework=fsdp2", "--set", "training.global_batch=8",
      NULL};
  static const char *const long_step[] = {
      "plan", DATA "gpt-small.ini", "--gpus", "64", "--set",
      "training.global_batch=65536", NULL};
  static const char *const odd[] = {
      "plan", DATA "gpt-small.ini", "--gpus", "64", "--set",
      "training.global_batch=7", "--set", "training.micro_batch=2", NULL};
  (void)state;
  run(fsdp2);
  if (r.status != 0)
    fail_msg("fsdp2 plan exited %d: %s", r.status, r.err);
  assert_no_trailing_blank(r.out);
  run(long_step);
  if (r.status != 0)
    fail_msg("long-step plan exited %d: %s", r.status, r.err);
  run(odd);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "global_batch must be a multiple of micro_batch * "
                         "dp = 2 * 1 = 2");
}

/* fit and plan set their searched keys in every simulation: a --set of
 * one only makes the base workload valid, and they say so; fit's
 * micro-batch decides the micro-batches per step it keeps. */
static void test_searched_sets_are_noted(void **state)
{
  static const char *const plan[] = {"plan", DATA "gpt-small.ini", "--gpus",
                                     "2", "--set", "training.global_batch=8",
                                     "--set", "parallel.tp=2", "--set",
                                     "parallel.offload_params=none", NULL};
  static const char *const fit[] = {"fit", DATA "gpt-small.ini", "--set",
                                    "training.micro_batch=2", NULL};
  static const char *const fit_per_step[] = {
      "fit",   DATA "gpt-small.ini",      "--set", "training.micro_batch=2",
      "--set", "training.global_batch=8", NULL};
  static const char *const plain[] = {"plan", DATA "gpt-small.ini", "--gpus",
                                      "2", "--set",
                                      "training.global_batch=8", "--set",
                                      "parallel.cp=1", NULL};
  (void)state;
  run(plan);
  assert_int_equal(r.status, 0);
  assert_contains(r.err, "vsim: note: plan sets parallel.tp in every "
                         "simulation it runs: --set parallel.tp=2 only makes "
                         "the base workload valid, it does not narrow the "
                         "search\n");
  /* the last key plan gives every layout; cp only where it varies it */
  assert_contains(r.err, "plan sets parallel.offload_params in every ");
  run(fit);
  assert_int_equal(r.status, 0);
  assert_contains(r.err, "vsim: note: fit sets training.micro_batch in every "
                         "simulation it runs");
  /* ... whose micro-batches per step (global batch 8 over micro-batch 2:
   * 4) fit keeps, which the note and the answer say: the global batch is
   * 4 times the answer */
  run(fit_per_step);
  assert_int_equal(r.status, 0);
  assert_contains(r.err, "it does decide the base's micro-batches per step, "
                         "which fit keeps");
  assert_contains(r.out, "largest training.micro_batch that fits: 6557 (");
  assert_contains(r.out, "; global batch 26228, 4 micro-batches per step)\n");
  run(plain);
  assert_int_equal(r.status, 0);
  assert_null(strstr(r.err, "note: plan sets"));
}

/* Two messages that said the wrong thing: a folder that exists but takes
 * no new file (/proc) is not called missing, and --ranks all over vsim's
 * limit is refused before any note that the run takes a while. */
static void test_output_folder_and_rank_limit_messages(void **state)
{
  static const char *const proc[] = {"run", DATA "gpt-small.ini", "--trace",
                                     "/proc/vsim-x.json", NULL};
  static const char *const many[] = {"run", DATA "gpt-small.ini", "--gpus",
                                     "1000000", "--set",
                                     "training.global_batch=1000000",
                                     "--ranks", "all", NULL};
  (void)state;
  run(proc);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "vsim: --trace /proc/vsim-x.json: cannot create: no "
                         "new file can be made in directory '/proc': ");
  run(many);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--ranks all: 1000000 GPUs are more than vsim "
                         "simulates one by one (65536)");
  assert_null(strstr(r.err, "note:"));
}

/* plan with [training] checkpoint_layers: its layouts without full
 * checkpointing drop the key (it chooses layers for full checkpointing
 * only) instead of becoming invalid rows. */
static void test_plan_keeps_checkpoint_choice_valid(void **state)
{
  char dir[64], csv[128], *text;
  const char *plan[] = {"plan", DATA "gpt-small.ini", "--gpus", "2", "--set",
                        "training.global_batch=8", "--set",
                        "training.checkpointing=full", "--set",
                        "training.checkpoint_layers=1", "--csv", csv, NULL};
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(csv, sizeof csv, "%s/plan.csv", dir);
  run(plan);
  assert_int_equal(r.status, 0);
  assert_non_null(text = tu_read_file(csv));
  assert_null(strstr(text, ",invalid,"));
  assert_non_null(strstr(text, ",none,"));
  free(text);
  tu_remove_dir(dir);
}

/* After a run: with the boundary value it fits with the reserve free
 * (exit 0, FITS); with the next, it does not (exit 3, or TIGHT). With
 * [runtime] reserve = 0 the boundary is the capacity itself (exit 3). */
static void assert_boundary(int next, bool reserve)
{
  if (!next) {
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "verdict: FITS");
  } else if (!reserve) {
    assert_int_equal(r.status, 3);
  } else if (r.status == 0) {
    assert_contains(r.out, "verdict: TIGHT");
  } else {
    assert_int_equal(r.status, 3);
  }
}

/* fit finds the boundary exactly: `vsim run` with the value fits with the
 * reserve free and with the next value does not (assert_boundary), with
 * the default reserve (10%) and with none. The micro-batch search keeps
 * the micro-batches per step, so global_batch = mb * dp * ga. */
static void test_fit_finds_the_exact_boundary(void **state)
{
  static const char *const fit_llama[] = {"fit", "workloads/llama2-7b.ini",
                                          "--gpus", "8", NULL};
  static const char *const fit_seq[] = {
      "fit", DATA "gpt-small.ini", "--vary-key", "model.seq_len", "--set",
      "topology.gpu.memory=2GiB", "--set", "runtime.reserve=0", NULL};
  static const char *const fit_seq_kept[] = {
      "fit", DATA "gpt-small.ini", "--vary-key", "model.seq_len", "--set",
      "topology.gpu.memory=2GiB", NULL};
  static const char *const fit_mb[] = {"fit", DATA "gpt-small.ini", "--set",
                                       "topology.gpu.memory=2GiB", "--set",
                                       "runtime.reserve=0", NULL};
  char v1[64], v2[64], v3[64];
  const char *run_llama[] = {"run", "workloads/llama2-7b.ini", "--gpus", "8",
                             "--set", v1, "--set", v2, NULL};
  const char *run_small[] = {"run", DATA "gpt-small.ini", "--set",
                             "topology.gpu.memory=2GiB", "--set", v1,
                             "--set", v2, "--set", v3, NULL};
  unsigned long long n, kept;
  (void)state;

  n = fit_value(fit_llama, "training.micro_batch");
  for (int next = 0; next < 2; next++) {
    snprintf(v1, sizeof v1, "training.micro_batch=%llu", n + (unsigned)next);
    /* llama2-7b.ini: 8 GPUs, global 64 at micro-batch 2: 4 per step */
    snprintf(v2, sizeof v2, "training.global_batch=%llu", (n + (unsigned)next) * 32);
    run(run_llama);
    assert_boundary(next, true);
  }
  n = fit_value(fit_seq, "model.seq_len");
  kept = fit_value(fit_seq_kept, "model.seq_len");
  assert_true(kept < n); /* the reserve costs tokens */
  for (int next = 0; next < 2; next++) {
    snprintf(v1, sizeof v1, "model.seq_len=%llu", n + (unsigned)next);
    snprintf(v2, sizeof v2, "training.micro_batch=1");
    snprintf(v3, sizeof v3, "runtime.reserve=0");
    run(run_small);
    assert_boundary(next, false);
    snprintf(v1, sizeof v1, "model.seq_len=%llu", kept + (unsigned)next);
    snprintf(v3, sizeof v3, "runtime.reserve=10%%");
    run(run_small);
    assert_boundary(next, true);
  }
  n = fit_value(fit_mb, "training.micro_batch");
  for (int next = 0; next < 2; next++) {
    snprintf(v1, sizeof v1, "training.micro_batch=%llu", n + (unsigned)next);
    snprintf(v2, sizeof v2, "training.global_batch=%llu", n + (unsigned)next);
    snprintf(v3, sizeof v3, "runtime.reserve=0");
    run(run_small);
    assert_boundary(next, false);
  }
  assert_contains(r.out, "OUT OF MEMORY");
}

/* text without its line that holds `needle` (the wall-time line); a copy
 * the caller frees. */
static char *without_line(const char *text, const char *needle)
{
  char *copy = strdup(text), *at, *end;
  assert_non_null(copy);
  if ((at = strstr(copy, needle)) != NULL) {
    while (at > copy && at[-1] != '\n')
      at--;
    end = strchr(at, '\n');
    memmove(at, end ? end + 1 : at + strlen(at),
            strlen(end ? end + 1 : at + strlen(at)) + 1);
  }
  return copy;
}

/* Runs args (a command with "--jobs", NULL at jobs_at and "--csv", NULL
 * at jobs_at + 2) with one thread and with `jobs`, each writing its CSV
 * in dir (one.csv, into p1, and two.csv), and fails unless both exit 0
 * with the same CSV, byte for byte. Returns each run's stdout without its
 * wall-time line ("simulated in"; the caller frees them). */
static void same_across_jobs(const char **args, size_t jobs_at,
                             const char *jobs, const char *dir, char *p1,
                             size_t len, char **out1, char **out2)
{
  char p2[128];
  char *a, *b;
  args[jobs_at] = "1";
  args[jobs_at + 2] = path_in(dir, "one.csv", p1, len);
  run(args);
  assert_int_equal(r.status, 0);
  *out1 = without_line(r.out, "simulated in");
  args[jobs_at] = jobs;
  args[jobs_at + 2] = path_in(dir, "two.csv", p2, sizeof p2);
  run(args);
  assert_int_equal(r.status, 0);
  *out2 = without_line(r.out, "simulated in");
  assert_non_null(a = tu_read_file(p1));
  assert_non_null(b = tu_read_file(p2));
  assert_string_equal(a, b);
  free(a);
  free(b);
}

/* sweep: the same CSV with one thread and two; an impossible combination
 * (tp 3 does not divide 8 heads) is a row with its reason, not a failure. */
static void test_sweep_is_deterministic_across_jobs(void **state)
{
  char dir[64], p1[128];
  const char *args[] = {"sweep", DATA "gpt-small.ini", "--gpus", "6",
                        "--vary", "training.micro_batch=1,2,4..8",
                        "--vary", "parallel.tp=1..3", "--jobs", NULL,
                        "--csv", NULL, NULL};
  char *one, *two;
  table t;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  same_across_jobs(args, 9, "2", dir, p1, sizeof p1, &one, &two);
  assert_contains(one, "12 combinations: 8 fit, 0 out of memory, 4 invalid");
  free(one);
  free(two);
  read_csv(p1, &t);
  assert_int_equal(t.total_rows, 13);
  assert_string_equal(t.cells[0][0], "training.micro_batch");
  assert_string_equal(t.cells[0][1], "parallel.tp");
  assert_string_equal(t.cells[0][2], "rank");
  assert_string_equal(cell(&t, 3, "parallel.tp"), "3");
  assert_string_equal(cell(&t, 3, "status"), "invalid");
  /* the reason names the varied key as the user gave it */
  assert_string_equal(cell(&t, 3, "reason"),
                      "--vary parallel.tp=3: tp must divide heads (8)");
  assert_string_equal(cell(&t, 1, "status"), "fits");
  tu_remove_dir(dir);
}

/* A sweep whose every combination is invalid simulated nothing: that is
 * bad input (exit 1, the first reason on stderr), not "nothing fits" (3).
 * hidden 500 is not divisible by gpt-small's 8 heads. */
static void test_sweep_all_invalid_is_an_input_error(void **state)
{
  const char *args[] = {"sweep", DATA "gpt-small.ini", "--set", "model.hidden=500",
                        "--vary", "training.micro_batch=1,2", NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 1);
  assert_contains(r.out, "2 combinations: 0 fit, 0 out of memory, 2 invalid");
  assert_contains(r.err, "vsim: every combination is invalid, so nothing was "
                         "simulated; the first: ");
  assert_contains(r.err, "hidden (500, --set model.hidden=500) must be "
                         "divisible by heads");
  {
    /* a varied GPU count is named as the user gave it */
    const char *gpus[] = {"sweep", DATA "gpt-small.ini", "--set", "parallel.tp=2",
                          "--vary", "gpus=3,4", NULL};
    run(gpus);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "invalid  --vary gpus=3 is not divisible by tp*pp = 2 "
                           "(--set parallel.tp=2; ");
  }
  {
    /* and so is it where a dp the workload gives contradicts it: the
     * advice to drop dp or --gpus named an option the sweep was not
     * given */
    const char *dp[] = {
        "sweep",  DATA "gpt-small.ini", "--set", "parallel.dp=4",
        "--vary", "gpus=2,4",           NULL};
    run(dp);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "invalid  --vary gpus=2 contradicts --set "
                           "parallel.dp=4: tp*pp*dp = 4; drop dp or --vary "
                           "gpus\n");
  }
}

/* The layout printed on the line after `heading` in plan's output (r.out),
 * as `vsim run` arguments into args[32]: "run", the base arguments (the
 * workload and what the plan was given), then --gpus and a --set for tp,
 * pp, ZeRO, checkpointing, micro-batch, sequence parallelism and the
 * pipeline schedule (from the pipeline column: "1f1b" or "interleaved
 * x2"; an uneven split fails the test, which does not pass one on). */
static void plan_row_args(const char *heading, const char *const *base,
                          char bufs[10][64], const char **args)
{
  const char *p = strstr(r.out, heading);
  unsigned long long gpus, dp, tp, pp, zero, mb;
  char ckpt[16], row[512];
  int n = 0;
  assert_non_null(p);
  p = strchr(strchr(p, '\n') + 1, '\n') + 1; /* past the column header */
  snprintf(row, sizeof row, "%.*s", (int)strcspn(p, "\n"), p);
  assert_int_equal(sscanf(row, "%*d %llu %llu %llu %llu %llu %15s %llu", &gpus,
                          &dp, &tp, &pp, &zero, ckpt, &mb), 7);
  if (strstr(row, "1f1b ") && strpbrk(strstr(row, "1f1b ") + 5, "0123456789"))
    fail_msg("an uneven split in '%s': this test passes only even ones", row);
  snprintf(bufs[0], 64, "%llu", gpus);
  snprintf(bufs[1], 64, "parallel.tp=%llu", tp);
  snprintf(bufs[2], 64, "parallel.pp=%llu", pp);
  snprintf(bufs[3], 64, "parallel.zero=%llu", zero);
  snprintf(bufs[4], 64, "training.checkpointing=%s", ckpt);
  snprintf(bufs[5], 64, "training.micro_batch=%llu", mb);
  snprintf(bufs[6], 64, "parallel.sequence_parallel=%s",
           tp > 1 ? "true" : "false");
  snprintf(bufs[7], 64, "parallel.schedule=%s",
           strstr(row, "interleaved x2") ? "interleaved" : "1f1b");
  snprintf(bufs[8], 64, "parallel.virtual_stages=%d",
           strstr(row, "interleaved x2") ? 2 : 1);
  snprintf(bufs[9], 64, "parallel.dp=%llu", dp);
  args[n++] = "run";
  for (size_t k = 0; base[k] && n < 12; k++)
    args[n++] = base[k];
  args[n++] = "--gpus";
  args[n++] = bufs[0];
  for (int k = 1; k < 10; k++) {
    args[n++] = "--set";
    args[n++] = bufs[k];
  }
  args[n] = NULL;
}

/* plan on a small model: the cheapest layout it prints is one `vsim run`
 * confirms fits; on a model too large for --max-gpus it says so (exit 3). */
static void test_plan_layout_is_confirmed_by_run(void **state)
{
  static const char *const plan[] = {"plan", DATA "gpt-small.ini", "--set",
                                     "training.global_batch=16", "--set",
                                     "topology.gpu.memory=2GiB", "--max-gpus",
                                     "8", NULL};
  static const char *const base[] = {DATA "gpt-small.ini", "--set",
                                     "training.global_batch=16", "--set",
                                     "topology.gpu.memory=2GiB", NULL};
  static const char *const too_big[] = {"plan", DATA "llama2-70b.ini", "--set",
                                        "training.global_batch=64", "--set",
                                        "topology.node.host_memory=256GiB",
                                        "--max-gpus", "4", NULL};
  static const char *const no_batch[] = {"plan", DATA "llama2-70b.ini", NULL};
  char bufs[10][64];
  const char *check[32];
  (void)state;
  run(plan);
  assert_int_equal(r.status, 0);
  plan_row_args("cheapest per step", base, bufs, check);
  run(check);
  assert_int_equal(r.status, 0);
  run(too_big);
  assert_int_equal(r.status, 3);
  /* nothing fits the GPUs, and with offload not the host either */
  assert_contains(r.out, "nothing fits without offload");
  assert_contains(r.out, "DOES NOT FIT on any layout of up to 4 GPUs");
  run(no_batch);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "plan keeps the global batch fixed");
}

/* plan's closest layout, when nothing fits, is the one nearest to fitting
 * whatever ran out: Llama 2 70B on up to 8 RTX 4090s without NVMe fits no
 * GPU (the nearest, 4 GPUs, needs 33.0 of 23.6 GiB), and with the
 * optimizer on the host 8 GPUs fall short of the 128 GiB host by 0.4%
 * (128.479 GiB); the verdict named the 1-GPU layout needing 1.13 TiB of
 * host memory, whose GPU was nearly empty (hunt), and did not say it
 * offloads. With the topology's 2 TB of NVMe, plan tries the optimizer
 * there (ZeRO-Infinity) and the parameters in host memory: 4 GPUs fit
 * (review: it said nothing fits, where vsim run of such a layout fits). */
static void test_plan_closest_counts_host_memory(void **state)
{
  const char *args[] = {"plan",       "workloads/llama2-70b.ini",
                        "--max-gpus", "8",
                        "--jobs",     "2",
                        "--topology", "topologies/rtx4090-24g-1x.ini",
                        "--set",      "topology.node.nvme_capacity=0",
                        NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 3);
  assert_contains(r.out, "; the closest, 8 GPUs (dp 8, tp 1, pp 1, ZeRO-3, "
                         "micro-batch 1, 1f1b +cpu optimizer): node 0 needs "
                         "128.479 GiB of 128.000 GiB ([node] host_memory)");
  assert_null(strstr(r.out, "NVMe"));
  args[8] = NULL; /* the topology's NVMe */
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "and the optimizer on NVMe with the parameters in "
                         "host memory (ZeRO-3)");
  assert_contains(r.out, "fewest GPUs on which it fits: 4\n");
  assert_contains(r.out, "1f1b +nvme optimizer,cpu params");
  {
    /* a job that allows no offload (hf) says so, not that plan tried 0
     * layouts; one GPU is "1 GPU" */
    const char *hf[] = {"plan",       "workloads/gemma2-9b-qlora.ini",
                        "--max-gpus", "2",
                        "--jobs",     "2",
                        "--topology", "topologies/rtx4090-24g-1x.ini",
                        NULL};
    run(hf);
    assert_int_equal(r.status, 3);
    assert_contains(r.out, "nothing fits without offload (33 layouts), and "
                           "the job allows no offload layout (the reasons "
                           "above)\n");
    assert_contains(r.out, "; the closest, 1 GPU (dp 1,");
  }
}

/* A layout that runs out of memory in setup (gpt-small's model states,
 * 26 + 26 + 151 MiB, on top of the 432 MiB framework, exceed 600 MiB) is
 * screened only until that out-of-memory: no step was simulated, so the
 * step time and every figure divided by it are empty cells, never inf or
 * nan. One GPU and global batch 4 leave 6 layouts: ZeRO-0 (ZeRO needs
 * dp > 1), checkpointing none or full (selective = none with flash
 * attention), micro-batch 1, 2 or 4. A host of 1 MiB holds no offload. */
static void test_plan_rows_without_a_step_have_empty_figures(void **state)
{
  static const char *const derived[] = {
      "step_time_s", "tokens_per_s", "mfu", "usd_per_step",
      "usd_per_1e9_tokens", "hours_per_1e9_tokens"};
  char dir[64], p[128];
  const char *args[] = {"plan", DATA "gpt-small.ini", "--set",
                        "training.global_batch=4", "--set",
                        "topology.gpu.memory=600MiB", "--set",
                        "topology.node.host_memory=1MiB", "--max-gpus", "1",
                        "--csv", p, NULL};
  table t;
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  path_in(dir, "plan.csv", p, sizeof p);
  run(args);
  assert_int_equal(r.status, 3);
  assert_null(strstr(r.out, "inf"));
  assert_null(strstr(r.out, "nan"));
  text = tu_read_file(p);
  assert_non_null(text);
  assert_null(strstr(text, "inf"));
  assert_null(strstr(text, "nan"));
  {
    int setup = 0; /* every layout stops in setup */
    for (const char *at = text; (at = strstr(at, "out of memory at setup "));
         at++)
      setup++;
    assert_int_equal(setup, 6);
  }
  free(text);
  read_csv(p, &t);
  /* nothing fits, so plan also tries offload: ZeRO-1/2/3 with the
   * optimizer, ZeRO-3 also with the parameters in host memory, and ZeRO-3
   * with the optimizer on the built-in H100 node's NVMe and the
   * parameters in host memory, each with the 6 above (30 layouts), whose
   * 1 MiB host runs out in setup too */
  assert_int_equal(t.total_rows, 1 + 6 + 30);
  assert_contains(r.out, "nothing fits without offload (6 layouts)");
  for (int row = 1; row < t.n_rows; row++) {
    assert_string_equal(cell(&t, row, "status"), "oom");
    for (size_t k = 0; k < sizeof derived / sizeof derived[0]; k++)
      assert_string_equal(cell(&t, row, derived[k]), "");
    assert_string_equal(cell(&t, row, "extrapolated"), "false");
  }
  tu_remove_dir(dir);
}

/* sweep reads its base input first, as fit and plan do: a file or base
 * --set that no combination can fix is one message and exit 1, nothing
 * simulated; a base that a varied key makes valid still sweeps. */
static void test_sweep_checks_its_base_input_first(void **state)
{
  static const char *const bad_file[] = {"sweep", DATA "bad/unknown-key.ini",
                                         "--vary", "training.micro_batch=1,2",
                                         NULL};
  static const char *const bad_set[] = {"sweep", DATA "gpt-small.ini", "--set",
                                        "model.heads=x", "--vary",
                                        "training.micro_batch=1,2", NULL};
  /* tp = 3 does not divide 8 heads; the sweep replaces it */
  static const char *const fixed[] = {"sweep", DATA "bad/tp-heads.ini",
                                      "--vary", "parallel.tp=1,2", NULL};
  (void)state;
  run(bad_file);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "unknown-key.ini:4: unknown key 'hiden' in [model]");
  assert_string_equal(r.out, "");
  run(bad_set);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "vsim: --set model.heads=x: not a number");
  assert_string_equal(r.out, "");
  run(fixed);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "2 combinations: 2 fit, 0 out of memory, 0 invalid");
}

/* A --vary that cannot be right fails before anything is simulated, and
 * the message names --vary, not --set: a key or value of the files that
 * is wrong is bad input (exit 1, as the same --set; bad-input review: it
 * was 2), a --vary that contradicts itself a usage error (exit 2). */
static void test_vary_errors_name_the_vary_option(void **state)
{
  static const struct {
    const char *vary[2];
    const char *message;
  } cases[] = {
      {{"model.hiden=1,2"},
       "vsim: --vary model.hiden: unknown key 'hiden' in [model]; valid keys: "
       "arch, layers, hidden,"},
      {{"gpus.x=1"}, "vsim: --vary gpus.x: unknown section [gpus]"},
      {{"topology.gpu.memroy=1GiB"},
       "vsim: --vary topology.gpu.memroy: unknown key 'memroy' in [gpu]"},
      {{"parallel.zero=nan"}, "vsim: --vary parallel.zero=nan: not a number"},
      {{"topology.gpu.memory=0"},
       "vsim: --vary topology.gpu.memory=0: must be greater than 0"},
      {{"gpus=1,0"}, "vsim: --vary gpus=0: a GPU count is a whole number"},
      {{"training.micro_batch=1,2", "training.micro_batch=4"},
       "vsim: --vary training.micro_batch given twice"},
      {{"gpus=1,2", "gpus=4"}, "vsim: --vary gpus given twice"},
      {{"parallel.pp_layers=2,2"},
       "vsim: --vary parallel.pp_layers: a list-valued key cannot be varied"},
      {{"training.micro_batch=2,2.0"},
       "vsim: --vary training.micro_batch lists 2.0 twice (as 2)"},
      /* a size or a bool spelt two ways parses to one value */
      {{"topology.gpu.memory=1GiB,1024MiB"},
       "vsim: --vary topology.gpu.memory lists 1024MiB twice (as 1GiB)"},
      {{"training.fused_cross_entropy=true,yes"},
       "vsim: --vary training.fused_cross_entropy lists yes twice (as true)"},
      {{"runtime.expandable_segments=1,true"},
       "vsim: --vary runtime.expandable_segments lists true twice (as 1)"},
      /* and a file named two ways, resolved beside the workload */
      {{"model.hf_config=../../models/llama-2-7b.json,"
        "../../models/./llama-2-7b.json"},
       "vsim: --vary model.hf_config lists ../../models/llama-2-7b.json "
       "twice (as ../../models/./llama-2-7b.json)"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *args[] = {"sweep", DATA "gpt-small.ini", "--vary",
                          cases[i].vary[0], NULL, NULL, NULL};
    int status = i < 5 ? 1 : 2; /* the first five: the files' keys */
    if (cases[i].vary[1]) {
      args[4] = "--vary";
      args[5] = cases[i].vary[1];
    }
    run(args);
    if (r.status != status || !strstr(r.err, cases[i].message))
      fail_msg("%s: status %d, stderr: %s (wanted: %s)", cases[i].vary[0],
               r.status, r.err, cases[i].message);
    assert_null(strstr(r.err, "--set"));
    assert_string_equal(r.out, "");
  }
}

/* A key given twice is a usage error, never a silent override: two --set
 * of one key, a --vary of a key a --set fixes, --vary gpus with --gpus. */
static void test_key_given_twice_is_a_usage_error(void **state)
{
  static const struct {
    const char *args[8];
    const char *message;
  } cases[] = {
      {{"show", DATA "gpt-small.ini", "--set", "training.micro_batch=1",
        "--set", "training.micro_batch=2"},
       "vsim: --set training.micro_batch=1 and --set training.micro_batch=2 "
       "both set training.micro_batch; give each key once"},
      {{"sweep", DATA "gpt-small.ini", "--set", "training.micro_batch=4",
        "--vary", "training.micro_batch=1,2"},
       "vsim: --set training.micro_batch=4 and --vary training.micro_batch=... "
       "both set training.micro_batch; give one"},
      {{"sweep", DATA "gpt-small.ini", "--gpus", "4", "--vary", "gpus=1,2"},
       "vsim: --gpus 4 and --vary gpus=... both set the GPU count; give one"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run(cases[i].args);
    if (r.status != 2 || !strstr(r.err, cases[i].message))
      fail_msg("case %zu: status %d, stderr: %s (wanted: %s)", i, r.status,
               r.err, cases[i].message);
    assert_string_equal(r.out, "");
  }
}

/* --max-memory 0 is refused for being 0, not for a missing unit (a bare
 * 0 is the one size without one). */
static void test_limit_zero_says_why(void **state)
{
  const char *args[] = {"run", DATA "gpt-small.ini", "--max-memory", "0",
                        NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "vsim: --max-memory needs a size (e.g. 16GiB) above "
                         "0, got '0'\n");
}

static void test_capacity_help_and_usage(void **state)
{
  static const char *const cmds[] = {"sweep", "fit", "plan"};
  static const char *const no_vary[] = {"sweep", DATA "gpt-small.ini", NULL};
  static const char *const bad_vary[] = {"sweep", DATA "gpt-small.ini",
                                         "--vary", "micro_batch", NULL};
  static const char *const bad_key[] = {"fit", DATA "gpt-small.ini",
                                        "--vary-key", "model.layers", NULL};
  (void)state;
  for (int i = 0; i < 3; i++) {
    const char *args[] = {cmds[i], "--help", NULL};
    run(args);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "usage: vsim ");
  }
  run(no_vary);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "sweep needs at least one --vary");
  run(bad_vary);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "expected section.key=v1,v2");
  run(bad_key);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--vary-key takes training.micro_batch or model.seq_len");
}

static void test_keys_lists_every_key(void **state)
{
  static const char *const args[] = {"keys", NULL};
  static const char *const extra[] = {"keys", "extra", NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "| `[parallel] pp_layers` | list | even split |");
  assert_contains(r.out, "| `[gpu] memory` | size | required |");
  run(extra);
  assert_int_equal(r.status, 2);
}

static void test_show_prints_resolved_config(void **state)
{
  static const char *const args[] = {"show", "workloads/llama2-7b.ini",
                                     "--gpus", "8", NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "kv_heads = 32    ; default");
  assert_contains(r.out, "dp = 8");
  /* Llama-2-7B: 32*(4h^2 + 3hf + 2h) + 2Vh + h with h 4096, f 11008, V 32000 */
  assert_contains(r.out, "parameters = 6738415616 (6.738 B)");
  {
    /* a list key is printed as it is written, so the output reads back */
    static const char *const split[] = {"show", "workloads/llama2-7b.ini", "--gpus",
                                        "8", "--set", "parallel.pp=2", "--set",
                                        "parallel.pp_layers=12,20", "--set",
                                        "parallel.zero=1", NULL};
    run(split);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "\npp_layers = 12,20\n");
    assert_contains(r.out, "\ndropout = 0    ; default\n");
  }
  {
    /* a topology key given by --set is no workload key: a comment says
     * so, which a user would give again (review: it vanished, and the
     * output run back had the file's 80 GB) */
    static const char *const topo[] = {
        "show",  "workloads/llama2-7b.ini",   "--gpus", "8",
        "--set", "topology.gpu.memory=40GiB", NULL};
    run(topo);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "\n# topology: --set topology.gpu.memory=40GiB "
                           "(not written above: give it again with this "
                           "file)\n");
    run(args);
    assert_null(strstr(r.out, "# topology:"));
  }
}

/* What `show` prints with its "; default" marks and first line removed,
 * in out (the rest: keys, values and the derived comments). */
static void show_body(const char *text, char *out, size_t len)
{
  const char *p = strchr(text, '\n');
  size_t used = 0;
  for (p = p ? p + 1 : text; *p && used + 1 < len;) {
    size_t n = strcspn(p, "\n");
    /* where a value came from (default, hf_config) is not the job */
    const char *mark = strstr(p, "    ; ");
    size_t keep = mark && mark < p + n && p[0] != ';' ? (size_t)(mark - p) : n;
    if (strncmp(p, "; hf_config =", 13) != 0)
      used += (size_t)snprintf(out + used, len - used, "%.*s\n", (int)keep, p);
    p += n + (p[n] == '\n');
  }
}

/* Issue 21, D3: `vsim show`'s output is a workload that loads back (the
 * empty pp_layers and the derived figures are comments) and shows the
 * same job with the same --gpus, for every shipped workload and a
 * pipeline with an even split; dp and global_batch left to their
 * defaults are comments too, so it takes another --gpus (as a key,
 * "dp = 1" refused --gpus 8). */
static void test_show_output_loads_back(void **state)
{
  static const char *const cases[][9] = {
      {"show", "workloads/llama2-7b.ini", "--gpus", "16", "--set",
       "parallel.pp=2", "--set", "parallel.zero=1", NULL},
      {"show", "workloads/llama2-70b.ini", NULL},
      {"show", "workloads/gpt3-175b.ini", NULL},
      {"show", "workloads/llama3-405b.ini", NULL},
      {"show", "workloads/llama3-8b-lora.ini", NULL},
      {"show", "workloads/llama2-70b-qlora.ini", NULL},
      {"show", "workloads/gpt-13b-offload.ini", NULL},
      {"show", "workloads/mistral-7b-lora.ini", NULL},
      {"show", "workloads/llama3-8b-full-adam8bit.ini", NULL},
      {"show", "workloads/megatron-gpt-7b.ini", NULL},
      {"show", "workloads/deepspeed-gpt-zero2.ini", NULL},
      {"show", "workloads/torchtitan-llama3-8b.ini", NULL},
      {"show", "workloads/hf-bert-large.ini", NULL},
      {"show", "workloads/hf-llama3-8b-lora.ini", NULL},
      {"show", "workloads/mixtral-8x7b.ini", NULL},
      {"show", "workloads/mixtral-8x7b-ep8.ini", NULL},
      {"show", "workloads/llama3-8b-128k-cp8.ini", NULL},
      {"show", "workloads/llama3-70b-128k-cp4.ini", NULL},
      {"show", "workloads/mixtral-8x7b-h200.ini", NULL},
      {"show", "workloads/deepseek-v3.ini", NULL},
      {"show", "workloads/gemma2-9b-qlora.ini", NULL},
  };
  static char first[16384], second[16384];
  char path[64];
  (void)state;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const char *again[] = {"show", path, NULL, NULL, NULL};
    if (cases[c][2]) { /* its --gpus */
      again[2] = cases[c][2];
      again[3] = cases[c][3];
    }
    run(cases[c]);
    assert_int_equal(r.status, 0);
    show_body(r.out, first, sizeof first);
    tu_write_temp(r.out, ".ini", path, sizeof path);
    run(again);
    if (r.status != 0)
      fail_msg("%s: its show output does not load back: %s", cases[c][1],
               r.err);
    show_body(r.out, second, sizeof second);
    assert_string_equal(first, second);
    if (c == 0) { /* 16 GPUs shown: dp 8; another count of GPUs loads */
      const char *other[] = {"run", path, "--gpus", "32", NULL};
      assert_contains(first, "; dp = 8    ; default: gpus / (tp*cp*pp), or "
                             "1 (it follows --gpus)\n");
      run(other);
      if (r.status != 0 && r.status != 3)
        fail_msg("its show output refuses --gpus 32: %s", r.err);
    }
    unlink(path);
  }
}

/* Megatron-LM's bucket, max(4e7, 1e6 x dp) parameters, follows the GPU
 * count as dp does: show writes it as a comment, so that its output run
 * on 256 GPUs is the workload run on 256 GPUs, summary.csv byte for byte
 * (at dp 64 the bucket it wrote for 8 GPUs was kept: another peak). */
static void test_show_megatron_bucket_follows_gpus(void **state)
{
  char dir[64], path[64], a[128], b[128], ca[192], cb[192];
  const char *show[] = {
      "show",  "workloads/llama2-7b.ini",     "--gpus", "8",
      "--set", "training.framework=megatron", "--set",  "parallel.zero=1",
      "--set", "training.global_batch=512",   NULL};
  const char *shown[] = {"run", path, "--gpus", "256", "--csv", a, NULL};
  const char *direct[] = {
      "run",   "workloads/llama2-7b.ini",     "--gpus", "256",
      "--set", "training.framework=megatron", "--set",  "parallel.zero=1",
      "--set", "training.global_batch=512",   "--csv",  b,
      NULL};
  char *ta, *tb;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  path_in(dir, "a", a, sizeof a);
  path_in(dir, "b", b, sizeof b);
  run(show);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "\n; bucket = 156250KiB    ; framework preset: "
                         "Megatron-LM's bucket");
  tu_write_temp(r.out, ".ini", path, sizeof path);
  run(shown);
  assert_int_equal(r.status, 0);
  run(direct);
  assert_int_equal(r.status, 0);
  assert_non_null(ta = tu_read_file(path_in(a, "summary.csv", ca, sizeof ca)));
  assert_non_null(tb = tu_read_file(path_in(b, "summary.csv", cb, sizeof cb)));
  assert_string_equal(ta, tb);
  free(ta);
  free(tb);
  unlink(path);
  tu_remove_dir(dir);
}

/* Runs `sh -c script` with VSIM_BIN as $0 (from the source directory). */
static void run_shell(const char *script)
{
  const char *const args[] = {"-c", script, VSIM_BIN, NULL};
  tu_run_program(&r, "/bin/sh", args);
}

/* Issue 21, D1: a report that cannot be written is an error with the
 * reason, not exit 0: stdout on /dev/full (ENOSPC), and a plan (1.6 kB)
 * written to a file past a 512-byte file-size limit (EFBIG, as on a full
 * quota; the limit leaves room for the message on stderr). */
static void test_unwritable_report_is_an_error(void **state)
{
  (void)state;
  run_shell("exec \"$0\" run workloads/llama2-7b.ini --gpus 8 >/dev/full");
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "vsim: writing the report to standard output "
                         "failed: No space left on device");
  run_shell("exec \"$0\" --help >/dev/full");
  assert_int_equal(r.status, 1);
  run_shell("f=\"${TMPDIR:-/tmp}/vsim-d1-$$.txt\"; ulimit -f 1; \"$0\" plan "
            "workloads/llama2-7b.ini --max-gpus 8 --jobs 2 >\"$f\"; rc=$?; "
            "rm -f \"$f\"; exit $rc");
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "failed: File too large");
}

/* Every row of a CSV file, visited with the header: a row's cell by its
 * column name. */
typedef struct csv_scan {
  char head[MAX_FIELDS][64];  /* the header */
  char row[MAX_FIELDS][64];   /* the row being read */
  int n_head, n_row;          /* fields in each */
  int rows;                   /* rows visited (header excluded) */
  void (*visit)(const struct csv_scan *s, void *user);
  void *user;
} csv_scan;

static const char *scan_cell(const csv_scan *s, const char *column)
{
  for (int i = 0; i < s->n_head && i < s->n_row; i++)
    if (strcmp(s->head[i], column) == 0)
      return s->row[i];
  fail_msg("no column %s", column);
  return NULL;
}

static unsigned long long scan_u64(const csv_scan *s, const char *column)
{
  return strtoull(scan_cell(s, column), NULL, 10);
}

static void scan_field(void *data, size_t len, void *user)
{
  csv_scan *s = user;
  char(*to)[64] = s->n_head == 0 ? s->head : s->row; /* header first */
  size_t k = len < 63 ? len : 63;
  if (s->n_row < MAX_FIELDS) {
    memcpy(to[s->n_row], data, k);
    to[s->n_row][k] = '\0';
    s->n_row++;
  }
}

static void scan_row(int c, void *user)
{
  csv_scan *s = user;
  (void)c;
  if (s->n_head == 0) {
    s->n_head = s->n_row;
  } else {
    s->visit(s, s->user);
    s->rows++;
  }
  s->n_row = 0;
}

/* Calls visit on every row of the CSV file at path; the number of rows. */
static int scan_csv(const char *path,
                    void (*visit)(const csv_scan *s, void *user), void *user)
{
  static csv_scan s;
  struct csv_parser p;
  char *text = tu_read_file(path);
  if (!text)
    fail_msg("cannot read %s", path);
  memset(&s, 0, sizeof s);
  s.visit = visit;
  s.user = user;
  assert_int_equal(csv_init(&p, CSV_APPEND_NULL), 0);
  assert_int_equal(csv_parse(&p, text, strlen(text), scan_field, scan_row, &s),
                   strlen(text));
  csv_fini(&p, scan_field, scan_row, &s);
  csv_free(&p);
  free(text);
  return s.rows;
}

/* What test_selective_flash_reruns_the_kernel sees in ops.csv: each
 * layer's forward flash_attn (its first), and the re-runs of it. */
typedef struct rerun_seen {
  double fwd[4], fwd_flops[4]; /* by layer */
  int reruns, matched;         /* recompute_attn rows, equal to forward */
} rerun_seen;

static void check_rerun_row(const csv_scan *s, void *user)
{
  rerun_seen *seen = user;
  const char *op = scan_cell(s, "op");
  unsigned long long layer = scan_u64(s, "layer");
  double t = strtod(scan_cell(s, "end_s"), NULL) -
             strtod(scan_cell(s, "start_s"), NULL);
  double flops = strtod(scan_cell(s, "flops"), NULL);
  if (strcmp(op, "flash_attn") != 0 && strcmp(op, "recompute_attn") != 0)
    return;
  assert_true(layer < 4 && isfinite(t) && t > 0);
  if (strcmp(op, "flash_attn") == 0 && seen->fwd[layer] == 0) {
    seen->fwd[layer] = t;
    seen->fwd_flops[layer] = flops;
  } else if (strcmp(op, "recompute_attn") == 0) {
    seen->reruns++;
    seen->matched +=
        fabs(t - seen->fwd[layer]) < 1e-9 && flops == seen->fwd_flops[layer];
  }
}

/* checkpointing = selective under flash attention re-runs the kernel
 * before each layer's backward, as Megatron-LM's core_attn recompute
 * does (attention.py, _checkpointed_attention_forward): in ops.csv, one
 * recompute_attn a layer and micro-batch, as long as the layer's forward
 * flash_attn and of its FLOPs; none re-runs nothing. */
static void test_selective_flash_reruns_the_kernel(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"run",   DATA "gpt-small.ini",       "--set", NULL,
                        "--set", "training.attention=flash", "--csv", NULL,
                        NULL};
  rerun_seen seen;
  (void)state;
  args[7] = tu_temp_dir(dir, sizeof dir);
  args[3] = "training.checkpointing=selective";
  run(args);
  assert_int_equal(r.status, 0);
  memset(&seen, 0, sizeof seen);
  scan_csv(path_in(dir, "ops.csv", p, sizeof p), check_rerun_row, &seen);
  assert_int_equal(seen.reruns, 4); /* 4 layers, 1 micro-batch */
  assert_int_equal(seen.matched, 4);
  args[3] = "training.checkpointing=none";
  run(args);
  assert_int_equal(r.status, 0);
  memset(&seen, 0, sizeof seen);
  scan_csv(path_in(dir, "ops.csv", p, sizeof p), check_rerun_row, &seen);
  assert_int_equal(seen.reruns, 0);
}

/* plan.csv's selective rows: with cp = 1, and with cp > 1. */
typedef struct selective_seen {
  int cp1, cp_more;
} selective_seen;

static void count_selective_row(const csv_scan *s, void *user)
{
  selective_seen *seen = user;
  if (strcmp(scan_cell(s, "training.checkpointing"), "selective") != 0)
    return;
  if (scan_u64(s, "parallel.cp") == 1)
    seen->cp1++;
  else
    seen->cp_more++;
}

/* plan leaves selective out under flash attention, where it drops only
 * the kernel's LSE, but tries it under Ulysses context parallelism
 * (cp_comm = a2a), where it also drops the head-group output. */
static void test_plan_tries_selective_under_ulysses(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"plan",   DATA "gpt-small.ini",
                        "--set",  "parallel.cp=2",
                        "--set",  "parallel.cp_comm=a2a",
                        "--set",  "training.global_batch=8",
                        "--set",  "training.attention=flash",
                        "--gpus", "4",
                        "--csv",  NULL,
                        NULL};
  selective_seen seen = {0, 0};
  (void)state;
  args[13] = path_in(tu_temp_dir(dir, sizeof dir), "plan.csv", p, sizeof p);
  run(args);
  assert_int_equal(r.status, 0);
  scan_csv(p, count_selective_row, &seen);
  assert_int_equal(seen.cp1, 0);
  assert_true(seen.cp_more > 0);
}

/* What test_skewed_router_every_rank sees in summary.csv. */
typedef struct skew_seen {
  unsigned long long worst[2]; /* each stage's peak in stage mode */
  int hottest, others;         /* ranks at it, and below it */
} skew_seen;

static void check_skew_row(const csv_scan *s, void *user)
{
  skew_seen *seen = user;
  unsigned long long peak = scan_u64(s, "peak_allocated_bytes");
  unsigned long long worst = seen->worst[scan_u64(s, "stage")];
  /* a stage's 32 or 64 ranks (etp 1): ep rank 0 of each 8 holds the
   * hottest expert */
  if (scan_u64(s, "rank") % 32 % 8 == 0) {
    assert_int_equal(peak, worst);
    seen->hottest++;
  } else {
    assert_true(peak < worst);
    seen->others++;
  }
}

/* Runs args (--csv at csv_at) and reads each stage's peak allocated
 * bytes of its summary.csv into worst (stage mode). */
static void stage_peaks(const char **args, size_t csv_at,
                        unsigned long long *worst, size_t stages)
{
  char dir[64], p[128];
  table t;
  args[csv_at] = tu_temp_dir(dir, sizeof dir);
  run(args);
  assert_int_equal(r.status, 0);
  read_csv(path_in(dir, "summary.csv", p, sizeof p), &t);
  for (size_t s = 0; s < stages; s++)
    worst[s] = strtoull(cell(&t, (int)s + 1, "peak_allocated_bytes"), NULL,
                        10);
  tu_remove_dir(dir);
}

/* Runs args (every rank, --csv at csv_at) and checks its summary.csv's 64
 * ranks against seen's stage peaks (check_skew_row): 8 hold the hottest
 * expert, 56 do not. */
static void check_skewed_ranks(const char **args, size_t csv_at,
                               skew_seen *seen)
{
  char dir[64], p[128];
  args[csv_at] = tu_temp_dir(dir, sizeof dir);
  run(args);
  assert_int_equal(r.status, 0);
  assert_int_equal(scan_csv(path_in(dir, "summary.csv", p, sizeof p),
                            check_skew_row, seen),
                   64);
  assert_int_equal(seen->hottest, 8);
  assert_int_equal(seen->others, 56);
  tu_remove_dir(dir);
}

/* The worst rank's peak of a skewed router, simulated: Mixtral's sample
 * (ep 8, so a rank holds E / ep = 1 expert) with 4 layers kept whole
 * (no checkpointing). Balanced, each rank's expert receives kT = 2 x 4096
 * slots; with routing_skew = 0.5 the hottest receives 1.5 x kT ep / E =
 * 12,288, and each of its 4096 more slots keeps, in every layer, the
 * experts' input (2h bytes), their SwiGLU tensors (6 f_e) and fc2's input
 * (2 f_e): h = 4096, f_e = 14336 (Mixtral-8x7B's config). */
static unsigned long long skewed_worst(const char *skew, const char *field)
{
  char set[48], dir[64], p[128];
  const char *args[] = {"run", "workloads/mixtral-8x7b-ep8.ini", "--set",
                        "model.layers=4", "--set",
                        "training.checkpointing=none", "--set", set,
                        "--csv", NULL, NULL};
  table t;
  unsigned long long v;
  snprintf(set, sizeof set, "model.routing_skew=%s", skew);
  args[9] = tu_temp_dir(dir, sizeof dir);
  run(args);
  assert_int_equal(r.status, 0);
  read_csv(path_in(dir, "summary.csv", p, sizeof p), &t);
  v = strtoull(cell(&t, 1, field), NULL, 10); /* stage mode: one rank */
  tu_remove_dir(dir);
  return v;
}

static void test_skewed_router_raises_the_peak(void **state)
{
  const unsigned long long layers = 4, more_slots = 12288 - 8192;
  const unsigned long long slot_bytes = 2 * 4096 + 8 * 14336;
  (void)state;
  assert_int_equal(skewed_worst("0.5", "activations_bytes") -
                       skewed_worst("0", "activations_bytes"),
                   layers * more_slots * slot_bytes);
  assert_int_equal(skewed_worst("0.5", "peak_allocated_bytes") -
                       skewed_worst("0", "peak_allocated_bytes"),
                   layers * more_slots * slot_bytes);
}

/* A skewed router with every GPU simulated: Mixtral's sample (ep 8 over
 * dp 64) gives the hottest expert to ep rank 0 of each of the 8 expert
 * groups, whose peak is the one-rank-per-stage run's (that rank stands
 * for the worst), while the 56 others, sharing what it leaves, peak
 * lower; the header says where the hottest expert is. */
static void test_skewed_router_every_rank(void **state)
{
  const char *stage[] = {"run", "workloads/mixtral-8x7b-ep8.ini", "--csv",
                         NULL, NULL};
  const char *all[] = {"run", "workloads/mixtral-8x7b-ep8.ini", "--ranks",
                       "all", "--csv", NULL, NULL};
  skew_seen seen = {{0, 0}, 0, 0};
  (void)state;
  stage_peaks(stage, 3, seen.worst, 1);
  check_skewed_ranks(all, 5, &seen);
  assert_contains(r.out, "the hottest expert gets 1.5 x its share, on ep "
                         "rank 0 of each expert group (the others share "
                         "the rest)");
  {
    /* two stages of tp 2 x dp 16 with each expert whole (etp 1): a stage's
     * 32 slots make 4 expert groups of 8 consecutive ones, whose first
     * holds the hottest expert, the same slot on both stages */
    const char *stage2[] = {"run", "workloads/mixtral-8x7b-ep8.ini",
                            "--set", "parallel.pp=2", "--set", "parallel.tp=2",
                            "--set", "parallel.sequence_parallel=true",
                            "--set", "parallel.dp=16", "--set",
                            "parallel.etp=1", "--csv", NULL, NULL};
    const char *all2[] = {"run", "workloads/mixtral-8x7b-ep8.ini",
                          "--set", "parallel.pp=2", "--set", "parallel.tp=2",
                          "--set", "parallel.sequence_parallel=true",
                          "--set", "parallel.dp=16", "--set",
                          "parallel.etp=1", "--ranks", "all", "--csv", NULL,
                          NULL};
    skew_seen two = {{0, 0}, 0, 0};
    stage_peaks(stage2, 13, two.worst, 2);
    check_skewed_ranks(all2, 15, &two);
  }
}

/* Runs args with args[csv_at] = p, plan.csv in a new temporary folder
 * dir[64] (p[128]), and checks its exit status. */
static void run_plan_csv(const char **args, size_t csv_at, char *dir, char *p,
                         int status)
{
  tu_temp_dir(dir, 64);
  args[csv_at] = path_in(dir, "plan.csv", p, 128);
  run(args);
  if (r.status != status)
    fail_msg("exit %d, not %d:\n%s%s", r.status, status, r.out, r.err);
}

/* What test_plan_tries_uneven_pipelines counts. */
typedef struct uneven_seen {
  int pp16;        /* rows with pp 16 */
  int uneven;      /* rows with a pp_layers split */
} uneven_seen;

static void check_uneven_row(const csv_scan *s, void *user)
{
  uneven_seen *seen = user;
  unsigned long long pp = scan_u64(s, "parallel.pp"), sum = 0;
  const char *split = scan_cell(s, "parallel.pp_layers");
  assert_int_equal(scan_u64(s, "gpus"), 16); /* --gpus 16 holds the count */
  if (126 % pp == 0) {
    assert_string_equal(split, ""); /* even: no split */
    return;
  }
  seen->uneven++;
  for (const char *p = split; *p; p += *p == ',')
    sum += strtoull(p, (char **)&p, 10);
  assert_int_equal(sum, 126);
  if (pp == 16) {
    /* 8 each is 128: the first and the last stage lose one */
    assert_string_equal(split, "7,8,8,8,8,8,8,8,8,8,8,8,8,8,8,7");
    seen->pp16++;
  }
}

/* Issue 18, item 7: plan tries pipeline depths that do not divide the
 * layers, powers of two split unevenly: Llama 3 405B's 126 layers on
 * exactly 16 GPUs (--gpus) get pp = 16 as 7,8,...,8,7 (pp = 16 does not
 * divide 126; before, only 1, 2, 3, 6, 7, 9, 14, ... were tried). 16 GPUs
 * are far too few for 405B, so every layout stops at its first
 * out-of-memory: fast, and exit 3. */
static void test_plan_tries_uneven_pipelines(void **state)
{
  char dir[64], p[128];
  const char *args[] = {
      "plan",  "workloads/llama3-405b.ini",     "--gpus", "16", "--jobs", "2",
      "--set", "topology.node.nvme_capacity=0", "--csv",  NULL, NULL};
  uneven_seen seen = {0, 0};
  (void)state;
  run_plan_csv(args, 9, dir, p, 3); /* no NVMe: nothing fits */
  assert_contains(r.out, "on exactly 16 x H100");
  assert_contains(r.out, "DOES NOT FIT on any layout of exactly 16 GPUs");
  assert_true(scan_csv(p, check_uneven_row, &seen) > 0);
  assert_true(seen.pp16 > 0);
  assert_true(seen.uneven > seen.pp16); /* pp = 4 and 8 are uneven too */
  tu_remove_dir(dir);
}

/* What test_plan_tries_interleaved_where_allowed counts. */
typedef struct interleaved_seen {
  int allowed;      /* 1F1B rows on which interleaving is allowed */
  int interleaved;  /* interleaved rows */
} interleaved_seen;

static void check_interleaved_row(const csv_scan *s, void *user)
{
  interleaved_seen *seen = user;
  unsigned long long pp = scan_u64(s, "parallel.pp"),
                     accum = 16 / (scan_u64(s, "training.micro_batch") *
                                   scan_u64(s, "parallel.dp"));
  /* Megatron-LM: pp > 1, an even split of layers per stage divisible by
   * the 2 virtual stages (4 layers: pp = 2 only), micro-batches per step
   * a multiple of pp */
  bool allowed = pp == 2 && accum % pp == 0;
  if (strcmp(scan_cell(s, "parallel.schedule"), "interleaved") == 0) {
    assert_true(allowed);
    assert_int_equal(scan_u64(s, "parallel.virtual_stages"), 2);
    seen->interleaved++;
    return;
  }
  assert_string_equal(scan_cell(s, "parallel.schedule"), "1f1b");
  assert_int_equal(scan_u64(s, "parallel.virtual_stages"), 1);
  seen->allowed += allowed;
}

/* Issue 18, item 7: plan also tries the interleaved schedule with 2
 * virtual stages, on exactly the even splits its search allows, each
 * beside its 1F1B twin; gpt-small (4 layers) on 4 GPUs with a global
 * batch of 16: pp = 2 with an even number of micro-batches per step. */
static void test_plan_tries_interleaved_where_allowed(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"plan", DATA "gpt-small.ini", "--set",
                        "training.global_batch=16", "--gpus", "4", "--jobs",
                        "2", "--csv", NULL, NULL};
  interleaved_seen seen = {0, 0};
  (void)state;
  run_plan_csv(args, 9, dir, p, 0);
  assert_contains(r.out, "interleaved layouts: the micro-batches per step are "
                         "not a multiple of pp");
  assert_contains(r.out, "interleaved layouts: the layers per stage are not "
                         "an even split");
  scan_csv(p, check_interleaved_row, &seen);
  assert_true(seen.interleaved > 0);
  assert_int_equal(seen.interleaved, seen.allowed);
  tu_remove_dir(dir);
}

/* Counts the rows with a pipeline (user: int) and fails on any schedule
 * other than 1F1B. */
static void check_1f1b_row(const csv_scan *s, void *user)
{
  assert_string_equal(scan_cell(s, "parallel.schedule"), "1f1b");
  *(int *)user += scan_u64(s, "parallel.pp") > 1;
}

/* DeepSpeed's pipeline engine runs 1F1B alone: under framework =
 * deepspeed plan tries no interleaved twin and says why, on the layouts
 * where Megatron-LM's rules would have tried one (above). */
static void test_plan_deepspeed_pipelines_run_1f1b(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"plan",   DATA "gpt-small.ini",
                        "--set",  "training.global_batch=16",
                        "--set",  "training.framework=deepspeed",
                        "--gpus", "4",
                        "--jobs", "2",
                        "--csv",  NULL,
                        NULL};
  int pipelined = 0;
  (void)state;
  run_plan_csv(args, 11, dir, p, 0);
  assert_contains(r.out, "interleaved layouts: DeepSpeed's pipeline engine "
                         "runs 1F1B alone");
  scan_csv(p, check_1f1b_row, &pipelined);
  assert_true(pipelined > 0);
  tu_remove_dir(dir);
}

/* Counts plan.csv's simulated rows by ZeRO stage (user: int[4]); none is
 * invalid. */
static void count_zero_row(const csv_scan *s, void *user)
{
  unsigned long long zero = scan_u64(s, "parallel.zero");
  assert_true(zero <= 3);
  assert_string_not_equal(scan_cell(s, "status"), "invalid");
  ((int *)user)[zero]++;
}

/* A workload that tunes DeepSpeed's ZeRO-3 coordinator still plans ZeRO-1
 * and -2 layouts (the limits dropped there), not only ZeRO-3 ones. */
static void test_plan_drops_coordinator_limits_below_zero3(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"plan",   DATA "gpt-small.ini",
                        "--set",  "training.framework=deepspeed",
                        "--set",  "parallel.zero=3",
                        "--set",  "parallel.max_live_parameters=500000",
                        "--set",  "training.global_batch=16",
                        "--gpus", "4",
                        "--jobs", "2",
                        "--csv",  NULL,
                        NULL};
  int zero[4] = {0, 0, 0, 0};
  (void)state;
  run_plan_csv(args, 15, dir, p, 0);
  assert_null(strstr(r.out, "invalid"));
  scan_csv(p, count_zero_row, zero);
  assert_true(zero[1] > 0 && zero[2] > 0 && zero[3] > 0);
  tu_remove_dir(dir);
}

/* What test_plan_varies_expert_and_context_parallelism counts: rows by
 * expert- and context-parallel size (index: log2 of the size). */
typedef struct ep_cp_seen {
  int ep[8], cp[8];
  int whole;   /* rows with tp > 1 and whole experts (etp = 1) */
  unsigned long long params[2]; /* tp 2, ep 1, pp 1, ZeRO-0: a GPU's
                                   params at etp = 2 and at etp = 1 */
} ep_cp_seen;

static int log2_exact(unsigned long long v)
{
  int k = 0;
  assert_true(v > 0 && (v & (v - 1)) == 0); /* plan tries powers of two */
  while (v >>= 1)
    k++;
  assert_true(k < 8);
  return k;
}

static void check_ep_cp_row(const csv_scan *s, void *user)
{
  ep_cp_seen *seen = user;
  unsigned long long ep = scan_u64(s, "parallel.ep"),
                     cp = scan_u64(s, "parallel.cp"),
                     dp = scan_u64(s, "parallel.dp"),
                     tp = scan_u64(s, "parallel.tp"),
                     etp = scan_u64(s, "parallel.etp");
  /* every layout plan simulates is one vsim accepts */
  assert_string_not_equal(scan_cell(s, "status"), "invalid");
  assert_int_equal(scan_u64(s, "gpus"),
                   dp * tp * cp * scan_u64(s, "parallel.pp"));
  assert_true(etp == tp || etp == 1); /* Megatron's default, or whole */
  if (ep > 1 || etp != tp) { /* Megatron-LM's rules: ep | experts (4),
                                etp x ep | tp x dp x cp, zero <= 1 */
    assert_int_equal(4 % ep, 0);
    assert_int_equal(tp * dp * cp % (etp * ep), 0);
    assert_true(scan_u64(s, "parallel.zero") <= 1);
  }
  seen->whole += tp > 1 && etp == 1;
  if (tp == 2 && ep == 1 && scan_u64(s, "parallel.pp") == 1 &&
      scan_u64(s, "parallel.zero") == 0)
    seen->params[etp == 1] = scan_u64(s, "params_bytes");
  seen->ep[log2_exact(ep)]++;
  seen->cp[log2_exact(cp)]++;
}

/* Issue 16, item 7: plan enumerates expert parallelism where the model
 * has experts (ep = 1, 2, 4 dividing gpt-small's 4 experts and dp, on 8
 * GPUs), with tp > 1 expert tensor parallelism at tp and whole experts
 * (etp = 1), and context parallelism where the sequence is long (8192
 * tokens, Megatron Core's "8K+": cp = 1 to 8), each with a column in the
 * table;
 * a dense model on short sequences keeps cp = ep = 1 and the table has
 * neither column. */
static void test_plan_varies_expert_and_context_parallelism(void **state)
{
  char dir[64], p[128];
  const char *moe[] = {"plan", DATA "gpt-small.ini", "--set",
                       "model.experts=4", "--set", "model.experts_per_token=2",
                       "--set", "model.expert_ffn_hidden=1024", "--set",
                       "training.global_batch=16", "--gpus", "8", "--jobs",
                       "2", "--csv", NULL, NULL};
  const char *longseq[] = {"plan", DATA "gpt-small.ini", "--set",
                           "model.seq_len=8192", "--set",
                           "training.global_batch=4", "--gpus", "8", "--jobs",
                           "2", "--csv", NULL, NULL, NULL, NULL};
  const char *dense[] = {"plan", DATA "gpt-small.ini", "--set",
                         "training.global_batch=16", "--gpus", "8", "--jobs",
                         "2", "--csv", NULL, NULL};
  ep_cp_seen seen;
  (void)state;

  memset(&seen, 0, sizeof seen);
  run_plan_csv(moe, 15, dir, p, 0);
  assert_contains(r.out, "  #   gpus   dp  tp  pp  ep etp zero ckpt");
  scan_csv(p, check_ep_cp_row, &seen);
  assert_true(seen.ep[0] > 0 && seen.ep[1] > 0 && seen.ep[2] > 0);
  assert_true(seen.whole > 0); /* and whole experts beside tp > 1 */
  /* ... which ran whole: a GeLU expert's fc1 and fc2 whole, not halved
   * (h fe more), and fc1's bias (fe / 2), for 4 experts in 4 layers at
   * bf16 */
  assert_int_equal(seen.params[1] - seen.params[0],
                   4ull * 4 * (512 * 1024 + 1024 / 2) * 2);
  assert_int_equal(seen.ep[3], 0); /* 8 does not divide 4 experts */
  assert_int_equal(seen.cp[1] + seen.cp[2] + seen.cp[3], 0); /* 128 tokens */
  tu_remove_dir(dir);

  memset(&seen, 0, sizeof seen);
  run_plan_csv(longseq, 11, dir, p, 0);
  assert_contains(r.out, "  #   gpus   dp  tp  pp  cp zero ckpt");
  scan_csv(p, check_ep_cp_row, &seen);
  for (int k = 0; k <= 3; k++)
    assert_true(seen.cp[k] > 0);
  assert_int_equal(seen.ep[1] + seen.ep[2], 0); /* no experts */
  assert_int_equal(seen.whole, 0);
  tu_remove_dir(dir);

  /* Liger's fused loss runs with tp = 1 only: pruned, never invalid */
  memset(&seen, 0, sizeof seen);
  longseq[10] = "--set";
  longseq[11] = "training.fused_cross_entropy=true";
  longseq[12] = "--csv";
  run_plan_csv(longseq, 13, dir, p, 0);
  assert_contains(r.out, "3 (GPUs, tp) pairs: the fused cross-entropy loss");
  scan_csv(p, check_ep_cp_row, &seen);
  assert_true(seen.cp[3] > 0);
  tu_remove_dir(dir);

  memset(&seen, 0, sizeof seen);
  run_plan_csv(dense, 9, dir, p, 0);
  assert_contains(r.out, "  #   gpus   dp  tp  pp zero ckpt");
  assert_true(scan_csv(p, check_ep_cp_row, &seen) == seen.ep[0]);
  assert_int_equal(seen.cp[0], seen.ep[0]);
  tu_remove_dir(dir);
}

/* What test_plan_simulates_only_what_run_accepts looks for in a row. */
typedef struct accepted_seen {
  int dp1_cp8_zero3; /* rows with dp 1, cp 8 and ZeRO-3 */
  int ep_above_1;    /* rows with ep > 1 */
} accepted_seen;

static void check_accepted_row(const csv_scan *s, void *user)
{
  accepted_seen *seen = user;
  if (strcmp(scan_cell(s, "status"), "invalid") == 0)
    fail_msg("plan simulated a layout run refuses: %s",
             scan_cell(s, "reason"));
  seen->dp1_cp8_zero3 += scan_u64(s, "parallel.dp") == 1 &&
                         scan_u64(s, "parallel.cp") == 8 &&
                         scan_u64(s, "parallel.zero") == 3;
  seen->ep_above_1 += scan_u64(s, "parallel.ep") > 1;
}

/* Plan leaves out, before simulating, every layout `vsim run` would
 * refuse, and keeps the ones it accepts: ZeRO with dp = 1 when the
 * layout's own cp shards (one sequence over 8 GPUs), FSDP2 over dp x cp,
 * no expert parallelism beside activation offload, a paged optimizer only
 * with ZeRO-0, optimizer_in_backward only on one micro-batch and GPU. */
static void test_plan_simulates_only_what_run_accepts(void **state)
{
  static const struct {
    const char *sets[5];
    const char *gpus;
    const char *pruned; /* a line plan must print, or NULL */
  } cases[] = {
      {{"model.seq_len=8192", "training.global_batch=1"}, "8", NULL},
      {{"model.seq_len=8192", "training.global_batch=8",
        "training.framework=fsdp2", "parallel.zero=3", "parallel.dp=8"},
       "8",
       NULL},
      {{"model.experts=4", "model.experts_per_token=2",
        "model.expert_ffn_hidden=1024", "training.global_batch=16",
        "training.offload_activations=cpu"},
       "8",
       NULL},
      {{"training.global_batch=16", "training.optimizer=adam8bit",
        "training.paged_optimizer=true"},
       "8",
       "12 ZeRO and offload choices: "
       "bitsandbytes' paged optimizer (paged_optimizer) runs with "
       "zero = 0"},
      {{"training.global_batch=4", "training.micro_batch=4",
        "training.optimizer_in_backward=true"},
       "1",
       "4 micro-batch choices: "
       "optimizer_in_backward needs one micro-batch a step on one GPU"},
  };
  (void)state;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char dir[64], p[128];
    const char *args[24] = {"plan", DATA "gpt-small.ini"};
    size_t n = 2;
    accepted_seen seen = {0, 0};
    for (size_t i = 0; i < 5 && cases[k].sets[i]; i++) {
      args[n++] = "--set";
      args[n++] = cases[k].sets[i];
    }
    args[n++] = "--gpus";
    args[n++] = cases[k].gpus;
    args[n++] = "--jobs";
    args[n++] = "2";
    args[n++] = "--csv";
    run_plan_csv(args, n, dir, p, 0);
    if (cases[k].pruned)
      assert_contains(r.out, cases[k].pruned);
    assert_true(scan_csv(p, check_accepted_row, &seen) > 0);
    if (k == 0) /* the sequence over 8 GPUs, its states sharded over them */
      assert_true(seen.dp1_cp8_zero3 > 0);
    if (k == 2)
      assert_int_equal(seen.ep_above_1, 0);
    tu_remove_dir(dir);
  }
}

/* What test_plan_offload_keeps_experts_together counts: rows without
 * offload and rows offloading the optimizer or the parameters, and of
 * each those with experts in groups of their own. */
typedef struct offload_experts_seen {
  int rows[2], apart[2]; /* [0] without offload, [1] offloading */
} offload_experts_seen;

static void check_offload_experts_row(const csv_scan *s, void *user)
{
  offload_experts_seen *seen = user;
  int off = strcmp(scan_cell(s, "parallel.offload_optimizer"), "none") ||
            strcmp(scan_cell(s, "parallel.offload_params"), "none");
  if (strcmp(scan_cell(s, "status"), "invalid") == 0)
    fail_msg("plan simulated a layout run refuses: %s", scan_cell(s, "reason"));
  seen->rows[off]++;
  seen->apart[off] += scan_u64(s, "parallel.ep") > 1 ||
                      scan_u64(s, "parallel.etp") != scan_u64(s, "parallel.tp");
}

/* Offload is simulated with the routed experts beside the dense weights
 * (vs_workload_experts_apart_allowed): where nothing fits without
 * offload (a 1 GiB GPU), plan's offload pass tries ep = 1 with etp = tp
 * only, while its first pass tried ep 2 and 4 (gpt-small's 4 experts). */
static void test_plan_offload_keeps_experts_together(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"plan",   DATA "gpt-small.ini",
                        "--set",  "model.experts=4",
                        "--set",  "model.experts_per_token=2",
                        "--set",  "model.expert_ffn_hidden=1024",
                        "--set",  "training.global_batch=16",
                        "--set",  "topology.gpu.memory=1GiB",
                        "--gpus", "8",
                        "--jobs", "2",
                        "--csv",  NULL,
                        NULL};
  offload_experts_seen seen = {{0, 0}, {0, 0}};
  (void)state;
  run_plan_csv(args, 17, dir, p, 3); /* nothing fits, even offloaded */
  assert_contains(r.out, "nothing fits without offload");
  scan_csv(p, check_offload_experts_row, &seen);
  assert_true(seen.rows[0] > 0 && seen.rows[1] > 0);
  assert_true(seen.apart[0] > 0);
  assert_int_equal(seen.apart[1], 0);
  tu_remove_dir(dir);
}

/* Issue 18, item 7: plan --topology a,b,c answers for each GPU type (the
 * cheapest and the fastest layout, each row naming its type), then ranks
 * across types by cost per step; a type on which nothing fits says so.
 * Llama 2 7B on exactly 2 GPUs fits in 80 GB (H100, A100), 141 GB
 * (H200) and 180 GB (B200), not in the V100's 32 GB (its optimizer states
 * alone, 12 bytes x 6.7e9 / 2 = 37.7 GiB under ZeRO-3 on 2 GPUs, are over). */
static void test_plan_compares_gpu_types(void **state)
{
  static const char *const types[] = {"H100-SXM-80GB", "A100-SXM4-80GB",
                                      "H200-SXM-141GB", "B200-SXM-180GB"};
  static const char *const args[] = {
      "plan",
      "workloads/llama2-7b.ini",
      "--gpus",
      "2",
      "--jobs",
      "2",
      "--topology",
      "topologies/h100-sxm-8x.ini,topologies/a100-sxm-80g-8x.ini,"
      "topologies/h200-sxm-8x.ini,topologies/v100-sxm-32g-8x.ini,"
      "topologies/b200-sxm-8x.ini",
      "--set",
      "topology.node.host_memory=64GiB",
      NULL};
  char want[128];
  const char *across, *row1;
  (void)state;
  run(args);
  assert_int_equal(r.status, 0);
  for (size_t t = 0; t < 4; t++) {
    const char *at;
    snprintf(want, sizeof want, "cheapest per step on %s", types[t]);
    assert_non_null(at = strstr(r.out, want));
    /* the row under the column header names the type */
    at = strchr(strchr(at, '\n') + 1, '\n') + 1;
    assert_true(strstr(at, types[t]) < strchr(at, '\n'));
    snprintf(want, sizeof want, "fastest on %s", types[t]);
    assert_contains(r.out, want);
  }
  /* nor with offload: 16 B x 6.7e9 of host states over 64 GiB */
  assert_contains(r.out, "nothing fits without offload");
  assert_contains(r.out, "verdict: DOES NOT FIT on any layout of exactly 2 "
                         "V100-SXM2-32GB GPUs");
  assert_null(strstr(r.out, "cheapest per step on V100"));
  assert_no_trailing_blank(r.out);
  across = strstr(r.out, "cheapest per step across the 5 GPU types");
  assert_non_null(across);
  assert_null(strstr(across, "V100")); /* nothing of it fits */
  /* the B200 (topologies/b200-sxm-8x.ini) ranks with the others, first:
   * 2.28x the H100's bf16 peak (2250 / 989 TFLOP/s) at 1.77x its price
   * ($5.3 / $2.99 a GPU-hour) */
  row1 = strchr(strchr(across, '\n') + 1, '\n') + 1;
  assert_true(strstr(row1, "B200-SXM-180GB") != NULL &&
              strstr(row1, "B200-SXM-180GB") < strchr(row1, '\n'));
}

/* The rows of plan's ranking across GPU types in text: lines that start
 * with a rank after its header. */
static int rows_across(const char *text)
{
  const char *at = strstr(text, "cheapest per step across the");
  int rows = 0;
  assert_non_null(at);
  while ((at = strchr(at, '\n')) && at[1] == ' ') {
    at++;
    rows += isdigit((unsigned char)at[strspn(at, " ")]) != 0;
  }
  return rows;
}

/* The ranking across GPU types lists --top layouts whatever the order of
 * the types: it was cut at the first type's count of layouts that fit
 * (hunt: 20 rows with the A100 first, 30 with the H200 first). Llama 2
 * 7B on 2 GPUs fits in over 30 layouts of the two types together. */
static void test_plan_across_types_lists_top(void **state)
{
  static const char *const orders[] = {
      "topologies/a100-sxm-80g-8x.ini,topologies/h200-sxm-8x.ini",
      "topologies/h200-sxm-8x.ini,topologies/a100-sxm-80g-8x.ini"};
  (void)state;
  for (size_t k = 0; k < 2; k++) {
    const char *args[] = {"plan", "workloads/llama2-7b.ini", "--gpus", "2",
                          "--jobs", "2", "--top", "30", "--topology",
                          orders[k], "--set",
                          "topology.node.host_memory=64GiB", NULL};
    run(args);
    assert_int_equal(r.status, 0);
    assert_int_equal(rows_across(r.out), 30);
  }
}

/* A copy of the built-in H100 topology with [gpu] name and
 * usd_per_gpu_hour replaced, written to a temporary file at path. */
static void h100_as(const char *name, const char *price, char *path, size_t len)
{
  char *text = tu_read_file(VSIM_SOURCE_DIR "/topologies/h100-sxm-8x.ini");
  char *out, *line;
  size_t used = 0, cap;
  assert_non_null(text);
  cap = strlen(text) + 256;
  assert_non_null(out = malloc(cap));
  for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
    used += (size_t)snprintf(out + used, cap - used, "%s\n",
                             strncmp(line, "name = ", 7) == 0 ? name
                             : strncmp(line, "usd_per_gpu_hour = ", 19) == 0
                                 ? price
                                 : line);
  assert_non_null(tu_write_temp(out, ".ini", path, len));
  free(out);
  free(text);
}

/* Across GPU types, dollars and GPU-hours do not compare: with a type
 * that has no price every type is ranked by its GPU-hours, and the rows
 * have no price columns, as the header (hunt: the priced type's rows
 * kept theirs under a header without them, and the unpriced type's
 * GPU-hours beat the other's dollars); two types of one [gpu] name, which
 * the tables could not tell apart, are refused. */
static void test_plan_types_priced_and_named(void **state)
{
  char cheap[256], again[256], free_of[256], list[600];
  const char *args[] = {"plan",       DATA "gpt-small.ini",
                        "--max-gpus", "2",
                        "--set",      "training.global_batch=8",
                        "--jobs",     "2",
                        "--topology", list,
                        NULL};
  const char *across, *header, *row;
  (void)state;
  h100_as("name = H100-SXM-80GB", "usd_per_gpu_hour = 1", cheap, sizeof cheap);
  h100_as("name = H100-SXM-80GB", "usd_per_gpu_hour = 5", again, sizeof again);
  h100_as("name = UNPRICED", "usd_per_gpu_hour = 0", free_of, sizeof free_of);
  snprintf(list, sizeof list, "%s,%s", cheap, free_of);
  run(args);
  assert_int_equal(r.status, 0);
  assert_non_null(across = strstr(r.out, "cheapest per step across the 2 GPU "
                                         "types (not every type has a "
                                         "price: all ranked by GPU-hours):\n"));
  assert_null(strstr(across, "$/step"));
  /* each of the first rows, one of each type, has its pipeline under
   * the header's, and the GPU-hours of a step they are ranked by, in
   * order (review: only wall-clock hours per 1e9 tokens were shown) */
  header = strchr(across, '\n') + 1;
  row = strchr(header, '\n') + 1;
  assert_non_null(strstr(header, "GPU-h/step"));
  {
    double last = 0;
    for (int k = 0; k < 2; k++, row = strchr(row, '\n') + 1) {
      double gpu_h = atof(row + (strstr(header, "GPU-h/step") - header));
      assert_int_equal(strstr(row, "1f1b") - row,
                       strstr(header, "pipeline") - header);
      assert_true(gpu_h > 0 && gpu_h >= last);
      last = gpu_h;
    }
  }
  snprintf(list, sizeof list, "%s,%s", cheap, again);
  run(args);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "both name their GPU 'H100-SXM-80GB' ([gpu] name)");
  remove(cheap);
  remove(again);
  remove(free_of);
}

/* The cells after `,fits,,` of a plan.csv row (tokens_per_s onwards), or
 * NULL when the row is not a fitting one of GPU type `gpu`. */
static const char *fitting_tail(const char *row, const char *gpu)
{
  const char *tail = strstr(row, ",fits,,");
  if (strncmp(row, gpu, strlen(gpu)) != 0 || row[strlen(gpu)] != ',' || !tail)
    return NULL;
  return tail + strlen(",fits,,");
}

/* plan.csv leaves a type without a price its cost cells empty, never $0
 * (a review sorted plan.csv by usd_per_step and found the unpriced type
 * first, free); a priced type's stay numbers. */
static void test_plan_csv_leaves_unknown_prices_empty(void **state)
{
  char cheap[256], free_of[256], list[600], dir[256], csv[300];
  const char *args[] = {"plan",       DATA "gpt-small.ini",
                        "--max-gpus", "2",
                        "--set",      "training.global_batch=8",
                        "--jobs",     "2",
                        "--topology", list,
                        "--csv",      csv,
                        NULL};
  char *text, *row;
  int priced = 0, unpriced = 0;
  (void)state;
  h100_as("name = H100-SXM-80GB", "usd_per_gpu_hour = 1", cheap, sizeof cheap);
  h100_as("name = UNPRICED", "usd_per_gpu_hour = 0", free_of, sizeof free_of);
  snprintf(list, sizeof list, "%s,%s", cheap, free_of);
  assert_non_null(tu_temp_dir(dir, sizeof dir));
  snprintf(csv, sizeof csv, "%s/plan.csv", dir);
  run(args);
  assert_int_equal(r.status, 0);
  assert_non_null(text = tu_read_file(csv));
  for (row = strtok(text, "\n"); row; row = strtok(NULL, "\n")) {
    double tokens, mfu, usd, usd_tokens;
    const char *tail;
    if ((tail = fitting_tail(row, "UNPRICED"))) {
      /* tokens_per_s,mfu,,,hours_per_1e9_tokens,extrapolated */
      assert_int_equal(sscanf(tail, "%lf,%lf,", &tokens, &mfu), 2);
      assert_non_null(strstr(tail, ",,,"));
      assert_true(tokens > 0);
      unpriced++;
    } else if ((tail = fitting_tail(row, "H100-SXM-80GB"))) {
      assert_int_equal(
          sscanf(tail, "%lf,%lf,%lf,%lf,", &tokens, &mfu, &usd, &usd_tokens),
          4);
      assert_true(usd > 0 && usd_tokens > 0 && isfinite(usd_tokens));
      priced++;
    }
  }
  assert_true(unpriced > 0);
  assert_true(priced > 0);
  free(text);
  remove(csv);
  remove(dir);
  remove(cheap);
  remove(free_of);
}

/* run's dollars per million tokens keep 3 significant figures below a
 * dollar (a review found $0.00 for a cheap job that plan priced), cents
 * above, an exponent below a billionth (never all zeros): the price x
 * GPUs per hour over the tokens of an hour, to half a percent. */
static void test_run_cost_per_million_tokens_figures(void **state)
{
  const char *prices[] = {"topology.cost.usd_per_gpu_hour=0.001",
                          "topology.cost.usd_per_gpu_hour=5000",
                          "topology.cost.usd_per_gpu_hour=1e-10",
                          "topology.cost.usd_per_gpu_hour=599.4"};
  const double usd_per_gpu_hour[] = {0.001, 5000, 1e-10, 599.4};
  (void)state;
  for (size_t i = 0; i < 4; i++) {
    const char *args[] = {
        "run", DATA "gpt-small.ini", "--gpus", "2", "--set", prices[i], NULL};
    const char *line, *dollar;
    double tokens, usd, want;
    run(args);
    assert_int_equal(r.status, 0);
    assert_non_null(line = strstr(r.out, "\nthroughput "));
    assert_int_equal(sscanf(line, "\nthroughput %lf tokens/s", &tokens), 1);
    assert_non_null(dollar = strchr(line, '$'));
    assert_int_equal(sscanf(dollar, "$%lf per million tokens", &usd), 1);
    want = usd_per_gpu_hour[i] * 2 / 3600 / tokens * 1e6;
    assert_true(tokens > 0 && isfinite(want));
    tu_assert_close(usd, want, 5e-3);
    if (i == 3) /* 0.9996 rounds to a dollar: cents, not $1.000 */
      assert_non_null(strstr(dollar, "$1.00 per million tokens"));
  }
}

/* Issue 21, D6: when every layout is invalid, plan says so and exits 1
 * (as sweep and fit do), instead of DOES NOT FIT with exit 3: FP8 on a
 * GPU without FP8 tensor cores. */
static void test_plan_all_invalid_is_an_input_error(void **state)
{
  static const char *const args[] = {
      "plan", "workloads/llama2-7b.ini", "--max-gpus", "2", "--topology",
      "topologies/a100-sxm-80g-8x.ini", "--set", "training.precision=fp8",
      "--jobs", "2", NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "vsim: every layout is invalid, so nothing was "
                         "simulated; the first: ");
  assert_contains(r.err, "--set training.precision=fp8: needs a GPU with FP8 "
                         "tensor cores");
  assert_true(strstr(r.out, "DOES NOT FIT") == NULL);
  /* and counts none of them as simulated */
  assert_contains(r.out, "\n0 layouts simulated in ");
  assert_contains(r.out, " invalid, not simulated (--csv gives each one's "
                         "reason)");
}

/* Bad input writes nothing: a plan or a sweep that could simulate nothing
 * (exit 1) leaves an existing --csv file as it was, and plan refuses a bad
 * second --topology before it prints the first type's results. */
static void test_plan_and_sweep_bad_input_write_nothing(void **state)
{
  char dir[64], csv[128], bad[128], topos[300], *text, *kept;
  const char *plan[] = {"plan", "workloads/llama2-7b.ini", "--gpus", "3",
                        "--set", "training.global_batch=8", "--csv", csv,
                        NULL};
  const char *sweep[] = {"sweep", DATA "gpt-small.ini", "--set",
                         "model.hidden=500", "--vary",
                         "training.micro_batch=1,2", "--csv", csv, NULL};
  const char *types[] = {"plan", "workloads/llama2-7b.ini", "--max-gpus", "8",
                         "--set", "training.global_batch=8", "--topology",
                         topos, NULL};
  const char **cmds[] = {plan, sweep};
  FILE *f;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  path_in(dir, "kept.csv", csv, sizeof csv);
  for (size_t k = 0; k < 2; k++) {
    assert_non_null(f = fopen(csv, "w"));
    fputs("a,b\n1,2\n", f);
    fclose(f);
    run(cmds[k]);
    assert_int_equal(r.status, 1);
    assert_non_null(kept = tu_read_file(csv));
    assert_string_equal(kept, "a,b\n1,2\n");
    free(kept);
  }
  assert_non_null(text = tu_read_file(VSIM_SOURCE_DIR
                                      "/topologies/a100-sxm-80g-8x.ini"));
  assert_non_null(f = fopen(path_in(dir, "bad.ini", bad, sizeof bad), "w"));
  fprintf(f, "%sfoo = 1\n", text);
  fclose(f);
  free(text);
  snprintf(topos, sizeof topos, "topologies/h100-sxm-8x.ini,%s", bad);
  run(types);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "unknown key 'foo'");
  assert_string_equal(r.out, "");
  /* one GPU type listed twice would be planned and ranked twice */
  snprintf(topos, sizeof topos,
           "topologies/h100-sxm-8x.ini,topologies/h100-sxm-8x.ini");
  run(types);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "vsim: --topology lists topologies/h100-sxm-8x.ini "
                         "twice: each GPU type once\n");
  assert_string_equal(r.out, "");
  tu_remove_dir(dir);
}

/* Issue 21, D7: plan prints only layouts its full re-simulation
 * confirmed. With a budget of 4000 events the extrapolated screening
 * (2 micro-batches) of every layout passes, but the full step of the
 * cheapest ones (2 GPUs, 32 micro-batches) does not: they are left out
 * and counted as refused, not as not fitting, the same with one thread
 * confirming and with three, the fit count printed is plan.csv's (a
 * review found the screen's, one more), and `vsim run` of each printed
 * layout, under the same budget, fits. */
static void test_plan_prints_only_confirmed_layouts(void **state)
{
  char dir[256], csv[300];
  const char *args[] = {"plan",
                        "workloads/llama2-7b.ini",
                        "--max-gpus",
                        "8",
                        "--jobs",
                        "1",
                        "--max-events",
                        "4000",
                        "--csv",
                        csv,
                        NULL};
  static const char *const headings[] = {"cheapest per step", "fastest:",
                                         "fewest GPUs on which it fits"};
  char *one, *text;
  const char *fit;
  size_t in_csv = 0;
  (void)state;
  assert_non_null(tu_temp_dir(dir, sizeof dir));
  snprintf(csv, sizeof csv, "%s/plan.csv", dir);
  run(args);
  assert_non_null(text = tu_read_file(csv));
  for (const char *p = strchr(text, '\n'); p && (p = strstr(p, ",fits,"));
       p++) /* rows after the header's `fits` column name */
    in_csv++;
  assert_non_null(fit = strstr(r.out, " thread(s)); "));
  assert_int_equal(strtoul(fit + strlen(" thread(s)); "), NULL, 10), in_csv);
  free(text);
  assert_int_equal(r.status, 0);
  one = without_line(r.out, "simulated in");
  args[5] = "3";
  run(args);
  assert_int_equal(r.status, 0);
  remove(csv);
  remove(dir);
  assert_contains(r.out, "that fitted when extrapolated were left out: their "
                         "full re-simulation was refused, over the limits");
  assert_null(strstr(r.out, "full re-simulation did not fit"));
  {
    char *three = without_line(r.out, "simulated in");
    assert_string_equal(one, three);
    free(three);
  }
  free(one);
  static const char *const base[] = {"workloads/llama2-7b.ini", "--max-events",
                                     "4000", NULL};
  for (size_t h = 0; h < 3; h++) {
    static tu_run plan;
    char bufs[10][64];
    const char *again[32];
    plan = r;
    plan_row_args(headings[h], base, bufs, again);
    run(again);
    if (r.status != 0)
      fail_msg("plan printed under '%s' a layout that `vsim run` refuses: %s",
               headings[h], r.err);
    r = plan;
  }
}

/* Issue 21, D11: a job whose estimated work is over the budget is refused
 * before any work, with the estimate: 100,000 layers (1.8e8 events, tens
 * of GB of programs) under --max-memory 8GiB, and --ranks all --csv of a
 * 405B job on 128 GPUs (tens of GB of CSV) under the default 6 GiB of
 * outputs; nothing is written. Over --max-events, a sweep's combination
 * is invalid with the estimate as its reason. */
static void test_work_over_budget_is_refused(void **state)
{
  char dir[64], csv[128];
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(csv, sizeof csv, "%s/out", dir);
  {
    const char *const args[] = {
        "run", "tests/data/gpt-small.ini", "--set", "model.layers=100000",
        "--set", "training.global_batch=64", "--max-memory", "8GiB",
        "--csv", csv, "--max-output", "1TiB", NULL};
    run(args);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "tests/data/gpt-small.ini: this simulation is "
                           "estimated at ");
    assert_contains(r.err, "--max-memory 8.00 GiB): raise them");
    /* one message: no note that the refused run "takes a while" */
    assert_null(strstr(r.err, "note:"));
  }
  {
    const char *const args[] = {"run", "workloads/llama3-405b.ini", "--ranks",
                                "all", "--csv", csv, NULL};
    run(args);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "the outputs asked for (--csv) are estimated at ");
    assert_contains(r.err, "over --max-output 6.00 GiB");
    assert_contains(r.err, "or leave out --ranks all");
    assert_null(strstr(r.err, "--trace-ranks"));
  }
  {
    /* a trace over the limit names --trace-ranks, which the note of a
     * trace under it names too (it named only --ranks all) */
    char trace[128];
    const char *const args[] = {
        "run",     "workloads/llama3-405b.ini",
        "--ranks", "all",
        "--trace", path_in(dir, "t.json", trace, sizeof trace),
        NULL};
    run(args);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "the outputs asked for (--trace) are estimated ");
    assert_contains(r.err, "or leave out --ranks all (one GPU per stage has "
                           "the same memory and time); --trace-ranks (e.g. "
                           "0 or 0..7) keeps only the ranks you name in the "
                           "trace\n");
  }
  assert_int_equal(tu_count_entries(dir), 0);
  {
    static const char *const args[] = {
        "sweep", "workloads/llama2-7b.ini", "--gpus", "8", "--vary",
        "training.micro_batch=1,2", "--max-events", "4000", "--jobs", "1",
        NULL};
    run(args);
    /* micro-batch 1 is 8 micro-batches a step (7.4e3 events estimated),
     * 2 is 4 (3.7e3) */
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "invalid  workloads/llama2-7b.ini: this simulation "
                           "is estimated at ");
    assert_contains(r.out, "1 fit, 0 out of memory, 1 invalid");
  }
  tu_remove_dir(dir);
}

/* Issue 18, item 5, through the binary: a size without its unit, bits
 * where bytes are meant, and a GPU beyond real hardware are refused with
 * the fix, exit 1, where `memory=80` used to be 80 bytes and a verdict of
 * "189160488960%". */
static void test_units_cannot_be_misread(void **state)
{
  static const struct {
    const char *set, *want;
  } cases[] = {
      {"topology.gpu.memory=80", "vsim: --set topology.gpu.memory=80: a size "
                                 "needs its unit: e.g. 80GB or 80GiB"},
      {"parallel.bucket=25", "vsim: --set parallel.bucket=25: a size needs "
                             "its unit"},
      {"parallel.bucket=25mb", "a lowercase b is bits, which are not a size: "
                               "write B for bytes"},
      {"topology.gpu.memory=80TiB", "must be at most 4TiB"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *const args[] = {"run", "workloads/llama2-7b.ini", "--gpus",
                                "8", "--set", cases[i].set, NULL};
    run(args);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, cases[i].want);
  }
}

/* plan pairs tp > 1 with sequence parallelism, which needs tp to divide
 * seq_len: with 127 tokens every tp > 1 is left out before simulating,
 * with its reason, instead of simulated into invalid rows (the rule is
 * the one workload validation applies: vs_workload_sp_allowed). */
static void test_plan_prunes_sequence_parallel_misfits(void **state)
{
  char dir[64], p[128];
  const char *args[] = {"plan", DATA "gpt-small.ini", "--set",
                        "model.seq_len=127", "--set", "training.global_batch=16",
                        "--max-gpus", "8", "--jobs", "2", "--csv", NULL, NULL};
  char *text;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  args[11] = path_in(dir, "plan.csv", p, sizeof p);
  run(args);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "(GPUs, tp) pairs: tp does not divide seq_len "
                         "(sequence parallelism)");
  assert_non_null(text = tu_read_file(p));
  assert_null(strstr(text, ",invalid,"));
  free(text);
  tu_remove_dir(dir);
}

/* With several GPU types, a type whose layouts were all left out before
 * simulating is named in the message (two identical lines said nothing
 * of which type each was). */
static void test_plan_names_the_type_with_nothing_left(void **state)
{
  const char *args[] = {"plan",
                        DATA "gpt-small.ini",
                        "--set",
                        "training.global_batch=8",
                        "--gpus",
                        "12",
                        "--topology",
                        "topologies/h100-sxm-8x.ini,"
                        "topologies/v100-sxm-32g-8x.ini",
                        NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "vsim: every layout of exactly 12 GPUs on "
                         "H100-SXM-80GB was left out before simulating");
  assert_contains(r.err, "vsim: every layout of exactly 12 GPUs on "
                         "V100-SXM2-32GB was left out before simulating");
}

/* plan confirms its answers on its threads, several at once: one thread
 * and three give the same answers and plan.csv, byte for byte (a step of
 * 64 micro-batches is screened on pipelines, and the layouts it answers
 * with are re-simulated in full). */
static void test_plan_is_deterministic_across_jobs(void **state)
{
  char dir[64], p1[128];
  const char *args[] = {"plan", DATA "gpt-small.ini", "--set",
                        "training.global_batch=64", "--max-gpus", "8",
                        "--top", "6", "--jobs", NULL, "--csv", NULL, NULL};
  char *one, *three, *csv;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  same_across_jobs(args, 9, "3", dir, p1, sizeof p1, &one, &three);
  assert_contains(one, "each re-simulated with every micro-batch");
  assert_string_equal(one, three);
  assert_non_null(csv = tu_read_file(p1));
  assert_non_null(strstr(csv, ",true\n")); /* screened rows (extrapolated) */
  free(one);
  free(three);
  free(csv);
  tu_remove_dir(dir);
}

/* Overriding the topology changes the capacity the verdict uses. */
static void test_topology_override_changes_capacity(void **state)
{
  static const char *const args[] = {
      "run", "workloads/llama2-7b.ini", "--gpus", "8", "--topology",
      "topologies/a100-sxm-80g-8x.ini", "--set", "topology.gpu.memory=16GiB",
      NULL};
  (void)state;
  run(args);
  assert_int_equal(r.status, 3);
  assert_contains(r.out, "8 x A100");
  assert_contains(r.out, "of 16.0 GiB");
}

/* A value listed twice in one --vary would sweep its combinations twice. */
static void test_vary_value_twice_is_refused(void **state)
{
  static const char *const twice[] = {"sweep", DATA "gpt-small.ini", "--vary",
                                      "training.micro_batch=1..3,2", NULL};
  (void)state;
  run(twice);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--vary training.micro_batch lists 2 twice");
}

/* fit tells vsim's limits from the GPU's: past the boundary at the slowest
 * allowed GPU (1 GFLOP/s x 1%) the step exceeds the 115-day guard, which is
 * "cannot simulate", not "does not fit"; when even the first value is
 * beyond it, that is an error (exit 1), not a memory verdict (exit 3). */
static void test_fit_separates_limits_from_memory(void **state)
{
  static const char *const slow[] = {
      "fit", DATA "gpt-small.ini", "--set", "topology.gpu.memory=4TiB",
      "--set", "topology.gpu.peak_tflops_bf16=0.001", "--set",
      "topology.gpu.compute_efficiency=0.01", NULL};
  /* the measured FlashAttention rates may not exceed the 16-bit peak:
   * lowered with it */
  static const char *const slower[] = {
      "fit", DATA "gpt-7.5b.ini", "--set", "topology.gpu.memory=4TiB",
      "--set", "topology.gpu.peak_tflops_bf16=0.001", "--set",
      "topology.gpu.peak_tflops_fp16=0.001", "--set",
      "topology.gpu.compute_efficiency=0.01", "--set",
      "topology.gpu.flash_seq_lens=512", "--set",
      "topology.gpu.flash_tflops_d64=0.001", "--set",
      "topology.gpu.flash_tflops_d128=0.001", "--set",
      "topology.gpu.flash_tflops_causal_d64=0.001", "--set",
      "topology.gpu.flash_tflops_causal_d128=0.001", NULL};
  (void)state;
  run(slow);
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "vsim cannot simulate it: ");
  assert_contains(r.out, "busy over 116 days a step");
  run(slower);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "training.micro_batch = 1 cannot be simulated: ");
  assert_string_equal(r.out, "");
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help_on_every_command),
      cmocka_unit_test(test_h_is_help),
      cmocka_unit_test(test_usage_errors_exit_2),
      cmocka_unit_test(test_every_bad_input_class_exits_1_with_its_message),
      cmocka_unit_test(test_layout_errors_name_the_layout),
      cmocka_unit_test(test_llama2_7b_on_8_gpus_fits_and_writes_csv),
      cmocka_unit_test(test_readme_examples_are_real_output),
      cmocka_unit_test(test_show_names_the_cublas_workspaces),
      cmocka_unit_test(test_show_comments_unused_keys),
      cmocka_unit_test(test_show_layer_activations_leave_out_frozen_inputs),
      cmocka_unit_test(test_offload_sample_fits_and_writes_host_csv),
      cmocka_unit_test(test_host_csv_lists_every_node),
      cmocka_unit_test(test_parameters_allocated_tensor_by_tensor),
      cmocka_unit_test(test_run_says_what_was_measured),
      cmocka_unit_test(test_pinned_copies_outside_their_range_told),
      cmocka_unit_test(test_show_says_how_states_are_allocated),
      cmocka_unit_test(test_show_says_sequence_parallel_idle_at_tp_1),
      cmocka_unit_test(test_stage_mode_notes_uneven_nodes_and_switches),
      cmocka_unit_test(test_host_out_of_memory_exits_3),
      cmocka_unit_test(test_sweep_names_host_out_of_memory),
      cmocka_unit_test(test_finetune_samples),
      cmocka_unit_test(test_framework_samples),
      cmocka_unit_test(test_step_passes_shown),
      cmocka_unit_test(test_precision_aware_optimizer),
      cmocka_unit_test(test_fp8_primary_weights),
      cmocka_unit_test(test_gemma2_end_to_end),
      cmocka_unit_test(test_pipeline_sends_and_reduction),
      cmocka_unit_test(test_groups_straddling_nodes),
      cmocka_unit_test(test_deepspeed_zero2_reduces_on_compute),
      cmocka_unit_test(test_deepspeed_zero3_coordinator_end_to_end),
      cmocka_unit_test(test_fsdp2_grads_set_to_none_end_to_end),
      cmocka_unit_test(test_pageable_offload_end_to_end),
      cmocka_unit_test(test_hf_samples),
      cmocka_unit_test(test_eager_kernels_end_to_end),
      cmocka_unit_test(test_grad_accumulation_fusion_end_to_end),
      cmocka_unit_test(test_optimizer_impl_end_to_end),
      cmocka_unit_test(test_moe_sample),
      cmocka_unit_test(test_expert_data_parallel_without_dp),
      cmocka_unit_test(test_deepspeed_zero2_experts),
      cmocka_unit_test(test_skewed_router_raises_the_peak),
      cmocka_unit_test(test_skewed_router_every_rank),
      cmocka_unit_test(test_context_parallel_sample),
      cmocka_unit_test(test_mtp_sample),
      cmocka_unit_test(test_show_hf_defaults_and_parameters),
      cmocka_unit_test(test_shipped_model_configs),
      cmocka_unit_test(test_deepspeed_offload_host_sums_end_to_end),
      cmocka_unit_test(test_zero_offload_sample),
      cmocka_unit_test(test_activation_offload_timeline_and_trace),
      cmocka_unit_test(test_host_buffers_are_named_alike),
      cmocka_unit_test(test_nvme_offload_needs_nvme),
      cmocka_unit_test(test_set_conflicts_name_the_option),
      cmocka_unit_test(test_offload_combinations_refused),
      cmocka_unit_test(test_moe_capacity_skew_and_offload_said),
      cmocka_unit_test(test_identical_runs_write_identical_csv),
      cmocka_unit_test(test_zero_model_states_on_64_gpus),
      cmocka_unit_test(test_out_of_memory_exits_3_and_still_writes_csv),
      cmocka_unit_test(test_unwritable_output_is_an_error),
      cmocka_unit_test(test_outputs_are_checked_before_simulating),
      cmocka_unit_test(test_outputs_checked_before_simulating_more),
      cmocka_unit_test(test_capacity_csv_checked_before_simulating),
      cmocka_unit_test(test_outputs_naming_one_file_are_refused),
      cmocka_unit_test(test_first_step_out_of_memory_is_told),
      cmocka_unit_test(test_outputs_never_overwrite_inputs),
      cmocka_unit_test(test_outputs_never_overwrite_hf_config),
      cmocka_unit_test(test_vary_value_twice_is_refused),
      cmocka_unit_test(test_fit_separates_limits_from_memory),
      cmocka_unit_test(test_trace_is_chrome_json),
      cmocka_unit_test(test_svg_chart),
      cmocka_unit_test(test_summary_gives_the_peak),
      cmocka_unit_test(test_html_report),
      cmocka_unit_test(test_html_step_split_has_every_part),
      cmocka_unit_test(test_html_shows_host_memory),
      cmocka_unit_test(test_html_shows_notes),
      cmocka_unit_test(test_html_ranks_name_cp),
      cmocka_unit_test(test_html_names_paged_states_and_held),
      cmocka_unit_test(test_html_chart_reaches_peak_and_step),
      cmocka_unit_test(test_trace_svg_past_file_size_limit),
      cmocka_unit_test(test_outputs_put_in_place_together),
      cmocka_unit_test(test_show_writes_long_splits_as_runs),
      cmocka_unit_test(test_show_output_of_a_long_path_loads_back),
      cmocka_unit_test(test_unknown_key_lists_whole_names),
      cmocka_unit_test(test_csv_written_when_stdout_closes),
      cmocka_unit_test(test_op_bounds_csv_splits_each_op),
      cmocka_unit_test(test_trace_has_managed_track),
      cmocka_unit_test(test_ranks_all_writes_a_row_per_gpu),
      cmocka_unit_test(test_ranks_all_records_once_per_slot),
      cmocka_unit_test(test_pipeline_report_and_csv),
      cmocka_unit_test(test_show_prints_resolved_config),
      cmocka_unit_test(test_show_output_loads_back),
      cmocka_unit_test(test_unwritable_report_is_an_error),
      cmocka_unit_test(test_selective_flash_reruns_the_kernel),
      cmocka_unit_test(test_plan_tries_selective_under_ulysses),
      cmocka_unit_test(test_plan_all_invalid_is_an_input_error),
      cmocka_unit_test(test_plan_and_sweep_bad_input_write_nothing),
      cmocka_unit_test(test_plan_tries_uneven_pipelines),
      cmocka_unit_test(test_plan_tries_interleaved_where_allowed),
      cmocka_unit_test(test_plan_deepspeed_pipelines_run_1f1b),
      cmocka_unit_test(test_plan_drops_coordinator_limits_below_zero3),
      cmocka_unit_test(test_plan_compares_gpu_types),
      cmocka_unit_test(test_plan_across_types_lists_top),
      cmocka_unit_test(test_plan_types_priced_and_named),
      cmocka_unit_test(test_plan_csv_leaves_unknown_prices_empty),
      cmocka_unit_test(test_run_cost_per_million_tokens_figures),
      cmocka_unit_test(test_plan_prints_only_confirmed_layouts),
      cmocka_unit_test(test_work_over_budget_is_refused),
      cmocka_unit_test(test_units_cannot_be_misread),
      cmocka_unit_test(test_plan_prunes_sequence_parallel_misfits),
      cmocka_unit_test(test_plan_varies_expert_and_context_parallelism),
      cmocka_unit_test(test_plan_simulates_only_what_run_accepts),
      cmocka_unit_test(test_plan_offload_keeps_experts_together),
      cmocka_unit_test(test_keys_lists_every_key),
      cmocka_unit_test(test_fit_finds_the_exact_boundary),
      cmocka_unit_test(test_reserve_tight),
      cmocka_unit_test(test_plan_keeps_checkpoint_choice_valid),
      cmocka_unit_test(test_searched_sets_are_noted),
      cmocka_unit_test(test_plan_base_on_its_gpus),
      cmocka_unit_test(test_output_folder_and_rank_limit_messages),
      cmocka_unit_test(test_sweep_is_deterministic_across_jobs),
      cmocka_unit_test(test_plan_names_the_type_with_nothing_left),
      cmocka_unit_test(test_show_megatron_bucket_follows_gpus),
      cmocka_unit_test(test_plan_is_deterministic_across_jobs),
      cmocka_unit_test(test_sweep_all_invalid_is_an_input_error),
      cmocka_unit_test(test_plan_layout_is_confirmed_by_run),
      cmocka_unit_test(test_plan_closest_counts_host_memory),
      cmocka_unit_test(test_plan_rows_without_a_step_have_empty_figures),
      cmocka_unit_test(test_sweep_checks_its_base_input_first),
      cmocka_unit_test(test_vary_errors_name_the_vary_option),
      cmocka_unit_test(test_key_given_twice_is_a_usage_error),
      cmocka_unit_test(test_limit_zero_says_why),
      cmocka_unit_test(test_capacity_help_and_usage),
      cmocka_unit_test(test_fragmentation_oom_fixed_by_expandable_segments),
      cmocka_unit_test(test_memory_summary_per_gpu),
      cmocka_unit_test(test_topology_override_changes_capacity),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
