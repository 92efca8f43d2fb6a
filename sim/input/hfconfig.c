/* hfconfig.c - Hugging Face config.json to [model] keys (see hfconfig.h).
 * Field names are those of transformers' configuration classes
 * (LlamaConfig, MistralConfig, Phi3Config, Qwen2Config, Qwen3Config,
 * GemmaConfig, MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig,
 * DeepseekV3Config, GPT2Config, GPTNeoXConfig, BertConfig). */
#include "hfconfig.h"

#include "config.h"
#include "infile.h"

#include <jansson.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How one family's fields map: the fields of layers, hidden, heads,
 * ffn_hidden and vocab; kv_heads' field (NULL: as heads); the dropout
 * field (NULL: none, 0) and its default where the config lacks it (its
 * transformers config class's: GPT2Config resid_pdrop 0.1, GPTNeoXConfig
 * hidden_dropout 0.0, BertConfig hidden_dropout_prob 0.1); tied
 * embeddings when the config does not say. */
typedef struct family {
  const char *const *types;  /* model_type values, NULL-terminated */
  const char *arch;          /* the [model] arch */
  const char *layers, *hidden, *heads, *ffn, *vocab, *kv_heads, *dropout;
  bool tied_default;         /* tie_word_embeddings' default */
  bool ffn_may_be_null;      /* GPT-2's n_inner: null means 4 x hidden */
  const char *dropout_default; /* the dropout field's default */
} family;

/* The largest count a field may hold: far above any model, and small
 * enough that a sum or a rounding of two stays in 64 bits (no product of
 * two is taken). */
#define MAX_COUNT ((json_int_t)1 << 40)

static const char *const llama_types[] = {
    "llama",     "mistral",     "phi3",        "qwen2",   "qwen3",
    "gemma",     "gemma2",      "gemma3_text", "mixtral", "qwen2_moe",
    "qwen3_moe", "deepseek_v2", "deepseek_v3", NULL};
static const char *const gpt2_types[] = {"gpt2", NULL};
static const char *const neox_types[] = {"gpt_neox", NULL};
static const char *const bert_types[] = {"bert", NULL};

static const family families[] = {
    {llama_types, "llama", "num_hidden_layers", "hidden_size",
     "num_attention_heads", "intermediate_size", "vocab_size",
     "num_key_value_heads", NULL, .tied_default = false,
     .ffn_may_be_null = false},
    {gpt2_types, "gpt", "n_layer", "n_embd", "n_head", "n_inner", "vocab_size",
     NULL, "resid_pdrop", .tied_default = true, .ffn_may_be_null = true,
     .dropout_default = "0.1"},
    {neox_types, "gpt", "num_hidden_layers", "hidden_size",
     "num_attention_heads", "intermediate_size", "vocab_size", NULL,
     "hidden_dropout", .tied_default = false, .ffn_may_be_null = false,
     .dropout_default = "0"},
    {bert_types, "bert", "num_hidden_layers", "hidden_size",
     "num_attention_heads", "intermediate_size", "vocab_size", NULL,
     "hidden_dropout_prob", .tied_default = true, .ffn_may_be_null = false,
     .dropout_default = "0.1"},
};

/* Fields that make layers vsim does not build (mixtures of experts) in a
 * family without the fields below. */
static const char *const expert_fields[] = {"num_local_experts", "num_experts",
                                            "n_routed_experts", NULL};

/* A mixture-of-experts family's fields: experts, top-k, each expert's FFN
 * width (NULL: intermediate_size, Mixtral's), the shared experts' width
 * and count (NULL count: one when the width is there), the sparse step
 * (Qwen2-MoE's layer i is sparse when (i + 1) % decoder_sparse_step == 0,
 * that is dense_layers = step - 1, moe_every = step) or the dense layers
 * first and the MoE frequency after them (DeepSeek's
 * first_k_dense_replace, moe_layer_freq); NULL: none. */
typedef struct moe_family {
  const char *type;
  const char *experts, *topk, *expert_ffn, *shared_ffn, *shared_count;
  const char *sparse_step, *first_dense, *layer_freq;
} moe_family;

static const moe_family moe_families[] = {
    {"mixtral", "num_local_experts", "num_experts_per_tok", NULL, NULL, NULL,
     NULL, NULL, NULL},
    {"qwen3_moe", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
     NULL, NULL, "decoder_sparse_step", NULL, NULL},
    {"qwen2_moe", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
     "shared_expert_intermediate_size", NULL, "decoder_sparse_step", NULL,
     NULL},
    {"deepseek_v2", "n_routed_experts", "num_experts_per_tok",
     "moe_intermediate_size", "moe_intermediate_size", "n_shared_experts", NULL,
     "first_k_dense_replace", "moe_layer_freq"},
    {"deepseek_v3", "n_routed_experts", "num_experts_per_tok",
     "moe_intermediate_size", "moe_intermediate_size", "n_shared_experts", NULL,
     "first_k_dense_replace", "moe_layer_freq"},
};

/* What a model_type's layers have beyond the family's counts: the
 * attention's biases (a boolean field: all of them or none, its default
 * when absent; or a fixed choice), the MLP's (a boolean field), norms on
 * the query and key heads, the positions (rotary, or a learned table of
 * a field's rows) and BERT's token types; transformers' modeling files
 * (Qwen2Attention's q/k/v_proj bias=True and o_proj bias=False,
 * Qwen3Attention's q_norm and k_norm over head_dim, GPTNeoXConfig's
 * attention_bias default True and rotary embeddings, GPT-2's n_positions
 * and BERT's max_position_embeddings tables, Qwen2MoeSparseMoeBlock's
 * shared_expert_gate: Linear(hidden, 1, bias=False)). A type absent here
 * has the workload's defaults for its arch. */
