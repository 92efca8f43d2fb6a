/* workload_test.c - workload.ini loading (workload.h): every derived default,
 * the shipped workloads, --set, and each bad-input message with its text,
 * file:line and return code. */
#include "testutil.h"

#include "hfconfig.h"
#include "workload.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A small GPT; hidden 64 = 8 heads * 8. Line numbers used below:
 * 1 [model], 2 arch, 3 layers, 4 hidden, 5 heads, 6 vocab, 7 seq_len. */
#define GPT_MODEL                                                            \
  "[model]\narch = gpt\nlayers = 2\nhidden = 64\nheads = 8\nvocab = 1000\n"  \
  "seq_len = 128\n"

/* The same shape as Llama: ffn_hidden is required. */
#define LLAMA_MODEL                                                          \
  "[model]\narch = llama\nlayers = 2\nhidden = 64\nheads = 8\nvocab = 1000\n" \
  "seq_len = 128\nffn_hidden = 172\n"

/* Writes ini to a temporary file (its path in path[128]) and loads it. */
static int load_at(vs_workload *wl, char *path, const char *ini,
                   const char *const *sets, size_t n_sets, uint64_t gpus,
                   vs_error *err)
{
  int rc;
  tu_write_temp(ini, ".ini", path, 128);
  vs_error_clear(err);
  rc = vs_workload_load(wl, path, sets, n_sets, gpus, err);
  unlink(path);
  return rc;
}

/* Loads ini that must be valid. */
static void load_ok(vs_workload *wl, const char *ini, const char *const *sets,
                    size_t n_sets, uint64_t gpus)
{
  vs_error err;
  vs_error_clear(&err);
  if (tu_load_workload(wl, ini, sets, n_sets, gpus, &err) != 0)
    fail_msg("workload failed: %s", err.msg);
  assert_int_equal(err.code, VS_OK);
}

/* Loads ini that must fail with code and a message containing want, where
 * each '@' in want stands for the temporary file's path (so "@:8:" checks
 * file:line exactly). */
static void load_bad(const char *ini, const char *const *sets, size_t n_sets,
                     uint64_t gpus, int code, const char *want)
{
  char path[128];
  vs_workload wl;
  vs_error err;
  int rc = load_at(&wl, path, ini, sets, n_sets, gpus, &err);
  assert_int_equal(rc, code);
  assert_int_equal(err.code, code);
  tu_assert_message_at(err.msg, want, path);
}

/* ------------------------------------------------------------------------
 * Defaults
 * ------------------------------------------------------------------------ */

static void test_gpt_defaults(void **state)
{
  vs_workload wl;
  (void)state;
  load_ok(&wl, GPT_MODEL, NULL, 0, 0);
  assert_int_equal(wl.model.arch, VS_ARCH_GPT);
  assert_true(wl.model.layers == 2 && wl.model.hidden == 64);
  assert_true(wl.model.kv_heads == 8);        /* kv_heads = heads */
  assert_true(wl.model.ffn_hidden == 4 * 64); /* 4*hidden for gpt */
  assert_true(wl.model.tied_embeddings);      /* true for gpt */
  assert_true(wl.model.dropout == 0.1);       /* 0.1 for gpt */
  assert_true(wl.training.micro_batch == 1);  /* DESIGN: micro_batch = 1 */
  assert_true(wl.training.global_batch == 1); /* micro_batch * dp = 1 * 1 */
  assert_true(wl.grad_accum == 1);            /* global / (micro * dp) */
  assert_int_equal(wl.training.precision, VS_PREC_BF16);
  assert_true(wl.training.master_weights);    /* bf16 < fp32 */
  assert_int_equal(wl.training.grad_dtype, VS_GRAD_PRECISION);
  assert_int_equal(wl.training.optimizer, VS_OPT_ADAMW);
  assert_int_equal(wl.training.checkpointing, VS_CKPT_NONE);
  assert_int_equal(wl.training.attention, VS_ATTN_FLASH);
  assert_true(wl.parallel.tp == 1 && wl.parallel.pp == 1);
  assert_true(wl.parallel.dp == 1);           /* no --gpus, no dp: 1 */
  assert_false(wl.parallel.sequence_parallel);
  assert_int_equal(wl.parallel.schedule, VS_SCHED_1F1B);
  assert_true(wl.parallel.virtual_stages == 1);
  assert_true(wl.parallel.zero == 0);
  assert_int_equal(wl.parallel.offload_optimizer, VS_OFFLOAD_NONE);
  assert_int_equal(wl.parallel.offload_params, VS_OFFLOAD_NONE);
  assert_true(wl.parallel.bucket_bytes == 25ull << 20); /* 25MiB = 25 * 2^20 */
  assert_int_equal(wl.runtime.allocator, VS_ALLOC_CACHING); /* DESIGN.md */
  assert_false(wl.runtime.expandable_segments);
  assert_true(wl.runtime.max_split_size_mb == 0);
  assert_true(wl.runtime.roundup_power2_divisions == 0);
  assert_true(wl.gpus == 1);                  /* tp * pp * dp */
}

static void test_llama_defaults(void **state)
{
  vs_workload wl;
  (void)state;
  load_ok(&wl, LLAMA_MODEL, NULL, 0, 0);
  assert_int_equal(wl.model.arch, VS_ARCH_LLAMA);
  assert_true(wl.model.ffn_hidden == 172);    /* as given */
  assert_false(wl.model.tied_embeddings);     /* false for llama */
  assert_true(wl.model.dropout == 0.0);       /* 0 for llama */
  assert_true(wl.model.kv_heads == 8);
}

static void test_bert_defaults(void **state)
{
  vs_workload wl;
  (void)state;
  load_ok(&wl,
          "[model]\narch = bert\nlayers = 2\nhidden = 96\nheads = 12\n"
          "vocab = 1000\nseq_len = 128\n",
          NULL, 0, 0);
  assert_true(wl.model.ffn_hidden == 4 * 96); /* 4*hidden for bert */
  assert_true(wl.model.tied_embeddings);      /* true unless llama */
  assert_true(wl.model.dropout == 0.1);       /* 0.1 for bert */
  assert_true(wl.model.kv_heads == 12);
}

static void test_explicit_values_beat_defaults(void **state)
{
  vs_workload wl;
  (void)state;
  load_ok(&wl,
          GPT_MODEL
          "kv_heads = 2\nffn_hidden = 100\ntied_embeddings = false\n"
          "dropout = 0\n"
          "[training]\nprecision = fp16\nmaster_weights = false\n"
          "grad_dtype = fp32\noptimizer = lion\ncheckpointing = selective\n"
          "attention = eager\n"
          "[parallel]\nzero = 3\nbucket = 50MB\nsequence_parallel = true\n"
          "[runtime]\nexpandable_segments = true\n",
          NULL, 0, 0);
  assert_true(wl.model.kv_heads == 2);
  assert_true(wl.model.ffn_hidden == 100);
  assert_false(wl.model.tied_embeddings);
  assert_true(wl.model.dropout == 0.0);
  assert_int_equal(wl.training.precision, VS_PREC_FP16);
  assert_false(wl.training.master_weights);
  assert_int_equal(wl.training.grad_dtype, VS_GRAD_FP32);
  assert_int_equal(wl.training.optimizer, VS_OPT_LION);
  assert_int_equal(wl.training.checkpointing, VS_CKPT_SELECTIVE);
  assert_int_equal(wl.training.attention, VS_ATTN_EAGER);
  assert_true(wl.parallel.zero == 3);
  assert_true(wl.parallel.bucket_bytes == 50000000); /* 50MB = 50 * 10^6 */
  assert_true(wl.parallel.sequence_parallel);
  assert_true(wl.runtime.expandable_segments);
}

static void test_master_weights_follow_precision(void **state)
{
  vs_workload wl;
  (void)state;
  /* DESIGN: master_weights = true if precision < fp32. */
  load_ok(&wl, GPT_MODEL "[training]\nprecision = fp32\n", NULL, 0, 0);
  assert_false(wl.training.master_weights);
  load_ok(&wl, GPT_MODEL "[training]\nprecision = fp16\n", NULL, 0, 0);
  assert_true(wl.training.master_weights);
  load_ok(&wl, GPT_MODEL "[training]\nprecision = fp8\n", NULL, 0, 0);
  assert_true(wl.training.master_weights);
  /* An explicit false at fp32 is consistent. */
  load_ok(&wl, GPT_MODEL "[training]\nprecision = fp32\nmaster_weights = false\n",
          NULL, 0, 0);
  assert_false(wl.training.master_weights);
}

static void test_gpus_resolve_dp_and_batches(void **state)
{
  vs_workload wl;
  (void)state;
  /* --gpus 8 with tp = 2: dp = 8 / (tp*pp) = 8 / 2 = 4. */
  load_ok(&wl, GPT_MODEL "[training]\nmicro_batch = 2\n[parallel]\ntp = 2\n",
          NULL, 0, 8);
  assert_true(wl.parallel.dp == 4);
  assert_true(wl.gpus == 8);
  /* global_batch = micro_batch * dp = 2 * 4 = 8: one micro-batch a step. */
  assert_true(wl.training.global_batch == 8);
  assert_true(wl.grad_accum == 1);
  /* global_batch 32 over micro_batch * dp = 8: 32 / 8 = 4 accumulations. */
  load_ok(&wl,
          GPT_MODEL "[training]\nmicro_batch = 2\nglobal_batch = 32\n"
                    "[parallel]\ntp = 2\n",
          NULL, 0, 8);
  assert_true(wl.grad_accum == 4);
}

static void test_explicit_dp(void **state)
{
  vs_workload wl;
  (void)state;
  /* Without --gpus the layout sets the GPU count: tp*pp*dp = 2*1*3 = 6. */
  load_ok(&wl, GPT_MODEL "[parallel]\ntp = 2\ndp = 3\n", NULL, 0, 0);
  assert_true(wl.gpus == 6);
  assert_true(wl.training.global_batch == 3); /* micro_batch 1 * dp 3 */
  /* --gpus agreeing with dp is fine: 2 * 3 = 6. */
  load_ok(&wl, GPT_MODEL "[parallel]\ntp = 2\ndp = 3\n", NULL, 0, 6);
  assert_true(wl.parallel.dp == 3 && wl.gpus == 6);
}

static void test_shipped_workloads(void **state)
{
  vs_workload wl;
  vs_error err;
  (void)state;
  vs_error_clear(&err);
  /* GPT-3 175B on 1024 GPUs: dp = 1024, global_batch 2048 over
   * micro_batch 1 * dp 1024 = 2 accumulation steps. */
  assert_int_equal(vs_workload_load(&wl, VSIM_SOURCE_DIR "/workloads/gpt3-175b.ini",
                                    NULL, 0, 1024, &err), 0);
  assert_true(wl.model.hidden == 12288 && wl.model.heads == 96);
  assert_true(wl.model.ffn_hidden == 4 * 12288);
  assert_true(wl.parallel.dp == 1024);
  assert_true(wl.grad_accum == 2);
  assert_int_equal(wl.training.checkpointing, VS_CKPT_FULL);
  assert_true(wl.parallel.zero == 3);
  /* Llama-2-7B on 8 GPUs: 64 / (2 * 8) = 4 accumulation steps. */
  assert_int_equal(vs_workload_load(&wl, VSIM_SOURCE_DIR "/workloads/llama2-7b.ini",
                                    NULL, 0, 8, &err), 0);
  assert_true(wl.model.ffn_hidden == 11008);
  assert_false(wl.model.tied_embeddings);
  assert_true(wl.grad_accum == 4);
  assert_int_equal(err.code, VS_OK);
}

static void test_origins_record_file_and_line(void **state)
{
  char path[128], where[512], want[512];
  vs_workload wl;
  vs_error err;
  (void)state;
  assert_int_equal(load_at(&wl, path, GPT_MODEL, NULL, 0, 0, &err), 0);
  assert_string_equal(wl.origins.file, path);
  /* heads is line 5 of GPT_MODEL. */
  snprintf(want, sizeof want, "%s:5: [model] heads = 8", path);
  assert_string_equal(vs_conf_where(vs_workload_keys(), &wl.origins, "model",
                                    "heads", where, sizeof where),
                      want);
}

static void test_key_table(void **state)
{
  const vs_keytab *t = vs_workload_keys();
  (void)state;
  assert_string_equal(t->kind, "workload");
  assert_true(t->n_keys <= VS_CONF_MAX_KEYS);
  /* Every DESIGN key is in the table. */
  assert_true(vs_conf_find(t, "model", "ffn_hidden") >= 0);
  assert_true(vs_conf_find(t, "training", "global_batch") >= 0);
  assert_true(vs_conf_find(t, "parallel", "bucket") >= 0);
  assert_true(vs_conf_find(t, "runtime", "expandable_segments") >= 0);
  assert_string_equal(vs_arch_name(VS_ARCH_LLAMA), "llama");
  assert_string_equal(vs_precision_name(VS_PREC_FP8), "fp8");
  assert_string_equal(vs_optimizer_name(VS_OPT_ADAM8BIT), "adam8bit");
  assert_string_equal(vs_checkpointing_name(VS_CKPT_FULL), "full");
  assert_string_equal(vs_attention_name(VS_ATTN_EAGER), "eager");
  assert_string_equal(vs_offload_name(VS_OFFLOAD_NVME), "nvme");
  assert_string_equal(vs_allocator_name(VS_ALLOC_CACHING), "caching");
}

/* ------------------------------------------------------------------------
 * --set
 * ------------------------------------------------------------------------ */

static void test_set_overrides(void **state)
{
  static const char *const sets[] = {"training.micro_batch=4",
                                     "model.heads=16", "parallel.zero=2"};
  char where[512];
  vs_workload wl;
  (void)state;
  load_ok(&wl, GPT_MODEL "[training]\nmicro_batch = 2\n", sets, 3, 0);
  assert_true(wl.training.micro_batch == 4); /* --set beats the file's 2 */
  assert_true(wl.model.heads == 16);
  /* Derived defaults follow the override: kv_heads = heads = 16. */
  assert_true(wl.model.kv_heads == 16);
  assert_true(wl.parallel.zero == 2);
  assert_true(wl.training.global_batch == 4); /* micro_batch 4 * dp 1 */
  assert_string_equal(vs_conf_where(vs_workload_keys(), &wl.origins, "training",
                                    "micro_batch", where, sizeof where),
                      "--set training.micro_batch=4");
}

static void test_set_errors(void **state)
{
  static const char *const unknown_key[] = {"training.nope=1"};
  static const char *const unknown_sec[] = {"optim.lr=1"};
  static const char *const bad_value[] = {"training.precision=fp64"};
  static const char *const bad_count[] = {"model.layers=many"};
  static const char *const no_eq[] = {"training.micro_batch"};
  static const char *const no_dot[] = {"micro_batch=2"};
  static const char *const dot_after_eq[] = {"micro_batch=2.5"};
  static const char *const long_name[] = {
      "training.a_key_name_that_is_much_longer_than_sixty_four_characters_"
      "in_all=1"};
  (void)state;
  load_bad(GPT_MODEL, unknown_key, 1, 0, VS_EINPUT,
           "--set training.nope: unknown key 'nope' in [training]; valid keys: "
           "micro_batch, global_batch, precision");
  load_bad(GPT_MODEL, unknown_sec, 1, 0, VS_EINPUT,
           "--set optim.lr: unknown section [optim]; valid sections: [model], "
           "[training], [parallel], [finetune], [runtime]");
  load_bad(GPT_MODEL, bad_value, 1, 0, VS_EINPUT,
           "--set training.precision=fp64: expected bf16, fp16, fp32, fp8, amp_bf16 or amp_fp16");
  load_bad(GPT_MODEL, bad_count, 1, 0, VS_EINPUT,
           "--set model.layers=many: not a number");
  load_bad(GPT_MODEL, no_eq, 1, 0, VS_EUSAGE,
           "--set training.micro_batch: expected section.key=value");
  load_bad(GPT_MODEL, no_dot, 1, 0, VS_EUSAGE,
           "--set micro_batch=2: expected section.key=value");
  load_bad(GPT_MODEL, dot_after_eq, 1, 0, VS_EUSAGE,
           "--set micro_batch=2.5: expected section.key=value");
  load_bad(GPT_MODEL, long_name, 1, 0, VS_EUSAGE, "name too long");
}

static void test_set_bad_value_leaves_workload_unchanged(void **state)
{
  vs_workload wl, before;
  vs_error err;
  (void)state;
  load_ok(&wl, GPT_MODEL, NULL, 0, 0);
  before = wl;
  vs_error_clear(&err);
  assert_int_equal(vs_workload_set(&wl, "model.layers=0", &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "--set model.layers=0: must be greater than 0"));
  assert_memory_equal(&wl, &before, sizeof wl);
  vs_error_clear(&err);
  assert_int_equal(vs_workload_set(&wl, "model", &err), VS_EUSAGE);
  assert_memory_equal(&wl, &before, sizeof wl);
}

/* ------------------------------------------------------------------------
 * Bad files
 * ------------------------------------------------------------------------ */

static void test_unreadable_file(void **state)
{
  vs_workload wl;
  vs_error err;
  (void)state;
  vs_error_clear(&err);
  assert_int_equal(vs_workload_load(&wl, "/nonexistent/w.ini", NULL, 0, 0, &err),
                   VS_EIO);
  assert_non_null(strstr(err.msg, "/nonexistent/w.ini: cannot read workload file"));
  vs_error_clear(&err);
  assert_int_equal(vs_workload_load(&wl, "", NULL, 0, 0, &err), VS_EIO);
  assert_string_equal(err.msg, "the workload file's path is empty");
}

/* Every micro-batch of a step is built into each stage's program: more than
 * VS_MAX_MICROBATCHES is refused, naming the key that makes them. Here
 * global_batch 20000 / (micro_batch 1 * dp 1) = 20000 > 16384; 16384 is
 * accepted. */
static void test_microbatch_limit(void **state)
{
  static const char *const too_many[] = {"training.global_batch=20000"};
  static const char *const most[] = {"training.global_batch=16384"};
  vs_workload wl;
  vs_error err;
  char path[128];
  (void)state;
  load_bad(GPT_MODEL, too_many, 1, 1, VS_EINPUT,
           "--set training.global_batch=20000: 20000 micro-batches per step "
           "(global_batch / (micro_batch * dp)) are more than vsim simulates "
           "(16384)");
  tu_write_temp(GPT_MODEL, ".ini", path, sizeof path);
  vs_error_clear(&err);
  assert_int_equal(vs_workload_load(&wl, path, most, 1, 1, &err), 0);
  assert_int_equal(wl.grad_accum, 16384);
  unlink(path);
}

static void test_unknown_section_and_key(void **state)
{
  (void)state;
  /* Line 8 is the first after GPT_MODEL's seven. */
  load_bad(GPT_MODEL "[optim]\nlr = 1\n", NULL, 0, 0, VS_EINPUT,
           "@:8: unknown section [optim] in workload file; valid sections: "
           "[model], [training], [parallel], [finetune], [runtime]");
  load_bad(GPT_MODEL "layer = 3\n", NULL, 0, 0, VS_EINPUT,
           "@:8: unknown key 'layer' in [model]; valid keys: arch, layers, hidden");
  load_bad(GPT_MODEL "[training]\nlr = 1e-4\n", NULL, 0, 0, VS_EINPUT,
           "@:9: unknown key 'lr' in [training]");
}

static void test_missing_required_keys(void **state)
{
  static const char *const lines[] = {"arch = gpt\n",  "layers = 2\n",
                                      "hidden = 64\n", "heads = 8\n",
                                      "vocab = 1000\n", "seq_len = 128\n"};
  static const char *const names[] = {"arch",  "layers", "hidden",
                                      "heads", "vocab",  "seq_len"};
  char ini[512], want[128];
  (void)state;
  /* Drop each required key in turn from a valid model. */
  for (size_t skip = 0; skip < 6; skip++) {
    size_t used = (size_t)snprintf(ini, sizeof ini, "[model]\n");
    for (size_t i = 0; i < 6; i++) {
      if (i != skip)
        used += (size_t)snprintf(ini + used, sizeof ini - used, "%s", lines[i]);
    }
    snprintf(want, sizeof want, ": missing required key '%s' in [model]",
             names[skip]);
    load_bad(ini, NULL, 0, 0, VS_EINPUT, want);
  }
  load_bad("", NULL, 0, 0, VS_EINPUT, "@: missing required key 'arch' in [model]");
}

static void test_llama_needs_ffn_hidden(void **state)
{
  (void)state;
  load_bad("[model]\narch = llama\nlayers = 2\nhidden = 64\nheads = 8\n"
           "vocab = 1000\nseq_len = 128\n",
           NULL, 0, 0, VS_EINPUT,
           "@: missing required key 'ffn_hidden' in [model] (required for "
           "arch = llama");
}

static void test_malformed_numbers(void **state)
{
  (void)state;
  /* layers is line 3 of GPT_MODEL; line 9 is the first [training] key. */
  load_bad("[model]\narch = gpt\nlayers = two\n", NULL, 0, 0, VS_EINPUT,
           "@:3: [model] layers = two: not a number");
  load_bad("[model]\narch = gpt\nlayers = 2.5\n", NULL, 0, 0, VS_EINPUT,
           "@:3: [model] layers = 2.5: must be a whole number");
  load_bad(GPT_MODEL "[parallel]\nbucket = lots\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [parallel] bucket = lots: not a number");
  load_bad(GPT_MODEL "[parallel]\nbucket = 25MB/s\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [parallel] bucket = 25MB/s: unknown unit");
  load_bad(GPT_MODEL "dropout = lots\n", NULL, 0, 0, VS_EINPUT,
           "@:8: [model] dropout = lots: not a number");
  load_bad(GPT_MODEL "[training]\nmaster_weights = maybe\n", NULL, 0, 0,
           VS_EINPUT, "@:9: [training] master_weights = maybe: expected true or false");
  load_bad("[model]\narch = gpt2\n", NULL, 0, 0, VS_EINPUT,
           "@:2: [model] arch = gpt2: expected gpt, llama or bert");
  load_bad(GPT_MODEL "[training]\noptimizer = adagrad\n", NULL, 0, 0, VS_EINPUT,
           "expected adamw, adam, sgd, momentum, adafactor, adam8bit or lion");
}

static void test_zero_and_negative(void **state)
{
  (void)state;
  load_bad("[model]\nlayers = 0\n", NULL, 0, 0, VS_EINPUT,
           "@:2: [model] layers = 0: must be greater than 0");
  load_bad("[model]\nhidden = -64\n", NULL, 0, 0, VS_EINPUT,
           "@:2: [model] hidden = -64: must not be negative");
  load_bad(GPT_MODEL "[training]\nmicro_batch = 0\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [training] micro_batch = 0: must be greater than 0");
  load_bad(GPT_MODEL "[parallel]\ntp = 0\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [parallel] tp = 0: must be greater than 0");
  load_bad(GPT_MODEL "[parallel]\nbucket = 0\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [parallel] bucket = 0: must be greater than 0");
  /* zero is a stage 0-3 (hi = 3); dropout a probability below 1. */
  load_bad(GPT_MODEL "[parallel]\nzero = 4\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [parallel] zero = 4: must be at most 3");
  load_bad(GPT_MODEL "dropout = 1\n", NULL, 0, 0, VS_EINPUT,
           "@:8: [model] dropout = 1: must be at most 0.999");
  load_bad(GPT_MODEL "dropout = -0.1\n", NULL, 0, 0, VS_EINPUT,
           "@:8: [model] dropout = -0.1: must be at least 0");
}

