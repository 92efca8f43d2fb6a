/* cli.c - argument parsing and the run / show commands (see cli.h). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "cli.h"

#include "capacity.h"
#include "csvout.h"
#include "outputs.h"
#include "report.h"
#include "simulate.h"
#include "units.h"

#include <gsl/gsl_errno.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SETS 128
#define MAX_TRACE_RANKS 1024 /* ranks a trace can be asked to show */

/* Everything a command line can say. */
typedef struct cli_args {
  const char *command;          /* "run", "show", ... */
  unsigned command_bit;         /* its CMD_ bit */
  const char *workload;         /* WORKLOAD.ini */
  const char *topology;         /* --topology, NULL = built-in */
  uint64_t gpus;                /* --gpus, 0 = from the workload */
  const char *csv_dir;          /* --csv */
  const char *trace;            /* --trace */
  const char *svg;              /* --svg */
  const char *html;             /* --html */
  uint32_t trace_ids[MAX_TRACE_RANKS]; /* --trace-ranks, in order given */
  size_t n_trace_ids;           /* 0: every simulated rank */
  const char *all_sets[2 * MAX_SETS]; /* every --set as given (topology.*
                                         ones go to the topology) */
  size_t n_all_sets;
  const char *varies[VS_VARY_MAX]; /* --vary (sweep) */
  size_t n_varies;
  const char *vary_key;         /* --vary-key (fit) */
  unsigned jobs;                /* --jobs, 0 = one per CPU */
  uint64_t max_gpus;            /* --max-gpus (plan) */
  uint64_t top;                 /* --top (plan) */
  vs_budget budget;             /* --max-events, --max-memory */
  double max_output_bytes;      /* --max-output */
  bool all_ranks;               /* --ranks all */
  bool memory_summary;          /* --memory-summary */
  bool help;                    /* --help */
  unsigned seen;                /* option_rules given, as bits */
  const char *declined;         /* an option option_value would not take as a
                                   value, for the message */
} cli_args;

/* The help texts, laid out as they print (clang-format would rewrap
 * them at 80 columns mid-sentence). */
/* clang-format off */
static const char main_help[] =
    "usage: vsim COMMAND [OPTIONS]\n"
    "\n"
    "Simulates the GPU memory and time of one training step, per GPU.\n"
    "\n"
    "commands:\n"
    "  run WORKLOAD.ini    simulate one step: per-GPU peak memory by category,\n"
    "                      whether it fits, where the peak happens, step time\n"
    "  show WORKLOAD.ini   print the resolved configuration and parameter count\n"
    "  sweep WORKLOAD.ini  simulate every combination of --vary values\n"
    "  fit WORKLOAD.ini    largest micro-batch (or sequence) that fits\n"
    "  plan WORKLOAD.ini   which layouts to rent, ranked by cost per step\n"
    "  keys                list every workload.ini and topology.ini key with its\n"
    "                      type, allowed values and default\n"
    "\n"
    "options: -h, --help (also after a command, or vsim help COMMAND), "
    "--version\n"
    "exit status: 0 fits, 3 simulated out-of-memory, 1 bad input, 2 bad usage\n"
    "";

/* The work limits every simulating command takes (see default_limits). */
#define LIMITS_HELP                                                            \
  "  --max-events N        refuse a simulation estimated at more op events\n"  \
  "                        (default 1e9, minutes of work)\n"                   \
  "  --max-memory SIZE     refuse one estimated to need more host memory\n"    \
  "                        (default: half of this machine's)\n"

static const char run_help[] =
    "usage: vsim run WORKLOAD.ini [OPTIONS]\n"
    "\n"
    "Replays one training step on virtual GPUs and reports, per simulated GPU,\n"
    "the memory at its peak by category, the peak's op and time, capacity,\n"
    "headroom, step time, tokens/s and MFU.\n"
    "\n"
    "options:\n"
    "  --gpus N              number of GPUs (default: tp*cp*pp*dp of the\n"
    "                        workload); dp becomes N / (tp*cp*pp)\n"
    "  --topology FILE.ini   hardware (default: built-in h100-sxm-8x)\n"
    "  --set SEC.KEY=VALUE   override a workload key, e.g. training.micro_batch=2;\n"
    "                        --set topology.SEC.KEY=VALUE overrides a topology key\n"
    "                        (repeatable)\n"
    "  --csv DIR             write summary.csv, timeline.csv, ops.csv, host.csv,\n"
    "                        host_timeline.csv and op_bounds.csv to DIR\n"
    "  --trace FILE.json     write a Chrome/Perfetto trace: every op, and memory\n"
    "                        per category as counter tracks\n"
    "  --trace-ranks LIST    only these ranks in the trace (e.g. 0,8 or 0..7);\n"
    "                        a trace estimated over 100 MB is announced\n"
    "  --svg FILE.svg        chart the worst GPU's memory over the step\n"
    "  --html FILE.html      a self-contained page: the worst GPU's memory over\n"
    "                        the step (zoom, hover for op and bytes), the\n"
    "                        per-GPU table and the step-time split\n"
    "  --ranks stage|all     simulate one GPU per pipeline stage (default) or\n"
    "                        every GPU (same results, slower; under a\n"
    "                        skewed router the GPUs without the hottest\n"
    "                        expert carry less)\n"
    "  --memory-summary      per GPU, the caching allocator's state in the style\n"
    "                        of torch.cuda.memory_summary()\n"
    LIMITS_HELP
    "  --max-output SIZE     refuse when --csv and --trace are estimated to\n"
    "                        write more (default 6GiB)\n"
    "  -h, --help            this text\n"
    "\n"
    "exit status: 0 fits, 3 simulated out-of-memory (report and CSV still\n"
    "written), 1 bad input, 2 bad usage\n";

static const char sweep_help[] =
    "usage: vsim sweep WORKLOAD.ini --vary SEC.KEY=V1,V2,... [--vary ...]\n"
    "                  [--gpus N] [--topology FILE.ini] [--set "
    "SEC.KEY=VALUE]...\n"
    "                  [--jobs N] [--csv FILE]\n"
    "\n"
    "Simulates every combination of the --vary values (their cartesian\n"
    "product) and prints one line each; --csv FILE writes sweep.csv: the\n"
    "varied keys, the summary.csv columns of the worst GPU, then status\n"
    "(fits, tight, oom or invalid), reason, tokens_per_s, mfu and\n"
    "usd_per_step.\n"
    "Invalid combinations are recorded with the reason, not fatal.\n"
    "\n"
    "  --vary KEY=VALUES     KEY is section.key (topology.section.key for the\n"
    "                        hardware) or gpus; VALUES a comma list where "
    "a..b\n"
    "                        is a range (1..16) or continues the progression\n"
    "                        before it: doubling where its start and the two\n"
    "                        values before it double (1,2,4..64 = powers of\n"
    "                        two; 2,4..64 steps by 2), else by its step\n"
    "                        (10,20..100 by 10)\n"
    "  --jobs N              simulations in parallel, 1 to 256 (default: one\n"
    "                        per CPU)\n"
    "  --csv FILE            write sweep.csv there (atomically)\n" LIMITS_HELP
    "  a progress line is shown on stderr when it is a terminal\n"
    "exit status: 0 some combination fits, 3 none fits, 1 bad input, 2 bad "
    "usage\n";