typedef struct type_traits {
  const char *type;
  const char *attention_bias; /* boolean field, or NULL */
  const char *bias_default;   /* the field absent (or no field): "all",
                                 "qkv", "none"; NULL: no key */
  const char *mlp_bias;       /* boolean field, or NULL */
  bool qk_norm;
  bool rotary;                  /* a gpt arch with rotary embeddings */
  const char *max_positions;    /* the learned table's rows, or NULL */
  json_int_t positions_default; /* its value when absent or null */
  const char *type_vocab;       /* BERT's token types, or NULL (absent or
                                   null: no key, the workload's 2) */
  bool shared_gate;             /* with shared experts */
  bool tied;                    /* tie_word_embeddings' default where the
                                   family's is false (GemmaConfig's and
                                   its successors' True) */
  bool post_norms;              /* Gemma 2 and 3's norms after each
                                   sublayer */
  bool zero_centered_norm;      /* Gemma's RMSNorm: 1 + weight, in fp32 */
  json_int_t head_dim_default;  /* head_dim absent or null (0: hidden /
                                   heads) */
  const char *attn_softcap;     /* soft-capping fields (a number, or null:
                                   none), and their values when absent */
  const char *logit_softcap;
  double softcap_defaults[2];
} type_traits;

/* One model type a row (clang-format would put a designator a line). */
/* clang-format off */
static const type_traits traits[] = {
    {.type = "llama", .attention_bias = "attention_bias",
     .mlp_bias = "mlp_bias"},
    /* Gemma's configs default head_dim to 256; Gemma2Config's
     * soft-capping defaults are 50 and 30, Gemma3TextConfig's None, and
     * Gemma3Attention passes no cap to its attention whatever the config
     * says (modeling_gemma3.py) */
    {.type = "gemma", .attention_bias = "attention_bias", .tied = true,
     .zero_centered_norm = true, .head_dim_default = 256},
    {.type = "gemma2", .attention_bias = "attention_bias", .tied = true,
     .post_norms = true, .zero_centered_norm = true, .head_dim_default = 256,
     .attn_softcap = "attn_logit_softcapping",
     .logit_softcap = "final_logit_softcapping",
     .softcap_defaults = {50.0, 30.0}},
    {.type = "gemma3_text", .attention_bias = "attention_bias", .tied = true,
     .qk_norm = true, .post_norms = true, .zero_centered_norm = true,
     .head_dim_default = 256, .logit_softcap = "final_logit_softcapping"},
    {.type = "qwen2", .bias_default = "qkv"},
    /* Qwen3Config's head_dim defaults to 128, whatever hidden / heads */
    {.type = "qwen3", .attention_bias = "attention_bias", .qk_norm = true,
     .head_dim_default = 128},
    {.type = "qwen2_moe", .bias_default = "qkv", .shared_gate = true},
    {.type = "qwen3_moe", .attention_bias = "attention_bias", .qk_norm = true},
    {.type = "deepseek_v2", .attention_bias = "attention_bias"},
    {.type = "deepseek_v3", .attention_bias = "attention_bias"},
    {.type = "gpt2", .max_positions = "n_positions",
     .positions_default = 1024},
    {.type = "gpt_neox", .attention_bias = "attention_bias",
     .bias_default = "all", .rotary = true},
    {.type = "bert", .max_positions = "max_position_embeddings",
     .positions_default = 512, .type_vocab = "type_vocab_size"},
};
/* clang-format on */

static const type_traits *traits_of(const char *type)
{
  for (size_t i = 0; i < sizeof traits / sizeof traits[0]; i++)
    if (strcmp(traits[i].type, type) == 0)
      return &traits[i];
  return NULL;
}

const char *vs_hf_known_types(void)
{
  return "llama, mistral, phi3, qwen2, qwen3, gemma, gemma2, gemma3_text, "
         "mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, gpt2, "
         "gpt_neox and bert";
}

static bool is_type(const char *const *types, const char *type)
{
  for (size_t i = 0; types[i]; i++)
    if (strcmp(types[i], type) == 0)
      return true;
  return false;
}

static const family *family_of(const char *type)
{
  for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
    if (is_type(families[i].types, type))
      return &families[i];
  return NULL;
}

static void put(vs_hf_model *out, const char *name, const char *field,
                const char *text)
{
  vs_hf_key *k = &out->keys[out->n++];
  k->name = name;
  k->field = field;
  snprintf(k->value, sizeof k->value, "%s", text);
}

static void put_count(vs_hf_model *out, const char *name, const char *field,
                      json_int_t v)
{
  char text[32];
  snprintf(text, sizeof text, "%lld", (long long)v);
  put(out, name, field, text);
}

/* A field a model_type's config class defaults to a value other than
 * vsim's own fallback (kv_heads as heads, no shared experts, no dense
 * layers, a full query projection): what a file lacking it gets, as
 * transformers (its current configuration_<type>.py) builds it, or -1
 * where that default has changed between transformers releases (the
 * workload must then set the key: VS_HF_UNKNOWN_DEFAULT). A type's field
 * absent here gets vsim's fallback, which is its class's default:
 * LlamaConfig's and Phi3Config's num_key_value_heads None (as many as the
 * heads), and DeepSeek's, which multi-head latent attention does not
 * read. */