static void test_head_divisibility(void **state)
{
  (void)state;
  /* hidden 64 is not a multiple of 6 heads; heads is on line 5, hidden
   * on line 4, and either may be the one to change. */
  load_bad("[model]\narch = gpt\nlayers = 2\nhidden = 64\nheads = 6\n"
           "vocab = 1000\nseq_len = 128\n",
           NULL, 0, 0, VS_EINPUT,
           "@:5: [model] heads = 6: hidden (64, @:4: [model] hidden = 64) must "
           "be divisible by heads");
  /* 8 heads over 3 kv_heads, and more kv_heads than heads. */
  load_bad(GPT_MODEL "kv_heads = 3\n", NULL, 0, 0, VS_EINPUT,
           "@:8: [model] kv_heads = 3: heads (8) must be divisible by kv_heads");
  load_bad(GPT_MODEL "kv_heads = 16\n", NULL, 0, 0, VS_EINPUT,
           "@:8: [model] kv_heads = 16: heads (8) must be divisible by kv_heads");
}

static void test_tp_divisibility(void **state)
{
  (void)state;
  /* tp 3 does not divide 8 heads (tp on line 9). */
  load_bad(GPT_MODEL "[parallel]\ntp = 3\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [parallel] tp = 3: tp must divide heads (8)");
  /* tp 4 divides 8 heads but not 2 kv_heads (tp on line 10). */
  load_bad(GPT_MODEL "kv_heads = 2\n[parallel]\ntp = 4\n", NULL, 0, 0, VS_EINPUT,
           "@:10: [parallel] tp = 4: tp must divide kv_heads (2)");
  /* tp 8 divides 8 heads but not ffn_hidden 260 (260 = 8 * 32 + 4). */
  load_bad(GPT_MODEL "ffn_hidden = 260\n[parallel]\ntp = 8\n", NULL, 0, 0,
           VS_EINPUT, "@:10: [parallel] tp = 8: tp must divide ffn_hidden (260)");
  /* Sequence parallelism splits seq_len 100 over tp 8: 100 = 8 * 12 + 4. */
  load_bad("[model]\narch = gpt\nlayers = 2\nhidden = 64\nheads = 8\n"
           "vocab = 1000\nseq_len = 100\n[parallel]\ntp = 8\n"
           "sequence_parallel = true\n",
           NULL, 0, 0, VS_EINPUT,
           "@:10: [parallel] sequence_parallel = true: sequence parallelism needs "
           "seq_len (100) divisible by tp (8)");
}

/* The layout rules validation and `vsim plan` share (workload.h), on
 * Llama-2-70B's shape: 64 heads, 8 kv_heads, ffn_hidden 28672 = 2^12 * 7. */
static void test_layout_rules(void **state)
{
  vs_model_conf m;
  uint64_t size = 5;
  (void)state;
  memset(&m, 0, sizeof m);
  m.heads = 64;
  m.kv_heads = 8;
  m.ffn_hidden = 28672;
  /* ZeRO-0/1 go with any pipeline, ZeRO-2/3 only without one. */
  assert_true(vs_workload_zero_allowed(0, 8, VS_FW_NONE));
  assert_true(vs_workload_zero_allowed(1, 8, VS_FW_DEEPSPEED));
  assert_true(vs_workload_zero_allowed(3, 1, VS_FW_NONE));
  assert_false(vs_workload_zero_allowed(2, 2, VS_FW_MEGATRON));
  assert_false(vs_workload_zero_allowed(3, 80, VS_FW_NONE));
  /* tp 8 divides all three; size is left alone. */
  assert_null(vs_workload_tp_misfit(&m, 8, 8, &size));
  assert_true(size == 5);
  assert_null(vs_workload_tp_misfit(&m, 8, 8, NULL));
  /* tp 16 divides 64 heads but not 8 kv_heads. */
  assert_string_equal(vs_workload_tp_misfit(&m, 16, 16, &size), "kv_heads");
  assert_true(size == 8);
  assert_non_null(vs_workload_tp_misfit(&m, 16, 16, NULL));
  /* tp 3 divides none: heads is named first. */
  assert_string_equal(vs_workload_tp_misfit(&m, 3, 3, NULL), "heads");
  /* ffn_hidden 11009 is odd: tp 2 divides the heads, not the MLP. */
  m.ffn_hidden = 11009;
  assert_string_equal(vs_workload_tp_misfit(&m, 2, 2, &size), "ffn_hidden");
  assert_true(size == 11009);
  /* GPUs in whole tp x pp groups: 12 = 2 * 3 * 2, not 2 * 4 * 1.5. */
  assert_true(vs_workload_gpus_allowed(12, 2, 3));
  assert_false(vs_workload_gpus_allowed(12, 2, 4));
  /* global batch in whole micro_batch * dp steps: 1024 = 4 * 8 * 32; 1000
   * is not a multiple of 32; 2^32 * 2^32 overflows; 0 * 8 is no step. */
  assert_true(vs_workload_batch_allowed(1024, 4, 8));
  assert_false(vs_workload_batch_allowed(1000, 4, 8));
  assert_false(vs_workload_batch_allowed(0, 1ull << 32, 1ull << 32));
  assert_false(vs_workload_batch_allowed(8, 0, 8));
}

static void test_global_batch_divisibility(void **state)
{
  (void)state;
  /* micro_batch 2 * dp 3 (from --gpus 3) = 6 does not divide 8. */
  load_bad(GPT_MODEL "[training]\nmicro_batch = 2\nglobal_batch = 8\n", NULL, 0,
           3, VS_EINPUT,
           "@:10: [training] global_batch = 8: global_batch must be a multiple of "
           "micro_batch * dp = 2 * 3 = 6");
}

static void test_gpus_argument(void **state)
{
  (void)state;
  /* --gpus 3 over tp*pp = 2. The message says where tp and pp came from:
   * the file's line, a --set, or the default. */
  load_bad(GPT_MODEL "[parallel]\ntp = 2\n", NULL, 0, 3, VS_EINPUT,
           "--gpus 3 is not divisible by tp*pp = 2 (@:9: [parallel] tp = 2; "
           "@: [parallel] pp (default 1))");
  {
    static const char *const sets[] = {"parallel.pp=2"};
    load_bad(GPT_MODEL "[parallel]\ntp = 2\n", sets, 1, 6, VS_EINPUT,
             "--gpus 6 is not divisible by tp*pp = 4 (@:9: [parallel] tp = 2; "
             "--set parallel.pp=2)");
  }
  /* --gpus 8 against dp = 2 with tp 1: tp*pp*dp = 2 (dp on line 9). */
  load_bad(GPT_MODEL "[parallel]\ndp = 2\n", NULL, 0, 8, VS_EINPUT,
           "--gpus 8 contradicts @:9: [parallel] dp = 2: tp*pp*dp = 2; drop dp "
           "or --gpus");
}

static void test_master_weights_with_fp32(void **state)
{
  (void)state;
  load_bad(GPT_MODEL "[training]\nprecision = fp32\nmaster_weights = true\n",
           NULL, 0, 0, VS_EINPUT,
           "@:10: [training] master_weights = true: master weights only exist "
           "when precision is below fp32 (precision = fp32 here)");
}

/* Offload is allowed where DeepSpeed allows it; every other combination
 * names the key and the reason. */
static void test_offload_rules(void **state)
{
  vs_workload wl;
  char path[128];
  vs_error err;
  (void)state;
  load_bad(GPT_MODEL "[parallel]\noffload_optimizer = cpu\n", NULL, 0, 0,
           VS_EINPUT,
           "@:9: [parallel] offload_optimizer = cpu: optimizer offload moves "
           "ZeRO's partitioned optimizer states (ZeRO-Offload); it needs "
           "zero >= 1");
  load_bad(GPT_MODEL "[parallel]\nzero = 2\noffload_optimizer = nvme\n", NULL,
           0, 0, VS_EINPUT,
           "@:10: [parallel] offload_optimizer = nvme: NVMe offload is "
           "ZeRO-Infinity, which DeepSpeed offers with zero = 3 only");
  load_bad(GPT_MODEL "[training]\noptimizer = adam8bit\n[parallel]\nzero = 1\n"
                     "offload_optimizer = cpu\n",
           NULL, 0, 0, VS_EINPUT,
           "@:12: [parallel] offload_optimizer = cpu: adam8bit's blockwise "
           "kernels (bitsandbytes) run on the GPU only");
  /* DeepSpeed offloads activations as cpu_checkpointing: full
   * checkpointing's layer inputs */
  load_bad(GPT_MODEL "[training]\nframework = deepspeed\n"
                     "offload_activations = cpu\ncheckpointing = selective\n",
           NULL, 0, 0, VS_EINPUT,
           "@:10: [training] offload_activations = cpu: DeepSpeed offloads "
           "activations with its activation checkpointing "
           "(cpu_checkpointing), the checkpointed layers' inputs, which "
           "vsim simulates with checkpointing = full (here selective)");
  assert_int_equal(load_at(&wl, path,
                           GPT_MODEL "[training]\nframework = deepspeed\n"
                                     "offload_activations = cpu\n"
                                     "checkpointing = full\n",
                           NULL, 0, 0, &err),
                   0);
  load_bad(GPT_MODEL "[parallel]\nzero = 2\noffload_params = cpu\n", NULL, 0,
           0, VS_EINPUT,
           "@:10: [parallel] offload_params = cpu: only partitioned parameters "
           "can live off the GPU (ZeRO-3's offload_param, FSDP's CPUOffload); "
           "it needs zero = 3");
  /* FSDP2's CPUOffloadPolicy moves parameters and optimizer together, to
   * the host only; elsewhere offload is simulated as the host stepping an
   * fp32 master copy, which fp32 training (no master weights) has none
   * of */
  load_bad(GPT_MODEL "[training]\nframework = fsdp2\n[parallel]\ndp = 2\n"
                     "offload_optimizer = cpu\n",
           NULL, 0, 0, VS_EINPUT,
           "[parallel] offload_optimizer = cpu: FSDP2's CPUOffloadPolicy keeps "
           "the sharded parameters, their gradients and the optimizer states "
           "on the host together");
  load_bad(GPT_MODEL "[training]\nframework = fsdp2\n[parallel]\ndp = 2\n"
                     "offload_optimizer = nvme\noffload_params = nvme\n",
           NULL, 0, 0, VS_EINPUT, "(it has no NVMe)");
  load_bad(GPT_MODEL "[training]\nprecision = fp32\n[parallel]\nzero = 2\n"
                     "offload_optimizer = cpu\n",
           NULL, 0, 0, VS_EINPUT,
           "[parallel] offload_optimizer = cpu: optimizer offload is "
           "simulated as ZeRO-Offload steps a 16-bit model");
  assert_int_equal(load_at(&wl, path,
                           GPT_MODEL "[training]\nframework = fsdp2\n"
                                     "[parallel]\ndp = 2\n"
                                     "offload_optimizer = cpu\n"
                                     "offload_params = cpu\n",
                           NULL, 0, 0, &err),
                   0);
  /* what DeepSpeed runs loads */
  assert_int_equal(load_at(&wl, path,
                           GPT_MODEL "[parallel]\nzero = 1\n"
                                     "offload_optimizer = cpu\n",
                           NULL, 0, 0, &err), 0);
  assert_int_equal(load_at(&wl, path,
                           GPT_MODEL "[parallel]\nzero = 3\n"
                                     "offload_optimizer = nvme\n"
                                     "offload_params = nvme\n",
                           NULL, 0, 0, &err), 0);
  assert_int_equal(wl.parallel.offload_params, VS_OFFLOAD_NVME);
}

/* DeepSpeed's engine casts every floating-point parameter to the model's
 * dtype (engine.py _cast_module_mixed_precision at edaa7221) below ZeRO-3:
 * its preset makes the adapters bf16 or fp16 with the model, and an
 * adapter or floating-point base dtype other than the precision is
 * refused; int8 and nf4 storage, which it does not cast, stays allowed. */
static void test_deepspeed_casts_parameters(void **state)
{
  static const char *const lora_bf16[] = {"training.framework=deepspeed",
                                          "finetune.method=lora"};
  static const char *const lora_fp16[] = {"training.framework=deepspeed",
                                          "finetune.method=lora",
                                          "training.precision=fp16"};
  static const char *const qlora[] = {"training.framework=deepspeed",
                                      "finetune.method=qlora"};
  static const char *const full[] = {"training.framework=deepspeed"};
  static const char *const fp32_adapters[] = {"training.framework=deepspeed",
                                              "finetune.method=lora",
                                              "finetune.adapter_dtype=fp32"};
  static const char *const fp32_base[] = {
      "training.framework=deepspeed", "finetune.method=frozen",
      "finetune.trainable_layers=1", "finetune.base_dtype=fp32"};
  static const char *const fp32_model[] = {"training.framework=deepspeed",
                                           "finetune.method=lora",
                                           "training.precision=fp32"};
  static const char *const zero3[] = {"training.framework=deepspeed",
                                      "finetune.method=lora",
                                      "parallel.zero=3"};
  static const char *const zero3_fp32[] = {
      "training.framework=deepspeed", "finetune.method=lora", "parallel.zero=3",
      "finetune.adapter_dtype=fp32"};
  vs_workload wl;
  (void)state;
#define BF16 LLAMA_MODEL "[training]\nprecision = bf16\n"
  load_ok(&wl, BF16, lora_bf16, 2, 0);
  assert_int_equal(wl.finetune.adapter_dtype, VS_ADAPTER_BF16);
  load_ok(&wl, BF16, lora_fp16, 3, 0);
  assert_int_equal(wl.finetune.adapter_dtype, VS_ADAPTER_FP16);
  load_ok(&wl, BF16, qlora, 2, 0);
  assert_int_equal(wl.finetune.adapter_dtype, VS_ADAPTER_BF16);
  assert_int_equal(wl.finetune.base_dtype, VS_BASE_NF4);
  load_ok(&wl, BF16, full, 1, 0); /* no adapters: nothing to set */
  assert_int_equal(wl.finetune.adapter_dtype, VS_ADAPTER_FP32);
  load_ok(&wl, BF16, fp32_model, 3, 0); /* fp32: nothing is cast */
  assert_int_equal(wl.finetune.adapter_dtype, VS_ADAPTER_FP32);
  /* ZeRO-3 takes a model built under zero.Init, which the engine leaves
   * as it is (is_zero_init_model): PEFT's fp32 adapters stay, and may be
   * asked for */
  load_ok(&wl, BF16, zero3, 3, 0);
  assert_int_equal(wl.finetune.adapter_dtype, VS_ADAPTER_FP32);
  load_ok(&wl, BF16, zero3_fp32, 4, 0);
  load_bad(BF16, fp32_adapters, 3, 0, VS_EINPUT,
           "--set finetune.adapter_dtype=fp32: DeepSpeed casts every "
           "floating-point parameter to the model's dtype (engine.py "
           "_cast_module_mixed_precision), so under precision = bf16 "
           "adapter_dtype must be bf16");
  load_bad(BF16, fp32_base, 4, 0, VS_EINPUT,
           "--set finetune.base_dtype=fp32: DeepSpeed casts every "
           "floating-point parameter to the model's dtype (engine.py "
           "_cast_module_mixed_precision), so under precision = bf16 "
           "base_dtype must be bf16 (or precision, int8 or nf4)");
#undef BF16
}

/* LoRA's keys need adapters, QLoRA needs nf4, a 4-bit base needs QLoRA;
 * each refusal names the key. */
static void test_finetune_rules(void **state)
{
  vs_workload wl;
  char path[128];
  vs_error err;
  (void)state;
  load_bad(LLAMA_MODEL "[finetune]\nlora_rank = 16\n", NULL, 0, 0, VS_EINPUT,
           "@:10: [finetune] lora_rank = 16: LoRA's keys mean nothing with "
           "method = full (the default); set method = lora or qlora");
  /* at its default too, where the method is not set: a LoRA block that
   * forgot `method = lora` is not a full fine-tune (bad-input review) */
  load_bad(LLAMA_MODEL "[finetune]\nlora_rank = 8\n", NULL, 0, 0, VS_EINPUT,
           "@:10: [finetune] lora_rank = 8: LoRA's keys mean nothing with "
           "method = full (the default); set method = lora or qlora");
  /* ... and harmless at its default where the method is full by choice
   * (as `vsim show` writes them) */
  assert_int_equal(load_at(&wl, path,
                           LLAMA_MODEL "[finetune]\nmethod = full\n"
                                       "lora_rank = 8\n",
                           NULL, 0, 0, &err),
                   0);
  load_bad(LLAMA_MODEL "[finetune]\nbase_dtype = nf4\n", NULL, 0, 0,
           VS_EINPUT,
           "@:10: [finetune] base_dtype = nf4: with method = full every "
           "weight is trained in the training precision");
  load_bad(LLAMA_MODEL "[finetune]\nmethod = qlora\nbase_dtype = bf16\n", NULL,
           0, 0, VS_EINPUT,
           "@:11: [finetune] base_dtype = bf16: QLoRA stores the frozen base "
           "in nf4 (Dettmers et al. 2023); for adapters on a bf16 base use "
           "method = lora");
  load_bad(LLAMA_MODEL "[finetune]\nmethod = lora\nbase_dtype = nf4\n", NULL,
           0, 0, VS_EINPUT,
           "@:11: [finetune] base_dtype = nf4: adapters on a 4-bit base are "
           "QLoRA; use method = qlora");
  {
    /* bitsandbytes' layers are no Transformer Engine modules */
    static const char *const fp8[] = {"training.precision=fp8"};
    load_bad(LLAMA_MODEL "[finetune]\nmethod = qlora\n", fp8, 1, 0,
             VS_EINPUT,
             "--set training.precision=fp8: an nf4 base is bitsandbytes' "
             "layers, which Transformer Engine does not run; use precision "
             "= bf16 or fp16");
    load_bad(LLAMA_MODEL "[finetune]\nmethod = lora\nbase_dtype = int8\n",
             fp8, 1, 0, VS_EINPUT,
             "--set training.precision=fp8: an int8 base is bitsandbytes' "
             "layers, which Transformer Engine does not run; use precision "
             "= bf16 or fp16 (or base_dtype = fp8, Transformer Engine's own "
             "FP8 weights)");
  }
  load_bad(GPT_MODEL "[finetune]\nmethod = lora\nlora_targets = q,gate\n",
           NULL, 0, 0, VS_EINPUT,
           "@:10: [finetune] lora_targets = q,gate: a gpt MLP has no gate "
           "projection");
  load_bad(LLAMA_MODEL "[finetune]\nmethod = lora\nlora_targets = q,w\n",
           NULL, 0, 0, VS_EINPUT,
           "@:11: [finetune] lora_targets = q,w: 'w' is not one of q, k, v, "
           "o, gate, up or down");
  load_bad(LLAMA_MODEL "[parallel]\ntp = 2\n[finetune]\nmethod = lora\n",
           NULL, 0, 0, VS_EINPUT,
           "[parallel] tp = 2: LoRA adapters are simulated without tensor "
           "parallelism");
  load_bad(LLAMA_MODEL "[training]\nglobal_batch = 2\n"
                       "optimizer_in_backward = true\n",
           NULL, 0, 0, VS_EINPUT,
           "@:11: [training] optimizer_in_backward = true: stepping each "
           "gradient as backward makes it (torchtune's optimizer_in_bwd) needs "
           "one micro-batch per step");
  load_bad(LLAMA_MODEL "[finetune]\ntrainable_layers = 3\n", NULL, 0, 0,
           VS_EINPUT,
           "@:10: [finetune] trainable_layers = 3: more than the model's 2 "
           "layers");
  load_bad(LLAMA_MODEL "[training]\npaged_optimizer = true\n[parallel]\n"
                       "zero = 1\n",
           NULL, 0, 0, VS_EINPUT,
           "@:10: [training] paged_optimizer = true: bitsandbytes' paged "
           "optimizers page each tensor's states in CUDA managed memory");
  /* a partial fine-tune is method = frozen, with 1 to layers - 1 layers */
  load_bad(LLAMA_MODEL "[finetune]\ntrainable_layers = 1\n", NULL, 0, 0,
           VS_EINPUT,
           "@:10: [finetune] trainable_layers = 1: with method = full every "
           "layer trains; to train only the last 1, set method = frozen");
  load_bad(LLAMA_MODEL "[finetune]\nmethod = frozen\n", NULL, 0, 0,
           VS_EINPUT,
           "@:10: [finetune] method = frozen: method = frozen trains the last "
           "trainable_layers layers and freezes the rest; set [finetune] "
           "trainable_layers from 1 to 1 (with every layer trained, use method "
           "= full)");
  load_bad("[model]\narch = llama\nlayers = 1\nhidden = 64\nheads = 8\n"
           "vocab = 1000\nseq_len = 128\nffn_hidden = 172\n"
           "[finetune]\nmethod = frozen\n",
           NULL, 0, 0, VS_EINPUT,
           "@:10: [finetune] method = frozen: method = frozen trains the last "
           "trainable_layers layers and freezes the rest, which needs a model "
           "of at least 2 layers");
  load_bad(LLAMA_MODEL "[finetune]\nmethod = frozen\ntrainable_layers = 1\n"
                       "lora_rank = 4\n",
           NULL, 0, 0, VS_EINPUT,
           "@:12: [finetune] lora_rank = 4: method = frozen trains whole "
           "layers and has no adapters");
  /* bitsandbytes' formats are not tensor-parallel; fp8 (TE's) is */
  load_bad(LLAMA_MODEL "[parallel]\ntp = 2\n[finetune]\nmethod = frozen\n"
                       "trainable_layers = 1\nbase_dtype = nf4\n",
           NULL, 0, 0, VS_EINPUT,
           "[parallel] tp = 2: an int8 or nf4 base is simulated without "
           "tensor parallelism");
  assert_int_equal(load_at(&wl, path,
                           LLAMA_MODEL "[parallel]\ntp = 2\n[finetune]\n"
                                       "method = frozen\ntrainable_layers = 1\n"
                                       "base_dtype = fp8\n",
                           NULL, 0, 0, &err), 0);
  assert_int_equal(wl.finetune.base_dtype, VS_BASE_FP8);
  assert_true(vs_workload_finetune_tp_allowed(&wl.finetune, 8));
  wl.finetune.method = VS_FT_LORA;
  assert_false(vs_workload_finetune_tp_allowed(&wl.finetune, 2));
  assert_true(vs_workload_finetune_tp_allowed(&wl.finetune, 1));
  /* qlora's base defaults to nf4; the defaults are PEFT's */
  assert_int_equal(load_at(&wl, path, LLAMA_MODEL "[finetune]\nmethod = qlora\n",
                           NULL, 0, 0, &err), 0);
  assert_int_equal(wl.finetune.base_dtype, VS_BASE_NF4);
  assert_int_equal(wl.finetune.lora_rank, 8);
  assert_int_equal(wl.finetune.lora_targets,
                   1u << VS_LORA_Q | 1u << VS_LORA_V);
}

/* [finetune] double_quant: true by default (QLoRA's), false under the
 * Hugging Face Trainer's preset for an nf4 base (transformers'
 * BitsAndBytesConfig: bnb_4bit_use_double_quant=False), which the
 * workload may override; it means something only for an nf4 base, so
 * set away from its default over another it is refused, naming the key
 * where it was set. */
