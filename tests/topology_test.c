/* topology_test.c - topology.ini loading (topology.h): the compiled-in
 * default against its source file, the shipped topologies in base units,
 * defaults of optional keys, --set overrides and the error messages. */
#include "testutil.h"

#include "collective.h"
#include "cost.h"
#include "schedule.h"
#include "topology.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOPO_DIR VSIM_SOURCE_DIR "/topologies/"

/* The smallest valid topology: only the required keys. Lines: 1 [gpu],
 * 2 name, 3 memory, 4 hbm_bandwidth, 5-7 peak_tflops_*, 8 [node], 9 gpus,
 * 10 [network], 11 intra_bandwidth, 12 inter_bandwidth. */
#define MINIMAL                                                              \
  "[gpu]\nname = Test-GPU\nmemory = 16GiB\nhbm_bandwidth = 1TB/s\n"         \
  "peak_tflops_bf16 = 100\npeak_tflops_fp16 = 100\npeak_tflops_fp32 = 10\n"  \
  "[node]\ngpus = 4\n"                                                      \
  "[network]\nintra_bandwidth = 100GB/s\ninter_bandwidth = 10GB/s\n"

/* MINIMAL with p2p calibrated (lines 13-15), for checks of its other
 * keys. */
#define CAL_P2P MINIMAL "[calibration]\np2p_bandwidth = 100\np2p_latency = 8\n"

/* Within 1e-12 relative; inf and NaN fail (tu_assert_close). */
#define assert_near(got, want) tu_assert_close(got, want, 1e-12)

/* Loads path (NULL = built-in) with overrides; fails the test on error. */
static void load_ok(vs_topology *t, const char *path, const char *const *sets,
                    size_t n_sets)
{
  vs_error err;
  vs_error_clear(&err);
  if (vs_topology_load(t, path, sets, n_sets, &err) != 0)
    fail_msg("topology %s: %s", path ? path : "(built-in)", err.msg);
  assert_int_equal(err.code, VS_OK);
}

/* Writes text to a temporary .ini (path in path[128]) and loads it. */
static int load_text(vs_topology *t, char *path, const char *text,
                     const char *const *sets, size_t n_sets, vs_error *err)
{
  int rc;
  tu_write_temp(text, ".ini", path, 128);
  vs_error_clear(err);
  rc = vs_topology_load(t, path, sets, n_sets, err);
  unlink(path);
  return rc;
}

/* text must fail with code and a message containing want, where each '@'
 * in want stands for the temporary file's path. */
static void load_bad(const char *text, const char *const *sets, size_t n_sets,
                     int code, const char *want)
{
  char path[128];
  vs_topology t;
  vs_error err;
  assert_int_equal(load_text(&t, path, text, sets, n_sets, &err), code);
  assert_int_equal(err.code, code);
  tu_assert_message_at(err.msg, want, path);
}

/* ------------------------------------------------------------------------
 * The built-in default and the shipped files
 * ------------------------------------------------------------------------ */

static void test_builtin_text_is_the_h100_file(void **state)
{
  char *file = tu_read_file(TOPO_DIR "h100-sxm-8x.ini");
  (void)state;
  assert_non_null(file);
  /* CMake compiles the file in; the two must agree byte for byte. */
  assert_string_equal(vs_topology_default_text(), file);
  assert_string_equal(vs_topology_default_name(),
                      "built-in topologies/h100-sxm-8x.ini");
  free(file);
}

static void test_builtin_equals_h100_from_disk(void **state)
{
  vs_topology builtin, disk;
  (void)state;
  tu_default_topology(&builtin);
  load_ok(&disk, TOPO_DIR "h100-sxm-8x.ini", NULL, 0);
  assert_string_equal(builtin.origins.file, "built-in topologies/h100-sxm-8x.ini");
  assert_string_equal(disk.origins.file, TOPO_DIR "h100-sxm-8x.ini");
  /* Every value before the origins is the same (both start from a zeroed
   * struct, so padding and the name's tail compare equal too). */
  assert_memory_equal(&builtin, &disk, offsetof(vs_topology, origins));
  /* And every key came from the same line. */
  for (size_t i = 0; i < vs_topology_keys()->n_keys; i++) {
    assert_int_equal(builtin.origins.keys[i].set, disk.origins.keys[i].set);
    assert_int_equal(builtin.origins.keys[i].line, disk.origins.keys[i].line);
  }
}

static void test_h100_values_in_base_units(void **state)
{
  vs_topology t;
  (void)state;
  tu_default_topology(&t);
  assert_string_equal(t.name, "H100-SXM-80GB");
  assert_true(t.memory_bytes == 81089ull << 20); /* 81089MiB = 81089 * 2^20 */
  assert_near(t.hbm_bandwidth, 3.35e12);         /* 3350GB/s = 3350 * 10^9 B/s */
  assert_near(t.peak_tflops_bf16, 989);          /* TFLOP/s as written */
  assert_near(t.peak_tflops_fp16, 989);
  assert_near(t.peak_tflops_fp32, 67);
  assert_near(t.peak_tflops_fp8, 1979);
  assert_true(t.context_bytes == 400ull << 20);  /* 400MiB */
  assert_true(t.cublas_workspace_bytes == 32ull << 20); /* 32MiB */
  assert_true(t.nccl_bytes == 1ull << 30);       /* 1GiB */
  assert_near(t.compute_efficiency, 0.80);
  assert_true(t.gpus_per_node == 8);
  assert_true(t.host_memory_bytes == 2ull << 40); /* 2TiB = 2 * 2^40 */
  assert_near(t.pcie_bandwidth, 55e9);           /* 55GB/s */
  assert_near(t.pcie_latency, 2e-6);             /* 2us */
  assert_true(t.gpus_per_pcie_switch == 2);
  assert_near(t.nvme_bandwidth, 50e9);           /* 50GB/s */
  assert_true(t.nvme_capacity_bytes == 30720000000000ull); /* 30720GB * 10^9 */
  assert_near(t.intra_bandwidth, 450e9);         /* 450GB/s */
  assert_near(t.intra_latency, 3e-6);            /* 3us = 3 * 10^-6 s */
  assert_near(t.inter_bandwidth, 47e9);          /* 47GB/s: NCCL over NDR */
  assert_near(t.inter_latency, 5e-6);            /* 5us */
  assert_near(t.usd_per_gpu_hour, 2.99);
}

