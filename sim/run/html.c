/* html.c - the single-file HTML report (vs_report_write_html, report.h).
 *
 * The page owns nothing past the call: it is written top to bottom through
 * one vs_csv atomic file. Its figures are the terminal summary's (the same
 * vs_report_line text, the same vs_format_bytes values), so that the page
 * and the terminal never disagree; the timeline is reduced to at most
 * HTML_POINTS moments, embedded as JSON, and drawn by html_script.js
 * (inlined from the build: html_assets.h). Every text that comes from the
 * inputs (file names, GPU names) goes through vs_report_xml_text or
 * json_text. */
#include "report.h"

#include "csvout.h"
#include "html_assets.h"
#include "units.h"

#include <stdio.h> /* open_memstream: POSIX 2008, as the build defines */
#include <stdlib.h>
#include <string.h>

enum { HTML_POINTS = 2000 };

/* text as a JSON string inside a <script> element: besides " and \ and
 * control characters, < > & are written as \u escapes, so that no
 * "</script>" or comment opener can end the element early. */
static void json_text(vs_csv *f, const char *text)
{
  vs_csv_printf(f, "\"");
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    if (*p == '"' || *p == '\\')
      vs_csv_printf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == '<' || *p == '>' || *p == '&')
      vs_csv_printf(f, "\\u%04x", *p);
    else
      vs_csv_printf(f, "%c", *p);
  }
  vs_csv_printf(f, "\"");
}

/* The head: title, inline style, and the error hook that runs before any
 * other script (a script error is shown in #js-error and marks the body). */
static void html_head(vs_csv *f, const vs_sim *sim)
{
  vs_csv_printf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                   "<meta charset=\"utf-8\">\n"
                   "<meta name=\"viewport\" content=\"width=device-width, "
                   "initial-scale=1\">\n"
                   "<link rel=\"icon\" href=\"data:,\">\n<title>vsim: ");
  vs_report_xml_text(f, sim->wl->origins.file);
  vs_csv_printf(f, " on %llu x ", (unsigned long long)sim->layout.gpus);
  vs_report_xml_text(f, sim->topo->name);
  vs_csv_printf(f, "</title>\n<style>\n%s</style>\n<script>\n"
                   "window.onerror = function (msg, src, line) {\n"
                   "  var e = document.getElementById('js-error');\n"
                   "  document.documentElement.setAttribute('data-js-error', "
                   "'1');\n"
                   "  if (e) { e.hidden = false; e.textContent = 'script error: "
                   "' + msg + ' (line ' + line + ')'; }\n"
                   "};\n</script>\n</head>\n<body>\n",
                html_style);
}

/* text's lines through vs_report_xml_text (which would replace a line
 * end, a control character), each but the last ended by `sep`. */
static void xml_lines(vs_csv *f, char *text, const char *sep)
{
  size_t n = strlen(text);
  char *end;
  if (n > 0 && text[n - 1] == '\n')
    text[n - 1] = '\0';
  for (char *line = text; line; line = end ? end + 1 : NULL) {
    if ((end = strchr(line, '\n')))
      *end = '\0';
    vs_report_xml_text(f, line);
    if (end)
      vs_csv_printf(f, "%s", sep);
  }
}

/* What the terminal prints for r (its out-of-memory line), for the
 * nodes (their host and NVMe table and out-of-memory lines) or, with
 * neither, the summary's header. */
typedef enum terminal_part {
  TERM_HEADER,
  TERM_RANK_OOM,
  TERM_NODE_TABLE,
  TERM_NODE_OOM,
  TERM_NOTES
} terminal_part;

static void print_part(FILE *mem, const vs_sim *sim, const vs_rank *r,
                       terminal_part part)
{
  switch (part) {
  case TERM_RANK_OOM:
    vs_report_oom_line(mem, sim, r);
    break;
  case TERM_NODE_TABLE:
    vs_report_node_table(mem, sim);
    break;
  case TERM_NODE_OOM:
    vs_report_node_oom_lines(mem, sim);
    break;
  case TERM_NOTES:
    vs_report_notes(mem, sim);
    break;
  default:
    vs_report_header(mem, sim);
    break;
  }
}

/* The terminal's text of `part` (r for TERM_RANK_OOM), HTML-escaped
 * between open and close; nothing where the terminal prints nothing. */