static void test_double_quant(void **state)
{
  static const char *const hf_qlora[] = {"training.framework=hf",
                                         "training.precision=bf16",
                                         "finetune.method=qlora"};
  static const char *const hf_dq[] = {
      "training.framework=hf", "training.precision=bf16",
      "finetune.method=qlora", "finetune.double_quant=true"};
  static const char *const hf_lora[] = {"training.framework=hf",
                                        "training.precision=bf16",
                                        "finetune.method=lora"};
  static const char *const lora_nodq[] = {"finetune.method=lora",
                                          "finetune.double_quant=false"};
  vs_workload wl;
  (void)state;
  load_ok(&wl, LLAMA_MODEL "[finetune]\nmethod = qlora\n", NULL, 0, 0);
  assert_true(wl.finetune.double_quant);
  load_ok(&wl, LLAMA_MODEL, hf_qlora, 3, 0);
  assert_false(wl.finetune.double_quant);
  load_ok(&wl, LLAMA_MODEL, hf_dq, 4, 0);
  assert_true(wl.finetune.double_quant);
  load_ok(&wl, LLAMA_MODEL, hf_lora, 3, 0); /* no nf4: the preset keeps out */
  assert_true(wl.finetune.double_quant);
  /* the preset reads the base QLoRA's default gives, and an nf4 base of
   * any method (vs_workload_base_dtype) */
  assert_int_equal(wl.finetune.base_dtype, VS_BASE_PRECISION);
  load_ok(&wl, LLAMA_MODEL, hf_qlora, 3, 0);
  assert_int_equal(wl.finetune.base_dtype, VS_BASE_NF4);
  load_ok(&wl,
          LLAMA_MODEL "[training]\nframework = hf\nprecision = bf16\n"
                      "[finetune]\nmethod = frozen\ntrainable_layers = 1\n"
                      "base_dtype = nf4\n",
          NULL, 0, 0);
  assert_false(wl.finetune.double_quant);
  load_ok(&wl,
          LLAMA_MODEL "[finetune]\nmethod = frozen\ntrainable_layers = 1\n"
                      "base_dtype = nf4\ndouble_quant = false\n",
          NULL, 0, 0);
  assert_false(wl.finetune.double_quant);
  load_bad(
      LLAMA_MODEL "[finetune]\nmethod = lora\nbase_dtype = int8\n"
                  "double_quant = false\n",
      NULL, 0, 0, VS_EINPUT,
      "@:12: [finetune] double_quant = false: double quantization is nf4's "
      "(bitsandbytes' compress_statistics), but base_dtype is int8; "
      "remove double_quant or use base_dtype = nf4 (method = qlora)");
  load_bad(LLAMA_MODEL, lora_nodq, 2, 0, VS_EINPUT,
           "--set finetune.double_quant=false: double quantization is "
           "nf4's");
}

/* An input that is no regular file, a FIFO without a writer, is refused
 * at once rather than waited on. */
