/* category.c - names of the memory categories (see category.h). */
#include "category.h"

static const char *const category_names[VS_CAT_N] = {
    "params", "grads", "optimizer", "activations", "temp", "framework"};

const char *vs_category_name(int category)
{
  return category >= 0 && category < VS_CAT_N ? category_names[category] : "?";
}
