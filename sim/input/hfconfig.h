/* hfconfig.h - a Hugging Face config.json read into workload keys.
 *
 * vs_hf_config_read maps the shape a model's config.json publishes (layers,
 * widths, heads, vocabulary, tied embeddings, dropout) to [model] keys of
 * workload.ini, as text to store through the key table, with what each
 * model_type's layers have beyond it (biases, head norms, head width,
 * positions, token types, a shared-expert gate). It knows the families
 * whose layers vsim builds: llama, mistral, phi3, qwen2, qwen3 and gemma
 * (arch = llama: RMSNorm, gated MLP, rotary), the mixtures of experts
 * mixtral, qwen2_moe, qwen3_moe, deepseek_v2 and deepseek_v3 (arch = llama
 * with [model] experts; DeepSeek's with multi-head latent attention),
 * gpt2 and gpt_neox (arch = gpt), bert. Anything else, and a config whose
 * layers vsim would build wrong (experts in another family, Qwen-MoE's
 * mlp_only_layers), is refused, naming the field. A field the file lacks
 * gets its transformers config class's default for the model_type, or
 * is refused where vsim does not know that default for certain; never
 * another value. Pure but for reading
 * the file (jansson). */
#ifndef VS_HFCONFIG_H
#define VS_HFCONFIG_H

#include "error.h"

#include <stddef.h>

#define VS_HF_MAX_KEYS 32

/* One [model] key and the value its config.json gives it. */
typedef struct vs_hf_key {
  const char *name;          /* "hidden" (static storage) */
  const char *field;         /* the config's field that gave it
                                ("hidden_size", static storage); NULL
                                when none did (the family's default) */
  const char *lacked;        /* the field the file lacks whose
                                transformers default gave the value
                                ("num_key_value_heads"), or NULL */
  const char *source;        /* that default's config class
                                ("MixtralConfig"), or NULL */
  char value[32];            /* "4096"; "" where `lacked` has no default
                                vsim knows (the workload must set the
                                key itself) */
} vs_hf_key;

typedef struct vs_hf_model {
  char model_type[64];       /* as the config names it */
  vs_hf_key keys[VS_HF_MAX_KEYS];
  size_t n;
} vs_hf_model;

/* Why a field a file lacks is refused when its config class's default
 * changed between transformers releases (a format taking the field, the
 * model_type and the class): vs_hf_config_read gives its key an empty
 * value, and vs_workload_apply_hf_config refuses it where the workload
 * sets no value of its own. */
#define VS_HF_UNKNOWN_DEFAULT                                                  \
  "lacks \"%s\", whose default for model_type %s (transformers' %s) has "      \
  "changed between transformers releases and is not vsim's to guess; add "     \
  "the field"

/* The model types it reads, for messages: "llama, mistral, ...". */
const char *vs_hf_known_types(void);

/* Reads path into out. VS_EIO when the file cannot be read, VS_EINPUT for
 * bad JSON (with its line and column), an unknown model_type, a missing
 * or mistyped field, or a shape vsim does not build (each message names
 * path and the field). */
int vs_hf_config_read(const char *path, vs_hf_model *out, vs_error *err);

#endif
