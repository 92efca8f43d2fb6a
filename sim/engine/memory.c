/* memory.c - per-GPU memory tracker (see memory.h). */
#include "memory.h"

#include "units.h"

#include <string.h>

void vs_mem_init(vs_mem *m, uint64_t capacity_bytes, uint64_t framework_bytes)
{
  memset(m, 0, sizeof *m);
  m->capacity_bytes = capacity_bytes;
  m->by_cat[VS_CAT_FRAMEWORK] = framework_bytes;
  m->at_peak[VS_CAT_FRAMEWORK] = framework_bytes;
  m->peak_used_bytes = framework_bytes;
}

uint64_t vs_mem_used(const vs_mem *m)
{
  return m->reserved_bytes + m->by_cat[VS_CAT_FRAMEWORK];
}

uint64_t vs_mem_headroom(uint64_t capacity, uint64_t peak)
{
  return capacity > peak ? capacity - peak : 0;
}

uint64_t vs_mem_fragmentation(const vs_mem *m)
{
  return m->peak_reserved_bytes - m->peak_allocated_bytes;
}

int vs_mem_record_alloc(vs_mem *m, int category, uint64_t bytes,
                        uint64_t requested_bytes, uint64_t reserved_bytes,
                        bool failed, uint32_t op, uint64_t t_ns)
{
  uint64_t cat, allocated;
  if (category < 0 || category >= VS_CAT_FRAMEWORK || requested_bytes > bytes)
    return VS_EINPUT;
  if (!vs_add_bytes(m->by_cat[category], bytes, &cat) ||
      !vs_add_bytes(m->allocated_bytes, bytes, &allocated))
    return VS_ELIMIT;
  if (failed && !m->oom.happened) {
    m->oom.happened = true;
    m->oom.op = op;
    m->oom.t_ns = t_ns;
    m->oom.requested_bytes = requested_bytes;
    m->oom.in_use_bytes = vs_mem_used(m);
    m->oom.allocated_bytes = m->allocated_bytes;
    m->oom.reserved_bytes = m->reserved_bytes;
    m->oom.category = category;
  }
  m->by_cat[category] = cat;
  m->asked_by_cat[category] += requested_bytes; /* <= by_cat */
  m->allocated_bytes = allocated;
  m->reserved_bytes = reserved_bytes;
  if (allocated > m->peak_allocated_bytes) {
    m->peak_allocated_bytes = allocated;
    memcpy(m->at_peak, m->by_cat, sizeof m->at_peak);
    m->reserved_at_peak_bytes = m->reserved_bytes;
    m->peak_t_ns = t_ns;
    m->peak_op = op;
  }
  if (m->reserved_bytes > m->peak_reserved_bytes)
    m->peak_reserved_bytes = m->reserved_bytes;
  if (vs_mem_used(m) > m->peak_used_bytes)
    m->peak_used_bytes = vs_mem_used(m);
  return 0;
}

int vs_mem_record_free(vs_mem *m, int category, uint64_t bytes,
                       uint64_t requested_bytes, uint64_t reserved_bytes)
{
  if (category < 0 || category >= VS_CAT_FRAMEWORK ||
      m->by_cat[category] < bytes ||
      m->asked_by_cat[category] < requested_bytes)
    return VS_EINPUT;
  m->by_cat[category] -= bytes;
  m->asked_by_cat[category] -= requested_bytes;
  m->allocated_bytes -= bytes;
  m->reserved_bytes = reserved_bytes;
  return 0;
}

/* The exact allocator: reserved is always what is allocated, and a request
 * fails when the device cannot hold it. */
int vs_mem_alloc(vs_mem *m, int category, uint64_t bytes, uint32_t op,
                 uint64_t t_ns)
{
  uint64_t allocated, used;
  if (!vs_add_bytes(m->allocated_bytes, bytes, &allocated) ||
      !vs_add_bytes(m->by_cat[VS_CAT_FRAMEWORK], allocated, &used))
    return VS_ELIMIT;
  return vs_mem_record_alloc(m, category, bytes, bytes, allocated,
                             used > m->capacity_bytes, op, t_ns);
}

int vs_mem_free(vs_mem *m, int category, uint64_t bytes)
{
  if (category < 0 || category >= VS_CAT_FRAMEWORK ||
      m->by_cat[category] < bytes)
    return VS_EINPUT;
  return vs_mem_record_free(m, category, bytes, bytes,
                            m->allocated_bytes - bytes);
}

int vs_mem_check(const vs_mem *m, vs_error *err)
{
  uint64_t sum = 0;
  for (int c = 0; c < VS_CAT_FRAMEWORK; c++)
    sum += m->by_cat[c];
  if (sum != m->allocated_bytes)
    return vs_error_set(err, VS_EINPUT,
                        "memory invariant: categories sum to %llu, allocated %llu",
                        (unsigned long long)sum,
                        (unsigned long long)m->allocated_bytes);
  if (m->reserved_bytes < m->allocated_bytes)
    return vs_error_set(err, VS_EINPUT,
                        "memory invariant: reserved %llu < allocated %llu",
                        (unsigned long long)m->reserved_bytes,
                        (unsigned long long)m->allocated_bytes);
  if (m->peak_allocated_bytes < m->allocated_bytes ||
      m->peak_reserved_bytes < m->reserved_bytes ||
      m->peak_used_bytes < vs_mem_used(m))
    return vs_error_set(err, VS_EINPUT, "memory invariant: a peak is below "
                                        "its current value");
  return 0;
}

bool vs_mem_fits(const vs_mem *m)
{
  return !m->oom.happened && m->peak_used_bytes <= m->capacity_bytes;
}