static const char fit_help[] =
    "usage: vsim fit WORKLOAD.ini [--gpus N] [--vary-key KEY] [--topology FILE.ini]\n"
    "                [--set SEC.KEY=VALUE]...\n"
    "\n"
    "Finds the largest value of KEY for which every GPU fits, by full\n"
    "simulations (doubling, then bisection): the value, its peak and headroom,\n"
    "and why the next value does not fit (rank, op, bytes and category).\n"
    "\n"
    "  --vary-key KEY        training.micro_batch (default; the micro-batches per\n"
    "                        step stay as they are, so global_batch follows) or\n"
    "                        model.seq_len\n"
    LIMITS_HELP
    "exit status: 0 found, 3 not even the smallest value fits, 1 bad input,\n"
    "2 bad usage\n";

static const char plan_help[] =
    "usage: vsim plan WORKLOAD.ini [--max-gpus N | --gpus N] [--top K]\n"
    "                 [--topology FILE.ini[,FILE.ini...]] [--set SEC.KEY=VALUE]...\n"
    "                 [--jobs N] [--csv FILE]\n"
    "\n"
    "What to rent: enumerates the layouts a practitioner would consider, with\n"
    "the workload's global_batch fixed: GPU counts (powers of two below a\n"
    "node, multiples of a node above, up to --max-gpus, default 512); tp\n"
    "dividing the node size and the head counts (with sequence parallelism);\n"
    "pp dividing the layers, or a power of two up to them, split unevenly as\n"
    "Megatron-LM allows (ceil(layers/pp) each, one fewer on the first, last,\n"
    "second, ... stage until they add up: 126 layers on 16 stages are\n"
    "7,8,...,8,7), 1F1B and, on even splits with an even number of layers\n"
    "per stage and micro-batches per step a multiple of pp, interleaved with\n"
    "2 virtual stages (uneven interleaved splits, which Megatron-LM's\n"
    "pipeline_model_parallel_layout allows and run takes as pp_layers, are\n"
    "left out of the search); ZeRO 0-3; checkpointing none,\n"
    "selective, full; micro-batches in powers of two; with experts, ep = 1,\n"
    "2, 4, ... dividing them, and etp x ep dividing tp x dp x cp (etp: the\n"
    "workload's, or tp and, with tp > 1, 1); from 8192 tokens (or with the\n"
    "workload's cp), cp = 1, 2, 4, ... (cp, ep and etp columns). Impossible\n"
    "layouts are left out with the reason counted; the rest are simulated\n"
    "(steps of long pipelines extrapolated from their steady state), and the\n"
    "top K that fit by cost per step, the fastest, and the fewest GPUs that\n"
    "fit are re-simulated in full and printed, with the cost and time per 1e9\n"
    "tokens and the pipeline (1f1b, interleaved x2, or an uneven split 1f1b\n"
    "7,8x14,7).\n"
    "\n"
    "  --max-gpus N          largest GPU count (default 512)\n"
    "  --gpus N              only layouts on exactly N GPUs (not with --max-gpus)\n"
    "  --topology A,B,...    compare GPU types (up to 8 files): for each, the\n"
    "                        cheapest and the fastest layout that fit (or that\n"
    "                        none does), then the top K across types by cost per\n"
    "                        step; every row names its GPU type\n"
    "  --top K               layouts to list (default 5)\n"
    "  --jobs N              simulations in parallel, 1 to 256 (default: one\n"
    "                        per CPU)\n"
    "  --csv FILE            write plan.csv: every simulated layout (and\n"
    "                        every invalid one, with its reason) with its\n"
    "                        GPU type, schedule, virtual stages and pp_layers\n"
    "                        (empty when even; a layout screened only up to\n"
    "                        its out-of-memory has no step: its step time and\n"
    "                        the figures from it are empty)\n"
    LIMITS_HELP
    "exit status: 0 something fits, 3 nothing fits up to --max-gpus, 1 bad\n"
    "input, 2 bad usage\n";

static const char show_help[] =
    "usage: vsim show WORKLOAD.ini [--gpus N] [--topology FILE.ini] "
    "[--set SEC.KEY=VALUE]...\n"
    "\n"
    "Prints every workload key with defaults resolved, the layout, the\n"
    "parameter count (total and per GPU) and the model-state bytes per GPU.\n";
/* clang-format on */

static int arg_usage(FILE *errs, const cli_args *a, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* usage() while parsing the arguments, which knows what was declined. */
static int arg_usage(FILE *errs, const cli_args *a, const char *fmt, ...)
{
  va_list ap;
  int rc;
  va_start(ap, fmt);
  rc = vs_vusage(errs, a->declined, fmt, ap);
  va_end(ap);
  return rc;
}

/* An option's value as a message shows it: quoted, or "nothing" where
 * the option was the last argument or the next one is an option. */
static const char *shown(const char *v, char *buf, size_t len)
{
  if (!v)
    return "nothing";
  snprintf(buf, len, "'%s'", v);
  return buf;
}

static int parse_gpus(const char *text, uint64_t *out)
{
  char *end;
  unsigned long long v;
  if (!text || *text < '0' || *text > '9')
    return -1;
  v = strtoull(text, &end, 10);
  if (*end != '\0' || v == 0 || v > VS_MAX_GPUS)
    return -1;
  *out = v;
  return 0;
}

/* The value of option `name` at argv[*i]: after its '=', or the next
 * argument. NULL when there is none, or when the next argument is itself
 * an option (`--csv --memory-summary` would make a folder named
 * "--memory-summary"; a path that starts with "--" can be written ./--x). */
static bool is_option(const char *arg, const char *name)
{
  size_t n = strlen(name);
  return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

static const char *option_value(int argc, char **argv, int *i, const char *name,
                                cli_args *a)
{
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) == 0 && argv[*i][n] == '=')
    return argv[*i] + n + 1;
  if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0)
    return argv[++*i];
  a->declined = *i + 1 < argc ? argv[*i + 1] : NULL;
  return NULL;
}

/* The commands that take options, as bits. */
enum { CMD_RUN = 1, CMD_SHOW = 2, CMD_SWEEP = 4, CMD_FIT = 8, CMD_PLAN = 16 };

/* Whether an option may be given more than once. */
typedef enum { ONCE, REPEATABLE } option_times;

/* Each option, the commands it belongs to, and whether it may be given more
 * than once; an option given to a command that does not use it, or twice,
 * is a usage error rather than silently ignored or overridden. */