typedef struct absent_default {
  const char *type, *field;
  json_int_t value;   /* what the file lacking the field gets; -1: the
                         workload must set the key */
  const char *source; /* the config class whose default it is */
} absent_default;

static const absent_default absent_defaults[] = {
    {"mistral", "num_key_value_heads", 8, "MistralConfig"},
    {"qwen2", "num_key_value_heads", 32, "Qwen2Config"},
    {"qwen3", "num_key_value_heads", 32, "Qwen3Config"},
    {"gemma", "num_key_value_heads", 16, "GemmaConfig"},
    /* 16 in the Gemma2Config of transformers 4.42, 4 in today's */
    {"gemma2", "num_key_value_heads", -1, "Gemma2Config"},
    {"gemma3_text", "num_key_value_heads", 4, "Gemma3TextConfig"},
    {"mixtral", "num_key_value_heads", 8, "MixtralConfig"},
    {"qwen2_moe", "num_key_value_heads", 16, "Qwen2MoeConfig"},
    {"qwen2_moe", "shared_expert_intermediate_size", 5632, "Qwen2MoeConfig"},
    {"qwen3_moe", "num_key_value_heads", 4, "Qwen3MoeConfig"},
    {"deepseek_v2", "q_lora_rank", 1536, "DeepseekV2Config"},
    {"deepseek_v2", "first_k_dense_replace", 0, "DeepseekV2Config"},
    /* 2 in DeepseekV2Config, None (no shared experts) in DeepSeek's own
     * configuration_deepseek.py that older releases loaded */
    {"deepseek_v2", "n_shared_experts", -1, "DeepseekV2Config"},
    {"deepseek_v3", "q_lora_rank", 1536, "DeepseekV3Config"},
    {"deepseek_v3", "first_k_dense_replace", 3, "DeepseekV3Config"},
    {"deepseek_v3", "n_shared_experts", 1, "DeepseekV3Config"},
};

static const absent_default *absent_default_of(const char *type,
                                               const char *field)
{
  for (size_t i = 0; i < sizeof absent_defaults / sizeof absent_defaults[0];
       i++)
    if (strcmp(absent_defaults[i].type, type) == 0 &&
        strcmp(absent_defaults[i].field, field) == 0)
      return &absent_defaults[i];
  return NULL;
}

/* Where the file lacks `field` (absent, not null) and the model_type's
 * class defaults it (absent_defaults): that default, whose value is -1
 * where it is not known for certain (put_default then leaves the key for
 * the workload to set); NULL otherwise. */
static const absent_default *class_default(const json_t *root, const char *type,
                                           const char *field)
{
  return json_object_get(root, field) ? NULL : absent_default_of(type, field);
}

/* Key `name` from the default d (class_default) into out; an empty
 * value where that default is not known (d->value -1), which the
 * workload must then set itself (vs_workload_apply_hf_config). */
static void put_default(vs_hf_model *out, const char *name,
                        const absent_default *d)
{
  put_count(out, name, NULL, d->value < 0 ? 0 : d->value);
  if (d->value < 0)
    out->keys[out->n - 1].value[0] = '\0';
  out->keys[out->n - 1].lacked = d->field;
  out->keys[out->n - 1].source = d->source;
}

/* The positive integer `field` into *v (VS_EINPUT naming it otherwise). */
static int count_field(const json_t *root, const char *path, const char *field,
                       const char *key, json_int_t *v, vs_error *err)
{
  const json_t *j = json_object_get(root, field);
  if (!j)
    return vs_error_set(err, VS_EINPUT,
                        "%s: field \"%s\" missing (it gives [model] %s)", path,
                        field, key);
  if (!json_is_integer(j) || json_integer_value(j) <= 0 ||
      json_integer_value(j) > MAX_COUNT)
    return vs_error_set(err, VS_EINPUT,
                        "%s: field \"%s\" must be a positive integer up to "
                        "2^40 (it gives [model] %s)",
                        path, field, key);
  *v = json_integer_value(j);
  return 0;
}

/* The counts every family has, into out. */
static int read_counts(const json_t *root, const char *path, const family *f,
                       vs_hf_model *out, vs_error *err)
{
  json_int_t layers, hidden, heads, vocab, ffn, kv;
  const json_t *jffn = json_object_get(root, f->ffn);
  const absent_default *d = NULL;
  int rc;
  if ((rc = count_field(root, path, f->layers, "layers", &layers, err)) ||
      (rc = count_field(root, path, f->hidden, "hidden", &hidden, err)) ||
      (rc = count_field(root, path, f->heads, "heads", &heads, err)) ||
      (rc = count_field(root, path, f->vocab, "vocab", &vocab, err)))
    return rc;
  put_count(out, "layers", f->layers, layers);
  put_count(out, "hidden", f->hidden, hidden);
  put_count(out, "heads", f->heads, heads);
  put_count(out, "vocab", f->vocab, vocab);
  /* A field absent or null gives no key: the workload's default is
   * transformers' (kv_heads as heads; GPT-2's n_inner 4 x hidden), and
   * follows hidden and heads as the workload finally sets them; but an
   * absent num_key_value_heads whose class defaults it to a count gets
   * that count (absent_defaults). */
  if (!(f->ffn_may_be_null && (!jffn || json_is_null(jffn)))) {
    if ((rc = count_field(root, path, f->ffn, "ffn_hidden", &ffn, err)))
      return rc;
    put_count(out, "ffn_hidden", f->ffn, ffn);
  }
  /* the workload's own kv_heads and heads win over a class default, so
     one vsim cannot know is refused only where it has none, and one that
     does not divide the heads by the heads' check
     (vs_workload_apply_hf_config) */
  if (f->kv_heads && (d = class_default(root, out->model_type, f->kv_heads)))
    put_default(out, "kv_heads", d);
  if (f->kv_heads && json_object_get(root, f->kv_heads) &&
      !json_is_null(json_object_get(root, f->kv_heads))) {
    if ((rc = count_field(root, path, f->kv_heads, "kv_heads", &kv, err)))
      return rc;
    put_count(out, "kv_heads", f->kv_heads, kv);
  }
  return 0;
}