static void test_input_not_regular_file(void **state)
{
  char dir[64], fifo[128];
  vs_workload wl;
  vs_error err;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(fifo, sizeof fifo, "%s/w.ini", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  vs_error_clear(&err);
  assert_int_equal(vs_workload_load(&wl, fifo, NULL, 0, 0, &err), VS_EIO);
  assert_non_null(strstr(err.msg, "w.ini: not a regular file (a device, "
                                  "FIFO or socket), not a workload file"));
  tu_remove_dir(dir);
}

/* A workload whose [model] points at a Hugging Face config.json written
 * beside it (relative paths are the workload file's folder's). */
static int load_with_json(vs_workload *wl, const char *json, const char *ini,
                          vs_error *err)
{
  char dir[64], jpath[128], wpath[128];
  FILE *f;
  int rc;
  tu_temp_dir(dir, sizeof dir);
  snprintf(jpath, sizeof jpath, "%s/config.json", dir);
  snprintf(wpath, sizeof wpath, "%s/w.ini", dir);
  assert_non_null(f = fopen(jpath, "w"));
  fputs(json, f);
  fclose(f);
  assert_non_null(f = fopen(wpath, "w"));
  fputs(ini, f);
  fclose(f);
  vs_error_clear(err);
  rc = vs_workload_load(wl, wpath, NULL, 0, 0, err);
  tu_remove_dir(dir);
  return rc;
}

#define HF_LLAMA                                                             \
  "{\"model_type\": \"llama\", \"hidden_size\": 256, "                      \
  "\"intermediate_size\": 688, \"num_hidden_layers\": 4, "                  \
  "\"num_attention_heads\": 8, \"num_key_value_heads\": 2, "                \
  "\"vocab_size\": 1000, \"tie_word_embeddings\": false}"

/* A small dense config.json of model_type `type` and more fields; it
 * gives num_key_value_heads, whose default differs between classes. */
#define HF_TYPE(type, more)                                                    \
  "{\"model_type\": " type ", \"hidden_size\": 256, "                          \
  "\"intermediate_size\": 688, \"num_hidden_layers\": 4, "                     \
  "\"num_attention_heads\": 8, \"num_key_value_heads\": 8, "                   \
  "\"vocab_size\": 1000" more "}"

/* A small GPT-2 config.json with more fields. */
#define HF_GPT2(more)                                                          \
  "{\"model_type\": \"gpt2\", \"n_embd\": 256, \"n_head\": 8, "                \
  "\"n_layer\": 2, \"vocab_size\": 1000" more "}"

/* A small MoE config.json of model_type and expert fields `more`; it
 * gives num_key_value_heads, whose default differs between classes. */
#define HF_MOE(more)                                                           \
  "{\"model_type\": " more ", \"hidden_size\": 256, "                          \
  "\"intermediate_size\": 688, \"num_hidden_layers\": 4, "                     \
  "\"num_attention_heads\": 8, \"num_key_value_heads\": 8, "                   \
  "\"num_experts_per_tok\": 2, \"vocab_size\": 1000}"

/* Loads a qwen2_moe config of 4 layers with decoder_sparse_step `step`
 * and mlp_only_layers `only`: the load's result. */
static int load_mlp_only(vs_workload *wl, const char *step, const char *only,
                         vs_error *err)
{
  char json[600];
  snprintf(json, sizeof json,
           HF_MOE("\"qwen2_moe\", \"num_experts\": 60, "
                  "\"moe_intermediate_size\": 96, "
                  "\"decoder_sparse_step\": %s, \"mlp_only_layers\": %s"),
           step, only);
  return load_with_json(
      wl, json, "[model]\nhf_config = config.json\nseq_len = 128\n", err);
}

/* Qwen's mlp_only_layers (transformers Qwen2MoeDecoderLayer: layer i is
 * sparse when not listed and (i + 1) % decoder_sparse_step == 0): the
 * first sparse layers listed move the first one on; a listed layer that
 * is dense anyway changes nothing; a gap, or what is not a layer
 * number, is refused naming the field. */
static void test_hf_mlp_only_layers(void)
{
  vs_workload wl;
  vs_error err;
  char where[400];
  assert_int_equal(load_mlp_only(&wl, "1", "[0]", &err), 0);
  assert_int_equal(wl.model.dense_layers, 1);
  assert_int_equal(wl.model.moe_every, 1);
  vs_conf_where(vs_workload_keys(), &wl.origins, "model", "dense_layers", where,
                sizeof where);
  assert_non_null(strstr(where, "(from field \"mlp_only_layers\""));
  assert_int_equal(load_mlp_only(&wl, "1", "[1, 0, 1]", &err), 0);
  assert_int_equal(wl.model.dense_layers, 2);
  /* step 2: layers 1 and 3 are sparse; listing 1 leaves layer 3 */
  assert_int_equal(load_mlp_only(&wl, "2", "[1]", &err), 0);
  assert_int_equal(wl.model.dense_layers, 3);
  assert_int_equal(wl.model.moe_every, 2);
  assert_int_equal(load_mlp_only(&wl, "2", "[0, 2]", &err), 0);
  assert_int_equal(wl.model.dense_layers, 1);
  assert_int_equal(load_mlp_only(&wl, "1", "[1]", &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "field \"mlp_only_layers\": dense layers "
                                  "at chosen places are not simulated"));
  assert_int_equal(load_mlp_only(&wl, "1", "[-1]", &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "field \"mlp_only_layers\" must be a list "
                                  "of layer numbers from 0 to 2^40"));
  assert_int_equal(load_mlp_only(&wl, "1", "[0.5]", &err), VS_EINPUT);
  /* every layer dense: no MoE layer left, refused by dense_layers' rule */
  assert_int_equal(load_mlp_only(&wl, "1", "[0, 1, 2, 3]", &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "dense_layers"));
}

/* [model] hf_config: the keys a config.json gives, where the workload does
 * not set them itself; every problem names the file and the field. */
static void test_hf_config(void **state)
{
  vs_workload wl;
  vs_error err;
  (void)state;
  assert_int_equal(load_with_json(&wl, HF_LLAMA,
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\nlayers = 2\n",
                                  &err), 0);
  assert_int_equal(wl.model.arch, VS_ARCH_LLAMA);
  assert_int_equal(wl.model.hidden, 256);
  assert_int_equal(wl.model.kv_heads, 2);
  assert_int_equal(wl.model.ffn_hidden, 688);
  assert_int_equal(wl.model.vocab, 1000);
  assert_int_equal(wl.model.layers, 2); /* the workload's own wins */
  assert_false(wl.model.tied_embeddings);
  assert_true(wl.model.dropout == 0.0); /* Llama has no dropout field */
  /* a dropout field the file lacks is its config class's default:
   * GPT2Config resid_pdrop 0.1, GPTNeoXConfig hidden_dropout 0.0, not the
   * workload's 0.1 for arch gpt; a field given wins */
  {
    static const struct {
      const char *json;
      double dropout;
    } cases[] = {{HF_GPT2(""), 0.1},
                 {HF_GPT2(", \"resid_pdrop\": 0.25"), 0.25},
                 {HF_TYPE("\"gpt_neox\"", ""), 0.0},
                 {HF_TYPE("\"bert\"", ""), 0.1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      assert_int_equal(load_with_json(&wl, cases[i].json,
                                      "[model]\nhf_config = config.json\n"
                                      "seq_len = 128\n",
                                      &err),
                       0);
      assert_true(wl.model.dropout == cases[i].dropout);
    }
  }
  /* a UTF-8 byte-order mark before the JSON is skipped (RFC 8259 8.1) */
  assert_int_equal(load_with_json(&wl, "\xEF\xBB\xBF" HF_LLAMA,
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n",
                                  &err),
                   0);
  assert_int_equal(wl.model.hidden, 256);
  {
    /* messages about a value from it say where it came from */
    char where[400];
    vs_conf_where(vs_workload_keys(), &wl.origins, "model", "hidden", where,
                  sizeof where);
    assert_non_null(strstr(where, "w.ini:2: [model] hidden = 256 (from "
                                  "field \"hidden_size\" of the file of "
                                  "[model] hf_config = config.json)"));
  }
  assert_int_equal(load_with_json(&wl, "{\"model_type\": \"falcon\"}",
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "w.ini:2: [model] hf_config = config.json: "));
  assert_non_null(strstr(err.msg, "model_type \"falcon\" is not one vsim "
                                  "reads (llama, mistral"));
  /* mixtures of experts: Mixtral's all-MoE layers; Qwen2-MoE's sparse step
   * (layer i sparse when (i + 1) % step == 0) and shared expert; experts
   * in a dense family, or Qwen's mlp_only_layers, are refused */
  assert_int_equal(load_with_json(&wl, HF_MOE("\"mixtral\", "
                                              "\"num_local_experts\": 8"),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), 0);
  assert_int_equal(wl.model.experts, 8);
  assert_int_equal(wl.model.experts_per_token, 2);
  assert_int_equal(wl.model.expert_ffn_hidden, 688);
  assert_int_equal(wl.model.shared_experts, 0);
  assert_int_equal(load_with_json(&wl, HF_MOE("\"qwen2_moe\", "
                                              "\"num_experts\": 60, "
                                              "\"moe_intermediate_size\": 96, "
                                              "\"shared_expert_intermediate_size\": 384, "
                                              "\"decoder_sparse_step\": 2"),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), 0);
  assert_int_equal(wl.model.experts, 60);
  assert_int_equal(wl.model.expert_ffn_hidden, 96);
  assert_int_equal(wl.model.shared_experts, 1);
  assert_int_equal(wl.model.shared_expert_ffn_hidden, 384);
  assert_int_equal(wl.model.dense_layers, 1);
  assert_int_equal(wl.model.moe_every, 2);
  assert_false(vs_workload_moe_layer(&wl.model, 0));
  assert_true(vs_workload_moe_layer(&wl.model, 1));
  assert_false(vs_workload_moe_layer(&wl.model, 2));
  assert_true(vs_workload_moe_layer(&wl.model, 3));
  /* the workload's shared_experts = 0 drops the file's shape of them,
   * width and gate (review: the gate was then refused) */
  assert_int_equal(
      load_with_json(&wl,
                     HF_MOE("\"qwen2_moe\", "
                            "\"num_experts\": 60, "
                            "\"moe_intermediate_size\": 96, "
                            "\"shared_expert_intermediate_size\": 384"),
                     "[model]\nhf_config = config.json\n"
                     "seq_len = 128\nshared_experts = 0\n",
                     &err),
      0);
  assert_int_equal(wl.model.shared_experts, 0);
  assert_int_equal(wl.model.shared_expert_ffn_hidden, 0);
  assert_false(wl.model.shared_expert_gate);
  assert_false(vs_conf_is_set(vs_workload_keys(), &wl.origins, "model",
                              "shared_expert_gate"));
  /* DeepSeek: layer l is MoE when l >= first_k_dense_replace and
   * l % moe_layer_freq == 0 (modeling_deepseek.py): k = 3, freq 2 gives
   * 4, 6, ... */
  assert_int_equal(load_with_json(&wl, HF_MOE("\"deepseek_v3\", "
                                              "\"n_routed_experts\": 8, "
                                              "\"moe_intermediate_size\": 96, "
                                              "\"n_shared_experts\": 1, "
                                              "\"first_k_dense_replace\": 3, "
                                              "\"moe_layer_freq\": 2, "
                                              "\"kv_lora_rank\": 32, "
                                              "\"q_lora_rank\": null, "
                                              "\"qk_nope_head_dim\": 32, "
                                              "\"qk_rope_head_dim\": 16, "
                                              "\"v_head_dim\": 32"),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\nlayers = 8\n", &err), 0);
  assert_false(vs_workload_moe_layer(&wl.model, 3));
  assert_true(vs_workload_moe_layer(&wl.model, 4));
  assert_false(vs_workload_moe_layer(&wl.model, 5));
  assert_true(vs_workload_moe_layer(&wl.model, 6));
  assert_int_equal(wl.model.kv_lora_rank, 32);
  assert_int_equal(wl.model.q_lora_rank, 0); /* null: a full projection */
  assert_int_equal(wl.model.shared_expert_ffn_hidden, 96);
  {
    /* a message about that dense_layers (4, from 3) names both fields */
    char where[400];
    vs_conf_where(vs_workload_keys(), &wl.origins, "model", "dense_layers",
                  where, sizeof where);
    assert_non_null(strstr(where, "[model] dense_layers = 4 (from field "
                                  "\"first_k_dense_replace\" rounded up to a "
                                  "multiple of \"moe_layer_freq\" of the "
                                  "file"));
  }
  /* a null step or frequency gives no key, as an absent one: every layer
   * sparse */
  assert_int_equal(load_with_json(&wl, HF_MOE("\"qwen2_moe\", "
                                              "\"num_experts\": 60, "
                                              "\"moe_intermediate_size\": 96, "
                                              "\"decoder_sparse_step\": null"),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), 0);
  assert_int_equal(wl.model.moe_every, 1);
  assert_int_equal(wl.model.dense_layers, 0);
  assert_int_equal(load_with_json(&wl, HF_MOE("\"deepseek_v3\", "
                                              "\"n_routed_experts\": 8, "
                                              "\"moe_intermediate_size\": 96, "
                                              "\"first_k_dense_replace\": 3, "
                                              "\"moe_layer_freq\": null, "
                                              "\"kv_lora_rank\": 32, "
                                              "\"qk_nope_head_dim\": 32, "
                                              "\"qk_rope_head_dim\": 16, "
                                              "\"v_head_dim\": 32"),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\nlayers = 8\n", &err), 0);
  assert_int_equal(wl.model.moe_every, 1);
  assert_int_equal(wl.model.dense_layers, 3);
  {
    /* not rounded: first_k_dense_replace alone gave it */
    char where[400];
    vs_conf_where(vs_workload_keys(), &wl.origins, "model", "dense_layers",
                  where, sizeof where);
    assert_non_null(strstr(where, "[model] dense_layers = 3 (from field "
                                  "\"first_k_dense_replace\" of the file"));
  }
  test_hf_mlp_only_layers();
  /* a value of another type is a type error, not a placement (review) */
  assert_int_equal(load_with_json(&wl,
                                  HF_MOE("\"qwen2_moe\", "
                                         "\"num_experts\": 60, "
                                         "\"moe_intermediate_size\": 96, "
                                         "\"mlp_only_layers\": \"x\""),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n",
                                  &err),
                   VS_EINPUT);
  assert_non_null(strstr(err.msg, "field \"mlp_only_layers\" must be a list "
                                  "of layer numbers (or null)"));
  assert_int_equal(load_with_json(&wl, HF_MOE("\"llama\", "
                                              "\"num_local_experts\": 8"),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "field \"num_local_experts\" = 8: "
                                  "mixtures of experts are not simulated in a "
                                  "llama config"));
  assert_int_equal(load_with_json(&wl, "{\"model_type\": \"llama\", "
                                       "\"hidden_size\": 256}",
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "field \"num_hidden_layers\" missing (it "
                                  "gives [model] layers)"));
  assert_int_equal(load_with_json(&wl,
                                  "{\"model_type\": \"gemma\", "
                                  "\"hidden_size\": 3072, "
                                  "\"intermediate_size\": 24576, "
                                  "\"num_hidden_layers\": 28, "
                                  "\"num_attention_heads\": 16, "
                                  "\"head_dim\": 256, "
                                  "\"vocab_size\": 256000}",
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n",
                                  &err),
                   0);
  assert_int_equal(wl.model.head_dim, 256); /* Gemma-7B's, not 3072 / 16 */
  assert_int_equal(load_with_json(&wl, "{\"model_type\": \"llama\",\n"
                                       "  \"hidden_size\": }",
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "config.json:2:"));
  assert_non_null(strstr(err.msg, "not valid JSON"));
  {
    /* a NUL byte (which Jansson's reader takes for the end of the file)
     * and a directory (which it reads as empty) are named as what they
     * are, not as JSON that ends early */
    char dir[64], path[128];
    FILE *f;
    tu_temp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/nul.json", dir);
    assert_non_null(f = fopen(path, "wb"));
    fwrite("{\"model_type\": \"llama\",\0 \"x\": 1}", 1, 32, f);
    fclose(f);
    vs_error_clear(&err);
    {
      vs_hf_model hf;
      assert_int_equal(vs_hf_config_read(path, &hf, &err), VS_EINPUT);
      assert_non_null(strstr(err.msg, "nul.json: byte 23 is a NUL: a "
                                      "config.json is text"));
      vs_error_clear(&err);
      assert_int_equal(vs_hf_config_read(dir, &hf, &err), VS_EIO);
      assert_non_null(strstr(err.msg, ": is a directory, not a Hugging Face "
                                      "config.json"));
    }
    tu_remove_dir(dir);
  }
  /* huge counts are refused before any arithmetic on them */
  assert_int_equal(load_with_json(&wl, "{\"model_type\": \"gpt2\", "
                                       "\"n_embd\": 4611686018427387904, "
                                       "\"n_head\": 12, \"n_layer\": 2, "
                                       "\"n_inner\": null, \"vocab_size\": 9}",
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "field \"n_embd\" must be a positive "
                                  "integer up to 2^40"));
  /* a mistyped head_dim is refused; a null num_key_value_heads is heads */
  assert_int_equal(load_with_json(&wl, "{\"model_type\": \"llama\", "
                                       "\"hidden_size\": 256, "
                                       "\"intermediate_size\": 688, "
                                       "\"num_hidden_layers\": 4, "
                                       "\"num_attention_heads\": 8, "
                                       "\"head_dim\": \"x\", "
                                       "\"vocab_size\": 1000}",
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "field \"head_dim\" must be a positive"));
  assert_int_equal(load_with_json(&wl, "{\"model_type\": \"llama\", "
                                       "\"hidden_size\": 256, "
                                       "\"intermediate_size\": 688, "
                                       "\"num_hidden_layers\": 4, "
                                       "\"num_attention_heads\": 8, "
                                       "\"num_key_value_heads\": null, "
                                       "\"vocab_size\": 1000}",
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), 0);
  assert_int_equal(wl.model.kv_heads, 8);
  assert_int_equal(load_with_json(&wl, HF_LLAMA,
                                  "[model]\nhf_config = missing.json\n"
                                  "seq_len = 128\n", &err), VS_EIO);
  assert_non_null(strstr(err.msg, "missing.json: cannot read Hugging Face "
                                  "config.json"));
}

/* The layers' options by arch: GPT and BERT have biases on every
 * linear and a learned table of seq_len positions (BERT 2 token types),
 * Llama none of them and rotary embeddings; what cannot go together is
 * refused naming the key. */
static void test_layer_options(void **state)
{
  vs_workload wl;
  const char *rotary[] = {"model.positions=rotary"};
  (void)state;
  load_ok(&wl, GPT_MODEL, NULL, 0, 1);
  assert_int_equal(wl.model.attention_bias, VS_BIAS_ALL);
  assert_true(wl.model.mlp_bias);
  assert_int_equal(wl.model.positions, VS_POS_LEARNED);
  assert_int_equal(wl.model.max_positions, 128);
  assert_int_equal(wl.model.type_vocab, 0);
  load_ok(&wl, LLAMA_MODEL, NULL, 0, 1);
  assert_int_equal(wl.model.attention_bias, VS_BIAS_NONE);
  assert_false(wl.model.mlp_bias);
  assert_false(wl.model.qk_norm);
  assert_int_equal(wl.model.positions, VS_POS_ROTARY);
  assert_int_equal(wl.model.max_positions, 0);
  load_ok(&wl, GPT_MODEL, rotary, 1, 1);
  assert_int_equal(wl.model.max_positions, 0);
  load_ok(&wl,
          "[model]\narch = bert\nlayers = 2\nhidden = 64\nheads = 8\n"
          "vocab = 1000\nseq_len = 128\nmax_positions = 512\n",
          NULL, 0, 1);
  assert_int_equal(wl.model.type_vocab, 2);
  assert_int_equal(wl.model.max_positions, 512);
  load_bad(GPT_MODEL "max_positions = 64\n", NULL, 0, 1, VS_EINPUT,
           "@:8: [model] max_positions = 64: the model learned 64 positions, "
           "fewer than seq_len (128, @:7: [model] seq_len = 128)");
  load_bad(GPT_MODEL "positions = rotary\nmax_positions = 512\n", NULL, 0, 1,
           VS_EINPUT,
           "@:9: [model] max_positions = 512: sizes a learned position "
           "table, and positions = rotary has none");
  load_bad(LLAMA_MODEL "type_vocab = 2\n", NULL, 0, 1, VS_EINPUT,
           "@:9: [model] type_vocab = 2: token types are BERT's");
  load_bad(LLAMA_MODEL "kv_lora_rank = 16\nattention_bias = qkv\n", NULL, 0, 1,
           VS_EINPUT,
           "@:10: [model] attention_bias = qkv: multi-head latent attention "
           "(kv_lora_rank > 0) is built without biases or head norms");
  load_bad("[model]\narch = bert\nlayers = 2\nhidden = 64\nheads = 8\n"
           "vocab = 1000\nseq_len = 128\npost_norms = true\n",
           NULL, 0, 1, VS_EINPUT,
           "@:8: [model] post_norms = true: BERT's layers norm each "
           "sublayer's output already");
  load_bad(LLAMA_MODEL "mtp_layers = 1\nlogit_softcap = 30\n", NULL, 0, 1,
           VS_EINPUT,
           "@:10: [model] logit_softcap = 30: the multi-token prediction's "
           "heads are not capped");
  load_bad(LLAMA_MODEL "kv_lora_rank = 16\nqk_norm = true\n", NULL, 0, 1,
           VS_EINPUT, "@:10: [model] qk_norm = true: multi-head latent");
  load_bad(LLAMA_MODEL "experts = 4\nshared_expert_gate = true\n", NULL, 0, 1,
           VS_EINPUT,
           "@:10: [model] shared_expert_gate = true: gates the shared "
           "experts, which this model has none of");
  load_bad(LLAMA_MODEL "shared_expert_gate = true\n", NULL, 0, 1, VS_EINPUT,
           "@:9: [model] shared_expert_gate = true: shapes mixture-of-experts "
           "layers");
  load_bad(LLAMA_MODEL "attention_bias = some\n", NULL, 0, 1, VS_EINPUT,
           "@:9: [model] attention_bias = some");
  /* heads of another width than hidden / heads (Mistral-Nemo's 32 x 128
   * over 5120); without head_dim the heads must divide hidden */
  load_ok(&wl, LLAMA_MODEL "head_dim = 16\n", NULL, 0, 1);
  assert_int_equal(wl.model.head_dim, 16);
  load_ok(&wl, LLAMA_MODEL, NULL, 0, 1);
  assert_int_equal(wl.model.head_dim, 64 / 8);
  load_ok(&wl,
          "[model]\narch = llama\nlayers = 2\nhidden = 100\nheads = 8\n"
          "head_dim = 16\nvocab = 1000\nseq_len = 128\nffn_hidden = 256\n",
          NULL, 0, 1);
  load_bad("[model]\narch = llama\nlayers = 2\nhidden = 100\nheads = 8\n"
           "vocab = 1000\nseq_len = 128\nffn_hidden = 256\n",
           NULL, 0, 1, VS_EINPUT,
           "must be divisible by heads, or set [model] head_dim");
  load_bad(LLAMA_MODEL "kv_lora_rank = 16\npositions = learned\n", NULL, 0, 1,
           VS_EINPUT,
           "@:10: [model] positions = learned: multi-head latent attention "
           "carries its own rotary part");
  load_bad(LLAMA_MODEL "experts = 4\nshared_expert_ffn_hidden = 64\n", NULL, 0,
           1, VS_EINPUT,
           "@:10: [model] shared_expert_ffn_hidden = 64: sizes the shared "
           "experts, which this model has none of");
  /* torchtitan's op-level policy saves aten.mm outputs; a biased linear
   * runs aten.addmm */
  load_bad(LLAMA_MODEL "mlp_bias = true\n[training]\ncheckpointing = ops\n",
           NULL, 0, 1, VS_EINPUT,
           "@:9: [model] mlp_bias = true: torchtitan's op-level policy counts "
           "and saves aten.mm alone");
  load_bad(LLAMA_MODEL "kv_lora_rank = 16\nhead_dim = 16\n", NULL, 0, 1,
           VS_EINPUT,
           "@:10: [model] head_dim = 16: multi-head latent attention's heads "
           "are qk_head_dim + qk_rope_head_dim and v_head_dim wide");
}

/* What a config.json's model_type adds to the family's counts, as
 * transformers' modeling files build it: Qwen2's q/k/v biases and
 * Qwen3's head norms (no field), Llama's attention_bias and mlp_bias
 * fields, GPT-NeoX's rotary embeddings and attention biases (true when
 * absent), GPT-2's n_positions (1024 when absent) and BERT's position and
 * token-type tables, Qwen2-MoE's shared-expert gate; a field that is no
 * boolean, or a value vsim refuses, names the field. */
static void test_hf_config_layer_options(void **state)
{
  static const char *const ini = "[model]\nhf_config = config.json\n"
                                 "seq_len = 128\n";
  vs_workload wl;
  vs_error err;
  (void)state;
  assert_int_equal(load_with_json(&wl, HF_TYPE("\"qwen2\"", ""), ini, &err), 0);
  assert_int_equal(wl.model.attention_bias, VS_BIAS_QKV);
  assert_false(wl.model.mlp_bias);
  assert_false(wl.model.qk_norm);
  assert_int_equal(load_with_json(&wl, HF_TYPE("\"qwen3\"", ""), ini, &err), 0);
  assert_int_equal(wl.model.attention_bias, VS_BIAS_NONE);
  assert_true(wl.model.qk_norm);
  assert_int_equal(
      load_with_json(&wl,
                     HF_TYPE("\"llama\"", ", \"attention_bias\": true, "
                                          "\"mlp_bias\": true"),
                     ini, &err),
      0);
  assert_int_equal(wl.model.attention_bias, VS_BIAS_ALL);
  assert_true(wl.model.mlp_bias);
  /* Mistral's attention has no bias whatever the file says */
  assert_int_equal(
      load_with_json(&wl, HF_TYPE("\"mistral\"", ", \"attention_bias\": true"),
                     ini, &err),
      0);
  assert_int_equal(wl.model.attention_bias, VS_BIAS_NONE);
  assert_int_equal(load_with_json(&wl, HF_TYPE("\"gpt_neox\"", ""), ini, &err),
                   0);
  assert_int_equal(wl.model.positions, VS_POS_ROTARY);
  assert_int_equal(wl.model.attention_bias, VS_BIAS_ALL);
  assert_int_equal(
      load_with_json(&wl,
                     HF_TYPE("\"gpt_neox\"", ", \"attention_bias\": false"),
                     ini, &err),
      0);
  assert_int_equal(wl.model.attention_bias, VS_BIAS_NONE);
  assert_true(wl.model.mlp_bias);
  assert_int_equal(
      load_with_json(&wl,
                     HF_TYPE("\"bert\"", ", \"type_vocab_size\": 1, "
                                         "\"max_position_embeddings\": "
                                         "256"),
                     ini, &err),
      0);
  assert_int_equal(wl.model.type_vocab, 1);
  assert_int_equal(wl.model.max_positions, 256);
  assert_int_equal(load_with_json(&wl, HF_TYPE("\"bert\"", ""), ini, &err), 0);
  assert_int_equal(wl.model.type_vocab, 2);
  assert_int_equal(wl.model.max_positions, 512);
  assert_int_equal(
      load_with_json(&wl, HF_GPT2(", \"n_positions\": 64"), ini, &err),
      VS_EINPUT);
  assert_non_null(strstr(err.msg, "w.ini:2: [model] max_positions = 64 (from "
                                  "field \"n_positions\" of the file of "
                                  "[model] hf_config = config.json): the "
                                  "model learned 64 positions, fewer than "
                                  "seq_len (128"));
  assert_int_equal(load_with_json(&wl, HF_GPT2(""), ini, &err), 0);
  assert_int_equal(wl.model.max_positions, 1024);
  /* a workload that makes the model rotary drops the config's table */
  assert_int_equal(load_with_json(&wl, HF_GPT2(""),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\npositions = rotary\n",
                                  &err),
                   0);
  assert_int_equal(wl.model.max_positions, 0);
  assert_int_equal(
      load_with_json(&wl, HF_TYPE("\"llama\"", ", \"attention_bias\": 1"), ini,
                     &err),
      VS_EINPUT);
  assert_non_null(strstr(err.msg, "field \"attention_bias\" must be true or "
                                  "false"));
  assert_int_equal(
      load_with_json(&wl,
                     HF_MOE("\"qwen2_moe\", "
                            "\"num_experts\": 60, "
                            "\"moe_intermediate_size\": 96, "
                            "\"shared_expert_intermediate_size\": 384"),
                     ini, &err),
      0);
  assert_true(wl.model.shared_expert_gate);
  assert_int_equal(wl.model.attention_bias, VS_BIAS_QKV);
  /* a field the file lacks is Qwen2MoeConfig's
   * shared_expert_intermediate_size = 5632 (configuration_qwen2_moe.py),
   * gate and all; a null one is no shared expert */
  assert_int_equal(load_with_json(&wl,
                                  HF_MOE("\"qwen2_moe\", "
                                         "\"num_experts\": 60, "
                                         "\"moe_intermediate_size\": 96"),
                                  ini, &err),
                   0);
  assert_int_equal(wl.model.shared_experts, 1);
  assert_int_equal(wl.model.shared_expert_ffn_hidden, 5632);
  assert_true(wl.model.shared_expert_gate);
  assert_int_equal(
      load_with_json(&wl,
                     HF_MOE("\"qwen2_moe\", "
                            "\"num_experts\": 60, "
                            "\"moe_intermediate_size\": 96, "
                            "\"shared_expert_intermediate_size\": null"),
                     ini, &err),
      0);
  assert_false(wl.model.shared_expert_gate); /* no shared experts */
  /* Gemma 2: sandwich norms, soft-capping at Gemma2Config's 50 and 30
   * when absent, none when null; Gemma 3: head norms, no capping */
  assert_int_equal(load_with_json(&wl, HF_TYPE("\"gemma2\"", ""), ini, &err),
                   0);
  assert_true(wl.model.post_norms);
  assert_true(wl.model.tied_embeddings);
  assert_true(wl.model.attn_softcap == 50.0 && wl.model.logit_softcap == 30.0);
  assert_int_equal(
      load_with_json(&wl,
                     HF_TYPE("\"gemma2\"", ", \"attn_logit_softcapping\": "
                                           "null, \"final_logit_softcapping"
                                           "\": 20.5"),
                     ini, &err),
      0);
  assert_true(wl.model.attn_softcap == 0.0 && wl.model.logit_softcap == 20.5);
  assert_true(wl.model.zero_centered_norm);
  assert_int_equal(wl.model.head_dim, 256); /* Gemma2Config's default */
  /* Gemma3Attention passes no cap: the field gives nothing */
  assert_int_equal(load_with_json(&wl,
                                  HF_TYPE("\"gemma3_text\"",
                                          ", \"attn_logit_softcapping\": 50.0"),
                                  ini, &err),
                   0);
  assert_true(wl.model.post_norms && wl.model.qk_norm);
  assert_true(wl.model.attn_softcap == 0.0 && wl.model.logit_softcap == 0.0);
  assert_true(wl.model.zero_centered_norm);
  assert_int_equal(
      load_with_json(&wl,
                     "{\"model_type\": \"gemma3\", \"text_config\": "
                     "{\"model_type\": \"gemma3_text\"}}",
                     ini, &err),
      VS_EINPUT);
  assert_non_null(strstr(err.msg, "model_type \"gemma3\" is a multimodal "
                                  "model (field \"text_config\")"));
  /* a Llama's heads stay hidden / heads wide */
  assert_int_equal(load_with_json(&wl, HF_TYPE("\"llama\"", ""), ini, &err), 0);
  assert_int_equal(wl.model.head_dim, 256 / 8);
  assert_false(wl.model.zero_centered_norm);
  assert_int_equal(
      load_with_json(
          &wl, HF_TYPE("\"gemma2\"", ", \"final_logit_softcapping\": \"30\""),
          ini, &err),
      VS_EINPUT);
  assert_non_null(strstr(err.msg, "field \"final_logit_softcapping\" must be "
                                  "a number from 0 to 1e6 or null (it gives "
                                  "[model] logit_softcap)"));
}

/* A field the config.json lacks or leaves null gives no key: the
 * workload's default (GPT-2's n_inner 4 x hidden, kv_heads as heads)
 * follows hidden and heads as the workload sets them; Qwen's null
 * mlp_only_layers is []; a head_dim of 2^40 is refused by its key's
 * bounds; a value out of a key's bounds names the hf_config line. */
static void test_hf_config_fields_it_lacks(void **state)
{
  const char *gpt2 = "{\"model_type\": \"gpt2\", \"n_embd\": 768, "
                     "\"n_head\": 12, \"n_layer\": 2, \"n_inner\": null, "
                     "\"vocab_size\": 1000}";
  vs_workload wl;
  vs_error err;
  (void)state;
  assert_int_equal(load_with_json(&wl, gpt2,
                                  "[model]\nhf_config = config.json\n"
                                  "hidden = 1536\nseq_len = 128\n",
                                  &err), 0);
  assert_int_equal(wl.model.ffn_hidden, 4 * 1536);
  assert_false(vs_conf_is_set(vs_workload_keys(), &wl.origins, "model",
                              "ffn_hidden"));
  assert_int_equal(load_with_json(&wl, gpt2,
                                  "[model]\nhf_config = config.json\n"
                                  "heads = 16\nseq_len = 128\n",
                                  &err), 0);
  assert_int_equal(wl.model.kv_heads, 16);
  assert_int_equal(load_with_json(&wl, HF_MOE("\"qwen2_moe\", "
                                              "\"num_experts\": 60, "
                                              "\"moe_intermediate_size\": 96, "
                                              "\"mlp_only_layers\": null"),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), 0);
  assert_int_equal(wl.model.experts, 60);
  assert_int_equal(load_with_json(&wl,
                                  "{\"model_type\": \"llama\", "
                                  "\"hidden_size\": 512, "
                                  "\"intermediate_size\": 1024, "
                                  "\"num_hidden_layers\": 2, "
                                  "\"num_attention_heads\": 8, "
                                  "\"head_dim\": 1099511627776, "
                                  "\"vocab_size\": 1000}",
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n",
                                  &err),
                   VS_EINPUT);
  assert_non_null(strstr(err.msg, "[model] head_dim = 1099511627776 (from "
                                  "field \"head_dim\" of the file of "
                                  "[model] hf_config = config.json): must "
                                  "be at most 100000"));
  assert_int_equal(load_with_json(&wl, "{\"model_type\": \"gpt2\", "
                                       "\"n_embd\": 1099511627776, "
                                       "\"n_head\": 1, \"n_layer\": 2, "
                                       "\"vocab_size\": 1000}",
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n", &err), VS_EINPUT);
  /* ... naming the config's own field, what to mend in the file */
  assert_non_null(strstr(err.msg, "w.ini:2: [model] hidden = 1099511627776 "
                                  "(from field \"n_embd\" of the file of "
                                  "[model] hf_config = config.json): must be "
                                  "at most"));
  assert_int_equal(load_with_json(&wl,
                                  "{\"model_type\": \"gpt2\", "
                                  "\"n_embd\": 64, \"n_head\": 1, "
                                  "\"n_layer\": 2, \"vocab_size\": "
                                  "1000, \"resid_pdrop\": 1.5}",
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\n",
                                  &err),
                   VS_EINPUT);
  assert_non_null(strstr(err.msg, "[model] dropout = 1.5 (from field "
                                  "\"resid_pdrop\" of the file of [model] "
                                  "hf_config = config.json): must be at most "
                                  "0.999"));
}

/* A small DeepSeek config.json of model_type `type` with MLA and expert
 * fields, and more. */
#define HF_DEEPSEEK(type, more)                                                \
  "{\"model_type\": \"" type "\", \"hidden_size\": 256, "                      \
  "\"intermediate_size\": 688, \"num_hidden_layers\": 8, "                     \
  "\"num_attention_heads\": 8, \"vocab_size\": 1000, "                         \
  "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, "                      \
  "\"moe_intermediate_size\": 96, \"kv_lora_rank\": 32, "                      \
  "\"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 16, "                       \
  "\"v_head_dim\": 32" more "}"

/* A field the file lacks gets its transformers config class's default
 * for the model_type, never vsim's own fallback where the two differ, or
 * is refused where that default is not certain; a message about such a
 * value names the class and the field to add. */
static void test_hf_config_class_defaults(void **state)
{
  static const char *const ini = "[model]\nhf_config = config.json\n"
                                 "seq_len = 128\n";
  static const char dense[] =
      "\"hidden_size\": 256, \"intermediate_size\": 688, "
      "\"num_hidden_layers\": 4, \"num_attention_heads\": 8, "
      "\"vocab_size\": 1000";
  char json[512];
  vs_workload wl;
  vs_error err;
  (void)state;
  /* MixtralConfig num_key_value_heads = 8 (configuration_mixtral.py), not
   * as many as the heads (32 here) */
  snprintf(json, sizeof json,
           "{\"model_type\": \"mixtral\", \"hidden_size\": 256, "
           "\"intermediate_size\": 688, \"num_hidden_layers\": 4, "
           "\"num_attention_heads\": 32, \"num_local_experts\": 8, "
           "\"num_experts_per_tok\": 2, \"vocab_size\": 1000}");
  assert_int_equal(load_with_json(&wl, json, ini, &err), 0);
  assert_int_equal(wl.model.kv_heads, 8);
  /* Gemma3TextConfig num_key_value_heads = 4 (configuration_gemma3.py) */
  snprintf(json, sizeof json, "{\"model_type\": \"gemma3_text\", %s}", dense);
  assert_int_equal(load_with_json(&wl, json, ini, &err), 0);
  assert_int_equal(wl.model.kv_heads, 4);
  /* Qwen3Config head_dim = 128, not hidden / heads = 32 */
  snprintf(json, sizeof json,
           "{\"model_type\": \"qwen3\", \"num_key_value_heads\": 8, %s}",
           dense);
  assert_int_equal(load_with_json(&wl, json, ini, &err), 0);
  assert_int_equal(wl.model.head_dim, 128);
  /* LlamaConfig's None: as many as the heads */
  snprintf(json, sizeof json, "{\"model_type\": \"llama\", %s}", dense);
  assert_int_equal(load_with_json(&wl, json, ini, &err), 0);
  assert_int_equal(wl.model.kv_heads, 8);
  /* Qwen2Config's 32 over 8 heads: refused by the heads' check, naming
   * the default; the workload's own kv_heads wins over it (a review found
   * it refused when the file was read, whatever the workload set) */
  snprintf(json, sizeof json, "{\"model_type\": \"qwen2\", %s}", dense);
  assert_int_equal(load_with_json(&wl, json, ini, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "[model] kv_heads = 32"));
  assert_int_equal(load_with_json(&wl, json,
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\nkv_heads = 4\n",
                                  &err),
                   0);
  assert_int_equal(wl.model.kv_heads, 4);
  /* the workload's own heads win, and the key's check refuses the
   * default that no longer divides them: Mixtral's 8 over 4 heads */
  snprintf(json, sizeof json,
           "{\"model_type\": \"mixtral\", \"hidden_size\": 256, "
           "\"intermediate_size\": 688, \"num_hidden_layers\": 4, "
           "\"num_attention_heads\": 32, \"num_local_experts\": 8, "
           "\"num_experts_per_tok\": 2, \"vocab_size\": 1000}");
  assert_int_equal(load_with_json(&wl, json,
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\nheads = 4\n",
                                  &err),
                   VS_EINPUT);
  /* ... naming the default as the type's, not as the file's field */
  assert_non_null(strstr(err.msg, "[model] kv_heads = 8 (the type's "
                                  "default, not in the file of [model] "
                                  "hf_config = config.json): heads (4)"));
  /* Gemma2Config's default changed between releases (16, then 4) */
  snprintf(json, sizeof json, "{\"model_type\": \"gemma2\", %s}", dense);
  assert_int_equal(load_with_json(&wl, json, ini, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "lacks \"num_key_value_heads\", whose "
                                  "default for model_type gemma2 "
                                  "(transformers' Gemma2Config) has changed "
                                  "between transformers releases and is not "
                                  "vsim's to guess; add the field, or set "
                                  "[model] kv_heads"));
  assert_int_equal(load_with_json(&wl, json,
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\nkv_heads = 4\n",
                                  &err),
                   0);
  assert_int_equal(wl.model.kv_heads, 4);
  /* DeepseekV3Config: q_lora_rank 1536, first_k_dense_replace 3,
   * n_shared_experts 1 (configuration_deepseek_v3.py) */
  assert_int_equal(
      load_with_json(&wl, HF_DEEPSEEK("deepseek_v3", ""), ini, &err), 0);
  assert_int_equal(wl.model.q_lora_rank, 1536);
  assert_int_equal(wl.model.dense_layers, 3);
  assert_int_equal(wl.model.shared_experts, 1);
  assert_int_equal(wl.model.shared_expert_ffn_hidden, 96);
  /* null is the file's own choice: a full query projection */
  assert_int_equal(
      load_with_json(&wl, HF_DEEPSEEK("deepseek_v3", ", \"q_lora_rank\": null"),
                     ini, &err),
      0);
  assert_int_equal(wl.model.q_lora_rank, 0);
  /* DeepseekV2Config: q_lora_rank 1536, first_k_dense_replace 0; its
   * n_shared_experts differs between releases (2, DeepSeek's None) */
  assert_int_equal(
      load_with_json(&wl,
                     HF_DEEPSEEK("deepseek_v2", ", \"n_shared_experts\": 2"),
                     ini, &err),
      0);
  assert_int_equal(wl.model.q_lora_rank, 1536);
  assert_int_equal(wl.model.dense_layers, 0);
  assert_int_equal(wl.model.shared_experts, 2);
  /* without it the workload must say how many (as for kv_heads) */
  assert_int_equal(
      load_with_json(&wl, HF_DEEPSEEK("deepseek_v2", ""), ini, &err),
      VS_EINPUT);
  assert_non_null(strstr(err.msg, "config.json lacks \"n_shared_experts\""));
  assert_non_null(strstr(err.msg, "or set [model] shared_experts"));
  assert_int_equal(load_with_json(&wl, HF_DEEPSEEK("deepseek_v2", ""),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\nshared_experts = 2\n",
                                  &err),
                   0);
  assert_int_equal(wl.model.shared_experts, 2);
  assert_int_equal(wl.model.shared_expert_ffn_hidden, 96);
  /* none: the file's expert width does not size shared experts */
  assert_int_equal(load_with_json(&wl, HF_DEEPSEEK("deepseek_v2", ""),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\nshared_experts = 0\n",
                                  &err),
                   0);
  assert_int_equal(wl.model.shared_experts, 0);
  assert_int_equal(wl.model.shared_expert_ffn_hidden, 0);
}

/* DeepSeek's configs as transformers saves them carry head_dim =
 * qk_rope_head_dim (DeepseekV3Config.__init__), which is accepted and
 * gives no key; another head_dim, or attention biases (which MLA would
 * put on q_a_proj, kv_a_proj_with_mqa and o_proj), are refused without
 * advice that would build another model; a multimodal config whose
 * text_config's model_type vsim does not read is refused outright. */
static void test_hf_config_refusals(void **state)
{
  static const char *const ini = "[model]\nhf_config = config.json\n"
                                 "seq_len = 128\n";
  vs_workload wl;
  vs_error err;
  (void)state;
  /* a workload's arch that the model_type does not build (bad-input
   * review: a Llama file built as GPT layers, 5.30 B parameters) */
  assert_int_equal(load_with_json(&wl, HF_DEEPSEEK("deepseek_v3", ""),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\narch = gpt\n",
                                  &err),
                   VS_EINPUT);
  assert_non_null(strstr(err.msg, "[model] arch = gpt: "));
  assert_non_null(strstr(err.msg, "config.json's model_type deepseek_v3 is "
                                  "built as arch = llama; remove [model] "
                                  "arch"));
  assert_int_equal(load_with_json(&wl, HF_DEEPSEEK("deepseek_v3", ""),
                                  "[model]\nhf_config = config.json\n"
                                  "seq_len = 128\narch = llama\n",
                                  &err),
                   0);
  assert_int_equal(
      load_with_json(&wl, HF_DEEPSEEK("deepseek_v3", ", \"head_dim\": 16"), ini,
                     &err),
      0);
  assert_false(
      vs_conf_is_set(vs_workload_keys(), &wl.origins, "model", "head_dim"));
  assert_int_equal(wl.model.qk_rope_head_dim, 16);
  assert_int_equal(
      load_with_json(&wl,
                     HF_DEEPSEEK("deepseek_v2", ", \"n_shared_experts\": 2, "
                                                "\"head_dim\": 16"),
                     ini, &err),
      0);
  assert_int_equal(
      load_with_json(&wl, HF_DEEPSEEK("deepseek_v3", ", \"head_dim\": 64"), ini,
                     &err),
      VS_EINPUT);
  assert_non_null(strstr(err.msg, "field \"head_dim\" = 64: a deepseek_v3 "
                                  "config's head_dim can only be its "
                                  "qk_rope_head_dim (16;"));
  assert_int_equal(
      load_with_json(&wl,
                     HF_DEEPSEEK("deepseek_v3", ", \"attention_bias\": true"),
                     ini, &err),
      VS_EINPUT);
  assert_non_null(strstr(err.msg, "field \"attention_bias\" is true: "
                                  "deepseek_v3's multi-head latent attention "
                                  "with biases (on q_a_proj, "
                                  "kv_a_proj_with_mqa and o_proj"));
  assert_null(strstr(err.msg, "none"));
  assert_int_equal(
      load_with_json(&wl,
                     HF_DEEPSEEK("deepseek_v3", ", \"attention_bias\": false"),
                     ini, &err),
      0);
  load_bad(LLAMA_MODEL "kv_lora_rank = 16\nattention_bias = all\n", NULL, 0, 1,
           VS_EINPUT,
           "@:10: [model] attention_bias = all: multi-head latent attention "
           "(kv_lora_rank > 0) is built without biases or head norms: with "
           "biases it is not simulated");
  assert_int_equal(
      load_with_json(&wl,
                     "{\"model_type\": \"llama4\", \"text_config\": "
                     "{\"model_type\": \"llama4_text\"}}",
                     ini, &err),
      VS_EINPUT);
  assert_non_null(strstr(err.msg, "model_type \"llama4\" is a multimodal "
                                  "model (field \"text_config\") whose "
                                  "text_config's model_type \"llama4_text\" "
                                  "is not one vsim reads either (llama, "));
  assert_null(strstr(err.msg, "give hf_config"));
  assert_int_equal(
      load_with_json(&wl,
                     "{\"model_type\": \"gemma3\", \"text_config\": "
                     "{\"model_type\": \"gemma3_text\"}}",
                     ini, &err),
      VS_EINPUT);
  assert_non_null(strstr(err.msg, "with that config's model_type "
                                  "(gemma3_text)"));
}

static void test_runtime_rules(void **state)
{
  (void)state;
  /* allocator settings need the caching allocator */
  load_bad(GPT_MODEL "[runtime]\nallocator = exact\nexpandable_segments = true\n",
           NULL, 0, 0, VS_EINPUT,
           "@:9: [runtime] allocator = exact: expandable_segments, "
           "max_split_size_mb and roundup_power2_divisions configure the "
           "caching allocator");
  /* PyTorch accepts only powers of 2 for roundup_power2_divisions */
  load_bad(GPT_MODEL "[runtime]\nroundup_power2_divisions = 3\n", NULL, 0, 0,
           VS_EINPUT, "@:9: [runtime] roundup_power2_divisions = 3: must be a "
                      "power of 2");
  /* nor max_split_size_mb below its 20 MiB large segment */
  load_bad(GPT_MODEL "[runtime]\nmax_split_size_mb = 19\n", NULL, 0, 0,
           VS_EINPUT, "@:9: [runtime] max_split_size_mb = 19: must be 0 (no "
                      "limit) or at least 20");
  {
    vs_workload wl;
    vs_error err;
    const char *sets[] = {"runtime.max_split_size_mb=20"};
    vs_error_clear(&err);
    assert_int_equal(tu_load_workload(&wl, GPT_MODEL, sets, 1, 1, &err), 0);
    assert_int_equal(wl.runtime.max_split_size_mb, 20);
  }
}

/* Which layers full checkpointing recomputes: all; the first N of each
 * model chunk (checkpoint_layers, Megatron-LM's block method: 8 layers on
 * pp = 2 split 4 + 4, or 3 + 5 with pp_layers); every N-th by 1-based
 * index among the stage's layers (checkpoint_every, torchtitan). Mistakes
 * name the key. */
static void test_checkpoint_choice(void **state)
{
  static const char model8[] =
      "[model]\narch = gpt\nlayers = 8\nhidden = 64\nheads = 8\n"
      "vocab = 1000\nseq_len = 128\n[training]\ncheckpointing = full\n"
      "global_batch = 4\n";
  static const char *const block[] = {"training.checkpoint_layers=1",
                                      "parallel.pp=2"};
  static const char *const uneven[] = {"training.checkpoint_layers=2",
                                       "parallel.pp=2",
                                       "parallel.pp_layers=3,5"};
  static const char *const every[] = {"training.checkpoint_every=3"};
  /* torchtitan counts each process's blocks: with pp = 2 (4 + 4 layers)
   * every 3rd is its 3rd, 3rd of stage 1 = layer 6 */
  static const char *const every_pp[] = {"training.checkpoint_every=3",
                                         "parallel.pp=2"};
  const bool want_all[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  const bool want_block[8] = {1, 0, 0, 0, 1, 0, 0, 0};
  const bool want_uneven[8] = {1, 1, 0, 1, 1, 0, 0, 0};
  const bool want_every[8] = {0, 0, 1, 0, 0, 1, 0, 0};
  const bool want_every_pp[8] = {0, 0, 1, 0, 0, 0, 1, 0};
  const struct {
    const char *const *sets;
    size_t n;
    const bool *want;
  } cases[] = {{NULL, 0, want_all},        {block, 2, want_block},
               {uneven, 3, want_uneven},   {every, 1, want_every},
               {every_pp, 2, want_every_pp}};
  vs_workload wl;
  char path[128];
  vs_error err;
  bool got[8];
  (void)state;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    assert_int_equal(load_at(&wl, path, model8, cases[c].sets, cases[c].n, 0,
                             &err), 0);
    vs_workload_checkpointed_layers(&wl, got);
    for (uint64_t l = 0; l < 8; l++)
      assert_int_equal(got[l], cases[c].want[l]);
  }
  load_bad(LLAMA_MODEL "[training]\ncheckpointing = ops\n[finetune]\n"
                       "method = lora\n",
           NULL, 0, 0, VS_EINPUT,
           "@:10: [training] checkpointing = ops: torchtitan's op-level policy "
           "is simulated for whole layers");
  load_bad(LLAMA_MODEL "[training]\nfused_cross_entropy = true\n[parallel]\n"
                       "tp = 2\n",
           NULL, 0, 0, VS_EINPUT,
           "@:10: [training] fused_cross_entropy = true: Liger Kernel's fused "
           "loss is not vocab-parallel; use tp = 1");
  load_bad(GPT_MODEL "[training]\ncheckpointing = ops\n", NULL, 0, 0,
           VS_EINPUT,
           "@:9: [training] checkpointing = ops: torchtitan's op-level policy "
           "is simulated for llama layers with flash attention and tp = 1 "
           "(here arch = gpt, attention = flash, tp = 1)");
  load_bad(GPT_MODEL "[training]\ncheckpoint_every = 2\n", NULL, 0, 0,
           VS_EINPUT,
           "@:9: [training] checkpoint_every = 2: chooses which layers full "
           "checkpointing recomputes; set checkpointing = full");
  load_bad(GPT_MODEL "[training]\ncheckpointing = full\ncheckpoint_layers = 1\n"
                     "checkpoint_every = 2\n",
           NULL, 0, 0, VS_EINPUT,
           "@:11: [training] checkpoint_every = 2: choose the checkpointed "
           "layers one way");
  load_bad(GPT_MODEL "[training]\ncheckpointing = full\ncheckpoint_layers = 3\n",
           NULL, 0, 0, VS_EINPUT,
           "@:10: [training] checkpoint_layers = 3: more than the model's 2 "
           "layers");
}

/* DeepSpeed's optimizer wrapper, by precision, ZeRO stage, pipeline and
 * gradient dtype (engine.py _do_optimizer_sanity_check at edaa7221;
 * frameworks.md 2.1-2.2): decided once, by
 * vs_workload_deepspeed_optimizer, and read by the engine's all-reduce
 * and clipping rules. */
static void test_deepspeed_optimizer_choice(void **state)
{
  static const struct {
    int framework, precision, grad_dtype, offload;
    uint64_t zero, pp;
    vs_ds_optimizer want;
  } cases[] = {
      {VS_FW_MEGATRON, VS_PREC_BF16, VS_GRAD_PRECISION, 0, 1, 1,
       VS_DS_OPT_NONE},
      {VS_FW_DEEPSPEED, VS_PREC_FP32, VS_GRAD_PRECISION, 0, 0, 1,
       VS_DS_OPT_TORCH},
      {VS_FW_DEEPSPEED, VS_PREC_FP16, VS_GRAD_PRECISION, 0, 0, 1,
       VS_DS_OPT_FP16},
      /* DDP_BFLOAT16 outside the pipeline engine */
      {VS_FW_DEEPSPEED, VS_PREC_BF16, VS_GRAD_PRECISION, 0, 0, 1,
       VS_DS_OPT_FP16},
      /* the pipeline engine's bf16 */
      {VS_FW_DEEPSPEED, VS_PREC_BF16, VS_GRAD_PRECISION, 0, 0, 2,
       VS_DS_OPT_BF16},
      {VS_FW_DEEPSPEED, VS_PREC_BF16, VS_GRAD_FP32, 0, 1, 1, VS_DS_OPT_BF16},
      /* the optimizer on the host: ZeRO's own, which offloads */
      {VS_FW_DEEPSPEED, VS_PREC_BF16, VS_GRAD_FP32, VS_OFFLOAD_CPU, 1, 1,
       VS_DS_OPT_ZERO},
      {VS_FW_DEEPSPEED, VS_PREC_BF16, VS_GRAD_PRECISION, 0, 1, 1,
       VS_DS_OPT_ZERO},
      {VS_FW_DEEPSPEED, VS_PREC_FP16, VS_GRAD_FP32, 0, 2, 1, VS_DS_OPT_ZERO},
      {VS_FW_DEEPSPEED, VS_PREC_BF16, VS_GRAD_FP32, 0, 3, 1, VS_DS_OPT_ZERO3},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    vs_training_conf t = {0};
    vs_parallel_conf p = {0};
    t.framework = cases[i].framework;
    t.precision = cases[i].precision;
    t.grad_dtype = cases[i].grad_dtype;
    p.offload_optimizer = cases[i].offload;
    p.zero = cases[i].zero;
    p.pp = cases[i].pp;
    vs_ds_optimizer got = vs_workload_deepspeed_optimizer(&t, &p);
    assert_int_equal(got, cases[i].want);
    /* the engine all-reduces for every wrapper but ZeRO's optimizers */
    assert_int_equal(vs_workload_deepspeed_engine_allreduce(&t, &p),
                     got == VS_DS_OPT_TORCH || got == VS_DS_OPT_FP16 ||
                         got == VS_DS_OPT_BF16);
    /* only without a wrapper does gradient_clipping decide the passes */
    assert_int_equal(vs_deepspeed_clip_matters(&t, &p), got == VS_DS_OPT_TORCH);
  }
}

/* [training] framework presets fill the keys the workload leaves unset:
 * DeepSpeed's reduce_bucket_size of 5e8 elements (1e9 B of fp16 grads),
 * gradients in the model's dtype (bf16 without ZeRO: FP16_Optimizer in
 * bf16; fp32 accumulation refused there, BF16_Optimizer at ZeRO-1);
 * Megatron's buckets of max(4e7, 1e6 x dp) parameters of fp32
 * main grads (bf16 forces them). What the workload sets wins, and
 * messages say a value came from the preset. */
static void test_framework_presets(void **state)
{
  static const char *const ds[] = {"training.framework=deepspeed",
                                   "training.precision=fp16"};
  static const char *const ds_bf16[] = {"training.framework=deepspeed",
                                        "parallel.dp=2",
                                        "training.global_batch=2"};
  static const char *const mg[] = {"training.framework=megatron",
                                   "parallel.dp=64",
                                   "training.global_batch=64"};
  static const char *const mine[] = {"training.framework=megatron",
                                     "parallel.bucket=25MiB"};
  vs_workload wl;
  char path[128], where[400];
  vs_error err;
  (void)state;
  assert_int_equal(load_at(&wl, path, GPT_MODEL, ds, 2, 0, &err), 0);
  assert_int_equal(wl.parallel.bucket_bytes, 1000000000);
  assert_int_equal(wl.parallel.zero, 0); /* fp16: FP16_Optimizer */
  assert_int_equal(load_at(&wl, path, GPT_MODEL, ds_bf16, 3, 0, &err), 0);
  assert_int_equal(wl.parallel.zero, 0); /* FP16_Optimizer in bf16 */
  assert_int_equal(wl.training.grad_dtype, VS_GRAD_PRECISION);
  assert_int_equal(vs_workload_deepspeed_optimizer(&wl.training, &wl.parallel),
                   VS_DS_OPT_FP16);
  assert_int_equal(wl.parallel.bucket_bytes, 1000000000);
  {
    /* fp32 accumulation of bf16 gradients: BF16_Optimizer at ZeRO-1,
     * refused without ZeRO (engine.py, #7790) */
    static const char *const z1[] = {"training.framework=deepspeed",
                                     "parallel.zero=1",
                                     "training.grad_dtype=fp32"};
    static const char *const z0[] = {"training.framework=deepspeed",
                                     "training.grad_dtype=fp32"};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, z1, 3, 0, &err), 0);
    assert_int_equal(
        vs_workload_deepspeed_optimizer(&wl.training, &wl.parallel),
        VS_DS_OPT_BF16);
    static const char *const z0_fp16[] = {"training.framework=deepspeed",
                                          "training.precision=fp16",
                                          "training.grad_dtype=fp32"};
    load_bad(GPT_MODEL, z0, 2, 0, VS_EINPUT,
             "--set training.grad_dtype=fp32: DeepSpeed accumulates bf16 "
             "gradients in fp32 (grad_accum_dtype) only with ZeRO; without "
             "it its engine refuses the mix (engine.py, since #7790): use "
             "zero >= 1 (with bf16, zero = 1 runs its BF16_Optimizer) or "
             "grad_dtype = precision");
    load_bad(GPT_MODEL, z0_fp16, 3, 0, VS_EINPUT,
             "--set training.grad_dtype=fp32: DeepSpeed accumulates fp16 "
             "gradients in fp32");
  }
  {
    /* DeepSpeed's and Megatron-LM's engines step after backward */
    static const char *const ds_bwd[] = {"training.framework=deepspeed",
                                         "training.optimizer_in_backward=true"};
    static const char *const mg_bwd[] = {"training.framework=megatron",
                                         "training.optimizer_in_backward=true"};
    load_bad(GPT_MODEL, ds_bwd, 2, 0, VS_EINPUT,
             "--set training.optimizer_in_backward=true: stepping each "
             "gradient as backward makes it is torchtune's");
    load_bad(GPT_MODEL, mg_bwd, 2, 0, VS_EINPUT,
             "megatron's engine steps after backward: use framework = hf, "
             "fsdp2 or none");
  }
  assert_int_equal(load_at(&wl, path, GPT_MODEL, mg, 3, 0, &err), 0);
  assert_int_equal(wl.training.grad_dtype, VS_GRAD_FP32);
  assert_int_equal(wl.parallel.bucket_bytes, 64000000ull * 4);
  vs_conf_where(vs_workload_keys(), &wl.origins, "training", "grad_dtype",
                where, sizeof where);
  assert_non_null(strstr(where, "--set training.framework=megatron: "
                                "[training] grad_dtype = fp32 (its preset)"));
  assert_int_equal(load_at(&wl, path, GPT_MODEL, mine, 2, 0, &err), 0);
  assert_int_equal(wl.parallel.bucket_bytes, 25ull << 20);
  {
    /* FP8 runs inside a bf16 model (--bf16 --fp8-format): fp32 main
     * grads too; fp16 keeps its own */
    static const char *const mg_fp8[] = {"training.framework=megatron",
                                         "training.precision=fp8"};
    static const char *const mg_fp16[] = {"training.framework=megatron",
                                          "training.precision=fp16"};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, mg_fp8, 2, 0, &err), 0);
    assert_int_equal(wl.training.grad_dtype, VS_GRAD_FP32);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, mg_fp16, 2, 0, &err), 0);
    assert_true(wl.training.grad_dtype != VS_GRAD_FP32);
  }
  {
    /* FSDP2 reduce-scatters each fully_shard unit's gradients alone: a
     * bucket of one byte closes at every block */
    static const char *const fsdp2[] = {"training.framework=fsdp2",
                                        "parallel.dp=2",
                                        "training.global_batch=2"};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, fsdp2, 3, 0, &err), 0);
    assert_int_equal(wl.parallel.bucket_bytes, 1);
  }
  {
    /* torchtitan's launch script runs the caching allocator with
     * expandable segments; with the exact allocator there is none to
     * configure, and a workload's own choice wins */
    static const char *const fsdp2[] = {"training.framework=fsdp2",
                                        "parallel.dp=2"};
    static const char *const exact[] = {"training.framework=fsdp2",
                                        "parallel.dp=2",
                                        "runtime.allocator=exact"};
    static const char *const own[] = {"training.framework=fsdp2",
                                      "parallel.dp=2",
                                      "runtime.expandable_segments=false"};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, fsdp2, 2, 0, &err), 0);
    assert_true(wl.runtime.expandable_segments);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, exact, 3, 0, &err), 0);
    assert_false(wl.runtime.expandable_segments);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, own, 3, 0, &err), 0);
    assert_false(wl.runtime.expandable_segments);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, mg, 3, 0, &err), 0);
    assert_false(wl.runtime.expandable_segments);
  }
  {
    /* torchtitan (training.compile = false) and the Trainer
     * (torch_compile = False) run their modules eagerly; the others fuse,
     * and a workload's own choice wins */
    static const char *const fsdp2[] = {"training.framework=fsdp2",
                                        "parallel.dp=2"};
    static const char *const hf[] = {"training.framework=hf"};
    static const char *const hf_fused[] = {"training.framework=hf",
                                           "training.kernels=fused"};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, fsdp2, 2, 0, &err), 0);
    assert_int_equal(wl.training.kernels, VS_KERNELS_EAGER);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, hf, 1, 0, &err), 0);
    assert_int_equal(wl.training.kernels, VS_KERNELS_EAGER);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, hf_fused, 2, 0, &err), 0);
    assert_int_equal(wl.training.kernels, VS_KERNELS_FUSED);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, mg, 3, 0, &err), 0);
    assert_int_equal(wl.training.kernels, VS_KERNELS_FUSED);
  }
  {
    /* gradient-accumulation fusion is Megatron-LM's fused weight-gradient
     * GEMM (framework none's fused kernels stand for it): eager kernels
     * and the Trainer, even compiled, add each gradient; a workload turns
     * it off (--no-gradient-accumulation-fusion) but not on where it
     * does not exist */
    static const char *const eager[] = {"training.kernels=eager"};
    static const char *const off[] = {"training.grad_accumulation_fusion=false"};
    static const char *const bad[] = {"training.kernels=eager",
                                      "training.grad_accumulation_fusion=true"};
    static const char *const hf[] = {"training.framework=hf",
                                     "training.kernels=fused"};
    static const char *const hf_on[] = {
        "training.framework=hf", "training.kernels=fused",
        "training.grad_accumulation_fusion=true"};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, hf, 2, 0, &err), 0);
    assert_false(wl.training.grad_accumulation_fusion);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, hf_on, 3, 0, &err),
                     VS_EINPUT);
    assert_non_null(strstr(err.msg, "the Trainer, DeepSpeed and FSDP2 add "
                                    "each gradient"));
    assert_int_equal(load_at(&wl, path, GPT_MODEL, NULL, 0, 0, &err), 0);
    assert_true(wl.training.grad_accumulation_fusion);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, eager, 1, 0, &err), 0);
    assert_false(wl.training.grad_accumulation_fusion);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, off, 1, 0, &err), 0);
    assert_false(wl.training.grad_accumulation_fusion);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, bad, 2, 0, &err),
                     VS_EINPUT);
    assert_non_null(strstr(err.msg, "--set training.grad_accumulation_fusion"
                                    "=true: gradient-accumulation fusion is "
                                    "Megatron-LM's fused weight-gradient "
                                    "GEMM; eager kernels"));
  }
  {
    /* offload_pin_memory says how offloaded states are held: true by
     * default, false with something offloaded, refused with nothing */
    static const char *const pageable[] = {"parallel.zero=3",
                                           "parallel.dp=2",
                                           "training.framework=deepspeed",
                                           "parallel.offload_params=cpu",
                                           "parallel.offload_optimizer=cpu",
                                           "parallel.offload_pin_memory=false"};
    static const char *const idle[] = {"parallel.offload_pin_memory=false"};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, NULL, 0, 0, &err), 0);
    assert_true(wl.parallel.offload_pin_memory);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, pageable, 6, 0, &err), 0);
    assert_false(wl.parallel.offload_pin_memory);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, idle, 1, 0, &err),
                     VS_EINPUT);
    assert_non_null(strstr(err.msg, "--set parallel.offload_pin_memory=false"
                                    ": says whether the host buffers of "
                                    "offloaded optimizer states and "
                                    "parameters are pinned"));
  }
  {
    /* set_grads_to_none is the loop's optimizer.zero_grad(): the
     * Trainer's and torchtitan's set them to None (their presets' true;
     * torchtitan keeps them under CUDA graphs) and either may be said;
     * Megatron-LM, DeepSpeed and framework none own their gradient
     * buffers */
    static const char *const hf[] = {"training.framework=hf"};
    static const char *const hf_kept[] = {"training.framework=hf",
                                          "training.set_grads_to_none=false"};
    static const char *const fsdp2[] = {"training.framework=fsdp2",
                                        "parallel.dp=2"};
    static const char *const fsdp2_kept[] = {
        "training.framework=fsdp2", "parallel.dp=2",
        "training.set_grads_to_none=false"};
    static const char *const own[][2] = {
        {"training.framework=megatron", "training.set_grads_to_none=true"},
        {"training.framework=deepspeed", "training.set_grads_to_none=true"},
        {"training.framework=none", "training.set_grads_to_none=true"}};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, hf, 1, 0, &err), 0);
    assert_true(wl.training.set_grads_to_none);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, hf_kept, 2, 0, &err), 0);
    assert_false(wl.training.set_grads_to_none);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, fsdp2, 2, 0, &err), 0);
    assert_true(wl.training.set_grads_to_none);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, fsdp2_kept, 3, 0, &err), 0);
    assert_false(wl.training.set_grads_to_none);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, NULL, 0, 0, &err), 0);
    assert_false(wl.training.set_grads_to_none);
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
      assert_int_equal(load_at(&wl, path, GPT_MODEL, own[i], 2, 0, &err),
                       VS_EINPUT);
      assert_non_null(strstr(err.msg, "--set training.set_grads_to_none=true"
                                      ": a PyTorch loop's "
                                      "optimizer.zero_grad() sets gradients "
                                      "to None (framework = hf or fsdp2), "
                                      "and framework = "));
    }
  }
  {
    /* grad_clipping: every framework's preset clips (its default norm of
     * 1.0), but with the optimizer in backward, which steps each block
     * before the norm of all exists: asking for both is refused; none
     * clips only when asked */
    static const char *const fws[] = {"training.framework=megatron",
                                      "training.framework=deepspeed",
                                      "training.framework=hf"};
    static const char *const in_bwd[] = {"training.framework=hf",
                                         "training.optimizer_in_backward=true"};
    static const char *const both[] = {"training.framework=hf",
                                       "training.optimizer_in_backward=true",
                                       "training.grad_clipping=true"};
    static const char *const off[] = {"training.framework=megatron",
                                      "training.grad_clipping=false"};
    for (size_t i = 0; i < sizeof fws / sizeof fws[0]; i++) {
      assert_int_equal(load_at(&wl, path, GPT_MODEL, &fws[i], 1, 0, &err), 0);
      assert_true(wl.training.grad_clipping);
    }
    assert_int_equal(load_at(&wl, path, GPT_MODEL, NULL, 0, 0, &err), 0);
    assert_false(wl.training.grad_clipping);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, off, 2, 0, &err), 0);
    assert_false(wl.training.grad_clipping);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, in_bwd, 2, 0, &err), 0);
    assert_false(wl.training.grad_clipping);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, both, 3, 0, &err),
                     VS_EINPUT);
    assert_non_null(strstr(err.msg, "--set training.grad_clipping=true: "
                                    "clipping needs the norm of all the "
                                    "gradients before any step"));
  }
  {
    /* PyTorch's foreach optimizer: torch.optim's Adam(W) and SGD over the
     * model's own parameters, on the GPU; refused for another optimizer,
     * for Megatron-LM's and DeepSpeed's own, and over master weights */
    static const char *const amp[] = {"training.precision=amp_bf16",
                                      "training.optimizer_impl=foreach"};
    static const char *const lion[] = {"training.precision=amp_bf16",
                                       "training.optimizer=lion",
                                       "training.optimizer_impl=foreach"};
    static const char *const megatron[] = {"training.framework=megatron",
                                           "training.optimizer_impl=foreach"};
    static const char *const master[] = {"training.precision=bf16",
                                         "training.optimizer_impl=foreach"};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, amp, 2, 0, &err), 0);
    assert_int_equal(wl.training.optimizer_impl, VS_OPTIMPL_FOREACH);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, lion, 3, 0, &err),
                     VS_EINPUT);
    assert_non_null(strstr(err.msg, "--set training.optimizer_impl=foreach: "
                                    "foreach is torch.optim's"));
    assert_int_equal(load_at(&wl, path, GPT_MODEL, megatron, 2, 0, &err),
                     VS_EINPUT);
    assert_non_null(strstr(err.msg, "own fused Adam"));
    assert_int_equal(load_at(&wl, path, GPT_MODEL, master, 2, 0, &err),
                     VS_EINPUT);
    assert_non_null(strstr(err.msg, "master weights are a mixed-precision "
                                    "wrapper's"));
  }
  {
    /* FSDP2 runs under torchtitan's pipelines; DeepSpeed's ZeRO-3 does
     * not. FSDP2 is fully_shard over dp > 1, without a master copy */
    static const char *const fsdp2_pp[] = {"training.framework=fsdp2",
                                           "parallel.pp=2", "parallel.dp=2",
                                           "training.global_batch=2"};
    static const char *const ds_pp[] = {"training.framework=deepspeed",
                                        "parallel.pp=2", "parallel.zero=3"};
    static const char *const fsdp2_dp1[] = {"training.framework=fsdp2"};
    static const char *const fsdp2_z2[] = {"training.framework=fsdp2",
                                           "parallel.dp=2", "parallel.zero=2",
                                           "training.global_batch=2"};
    static const char *const fsdp2_master[] = {
        "training.framework=fsdp2", "parallel.dp=2",
        "training.master_weights=true", "training.global_batch=2"};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, fsdp2_pp, 4, 0, &err), 0);
    assert_int_equal(wl.parallel.zero, 3);
    assert_false(wl.training.master_weights);
    load_bad(GPT_MODEL, ds_pp, 3, 0, VS_EINPUT,
             "--set parallel.zero=3: ZeRO-2/3 partition gradients across "
             "micro-batches");
    load_bad(GPT_MODEL, fsdp2_dp1, 1, 0, VS_EINPUT,
             "--set training.framework=fsdp2: FSDP2 shards over data (and "
             "context) parallelism, which this layout has not");
    load_bad(GPT_MODEL, fsdp2_z2, 4, 0, VS_EINPUT,
             "--set parallel.zero=2: FSDP2's fully_shard shards every "
             "parameter; with framework = fsdp2 use zero = 3");
    load_bad(GPT_MODEL, fsdp2_master, 4, 0, VS_EINPUT,
             "--set training.master_weights=true: FSDP2 steps its fp32 "
             "sharded parameters: there is no master copy");
    assert_true(vs_workload_zero_allowed(3, 4, VS_FW_FSDP2));
    assert_false(vs_workload_zero_allowed(1, 1, VS_FW_FSDP2));
  }
  {
    /* DeepSpeed's PipelineEngine runs TrainSchedule (1F1B) alone; the
     * schedule is refused before its own shape rules are read */
    static const char *const ds_il[] = {
        "training.framework=deepspeed", "parallel.pp=2",
        "parallel.schedule=interleaved", "parallel.virtual_stages=2",
        "training.global_batch=4"};
    static const char *const ds_gpipe[] = {"training.framework=deepspeed",
                                           "parallel.schedule=gpipe"};
    static const char *const mg_il[] = {
        "training.framework=megatron",   "parallel.pp=2",
        "parallel.schedule=interleaved", "parallel.virtual_stages=2",
        "training.global_batch=4",       "model.layers=4"};
    load_bad(GPT_MODEL, ds_il, 5, 0, VS_EINPUT,
             "--set parallel.schedule=interleaved: framework = deepspeed runs "
             "one pipeline schedule, 1f1b (its PipelineEngine's "
             "TrainSchedule), not interleaved");
    load_bad(GPT_MODEL, ds_gpipe, 2, 0, VS_EINPUT,
             "--set parallel.schedule=gpipe: framework = deepspeed runs one "
             "pipeline schedule, 1f1b");
    assert_int_equal(load_at(&wl, path, GPT_MODEL, mg_il, 6, 0, &err), 0);
    {
      static const char *const mg_gpipe[] = {"training.framework=megatron",
                                             "parallel.schedule=gpipe"};
      load_bad(GPT_MODEL, mg_gpipe, 2, 0, VS_EINPUT,
               "--set parallel.schedule=gpipe: framework = megatron runs "
               "1f1b or interleaved (Megatron-LM's pipeline schedules), not "
               "gpipe");
      assert_false(
          vs_workload_schedule_allowed(VS_SCHED_GPIPE, VS_FW_MEGATRON));
      assert_true(vs_workload_schedule_allowed(VS_SCHED_GPIPE, VS_FW_NONE));
    }
    assert_true(vs_workload_schedule_allowed(VS_SCHED_1F1B, VS_FW_DEEPSPEED));
    assert_true(vs_workload_schedule_allowed(VS_SCHED_GPIPE, VS_FW_FSDP2));
    assert_false(
        vs_workload_schedule_allowed(VS_SCHED_INTERLEAVED, VS_FW_DEEPSPEED));
  }
  {
    /* DeepSpeed's ZeRO-3 coordinator: its two limits preset to 1e9
     * (runtime/zero/config.py), the user's kept, and refused where
     * nothing reads them */
    static const char *const ds3[] = {"training.framework=deepspeed",
                                      "parallel.zero=3", "parallel.dp=2",
                                      "training.global_batch=2"};
    static const char *const ds3_live[] = {
        "training.framework=deepspeed", "parallel.zero=3", "parallel.dp=2",
        "training.global_batch=2", "parallel.max_live_parameters=5"};
    static const char *const fsdp2_live[] = {
        "training.framework=fsdp2", "parallel.dp=2", "training.global_batch=2",
        "parallel.max_live_parameters=5"};
    static const char *const ds2_reuse[] = {"training.framework=deepspeed",
                                            "parallel.zero=2",
                                            "parallel.max_reuse_distance=7"};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, ds3, 4, 0, &err), 0);
    assert_true(wl.parallel.max_live_parameters == 1000000000);
    assert_true(wl.parallel.max_reuse_distance == 1000000000);
    assert_int_equal(load_at(&wl, path, GPT_MODEL, ds3_live, 5, 0, &err), 0);
    assert_true(wl.parallel.max_live_parameters == 5);
    assert_true(wl.parallel.max_reuse_distance == 1000000000);
    load_bad(GPT_MODEL, fsdp2_live, 4, 0, VS_EINPUT,
             "--set parallel.max_live_parameters=5: max_live_parameters is "
             "DeepSpeed's ZeRO-3 parameter coordinator's "
             "(stage3_max_live_parameters): it needs framework = deepspeed "
             "and zero = 3 (here fsdp2, zero = 3)");
    load_bad(GPT_MODEL, ds2_reuse, 3, 0, VS_EINPUT,
             "--set parallel.max_reuse_distance=7: max_reuse_distance is "
             "DeepSpeed's ZeRO-3 parameter coordinator's "
             "(stage3_max_reuse_distance): it needs framework = deepspeed "
             "and zero = 3 (here deepspeed, zero = 2)");
    {
      /* 0 is DeepSpeed's too: no prefetch, nothing kept for reuse */
      static const char *const ds3_zero[] = {"training.framework=deepspeed",
                                             "parallel.zero=3",
                                             "parallel.dp=2",
                                             "training.global_batch=2",
                                             "parallel.max_live_parameters=0",
                                             "parallel.max_reuse_distance=0"};
      assert_int_equal(load_at(&wl, path, GPT_MODEL, ds3_zero, 6, 0, &err), 0);
      assert_true(wl.parallel.max_live_parameters == 0);
      assert_true(wl.parallel.max_reuse_distance == 0);
    }
    assert_true(vs_workload_deepspeed_zero3(VS_FW_DEEPSPEED, 3));
    assert_false(vs_workload_deepspeed_zero3(VS_FW_DEEPSPEED, 2));
    assert_false(vs_workload_deepspeed_zero3(VS_FW_NONE, 3));
  }
}

