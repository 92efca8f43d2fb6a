/* category.c - names of the memory categories (see category.h). */
#include "category.h"

static const char *const category_names[VS_CAT_N] = {
    "params", "grads", "optimizer", "activations", "temp", "framework"};

const char *vs_category_name(int category)
{
  return category >= 0 && category < VS_CAT_N ? category_names[category] : "?";
}

const char *vs_place_name(int place)
{
  static const char *const names[VS_PLACE_N] = {"gpu", "managed", "host",
                                                "nvme"};
  return place >= 0 && place < VS_PLACE_N ? names[place] : "?";
}

const char *vs_place_category_name(int place, int category)
{
  if (place >= VS_PLACE_HOST && place < VS_PLACE_N && category == VS_CAT_TEMP)
    return "buffers";
  return vs_category_name(category);
}
