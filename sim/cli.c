/* cli.c - argument parsing and the run / show commands (see cli.h). */
#include "cli.h"

#include "report.h"
#include "simulate.h"

#include <gsl/gsl_errno.h>

#include <stdlib.h>
#include <string.h>

#define MAX_SETS 128

/* Everything a command line can say. */
typedef struct cli_args {
  const char *command;          /* "run", "show", ... */
  const char *workload;         /* WORKLOAD.ini */
  const char *topology;         /* --topology, NULL = built-in */
  uint64_t gpus;                /* --gpus, 0 = from the workload */
  const char *sets[MAX_SETS];   /* --set for the workload */
  size_t n_sets;
  const char *topo_sets[MAX_SETS]; /* --set topology.* (prefix stripped) */
  size_t n_topo_sets;
  const char *csv_dir;          /* --csv */
  const char *trace;            /* --trace */
  bool all_ranks;               /* --ranks all */
  bool memory_summary;          /* --memory-summary */
  bool help;                    /* --help */
} cli_args;

static const char main_help[] =
    "usage: vsim COMMAND [OPTIONS]\n"
    "\n"
    "Simulates the GPU memory and time of one training step, per GPU.\n"
    "\n"
    "commands:\n"
    "  run WORKLOAD.ini    simulate one step: per-GPU peak memory by category,\n"
    "                      whether it fits, where the peak happens, step time\n"
    "  show WORKLOAD.ini   print the resolved configuration and parameter count\n"
    "  keys                list every workload.ini and topology.ini key with its\n"
    "                      type, allowed values and default\n"
    "\n"
    "options: --help (also after a command), --version\n"
    "exit status: 0 fits, 3 simulated out-of-memory, 1 bad input, 2 bad usage\n"
    "Planned (not in this version): sweep, plan, fit.\n";

static const char run_help[] =
    "usage: vsim run WORKLOAD.ini [OPTIONS]\n"
    "\n"
    "Replays one training step on virtual GPUs and reports, per simulated GPU,\n"
    "the memory at its peak by category, the peak's op and time, capacity,\n"
    "headroom, step time, tokens/s and MFU.\n"
    "\n"
    "options:\n"
    "  --gpus N              number of GPUs (default: tp*pp*dp of the workload);\n"
    "                        dp becomes N / (tp*pp)\n"
    "  --topology FILE.ini   hardware (default: built-in h100-sxm-8x)\n"
    "  --set SEC.KEY=VALUE   override a workload key, e.g. training.micro_batch=2;\n"
    "                        --set topology.SEC.KEY=VALUE overrides a topology key\n"
    "                        (repeatable)\n"
    "  --csv DIR             write summary.csv, timeline.csv and ops.csv to DIR\n"
    "  --trace FILE.json     write a Chrome/Perfetto trace of every op\n"
    "  --ranks stage|all     simulate one GPU per pipeline stage (default) or\n"
    "                        every GPU (same results, slower)\n"
    "  --memory-summary      per GPU, the caching allocator's state in the style\n"
    "                        of torch.cuda.memory_summary()\n"
    "  --help                this text\n"
    "\n"
    "exit status: 0 fits, 3 simulated out-of-memory (report and CSV still\n"
    "written), 1 bad input, 2 bad usage\n";

static const char show_help[] =
    "usage: vsim show WORKLOAD.ini [--gpus N] [--topology FILE.ini] "
    "[--set SEC.KEY=VALUE]...\n"
    "\n"
    "Prints every workload key with defaults resolved, the layout, the\n"
    "parameter count (total and per GPU) and the model-state bytes per GPU.\n";

static int usage(FILE *errs, const char *fmt, const char *arg)
{
  fprintf(errs, "vsim: ");
  fprintf(errs, fmt, arg);
  fprintf(errs, "\n(see vsim --help)\n");
  return VS_EXIT_USAGE;
}