/* Megatron-LM's precision-aware optimizer: its state dtypes need it, and
 * it needs what Megatron-LM asserts (framework, Adam, the distributed
 * optimizer) and what vsim simulates (a master copy, no offload, the whole
 * model trained). */
static void test_precision_aware_rules(void **state)
{
  const char *pa = "training.precision_aware_optimizer=true";
  const char *mg[] = {"training.framework=megatron", "parallel.zero=1", pa,
                      "training.exp_avg_dtype=bf16",
                      "training.main_params_dtype=fp16"};
  const char *sgd[] = {mg[0], mg[1], pa, "training.optimizer=sgd"};
  const char *fp32[] = {mg[0], mg[1], pa, "training.precision=fp32"};
  const char *ds[] = {"training.framework=deepspeed", mg[1], pa};
  const char *z0[] = {mg[0], "parallel.zero=0", pa};
  /* framework none (Megatron-LM's own offload is refused first) */
  const char *off[] = {"training.framework=none", mg[1], pa,
                       "parallel.offload_optimizer=cpu"};
  vs_workload wl;
  vs_error err;
  char path[128];
  (void)state;
  assert_int_equal(load_at(&wl, path, LLAMA_MODEL, mg, 5, 2, &err), 0);
  assert_true(wl.training.precision_aware_optimizer);
  assert_int_equal(wl.training.exp_avg_dtype, VS_STATE_BF16);
  assert_int_equal(wl.training.exp_avg_sq_dtype, VS_STATE_FP32);
  assert_int_equal(wl.training.main_params_dtype, VS_MAIN_FP16);
  load_bad(LLAMA_MODEL "[training]\nexp_avg_sq_dtype = bf16\n", NULL, 0, 0,
           VS_EINPUT,
           "@:10: [training] exp_avg_sq_dtype = bf16: optimizer states below "
           "fp32 are Megatron-LM's precision-aware optimizer (Transformer "
           "Engine's FusedAdam): set precision_aware_optimizer = true");
  load_bad(LLAMA_MODEL, &mg[4], 1, 0, VS_EINPUT,
           "--set training.main_params_dtype=fp16: optimizer states below "
           "fp32");
  load_bad(LLAMA_MODEL, sgd, 4, 2, VS_EINPUT,
           "--set training.precision_aware_optimizer=true: Megatron-LM runs "
           "it with adam only");
  load_bad(LLAMA_MODEL, fp32, 4, 2, VS_EINPUT,
           "--set training.precision_aware_optimizer=true: it steps main "
           "parameters kept beside 16-bit weights");
  load_bad(LLAMA_MODEL, ds, 3, 2, VS_EINPUT,
           "--set training.precision_aware_optimizer=true: it is Megatron-LM's "
           "--use-precision-aware-optimizer: use framework = megatron");
  load_bad(LLAMA_MODEL, z0, 3, 2, VS_EINPUT,
           "--set parallel.zero=0: Megatron-LM runs the precision-aware "
           "optimizer only within its distributed optimizer");
  load_bad(LLAMA_MODEL, off, 4, 2, VS_EINPUT,
           "--set parallel.offload_optimizer=cpu: vsim steps an offloaded "
           "optimizer on ZeRO-Offload's fp32 host states");
  {
    const char *lora[] = {mg[0], mg[1], pa, "finetune.method=lora"};
    load_bad(LLAMA_MODEL, lora, 4, 2, VS_EINPUT,
             "--set finetune.method=lora: Megatron-LM's precision-aware "
             "optimizer is simulated for whole models");
  }
  load_bad(LLAMA_MODEL "[training]\nmain_params_dtype = bf16\n", NULL, 0, 0,
           VS_EINPUT,
           "@:10: [training] main_params_dtype = bf16: expected fp32 or fp16");
  load_bad(LLAMA_MODEL "[training]\nframework = megatron\n"
                       "optimizer = adafactor\n",
           NULL, 0, 0, VS_EINPUT,
           "@:11: [training] optimizer = adafactor: Megatron-LM's --optimizer "
           "offers adam, sgd (vsim's momentum with its default "
           "--sgd-momentum 0.9, sgd with 0) and lion");
}

