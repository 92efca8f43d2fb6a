/* category.h - the memory categories: every simulated GPU byte belongs to
 * exactly one of them (docs/DESIGN.md, "Memory categories"). The model
 * declares which category a tensor is in; the engine's tracker counts them;
 * the reports print them. Fragmentation is not a category: it is reserved
 * minus allocated. */
#ifndef VS_CATEGORY_H
#define VS_CATEGORY_H

typedef enum vs_category {
  VS_CAT_PARAMS,      /* parameters resident on the GPU */
  VS_CAT_GRADS,       /* gradients (resident or awaiting reduction) */
  VS_CAT_OPTIMIZER,   /* optimizer moments and master weights */
  VS_CAT_ACTIVATIONS, /* tensors saved from forward for backward */
  VS_CAT_TEMP,        /* workspaces (cuBLAS's too), buckets, gathered
                         params, loss buffers */
  VS_CAT_FRAMEWORK,   /* outside the allocator: CUDA context, NCCL buffers */
  VS_CAT_N
} vs_category;

/* Where bytes live: each place is a memory of its own, tracked and bounded
 * separately (the GPU's and its managed memory per rank; the host's and the
 * NVMe's per node: the places from VS_PLACE_HOST on). */
typedef enum vs_place {
  VS_PLACE_GPU,       /* device memory, through the caching allocator */
  VS_PLACE_MANAGED,   /* CUDA managed memory on the GPU (paged optimizer
                         states): outside the allocator, its pages move to
                         the host when the GPU runs short */
  VS_PLACE_HOST,      /* host DRAM (offload, staging buffers) */
  VS_PLACE_NVME,      /* NVMe (ZeRO-Infinity) */
  VS_PLACE_N
} vs_place;

/* "gpu", "managed", "host", "nvme" ("?" outside the range). */
const char *vs_place_name(int place);

/* "params", "grads", ... ("?" outside the range). */
const char *vs_category_name(int category);

/* A category's name in place `place`: vs_category_name's, but off the GPU
 * (host memory and NVMe) VS_CAT_TEMP is "buffers", the pinned staging and
 * swap buffers that are all it holds there (host.csv's buffers_bytes). */
const char *vs_place_category_name(int place, int category);

#endif