static void test_all_shipped_topologies_load(void **state)
{
  vs_topology t;
  (void)state;
  load_ok(&t, TOPO_DIR "a100-sxm-80g-8x.ini", NULL, 0);
  assert_string_equal(t.name, "A100-SXM4-80GB");
  assert_true(t.memory_bytes == 81050ull << 20); /* 81050MiB */
  assert_near(t.hbm_bandwidth, 2.039e12);        /* 2039GB/s */
  assert_near(t.peak_tflops_fp8, 0);             /* no FP8 on Ampere */
  /* 8320KiB = 8320 * 1024 = 8519680 B, as the file's comment says. */
  assert_true(t.cublas_workspace_bytes == 8519680);
  assert_true(t.nccl_bytes == 688ull << 20);     /* 688MiB */

  load_ok(&t, TOPO_DIR "h100-sxm-8x.ini", NULL, 0);
  assert_string_equal(t.name, "H100-SXM-80GB");

  load_ok(&t, TOPO_DIR "h200-sxm-8x.ini", NULL, 0);
  assert_string_equal(t.name, "H200-SXM-141GB");
  assert_true(t.memory_bytes == 143156ull << 20); /* 143156MiB */
  assert_near(t.hbm_bandwidth, 4.8e12);           /* 4800GB/s */
  assert_near(t.usd_per_gpu_hour, 4.0);

  /* the B200: torch's total_memory (178.35 GiB), NVIDIA's dense rates
   * (half the HGX B200 sheet's sparse ones), PyTorch's 32 MiB cuBLAS
   * workspace for major 10, one FP8 layout, NVLink 5 one way */
  load_ok(&t, TOPO_DIR "b200-sxm-8x.ini", NULL, 0);
  assert_string_equal(t.name, "B200-SXM-180GB");
  assert_true(t.memory_bytes == 182631ull << 20); /* 182631MiB */
  assert_near(t.hbm_bandwidth, 7.7e12);           /* 7700GB/s */
  assert_near(t.peak_tflops_bf16, 2250);
  assert_near(t.peak_tflops_fp16, 2250);
  assert_near(t.peak_tflops_fp32, 75);
  assert_near(t.peak_tflops_fp8, 4500);
  assert_false(t.fp8_transposes);
  assert_true(t.cublas_workspace_bytes == 32ull << 20); /* 32MiB */
  assert_near(t.compute_efficiency, 0.78);
  assert_true(t.sms == 148);
  assert_true(t.gpus_per_node == 8);
  assert_true(t.host_memory_bytes == 2ull << 40);          /* 2TiB */
  assert_true(t.nvme_capacity_bytes == 30720000000000ull); /* 30720GB */
  assert_near(t.intra_bandwidth, 900e9);                   /* 900GB/s */
  assert_near(t.inter_bandwidth, 47e9);                    /* 47GB/s */
  assert_near(t.usd_per_gpu_hour, 5.3);

  load_ok(&t, TOPO_DIR "v100-sxm-32g-8x.ini", NULL, 0);
  assert_string_equal(t.name, "V100-SXM2-32GB");
  assert_true(t.memory_bytes == 32491ull << 20);  /* 32491MiB */
  assert_true(t.host_memory_bytes == 512ull << 30); /* 512GiB */
  assert_near(t.inter_bandwidth, 6.25e9);         /* 6.25GB/s */
  assert_true(t.nvme_capacity_bytes == 7680000000000ull); /* 7680GB */

  /* the 24 and 48 GB GPUs of the fine-tune samples: PyTorch's total
   * capacity (23.65 and 44.40 GiB) and the dense FP32-accumulate rates */
  load_ok(&t, TOPO_DIR "rtx4090-24g-1x.ini", NULL, 0);
  assert_string_equal(t.name, "RTX-4090-24GB");
  assert_true(t.memory_bytes == 24217ull << 20); /* 24217MiB */
  assert_near(t.peak_tflops_bf16, 165.2);
  assert_true(t.gpus_per_node == 1);
  load_ok(&t, TOPO_DIR "l40s-48g-8x.ini", NULL, 0);
  assert_string_equal(t.name, "L40S-48GB");
  assert_true(t.memory_bytes == 45465ull << 20); /* 45465MiB */
  assert_near(t.peak_tflops_fp8, 733);
  assert_near(t.hbm_bandwidth, 864e9);
}

static void test_optional_keys_default(void **state)
{
  char path[128];
  vs_topology t;
  vs_error err;
  (void)state;
  assert_int_equal(load_text(&t, path, MINIMAL, NULL, 0, &err), 0);
  assert_true(t.memory_bytes == 16ull << 30);      /* 16GiB */
  assert_near(t.hbm_bandwidth, 1e12);              /* 1TB/s */
  /* The defaults documented in the key table's default_doc. */
  assert_near(t.peak_tflops_fp8, 0);               /* "0 (no FP8)" */
  assert_true(t.context_bytes == 400ull << 20);    /* "400MiB" */
  assert_true(t.cublas_workspace_bytes == 32ull << 20); /* "32MiB" */
  assert_true(t.nccl_bytes == 512ull << 20);       /* "512MiB" */
  assert_near(t.compute_efficiency, 0.7);          /* "0.7" */
  assert_true(t.host_memory_bytes == 1ull << 40);  /* "1TiB" */
  assert_near(t.pcie_bandwidth, 25e9);             /* "25GB/s" */
  assert_near(t.pcie_latency, 2e-6);               /* "2us" */
  assert_true(t.gpus_per_pcie_switch == 2);        /* "2" */
  assert_near(t.nvme_bandwidth, 10e9);             /* "10GB/s" */
  assert_true(t.nvme_capacity_bytes == 0);         /* "0 (none)" */
  assert_near(t.host_memory_bandwidth, 0);         /* "0 (not a limit)" */
  assert_true(t.fp8_transposes);                   /* "true (Hopper, Ada)" */
  assert_near(t.cpu_optimizer_rate, 3.9e9);        /* ZeRO-Offload Table 4 */
  assert_near(t.pageable_h2d_bandwidth, 7.44e9);   /* an H200 host's */
  assert_near(t.pageable_d2h_bandwidth, 15.07e9);
  assert_near(t.pcie_d2h_bandwidth, t.pcie_bandwidth); /* no d2h_pinned fit */
  assert_near(t.intra_latency, 3e-6);              /* "3us" */
  assert_near(t.inter_latency, 5e-6);              /* "5us" */
  assert_near(t.usd_per_gpu_hour, 0);              /* "0 (unknown)" */
}

/* ------------------------------------------------------------------------
 * --set
 * ------------------------------------------------------------------------ */

static void test_set_overrides(void **state)
{
  static const char *const sets[] = {"gpu.memory=40GiB",
                                     "network.inter_latency=10us",
                                     "cost.usd_per_gpu_hour=1.5"};
  char where[256];
  vs_topology t;
  vs_error err;
  (void)state;
  load_ok(&t, NULL, sets, 3);
  assert_true(t.memory_bytes == 40ull << 30); /* 40GiB = 40 * 2^30 */
  assert_near(t.inter_latency, 10e-6);        /* 10us */
  assert_near(t.usd_per_gpu_hour, 1.5);
  assert_near(t.hbm_bandwidth, 3.35e12);      /* untouched: H100's 3350GB/s */
  assert_string_equal(vs_conf_where(vs_topology_keys(), &t.origins, "gpu",
                                    "memory", where, sizeof where),
                      "--set topology.gpu.memory=40GiB");
  /* vs_topology_set on a loaded topology does the same. */
  vs_error_clear(&err);
  assert_int_equal(vs_topology_set(&t, "node.gpus=4", &err), 0);
  assert_true(t.gpus_per_node == 4);
}

