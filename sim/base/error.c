/* error.c - the error-code table and message formatting (see error.h). */
#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vs_error_clear(vs_error *err)
{
  if (!err)
    return;
  err->code = VS_OK;
  err->msg[0] = '\0';
}

/* Bytes of a message too long for vs_error kept from its start; the rest
 * of the room goes to its end, where the reason is. */
#define KEPT_HEAD (VS_ERROR_MSG_MAX / 4)
#define ELISION " ... "

/* Moves p back to the first byte of the UTF-8 character it is in. */
static size_t char_start(const char *s, size_t p)
{
  while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80)
    p--;
  return p;
}

/* Writes into out (VS_ERROR_MSG_MAX bytes) the start and the end of the
 * n-byte message s, joined by ELISION, whole UTF-8 characters each. */
static void elide(char *out, const char *s, size_t n)
{
  size_t head = char_start(s, KEPT_HEAD);
  size_t tail_len = VS_ERROR_MSG_MAX - 1 - head - strlen(ELISION);
  size_t tail = n - tail_len;
  while (tail < n && ((unsigned char)s[tail] & 0xC0) == 0x80)
    tail++;
  snprintf(out, VS_ERROR_MSG_MAX, "%.*s" ELISION "%s", (int)head, s,
           s + tail);
}

int vs_error_vset(vs_error *err, int code, const char *fmt, va_list ap)
{
  va_list again;
  int n;
  char *whole;
  if (!err || err->code != VS_OK)
    return code;
  err->code = code;
  va_copy(again, ap);
  n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  /* too long (a path near PATH_MAX in it): keep its start and its end,
   * which says what went wrong, rather than cut the reason off */
  if (n >= (int)sizeof err->msg && (whole = malloc((size_t)n + 1))) {
    vsnprintf(whole, (size_t)n + 1, fmt, again);
    elide(err->msg, whole, (size_t)n);
    free(whole);
  }
  va_end(again);
  return code;
}

int vs_error_set(vs_error *err, int code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vs_error_vset(err, code, fmt, ap);
  va_end(ap);
  return code;
}

const char *vs_error_name(int code)
{
  switch (code) {
#define VS_ERROR_CASE(name, value, text) \
  case value:                            \
    return #name;
    VS_ERROR_TABLE(VS_ERROR_CASE)
#undef VS_ERROR_CASE
  }
  return "VS_E?";
}
