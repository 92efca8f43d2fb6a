/* error.h - vsim's error codes and the formatted error message.
 *
 * Every fallible vsim function returns 0 or a negative VS_E* code and, on
 * failure, fills a vs_error with one message meant for the user: it names the
 * file, line, key and value involved and what would have been valid. The CLI
 * prints that message once. One X-macro table gives every code its name. */
#ifndef VS_ERROR_H
#define VS_ERROR_H

#include <stdarg.h>

/* name, value, short description */
#define VS_ERROR_TABLE(X)                                   \
  X(VS_OK, 0, "ok")                                         \
  X(VS_EINPUT, -1, "bad input")                             \
  X(VS_EUSAGE, -2, "bad usage")                             \
  X(VS_EIO, -3, "input/output error")                       \
  X(VS_ENOMEM, -4, "out of host memory")                    \
  X(VS_ELIMIT, -5, "simulation too large")

enum {
#define VS_ERROR_ENUM(name, value, text) name = value,
  VS_ERROR_TABLE(VS_ERROR_ENUM)
#undef VS_ERROR_ENUM
};

#define VS_ERROR_MSG_MAX 1024

typedef struct vs_error {
  int code;                       /* VS_OK or a negative VS_E* code */
  char msg[VS_ERROR_MSG_MAX];     /* user-facing message, "" when code == VS_OK */
} vs_error;

/* Resets err to VS_OK with an empty message. */
void vs_error_clear(vs_error *err);

/* Records code and a printf-style message in err (if err is not NULL) and
 * returns code, so callers can write `return vs_error_set(err, ...)`. The first
 * error wins: a second call on an error already set keeps the first message. */
int vs_error_set(vs_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int vs_error_vset(vs_error *err, int code, const char *fmt, va_list ap);

/* The table's name for code ("VS_EINPUT"), or "VS_E?" when unknown. */
const char *vs_error_name(int code);

#endif