/* [training] fp8_recipe is torchao's: its default (rowwise) goes
 * anywhere, nothing else reading it; another needs torchao's float8
 * (precision = fp8 under framework = fsdp2). */
static void test_fp8_recipe_rules(void **state)
{
  const char *hp[] = {"training.framework=fsdp2", "training.precision=fp8",
                      "training.fp8_recipe=rowwise_with_gw_hp"};
  const char *te[] = {"training.precision=fp8",
                      "training.fp8_recipe=tensorwise"};
  const char *rw[] = {"training.precision=fp8", "training.fp8_recipe=rowwise"};
  vs_workload wl;
  vs_error err;
  char path[128];
  (void)state;
  assert_int_equal(load_at(&wl, path, LLAMA_MODEL, hp, 3, 2, &err), 0);
  assert_int_equal(wl.training.fp8_recipe, VS_FP8_ROWWISE_GW_HP);
  assert_int_equal(load_at(&wl, path, LLAMA_MODEL, rw, 2, 2, &err), 0);
  load_bad(LLAMA_MODEL, te, 2, 2, VS_EINPUT,
           "--set training.fp8_recipe=tensorwise: fp8_recipe chooses the "
           "recipe of torchao's float8, which vsim simulates with precision "
           "= fp8 under framework = fsdp2 (here fp8 under none; Transformer "
           "Engine's delayed scaling elsewhere)");
}

/* framework = megatron shards with its distributed optimizer alone
 * (zero <= 1) and offloads nothing that vsim simulates (its
 * HybridDeviceOptimizer is not ZeRO-Offload): ZeRO-2/3, optimizer and
 * parameter offload are refused naming the framework to use (bad-input
 * review: all were accepted as under framework none). */
static void test_megatron_sharding_rules(void **state)
{
  const char *z2[] = {"training.framework=megatron", "parallel.zero=2"};
  const char *off[] = {"training.framework=megatron", "parallel.zero=1",
                       "parallel.offload_optimizer=cpu"};
  const char *par[] = {"training.framework=megatron", "parallel.zero=3",
                       "parallel.offload_params=cpu"};
  const char *ok[] = {"training.framework=megatron", "parallel.zero=1"};
  vs_workload wl;
  vs_error err;
  char path[128];
  (void)state;
  assert_int_equal(load_at(&wl, path, LLAMA_MODEL, ok, 2, 2, &err), 0);
  load_bad(LLAMA_MODEL, z2, 2, 2, VS_EINPUT,
           "--set parallel.zero=2: Megatron-LM shards the optimizer states "
           "with its distributed optimizer (zero = 1); sharding gradients "
           "and parameters is its FSDP");
  load_bad(LLAMA_MODEL, off, 3, 2, VS_EINPUT,
           "--set parallel.offload_optimizer=cpu: Megatron-LM offloads its "
           "optimizer with HybridDeviceOptimizer");
  load_bad(LLAMA_MODEL, par, 3, 2, VS_EINPUT,
           "--set parallel.offload_params=cpu: Megatron-LM offloads its "
           "optimizer with HybridDeviceOptimizer");
}

/* Megatron-LM's FP8 primary weights: FP8 GEMMs by Transformer Engine, its
 * distributed optimizer, trained weights; not simulated with offload or
 * the precision-aware optimizer. */
static void test_fp8_param_gather_rules(void **state)
{
  const char *on = "training.fp8_param_gather=true";
  const char *ok[] = {"training.framework=megatron", "parallel.zero=1",
                      "training.precision=fp8", on};
  const char *bf16[] = {ok[0], ok[1], on};
  const char *fsdp2[] = {"training.framework=fsdp2", ok[2], on};
  const char *z0[] = {ok[0], "parallel.zero=0", ok[2], on};
  const char *lora[] = {ok[0], ok[1], ok[2], on, "finetune.method=lora"};
  const char *pa[] = {ok[0], ok[1], ok[2], on,
                      "training.precision_aware_optimizer=true"};
  vs_workload wl;
  vs_error err;
  char path[128];
  (void)state;
  assert_int_equal(load_at(&wl, path, LLAMA_MODEL, ok, 4, 2, &err), 0);
  assert_true(wl.training.fp8_param_gather);
  load_bad(LLAMA_MODEL, bf16, 3, 2, VS_EINPUT,
           "--set training.fp8_param_gather=true: FP8 primary weights are "
           "Transformer Engine's FP8 modules'");
  load_bad(LLAMA_MODEL, fsdp2, 3, 2, VS_EINPUT,
           "--set training.fp8_param_gather=true: FP8 primary weights are "
           "Transformer Engine's FP8 modules'");
  load_bad(LLAMA_MODEL, z0, 4, 2, VS_EINPUT,
           "--set parallel.zero=0: Megatron-LM gathers FP8 parameters within "
           "its distributed optimizer");
  load_bad(LLAMA_MODEL, lora, 5, 2, VS_EINPUT,
           "--set finetune.method=lora: FP8 primary weights are trained ones");
  load_bad(LLAMA_MODEL, pa, 5, 2, VS_EINPUT,
           "--set training.fp8_param_gather=true: whether Transformer "
           "Engine's FusedAdam keeps int16 remainders");
  {
    const char *nomaster[] = {ok[0], ok[1], ok[2], on,
                              "training.master_weights=false"};
    /* framework none: under megatron its own offload and ZeRO-3 are
     * refused first (test_megatron_sharding_rules) */
    const char *off[] = {"training.framework=none", ok[1], ok[2], on,
                         "parallel.offload_optimizer=cpu"};
    const char *z3[] = {"training.framework=none", "parallel.zero=3", ok[2],
                        on};
    load_bad(LLAMA_MODEL, nomaster, 5, 2, VS_EINPUT,
             "--set training.master_weights=false: FP8 weights are updated "
             "from the distributed optimizer's fp32 main parameters");
    load_bad(LLAMA_MODEL, off, 5, 2, VS_EINPUT,
             "--set parallel.offload_optimizer=cpu: Megatron-LM's CPU "
             "optimizer over FP8 weights is not simulated");
    load_bad(LLAMA_MODEL, z3, 4, 2, VS_EINPUT,
             "--set parallel.zero=3: Megatron-LM gathers FP8 parameters "
             "within its distributed optimizer");
  }
}

/* [parallel] p2p: overlapped unless a preset or the workload says
 * otherwise; Megatron-LM blocks its 1F1B sends and overlaps its
 * interleaved ones (overlap_p2p_comm), DeepSpeed's engine blocks
 * (dist.send); the workload's own value wins over the preset's; a bad
 * value names the choices. */
static void test_p2p_presets(void **state)
{
  static const char *const none[] = {"parallel.pp=2"};
  static const char *const mg[] = {"training.framework=megatron",
                                   "parallel.pp=2"};
  static const char *const mg_int[] = {"training.framework=megatron",
                                       "parallel.pp=2",
                                       "parallel.schedule=interleaved",
                                       "parallel.virtual_stages=2",
                                       "model.layers=4",
                                       "training.global_batch=2"};
  static const char *const ds[] = {"training.framework=deepspeed",
                                   "parallel.pp=2"};
  static const char *const mine[] = {"training.framework=megatron",
                                     "parallel.pp=2", "parallel.tp=2",
                                     "parallel.p2p=overlapped",
                                     "parallel.p2p_scatter_gather=true"};
  static const char *const mg_pp1[] = {"training.framework=megatron"};
  static const char *const bad[] = {"parallel.p2p=async"};
  static const char *const no_pp[] = {"parallel.p2p=blocking"};
  static const char *const sg_pp1[] = {"parallel.tp=2",
                                       "parallel.p2p_scatter_gather=true"};
  static const char *const sg_tp1[] = {"parallel.pp=2",
                                       "parallel.p2p_scatter_gather=true"};
  static const char *const sg_sp[] = {"parallel.pp=2", "parallel.tp=2",
                                      "parallel.sequence_parallel=true",
                                      "parallel.p2p_scatter_gather=true"};
  vs_workload wl;
  char path[128], where[400];
  vs_error err;
  (void)state;
  assert_int_equal(load_at(&wl, path, GPT_MODEL, none, 1, 0, &err), 0);
  assert_int_equal(wl.parallel.p2p, VS_P2P_OVERLAPPED);
  assert_false(wl.parallel.p2p_scatter_gather);
  assert_int_equal(load_at(&wl, path, GPT_MODEL, mg, 2, 0, &err), 0);
  assert_int_equal(wl.parallel.p2p, VS_P2P_BLOCKING);
  vs_conf_where(vs_workload_keys(), &wl.origins, "parallel", "p2p", where,
                sizeof where);
  assert_non_null(strstr(where, "--set training.framework=megatron: "
                                "[parallel] p2p = blocking (its preset)"));
  assert_int_equal(load_at(&wl, path, GPT_MODEL, mg_int, 6, 0, &err), 0);
  assert_int_equal(wl.parallel.p2p, VS_P2P_OVERLAPPED);
  assert_int_equal(load_at(&wl, path, GPT_MODEL, ds, 2, 0, &err), 0);
  assert_int_equal(wl.parallel.p2p, VS_P2P_BLOCKING);
  assert_int_equal(load_at(&wl, path, GPT_MODEL, mine, 5, 0, &err), 0);
  assert_int_equal(wl.parallel.p2p, VS_P2P_OVERLAPPED);
  assert_true(wl.parallel.p2p_scatter_gather);
  /* without a pipeline the preset leaves the sends alone */
  assert_int_equal(load_at(&wl, path, GPT_MODEL, mg_pp1, 1, 0, &err), 0);
  assert_int_equal(wl.parallel.p2p, VS_P2P_OVERLAPPED);
  assert_string_equal(vs_p2p_name(VS_P2P_BLOCKING), "blocking");
  load_bad(GPT_MODEL, bad, 1, 0, VS_EINPUT,
           "--set parallel.p2p=async: expected overlapped or blocking");
  load_bad(GPT_MODEL, no_pp, 1, 0, VS_EINPUT,
           "--set parallel.p2p=blocking: says whether a pipeline stage waits "
           "for its sends, and pp = 1; set [parallel] pp");
  load_bad(GPT_MODEL, sg_pp1, 2, 0, VS_EINPUT,
           "--set parallel.p2p_scatter_gather=true: splits each pipeline send "
           "over the tensor-parallel ranks, and pp = 1; set [parallel] pp");
  load_bad(GPT_MODEL, sg_tp1, 2, 0, VS_EINPUT,
           "--set parallel.p2p_scatter_gather=true: splits each pipeline send "
           "over the tensor-parallel ranks, and tp = 1; set [parallel] tp");
  load_bad(GPT_MODEL, sg_sp, 4, 0, VS_EINPUT,
           "--set parallel.p2p_scatter_gather=true: with sequence parallelism "
           "each rank's pipeline tensor is already its 1/tp");
}

/* [parallel] overlap_grad_reduce: true unless a preset or the workload
 * says otherwise; Megatron-LM (no --overlap-grad-reduce) and DeepSpeed
 * below ZeRO-2 reduce after backward; DeepSpeed's ZeRO-2 (overlap_comm off
 * below ZeRO-3) reduce-scatters on the compute stream, ZeRO-3 on a stream
 * of its own; false is refused where nothing can wait (ZeRO-3, the
 * optimizer in backward), naming both keys' remedies. */