static const struct option_rule {
  const char *name;
  unsigned commands;
  option_times times;
} option_rules[] = {
    {"--gpus", CMD_RUN | CMD_SHOW | CMD_SWEEP | CMD_FIT | CMD_PLAN, ONCE},
    {"--topology", CMD_RUN | CMD_SHOW | CMD_SWEEP | CMD_FIT | CMD_PLAN, ONCE},
    {"--set", CMD_RUN | CMD_SHOW | CMD_SWEEP | CMD_FIT | CMD_PLAN, REPEATABLE},
    {"--csv", CMD_RUN | CMD_SWEEP | CMD_PLAN, ONCE},
    {"--trace", CMD_RUN, ONCE},
    {"--trace-ranks", CMD_RUN, ONCE},
    {"--svg", CMD_RUN, ONCE},
    {"--html", CMD_RUN, ONCE},
    {"--ranks", CMD_RUN, ONCE},
    {"--memory-summary", CMD_RUN, ONCE},
    {"--vary", CMD_SWEEP, REPEATABLE},
    {"--vary-key", CMD_FIT, ONCE},
    {"--jobs", CMD_SWEEP | CMD_PLAN, ONCE},
    {"--max-gpus", CMD_PLAN, ONCE},
    {"--top", CMD_PLAN, ONCE},
    {"--max-events", CMD_RUN | CMD_SWEEP | CMD_FIT | CMD_PLAN, ONCE},
    {"--max-memory", CMD_RUN | CMD_SWEEP | CMD_FIT | CMD_PLAN, ONCE},
    {"--max-output", CMD_RUN, ONCE},
};

/* Records that option arg (a known one) was given; a usage error when the
 * command does not take it or it is given twice. */
static int note_option(cli_args *a, const char *arg, FILE *errs)
{
  for (size_t k = 0; k < sizeof option_rules / sizeof option_rules[0]; k++) {
    const struct option_rule *o = &option_rules[k];
    if (!is_option(arg, o->name))
      continue;
    if (!(o->commands & a->command_bit))
      return vs_usage(errs, "%s is not an option of vsim %s", o->name, a->command);
    if ((a->seen & (1u << k)) && o->times == ONCE)
      return vs_usage(errs, "%s given twice", o->name);
    a->seen |= 1u << k;
    return 0;
  }
  return 0;
}


/* The work limits unless the command line says otherwise: 1e9 op events
 * (minutes: vsim replays 2 to 7 million events a second in tests/bench),
 * half of this machine's memory, and 6 GiB of --csv and --trace (4 GiB
 * before op_bounds.csv made --csv's files 45% larger: the same jobs pass,
 * Llama-3 405B on 128 GPUs the largest sample, estimated at 4.7 GiB for
 * the 2.4 GB it writes). */
static void default_limits(cli_args *a)
{
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  a->budget.max_events = 1e9;
  a->budget.max_host_bytes =
      pages > 0 && page > 0 ? (double)pages * (double)page / 2 : 0;
  a->max_output_bytes = 6.0 * (double)(1ull << 30);
}

/* --max-events N, --max-memory SIZE or --max-output SIZE at argv[*i]. */
static int parse_limit(int argc, char **argv, int *i, cli_args *a, FILE *errs)
{
  const char *name = is_option(argv[*i], "--max-events")   ? "--max-events"
                     : is_option(argv[*i], "--max-memory") ? "--max-memory"
                                                           : "--max-output";
  bool events = strcmp(name, "--max-events") == 0;
  const char *v = option_value(argc, argv, i, name, a), *why = NULL;
  uint64_t n = 0;
  char got[256];
  bool bad = !v || (events ? vs_parse_count(v, &n, &why)
                           : vs_parse_size(v, &n, &why));
  if (!bad)
    why = NULL; /* a parse that succeeds may leave a note (a bare 0) */
  if (bad || n == 0)
    return arg_usage(errs, a, "%s needs %s above 0, got %s%s%s", name,
                     events ? "a count (e.g. 2e9)" : "a size (e.g. 16GiB)",
                     shown(v, got, sizeof got), why ? ": " : "",
                     why ? why : "");
  if (events)
    a->budget.max_events = (double)n;
  else if (strcmp(name, "--max-memory") == 0)
    a->budget.max_host_bytes = (double)n;
  else
    a->max_output_bytes = (double)n;
  return 0;
}

/* Appends the ranks of item ("8" or "0..7") to a->trace_ids; false when
 * it is not one, or there would be too many. */
static bool add_trace_item(cli_args *a, const char *item, size_t len)
{
  char buf[48], *end;
  unsigned long long lo, hi;
  if (len == 0 || len >= sizeof buf)
    return false;
  memcpy(buf, item, len);
  buf[len] = '\0';
  if (buf[0] < '0' || buf[0] > '9')
    return false;
  lo = hi = strtoull(buf, &end, 10);
  if (strncmp(end, "..", 2) == 0) {
    if (end[2] < '0' || end[2] > '9')
      return false;
    hi = strtoull(end + 2, &end, 10);
  }
  if (*end != '\0' || hi < lo || hi > UINT32_MAX ||
      hi - lo >= MAX_TRACE_RANKS - a->n_trace_ids)
    return false;
  for (unsigned long long id = lo; id <= hi; id++)
    a->trace_ids[a->n_trace_ids++] = (uint32_t)id;
  return true;
}

/* --trace-ranks LIST at argv[*i]: rank ids and ranges, comma-separated. */
static int parse_trace_ranks(int argc, char **argv, int *i, cli_args *a,
                             FILE *errs)
{
  const char *v = option_value(argc, argv, i, "--trace-ranks", a);
  for (const char *p = v; p && *p;) {
    size_t n = strcspn(p, ",");
    /* an item after every comma ("0," has an empty one) */
    if (!add_trace_item(a, p, n) || (p[n] == ',' && p[n + 1] == '\0'))
      return arg_usage(errs, a, "--trace-ranks takes rank numbers and ranges "
                       "such as 0,8 or 0..7 (at most %d ranks), got '%s'",
                       MAX_TRACE_RANKS, v);
    p += n + (p[n] == ',');
  }
  if (!v || a->n_trace_ids == 0)
    return arg_usage(errs, a, "%s needs rank numbers, e.g. 0,8 or 0..7",
                     "--trace-ranks");
  return 0;
}

/* --jobs, --max-gpus or --top N at argv[*i]. */
static int parse_whole(int argc, char **argv, int *i, cli_args *a, FILE *errs)
{
  const char *name = is_option(argv[*i], "--jobs")
                         ? "--jobs"
                         : (is_option(argv[*i], "--top") ? "--top" : "--max-gpus");
  const char *v = option_value(argc, argv, i, name, a);
  char got[256];
  uint64_t n;
  bool jobs = strcmp(name, "--jobs") == 0;
  if (parse_gpus(v, &n) || (jobs && n > VS_EXPLORE_JOBS_MAX))
    return arg_usage(errs, a, "%s needs a whole number from 1 to %u, got %s",
                     name, jobs ? VS_EXPLORE_JOBS_MAX : VS_MAX_GPUS,
                     shown(v, got, sizeof got));
  if (jobs)
    a->jobs = (unsigned)n;
  else if (strcmp(name, "--top") == 0)
    a->top = n;
  else
    a->max_gpus = n;
  return 0;
}