/* Tied embeddings and dropout, with the family's defaults (the type's
 * tie_word_embeddings default where it has one). */
static int read_flags(const json_t *root, const char *path, const family *f,
                      vs_hf_model *out, vs_error *err)
{
  const json_t *tied = json_object_get(root, "tie_word_embeddings");
  const json_t *drop = f->dropout ? json_object_get(root, f->dropout) : NULL;
  const type_traits *type = traits_of(out->model_type);
  bool t = f->tied_default || (type && type->tied);
  char text[32];
  if (tied && !json_is_boolean(tied))
    return vs_error_set(err, VS_EINPUT,
                        "%s: field \"tie_word_embeddings\" must be true or "
                        "false",
                        path);
  if (tied)
    t = json_is_true(tied);
  if (drop && !json_is_number(drop))
    return vs_error_set(err, VS_EINPUT, "%s: field \"%s\" must be a number",
                        path, f->dropout);
  put(out, "arch", "model_type", f->arch);
  put(out, "tied_embeddings", tied ? "tie_word_embeddings" : NULL,
      t ? "true" : "false");
  if (drop)
    snprintf(text, sizeof text, "%.17g", json_number_value(drop));
  else
    snprintf(text, sizeof text, "%s",
             f->dropout_default ? f->dropout_default : "0");
  put(out, "dropout", drop ? f->dropout : NULL, text);
  return 0;
}

/* The mixture-of-experts model types, "a, b and c", into buf. */
static const char *moe_types(char *buf, size_t len)
{
  size_t n = sizeof moe_families / sizeof moe_families[0], used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n; i++)
    vs_conf_append_item(buf, len, &used,
                        i == 0       ? ""
                        : i + 1 == n ? " and "
                                     : ", ",
                        moe_families[i].type, strlen(moe_families[i].type));
  return buf;
}

static const moe_family *moe_family_of(const char *type)
{
  for (size_t i = 0; i < sizeof moe_families / sizeof moe_families[0]; i++)
    if (strcmp(moe_families[i].type, type) == 0)
      return &moe_families[i];
  return NULL;
}

/* Whether root gives field a value (neither absent nor null: a field the
 * file lacks or leaves null gives no key). */
static bool given(const json_t *root, const char *field)
{
  const json_t *j = json_object_get(root, field);
  return j && !json_is_null(j);
}

/* A count field that may be absent or 0 (what it gives then: *v = 0). */
static int count_or_zero(const json_t *root, const char *path,
                         const char *field, const char *key, json_int_t *v,
                         vs_error *err)
{
  const json_t *j = json_object_get(root, field);
  *v = 0;
  if (!j || json_is_null(j) ||
      (json_is_integer(j) && json_integer_value(j) == 0))
    return 0;
  return count_field(root, path, field, key, v, err);
}

/* The shared experts: their width, and their count or one; a field the
 * file lacks, its class's default (absent_defaults: Qwen2MoeConfig's
 * width 5632, DeepseekV3Config's one shared expert); a null or 0 one,
 * none. */
static int read_shared(const json_t *root, const char *path,
                       const moe_family *f, vs_hf_model *out, vs_error *err)
{
  const absent_default *dn = NULL, *dffn = NULL;
  json_int_t n = 1, ffn;
  int rc;
  if (!f->shared_ffn)
    return 0;
  dffn = class_default(root, f->type, f->shared_ffn);
  if (!dffn && !given(root, f->shared_ffn))
    return 0;
  if (f->shared_count &&
      !(dn = class_default(root, f->type, f->shared_count)) &&
      (rc = count_or_zero(root, path, f->shared_count, "shared_experts", &n,
                          err)))
    return rc;
  if ((dn ? dn->value : n) == 0)
    return 0;
  if (!dffn && (rc = count_field(root, path, f->shared_ffn,
                                 "shared_expert_ffn_hidden", &ffn, err)))
    return rc;
  if (dn)
    put_default(out, "shared_experts", dn);
  else
    put_count(out, "shared_experts",
              f->shared_count && given(root, f->shared_count) ? f->shared_count
                                                              : NULL,
              n);
  if (dffn)
    put_default(out, "shared_expert_ffn_hidden", dffn);
  else
    put_count(out, "shared_expert_ffn_hidden", f->shared_ffn, ffn);
  if (traits_of(f->type) && traits_of(f->type)->shared_gate)
    put(out, "shared_expert_gate", "model_type", "true");
  return 0;
}