static void test_grad_reduce_presets(void **state)
{
  static const char *const none[] = {"parallel.dp=2",
                                     "training.global_batch=2"};
  static const char *const mg[] = {"training.framework=megatron",
                                   "parallel.dp=2", "parallel.zero=1",
                                   "training.global_batch=2"};
  static const char *const ds1[] = {"training.framework=deepspeed",
                                    "parallel.dp=2", "parallel.zero=1",
                                    "training.global_batch=2"};
  static const char *const ds2[] = {"training.framework=deepspeed",
                                    "parallel.dp=2", "parallel.zero=2",
                                    "training.global_batch=2"};
  static const char *const z2[] = {"parallel.dp=2", "parallel.zero=2",
                                   "training.global_batch=2",
                                   "parallel.overlap_grad_reduce=false"};
  static const char *const z3[] = {"parallel.dp=2", "parallel.zero=3",
                                   "training.global_batch=2",
                                   "parallel.overlap_grad_reduce=false"};
  static const char *const ds3[] = {"training.framework=deepspeed",
                                    "parallel.dp=2", "parallel.zero=3",
                                    "training.global_batch=2"};
  static const char *const oib[] = {"training.optimizer_in_backward=true",
                                    "parallel.overlap_grad_reduce=false"};
  vs_workload wl;
  char path[128], where[400];
  vs_error err;
  (void)state;
  assert_int_equal(load_at(&wl, path, GPT_MODEL, none, 2, 0, &err), 0);
  assert_true(wl.parallel.overlap_grad_reduce);
  assert_int_equal(load_at(&wl, path, GPT_MODEL, mg, 4, 0, &err), 0);
  assert_false(wl.parallel.overlap_grad_reduce);
  vs_conf_where(vs_workload_keys(), &wl.origins, "parallel",
                "overlap_grad_reduce", where, sizeof where);
  assert_non_null(strstr(where, "[parallel] overlap_grad_reduce = false (its "
                                "preset)"));
  assert_int_equal(load_at(&wl, path, GPT_MODEL, ds1, 4, 0, &err), 0);
  assert_false(wl.parallel.overlap_grad_reduce);
  assert_int_equal(load_at(&wl, path, GPT_MODEL, ds2, 4, 0, &err), 0);
  assert_false(wl.parallel.overlap_grad_reduce);
  assert_int_equal(load_at(&wl, path, GPT_MODEL, ds3, 4, 0, &err), 0);
  assert_true(wl.parallel.overlap_grad_reduce);
  assert_int_equal(load_at(&wl, path, GPT_MODEL, z2, 4, 0, &err), 0);
  assert_false(wl.parallel.overlap_grad_reduce);
  load_bad(GPT_MODEL, z3, 4, 0, VS_EINPUT,
           "--set parallel.overlap_grad_reduce=false: ZeRO-3 "
           "reduce-scatters on a stream of its own (DeepSpeed's "
           "reduce_and_partition_stream, FSDP2's) whatever overlap_comm "
           "says: use zero = 0, 1 or 2, or overlap_grad_reduce = true");
  load_bad(GPT_MODEL, oib, 2, 0, VS_EINPUT,
           "--set parallel.overlap_grad_reduce=false: reduces the step's "
           "gradients once its backward pass is done, but "
           "optimizer_in_backward steps each block as its gradients appear");
}

/* Autocast (precision = amp_bf16 | amp_fp16) and the Hugging Face
 * Trainer preset: no master copy (the weights are fp32); data parallelism
 * alone; whole fp32 models; each refusal names its key. framework = hf
 * sets amp_bf16 (Trainer bf16 = True) and DDP's 25 MiB buckets unless the
 * workload sets them. */
static void test_autocast_and_hf(void **state)
{
  static const char *const amp[] = {"training.precision=amp_bf16"};
  static const char *const hf[] = {"training.framework=hf", "parallel.dp=2",
                                   "training.global_batch=2"};
  static const char *const hf_bf16[] = {"training.framework=hf",
                                        "training.precision=bf16"};
  static const char *const master[] = {"training.precision=amp_fp16",
                                       "training.master_weights=true"};
  static const char *const tp[] = {"training.precision=amp_bf16",
                                   "parallel.tp=2"};
  static const char *const z3[] = {"training.precision=amp_bf16",
                                   "parallel.zero=3", "parallel.dp=2",
                                   "training.global_batch=2"};
  static const char *const hf_z1[] = {"training.framework=hf",
                                      "parallel.zero=1", "parallel.dp=2",
                                      "training.global_batch=2"};
  static const char *const mg[] = {"training.framework=megatron",
                                   "training.precision=amp_bf16"};
  static const char *const off[] = {"training.precision=amp_bf16",
                                    "training.offload_activations=cpu"};
  static const char *const ops[] = {"training.precision=amp_bf16",
                                    "training.checkpointing=ops"};
  vs_workload wl;
  char path[128], where[400];
  vs_error err;
  (void)state;
  assert_int_equal(load_at(&wl, path, GPT_MODEL, amp, 1, 0, &err), 0);
  assert_false(wl.training.master_weights);
  assert_true(vs_precision_autocast(wl.training.precision));
  assert_int_equal(vs_precision_gemm(wl.training.precision), VS_PREC_BF16);
  assert_int_equal(vs_precision_gemm(VS_PREC_AMP_FP16), VS_PREC_FP16);
  assert_int_equal(vs_precision_gemm(VS_PREC_FP8), VS_PREC_FP8);
  assert_int_equal(load_at(&wl, path, GPT_MODEL, hf, 3, 0, &err), 0);
  assert_int_equal(wl.training.precision, VS_PREC_AMP_BF16);
  assert_int_equal(wl.parallel.bucket_bytes, 25ull << 20);
  vs_conf_where(vs_workload_keys(), &wl.origins, "training", "precision",
                where, sizeof where);
  assert_non_null(strstr(where, "--set training.framework=hf: [training] "
                                "precision = amp_bf16 (its preset)"));
  /* a preset's value is refused at the line of the key that chose it */
  load_bad(LLAMA_MODEL "experts = 8\n[training]\nframework = hf\n", NULL, 0,
           0, VS_EINPUT,
           "@:11: [training] precision = amp_bf16 (the preset of "
           "[training] framework = hf): autocast over a mixture of experts");
  assert_int_equal(load_at(&wl, path, GPT_MODEL, hf_bf16, 2, 0, &err), 0);
  assert_int_equal(wl.training.precision, VS_PREC_BF16); /* the user's */
  assert_false(wl.training.master_weights); /* the Trainer keeps none */
  {
    static const char *const hf_fp16[] = {"training.framework=hf",
                                          "training.precision=fp16"};
    static const char *const hf_fp8[] = {"training.framework=hf",
                                         "training.precision=fp8"};
    load_bad(GPT_MODEL, hf_fp16, 2, 0, VS_EINPUT,
             "--set training.precision=fp16: the Trainer's fp16 = True "
             "unscales fp16 gradients, which GradScaler refuses");
    load_bad(GPT_MODEL, hf_fp8, 2, 0, VS_EINPUT,
             "--set training.precision=fp8: the Trainer's FP8 goes through "
             "Accelerate's Transformer Engine integration");
  }
  load_bad(GPT_MODEL, master, 2, 0, VS_EINPUT,
           "--set training.master_weights=true: autocast (precision = "
           "amp_fp16) keeps the weights in fp32");
  load_bad(
      GPT_MODEL, tp, 2, 0, VS_EINPUT,
      "--set parallel.tp=2: autocast is simulated with data parallelism alone");
  load_bad(GPT_MODEL, z3, 4, 0, VS_EINPUT,
           "--set parallel.zero=3: autocast is simulated with data parallelism "
           "alone");
  load_bad(GPT_MODEL, hf_z1, 4, 0, VS_EINPUT,
           "--set parallel.zero=1: the Hugging Face Trainer (framework = hf) "
           "is simulated with data parallelism alone");
  load_bad(GPT_MODEL, mg, 2, 0, VS_EINPUT,
           "--set training.precision=amp_bf16: autocast over fp32 weights is "
           "the Hugging Face Trainer's and plain PyTorch's recipe; megatron");
  load_bad(GPT_MODEL, off, 2, 0, VS_EINPUT,
           "--set training.offload_activations=cpu: autocast is simulated "
           "without activation offload");
  {
    /* under fsdp2 (zero = 3 its preset's) the precision is to blame */
    static const char *const fsdp2[] = {"training.framework=fsdp2",
                                         "training.precision=amp_bf16",
                                         "parallel.dp=2",
                                         "training.global_batch=2"};
    load_bad(GPT_MODEL, fsdp2, 4, 0, VS_EINPUT,
             "--set training.precision=amp_bf16: autocast over fp32 weights "
             "is the Hugging Face Trainer's and plain PyTorch's recipe; fsdp2");
  }
  load_bad("[model]\narch = llama\nlayers = 2\nhidden = 64\nheads = 4\n"
           "ffn_hidden = 128\nvocab = 100\nseq_len = 32\n",
           ops, 2, 0, VS_EINPUT,
           "--set training.checkpointing=ops: torchtitan's op-level policy "
           "runs under FSDP2's per-module casts");
  load_bad(GPT_MODEL "[finetune]\nmethod = lora\n", amp, 1, 0, VS_EINPUT,
           "--set training.precision=amp_bf16: autocast is simulated over an "
           "fp32 model trained whole");
  assert_null(vs_workload_dp_only_misfit(VS_PREC_BF16, VS_FW_NONE, 8, 8, 3,
                                         true));
  assert_string_equal(vs_workload_dp_only_misfit(VS_PREC_AMP_BF16, VS_FW_NONE,
                                                 1, 2, 0, false),
                      "pp");
  assert_null(vs_workload_dp_only_misfit(VS_PREC_AMP_BF16, VS_FW_NONE, 1, 1,
                                         2, false));
  assert_string_equal(vs_workload_dp_only_misfit(VS_PREC_BF16, VS_FW_HF, 1, 1,
                                                 1, false),
                      "zero");
}

/* Which frameworks run expert parallelism as vsim simulates it (Megatron-
 * LM's way): none, megatron and deepspeed with etp = tp; etp apart from tp
 * only none and megatron; fsdp2 and hf never. */
static void test_frameworks_running_ep(void **state)
{
  static const struct {
    int framework;
    bool ep, etp_apart;
  } cases[] = {
      {VS_FW_NONE, true, true},      {VS_FW_MEGATRON, true, true},
      {VS_FW_DEEPSPEED, true, false}, {VS_FW_FSDP2, false, false},
      {VS_FW_HF, false, false},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(
        vs_workload_framework_runs_ep(cases[i].framework, VS_ETP_AS_TP),
        cases[i].ep);
    assert_int_equal(
        vs_workload_framework_runs_ep(cases[i].framework, VS_ETP_APART),
        cases[i].etp_apart);
  }
}

/* Mixtures of experts: k of at most E experts, at least one MoE layer,
 * MoE keys only with experts (at their defaults, as show writes them,
 * they are harmless), and the combinations not simulated refused with the
 * key to change. */
static void test_experts(void **state)
{
  static const char *const moe[] = {"model.experts=8"};
  static const char *const topk[] = {"model.experts=4",
                                     "model.experts_per_token=5"};
  static const char *const dense[] = {"model.experts=4",
                                      "model.dense_layers=2"};
  static const char *const lonely[] = {"model.moe_every=2"};
  static const char *const harmless[] = {"model.experts=0",
                                         "model.experts_per_token=2",
                                         "model.expert_ffn_hidden=0"};
  static const char *const tp[] = {"model.experts=8", "parallel.tp=2"};
  static const char *const lora[] = {"model.experts=8",
                                     "finetune.method=lora"};
  static const char *const amp[] = {"model.experts=8",
                                    "training.precision=amp_bf16"};
  vs_workload wl;
  char path[128];
  vs_error err;
  (void)state;
  assert_int_equal(load_at(&wl, path, GPT_MODEL, moe, 1, 0, &err), 0);
  assert_int_equal(wl.model.expert_ffn_hidden, 4 * 64); /* ffn_hidden */
  assert_int_equal(wl.model.shared_expert_ffn_hidden, 0); /* none to size */
  assert_int_equal(load_at(&wl, path, GPT_MODEL, harmless, 3, 0, &err), 0);
  /* without experts = 0 said, a MoE key at its default is a model that
   * forgot its experts (bad-input review) */
  load_bad(GPT_MODEL, harmless + 1, 2, 0, VS_EINPUT,
           "--set model.experts_per_token=2: shapes mixture-of-experts "
           "layers, which this model has none of; set [model] experts");
  load_bad(GPT_MODEL, topk, 2, 0, VS_EINPUT,
           "--set model.experts_per_token=5: a token goes to at most the "
           "model's 4 experts");
  load_bad(GPT_MODEL, dense, 2, 0, VS_EINPUT,
           "--set model.dense_layers=2: leaves no mixture-of-experts layer");
  load_bad(GPT_MODEL, lonely, 1, 0, VS_EINPUT,
           "--set model.moe_every=2: shapes mixture-of-experts layers, which "
           "this model has none of");
  /* expert tensor parallelism runs with sequence parallelism, and tp
   * splits each expert's width */
  load_bad(GPT_MODEL, tp, 2, 0, VS_EINPUT,
           "[parallel] sequence_parallel (default false): mixture-of-experts "
           "layers with tp > 1 run as Megatron-LM runs them, with sequence "
           "parallelism");
  {
    static const char *const tp_sp[] = {"model.experts=8", "parallel.tp=2",
                                        "parallel.sequence_parallel=true"};
    static const char *const tp_width[] = {
        "model.experts=8", "model.expert_ffn_hidden=100", "parallel.tp=8",
        "parallel.sequence_parallel=true"};
    load_ok(&wl, GPT_MODEL, tp_sp, 3, 0);
    load_bad(GPT_MODEL, tp_width, 4, 0, VS_EINPUT,
             "--set parallel.tp=8: tp must divide expert_ffn_hidden (100)");
  }
  load_bad(GPT_MODEL, lora, 2, 0, VS_EINPUT,
           "--set finetune.method=lora: fine-tuning a mixture of experts");
  load_bad(GPT_MODEL, amp, 2, 0, VS_EINPUT,
           "--set training.precision=amp_bf16: autocast over a mixture of "
           "experts is not simulated");
  load_ok(&wl, GPT_MODEL, NULL, 0, 0);
  assert_true(vs_workload_moe_tp_allowed(&wl.model, 8, false, VS_FW_NONE));
  /* torchtitan splits MoE layers otherwise: refused, naming tp */
  {
    static const char *const fsdp[] = {"model.experts=8", "parallel.tp=2",
                                       "parallel.sequence_parallel=true",
                                       "training.framework=fsdp2",
                                       "parallel.zero=3", "parallel.dp=2",
                                       "training.global_batch=2"};
    static const char *const order[] = {"model.experts=8", "parallel.ep=2",
                                        "parallel.dp=2", "parallel.pp=2",
                                        "parallel.order=tp-pp-dp",
                                        "parallel.zero=1",
                                        "training.global_batch=2"};
    load_bad(GPT_MODEL, fsdp, 7, 0, VS_EINPUT,
             "--set parallel.tp=2: mixture-of-experts layers and latent "
             "attention with tp > 1 are simulated as Megatron-LM splits them; "
             "fsdp2 splits them otherwise");
    load_bad(GPT_MODEL, order, 7, 0, VS_EINPUT,
             "--set parallel.order=tp-pp-dp: with ep > 1 (or etp other than "
             "tp) and a pipeline");
  }
  {
    static const char *const ep3[] = {"model.experts=8", "parallel.ep=3",
                                      "parallel.dp=3",
                                      "training.global_batch=3"};
    static const char *const ep_dp[] = {"model.experts=8", "parallel.ep=4",
                                        "parallel.dp=2",
                                        "training.global_batch=2"};
    static const char *const ep_z2[] = {"model.experts=8", "parallel.ep=2",
                                        "parallel.dp=2", "parallel.zero=2",
                                        "training.global_batch=2"};
    static const char *const ep_dense[] = {"parallel.ep=2", "parallel.dp=2",
                                           "training.global_batch=2"};
    static const char *const skew[] = {"model.routing_skew=0.5"};
    load_bad(GPT_MODEL, ep3, 4, 0, VS_EINPUT,
             "--set parallel.ep=3: each of the ep ranks holds experts / ep "
             "experts: ep must divide experts (8)");
    load_bad(GPT_MODEL, ep_dp, 4, 0, VS_EINPUT,
             "--set parallel.ep=4: the ep ranks come out of the data- and "
             "context-parallel ones (Megatron-LM's rule): ep must divide dp x "
             "cp (2)");
    {
      /* ... of dp x cp: ep = 4 over dp 2 x cp 2 */
      static const char *const ep_cp[] = {"model.experts=8", "parallel.ep=4",
                                          "parallel.dp=2", "parallel.cp=2",
                                          "training.global_batch=2"};
      load_ok(&wl, GPT_MODEL, ep_cp, 5, 0);
    }
    load_bad(GPT_MODEL, ep_z2, 5, 0, VS_EINPUT,
             "--set parallel.zero=2: with ep > 1 (or etp other than tp) the "
             "expert states shard over the expert-data-parallel group");
    {
      /* DeepSpeed runs ZeRO-2 with experts (stage_1_and_2.py partitions
       * an MoE param group over its expert-data-parallel group); its
       * engine refuses ZeRO-3 with MoE layers (engine.py
       * _configure_zero_optimizer: "MoE not supported with Stage 3"),
       * which the refusal says, not Megatron-LM's rule */
      static const char *const ds_z2[] = {"model.experts=8",
                                          "parallel.ep=2",
                                          "parallel.dp=2",
                                          "parallel.zero=2",
                                          "training.framework=deepspeed",
                                          "training.global_batch=2"};
      static const char *const ds_z3[] = {"model.experts=8",
                                          "parallel.ep=2",
                                          "parallel.dp=2",
                                          "parallel.zero=3",
                                          "training.framework=deepspeed",
                                          "training.global_batch=2"};
      load_ok(&wl, GPT_MODEL, ds_z2, 6, 0);
      assert_int_equal(wl.parallel.zero, 2);
      load_bad(GPT_MODEL, ds_z3, 6, 0, VS_EINPUT,
               "--set parallel.zero=3: with ep > 1 deepspeed partitions the "
               "experts' states and gradients over their expert-data-"
               "parallel group up to ZeRO-2; its engine refuses ZeRO-3 with "
               "MoE layers");
      assert_int_equal(vs_workload_ep_zero_max(VS_FW_DEEPSPEED), 2);
      assert_int_equal(vs_workload_ep_zero_max(VS_FW_MEGATRON), 1);
      assert_int_equal(vs_workload_ep_zero_max(VS_FW_NONE), 1);
    }
    load_bad(GPT_MODEL, ep_dense, 3, 0, VS_EINPUT,
             "--set parallel.ep=2: expert parallelism spreads experts, which "
             "this model has none of");
    load_bad(GPT_MODEL, skew, 1, 0, VS_EINPUT,
             "--set model.routing_skew=0.5: shapes mixture-of-experts layers");
  }
  {
    /* expert tensor parallelism (Megatron-LM's expert_tensor_parallel_size):
     * the expert grid etp x ep x edp is made of a stage's tp x dp x cp
     * ranks; etp splits expert_ffn_hidden; only as Megatron-LM runs it */
    static const char *const etp1[] = {"model.experts=8", "parallel.tp=2",
                                       "parallel.sequence_parallel=true",
                                       "parallel.etp=1", "parallel.ep=2"};
    static const char *const etp_dense[] = {"parallel.tp=2",
                                            "parallel.sequence_parallel=true",
                                            "parallel.etp=1"};
    static const char *const etp_grid[] = {"model.experts=8", "parallel.tp=2",
                                           "parallel.sequence_parallel=true",
                                           "parallel.etp=4"};
    static const char *const etp_width[] = {
        "model.experts=8", "model.expert_ffn_hidden=100", "parallel.etp=8",
        "parallel.dp=8", "training.global_batch=8"};
    static const char *const etp_ds[] = {"model.experts=8", "parallel.etp=2",
                                         "parallel.dp=2",
                                         "training.framework=deepspeed",
                                         "training.global_batch=2"};
    static const char *const etp_order[] = {
        "model.experts=8", "parallel.etp=2", "parallel.dp=2", "parallel.pp=2",
        "parallel.order=tp-pp-dp", "training.global_batch=2"};
    load_ok(&wl, GPT_MODEL, etp1, 5, 0);
    assert_int_equal(vs_workload_etp(&wl.parallel), 1);
    /* 2 tp x 1 dp ranks = 1 etp x 2 ep x 1 edp */
    assert_int_equal(vs_workload_expert_dp(&wl.parallel), 1);
    assert_true(vs_workload_experts_apart(&wl.parallel));
    wl.parallel.ep = 1; /* 2 tp = 1 etp x 1 ep x 2 edp: apart from dp */
    assert_int_equal(vs_workload_expert_dp(&wl.parallel), 2);
    assert_true(vs_workload_experts_apart(&wl.parallel));
    wl.parallel.etp = 0; /* unset: tp (Megatron-LM's default) */
    assert_int_equal(vs_workload_etp(&wl.parallel), 2);
    assert_false(vs_workload_experts_apart(&wl.parallel));
    load_bad(GPT_MODEL, etp_dense, 3, 0, VS_EINPUT,
             "--set parallel.etp=1: expert tensor parallelism splits "
             "experts, which this model has none of");
    /* etp = tp = 1: what it means unset (plan.csv's parallel.etp) */
    load_ok(&wl, GPT_MODEL, etp_dense + 2, 1, 0);
    load_bad(GPT_MODEL, etp_grid, 4, 0, VS_EINPUT,
             "--set parallel.etp=4: the expert grid (etp x ep x "
             "expert-data-parallel ranks) is made of a stage's tp x dp x cp "
             "= 2 ranks (Megatron-LM's rule): etp x ep = 4 must divide them");
    load_bad(GPT_MODEL, etp_width, 5, 0, VS_EINPUT,
             "--set parallel.etp=8: etp splits each routed expert's FFN: it "
             "must divide expert_ffn_hidden (100)");
    load_bad(GPT_MODEL, etp_ds, 5, 0, VS_EINPUT,
             "--set parallel.etp=2: expert tensor parallelism is simulated "
             "as Megatron-LM runs it; deepspeed has none here: use etp = tp");
    load_bad(GPT_MODEL, etp_order, 6, 0, VS_EINPUT,
             "--set parallel.order=tp-pp-dp: with ep > 1 (or etp other than "
             "tp) and a pipeline");
  }
  {
    static const char *const cap[] = {"model.experts=8",
                                      "model.expert_capacity_factor=4.5"};
    static const char *const hf_ep[] = {"model.experts=8", "parallel.ep=2",
                                        "parallel.dp=2",
                                        "training.framework=hf",
                                        "training.precision=bf16",
                                        "training.global_batch=2"};
    /* k = 2 of E = 8: the hottest expert gets at most every token once,
     * (1 + s) k / E <= 1, so s <= 3 (more was capped, while the report
     * printed the share asked for) */
    static const char *const skew[] = {"model.experts=8",
                                       "model.routing_skew=3.5"};
    static const char *const skew_max[] = {"model.experts=8",
                                           "model.routing_skew=3"};
    load_bad(GPT_MODEL, cap, 2, 0, VS_EINPUT,
             "--set model.expert_capacity_factor=4.5: gives each expert more "
             "slots than the tokens");
    load_bad(GPT_MODEL, skew, 2, 0, VS_EINPUT,
             "--set model.routing_skew=3.5: gives the hottest expert more "
             "than one copy of each token ((1 + routing_skew) x k / E > 1: "
             "a token's k copies go to k different experts); at most 3 "
             "here");
    load_ok(&wl, GPT_MODEL, skew_max, 2, 0);
    assert_true(wl.model.routing_skew == 3);
    load_bad(GPT_MODEL, hf_ep, 6, 0, VS_EINPUT,
             "--set parallel.ep=2: expert parallelism is simulated as "
             "Megatron-LM runs it; hf has none here");
  }
  {
    /* context parallelism: 2 cp chunks a sequence (and tp more with SP),
     * flash, whole heads for a2a, no ep, no autocast; cp ranks count in
     * the GPUs */
    static const char *const cp3[] = {"parallel.cp=3"};
    static const char *const seq_100[] = {"model.seq_len=100"};
    static const char *const cp4[] = {"parallel.cp=4"};
    static const char *const cp_eager[] = {"parallel.cp=2",
                                           "training.attention=eager"};
    static const char *const a2a[] = {"parallel.cp=16",
                                      "parallel.cp_comm=a2a"};
    static const char *const cp_key[] = {"parallel.cp_comm=a2a"};
    static const char *const cp_amp[] = {"parallel.cp=2",
                                         "training.precision=amp_bf16"};
    assert_int_equal(load_at(&wl, path, GPT_MODEL, cp4, 1, 8, &err), 0);
    assert_int_equal(wl.parallel.dp, 2);
    assert_int_equal(wl.gpus, 8);
    load_bad(GPT_MODEL, cp3, 1, 0, VS_EINPUT,
             "--set parallel.cp=3: seq_len (128, @:7: [model] seq_len = "
             "128) must be a multiple of 2 x cp");
    /* a --set seq_len that does not split is named beside cp's line */
    load_bad(GPT_MODEL "[parallel]\ncp = 4\n", seq_100, 1, 0, VS_EINPUT,
             "@:9: [parallel] cp = 4: seq_len (100, --set model.seq_len=100) "
             "must be a multiple of 2 x cp");
    /* the message names where each factor came from, cp's too */
    load_bad(GPT_MODEL, cp4, 1, 6, VS_EINPUT,
             "--gpus 6 is not divisible by tp*cp*pp = 4 (@: [parallel] tp "
             "(default 1); --set parallel.cp=4; @: [parallel] pp (default "
             "1))");
    {
      /* the engine names a rank in 32 bits: a job of more GPUs than
       * VS_MAX_GPUS is refused, not run with ranks that wrap */
      static const char *const huge[] = {"parallel.dp=10000000",
                                         "parallel.pp=2",
                                         "training.global_batch=10000000"};
      load_bad(GPT_MODEL, huge, 3, 0, VS_EINPUT,
               "--set parallel.dp=10000000: tp*pp*dp = 2 x 10000000 GPUs, "
               "more than vsim simulates (at most 1000000)");
    }
    load_bad(GPT_MODEL, cp_eager, 2, 0, VS_EINPUT,
             "--set training.attention=eager: context parallelism runs flash");
    load_bad(GPT_MODEL, a2a, 2, 0, VS_EINPUT,
             "--set parallel.cp=16: cp_comm = a2a gives each rank whole heads");
    load_bad(GPT_MODEL, cp_key, 1, 0, VS_EINPUT,
             "--set parallel.cp_comm=a2a: says how context-parallel ranks "
             "exchange keys and values, and cp = 1");
    load_bad(GPT_MODEL, cp_amp, 2, 0, VS_EINPUT,
             "--set parallel.cp=2: autocast is simulated with data parallelism "
             "alone");
    {
      static const char *const cp_order[] = {"parallel.cp=2",
                                             "parallel.order=tp-pp-dp"};
      static const char *const cp_bwd[] = {"parallel.cp=2",
                                           "training.optimizer_in_backward="
                                           "true"};
      load_bad(GPT_MODEL, cp_order, 2, 0, VS_EINPUT,
               "--set parallel.order=tp-pp-dp: context-parallel ranks sit "
               "next to the tensor-parallel ones");
      load_bad(GPT_MODEL, cp_bwd, 2, 0, VS_EINPUT,
               "needs one micro-batch per step, dp = cp = 1");
    }
    {
      /* DeepSpeed's sequence parallelism is DeepSpeed-Ulysses: its
       * preset exchanges heads by all-to-all, and a ring is refused */
      static const char *const ds[] = {"training.framework=deepspeed",
                                       "parallel.cp=2"};
      static const char *const ds_ring[] = {"training.framework=deepspeed",
                                            "parallel.cp=2",
                                            "parallel.cp_comm=p2p"};
      static const char *const ds_cp1[] = {"training.framework=deepspeed"};
      assert_int_equal(load_at(&wl, path, GPT_MODEL, ds, 2, 0, &err), 0);
      assert_int_equal(wl.parallel.cp_comm, VS_CP_A2A);
      assert_int_equal(load_at(&wl, path, GPT_MODEL, ds_cp1, 1, 0, &err), 0);
      assert_int_equal(wl.parallel.cp_comm, VS_CP_P2P);
      /* torchtitan's default rotate method all-gathers the K, V shards;
       * the workload's own exchange wins */
      static const char *const tt[] = {"training.framework=fsdp2",
                                       "parallel.cp=2"};
      static const char *const tt_ring[] = {
          "training.framework=fsdp2", "parallel.cp=2", "parallel.cp_comm=p2p"};
      assert_int_equal(load_at(&wl, path, GPT_MODEL, tt, 2, 0, &err), 0);
      assert_int_equal(wl.parallel.cp_comm, VS_CP_ALLGATHER);
      assert_int_equal(load_at(&wl, path, GPT_MODEL, tt_ring, 3, 0, &err), 0);
      assert_int_equal(wl.parallel.cp_comm, VS_CP_P2P);
      /* whole heads a rank under a2a, the framework's (8 heads over 16) */
      static const char *const ds_heads[] = {"training.framework=deepspeed",
                                             "parallel.cp=16",
                                             "model.seq_len=256"};
      load_bad(GPT_MODEL, ds_heads, 3, 0, VS_EINPUT,
               "cp_comm = a2a gives each rank whole heads: tp x cp must "
               "divide heads and kv_heads (heads 8, kv_heads 8, tp x cp = "
               "16); framework = deepspeed exchanges by all-to-all");
      load_bad(GPT_MODEL, ds_ring, 3, 0, VS_EINPUT,
               "--set parallel.cp_comm=p2p: DeepSpeed's sequence parallelism "
               "(DeepSpeed-Ulysses) exchanges heads by all-to-all and runs "
               "no ring; set cp_comm = a2a");
    }
  }
  {
    /* multi-head latent attention: llama layers, flash, any tp, trained
     * whole; its head keys only with kv_lora_rank */
    static const char llama[] =
        "[model]\narch = llama\nlayers = 2\nhidden = 64\nheads = 4\n"
        "ffn_hidden = 128\nvocab = 100\nseq_len = 32\nkv_lora_rank = 16\n";
    static const char *const mla_tp[] = {"parallel.tp=2"};
    static const char *const eager[] = {"training.attention=eager"};
    static const char *const gpt[] = {"model.kv_lora_rank=16"};
    static const char *const mla_key[] = {"model.v_head_dim=8"};
    assert_int_equal(load_at(&wl, path, llama, NULL, 0, 0, &err), 0);
    assert_int_equal(wl.model.qk_head_dim, 16); /* hidden / heads */
    assert_int_equal(wl.model.v_head_dim, 16);
    load_ok(&wl, llama, mla_tp, 1, 0); /* heads split over tp */
    load_bad(llama, eager, 1, 0, VS_EINPUT,
             "--set training.attention=eager: multi-head latent attention");
    load_bad(GPT_MODEL, gpt, 1, 0, VS_EINPUT,
             "--set model.kv_lora_rank=16: multi-head latent attention is "
             "DeepSeek's, built on llama layers");
    load_bad(GPT_MODEL, mla_key, 1, 0, VS_EINPUT,
             "--set model.v_head_dim=8: shapes multi-head latent attention, "
             "which is off");
    {
      /* kv_heads means nothing under MLA: refused unless it is heads (it
       * changed no byte and no second, yet bounded tp) */
      static const char *const kv1[] = {"model.kv_heads=1"};
      static const char *const kv4[] = {"model.kv_heads=4"};
      load_bad(llama, kv1, 1, 0, VS_EINPUT,
               "--set model.kv_heads=1: under multi-head latent attention "
               "(kv_lora_rank > 0) every head's keys and values come from "
               "the shared latent, so kv_heads means nothing: leave it unset "
               "or equal to heads (4)");
      load_ok(&wl, llama, kv4, 1, 0);
    }
  }
}