/* The length of a --set's key (before its '='; the whole text without). */
static size_t set_key_len(const char *set)
{
  const char *eq = strchr(set, '=');
  return eq ? (size_t)(eq - set) : strlen(set);
}

/* A usage error when --set `set` names a key an earlier --set gave: the
 * later one would silently win. */
static int set_once(const cli_args *a, const char *set, FILE *errs)
{
  size_t n = set_key_len(set);
  for (size_t k = 0; k < a->n_all_sets; k++)
    if (set_key_len(a->all_sets[k]) == n &&
        strncmp(a->all_sets[k], set, n) == 0)
      return arg_usage(errs, a, "--set %s and --set %s both set %.*s; give "
                       "each key once", a->all_sets[k], set, (int)n, set);
  return 0;
}

/* Options whose value is kept as given: where it goes, and what it names
 * (for the usage message when it is missing). */
static const struct text_option {
  const char *name;
  size_t field;      /* offsetof the const char * in cli_args */
  const char *needs;
} text_options[] = {
    {"--topology", offsetof(cli_args, topology), "a file"},
    {"--csv", offsetof(cli_args, csv_dir), "a directory"},
    {"--trace", offsetof(cli_args, trace), "a file"},
    {"--svg", offsetof(cli_args, svg), "a file"},
    {"--html", offsetof(cli_args, html), "a file"},
    {"--vary-key", offsetof(cli_args, vary_key), "a key"},
};

/* Whether argv[*i] is one of text_options; if so its value is taken into
 * its field, *rc the usage error when there is none (else 0). */
static bool text_option(int argc, char **argv, int *i, cli_args *a,
                        FILE *errs, int *rc)
{
  for (size_t k = 0; k < sizeof text_options / sizeof *text_options; k++) {
    const struct text_option *o = &text_options[k];
    const char **field = (const char **)(void *)((char *)a + o->field);
    if (!is_option(argv[*i], o->name))
      continue;
    *field = option_value(argc, argv, i, o->name, a);
    *rc = *field ? 0 : arg_usage(errs, a, "%s needs %s", o->name, o->needs);
    return true;
  }
  return false;
}

/* --set SECTION.KEY=VALUE at argv[*i]. */
static int parse_set(int argc, char **argv, int *i, cli_args *a, FILE *errs)
{
  const char *v = option_value(argc, argv, i, "--set", a);
  int rc;
  if (!v)
    return arg_usage(errs, a, "%s needs SECTION.KEY=VALUE", "--set");
  if (a->n_all_sets == 2 * MAX_SETS)
    return arg_usage(errs, a, "too many %s options", "--set");
  if ((rc = set_once(a, v, errs)))
    return rc;
  a->all_sets[a->n_all_sets++] = v;
  return 0;
}

/* --ranks stage|all at argv[*i]. */
static int parse_ranks(int argc, char **argv, int *i, cli_args *a, FILE *errs)
{
  const char *v = option_value(argc, argv, i, "--ranks", a);
  char got[256];
  if (v && strcmp(v, "all") == 0)
    a->all_ranks = true;
  else if (!v || strcmp(v, "stage") != 0)
    return arg_usage(errs, a, "--ranks takes stage or all, got %s",
                     shown(v, got, sizeof got));
  return 0;
}

/* --vary SECTION.KEY=VALUES at argv[*i]. */
static int parse_vary(int argc, char **argv, int *i, cli_args *a, FILE *errs)
{
  const char *v = option_value(argc, argv, i, "--vary", a);
  if (!v)
    return arg_usage(errs, a, "%s needs SECTION.KEY=VALUES", "--vary");
  if (a->n_varies == VS_VARY_MAX)
    return arg_usage(errs, a, "at most 8 %s options", "--vary");
  a->varies[a->n_varies++] = v;
  return 0;
}

/* The options of command argv[1] (option_rules' `bit`) into a. */
static int parse_args(int argc, char **argv, unsigned bit, cli_args *a,
                      FILE *errs)
{
  memset(a, 0, sizeof *a);
  a->command = argv[1];
  a->command_bit = bit;
  default_limits(a);
  for (int i = 2; i < argc; i++) {
    const char *arg = argv[i], *v;
    int rc;
    if ((rc = note_option(a, arg, errs)))
      return rc;
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      a->help = true;
    } else if (is_option(arg, "--gpus")) {
      v = option_value(argc, argv, &i, "--gpus", a);
      char got[256];
      if (parse_gpus(v, &a->gpus))
        return arg_usage(errs, a,
                         "--gpus needs a whole number from 1 to %u, "
                         "got %s",
                         VS_MAX_GPUS, shown(v, got, sizeof got));
    } else if (text_option(argc, argv, &i, a, errs, &rc)) {
      if (rc)
        return rc;
    } else if (is_option(arg, "--set")) {
      if ((rc = parse_set(argc, argv, &i, a, errs)))
        return rc;
    } else if (is_option(arg, "--trace-ranks")) {
      if ((rc = parse_trace_ranks(argc, argv, &i, a, errs)))
        return rc;
    } else if (is_option(arg, "--ranks")) {
      if ((rc = parse_ranks(argc, argv, &i, a, errs)))
        return rc;
    } else if (is_option(arg, "--vary")) {
      if ((rc = parse_vary(argc, argv, &i, a, errs)))
        return rc;
    } else if (is_option(arg, "--jobs") || is_option(arg, "--max-gpus") ||
               is_option(arg, "--top")) {
      if ((rc = parse_whole(argc, argv, &i, a, errs)))
        return rc;
    } else if (is_option(arg, "--max-events") || is_option(arg, "--max-memory") ||
               is_option(arg, "--max-output")) {
      if ((rc = parse_limit(argc, argv, &i, a, errs)))
        return rc;
    } else if (strcmp(arg, "--memory-summary") == 0) {
      a->memory_summary = true;
    } else if (arg[0] == '-' && arg[1] != '\0') {
      return arg_usage(errs, a, "unknown option '%s'", arg);
    } else if (!a->workload) {
      a->workload = arg;
    } else {
      return arg_usage(errs, a, "unexpected argument '%s'", arg);
    }
  }
  return 0;
}

/* Loads topology then workload; prints the error and returns the exit code. */
static int load_inputs(const cli_args *a, vs_topology *topo, vs_workload *wl,
                       FILE *errs)
{
  vs_explore ex = {0};
  vs_error err;
  vs_error_clear(&err);
  ex.workload = a->workload;
  ex.topology = a->topology;
  ex.sets = a->all_sets;
  ex.n_sets = a->n_all_sets;
  if (vs_explore_load(&ex, NULL, 0, a->gpus, topo, wl, &err)) {
    fprintf(errs, "vsim: %s\n", err.msg);
    return err.code == VS_EUSAGE ? VS_EXIT_USAGE : VS_EXIT_ERROR;
  }
  return VS_EXIT_OK;
}