static void test_set_errors(void **state)
{
  static const char *const bad_value[] = {"gpu.memory=lots"};
  static const char *const unknown_key[] = {"gpu.mem=1GiB"};
  static const char *const unknown_sec[] = {"calibrate.x=1"};
  static const char *const no_eq[] = {"gpu.memory"};
  static const char *const no_dot[] = {"memory=1GiB"};
  vs_topology t, before;
  vs_error err;
  (void)state;
  load_bad(MINIMAL, bad_value, 1, VS_EINPUT,
           "--set topology.gpu.memory=lots: not a number");
  load_bad(MINIMAL, unknown_key, 1, VS_EINPUT,
           "--set topology.gpu.mem: unknown key 'mem' in [gpu]; valid keys: name, memory, "
           "hbm_bandwidth");
  load_bad(MINIMAL, unknown_sec, 1, VS_EINPUT,
           "--set topology.calibrate.x: unknown section [calibrate]; valid sections: "
           "[gpu], [node], [network], [cost], [calibration]");
  /* The CLI strips "topology."; the message puts it back. */
  load_bad(MINIMAL, no_eq, 1, VS_EUSAGE,
           "--set topology.gpu.memory: expected topology.section.key=value");
  load_bad(MINIMAL, no_dot, 1, VS_EUSAGE,
           "--set topology.memory=1GiB: expected topology.section.key=value");
  /* A bad value leaves the topology as it was. */
  tu_default_topology(&t);
  before = t;
  vs_error_clear(&err);
  assert_int_equal(vs_topology_set(&t, "gpu.compute_efficiency=1.5", &err),
                   VS_EINPUT);
  assert_non_null(strstr(err.msg, "--set topology.gpu.compute_efficiency=1.5: must be at "
                                  "most 1"));
  assert_memory_equal(&t, &before, sizeof t);
}

/* ------------------------------------------------------------------------
 * Bad files
 * ------------------------------------------------------------------------ */

static void test_missing_required_key(void **state)
{
  (void)state;
  /* MINIMAL without its last line (inter_bandwidth). */
  load_bad("[gpu]\nname = Test-GPU\nmemory = 16GiB\nhbm_bandwidth = 1TB/s\n"
           "peak_tflops_bf16 = 100\npeak_tflops_fp16 = 100\n"
           "peak_tflops_fp32 = 10\n[node]\ngpus = 4\n"
           "[network]\nintra_bandwidth = 100GB/s\n",
           NULL, 0, VS_EINPUT,
           "@: missing required key 'inter_bandwidth' in [network]");
  /* The first missing key in table order is named: [gpu] name. */
  load_bad("[node]\ngpus = 8\n", NULL, 0, VS_EINPUT,
           "@: missing required key 'name' in [gpu]");
}

/* Host memory bandwidth is 0 (not a limit) or a real rate. */
static void test_host_memory_bandwidth_bounds(void **state)
{
  static const char *const slow[] = {"node.host_memory_bandwidth=0.5MB/s"};
  (void)state;
  load_bad(MINIMAL, slow, 1, VS_EINPUT,
           "--set topology.node.host_memory_bandwidth=0.5MB/s: must be 0 (host memory is "
           "not a limit) or at least 1 MB/s");
}

/* A GPU's memory exceeds what its libraries take before any tensor: the
 * CUDA context and two cuBLAS workspaces (400 MiB + 2 x 32 MiB = 464 MiB
 * here); 0.5 B used to simulate a GPU of 1 byte. */
static void test_gpu_memory_above_libraries(void **state)
{
  static const char *const tiny[] = {"gpu.memory=464MiB",
                                     "gpu.context_memory=400MiB",
                                     "gpu.cublas_workspace=32MiB"};
  static const char *const least[] = {"gpu.memory=465MiB",
                                      "gpu.context_memory=400MiB",
                                      "gpu.cublas_workspace=32MiB"};
  vs_topology t;
  vs_error err;
  char path[128];
  (void)state;
  load_bad(MINIMAL, tiny, 3, VS_EINPUT,
           "--set topology.gpu.memory=464MiB: must be more than the 464 MiB "
           "that context_memory and two cublas_workspace take on every GPU "
           "before any tensor");
  assert_int_equal(load_text(&t, path, MINIMAL, least, 3, &err), 0);
  {
    /* a workspace given by --set is what to blame, not the file's memory */
    static const char *const huge[] = {"gpu.context_memory=1KiB",
                                       "gpu.cublas_workspace=1TiB"};
    load_bad(MINIMAL, huge, 2, VS_EINPUT,
             "--set topology.gpu.cublas_workspace=1TiB: context_memory and "
             "two cublas_workspace would take 2.00 TiB on every GPU before "
             "any tensor, all of [gpu] memory's ");
  }
}

/* The FP8 peak is 0 (no FP8 tensor cores) or at least 1 GFLOP/s, as the
 * other peaks: 1e-6 used to pass and simulate a step of 17 days. */
static void test_fp8_peak_bounds(void **state)
{
  static const char *const tiny[] = {"gpu.peak_tflops_fp8=1e-6"};
  static const char *const none[] = {"gpu.peak_tflops_fp8=0"};
  char path[128];
  vs_topology t;
  vs_error err;
  (void)state;
  load_bad(MINIMAL, tiny, 1, VS_EINPUT,
           "--set topology.gpu.peak_tflops_fp8=1e-6: must be 0 (no FP8 tensor "
           "cores) or at least 0.001");
  assert_int_equal(load_text(&t, path, MINIMAL, none, 1, &err), 0);
  assert_true(t.peak_tflops_fp8 == 0);
}

/* A GEMM shape is three counts; a bus-bandwidth curve has one rate per
 * size, sizes ascending. */