/* What a message names as the source of dense_layers where DeepSeek's
 * placement rounds first_k_dense_replace up (read_placement): both
 * fields, quoted as the message quotes one. */
#define ROUNDED_FIRST_DENSE                                                    \
  "first_k_dense_replace\" rounded up to a multiple of \"moe_layer_freq"

/* dense_layers: the first multiple of freq from the first dense layer
 * `dense` on (d: its class default, where the file lacks it). */
static void put_first_moe(const json_t *root, const moe_family *f,
                          const absent_default *d, json_int_t dense,
                          json_int_t freq, vs_hf_model *out)
{
  json_int_t first_moe = (dense + freq - 1) / freq * freq;
  if (d && first_moe == dense)
    put_default(out, "dense_layers", d);
  else
    put_count(out, "dense_layers",
              first_moe != dense            ? ROUNDED_FIRST_DENSE
              : given(root, f->first_dense) ? f->first_dense
                                            : NULL,
              first_moe);
}

/* DeepSeek's layer placement (modeling_deepseek.py: layer l is MoE when
 * l >= first_k_dense_replace and l % moe_layer_freq == 0; freq 1 when
 * absent): the first MoE layer is the first multiple of freq from k on,
 * then every freq-th. Both families name the fields as
 * ROUNDED_FIRST_DENSE does. */
static int read_placement(const json_t *root, const char *path,
                          const moe_family *f, vs_hf_model *out,
                          vs_error *err)
{
  const absent_default *d = class_default(root, f->type, f->first_dense);
  json_int_t dense = 0, freq = 1;
  int rc;
  if ((!d && (rc = count_or_zero(root, path, f->first_dense, "dense_layers",
                                 &dense, err))) ||
      (given(root, f->layer_freq) &&
       (rc = count_field(root, path, f->layer_freq, "moe_every", &freq, err))))
    return rc;
  if (d && d->value < 0) /* not known: the workload sets it */
    put_default(out, "dense_layers", d);
  else
    put_first_moe(root, f, d, d ? d->value : dense, freq, out);
  put_count(out, "moe_every", given(root, f->layer_freq) ? f->layer_freq : NULL,
            freq);
  return 0;
}

/* DeepSeek's multi-head latent attention: the latent ranks (a null or 0
 * q_lora_rank: a full query projection; an absent one, its class's
 * default) and head sizes. */
static int read_mla(const json_t *root, const char *path, vs_hf_model *out,
                    vs_error *err)
{
  static const struct {
    const char *field, *key;
  } heads[] = {{"qk_nope_head_dim", "qk_head_dim"},
               {"qk_rope_head_dim", "qk_rope_head_dim"},
               {"v_head_dim", "v_head_dim"}};
  const absent_default *d;
  json_int_t v;
  int rc;
  if ((rc = count_field(root, path, "kv_lora_rank", "kv_lora_rank", &v, err)))
    return rc;
  put_count(out, "kv_lora_rank", "kv_lora_rank", v);
  if ((d = class_default(root, out->model_type, "q_lora_rank")))
    put_default(out, "q_lora_rank", d);
  else if ((rc = count_or_zero(root, path, "q_lora_rank", "q_lora_rank", &v,
                               err)))
    return rc;
  else
    put_count(out, "q_lora_rank", "q_lora_rank", v);
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
    if ((rc = count_field(root, path, heads[i].field, heads[i].key, &v, err)))
      return rc;
    put_count(out, heads[i].key, heads[i].field, v);
  }
  return 0;
}

/* The boolean `field` into *v and *present, which is false (*v
 * unchanged) when the field is absent or null. */
static int bool_field(const json_t *root, const char *path, const char *field,
                      bool *v, bool *present, vs_error *err)
{
  const json_t *j = json_object_get(root, field);
  *present = j && !json_is_null(j);
  if (!*present)
    return 0;
  if (!json_is_boolean(j))
    return vs_error_set(err, VS_EINPUT,
                        "%s: field \"%s\" must be true or false", path, field);
  *v = json_is_true(j);
  return 0;
}

/* The attention's and the MLP's biases, as t says; DeepSeek's with
 * biases refused (vsim's multi-head latent attention has none). */
static int read_biases(const json_t *root, const char *path,
                       const type_traits *t, vs_hf_model *out, vs_error *err)
{
  bool v = false, present = false;
  int rc;
  if (t->attention_bias &&
      (rc = bool_field(root, path, t->attention_bias, &v, &present, err)))
    return rc;
  if (present && v && strncmp(t->type, "deepseek", 8) == 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: field \"attention_bias\" is true: %s's "
                        "multi-head latent attention with biases (on "
                        "q_a_proj, kv_a_proj_with_mqa and o_proj, as "
                        "transformers builds it) is not simulated",
                        path, t->type);
  if (present)
    put(out, "attention_bias", t->attention_bias, v ? "all" : "none");
  else if (t->bias_default)
    put(out, "attention_bias", "model_type", t->bias_default);
  if (!t->mlp_bias)
    return 0;
  if ((rc = bool_field(root, path, t->mlp_bias, &v, &present, err)))
    return rc;
  if (present)
    put(out, "mlp_bias", t->mlp_bias, v ? "true" : "false");
  return 0;
}

/* [model] key from the count `field`, or `absent` (transformers'
 * default) when the field is absent or null. */