/* ------------------------------------------------------------------------
 * Outputs of a run, checked before simulating (outputs.h)
 * ------------------------------------------------------------------------ */

/* The files a run writes: the three CSV files, the trace, the chart, the
 * page (at most 6). */
typedef struct output {
  const char *option;          /* "--csv", "--trace", "--svg", "--html" */
  const char *given;           /* what followed the option */
  char path[VS_OUTPUTS_PATH_LEN];         /* the file */
  char key[VS_OUTPUTS_PATH_LEN];          /* vs_outputs_file_key(path) */
  bool too_long;               /* path or key cut short */
} output;

static size_t run_outputs(const cli_args *a, output *outs)
{
  size_t n = 0;
  for (size_t i = 0; a->csv_dir && i < VS_REPORT_CSV_FILES; i++, n++) {
    int used = snprintf(outs[n].path, VS_OUTPUTS_PATH_LEN, "%s/%s",
                        a->csv_dir, vs_report_csv_names[i]);
    outs[n].option = "--csv";
    outs[n].given = a->csv_dir;
    outs[n].too_long = used >= VS_OUTPUTS_PATH_LEN;
  }
  if (a->trace)
    outs[n++] = (output){.option = "--trace", .given = a->trace};
  if (a->svg)
    outs[n++] = (output){.option = "--svg", .given = a->svg};
  if (a->html)
    outs[n++] = (output){.option = "--html", .given = a->html};
  for (size_t i = 0; i < n; i++) {
    if (!outs[i].path[0])
      outs[i].too_long = snprintf(outs[i].path, VS_OUTPUTS_PATH_LEN, "%s",
                                  outs[i].given) >= VS_OUTPUTS_PATH_LEN;
    if (!vs_outputs_file_key(outs[i].path, outs[i].key, VS_OUTPUTS_PATH_LEN))
      outs[i].too_long = true;
  }
  return n;
}

/* No file output of outs[0 .. n) is the --csv folder itself. */
static int check_spares_csv_dir(const cli_args *a, const output *outs,
                                size_t n, FILE *errs)
{
  char key[VS_OUTPUTS_PATH_LEN];
  vs_outputs_file_key(a->csv_dir, key, sizeof key);
  for (size_t i = 0; i < n; i++)
    if (strcmp(outs[i].option, "--csv") != 0 && strcmp(outs[i].key, key) == 0)
      return vs_usage(errs, "%s %s names the --csv folder %s; give each "
                            "output its own path",
                      outs[i].option, outs[i].given, a->csv_dir);
  return VS_EXIT_OK;
}

/* Two outputs that name the same file would overwrite one another, and one
 * that names an input file (the workload, the topology, and hf_config
 * once the workload is read: NULL before) would destroy it. */
static int check_distinct_outputs(const cli_args *a, const char *hf_config,
                                  FILE *errs)
{
  output *outs = malloc((VS_REPORT_CSV_FILES + 3) * sizeof *outs); /* + trace, svg, html */
  size_t n;
  int code = VS_EXIT_OK;

  if (!outs) {
    fprintf(errs, "vsim: out of host memory\n");
    return VS_EXIT_ERROR;
  }
  n = run_outputs(a, outs);
  for (size_t i = 0; code == VS_EXIT_OK && i < n; i++)
    if (outs[i].too_long) {
      fprintf(errs, "vsim: %s %s: path too long (vsim takes up to %d "
                    "characters%s)\n",
              outs[i].option, outs[i].given, VS_OUTPUTS_PATH_LEN - 1,
              strcmp(outs[i].option, "--csv") == 0
                  ? ", the names of the files in the folder included"
                  : "");
      code = VS_EXIT_ERROR;
    }
  for (size_t i = 0; code == VS_EXIT_OK && i < n; i++) {
    const char *in = vs_outputs_input_named(outs[i].key, a->workload,
                                            a->topology, hf_config);
    if (in)
      code = vs_usage(errs, "%s %s would overwrite the input file %s",
                   outs[i].option, outs[i].given, in);
  }
  if (code == VS_EXIT_OK && a->csv_dir)
    code = check_spares_csv_dir(a, outs, n, errs);
  for (size_t i = 0; code == VS_EXIT_OK && i < n; i++)
    for (size_t j = i + 1; code == VS_EXIT_OK && j < n; j++)
      if (strcmp(outs[i].key, outs[j].key) == 0)
        code = vs_usage(errs, "%s %s and %s %s both write %s; give each output "
                           "its own file",
                     outs[i].option, outs[i].given, outs[j].option,
                     outs[j].given, outs[j].path);
  free(outs);
  return code;
}

/* check_distinct_outputs once the workload has named its hf_config. */
static int check_outputs_spare_hf_config(const cli_args *a,
                                         const vs_workload *wl, FILE *errs)
{
  char hf[VS_OUTPUTS_PATH_LEN];
  vs_workload_hf_config_path(wl, hf, sizeof hf);
  return hf[0] ? check_distinct_outputs(a, hf, errs) : VS_EXIT_OK;
}

/* Whether path is a file in the --csv folder that the run will make: the
 * folder does not exist yet, and the CSV files make it before the other
 * outputs are written into it (fill_run_outputs), so that the check of
 * --csv has checked the folder, and its name is all there is left to
 * check (check_new_file_name). */
static bool in_new_csv_dir(const cli_args *a, const char *path)
{
  char dir[VS_OUTPUTS_PATH_LEN], dir_key[VS_OUTPUTS_PATH_LEN],
      csv_key[VS_OUTPUTS_PATH_LEN];
  struct stat st;
  if (!a->csv_dir || stat(a->csv_dir, &st) == 0)
    return false;
  return vs_csv_dir_of(path, dir, sizeof dir) &&
         vs_outputs_file_key(dir, dir_key, sizeof dir_key) &&
         vs_outputs_file_key(a->csv_dir, csv_key, sizeof csv_key) &&
         strcmp(dir_key, csv_key) == 0;
}

/* The longest name of a file (POSIX NAME_MAX; Linux's ext4, xfs, btrfs
 * and tmpfs take 255 bytes). */
#define FILE_NAME_MAX 255

/* What vs_outputs_check finds of a file in a folder that does not exist
 * yet: it needs a name, neither "." nor "..", that a folder can hold. */
static int check_new_file_name(const char *option, const char *path, FILE *errs)
{
  size_t n = strlen(path);
  const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
  if (n == 0 || path[n - 1] == '/' || strcmp(name, ".") == 0 ||
      strcmp(name, "..") == 0)
    return vs_usage(errs, "%s needs a file name, got '%s'", option, path);
  if (strlen(name) <= FILE_NAME_MAX)
    return VS_EXIT_OK;
  fprintf(errs, "vsim: %s %s: %s\n", option, path, strerror(ENAMETOOLONG));
  return VS_EXIT_ERROR;
}

/* A file output (--trace, --svg, --html) can be written. */
static int check_file_output(const cli_args *a, const char *option,
                             const char *path, FILE *errs)
{
  if (!path)
    return VS_EXIT_OK;
  if (in_new_csv_dir(a, path))
    return check_new_file_name(option, path, errs);
  return vs_outputs_check(errs, option, path);
}