static int html_terminal_text(vs_csv *f, const vs_sim *sim, const vs_rank *r,
                              terminal_part part, const char *open,
                              const char *close, vs_error *err)
{
  char *text = NULL, *start;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem)
    return vs_error_set(err, VS_ENOMEM, "out of host memory for the page");
  print_part(mem, sim, r, part);
  if (fclose(mem) != 0 || !text) {
    free(text);
    return vs_error_set(err, VS_ENOMEM, "out of host memory for the page");
  }
  for (start = text; *start == '\n'; start++) /* the terminal's spacing */
    ;
  if (*start) {
    vs_csv_printf(f, "%s", open);
    /* outside a <pre> a line end is a space: a line break for each */
    xml_lines(f, start, strncmp(open, "<pre", 4) == 0 ? "\n" : "<br>\n");
    vs_csv_printf(f, "%s", close);
  }
  free(text);
  return 0;
}

/* Line `kind` of the summary as a paragraph of that id, where the
 * summary has it (not empty). */
static void html_line(vs_csv *f, const vs_sim *sim, vs_report_line_kind kind,
                      const char *id)
{
  char line[512];
  if (!vs_report_line(sim, kind, line, sizeof line)[0])
    return;
  vs_csv_printf(f, "<p id=\"%s\">", id);
  vs_report_xml_text(f, line);
  vs_csv_printf(f, "</p>\n");
}

/* Title, terminal header, verdict, peak, the largest tensors held there,
 * paged optimizer states and out-of-memory lines. */
static int html_top(vs_csv *f, const vs_sim *sim, vs_error *err)
{
  char line[512];
  int rc;
  vs_csv_printf(f, "<h1>vsim: memory of one training step</h1>\n");
  if ((rc = html_terminal_text(f, sim, NULL, TERM_HEADER,
                               "<pre class=\"meta\">", "</pre>\n", err)))
    return rc;
  vs_csv_printf(f, "<p id=\"verdict\" class=\"%s\">", !sim->fits ? "oom" : sim->tight ? "tight" : "fits");
  vs_report_xml_text(f, vs_report_line(sim, VS_LINE_VERDICT, line, sizeof line));
  vs_csv_printf(f, "</p>\n<p id=\"peak\">");
  vs_report_xml_text(f, vs_report_line(sim, VS_LINE_PEAK, line, sizeof line));
  vs_csv_printf(f, "</p>\n");
  html_line(f, sim, VS_LINE_HELD, "held");
  html_line(f, sim, VS_LINE_MANAGED, "managed");
  for (size_t i = 0; i < sim->n_ranks; i++)
    if (sim->ranks[i].mem.oom.happened &&
        (rc = html_terminal_text(f, sim, &sim->ranks[i], TERM_RANK_OOM,
                                 "<p class=\"oom\">", "</p>\n", err)))
      return rc;
  /* a node's host memory or NVMe that ran out, as the terminal says */
  return html_terminal_text(f, sim, NULL, TERM_NODE_OOM, "<p class=\"oom\">",
                            "</p>\n", err);
}

/* The chart's frame; html_script.js fills it. */
static void html_chart(vs_csv *f, const vs_rank *r)
{
  vs_csv_printf(f, "<h2>Memory of rank %u (stage %d) over the step</h2>\n"
                   "<div class=\"controls\"><button id=\"reset\" "
                   "type=\"button\">Reset zoom</button> <span id=\"range\">"
                   "</span> <span class=\"hint\">mouse wheel: zoom; drag: "
                   "zoom into a range; double-click: reset; hover: op and "
                   "bytes</span></div>\n"
                   "<div id=\"chart-box\"><canvas id=\"chart\" width=\"960\" "
                   "height=\"420\"></canvas><pre id=\"tip\" hidden></pre>"
                   "</div>\n<div id=\"legend\"></div>\n",
                r->id, r->stage);
}

/* How html_rank_row writes a rank's row. */
typedef struct rank_row_opts {
  bool worst;     /* the worst rank's: marked class="worst" */
  bool cp_column; /* the table has a cp column (the layout's cp > 1) */
} rank_row_opts;

/* One row of the table: the terminal's rank_row figures, the cp index
 * with them where the table has its column. */
