/* resource_kinds.h - the kinds of shared links and devices an op's bytes
 * can move through (the engine's resource.h shares them; a program names
 * them in vs_op_kind.resource). */
#ifndef VS_RESOURCE_KINDS_H
#define VS_RESOURCE_KINDS_H

/* The kinds (enum, name). VS_RES_NONE = 0 is "no resource". */
#define VS_RESOURCE_KINDS(X)                                               \
  X(VS_RES_NONE, "none")                                                   \
  X(VS_RES_PCIE_SWITCH, "pcie_switch")                                     \
  X(VS_RES_PCIE_D2H, "pcie_switch_d2h")                                    \
  X(VS_RES_CPU, "cpu")                                                     \
  X(VS_RES_HOST_MEMORY, "host_memory")                                     \
  X(VS_RES_NVME, "nvme")                                                   \
  X(VS_RES_NIC, "nic")                                                     \
  X(VS_RES_NVLINK, "nvlink")                                               \
  X(VS_RES_COPY_ENGINE, "copy_engine")

typedef enum vs_resource_kind {
#define VS_RES_ENUM(id, name) id,
  VS_RESOURCE_KINDS(VS_RES_ENUM)
#undef VS_RES_ENUM
  VS_RES_N
} vs_resource_kind;

#endif
