/* error.c - the error-code table and message formatting (see error.h). */
#include "error.h"

#include <stdio.h>

void vs_error_clear(vs_error *err)
{
  if (!err)
    return;
  err->code = VS_OK;
  err->msg[0] = '\0';
}

int vs_error_vset(vs_error *err, int code, const char *fmt, va_list ap)
{
  if (!err || err->code != VS_OK)
    return code;
  err->code = code;
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
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