static void test_gemm_shape_and_busbw_curve(void **state)
{
  static const char *const two[] = {"gpu.compute_efficiency_shape=1024,2048"};
  static const char *const fewer[] = {"network.intra_busbw_sizes=1024,2048",
                                      "network.intra_busbw=10,20,30"};
  static const char *const down[] = {"network.intra_busbw_sizes=2048,1024",
                                     "network.intra_busbw=10,20"};
  static const char *const ar[] = {"network.intra_busbw_sizes=1024,2048",
                                   "network.intra_busbw=10,20",
                                   "network.intra_allreduce_busbw=10"};
  static const char *const good[] = {"network.intra_busbw_sizes=1024,2048",
                                     "network.intra_busbw=10,20",
                                     "gpu.compute_efficiency_shape=1,2,3"};
  vs_topology t;
  char path[128];
  vs_error err;
  (void)state;
  load_bad(MINIMAL, two, 1, VS_EINPUT,
           "--set topology.gpu.compute_efficiency_shape=1024,2048: expected "
           "the m, n, k of one GEMM (3 counts), got 2");
  load_bad(MINIMAL, fewer, 2, VS_EINPUT,
           "--set topology.network.intra_busbw=10,20,30: needs one bus "
           "bandwidth per size of intra_busbw_sizes");
  load_bad(MINIMAL, down, 2, VS_EINPUT,
           "--set topology.network.intra_busbw_sizes=2048,1024: must be "
           "ascending");
  load_bad(MINIMAL, ar, 3, VS_EINPUT,
           "--set topology.network.intra_allreduce_busbw=10: needs one bus "
           "bandwidth per size of intra_busbw_sizes");
  {
    static const char *const flash[] = {"gpu.flash_seq_lens=512,1024",
                                        "gpu.flash_tflops_causal_d128=99"};
    static const char *const flash_down[] = {"gpu.flash_seq_lens=1024,512"};
    static const char *const flash_bad[] = {"gpu.flash_tflops_d64=12,x"};
    load_bad(MINIMAL, flash, 2, VS_EINPUT,
             "--set topology.gpu.flash_tflops_causal_d128=99: needs one rate "
             "per length of flash_seq_lens");
    load_bad(MINIMAL, flash_down, 1, VS_EINPUT,
             "--set topology.gpu.flash_seq_lens=1024,512: must be ascending");
    /* lengths alone would go unread (hunt) */
    load_bad(MINIMAL, flash, 1, VS_EINPUT,
             "--set topology.gpu.flash_seq_lens=512,1024: has no effect "
             "without a list of one rate per length (flash_tflops_d64, "
             "...)");
    load_bad(MINIMAL, flash_bad, 1, VS_EINPUT,
             "--set topology.gpu.flash_tflops_d64=12,x:");
    {
      /* a measured rate above the 16-bit peak (100 in MINIMAL) is a lie;
       * the peak itself is a rate a table may hold */
      static const char *const over[] = {"gpu.flash_seq_lens=512,1024",
                                         "gpu.flash_tflops_d128=90,101"};
      static const char *const at[] = {"gpu.flash_seq_lens=512,1024",
                                       "gpu.flash_tflops_d128=90,100"};
      vs_topology ok;
      load_bad(MINIMAL, over, 2, VS_EINPUT,
               "--set topology.gpu.flash_tflops_d128=90,101: its 101 is above "
               "the GPU's peak_tflops_fp16 (100): a measured rate cannot "
               "exceed the peak; lower the rate or raise the peak");
      vs_error_clear(&err);
      assert_int_equal(load_text(&ok, path, MINIMAL, at, 2, &err), 0);
    }
  }
  vs_error_clear(&err);
  assert_int_equal(load_text(&t, path, MINIMAL, good, 3, &err), 0);
  assert_int_equal(t.intra_busbw.n, 2);
  assert_near(t.intra_busbw.values[1], 20e9);
  assert_int_equal(t.compute_efficiency_shape.values[2], 3);
  remove(path);
}

static void test_unknown_key_and_section(void **state)
{
  (void)state;
  load_bad("[gpu]\nname = X\nmemroy = 1GiB\n", NULL, 0, VS_EINPUT,
           "@:3: unknown key 'memroy' in [gpu]; valid keys: name, memory, "
           "hbm_bandwidth");
  load_bad(MINIMAL "[cost]\nusd_per_hour = 2\n", NULL, 0, VS_EINPUT,
           "@:14: unknown key 'usd_per_hour' in [cost]; valid keys: "
           "usd_per_gpu_hour");
  load_bad(MINIMAL "[nic]\n", NULL, 0, VS_EINPUT,
           "@:13: unknown section [nic] in topology file; valid sections: "
           "[gpu], [node], [network], [cost]");
}

static void test_bad_values(void **state)
{
  (void)state;
  /* memory is line 3 of MINIMAL-shaped text. */
  load_bad("[gpu]\nname = X\nmemory = 80GB/s\n", NULL, 0, VS_EINPUT,
           "@:3: [gpu] memory = 80GB/s: unknown unit");
  load_bad("[gpu]\nname = X\nmemory = 0\n", NULL, 0, VS_EINPUT,
           "@:3: [gpu] memory = 0: must be greater than 0");
  load_bad("[gpu]\nname = X\nhbm_bandwidth = 3GiB\n", NULL, 0, VS_EINPUT,
           "@:3: [gpu] hbm_bandwidth = 3GiB: unknown unit");
  load_bad("[gpu]\nname = H100 SXM\n", NULL, 0, VS_EINPUT,
           "@:2: [gpu] name = H100 SXM: expected a name of 1-63 characters");
  load_bad("[gpu]\ncompute_efficiency = 0\n", NULL, 0, VS_EINPUT,
           "@:2: [gpu] compute_efficiency = 0: must be at least 0.01");
  /* figures that would overflow integer-ns times are outside real hardware */
  load_bad("[gpu]\nhbm_bandwidth = 1e-200\n", NULL, 0, VS_EINPUT,
           "@:2: [gpu] hbm_bandwidth = 1e-200: must be at least 0.001 GB/s");
  load_bad("[gpu]\npeak_tflops_bf16 = 1e-200\n", NULL, 0, VS_EINPUT,
           "@:2: [gpu] peak_tflops_bf16 = 1e-200: must be at least 0.001");
  load_bad("[network]\nintra_latency = 1e30s\n", NULL, 0, VS_EINPUT,
           "@:2: [network] intra_latency = 1e30s: must be at most 1 s");
  load_bad("[cost]\nusd_per_gpu_hour = 1e300\n", NULL, 0, VS_EINPUT,
           "@:2: [cost] usd_per_gpu_hour = 1e300: must be at most 10000");
  load_bad("[gpu]\npeak_tflops_fp8 = -1\n", NULL, 0, VS_EINPUT,
           "@:2: [gpu] peak_tflops_fp8 = -1: must be at least 0");
  load_bad("[network]\nintra_latency = 3 fortnights\n", NULL, 0, VS_EINPUT,
           "@:2: [network] intra_latency = 3 fortnights: unknown unit");
  load_bad("[node]\ngpus = 8\ngpus = 4\n", NULL, 0, VS_EINPUT,
           "@:3: [node] gpus = 4: key set twice (first on line 2)");
}

static void test_unreadable_file(void **state)
{
  vs_topology t;
  vs_error err;
  (void)state;
  vs_error_clear(&err);
  assert_int_equal(vs_topology_load(&t, "/nonexistent/t.ini", NULL, 0, &err),
                   VS_EIO);
  assert_non_null(strstr(err.msg, "/nonexistent/t.ini: cannot read topology file"));
}

static void test_key_table(void **state)
{
  const vs_keytab *k = vs_topology_keys();
  (void)state;
  assert_string_equal(k->kind, "topology");
  assert_true(k->n_keys <= VS_CONF_MAX_KEYS);
  /* The DESIGN contract's keys are all present. */
  assert_true(vs_conf_find(k, "gpu", "context_memory") >= 0);
  assert_true(vs_conf_find(k, "node", "nvme_capacity") >= 0);
  assert_true(vs_conf_find(k, "network", "inter_latency") >= 0);
  assert_true(vs_conf_find(k, "cost", "usd_per_gpu_hour") >= 0);
}

/* MINIMAL with a measured kernel floor and compute efficiency given and
 * p2p calibrated. */