/* Every output of a run can be written (see vs_outputs_check_csv_dir). */
static int check_run_outputs(const cli_args *a, FILE *errs)
{
  int code = VS_EXIT_OK;
  if (a->csv_dir)
    code = vs_outputs_check_csv_dir(errs, a->csv_dir);
  if (code == VS_EXIT_OK)
    code = check_file_output(a, "--trace", a->trace, errs);
  if (code == VS_EXIT_OK)
    code = check_file_output(a, "--svg", a->svg, errs);
  if (code == VS_EXIT_OK)
    code = check_file_output(a, "--html", a->html, errs);
  return code;
}

/* A run estimated above these is announced on stderr before it starts,
 * so that a long one is never silent: 1e8 op events (half a minute at
 * the 2 to 7 million events a second of tests/bench) or 4 GiB of host
 * memory. */
#define NOTE_EVENTS 1e8
#define NOTE_HOST_BYTES (4.0 * (double)(1ull << 30))
/* A trace over 100 MB is announced too: past that, chrome://tracing and
 * Perfetto's browser UI load it slowly or not at all. */
#define NOTE_TRACE_BYTES 100e6

/* The trace's estimated bytes: w's, for the ranks --trace-ranks keeps. */
static double trace_bytes(const cli_args *a, const vs_work *w)
{
  double share = a->n_trace_ids && w->ranks > 0
                     ? (double)a->n_trace_ids / w->ranks
                     : 1.0;
  return w->trace_bytes * (share < 1.0 ? share : 1.0);
}

/* Each rank --trace-ranks names is one of the job's gpus GPUs, else a
 * message and VS_EXIT_ERROR: checked before the run (which can take
 * minutes at scale) and again after it. */
static int check_trace_ranks_exist(const cli_args *a, uint64_t gpus, FILE *errs)
{
  for (size_t k = 0; k < a->n_trace_ids; k++)
    if (a->trace_ids[k] >= gpus) {
      fprintf(errs,
              "vsim: --trace-ranks: rank %u does not exist: the job "
              "has %llu GPUs (0..%llu)\n",
              a->trace_ids[k], (unsigned long long)gpus,
              (unsigned long long)gpus - 1);
      return VS_EXIT_ERROR;
    }
  return VS_EXIT_OK;
}

/* Each rank --trace-ranks names is one the simulation ran (all of them
 * with --ranks all; one per stage otherwise). Exit status. */
static int check_trace_ranks(const cli_args *a, const vs_sim *sim, FILE *errs)
{
  if (check_trace_ranks_exist(a, sim->layout.gpus, errs) != VS_EXIT_OK)
    return VS_EXIT_ERROR;
  for (size_t k = 0; k < a->n_trace_ids; k++) {
    bool found = false;
    for (size_t i = 0; i < sim->n_ranks && !found; i++)
      found = sim->ranks[i].id == a->trace_ids[k];
    if (!found) {
      fprintf(errs, "vsim: --trace-ranks: rank %u is not simulated; ",
              a->trace_ids[k]);
      if (a->all_ranks) {
        fprintf(errs, "the job has %zu GPUs (0..%zu)\n", sim->n_ranks,
                sim->n_ranks - 1);
        return VS_EXIT_ERROR;
      }
      fprintf(errs, "one GPU per pipeline stage is:");
      for (size_t i = 0; i < sim->n_ranks && i < 8; i++)
        fprintf(errs, "%s %u", i ? "," : "", sim->ranks[i].id);
      fprintf(errs, "%s (--ranks all simulates every GPU)\n",
              sim->n_ranks > 8 ? ", ..." : "");
      return VS_EXIT_ERROR;
    }
  }
  return VS_EXIT_OK;
}

/* The ranks --trace-ranks names against the job's GPUs, and the --csv and
 * --trace files a run would write, estimated before it runs, against
 * --max-output (a 16,384-GPU job with --ranks all writes
 * tens of GB); a large run is announced, unless the budget refuses it
 * (the simulation says so). An invalid job is left for the simulation to
 * report. */
static int check_run_work(const cli_args *a, const vs_workload *wl,
                          const vs_topology *topo, const vs_sim_opts *opts,
                          FILE *errs)
{
  vs_work w;
  vs_error err;
  double bytes, trace;
  char need[16], limit[16];
  vs_error_clear(&err);
  if (vs_sim_estimate(wl, topo, opts, &w, &err))
    return VS_EXIT_OK;
  if (check_trace_ranks_exist(a, w.gpus, errs) != VS_EXIT_OK)
    return VS_EXIT_ERROR;
  trace = a->trace ? trace_bytes(a, &w) : 0;
  bytes = (a->csv_dir ? w.csv_bytes : 0) + trace;
  if (bytes > a->max_output_bytes) {
    fprintf(errs,
            "vsim: %s: the outputs asked for (%s%s%s) are estimated at "
            "%s (%.3g op events), over --max-output %s: raise it to "
            "write them anyway%s%s\n",
            wl->origins.file, a->csv_dir ? "--csv" : "",
            a->csv_dir && a->trace ? " and " : "", a->trace ? "--trace" : "",
            vs_format_bytes((uint64_t)bytes, need, sizeof need), w.rank_events,
            vs_format_bytes((uint64_t)a->max_output_bytes, limit, sizeof limit),
            a->all_ranks ? ", or leave out --ranks all (one GPU per stage has "
                           "the same memory and time)"
                         : "",
            a->trace && !a->n_trace_ids && trace > 0
                ? "; --trace-ranks (e.g. 0 or 0..7) keeps only the ranks "
                  "you name in the trace"
                : "");
    return VS_EXIT_ERROR;
  }
  if (trace > NOTE_TRACE_BYTES)
    fprintf(errs, "vsim: note: the trace is estimated at %s%s\n",
            vs_format_bytes((uint64_t)trace, need, sizeof need),
            a->n_trace_ids ? ""
                           : "; --trace-ranks (e.g. 0 or 0..7) keeps only "
                             "the ranks you name");
  if ((w.events > NOTE_EVENTS || w.host_bytes > NOTE_HOST_BYTES) &&
      vs_budget_allows(&opts->budget, &w))
    fprintf(errs, "vsim: note: %s is estimated at %.3g op events and %s of "
                  "host memory; this takes a while\n",
            wl->origins.file, w.events,
            vs_format_bytes((uint64_t)w.host_bytes, need, sizeof need));
  return VS_EXIT_OK;
}

/* The option that named the output a failure's message starts with (its
 * path as given: the longest that matches, as --trace out/t.json beside
 * --csv out), or NULL. */