static int parse_gpus(const char *text, uint64_t *out)
{
  char *end;
  unsigned long long v;
  if (!text || *text < '0' || *text > '9')
    return -1;
  v = strtoull(text, &end, 10);
  if (*end != '\0' || v == 0 || v > 1000000)
    return -1;
  *out = v;
  return 0;
}

/* Takes the value of option `name` from "--name=value" or the next word. */
static const char *option_value(int argc, char **argv, int *i, const char *name)
{
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) == 0 && argv[*i][n] == '=')
    return argv[*i] + n + 1;
  if (*i + 1 < argc)
    return argv[++*i];
  return NULL;
}

static bool is_option(const char *arg, const char *name)
{
  size_t n = strlen(name);
  return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

static int parse_args(int argc, char **argv, cli_args *a, FILE *errs)
{
  memset(a, 0, sizeof *a);
  a->command = argv[1];
  for (int i = 2; i < argc; i++) {
    const char *arg = argv[i], *v;
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      a->help = true;
    } else if (is_option(arg, "--gpus")) {
      v = option_value(argc, argv, &i, "--gpus");
      if (parse_gpus(v, &a->gpus))
        return usage(errs, "--gpus needs a whole number from 1 to 1000000, "
                           "got '%s'", v ? v : "");
    } else if (is_option(arg, "--topology")) {
      if (!(a->topology = option_value(argc, argv, &i, "--topology")))
        return usage(errs, "%s needs a file", "--topology");
    } else if (is_option(arg, "--set")) {
      if (!(v = option_value(argc, argv, &i, "--set")))
        return usage(errs, "%s needs SECTION.KEY=VALUE", "--set");
      if (strncmp(v, "topology.", 9) == 0) {
        if (a->n_topo_sets == MAX_SETS)
          return usage(errs, "too many %s options", "--set");
        a->topo_sets[a->n_topo_sets++] = v + 9;
      } else {
        if (a->n_sets == MAX_SETS)
          return usage(errs, "too many %s options", "--set");
        a->sets[a->n_sets++] = v;
      }
    } else if (is_option(arg, "--csv")) {
      if (!(a->csv_dir = option_value(argc, argv, &i, "--csv")))
        return usage(errs, "%s needs a directory", "--csv");
    } else if (is_option(arg, "--trace")) {
      if (!(a->trace = option_value(argc, argv, &i, "--trace")))
        return usage(errs, "%s needs a file", "--trace");
    } else if (is_option(arg, "--ranks")) {
      v = option_value(argc, argv, &i, "--ranks");
      if (v && strcmp(v, "all") == 0)
        a->all_ranks = true;
      else if (!v || strcmp(v, "stage") != 0)
        return usage(errs, "--ranks takes stage or all, got '%s'", v ? v : "");
    } else if (strcmp(arg, "--memory-summary") == 0) {
      a->memory_summary = true;
    } else if (arg[0] == '-' && arg[1] != '\0') {
      return usage(errs, "unknown option '%s'", arg);
    } else if (!a->workload) {
      a->workload = arg;
    } else {
      return usage(errs, "unexpected argument '%s'", arg);
    }
  }
  return 0;
}

/* Loads topology then workload; prints the error and returns the exit code. */
static int load_inputs(const cli_args *a, vs_topology *topo, vs_workload *wl,
                       FILE *errs)
{
  vs_error err;
  vs_error_clear(&err);
  if (vs_topology_load(topo, a->topology, a->topo_sets, a->n_topo_sets, &err) ||
      vs_workload_load(wl, a->workload, a->sets, a->n_sets, a->gpus, &err)) {
    fprintf(errs, "vsim: %s\n", err.msg);
    return err.code == VS_EUSAGE ? VS_EXIT_USAGE : VS_EXIT_ERROR;
  }
  return VS_EXIT_OK;
}