#define CAL_GIVEN                                                             \
  MINIMAL "[gpu]\nkernel_floor = 4us\ncompute_efficiency = 0.8\n"            \
          "[calibration]\np2p_bandwidth = 100\np2p_latency = 8\n"

/* [calibration] measured names what vsim-calibrate measured; vsim says so
 * (vs_topology_measured_text) of what is in effect: a key --set over is
 * nominal again, a curve counts where it replaced a figure. A name that
 * is not measurable is refused, with the names that are, and so is one
 * whose figure the file does not give (vsim's default is no measurement;
 * hunt). */
static void test_measured_keys_said(void **state)
{
  static const char *const floor_set[] = {"gpu.kernel_floor=3us"};
  vs_topology t;
  char path[128], said[512];
  vs_error err;
  (void)state;
  vs_error_clear(&err);
  assert_int_equal(load_text(&t, path, CAL_GIVEN "measured = kernel_floor,"
                                            "compute_efficiency\n",
                             NULL, 0, &err),
                   0);
  vs_topology_measured_text(&t, said, sizeof said);
  assert_string_equal(said, "compute_efficiency, kernel_floor; curves p2p "
                            "(NVLink)");
  assert_int_equal(load_text(&t, path, CAL_GIVEN "measured = kernel_floor\n",
                             floor_set, 1, &err),
                   0);
  assert_false(vs_topology_is_measured(&t, "gpu", "kernel_floor"));
  vs_topology_measured_text(&t, said, sizeof said);
  assert_string_equal(said, "curves p2p (NVLink)");
  assert_int_equal(load_text(&t, path, MINIMAL, NULL, 0, &err), 0);
  vs_topology_measured_text(&t, said, sizeof said);
  assert_string_equal(said, "");
  load_bad(MINIMAL "[calibration]\nmeasured = peak_tflops_bf16\n", NULL, 0,
           VS_EINPUT, "@:14: [calibration] measured = peak_tflops_bf16: "
                      "'peak_tflops_bf16' is not one of name, memory, "
                      "hbm_bandwidth, sms, context_memory, compute_efficiency, "
                      "compute_efficiency_shape, gemm_k_overhead, "
                      "kernel_floor, pcie_bandwidth or pcie_latency");
  load_bad(CAL_P2P "measured = kernel_floor\n", NULL, 0, VS_EINPUT,
           "@:16: [calibration] measured = kernel_floor: names kernel_floor, "
           "but the file gives no [gpu] kernel_floor: a measured figure is "
           "one the file states (remove the name or give the value)");
}

/* [calibration] (written by vsim-calibrate) replaces the nominal figures:
 * p2p -> intra_bandwidth/latency, d2d_kernel -> hbm_bandwidth with
 * memory_efficiency 1, h2d_pinned -> pcie_bandwidth/latency; a nominal key
 * given with --set wins. Transfer times follow: a ring all-reduce over 2
 * GPUs costs 2 (n-1) latency + 2 (n-1)/n bytes / bandwidth (collective.h). */
static void test_calibration_replaces_nominal(void **state)
{
  static const char text[] = MINIMAL
      "[calibration]\np2p_bandwidth = 300\np2p_latency = 7\n"
      "p2p_r2 = 0.9999\np2p_max_rel_error = 0.01\np2p_points = 57\n"
      "p2p_min_bytes = 4B\np2p_max_bytes = 1GiB\n"
      "d2d_kernel_bandwidth = 900GB/s\nd2d_kernel_latency = 3us\n"
      "h2d_pinned_bandwidth = 20\nh2d_pinned_latency = 9\n"
      "h2d_pinned_min_bytes = 4B\nh2d_pinned_max_bytes = 1GiB\n"
      "h2d_pinned_breakpoints = 1048576\n"
      "h2d_pinned_piece_bandwidths = 10GB/s, 20\n"
      "h2d_pinned_piece_latencies = 4us, 9\n"
      "malloc_bandwidth = 0\nmalloc_latency = 20\n";
  static const char *const keep_intra[] = {"network.intra_bandwidth=100",
                                           "gpu.memory_efficiency=0.5"};
  static const char *const keep_hbm[] = {"gpu.hbm_bandwidth=4000GB/s"};
  static vs_topology t, plain;
  char path[128];
  vs_error err;
  vs_link nominal, link;
  (void)state;
  assert_int_equal(load_text(&plain, path, MINIMAL, NULL, 0, &err), 0);
  assert_int_equal(load_text(&t, path, text, NULL, 0, &err), 0);
  assert_true(vs_topology_calibrated(&t, VS_CAL_P2P));
  /* bandwidth 0: calibrated, its time does not grow with size */
  assert_true(vs_topology_calibrated(&t, VS_CAL_MALLOC));
  assert_false(vs_topology_calibrated(&plain, VS_CAL_P2P));
  assert_near(t.intra_bandwidth, 300e9);
  assert_near(t.intra_latency, 7e-6);
  assert_near(t.hbm_bandwidth, 900e9);
  assert_near(t.memory_efficiency, 1.0);
  assert_near(t.pcie_bandwidth, 20e9);
  /* the nominal one-line latency is the small copies': the first piece's
   * 4 us, not the last piece's intercept */
  assert_near(t.pcie_latency, 4e-6);
  assert_int_equal(t.cal[VS_CAL_P2P].points, 57);
  assert_int_equal(t.cal[VS_CAL_P2P].max_bytes, 1ull << 30);
  assert_int_equal(t.cal[VS_CAL_H2D_PINNED].breakpoints.n, 1);
  assert_near(t.inter_bandwidth, plain.inter_bandwidth); /* not calibrated */
  /* 1 GB all-reduce over 2 GPUs: nominal 2 x 3 us + 1e9 / 100 GB/s
   * = 10.006 ms; calibrated 2 x 7 us + 1e9 / 300 GB/s = 3.347333 ms */
  nominal = vs_collective_link(&plain, 2);
  link = vs_collective_link(&t, 2);
  assert_near(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, 1000000000, 2, nominal),
              6e-6 + 1e9 / 100e9);
  assert_near(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, 1000000000, 2, link),
              14e-6 + 1e9 / 300e9);
  /* --set of a nominal key wins over the calibration */
  assert_int_equal(load_text(&t, path, text, keep_intra, 2, &err), 0);
  assert_near(t.intra_bandwidth, 100e9);
  assert_near(t.intra_latency, 7e-6);
  assert_near(t.memory_efficiency, 0.5);
  assert_near(t.hbm_bandwidth, 900e9);
  /* a nominal HBM rate given with --set is a peak: the file's own
   * memory_efficiency applies to it (it was set to 1 as for the curve) */
  assert_int_equal(load_text(&t, path, text, keep_hbm, 1, &err), 0);
  assert_near(t.hbm_bandwidth, 4000e9);
  assert_near(t.memory_efficiency, plain.memory_efficiency);
  assert_true(plain.memory_efficiency < 1.0);
  assert_false(t.hbm_curve);
  /* bad calibration values are refused like any other key */
  load_bad(MINIMAL "[calibration]\np2p_latency = -1\n", NULL, 0, VS_EINPUT,
           "@:14: [calibration] p2p_latency");
  load_bad(MINIMAL "[calibration]\np2p_r2 = 1.5\n", NULL, 0, VS_EINPUT,
           "must be at most 1");
}