static void html_rank_row(vs_csv *f, const vs_rank *r, rank_row_opts opts)
{
  const vs_mem *m = &r->mem;
  char b[16];
  uint64_t head = vs_mem_headroom(m->capacity_bytes, m->peak_used_bytes);
  vs_csv_printf(f, "<tr%s><td>%u</td><td>%d</td><td>%d</td>",
                opts.worst ? " class=\"worst\"" : "", r->id, r->stage,
                r->dp_rank);
  if (opts.cp_column)
    vs_csv_printf(f, "<td>%d</td>", r->cp_rank);
  vs_csv_printf(f, "<td>%d</td>", r->tp_rank);
  for (int c = 0; c < VS_CAT_N; c++)
    vs_csv_printf(f, "<td>%s</td>", vs_format_bytes(m->at_peak[c], b, sizeof b));
  vs_csv_printf(f, "<td>%s</td>",
                vs_format_bytes(vs_mem_fragmentation(m), b, sizeof b));
  vs_csv_printf(f, "<td>%s</td>", vs_format_bytes(m->peak_used_bytes, b, sizeof b));
  vs_csv_printf(f, "<td>%s</td>", vs_format_bytes(m->capacity_bytes, b, sizeof b));
  vs_csv_printf(f, "<td>%s</td><td>%s</td></tr>\n",
                vs_format_bytes(head, b, sizeof b),
                vs_rank_fits(r) ? "yes" : "NO");
}

static void html_ranks(vs_csv *f, const vs_sim *sim)
{
  const vs_rank *worst = vs_sim_worst_rank(sim);
  bool cp = sim->layout.cp > 1;
  vs_csv_printf(f, "<h2>Memory at each rank's peak</h2>\n<p>allocated by "
                   "category; peak = reserved + framework</p>\n"
                   "<table id=\"ranks\">\n<tr><th>rank</th><th>stage</th>"
                   "<th>dp</th>%s<th>tp</th>",
                cp ? "<th>cp</th>" : "");
  for (int c = 0; c < VS_CAT_N; c++)
    vs_csv_printf(f, "<th>%s</th>", vs_category_name(c));
  vs_csv_printf(f, "<th>frag</th><th>peak</th><th>capacity</th>"
                   "<th>headroom</th><th>fits</th></tr>\n");
  for (size_t i = 0; i < sim->n_ranks; i++)
    html_rank_row(
        f, &sim->ranks[i],
        (rank_row_opts){.worst = &sim->ranks[i] == worst, .cp_column = cp});
  vs_csv_printf(f, "</table>\n");
}

/* The step time as one bar split into the summary's parts
 * (vs_report_step_parts), and the terminal's step, bound and throughput
 * lines. */
static void html_step(vs_csv *f, const vs_sim *sim)
{
  static const char *const colors[VS_STEP_PARTS_MAX] = {
      "#4e79a7", "#f28e2b", "#bab0ac", "#e15759", "#76b7b2",
      "#59a14f", "#edc948", "#b07aa1", "#ff9da7"};
  vs_step_part parts[VS_STEP_PARTS_MAX];
  size_t n = vs_report_step_parts(sim, parts);
  double sum = 0;
  char line[512], s[16];
  for (size_t i = 0; i < n; i++)
    sum += parts[i].seconds;
  vs_csv_printf(f, "<h2>Step time</h2>\n<div id=\"split\">");
  for (size_t i = 0; i < n; i++)
    if (sum > 0 && parts[i].seconds > 0)
      vs_csv_printf(f, "<div style=\"width:%.3f%%;background:%s\" "
                       "title=\"%s %s\"></div>",
                    100.0 * parts[i].seconds / sum, colors[i], parts[i].name,
                    vs_format_seconds(parts[i].seconds, s, sizeof s));
  vs_csv_printf(f, "</div>\n<ul class=\"keys\">");
  for (size_t i = 0; i < n; i++)
    vs_csv_printf(f, "<li><span class=\"swatch\" style=\"background:%s\">"
                     "</span>%s %s (%.1f%%)</li>",
                  colors[i], parts[i].name,
                  vs_format_seconds(parts[i].seconds, s, sizeof s),
                  sum > 0 ? 100.0 * parts[i].seconds / sum : 0.0);
  vs_csv_printf(f, "</ul>\n<p id=\"step\">");
  vs_report_xml_text(f, vs_report_line(sim, VS_LINE_STEP, line, sizeof line));
  vs_csv_printf(f, "</p>\n<p id=\"bound\">");
  vs_report_xml_text(f, vs_report_line(sim, VS_LINE_BOUND, line, sizeof line));
  vs_csv_printf(f, "</p>\n<p id=\"throughput\">");
  vs_report_xml_text(f, vs_report_line(sim, VS_LINE_THROUGHPUT, line, sizeof line));
  vs_csv_printf(f, "</p>\n");
}