static int put_count_or(const json_t *root, const char *path, const char *field,
                        const char *key, json_int_t absent, vs_hf_model *out,
                        vs_error *err)
{
  json_int_t v = absent;
  int rc;
  if (!given(root, field)) {
    put_count(out, key, NULL, v);
    return 0;
  }
  if ((rc = count_field(root, path, field, key, &v, err)))
    return rc;
  put_count(out, key, field, v);
  return 0;
}

/* [model] `key` from the soft-capping `field`: its number, or `absent`
 * (transformers' default) when the field is absent; none when null or
 * 0. */
static int put_softcap(const json_t *root, const char *path, const char *field,
                       const char *key, double absent, vs_hf_model *out,
                       vs_error *err)
{
  const json_t *j = json_object_get(root, field);
  char text[32];
  double v = absent;
  if (j && !json_is_null(j)) {
    if (!json_is_number(j) || json_number_value(j) < 0 ||
        json_number_value(j) > 1e6)
      return vs_error_set(err, VS_EINPUT,
                          "%s: field \"%s\" must be a number from 0 to 1e6 "
                          "or null (it gives [model] %s)",
                          path, field, key);
    v = json_number_value(j);
  } else if (j) {
    v = 0.0;
  }
  if (v > 0.0) {
    snprintf(text, sizeof text, "%.17g", v);
    put(out, key, j ? field : "model_type", text);
  }
  return 0;
}

/* What the type's layers have beyond the family's counts (type_traits). */
static int read_traits(const json_t *root, const char *path, vs_hf_model *out,
                       vs_error *err)
{
  const type_traits *t = traits_of(out->model_type);
  int rc;
  if (!t)
    return 0;
  if ((rc = read_biases(root, path, t, out, err)))
    return rc;
  if (t->qk_norm)
    put(out, "qk_norm", "model_type", "true");
  if (t->post_norms)
    put(out, "post_norms", "model_type", "true");
  if (t->zero_centered_norm)
    put(out, "zero_centered_norm", "model_type", "true");
  if ((t->attn_softcap &&
       (rc = put_softcap(root, path, t->attn_softcap, "attn_softcap",
                         t->softcap_defaults[0], out, err))) ||
      (t->logit_softcap &&
       (rc = put_softcap(root, path, t->logit_softcap, "logit_softcap",
                         t->softcap_defaults[1], out, err))))
    return rc;
  if (t->rotary)
    put(out, "positions", "model_type", "rotary");
  if (t->max_positions &&
      (rc = put_count_or(root, path, t->max_positions, "max_positions",
                         t->positions_default, out, err)))
    return rc;
  /* an absent type_vocab_size gives no key: the workload's default for
   * bert is BertConfig's 2 */
  if (!t->type_vocab || !given(root, t->type_vocab))
    return 0;
  return put_count_or(root, path, t->type_vocab, "type_vocab", 0, out, err);
}

static int cmp_count(const void *a, const void *b)
{
  json_int_t x = *(const json_int_t *)a, y = *(const json_int_t *)b;
  return (x > y) - (x < y);
}

/* What a list of mlp_only_layers says of the sparse layers. */
typedef enum { ONLY_LEADING, ONLY_BAD_NUMBER, ONLY_GAP } only_shape;

/* Into k (room for every entry of only), the sparse index of each listed
 * layer that a sparse step `step` makes sparse (layer (j + 1) step - 1 is
 * sparse index j), in order; *r their count. */
static only_shape sparse_listed(const json_t *only, json_int_t step,
                                json_int_t *k, size_t *r)
{
  *r = 0;
  for (size_t i = 0; i < json_array_size(only); i++) {
    const json_t *v = json_array_get(only, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > MAX_COUNT)
      return ONLY_BAD_NUMBER;
    if ((json_integer_value(v) + 1) % step == 0)
      k[(*r)++] = (json_integer_value(v) + 1) / step - 1;
  }
  qsort(k, *r, sizeof *k, cmp_count);
  return ONLY_LEADING;
}

/* Qwen's mlp_only_layers (transformers' Qwen2MoeDecoderLayer and
 * Qwen3MoeDecoderLayer: layer i is sparse when i is not listed and
 * (i + 1) % decoder_sparse_step == 0) over a sparse step `step`: into
 * *dense, the dense layers before the first sparse one where the listed
 * sparse places are the first r of them (dense_layers = step - 1 +
 * r step, moe_every = step); listed layers that are dense anyway change
 * nothing. Other placements are refused. */
static int read_mlp_only(const json_t *only, const char *path, json_int_t step,
                         json_int_t *dense, vs_error *err)
{
  size_t r = 0, m = 0;
  json_int_t *k = calloc(json_array_size(only) + 1, sizeof *k);
  only_shape shape;
  if (!k)
    return vs_error_set(err, VS_ENOMEM, "%s: out of memory", path);
  shape = sparse_listed(only, step, k, &r);
  for (size_t i = 0; i < r && shape == ONLY_LEADING; i++)
    if (i == 0 || k[i] != k[i - 1]) /* a layer listed twice counts once */
      shape = k[i] == (json_int_t)m++ ? ONLY_LEADING : ONLY_GAP;
  free(k);
  *dense = step - 1 + (json_int_t)m * step;
  if (shape == ONLY_BAD_NUMBER)
    return vs_error_set(err, VS_EINPUT,
                        "%s: field \"mlp_only_layers\" must be a list of "
                        "layer numbers from 0 to 2^40 (or null)",
                        path);
  if (shape == ONLY_GAP)
    return vs_error_set(err, VS_EINPUT,
                        "%s: field \"mlp_only_layers\": dense layers at "
                        "chosen places are not simulated (only the first "
                        "dense_layers, then every moe_every-th: list the "
                        "first sparse layers alone)",
                        path);
  return 0;
}