/* One copy from or to pageable host memory: [node] pageable_h2d_bandwidth
 * and pageable_d2h_bandwidth whatever its size, or the calibrated curve's
 * rate at its size, which may start below 0 (a piece's intercept): there
 * its own rate. A --set of the nominal key wins over the curve. */
static void test_pageable_rates(void **state)
{
  static const char text[] =
      MINIMAL "[node]\npageable_h2d_bandwidth = 5GB/s\n"
              "[calibration]\n"
              "h2d_pageable_bandwidth = 8GB/s\nh2d_pageable_latency = -1ms\n"
              "h2d_pageable_min_bytes = 4B\nh2d_pageable_max_bytes = 1GiB\n"
              "h2d_pageable_breakpoints = 40000000\n"
              "h2d_pageable_piece_bandwidths = 16GB/s, 8GB/s\n"
              "h2d_pageable_piece_latencies = 10us, -1ms\n";
  static const char *const keep[] = {"node.pageable_h2d_bandwidth=6GB/s"};
  static vs_topology t;
  char path[128];
  vs_error err;
  (void)state;
  assert_int_equal(load_text(&t, path, MINIMAL, NULL, 0, &err), 0);
  assert_near(vs_topology_pageable_rate(&t, VS_CAL_H2D_PAGEABLE, 1e8, NULL),
              7.44e9);
  assert_near(vs_topology_pageable_rate(&t, VS_CAL_D2H_PAGEABLE, 1e3, NULL),
              15.07e9);
  assert_int_equal(load_text(&t, path, text, NULL, 0, &err), 0);
  assert_near(t.pageable_h2d_bandwidth, 8e9); /* the last piece's */
  /* 1e7 B on the first piece: 1e7 / (10 us + 1e7 / 16e9) */
  assert_near(vs_topology_pageable_rate(&t, VS_CAL_H2D_PAGEABLE, 1e7, NULL),
              1e7 / (10e-6 + 1e7 / 16e9));
  /* 1e8 B on the second: 1e8 / (-1 ms + 12.5 ms) */
  assert_near(vs_topology_pageable_rate(&t, VS_CAL_H2D_PAGEABLE, 1e8, NULL),
              1e8 / 11.5e-3);
  /* the other direction is not calibrated: its key */
  assert_near(vs_topology_pageable_rate(&t, VS_CAL_D2H_PAGEABLE, 1e8, NULL),
              15.07e9);
  assert_int_equal(load_text(&t, path, text, keep, 1, &err), 0);
  assert_near(vs_topology_pageable_rate(&t, VS_CAL_H2D_PAGEABLE, 1e8, NULL),
              6e9);
}

/* A piecewise curve times each size with its own piece: p2p below 1 MiB
 * (copy size) at 5 us + bytes / 20 GB/s, from 1 MiB at 8 us + bytes / 100
 * GB/s. d2d_kernel counts read + write, so an op moving 2 MiB of traffic is
 * a copy of 1 MiB. A run that needs sizes outside 4 KiB..64 MiB is told. */
static void test_calibration_curve_pieces(void **state)
{
  static const char text[] = MINIMAL
      "[calibration]\n"
      "p2p_bandwidth = 100GB/s\np2p_latency = 8us\n"
      "p2p_min_bytes = 4KiB\np2p_max_bytes = 64MiB\n"
      "p2p_breakpoints = 1048576\n"
      "p2p_piece_bandwidths = 20GB/s,100GB/s\n"
      "p2p_piece_latencies = 5us,8us\n"
      "d2d_kernel_bandwidth = 2000GB/s\nd2d_kernel_latency = 2us\n"
      "d2d_kernel_min_bytes = 4B\nd2d_kernel_max_bytes = 1GiB\n";
  static vs_topology t;
  vs_cal_seen seen;
  char path[128], *buf = NULL;
  size_t len = 0;
  FILE *mem;
  vs_error err;
  vs_link link;
  (void)state;
  assert_int_equal(load_text(&t, path, text, NULL, 0, &err), 0);
  assert_true(t.nvlink_curve);
  assert_true(t.hbm_curve);
  memset(&seen, 0, sizeof seen);
  link = vs_collective_link(&t, 2);
  link.seen = &seen;
  /* one transfer each side of the breakpoint */
  assert_near(vs_cost_link_seconds(link, 65536), 5e-6 + 65536 / 20e9);
  assert_near(vs_cost_link_seconds(link, 1048576), 8e-6 + 1048576 / 100e9);
  /* a ring all-reduce over 2 GPUs of 1 MiB: 2 steps of 512 KiB, first piece */
  assert_near(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, 1048576, 2, link),
              2 * (5e-6 + 524288 / 20e9));
  /* memory-bound op moving 1e9 bytes: 2 us + 1e9 / 2000 GB/s */
  assert_near(vs_cost_roofline_seconds(&t, VS_PREC_BF16, VS_FLOPS_OTHER, 1.0,
                                       1e9, &seen),
              2e-6 + 1e9 / 2000e9);
  assert_true(seen.kinds[VS_CAL_D2D_KERNEL].used);
  assert_near(seen.kinds[VS_CAL_D2D_KERNEL].lo, 5e8); /* bytes per copy */
  assert_near(seen.kinds[VS_CAL_P2P].lo, 65536);
  assert_near(seen.kinds[VS_CAL_P2P].hi, 1048576);
  /* all inside the measured sizes: nothing to say */
  assert_non_null(mem = open_memstream(&buf, &len));
  assert_int_equal(vs_cal_warn_range(mem, "vsim: note: ", &t, &seen), 0);
  /* 128 MiB and 1 KiB are outside 4 KiB..64 MiB: one line each */
  vs_cost_link_seconds(link, 134217728);
  vs_cost_link_seconds(link, 1024);
  assert_int_equal(vs_cal_warn_range(mem, "vsim: note: ", &t, &seen), 2);
  fclose(mem);
  assert_non_null(strstr(buf, "p2p was measured from 4.00 KiB to 64.0 MiB; this "
                              "run needs up to 128 MiB: its last piece is "
                              "extended"));
  assert_non_null(strstr(buf, "needs down to 1.00 KiB: its first piece"));
  free(buf);
  /* pieces must match the breakpoints and the last piece */
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 100\np2p_latency = 8\n"
           "p2p_breakpoints = 1048576\n", NULL, 0, VS_EINPUT,
           "p2p_piece_bandwidths (default not calibrated): 1 breakpoint(s) "
           "make 2 pieces, but 0 value(s) are given");
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 100\np2p_latency = 8\n"
           "p2p_breakpoints = 1048576\np2p_piece_bandwidths = 20,90\n"
           "p2p_piece_latencies = 5,8\n", NULL, 0, VS_EINPUT,
           "@:17: [calibration] p2p_piece_bandwidths = 20,90: the last piece "
           "must equal p2p_bandwidth");
  load_bad(CAL_P2P "p2p_breakpoints = 2097152,1048576\n", NULL, 0, VS_EINPUT,
           "p2p_breakpoints = 2097152,1048576: breakpoints must ascend");
  load_bad(CAL_P2P "p2p_piece_latencies = 5us,-1us\n", NULL, 0, VS_EINPUT,
           "p2p_piece_latencies");
  /* a calibrated rate is 0 or a real rate; the range must be a range */
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 0.5MB/s\n", NULL, 0,
           VS_EINPUT, "p2p_bandwidth = 0.5MB/s: a rate must be 0 (no size "
           "dependence) or at least 1 MB/s");
  load_bad(CAL_P2P "p2p_min_bytes = 1TiB\np2p_max_bytes = 1GiB\n", NULL, 0,
           VS_EINPUT, "p2p_min_bytes = 1TiB: above p2p_max_bytes");
  /* a kind's other keys without its bandwidth would go unread (hunt: a
   * p2p_latency of 1 s changed nothing) */
  load_bad(MINIMAL "[calibration]\np2p_latency = 1s\n", NULL, 0, VS_EINPUT,
           "@:14: [calibration] p2p_latency = 1s: has no effect without "
           "p2p_bandwidth, which calibrates the kind (a rate above 0: vsim "
           "times transfers with it)");
  load_bad(MINIMAL "[calibration]\nmalloc_latency = 30us\n", NULL, 0,
           VS_EINPUT, "malloc_latency = 30us: has no effect without "
                      "malloc_bandwidth, which calibrates the kind (0 B/s: a "
                      "time that does not grow with size)");
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 100\n"
           "d2d_kernel_max_bytes = 1GiB\n", NULL, 0, VS_EINPUT,
           "@:15: [calibration] d2d_kernel_max_bytes = 1GiB: has no effect "
           "without d2d_kernel_bandwidth");
}