/* The chart's figures as JSON: categories bottom first, then the points
 * [t_s, bytes per category in that order, reserved + framework, label]. */
static void html_data_head(vs_csv *f, const vs_sim *sim, const vs_rank *r)
{
  char line[512];
  vs_csv_printf(f, "<script type=\"application/json\" id=\"vsim-data\">\n"
                   "{\"categories\":[");
  for (int k = 0; k < VS_CAT_N; k++)
    vs_csv_printf(f, "%s\"%s\"", k ? "," : "",
                  vs_category_name(vs_report_stack_order(k)));
  vs_csv_printf(f, "],\n\"colors\":[");
  for (int k = 0; k < VS_CAT_N; k++)
    vs_csv_printf(f, "%s\"%s\"", k ? "," : "",
                  vs_report_category_color(vs_report_stack_order(k)));
  vs_csv_printf(f, "],\n\"step\":%.9f,\"capacity\":%llu,\"peak_bytes\":%llu,"
                   "\"peak_t\":%.9f,\"oom_t\":",
                (double)vs_sim_slowest_rank(sim)->end_ns * 1e-9, /* the job's */
                (unsigned long long)r->mem.capacity_bytes,
                (unsigned long long)r->mem.peak_used_bytes,
                (double)r->mem.peak_t_ns * 1e-9);
  if (r->mem.oom.happened)
    vs_csv_printf(f, "%.9f", (double)r->mem.oom.t_ns * 1e-9);
  else
    vs_csv_printf(f, "null");
  vs_csv_printf(f, ",\n\"peak_label\":");
  json_text(f, vs_report_line(sim, VS_LINE_PEAK, line, sizeof line));
}

static void html_data(vs_csv *f, const vs_sim *sim, const vs_rank *r,
                      const vs_report_moment *pts)
{
  char label[160];
  bool first = true;
  html_data_head(f, sim, r);
  vs_csv_printf(f, ",\n\"points\":[\n");
  for (size_t x = 0; x < HTML_POINTS; x++) {
    if (!pts[x].set)
      continue;
    vs_csv_printf(f, "%s[%.9f", first ? "" : ",\n", (double)pts[x].t_ns * 1e-9);
    for (int k = 0; k < VS_CAT_N; k++)
      vs_csv_printf(f, ",%llu", (unsigned long long)
                                    pts[x].by_cat[vs_report_stack_order(k)]);
    vs_csv_printf(f, ",%llu,", (unsigned long long)pts[x].used);
    json_text(f, vs_report_op_label(sim, r->prog, pts[x].op, label,
                                    sizeof label));
    vs_csv_printf(f, "]");
    first = false;
  }
  vs_csv_printf(f, "\n]}\n</script>\n");
}

int vs_report_write_html(const vs_sim *sim, const char *path,
                         vs_report_files *out, vs_error *err)
{
  const vs_rank *r = vs_sim_worst_rank(sim);
  vs_report_moment *pts = calloc(HTML_POINTS, sizeof *pts);
  vs_csv *f; /* its atomic file and its write errors; on an error the
                caller drops out's files, this one among them */
  int rc;

  if (!pts)
    return vs_error_set(err, VS_ENOMEM, "out of host memory for the page");
  if (!(f = vs_report_files_open(out, path, err))) {
    free(pts);
    return err->code;
  }
  vs_report_moments(r, HTML_POINTS, pts);
  html_head(f, sim);
  if ((rc = html_top(f, sim, err))) {
    free(pts);
    return rc;
  }
  html_chart(f, r);
  html_ranks(f, sim);
  /* host memory and NVMe of the nodes offload uses, the terminal's table */
  if ((rc = html_terminal_text(f, sim, NULL, TERM_NODE_TABLE,
                               "<pre id=\"nodes\">", "</pre>\n", err))) {
    free(pts);
    return rc;
  }
  html_step(f, sim);
  /* the terminal's notes: what the figures above rest on */
  if ((rc = html_terminal_text(f, sim, NULL, TERM_NOTES, "<p id=\"notes\">",
                               "</p>\n", err))) {
    free(pts);
    return rc;
  }
  vs_csv_printf(f, "<p id=\"render-status\">the chart needs "
                   "JavaScript</p>\n<p id=\"js-error\" hidden></p>\n");
  html_data(f, sim, r, pts);
  vs_csv_printf(f, "<script>\n%s</script>\n</body>\n</html>\n", html_script);
  free(pts);
  return 0;
}