/* A mixture of experts' keys, from its family's fields, into out. */
static int read_experts(const json_t *root, const char *path,
                        const moe_family *f, vs_hf_model *out, vs_error *err)
{
  const json_t *only = json_object_get(root, "mlp_only_layers");
  json_int_t experts = 0, topk = 0, ffn, step = 1;
  int rc;
  if ((rc = count_field(root, path, f->experts, "experts", &experts, err)) ||
      (rc = count_field(root, path, f->topk, "experts_per_token", &topk, err)))
    return rc;
  put_count(out, "experts", f->experts, experts);
  put_count(out, "experts_per_token", f->topk, topk);
  if (f->expert_ffn) {
    if ((rc = count_field(root, path, f->expert_ffn, "expert_ffn_hidden", &ffn,
                          err)))
      return rc;
    put_count(out, "expert_ffn_hidden", f->expert_ffn, ffn);
  }
  if ((rc = read_shared(root, path, f, out, err)))
    return rc;
  if (f->sparse_step && given(root, f->sparse_step) &&
      (rc = count_field(root, path, f->sparse_step, "moe_every", &step, err)))
    return rc;
  if (f->first_dense)
    return read_placement(root, path, f, out, err);
  if (only && !json_is_null(only) && !json_is_array(only))
    return vs_error_set(err, VS_EINPUT,
                        "%s: field \"mlp_only_layers\" must be a list of "
                        "layer numbers (or null)",
                        path);
  /* from the field where the file gives it (1 too: a review found a
     given decoder_sparse_step of 1 shown as the type's default) */
  {
    const char *from =
        f->sparse_step && given(root, f->sparse_step) ? f->sparse_step : NULL;
    json_int_t dense = step - 1;
    bool listed = json_is_array(only) && json_array_size(only) > 0;
    if (listed && (rc = read_mlp_only(only, path, step, &dense, err)))
      return rc;
    put_count(out, "dense_layers",
              listed && dense != step - 1 ? "mlp_only_layers" : from, dense);
    put_count(out, "moe_every", from, step);
  }
  return 0;
}

/* DeepSeek's head_dim v: DeepseekV2Config and DeepseekV3Config set
 * head_dim = qk_rope_head_dim (configuration_deepseek_v3.py), so the
 * configs transformers saves carry it; that value adds no shape to
 * multi-head latent attention and gives no key. Another is refused. */
static int mla_head_dim(const json_t *root, const char *path, const char *type,
                        json_int_t v, vs_error *err)
{
  const json_t *rope = json_object_get(root, "qk_rope_head_dim");
  if (json_is_integer(rope) && json_integer_value(rope) == v)
    return 0;
  return vs_error_set(
      err, VS_EINPUT,
      "%s: field \"head_dim\" = %lld: a %s config's "
      "head_dim can only be its qk_rope_head_dim (%lld; "
      "transformers sets it so), its heads being "
      "qk_nope_head_dim + qk_rope_head_dim and v_head_dim "
      "wide; drop the field or make it qk_rope_head_dim",
      path, (long long)v, type,
      json_is_integer(rope) ? (long long)json_integer_value(rope) : 0LL);
}

/* Refuses experts outside a family that has them (when !moe); a head
 * width the config gives (head_dim: Gemma-7B's 256 over hidden 3072 and
 * 16 heads) into out. */
static int read_shape(const json_t *root, const char *path, bool moe,
                      vs_hf_model *out, vs_error *err)
{
  const json_t *hd = json_object_get(root, "head_dim");
  json_int_t v;
  int rc;
  for (size_t i = 0; !moe && expert_fields[i]; i++) {
    const json_t *e = json_object_get(root, expert_fields[i]);
    if (!e || json_is_null(e))
      continue;
    if ((rc = count_field(root, path, expert_fields[i], "layers' experts", &v,
                          err)))
      return rc;
    if (v > 1) {
      char types[256];
      return vs_error_set(
          err, VS_EINPUT,
          "%s: field \"%s\" = %lld: mixtures of experts are not simulated "
          "in a %s config (vsim reads them from %s ones)",
          path, expert_fields[i], (long long)v,
          json_string_value(json_object_get(root, "model_type")),
          moe_types(types, sizeof types));
    }
  }
  if (!hd || json_is_null(hd)) {
    const type_traits *t = traits_of(out->model_type);
    if (t && t->head_dim_default)
      put_count(out, "head_dim", NULL, t->head_dim_default);
    return 0;
  }
  if ((rc = count_field(root, path, "head_dim", "head_dim", &v, err)))
    return rc;
  if (strncmp(out->model_type, "deepseek", 8) == 0)
    return mla_head_dim(root, path, out->model_type, v, err);
  put_count(out, "head_dim", "head_dim", v);
  return 0;
}

/* VS_EINPUT for the multimodal config at path (a model_type vsim does not
 * read, with a text_config): the advice to give hf_config its
 * text_config where vsim reads that config's model_type; else that
 * vsim reads neither (naming the types it reads). */