static const char *output_option(const cli_args *a, const char *msg)
{
  const char *const opts[] = {"--csv", "--trace", "--svg", "--html"};
  const char *const paths[] = {a->csv_dir, a->trace, a->svg, a->html};
  const char *best = NULL;
  size_t best_n = 0;
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    size_t n = paths[i] ? strlen(paths[i]) : 0;
    if (n > best_n && strncmp(msg, paths[i], n) == 0 &&
        (msg[n] == ':' || (i == 0 && msg[n] == '/'))) {
      best = opts[i];
      best_n = n;
    }
  }
  return best;
}

/* The files of write_run_outputs, into files. */
static int fill_run_outputs(const cli_args *a, const vs_sim *sim,
                            const vs_trace_ranks *sel, vs_report_files *files,
                            vs_error *err)
{
  int rc = 0;
  if (a->csv_dir)
    rc = vs_report_write_csv(sim, a->csv_dir, files, err);
  if (!rc && a->trace)
    rc = vs_report_write_trace(sim, a->trace, sel, files, err);
  if (!rc && a->svg)
    rc = vs_report_write_svg(sim, a->svg, files, err);
  if (!rc && a->html)
    rc = vs_report_write_html(sim, a->html, files, err);
  return rc;
}

/* The outputs run asked for (--csv, --trace, --svg, --html), put in
 * place together: when one cannot be written, none replaces what was
 * there (vs_report_files), and a --csv folder this run made is removed
 * again. The message names the option. */
static int write_run_outputs(const cli_args *a, const vs_sim *sim,
                             const vs_trace_ranks *sel, FILE *errs)
{
  vs_report_files files = {.n = 0};
  struct stat st;
  bool made_dir = a->csv_dir && stat(a->csv_dir, &st) != 0;
  const char *option;
  vs_error err;
  int rc;
  vs_error_clear(&err);
  if (made_dir)
    vs_csv_remove_dir_on_signal(a->csv_dir);
  if ((rc = fill_run_outputs(a, sim, sel, &files, &err)))
    vs_report_files_abort(&files);
  else
    rc = vs_report_files_commit(&files, &err);
  vs_csv_remove_dir_on_signal(NULL);
  if (!rc)
    return VS_EXIT_OK;
  if (made_dir)
    rmdir(a->csv_dir); /* only when empty: nothing of it was committed */
  option = output_option(a, err.msg);
  fprintf(errs, "vsim: %s%s%s\n", option ? option : "", option ? " " : "",
          err.msg);
  return VS_EXIT_ERROR;
}

static int cmd_run(const cli_args *a, FILE *out, FILE *errs)
{
  vs_topology *topo = malloc(sizeof *topo);
  vs_workload *wl = malloc(sizeof *wl);
  vs_sim sim;
  vs_sim_opts opts = {.all_ranks = a->all_ranks,
                      .record = a->csv_dir || a->trace || a->svg || a->html,
                      .budget = a->budget,
                      .peak_tensors = true};
  vs_trace_ranks sel = {a->trace_ids, a->n_trace_ids};
  vs_error err;
  int code;

  vs_error_clear(&err);
  if (a->n_trace_ids && !a->trace) {
    free(topo);
    free(wl);
    return vs_usage(errs, "--trace-ranks chooses the ranks of --trace, which "
                    "is not given");
  }
  if (!topo || !wl) {
    free(topo);
    free(wl);
    fprintf(errs, "vsim: out of host memory\n");
    return VS_EXIT_ERROR;
  }
  if ((code = check_distinct_outputs(a, NULL, errs)) != VS_EXIT_OK ||
      (code = load_inputs(a, topo, wl, errs)) != VS_EXIT_OK ||
      (code = check_outputs_spare_hf_config(a, wl, errs)) != VS_EXIT_OK ||
      (code = check_run_outputs(a, errs)) != VS_EXIT_OK ||
      (code = check_run_work(a, wl, topo, &opts, errs)) != VS_EXIT_OK)
    goto done;
  if (vs_sim_run(&sim, wl, topo, &opts, &err)) {
    fprintf(errs, "vsim: %s\n", err.msg);
    code = err.code == VS_EUSAGE ? VS_EXIT_USAGE : VS_EXIT_ERROR;
    goto done;
  }
  if ((code = check_trace_ranks(a, &sim, errs)) != VS_EXIT_OK) {
    vs_sim_fini(&sim);
    goto done;
  }
  vs_report_summary(out, &sim);
  if (a->memory_summary)
    vs_report_memory_summary(out, &sim);
  code = sim.fits ? VS_EXIT_OK : VS_EXIT_OOM;
  if (write_run_outputs(a, &sim, &sel, errs) != VS_EXIT_OK)
    code = VS_EXIT_ERROR;
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
  vs_recipe r = {0};
  vs_error err;
  int code;

  vs_error_clear(&err);
  if (!topo || !wl || !m) {
    fprintf(errs, "vsim: out of host memory\n");
    code = VS_EXIT_ERROR;
  } else if ((code = load_inputs(a, topo, wl, errs)) == VS_EXIT_OK) {
    if (vs_model_build(wl, m, &err) || vs_recipe_build(wl, m, &r, &err) ||
        vs_layout_build(wl, topo, m, &r, &lay, &err) ||
        vs_report_show(out, wl, topo, m, &r, &lay, &err)) {
      fprintf(errs, "vsim: %s\n", err.msg);
      code = VS_EXIT_ERROR;
    }
    vs_recipe_fini(&r);
    vs_model_fini(m);
  }
  free(topo);
  free(wl);
  free(m);
  return code;
}

/* VS_EUSAGE when --vary v varies what --gpus or a --set fixes: one of
 * them would be silently dropped. */
static int vary_overrides_none(const cli_args *a, const vs_vary *v,
                               vs_error *err)
{
  size_t n = strlen(v->key);
  if (a->gpus && strcmp(v->key, "gpus") == 0)
    return vs_error_set(err, VS_EUSAGE, "--gpus %llu and --vary gpus=... "
                        "both set the GPU count; give one",
                        (unsigned long long)a->gpus);
  for (size_t k = 0; k < a->n_all_sets; k++)
    if (set_key_len(a->all_sets[k]) == n &&
        strncmp(a->all_sets[k], v->key, n) == 0)
      return vs_error_set(err, VS_EUSAGE, "--set %s and --vary %s=... both "
                          "set %s; give one", a->all_sets[k], v->key, v->key);
  return 0;
}

/* The capacity commands, which search over many simulations. */
typedef enum { CAPACITY_SWEEP, CAPACITY_FIT, CAPACITY_PLAN } capacity_cmd;

/* Notes each --set of a key that fit or plan sets itself in every
 * simulation it runs: the value only makes the base workload valid (as
 * it may have to), it does not narrow the search; fit's micro-batch also
 * decides the base's micro-batches per step, which fit keeps. */
