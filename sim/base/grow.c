/* grow.c - growable arrays (see grow.h). */
#include "grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool vs_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
  size_t n;
  void *mem;
  if (need <= *cap)
    return true;
  n = *cap ? *cap : 64;
  while (n < need) {
    if (n > SIZE_MAX / 2 / elem)
      return false;
    n *= 2;
  }
  mem = realloc(*arr, n * elem);
  if (!mem)
    return false;
  *arr = mem;
  *cap = n;
  return true;
}

void *vs_dup_array(const void *src, size_t n, size_t elem, bool *ok)
{
  void *d;
  if (n == 0 || !*ok)
    return NULL;
  if (n > SIZE_MAX / elem || !(d = malloc(n * elem))) {
    *ok = false;
    return NULL;
  }
  memcpy(d, src, n * elem);
  return d;
}
