/* config.h - table-driven INI loading shared by workload.ini and topology.ini.
 *
 * A vs_keytab describes every key a file may hold: its section, name, type,
 * where its value lives in the target struct, and its bounds. Loading a file
 * (parsed by inih) or applying `--set section.key=value` stores each value
 * through that table and records in a vs_origins where it came from, so any
 * later validation message can name the file, line, key and value.
 * Invariant: a key's origin is marked set exactly when its value was stored
 * from input; unset keys keep whatever default the caller put there. */
#ifndef VS_CONFIG_H
#define VS_CONFIG_H

#include "error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum vs_key_type {
  VS_KEY_COUNT,   /* uint64_t, "7.5e9" accepted */
  VS_KEY_SIZE,    /* uint64_t bytes, "80GiB" */
  VS_KEY_REAL,    /* double */
  VS_KEY_RATE,    /* double bytes/s, "3.35TB/s" (bare = GB/s) */
  VS_KEY_LATENCY, /* double seconds, "5us" (bare = us) */
  VS_KEY_BOOL,    /* bool */
  VS_KEY_ENUM,    /* int index into choices */
  VS_KEY_NAME,    /* char[VS_NAME_MAX] without blanks */
  VS_KEY_LIST,    /* vs_count_list: comma-separated counts */
  VS_KEY_RATES,   /* vs_real_list: comma-separated rates, as VS_KEY_RATE */
  VS_KEY_LATENCIES, /* vs_real_list: comma-separated latencies */
  VS_KEY_FLAGS,   /* uint32_t bit set: comma-separated names of choices
                     (bit i: choices[i]), each at most once */
  VS_KEY_PATH,    /* char[VS_PATH_MAX]: a file path as written */
  VS_KEY_MARGIN,  /* vs_margin: a size ("4GiB") or a share of a capacity
                     ("10%") */
  VS_KEY_REALS    /* vs_real_list: comma-separated reals */
} vs_key_type;

#define VS_NAME_MAX 64
#define VS_PATH_MAX 512
#define VS_LIST_MAX 256
#define VS_REAL_LIST_MAX 32
#define VS_CONF_MAX_KEYS 160

typedef struct vs_count_list {
  uint64_t values[VS_LIST_MAX]; /* the counts in order */
  size_t n;                     /* how many */
} vs_count_list;

typedef struct vs_real_list {
  double values[VS_REAL_LIST_MAX]; /* base units (bytes/s, seconds) */
  size_t n;                        /* how many */
} vs_real_list;

/* Memory to keep free: `bytes`, or when percent > 0 that percentage of
 * the capacity it is kept from (never both). */
typedef struct vs_margin {
  uint64_t bytes;
  double percent;               /* in [0, 100) */
} vs_margin;

/* The bytes m keeps free of capacity (a percentage rounds up). */
uint64_t vs_margin_bytes(const vs_margin *m, uint64_t capacity);

typedef struct vs_key {
  const char *section;         /* "model" */
  const char *name;            /* "hidden" */
  vs_key_type type;            /* how the text is parsed and stored */
  size_t offset;               /* offsetof the value in the target struct */
  const char *const *choices;  /* VS_KEY_ENUM, VS_KEY_FLAGS: NULL-terminated
                                  names (at most 32 for flags) */
  double lo;                   /* smallest valid number (inclusive) */
  double hi;                   /* largest valid number (inclusive); 0 = none */
  bool positive;               /* numbers must be > 0 */
  bool required;               /* a file must set it */
  const char *default_doc;     /* default, as documented in README.md */
  bool follows_gpus;           /* its default follows the GPU count (dp,
                                  and global_batch from it): `vsim show`
                                  leaves it unset when it is, so that its
                                  output loads back with any --gpus */
} vs_key;

typedef struct vs_keytab {
  const vs_key *keys;          /* the table */
  size_t n_keys;               /* its length (<= VS_CONF_MAX_KEYS) */
  const char *kind;            /* "workload" or "topology", for messages */
  const char *derived_from;    /* the key whose file vs_conf_set_derived
                                  values come from ("[model] hf_config"),
                                  or NULL */
  const char *preset_from;     /* the key whose preset vs_conf_set_preset
                                  values come from ("[training]
                                  framework"), or NULL */
} vs_keytab;

typedef struct vs_origin {
  bool set;                    /* a value was stored from input */
  int line;                    /* 1-based line in origins->file; 0 for --set;
                                  -1 from the table's derived_from file;
                                  -2 from the table's preset_from preset */
  char text[96];               /* the value as written (trimmed; one too
                                  long cut, ending in "...") */
  const char *why;             /* line -2: why the preset chose it;
                                  line -1: the derived file's field that
                                  gave it (static strings), else NULL */
  bool follows_gpus;           /* line -2: the preset's value follows the
                                  GPU count, as the key's default does
                                  where vs_key follows_gpus is set */
} vs_origin;