static int cmd_run(const cli_args *a, FILE *out, FILE *errs)
{
  vs_topology *topo = malloc(sizeof *topo);
  vs_workload *wl = malloc(sizeof *wl);
  vs_sim sim;
  vs_sim_opts opts = {a->all_ranks, a->csv_dir || a->trace, false};
  vs_error err;
  int code;

  vs_error_clear(&err);
  if (!topo || !wl) {
    free(topo);
    free(wl);
    fprintf(errs, "vsim: out of host memory\n");
    return VS_EXIT_ERROR;
  }
  if ((code = load_inputs(a, topo, wl, errs)) != VS_EXIT_OK)
    goto done;
  if (vs_sim_run(&sim, wl, topo, &opts, &err)) {
    fprintf(errs, "vsim: %s\n", err.msg);
    code = VS_EXIT_ERROR;
    goto done;
  }
  vs_report_summary(out, &sim);
  if (a->memory_summary)
    vs_report_memory_summary(out, &sim);
  code = sim.fits ? VS_EXIT_OK : VS_EXIT_OOM;
  if ((a->csv_dir && vs_report_write_csv(&sim, a->csv_dir, &err)) ||
      (a->trace && vs_report_write_trace(&sim, a->trace, &err))) {
    fprintf(errs, "vsim: %s\n", err.msg);
    code = VS_EXIT_ERROR;
  }
  vs_sim_fini(&sim);
done:
  free(topo);
  free(wl);
  return code;
}

static int cmd_show(const cli_args *a, FILE *out, FILE *errs)
{
  vs_topology *topo = malloc(sizeof *topo);
  vs_workload *wl = malloc(sizeof *wl);
  vs_model *m = malloc(sizeof *m);
  vs_layout lay;
  vs_error err;
  int code;

  vs_error_clear(&err);
  if (!topo || !wl || !m) {
    fprintf(errs, "vsim: out of host memory\n");
    code = VS_EXIT_ERROR;
  } else if ((code = load_inputs(a, topo, wl, errs)) == VS_EXIT_OK) {
    if (vs_model_build(wl, m, &err) ||
        vs_layout_build(wl, topo, m, &lay, &err)) {
      fprintf(errs, "vsim: %s\n", err.msg);
      code = VS_EXIT_ERROR;
    } else {
      vs_report_show(out, wl, topo, m, &lay);
    }
  }
  free(topo);
  free(wl);
  free(m);
  return code;
}

int vs_cli_main(int argc, char **argv, FILE *out, FILE *errs)
{
  cli_args a;
  int rc;
  bool run, show;

  gsl_set_error_handler_off();
  if (argc < 2)
    return usage(errs, "%s", "missing command");
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    fputs(main_help, out);
    return VS_EXIT_OK;
  }
  if (strcmp(argv[1], "keys") == 0) {
    if (argc > 2 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
      fputs("usage: vsim keys\n\nPrints every key of workload.ini and "
            "topology.ini, its type and\nallowed values, and its default, as "
            "Markdown tables.\n",
            out);
      return VS_EXIT_OK;
    }
    if (argc > 2)
      return usage(errs, "keys takes no arguments, got '%s'", argv[2]);
    vs_report_keys(out);
    return VS_EXIT_OK;
  }
  if (strcmp(argv[1], "--version") == 0) {
    fprintf(out, "vsim %s\n", VSIM_VERSION);
    return VS_EXIT_OK;
  }
  run = strcmp(argv[1], "run") == 0;
  show = strcmp(argv[1], "show") == 0;
  if (!run && !show) {
    if (strcmp(argv[1], "sweep") == 0 || strcmp(argv[1], "plan") == 0 ||
        strcmp(argv[1], "fit") == 0)
      return usage(errs, "'%s' is planned but not in this version of vsim",
                   argv[1]);
    return usage(errs, "unknown command '%s'", argv[1]);
  }
  if ((rc = parse_args(argc, argv, &a, errs)) != 0)
    return rc;
  if (a.help) {
    fputs(run ? run_help : show_help, out);
    return VS_EXIT_OK;
  }
  if (!a.workload)
    return usage(errs, "%s needs a WORKLOAD.ini", a.command);
  return run ? cmd_run(&a, out, errs) : cmd_show(&a, out, errs);
}
