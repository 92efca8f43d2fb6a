/* grow.h - the one growable-array helper every module uses: arrays that
 * double their capacity, so appending is amortised O(1). */
#ifndef VS_GROW_H
#define VS_GROW_H

#include <stdbool.h>
#include <stddef.h>

/* Makes *arr (of *cap elements of elem bytes) hold at least need elements,
 * doubling from 64. On allocation failure returns false and leaves *arr
 * and *cap unchanged. */
bool vs_grow(void **arr, size_t *cap, size_t need, size_t elem);

/* A new array holding the n elements of elem bytes at src (NULL when n is
 * 0). On allocation failure returns NULL and sets *ok to false; does
 * nothing once *ok is false (so a series of copies checks once). */
void *vs_dup_array(const void *src, size_t n, size_t elem, bool *ok);

#endif