/* [runtime] reserve: a share of the capacity (default 10%) or a size
 * with its unit; each mistake says what is allowed. */
static void test_reserve(void **state)
{
  vs_workload wl;
  char path[128];
  vs_error err;
  (void)state;
  assert_int_equal(load_at(&wl, path, GPT_MODEL, NULL, 0, 0, &err), 0);
  assert_true(wl.runtime.reserve.percent == 10.0);
  /* 10% of an 80 GiB GPU, rounded up to whole bytes */
  assert_int_equal(vs_margin_bytes(&wl.runtime.reserve, 85899345920ull),
                   8589934592ull);
  assert_int_equal(vs_margin_bytes(&wl.runtime.reserve, 1001), 101);
  assert_int_equal(load_at(&wl, path, GPT_MODEL "[runtime]\nreserve = 4GiB\n",
                           NULL, 0, 0, &err), 0);
  assert_true(wl.runtime.reserve.percent == 0.0);
  assert_int_equal(vs_margin_bytes(&wl.runtime.reserve, 85899345920ull),
                   4ull << 30);
  assert_int_equal(load_at(&wl, path, GPT_MODEL "[runtime]\nreserve = 2.5%\n",
                           NULL, 0, 0, &err), 0);
  assert_true(wl.runtime.reserve.percent == 2.5);
  load_bad(GPT_MODEL "[runtime]\nreserve = 100%\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [runtime] reserve = 100%: a share of the capacity is a "
           "percentage from 0% to below 100%, e.g. 10%");
  load_bad(GPT_MODEL "[runtime]\nreserve = lots%\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [runtime] reserve = lots%: a share of the capacity");
  load_bad(GPT_MODEL "[runtime]\nreserve = 4\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [runtime] reserve = 4: a size needs its unit");
  load_bad(GPT_MODEL "[runtime]\nreserve = 5TiB\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [runtime] reserve = 5TiB: must be at most 4TiB");
}

/* Pipeline layouts: each impossible one names the key to change. GPT_MODEL
 * has 2 layers. */
static void test_pipeline_validation(void **state)
{
  static const char *const gpipe_v2[] = {"parallel.pp=2",
                                         "parallel.virtual_stages=2"};
  static const char *const zero2[] = {"parallel.pp=2", "parallel.zero=2"};
  static const char *const split3[] = {"parallel.pp=2", "parallel.pp_layers=1,1,1"};
  static const char *const split_sum[] = {"parallel.pp=2", "parallel.pp_layers=1,2"};
  static const char *const split_ok[] = {"parallel.pp=2", "parallel.pp_layers=1,1"};
  vs_workload wl;
  vs_error err;
  (void)state;
  load_bad(GPT_MODEL "[parallel]\npp = 3\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [parallel] pp = 3: pp must not exceed layers (2)");
  load_bad(GPT_MODEL, gpipe_v2, 2, 0, VS_EINPUT,
           "--set parallel.virtual_stages=2: virtual_stages > 1 needs schedule "
           "= interleaved");
  /* interleaving needs pp >= 2 and virtual stages >= 2 */
  load_bad(GPT_MODEL "[parallel]\nschedule = interleaved\n", NULL, 0, 0,
           VS_EINPUT, "@:9: [parallel] schedule = interleaved: the interleaved "
                      "schedule needs pp >= 2 and virtual_stages >= 2");
  /* 4 layers, pp 2 x 2 chunks; 1 micro-batch is not a multiple of pp 2 */
  load_bad("[model]\narch = gpt\nlayers = 4\nhidden = 64\nheads = 8\n"
           "vocab = 1000\nseq_len = 128\n[parallel]\npp = 2\n"
           "schedule = interleaved\nvirtual_stages = 2\n",
           NULL, 0, 0, VS_EINPUT,
           "micro-batches per step (1 = global_batch / (micro_batch * dp)) to "
           "be a multiple of pp (2)");
  /* 2 layers cannot make pp 2 x 2 chunks */
  load_bad(GPT_MODEL "[training]\nglobal_batch = 2\n[parallel]\npp = 2\n"
                     "schedule = interleaved\nvirtual_stages = 2\n",
           NULL, 0, 0, VS_EINPUT,
           "pp * virtual_stages = 4 model chunks, more than the 2 layers");
  /* the stages and chunks a layout holds, at the key's line (hunt: the
   * message named neither; pp's bound was 1e6) */
  load_bad(GPT_MODEL "[parallel]\npp = 600\n", NULL, 0, 0, VS_EINPUT,
           "@:9: [parallel] pp = 600: must be at most 512");
  load_bad("[model]\narch = gpt\nlayers = 6000\nhidden = 64\nheads = 8\n"
           "vocab = 1000\nseq_len = 128\n[training]\nglobal_batch = 512\n"
           "[parallel]\npp = 256\nschedule = interleaved\n"
           "virtual_stages = 17\n",
           NULL, 0, 0, VS_EINPUT,
           "@:13: [parallel] virtual_stages = 17: pp * virtual_stages = 4352 "
           "model chunks; vsim simulates at most 4096");
  load_bad(GPT_MODEL, zero2, 2, 0, VS_EINPUT,
           "--set parallel.zero=2: ZeRO-2/3 partition gradients");
  load_bad(GPT_MODEL, split3, 2, 0, VS_EINPUT,
           "--set parallel.pp_layers=1,1,1: expected 2 counts (one per "
           "pipeline stage), got 3");
  load_bad(GPT_MODEL, split_sum, 2, 0, VS_EINPUT,
           "--set parallel.pp_layers=1,2: the counts add up to 3, but the model "
           "has 2 layers");
  {
    /* 2^64 - 2048 + 2050 wraps to 2, the layers: each count is checked */
    static const char *const wrap[] = {
        "parallel.pp=2", "parallel.pp_layers=18446744073709549568,2050"};
    load_bad(GPT_MODEL, wrap, 2, 0, VS_EINPUT,
             "--set parallel.pp_layers=18446744073709549568,2050: count 1 is "
             "18446744073709549568, more than the model's 2 layers");
  }
  vs_error_clear(&err);
  assert_int_equal(tu_load_workload(&wl, GPT_MODEL, split_ok, 2, 4, &err), 0);
  assert_int_equal(wl.parallel.pp_layers.n, 2);
  assert_int_equal(wl.parallel.dp, 2); /* 4 GPUs / pp 2 */
  {
    /* a run VxN is V, N times (as plan prints 7,8x14,7): 126 layers over
     * 16 stages; a bad N, and a hexadecimal 0x, are refused */
    static const char *const runs[] = {"parallel.pp=16",
                                       "parallel.pp_layers=7,8x14,7"};
    static const char *const none[] = {"parallel.pp=2",
                                       "parallel.pp_layers=1x0,2"};
    static const char *const hex[] = {"parallel.pp=2",
                                      "parallel.pp_layers=0x1,1"};
    const char *model = "[model]\narch = gpt\nlayers = 126\nhidden = 64\n"
                        "heads = 8\nvocab = 1000\nseq_len = 128\n";
    vs_error_clear(&err);
    assert_int_equal(tu_load_workload(&wl, model, runs, 2, 16, &err), 0);
    assert_int_equal(wl.parallel.pp_layers.n, 16);
    assert_int_equal(wl.parallel.pp_layers.values[0], 7);
    for (size_t i = 1; i < 15; i++)
      assert_int_equal(wl.parallel.pp_layers.values[i], 8);
    assert_int_equal(wl.parallel.pp_layers.values[15], 7);
    load_bad(GPT_MODEL, none, 2, 0, VS_EINPUT,
             "--set parallel.pp_layers=1x0,2: a run VxN needs N from 1 to "
             "256 (e.g. 8x14: 8, 14 times)");
    load_bad(GPT_MODEL, hex, 2, 0, VS_EINPUT,
             "--set parallel.pp_layers=0x1,1: not a decimal number");
    {
      /* a list longer than a key holds says how long it may be */
      static const char *const long_split[] = {
          "parallel.pp=2", "parallel.pp_layers=1x100,2x100,3x100"};
      load_bad(GPT_MODEL, long_split, 2, 0, VS_EINPUT,
               "--set parallel.pp_layers=1x100,2x100,3x100: too many list "
               "items (at most 256)");
    }
    {
      /* fewer items, but more characters than vsim reads, are told so */
      static char wide[32 + 250 * 25];
      const char *sets[] = {"parallel.pp=2", wide};
      size_t n = (size_t)snprintf(wide, sizeof wide, "parallel.pp_layers=");
      for (int i = 0; i < 250; i++)
        n += (size_t)snprintf(wide + n, sizeof wide - n, "%s%s", i ? "," : "",
                              "000000000000000000000001");
      load_bad(GPT_MODEL, sets, 2, 0, VS_EINPUT,
               ": list too long (its items spelt out are more characters "
               "than vsim reads)");
    }
    {
      /* a leading empty item stays one; a blank before 0x is no run (and
       * goes, as inih takes the blanks off a file's value) */
      static const char *const lead[] = {"parallel.pp=2",
                                         "parallel.pp_layers=,1,1"};
      static const char *const spaced[] = {"parallel.pp=2",
                                           "parallel.pp_layers= 0x1,1"};
      load_bad(GPT_MODEL, lead, 2, 0, VS_EINPUT,
               "--set parallel.pp_layers=,1,1: empty value");
      load_bad(GPT_MODEL, spaced, 2, 0, VS_EINPUT,
               "--set parallel.pp_layers=0x1,1: not a decimal number");
    }
  }
}

static void test_huge_products_are_errors(void **state)
{
  (void)state;
  /* Sizes far beyond any real job are refused by the keys' bounds before
   * any product can wrap around 64 bits (micro_batch 2^32 * dp 2^32 = 2^64
   * would otherwise be a division by zero). */
  load_bad(GPT_MODEL "[training]\nmicro_batch = 4294967296\n", NULL, 0,
           4294967296ull, VS_EINPUT,
           "@:9: [training] micro_batch = 4294967296: must be at most 1000000");
  load_bad("[model]\narch = gpt\nlayers = 1\nhidden = 2\nheads = 2\n"
           "vocab = 10\nseq_len = 8\n[parallel]\ntp = 2\n"
           "dp = 9223372036854775808\n",
           NULL, 0, 0, VS_EINPUT,
           "@:10: [parallel] dp = 9223372036854775808: must be at most 10000000");
}

static void test_first_problem_is_reported(void **state)
{
  static const char *const sets[] = {"model.nope=1"};
  (void)state;
  /* A missing key is reported before any layout problem. */
  load_bad("[model]\narch = gpt\n[parallel]\ntp = 3\n", NULL, 0, 0, VS_EINPUT,
           "missing required key 'layers'");
  /* A file error stops before --set is applied. */
  load_bad(GPT_MODEL "[training]\nmicro_batch = 0\n", sets, 1, 0, VS_EINPUT,
           "micro_batch = 0: must be greater than 0");
}

/* [model] mtp_layers: DeepSeek-V3's multi-token prediction, as
 * Megatron-LM builds it, over a causal model trained whole; each other
 * case is refused naming the key to change. */
static void test_mtp_rules(void **state)
{
  static const char *const ok[] = {"model.mtp_layers=2"};
  static const char *const megatron[] = {"model.mtp_layers=1",
                                         "training.framework=megatron"};
  static const char *const fsdp[] = {"model.mtp_layers=1",
                                     "training.framework=fsdp2",
                                     "parallel.zero=3", "parallel.dp=2",
                                     "training.global_batch=2"};
  static const char *const lora[] = {"model.mtp_layers=1",
                                     "finetune.method=lora"};
  static const char *const amp[] = {"model.mtp_layers=1",
                                    "training.precision=amp_bf16"};
  static const char *const too_deep[] = {"model.mtp_layers=65"};
  vs_workload wl;
  (void)state;
  load_ok(&wl, LLAMA_MODEL, ok, 1, 0);
  assert_int_equal(wl.model.mtp_layers, 2);
  load_ok(&wl, GPT_MODEL, megatron, 2, 0);
  load_ok(&wl, LLAMA_MODEL, NULL, 0, 0);
  assert_int_equal(wl.model.mtp_layers, 0);
  load_bad("[model]\narch = bert\nlayers = 2\nhidden = 64\nheads = 8\n"
           "vocab = 1000\nseq_len = 128\nmtp_layers = 1\n",
           NULL, 0, 0, VS_EINPUT,
           "@:8: [model] mtp_layers = 1: multi-token prediction extends a "
           "causal language model");
  load_bad(LLAMA_MODEL, fsdp, 5, 0, VS_EINPUT,
           "--set model.mtp_layers=1: multi-token prediction is simulated as "
           "Megatron-LM builds it (--mtp-num-layers); fsdp2 has no such "
           "module");
  load_bad(LLAMA_MODEL, lora, 2, 0, VS_EINPUT,
           "--set finetune.method=lora: multi-token prediction is simulated "
           "for a model trained whole");
  load_bad(LLAMA_MODEL, amp, 2, 0, VS_EINPUT,
           "--set training.precision=amp_bf16: multi-token prediction under "
           "autocast is not simulated");
  load_bad(LLAMA_MODEL, too_deep, 1, 0, VS_EINPUT, "mtp_layers");
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gpt_defaults),
      cmocka_unit_test(test_llama_defaults),
      cmocka_unit_test(test_bert_defaults),
      cmocka_unit_test(test_explicit_values_beat_defaults),
      cmocka_unit_test(test_master_weights_follow_precision),
      cmocka_unit_test(test_gpus_resolve_dp_and_batches),
      cmocka_unit_test(test_explicit_dp),
      cmocka_unit_test(test_shipped_workloads),
      cmocka_unit_test(test_origins_record_file_and_line),
      cmocka_unit_test(test_key_table),
      cmocka_unit_test(test_set_overrides),
      cmocka_unit_test(test_set_errors),
      cmocka_unit_test(test_set_bad_value_leaves_workload_unchanged),
      cmocka_unit_test(test_unreadable_file),
      cmocka_unit_test(test_microbatch_limit),
      cmocka_unit_test(test_unknown_section_and_key),
      cmocka_unit_test(test_missing_required_keys),
      cmocka_unit_test(test_llama_needs_ffn_hidden),
      cmocka_unit_test(test_malformed_numbers),
      cmocka_unit_test(test_zero_and_negative),
      cmocka_unit_test(test_head_divisibility),
      cmocka_unit_test(test_tp_divisibility),
      cmocka_unit_test(test_global_batch_divisibility),
      cmocka_unit_test(test_gpus_argument),
      cmocka_unit_test(test_master_weights_with_fp32),
      cmocka_unit_test(test_offload_rules),
      cmocka_unit_test(test_finetune_rules),
      cmocka_unit_test(test_double_quant),
      cmocka_unit_test(test_input_not_regular_file),
      cmocka_unit_test(test_deepspeed_casts_parameters),
      cmocka_unit_test(test_hf_config),
      cmocka_unit_test(test_hf_config_fields_it_lacks),
      cmocka_unit_test(test_hf_config_class_defaults),
      cmocka_unit_test(test_hf_config_refusals),
      cmocka_unit_test(test_layer_options),
      cmocka_unit_test(test_hf_config_layer_options),
      cmocka_unit_test(test_runtime_rules),
      cmocka_unit_test(test_autocast_and_hf),
      cmocka_unit_test(test_precision_aware_rules),
      cmocka_unit_test(test_fp8_recipe_rules),
      cmocka_unit_test(test_fp8_param_gather_rules),
      cmocka_unit_test(test_megatron_sharding_rules),
      cmocka_unit_test(test_frameworks_running_ep),
      cmocka_unit_test(test_experts),
      cmocka_unit_test(test_reserve),
      cmocka_unit_test(test_deepspeed_optimizer_choice),
      cmocka_unit_test(test_framework_presets),
      cmocka_unit_test(test_p2p_presets),
      cmocka_unit_test(test_grad_reduce_presets),
      cmocka_unit_test(test_checkpoint_choice),
      cmocka_unit_test(test_pipeline_validation),
      cmocka_unit_test(test_layout_rules),
      cmocka_unit_test(test_huge_products_are_errors),
      cmocka_unit_test(test_first_problem_is_reported),
      cmocka_unit_test(test_mtp_rules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