/* A later piece's intercept is the line of that piece extended back to 0
 * bytes, and may be negative: p2p at 2 us + b / 100 GB/s below 1 MiB, then
 * slower, b / 20 GB/s, continuous at 1 MiB, gives the second piece
 * 2 + 10.48576 - 52.4288 = -39.94304 us. What must hold is the time where
 * each piece starts. */
static void test_calibration_negative_intercepts(void **state)
{
  static const char text[] = MINIMAL
      "[calibration]\n"
      "p2p_bandwidth = 20GB/s\np2p_latency = -39.94304us\n"
      "p2p_min_bytes = 4B\np2p_max_bytes = 64MiB\n"
      "p2p_breakpoints = 1048576\n"
      "p2p_piece_bandwidths = 100GB/s,20GB/s\n"
      "p2p_piece_latencies = 2us,-39.94304us\n";
  static vs_topology t;
  char path[128];
  vs_error err;
  vs_link link;
  (void)state;
  assert_int_equal(load_text(&t, path, text, NULL, 0, &err), 0);
  link = vs_collective_link(&t, 2);
  /* continuous at the breakpoint, the slower line past it */
  assert_near(vs_cost_link_seconds(link, 1048575), 2e-6 + 1048575 / 100e9);
  assert_near(vs_cost_link_seconds(link, 1048576), 2e-6 + 1048576 / 100e9);
  assert_near(vs_cost_link_seconds(link, 4194304), -39.94304e-6 + 4194304 / 20e9);
  /* the nominal fallback latency is the small copies' 2 us */
  assert_near(t.intra_latency, 2e-6);

  /* the first piece's latency is a time */
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 20GB/s\np2p_latency = 8us\n"
           "p2p_breakpoints = 1048576\np2p_piece_bandwidths = 100GB/s,20GB/s\n"
           "p2p_piece_latencies = -1us,8us\n", NULL, 0, VS_EINPUT,
           "@:18: [calibration] p2p_piece_latencies = -1us,8us: piece 1 starts "
           "at 0 bytes with a time of -1 us; a time cannot be negative");
  /* -60 us + 1 MiB / 20 GB/s = -7.5712 us where the second piece starts */
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 20GB/s\np2p_latency = -60us\n"
           "p2p_breakpoints = 1048576\np2p_piece_bandwidths = 100GB/s,20GB/s\n"
           "p2p_piece_latencies = 2us,-60us\n", NULL, 0, VS_EINPUT,
           "piece 2 starts at 1048576 bytes with a time of -7.5712 us");
  /* a one-piece curve: its latency is the time of the smallest copy */
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 20GB/s\np2p_latency = -1us\n",
           NULL, 0, VS_EINPUT,
           "@:15: [calibration] p2p_latency = -1us: piece 1 starts at 0 bytes");
  /* breakpoints need the measured sizes they lie in */
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 20GB/s\np2p_latency = 8us\n"
           "p2p_breakpoints = 65536\np2p_piece_bandwidths = 100GB/s,20GB/s\n"
           "p2p_piece_latencies = 2us,8us\n", NULL, 0, VS_EINPUT,
           "@:16: [calibration] p2p_breakpoints = 65536: needs p2p_min_bytes "
           "and p2p_max_bytes");
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 20GB/s\np2p_latency = 8us\n"
           "p2p_max_bytes = 64MiB\n"
           "p2p_breakpoints = 65536\np2p_piece_bandwidths = 100GB/s,20GB/s\n"
           "p2p_piece_latencies = 2us,8us\n", NULL, 0, VS_EINPUT,
           "p2p_breakpoints = 65536: needs p2p_min_bytes and p2p_max_bytes");
  /* a breakpoint must lie in the measured sizes */
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 20GB/s\np2p_latency = 8us\n"
           "p2p_min_bytes = 4KiB\np2p_max_bytes = 64MiB\n"
           "p2p_breakpoints = 134217728\np2p_piece_bandwidths = 100GB/s,20GB/s\n"
           "p2p_piece_latencies = 2us,8us\n", NULL, 0, VS_EINPUT,
           "breakpoint 134217728 is outside the measured sizes (p2p_min_bytes "
           "4096 to p2p_max_bytes 67108864)");
  /* a curve vsim times transfers with must grow with size; malloc's may not */
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 0\np2p_latency = 500us\n",
           NULL, 0, VS_EINPUT,
           "@:14: [calibration] p2p_bandwidth = 0: vsim times transfers with "
           "this curve, so its last piece needs a rate above 0");
  load_bad(MINIMAL "[calibration]\nd2h_pinned_bandwidth = 0\n"
           "d2h_pinned_latency = 10us\n", NULL, 0, VS_EINPUT,
           "@:14: [calibration] d2h_pinned_bandwidth = 0: vsim times "
           "transfers with this curve");
  /* a rate no hardware reaches: a slipped unit or a fit of noise */
  load_bad(MINIMAL "[calibration]\nd2d_kernel_bandwidth = 1e9TB/s\n",
           NULL, 0, VS_EINPUT,
           "@:14: [calibration] d2d_kernel_bandwidth = 1e9TB/s: must be at "
           "most 100000 GB/s");
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 20GB/s\np2p_latency = 8us\n"
           "p2p_min_bytes = 4KiB\np2p_max_bytes = 64MiB\n"
           "p2p_breakpoints = 65536\n"
           "p2p_piece_bandwidths = 4e15GB/s,20GB/s\n"
           "p2p_piece_latencies = 2us,8us\n", NULL, 0, VS_EINPUT,
           "p2p_piece_bandwidths = 4e15GB/s,20GB/s: must be at most 100000 "
           "GB/s");
  assert_int_equal(load_text(&t, path, MINIMAL "[calibration]\nmalloc_bandwidth = 0\n"
                             "malloc_latency = 20us\n", NULL, 0, &err), 0);
  /* a smallest size without a largest one is not a range */
  load_bad(MINIMAL "[calibration]\np2p_bandwidth = 20GB/s\np2p_latency = 8us\n"
           "p2p_min_bytes = 4KiB\n", NULL, 0, VS_EINPUT,
           "@:16: [calibration] p2p_min_bytes = 4KiB: above p2p_max_bytes");
}