static int refuse_multimodal(const json_t *root, const char *path,
                             const char *type, vs_error *err)
{
  const json_t *text =
      json_object_get(json_object_get(root, "text_config"), "model_type");
  if (json_is_string(text) && family_of(json_string_value(text)))
    return vs_error_set(err, VS_EINPUT,
                        "%s: model_type \"%s\" is a multimodal model (field "
                        "\"text_config\"); vsim builds language models "
                        "only: give hf_config a file of its text_config "
                        "with that config's model_type (%s) and the counts "
                        "it leaves to their defaults, knowing the other "
                        "towers' weights go uncounted",
                        path, type, json_string_value(text));
  if (!json_is_string(text))
    return vs_error_set(err, VS_EINPUT,
                        "%s: model_type \"%s\" is a multimodal model (field "
                        "\"text_config\", which names no model_type); vsim "
                        "builds language models only, of the model_types "
                        "%s",
                        path, type, vs_hf_known_types());
  return vs_error_set(err, VS_EINPUT,
                      "%s: model_type \"%s\" is a multimodal model (field "
                      "\"text_config\") whose text_config's model_type "
                      "\"%s\" is not one vsim reads either (%s)",
                      path, type, json_string_value(text), vs_hf_known_types());
}

static int read_root(const json_t *root, const char *path, vs_hf_model *out,
                     vs_error *err)
{
  const json_t *type = json_object_get(root, "model_type");
  const family *f;
  int rc;
  if (!json_is_object(root) || !json_is_string(type))
    return vs_error_set(err, VS_EINPUT,
                        "%s: expected a JSON object with a string "
                        "\"model_type\" (a Hugging Face config.json)",
                        path);
  snprintf(out->model_type, sizeof out->model_type, "%s",
           json_string_value(type));
  if (!(f = family_of(out->model_type)) &&
      json_is_object(json_object_get(root, "text_config")))
    return refuse_multimodal(root, path, out->model_type, err);
  if (!f)
    return vs_error_set(err, VS_EINPUT,
                        "%s: model_type \"%s\" is not one vsim reads (%s)", path,
                        out->model_type, vs_hf_known_types());
  if ((rc = read_counts(root, path, f, out, err)) ||
      (rc = read_flags(root, path, f, out, err)) ||
      (rc = read_traits(root, path, out, err)))
    return rc;
  if (moe_family_of(out->model_type) &&
      (rc = read_experts(root, path, moe_family_of(out->model_type), out, err)))
    return rc;
  if (strncmp(out->model_type, "deepseek", 8) == 0 &&
      (rc = read_mla(root, path, out, err)))
    return rc;
  return read_shape(root, path, moe_family_of(out->model_type) != NULL, out,
                    err);
}

/* The largest config.json read: transformers' are a few KiB (a label
 * table makes some larger); a bigger file is no config. */
#define MAX_CONFIG_BYTES (16u << 20)

/* Appends f's bytes to *buf (its size *len) until end of file, stopping at
 * a NUL byte or past MAX_CONFIG_BYTES: a text file's contents, which
 * Jansson's reader would end at a NUL as if the file ended there (and
 * read a directory as an empty file). */
static int read_text(FILE *f, const char *path, char **buf, size_t *len,
                     vs_error *err)
{
  char chunk[4096];
  size_t n, cap = 0;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    const char *nul = memchr(chunk, '\0', n);
    if (nul)
      return vs_error_set(err, VS_EINPUT, "%s: byte %zu is a NUL: a "
                          "config.json is text", path,
                          *len + (size_t)(nul - chunk));
    if (*len + n > MAX_CONFIG_BYTES)
      return vs_error_set(err, VS_EINPUT, "%s: over %u MiB, larger than any "
                          "config.json", path, MAX_CONFIG_BYTES >> 20);
    if (*len + n > cap) { /* doubled: a read of n bytes costs O(n) */
      char *grown;
      cap = 2 * (*len + n);
      if (!(grown = realloc(*buf, cap)))
        return vs_error_set(err, VS_ENOMEM, "out of host memory");
      *buf = grown;
    }
    memcpy(*buf + *len, chunk, n);
    *len += n;
  }
  return ferror(f) ? vs_error_set(err, VS_EIO, "%s: cannot read it: %s", path,
                                  strerror(errno))
                   : 0;
}

/* The JSON value of the file at path into *root. */
static int load_json(const char *path, json_t **root, vs_error *err)
{
  json_error_t jerr;
  char *buf = NULL;
  size_t len = 0;
  size_t bom;
  FILE *f;
  int rc;
  if (!(f = vs_open_input(path, "Hugging Face config.json", err)))
    return VS_EIO;
  rc = read_text(f, path, &buf, &len, err);
  fclose(f);
  if (rc == 0 && (bom = vs_utf8_bom_len(buf, len)) > 0) {
    memmove(buf, buf + bom, len - bom);
    len -= bom;
  }
  if (rc == 0 && !(*root = json_loadb(buf ? buf : "", len,
                                      JSON_REJECT_DUPLICATES, &jerr)))
    rc = vs_error_set(err, VS_EINPUT, "%s:%d:%d: not valid JSON: %s", path,
                      jerr.line, jerr.column, jerr.text);
  free(buf);
  return rc;
}

int vs_hf_config_read(const char *path, vs_hf_model *out, vs_error *err)
{
  json_t *root = NULL;
  int rc;
  memset(out, 0, sizeof *out);
  if ((rc = load_json(path, &root, err)))
    return rc;
  rc = read_root(root, path, out, err);
  json_decref(root);
  return rc;
}