static void note_searched_sets(const cli_args *a, capacity_cmd which,
                               const vs_capacity_opts *o, FILE *errs)
{
  const char *fit_key = vs_capacity_fit_key(o);
  bool fit_mb = strcmp(fit_key, "training.micro_batch") == 0;
  for (size_t k = 0; k < a->n_all_sets; k++) {
    const char *set = a->all_sets[k];
    size_t n = set_key_len(set);
    bool fit = which == CAPACITY_FIT && strlen(fit_key) == n &&
               strncmp(set, fit_key, n) == 0;
    bool plan = which == CAPACITY_PLAN && vs_capacity_plan_sets(set, n);
    if (fit || plan)
      fprintf(errs,
              "vsim: note: %s sets %.*s in every simulation it runs: "
              "--set %s only makes the base workload valid, it does not "
              "narrow the search%s\n",
              fit ? "fit" : "plan", (int)n, set, set,
              fit && fit_mb ? "; it does decide the base's micro-batches "
                              "per step, which fit keeps (the global batch "
                              "follows the micro-batch)"
                            : "");
  }
}

static int cmd_capacity(const cli_args *a, capacity_cmd which, FILE *out,
                        FILE *errs)
{
  vs_capacity_opts *o = calloc(1, sizeof *o);
  vs_error err;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int code;

  vs_error_clear(&err);
  if (!o) {
    fprintf(errs, "vsim: out of host memory\n");
    return VS_EXIT_ERROR;
  }
  o->ex.workload = a->workload;
  o->ex.topology = a->topology;
  o->ex.sets = a->all_sets;
  o->ex.n_sets = a->n_all_sets;
  o->ex.jobs = a->jobs ? a->jobs : (unsigned)(cpus > 0 ? cpus : 1);
  o->ex.progress = isatty(fileno(errs)) != 0;
  o->ex.what = a->command;
  o->ex.max_microbatches = which == CAPACITY_PLAN ? 1 : 0;
  o->ex.budget = a->budget;
  o->gpus = a->gpus;
  o->csv = a->csv_dir;
  o->fit_key = a->vary_key;
  o->max_gpus = a->max_gpus;
  o->top = (size_t)a->top;
  for (size_t i = 0; i < a->n_varies; i++) {
    if (vs_vary_parse(a->varies[i], &o->vary[i], &err) ||
        vary_overrides_none(a, &o->vary[i], &err)) {
      free(o);
      return vs_usage(errs, "%s", err.msg);
    }
    o->n_vary++;
  }
  note_searched_sets(a, which, o, errs);
  if (which == CAPACITY_SWEEP)
    code = vs_capacity_sweep(o, out, errs);
  else if (which == CAPACITY_FIT)
    code = vs_capacity_fit(o, out, errs);
  else
    code = vs_capacity_plan(o, out, errs);
  free(o);
  return code;
}

static int cmd_sweep(const cli_args *a, FILE *out, FILE *errs)
{
  return cmd_capacity(a, CAPACITY_SWEEP, out, errs);
}

static int cmd_fit(const cli_args *a, FILE *out, FILE *errs)
{
  return cmd_capacity(a, CAPACITY_FIT, out, errs);
}

static int cmd_plan(const cli_args *a, FILE *out, FILE *errs)
{
  if (a->gpus && a->max_gpus)
    return vs_usage(errs, "plan takes --gpus N (layouts on exactly N GPUs) or "
                    "--max-gpus N (up to N), not both");
  return cmd_capacity(a, CAPACITY_PLAN, out, errs);
}

/* The commands that read a workload: each one's name, its bit in
 * option_rules, its --help text and what runs it. */
static const struct command {
  const char *name;
  unsigned bit;
  const char *help;
  int (*run)(const cli_args *a, FILE *out, FILE *errs);
} commands[] = {
    {"run", CMD_RUN, run_help, cmd_run},
    {"show", CMD_SHOW, show_help, cmd_show},
    {"sweep", CMD_SWEEP, sweep_help, cmd_sweep},
    {"fit", CMD_FIT, fit_help, cmd_fit},
    {"plan", CMD_PLAN, plan_help, cmd_plan},
};

static const struct command *command_named(const char *name)
{
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(name, commands[i].name) == 0)
      return &commands[i];
  return NULL;
}

static const char keys_help[] =
    "usage: vsim keys\n\nPrints every key of workload.ini and topology.ini, "
    "its type and\nallowed values, and its default, as Markdown tables.\n";

/* vsim --help, vsim help, and vsim help COMMAND: that command's help. */
static int cmd_help(int argc, char **argv, FILE *out, FILE *errs)
{
  const struct command *cmd;
  if (argc == 2) {
    fputs(main_help, out);
    return VS_EXIT_OK;
  }
  if (strcmp(argv[1], "help") != 0)
    return vs_usage(errs, "%s takes no arguments, got '%s' (vsim COMMAND "
                    "--help or vsim help COMMAND gives a command's help)",
                    argv[1], argv[2]);
  if (argc > 3)
    return vs_usage(errs, "help takes one COMMAND, got '%s' too", argv[3]);
  if (strcmp(argv[2], "keys") == 0) {
    fputs(keys_help, out);
    return VS_EXIT_OK;
  }
  if (!(cmd = command_named(argv[2])))
    return vs_usage(errs, "unknown command '%s'", argv[2]);
  fputs(cmd->help, out);
  return VS_EXIT_OK;
}

/* The command named by argv[1], its report written to out. */
static int dispatch(int argc, char **argv, FILE *out, FILE *errs)
{
  cli_args a;
  const struct command *cmd;
  int rc;

  gsl_set_error_handler_off();
  if (argc < 2)
    return vs_usage(errs, "%s", "missing command");
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0)
    return cmd_help(argc, argv, out, errs);
  if (strcmp(argv[1], "keys") == 0) {
    if (argc > 2 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
      fputs(keys_help, out);
      return VS_EXIT_OK;
    }
    if (argc > 2)
      return vs_usage(errs, "keys takes no arguments, got '%s'", argv[2]);
    vs_report_keys(out);
    return VS_EXIT_OK;
  }
  if (strcmp(argv[1], "--version") == 0) {
    if (argc > 2)
      return vs_usage(errs, "--version takes no arguments, got '%s'", argv[2]);
    fprintf(out, "vsim %s\n", VSIM_VERSION);
    return VS_EXIT_OK;
  }
  if (!(cmd = command_named(argv[1])))
    return vs_usage(errs, "unknown command '%s'", argv[1]);
  if ((rc = parse_args(argc, argv, cmd->bit, &a, errs)) != 0)
    return rc;
  if (a.help) {
    fputs(cmd->help, out);
    return VS_EXIT_OK;
  }
  if (!a.workload)
    return vs_usage(errs, "%s needs a WORKLOAD.ini", a.command);
  return cmd->run(&a, out, errs);
}

/* The report is the product: a report that could not be written (a full
 * disk, /dev/full, a reader that went away) is an error, never exit 0. */
static int check_report_written(FILE *out, FILE *errs, int code)
{
  const char *why = vs_stream_write_error(out);
  if (!why)
    return code;
  fprintf(errs, "vsim: writing the report to standard output failed: %s\n",
          why);
  return VS_EXIT_ERROR;
}

int vs_cli_main(int argc, char **argv, FILE *out, FILE *errs)
{
  return check_report_written(out, errs, dispatch(argc, argv, out, errs));
}