typedef struct vs_origins {
  char file[512];              /* path of the loaded file (or built-in name) */
  vs_origin keys[VS_CONF_MAX_KEYS]; /* parallel to the keytab */
} vs_origins;

/* Appends sep and the n bytes of item to out[len], *used of it so far
 * (out holds a string); false, out as it was, when they do not fit. */
bool vs_conf_append_item(char *out, size_t len, size_t *used, const char *sep,
                         const char *item, size_t n);

/* Loads path into target. Fails with VS_EIO if the file cannot be read and
 * VS_EINPUT on a malformed line, unknown section or key, bad value or a key
 * set twice; the message names file:line and the key. On failure target may
 * hold some of the file's values (callers discard it). err's earlier
 * contents do not matter: it is cleared first. */
int vs_conf_load_file(const vs_keytab *tab, void *target, vs_origins *orig,
                      const char *path, vs_error *err);

/* Same as vs_conf_load_file for text held in memory, reported as `name`. */
int vs_conf_load_string(const vs_keytab *tab, void *target, vs_origins *orig,
                        const char *name, const char *text, vs_error *err);

/* Stores one value as `--set section.key=value` does. On an unknown key or a
 * bad value, fails with VS_EINPUT and leaves target unchanged. */
int vs_conf_set(const vs_keytab *tab, void *target, vs_origins *orig,
                const char *section, const char *name, const char *value,
                vs_error *err);

/* Stores one value read from `field` (a static string, or NULL when no
 * one field gave it) of the file the table's derived_from key names
 * (origin line -1: messages say where it came from). As vs_conf_set. */
int vs_conf_set_derived(const vs_keytab *tab, void *target, vs_origins *orig,
                        const char *section, const char *name,
                        const char *value, const char *field, vs_error *err);

/* Stores one value the table's preset_from key chose, and why (a static
 * string; origin line -2: messages and vsim show say so). As
 * vs_conf_set. */
int vs_conf_set_preset(const vs_keytab *tab, void *target, vs_origins *orig,
                       const char *section, const char *name,
                       const char *value, const char *why, vs_error *err);

/* Marks section.name's preset value, where the preset chose it, as one
 * that follows the GPU count (vs_origin follows_gpus). */
void vs_conf_preset_follows_gpus(const vs_keytab *tab, vs_origins *orig,
                                 const char *section, const char *name);

/* Applies "section.key=value" (what follows --set, less `prefix`, which is
 * "" or "topology." and only used in messages). VS_EUSAGE if the text is
 * not of that form; otherwise as vs_conf_set. */
int vs_conf_assign(const vs_keytab *tab, void *target, vs_origins *orig,
                   const char *assignment, const char *prefix, vs_error *err);

/* Fails with VS_EINPUT naming the first required key that is unset. */
int vs_conf_check_required(const vs_keytab *tab, const vs_origins *orig,
                           vs_error *err);

/* Index of section.name in tab, or -1. */
int vs_conf_find(const vs_keytab *tab, const char *section, const char *name);

/* The first of the n keys `names` of [section] whose value differs
 * between structs a and b of tab (each name must be in tab), or NULL. */
const char *vs_conf_first_different(const vs_keytab *tab, const char *section,
                                    const char *const *names, size_t n,
                                    const void *a, const void *b);

/* True when section.name was set from input (a preset's or a derived
 * file's value included). */
bool vs_conf_is_set(const vs_keytab *tab, const vs_origins *orig,
                    const char *section, const char *name);

/* True when section.name was written by the user: in the file or by
 * --set, not by a preset or a derived file. */
bool vs_conf_set_by_user(const vs_keytab *tab, const vs_origins *orig,
                         const char *section, const char *name);

/* True when section.name was given on the command line (--set). */
bool vs_conf_set_by_option(const vs_keytab *tab, const vs_origins *orig,
                           const char *section, const char *name);

/* Writes where section.name came from into buf: "w.ini:5: [model] heads = 3",
 * "--set model.heads=3", or "w.ini: [model] heads (default)". */
char *vs_conf_where(const vs_keytab *tab, const vs_origins *orig,
                    const char *section, const char *name, char *buf,
                    size_t len);

/* The longest line the reader takes, comments included (inih's line
 * buffer less the line end and its terminator): 198 characters. */
size_t vs_conf_line_max(void);

/* Writes k's value in target (a struct of the table's) to f as an INI value
 * that parses back to the same value: units on rates (GB/s) and latencies
 * (us), lists comma-separated, reals in the fewest digits that read back
 * exactly. */
void vs_conf_print_value(FILE *f, const vs_key *k, const void *target);

/* Writes "a, b or c" listing an enum's choices into buf. */
char *vs_conf_choices(const char *const *choices, char *buf, size_t len);

#endif