/* A rate is written in GB/s, or in GiB/s where that is shorter or GB/s
 * does not read back exactly; a latency in us, or in s where us does not:
 * every value reads back as itself. 307 GiB/s was 329.638601728GB/s, and a
 * list of a dozen such (a base's intra_busbw) was rewritten past the
 * reader's line limit by vsim-calibrate; 135221976818.72624 B/s was
 * 135.22197681872623GB/s and 1.5498559496067604e-06 s was
 * 1.5498559496067603us, each a unit in the last place off. */
static void test_rates_and_latencies_read_back(void **state)
{
  static const struct {
    const char *section, *key;
    double value;
    const char *want;
  } cases[] = {
      {"network", "intra_bandwidth", 307.0 * 1073741824.0, "307GiB/s"},
      {"gpu", "hbm_bandwidth", 3350e9, "3350GB/s"},
      {"network", "intra_bandwidth", 135221976818.72624, NULL},
      {"network", "intra_latency", 1.5498559496067604e-06, NULL},
      {"network", "intra_latency", 3e-6, "3us"},
  };
  const vs_keytab *tab = vs_topology_keys();
  static vs_topology t, back;
  char path[128], text[64], set[128];
  const char *again = set;
  vs_error err;
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const vs_key *k = &tab->keys[vs_conf_find(tab, cases[i].section,
                                              cases[i].key)];
    FILE *m = fmemopen(text, sizeof text, "w");
    assert_int_equal(load_text(&t, path, MINIMAL, NULL, 0, &err), 0);
    *(double *)(void *)((char *)&t + k->offset) = cases[i].value;
    assert_non_null(m);
    vs_conf_print_value(m, k, &t);
    fclose(m);
    if (cases[i].want)
      assert_string_equal(text, cases[i].want);
    snprintf(set, sizeof set, "%s.%s=%s", cases[i].section, cases[i].key,
             text);
    assert_int_equal(load_text(&back, path, MINIMAL, &again, 1, &err), 0);
    if (*(double *)(void *)((char *)&back + k->offset) != cases[i].value)
      fail_msg("%s read back as %.17g, not %.17g", set,
               *(double *)(void *)((char *)&back + k->offset), cases[i].value);
  }
}

/* Issue 18, item 5: figures beyond any real hardware are refused, with
 * the bound: a size slipped a unit (80 TiB of HBM, 2048 TiB of host
 * memory), 989,000 TFLOP/s (1000 x an H100's bf16), 3350 TB/s of HBM;
 * and a size without its unit (80 was 80 bytes). The largest real values
 * load: 288GB of HBM, 9000 TFLOP/s, 8TB/s, 48TB of host memory. */
static void test_figures_beyond_hardware_refused(void **state)
{
  static const struct {
    const char *set, *want;
  } bad[] = {
      {"gpu.memory=80TiB", "topology.gpu.memory=80TiB: must be at most 4TiB"},
      {"gpu.memory=80", "a size needs its unit: e.g. 80GB or 80GiB"},
      {"gpu.peak_tflops_bf16=989000", "must be at most 100000"},
      {"gpu.peak_tflops_fp8=989000", "must be at most 100000"},
      {"gpu.hbm_bandwidth=3350TB/s", "must be at most 100000 GB/s"},
      {"network.intra_bandwidth=900TB/s", "must be at most 100000 GB/s"},
      {"node.host_memory=2048TiB", "must be at most 1024TiB"},
      {"gpu.nccl_memory=8TiB", "must be at most 4TiB"},
      /* past 64 bits: the bound too, not only "too large" */
      {"gpu.memory=1e30GB", "topology.gpu.memory=1e30GB: must be at most "
                            "4TiB"},
      {"network.intra_busbw_sizes=1e30", "intra_busbw_sizes=1e30: must be at "
                                         "most 1e+15"},
  };
  static const char *const good[] = {
      "gpu.memory=288GB", "gpu.peak_tflops_fp8=9000",
      "gpu.hbm_bandwidth=8TB/s", "node.host_memory=48TB"};
  vs_topology t;
  vs_error err;
  (void)state;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tu_default_topology(&t);
    vs_error_clear(&err);
    assert_int_equal(vs_topology_set(&t, bad[i].set, &err), VS_EINPUT);
    if (!strstr(err.msg, bad[i].want))
      fail_msg("%s: \"%s\" lacks \"%s\"", bad[i].set, err.msg, bad[i].want);
  }
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    tu_default_topology(&t);
    vs_error_clear(&err);
    if (vs_topology_set(&t, good[i], &err) != 0)
      fail_msg("%s: %s", good[i], err.msg);
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_figures_beyond_hardware_refused),
      cmocka_unit_test(test_rates_and_latencies_read_back),
      cmocka_unit_test(test_builtin_text_is_the_h100_file),
      cmocka_unit_test(test_builtin_equals_h100_from_disk),
      cmocka_unit_test(test_h100_values_in_base_units),
      cmocka_unit_test(test_all_shipped_topologies_load),
      cmocka_unit_test(test_optional_keys_default),
      cmocka_unit_test(test_set_overrides),
      cmocka_unit_test(test_set_errors),
      cmocka_unit_test(test_missing_required_key),
      cmocka_unit_test(test_unknown_key_and_section),
      cmocka_unit_test(test_host_memory_bandwidth_bounds),
      cmocka_unit_test(test_gpu_memory_above_libraries),
      cmocka_unit_test(test_fp8_peak_bounds),
      cmocka_unit_test(test_gemm_shape_and_busbw_curve),
      cmocka_unit_test(test_bad_values),
      cmocka_unit_test(test_unreadable_file),
      cmocka_unit_test(test_key_table),
      cmocka_unit_test(test_calibration_replaces_nominal),
      cmocka_unit_test(test_measured_keys_said),
      cmocka_unit_test(test_pageable_rates),
      cmocka_unit_test(test_calibration_curve_pieces),
      cmocka_unit_test(test_calibration_negative_intercepts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
