/* layer.c - a model's blocks (see model_int.h): the attention core
 * (materialised, flash, context-parallel, MLA), the layers (dense and
 * gated MLPs, mixtures of experts), the embedding and the head (logits,
 * loss, multi-token prediction).
 *
 * Saved-tensor lists follow Korthikanti et al. 2022 (arXiv 2205.05198,
 * Sec. 4.1): for a GPT layer with dropout and materialised attention they add
 * up to s*b*h*(34 + 5*a*s/h) bytes at 16 bits. Tensor parallelism shards the
 * attention heads and the MLP width; sequence parallelism also shards the
 * norms, dropouts and the inputs of the column-parallel matmuls by sequence. */
#include "model.h"
#include "model_int.h"

#include "units.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Attention core
 * ------------------------------------------------------------------------ */

/* One of the two attention matmuls over all heads of this rank, one
 * batched GEMM (Megatron's baddbmm and bmm): 2*b*heads*s*s*d FLOPs
 * forward, twice that backward. QK^T is [s x d] @ [d x s] per head
 * (ATTN_SCORES), probs @ V [s x s] @ [s x d] (ATTN_CONTEXT). */
typedef enum { ATTN_SCORES, ATTN_CONTEXT } attn_matmul;

static void attention_matmul(vs_op_spec *op, const vs_dims *d, uint64_t heads,
                             attn_matmul which, double bytes)
{
  op->matmul = true;
  op->no_fp8 = true; /* a batched matmul of the attention core */
  op->attn_core = true;
  op->gemm = which == ATTN_SCORES ? (vs_gemm){d->s, d->s, d->d, d->b * heads}
                                  : (vs_gemm){d->s, d->d, d->s, d->b * heads};
  op->bwd_kernels = 2; /* both operands' gradients */
  op->fwd_flops = 2.0 * (double)d->b * (double)heads * (double)d->s *
                  (double)d->s * (double)d->d;
  op->bwd_flops = 2.0 * op->fwd_flops;
  op->fwd_bytes = bytes;
  op->bwd_bytes = 2.0 * bytes;
}

/* Under autocast Hugging Face's modules add an fp32 mask to the 16-bit
 * scores, which promotes them to fp32. */
static bool scores_promoted_by_mask(const vs_dims *d)
{
  return d->amp && d->hf_modules;
}

/* Whether an eager softmax makes fp32 probabilities from 16-bit scores:
 * on autocast's fp32 list, and in Hugging Face's eager attention for
 * Llama-like models, softmax(dtype = torch.float32) then .to(the query's
 * dtype) for the matmul with V (hf_fp32_softmax). */
static bool probs_fp32(const vs_dims *d)
{
  return d->amp || (d->hf_fp32_softmax && d->e < 4);
}

/* Whether the probabilities go through dropout in fp32: autocast's, save
 * where Hugging Face's modules cast them to the values' dtype first
 * (Llama-like models' .to(query.dtype), GPT-2's .type(value.dtype); BERT
 * drops out its softmax's output as it is). */
static bool dropout_fp32(const vs_dims *d)
{
  return d->amp && !(d->hf_modules && !d->bert);
}

/* Whether softmax(dtype = float32) converts its 16-bit input to an fp32
 * copy first: where the probabilities are fp32, unless the mask promoted
 * the scores or they are fp16 (aten/src/ATen/native/SoftMax.cpp: only
 * CUDA's fp16 takes the fused half_to_float kernel, whose gradient comes
 * back in fp16). */
static bool softmax_casts_input(const vs_dims *d)
{
  return probs_fp32(d) && !scores_promoted_by_mask(d) &&
         d->act_dtype != VS_DTYPE_FP16;
}

/* Bytes per element of an eager softmax's input, whose gradient its
 * backward makes: the scores' dtype, or fp32 where they were promoted or
 * cast. */
static uint64_t softmax_input_bytes(const vs_dims *d)
{
  return scores_promoted_by_mask(d) || softmax_casts_input(d) ? 4 : d->e;
}

/* An eager attention's kernels over the s^2 scores beside the softmax
 * (eager kernels; Megatron-LM fuses scale, mask and softmax into one):
 * the scale's product (2e an element), the causal mask (the ground-truth
 * harness's masked_fill_ 2e; Hugging Face's add of a mask in the
 * activations' dtype, e + 4 where it promotes the sum) and softmax's cast
 * of its input (softmax_casts_input: e + 4). Backward: the cast's
 * (4 + e), the mask's (masked_fill 2e; an add passes its gradient on,
 * cast to 16 bits when promoted: 4 + e) and the scale's (2e). Where the
 * probs are fp32 (probs_fp32) the context matmul reads their 16-bit cast
 * (4 + e), and its backward casts their gradient back (e + 4). */
static void eager_scores_kernels(vs_op_spec *softmax, vs_op_spec *context,
                                 const vs_dims *d, uint64_t scores)
{
  double n = (double)scores, e = (double)d->e, wide = e + 4.0;
  bool cast = softmax_casts_input(d), promoted = scores_promoted_by_mask(d);
  double mask_fwd = promoted ? wide : 2.0 * e;
  double mask_bwd = promoted ? wide : d->hf_modules ? 0.0 : 2.0 * e;
  if (!d->eager_kernels)
    return;
  vs_block_side(softmax, SIDE_FWD_EAGER,
                n * (2.0 * e + mask_fwd + (cast ? wide : 0)), cast ? 3 : 2);
  vs_block_side(softmax, SIDE_BWD,
                n * ((cast ? wide : 0) + mask_bwd + 2.0 * e),
                (cast ? 1u : 0u) + (mask_bwd > 0 ? 1u : 0u) + 1u);
  if (probs_fp32(d)) {
    vs_block_side(context, SIDE_FWD, n * wide, 1);
    vs_block_side(context, SIDE_BWD, n * wide, 1);
  }
}

/* Materialised attention: scores = QK^T, softmax, dropout, probs @ V. The
 * s^2 tensors are `selective`: selective checkpointing recomputes them. With
 * grouped-query attention, eager implementations expand K and V to every
 * head before the matmuls (Hugging Face repeat_kv, Megatron's core
 * attention), so the saved K and V have `heads` heads. */
static int attention_eager(vs_block *blk, const vs_dims *d, vs_error *err)
{
  uint64_t heads = d->a / d->t, kv = heads;
  uint64_t scores = heads * d->s * d->s * d->b; /* elements */
  uint64_t probs = probs_fp32(d) ? 4 : d->e;    /* bytes an element */
  uint64_t qk_grads;
  vs_op_spec *op;
  uint32_t softmax;

  if (!(op = vs_block_add_op(blk, "attn_scores", err)))
    return VS_EINPUT;
  attention_matmul(op, d, heads, ATTN_SCORES,
                   (double)d->e * ((double)(d->tokens * d->d * (heads + kv)) +
                                   (double)scores));
  /* raw scores until the softmax; with fp32 probs also their fp32
   * promotion (an fp32 mask added, or softmax's own cast) */
  op->fwd_temp_bytes = (d->e + (probs_fp32(d) ? 4 : 0)) * scores;
  /* backward: the scores' gradient, held while the scale's and the
   * mask's backward make a 16-bit copy of it, then while Q's and K's are
   * made (autograd frees a node's incoming gradient once the node is
   * done); it is fp32 where an fp32 mask promoted the scores (Hugging
   * Face's modules under autocast) */
  qk_grads = d->e * d->tokens * d->d * (heads + kv);
  op->bwd_temp_bytes =
      (scores_promoted_by_mask(d) ? d->er : d->e) * scores +
      (qk_grads > d->e * scores ? qk_grads : d->e * scores);
  if (vs_block_save_act(blk, op, d->e * d->tokens * d->d * (heads + kv),
                        d->act_dtype, err))
    return VS_EINPUT; /* Q and K */
  if (d->attn_softcap &&
      vs_block_softcap(blk, d, "attn_softcap", scores, VS_CAP_SCORES, err))
    return VS_EINPUT;

  /* softmax saves its output: fp32 probs where they are (probs_fp32; under
   * autocast the dropout over them is fp32 too) */
  if (!(op = vs_block_add_op(blk, "softmax", err)))
    return VS_EINPUT;
  vs_block_as_elementwise(op, scores, probs, 5.0);
  op->attn_core = true;
  softmax = blk->n_ops - 1;
  /* its backward holds the probs' gradient (fp32 ones cast from the
   * 16-bit one the matmul made) while it makes its input's */
  op->bwd_temp_bytes = (probs + softmax_input_bytes(d)) * scores;
  if (vs_block_save_scores(blk, op, scores,
                           probs == 4 ? VS_DTYPE_FP32 : d->act_dtype, err))
    return VS_EINPUT;

  if (vs_block_dropout(blk, d, "attn_dropout", scores,
                       dropout_fp32(d) ? 4 : d->e, VS_IN_ATTN_CORE, err))
    return VS_EINPUT;

  if (!(op = vs_block_add_op(blk, "attn_context", err)))
    return VS_EINPUT;
  attention_matmul(op, d, heads, ATTN_CONTEXT,
                   (double)d->e * ((double)scores +
                                   2.0 * (double)(d->tokens * d->d * heads)));
  op->bwd_temp_bytes = d->e * scores;
  if (dropout_fp32(d) && d->dropout) /* the fp32 dropped-out probs, until
                                       cast */
    op->fwd_temp_bytes += 4 * scores;
  if (vs_block_save_act(blk, op, d->e * d->tokens * d->d * kv, d->act_dtype,
                        err))
    return VS_EINPUT; /* V */
  /* the probs the matmul reads: the dropped-out ones, or the 16-bit cast
   * of fp32 ones; otherwise the softmax output, already saved */
  if (d->dropout || probs_fp32(d))
    if (vs_block_save_scores(blk, op, scores, d->act_dtype, err))
      return VS_EINPUT;
  eager_scores_kernels(&blk->ops[softmax], op, d, scores);
  return 0;
}

/* FlashAttention: never materialises the scores; saves Q, K, V and the fp32
 * log-sum-exp per row; dropout masks are regenerated from the RNG state.
 * FLOPs as FlashAttention-2 counts them (Dao 2023, arXiv 2307.08691,
 * Sec. 4.1; flash-attn benchmarks/benchmark_flash_attention.py, flops()):
 * 4*s^2*d*heads forward, "divided by 2 for causal" (the kernel skips the
 * blocks above the diagonal), and 2.5x that backward (5 matmuls to the
 * forward's 2: the backward recomputes the scores). An eager causal
 * attention computes every s^2 product and masks afterwards (Megatron's
 * core attention: baddbmm then masked softmax), so it keeps the full
 * count. */
#define CAUSAL_FLASH_FRACTION 0.5

/* What a flash attention op's measured rate depends on: the kernel's
 * query length (this rank's), head dimension and mask. Under context
 * parallelism the ring (p2p) and all-gather kernels run on blocks of s/cp
 * queries by s/cp keys, of which only those on the diagonal are causal:
 * the bidirectional rates. Ulysses (a2a) runs the ordinary kernel over
 * the whole sequence on heads / cp (Transformer Engine's
 * AttnFuncWithCPAndQKVOA2A: one attention call after the all-to-all,
 * with the layer's own mask). */
static vs_flash_shape flash_shape(const vs_dims *d, uint64_t head_dim)
{
  if (d->cp > 1 && d->cp_comm == VS_CP_A2A)
    return (vs_flash_shape){d->skv, head_dim, d->causal};
  return (vs_flash_shape){d->s, head_dim, d->causal && d->cp == 1};
}

/* FlashAttention-2's backward launches three kernels (flash-attn
 * csrc/flash_attn/src/flash_bwd_launch_template.h: dot(dO, O), the
 * dQ/dK/dV kernel, dQ's conversion), its forward one. */
#define FLASH_BWD_KERNELS 3

/* Context parallelism around a flash attention op of `heads` heads whose
 * queries are q wide, keys and values kv wide each and output o wide on
 * this rank (Megatron-LM's
 * context_parallel.md; shared/reference/frameworks.md 9): each rank holds
 * s / cp tokens (a chunk from each end of the sequence: the causal work
 * evens out) and its queries attend over every key, so the op's FLOPs
 * above already count s / cp queries by s keys.
 * - p2p: the K, V chunks go round the ring, each received into a buffer
 *   of its own that forward keeps to its end (cp x 2 (s / cp) b kv bytes
 *   of the activations' dtype), in backward two in flight beside their
 *   dK, dV; over the whole ring each rank receives the
 *   sequence's K and V, an all-gather's worth, and in backward sends the
 *   gradients back, a reduce-scatter's; the ring is timed as blocking
 *   collectives, where Transformer Engine overlaps its steps with the
 *   attention kernel (pessimistic);
 * - allgather: the whole sequence's K and V gathered before the kernel
 *   (2 s b kv) and their gradients reduce-scattered after;
 * - a2a (Ulysses): Q, K, V moved from sequence chunks to head groups
 *   before the kernel and the output back after, the same bytes each way:
 *   the kernel then holds s tokens of heads / cp, as many bytes as the
 *   chunk of every head. Transformer Engine's AttnFuncWithCPAndQKVOA2A
 *   (d0067d0d) keeps the kernel's head-group output (out_part) for
 *   backward beside the exchanged one the next layer takes, and in
 *   backward moves only the output's gradient to the head groups.
 * Returns the bytes the exchange keeps from forward to backward beyond
 * the kernel's own (a2a's out_part; 0 for the others). */
static uint64_t context_parallel(vs_op_spec *op, const vs_dims *d,
                                 uint64_t heads, uint64_t q, uint64_t kv,
                                 uint64_t o)
{
  uint64_t chunk = d->e * d->tokens * 2 * kv; /* this rank's K and V */
  uint64_t full = chunk * d->cp, out = d->e * d->tokens * o;
  uint64_t lse = 4 * d->b * d->s * heads; /* fp32, per query and head */
  if (d->cp == 1)
    return 0;
  op->fwd_before.group = op->bwd_after.group = VS_GROUP_CP;
  switch (d->cp_comm) {
  case VS_CP_A2A:
    op->fwd_before.kind = op->bwd_after.kind = VS_COLL_ALL_TO_ALL;
    op->fwd_before.bytes = op->bwd_after.bytes =
        d->e * d->tokens * q + chunk;
    op->fwd_after = (vs_comm){VS_COLL_ALL_TO_ALL, VS_GROUP_CP, out};
    op->bwd_before = (vs_comm){VS_COLL_ALL_TO_ALL, VS_GROUP_CP, out};
    op->fwd_temp_bytes += d->e * d->tokens * q + chunk;
    op->bwd_temp_bytes += d->e * d->tokens * q + chunk + out;
    return out;
  case VS_CP_ALLGATHER:
    op->fwd_before.kind = VS_COLL_ALL_GATHER;
    op->bwd_after.kind = VS_COLL_REDUCE_SCATTER;
    op->fwd_before.bytes = op->bwd_after.bytes = full;
    op->bwd_before = op->fwd_before; /* gathered again for backward */
    op->fwd_temp_bytes += full;
    op->bwd_temp_bytes += 2 * full; /* K, V again and their gradients */
    break;
  default:
    op->fwd_before.kind = VS_COLL_ALL_GATHER;
    op->bwd_after.kind = VS_COLL_REDUCE_SCATTER;
    op->fwd_before.bytes = op->bwd_after.bytes = full;
    op->bwd_before = op->fwd_before; /* round the ring again */
    /* Transformer Engine's AttnFuncWithCPAndKVP2P.forward (d0067d0d)
     * keeps every ring step's K, V buffer (p2p_comm_buffers, a list of
     * cp: the first a torch.cat copy of the rank's own), output and fp32
     * LSE (out_per_step, softmax_lse_per_step) to its final correction,
     * beside the merged LSE (a clone of the first step's). Causal, the
     * rank of cp index c computes steps 1..c on its whole query chunk and
     * the later ones on half of it: the last rank keeps cp whole outputs
     * and LSEs, the most, which every cp rank is given (without a causal
     * mask every rank does). Backward: two buffers of K, V with their
     * dK, dV (p2p_comm_buffers, 2 x (2, *kv.shape)) and dQ's sum over
     * the steps (dq_buffer = torch.empty_like(q)) beside each step's
     * kernel outputs. */
    op->fwd_temp_bytes += d->cp * (chunk + out + lse) + lse;
    op->bwd_temp_bytes += 4 * chunk + d->e * d->tokens * q;
    break;
  }
  return 0;
}

/* The K and V heads a flash attention op holds: its own, or every query
 * head's where the model expands them first (vs_dims repeat_kv) or the
 * kernel that runs takes no grouped K and V. FlashAttention has no fp32
 * kernel, so fp32 attention runs PyTorch SDPA's memory-efficient
 * backend, which grouped-query attention reaches only with K and V
 * expanded to every head (enable_gqa is the flash and math backends';
 * the H200 ground-truth harness found the efficient backend refusing it,
 * PyTorch 2.11): the expanded copies are the kernel's inputs, saved for
 * backward, and their gradients are summed back. */
static uint64_t flash_kv_heads(const vs_dims *d)
{
  return d->act_dtype == VS_DTYPE_FP32 || d->repeat_kv ? d->a / d->t
                                                       : d->kv / d->t;
}

/* FlashAttention's kernels take a head dimension that is a multiple of
 * 8: PyTorch's SDPA pads Q, K and V to one (aten/src/ATen/native/
 * transformers/attention.cpp, pad_last_dim<8>), saves the padded copies
 * and the padded output for backward, and hands back a slice of the
 * output (post_process_flash_output), which the heads' merge before the
 * output projection must copy. The memory-efficient kernel (fp32) does
 * not pad. The head dimension the kernel runs at. */
static uint64_t flash_head_dim(const vs_dims *d)
{
  return d->act_dtype == VS_DTYPE_FP32 ? d->d : vs_div_ceil(d->d, 8) * 8;
}

/* What a flash attention op keeps besides Q, K and V: the fp32 LSE and,
 * under Ulysses, the head-group output (cp_kept bytes). The kernel is the
 * attention core: selective checkpointing is Megatron-LM's core_attn
 * recompute (transformer_config.py: recompute_modules' default), which
 * wraps whatever core attention runs, Transformer Engine's flash kernel
 * included, in tensor_parallel.checkpoint (attention.py,
 * _checkpointed_attention_forward at d98e8a64): the checkpoint keeps its
 * inputs Q, K and V, drops these, and re-runs the kernel (with its
 * context-parallel exchange) before backward. */
static int flash_core_saves(vs_block *blk, vs_op_spec *op, const vs_dims *d,
                            uint64_t heads, uint64_t cp_kept, vs_error *err)
{
  op->attn_core = true;
  if (vs_block_save_core(blk, op, 4 * d->b * heads * d->s, VS_DTYPE_FP32, err))
    return VS_EINPUT; /* LSE fp32 */
  if (cp_kept && vs_block_save_core(blk, op, cp_kept, d->act_dtype, err))
    return VS_EINPUT; /* Ulysses' head-group output */
  return 0;
}

static int attention_flash(vs_block *blk, const vs_dims *d, vs_error *err)
{
  uint64_t heads = d->a / d->t, kv = flash_kv_heads(d);
  uint64_t pd = flash_head_dim(d), qkv = d->tokens * (heads + 2 * kv);
  uint64_t cp_kept;
  vs_op_spec *op = vs_block_add_op(blk, "flash_attn", err);
  if (!op)
    return VS_EINPUT;
  op->matmul = true;
  /* Transformer Engine's DotProductAttention runs in 16 bits unless
   * fp8_dpa (Megatron-LM's --fp8-dot-product-attention, off by default) */
  op->no_fp8 = true;
  op->fwd_flops = 4.0 * (double)d->b * (double)heads * (double)d->s *
                  (double)d->skv * (double)pd *
                  (d->causal ? CAUSAL_FLASH_FRACTION : 1.0);
  op->bwd_flops = 2.5 * op->fwd_flops; /* backward recomputes the scores */
  op->bwd_kernels = FLASH_BWD_KERNELS;
  op->flash = flash_shape(d, pd);
  op->fwd_bytes =
      (double)d->e * (double)(d->tokens * pd * (2 * heads + 2 * kv));
  op->bwd_bytes = 2.0 * op->fwd_bytes;
  op->bwd_temp_bytes = d->e * pd * qkv;
  cp_kept =
      context_parallel(op, d, heads, heads * d->d, kv * d->d, heads * d->d);
  if (pd != d->d) {
    /* three pads and the merge's copy: each reads and writes its tensor;
     * backward pads the output's gradient (held beside Q's, K's and V's
     * padded ones) */
    op->fwd_kernels += 4;
    op->bwd_kernels += 1;
    op->fwd_bytes += (double)d->e * (double)((d->d + pd) * qkv +
                                             2 * d->tokens * d->d * heads);
    op->bwd_temp_bytes += d->e * d->tokens * pd * heads;
  }
  if (vs_block_save_act(blk, op, d->e * pd * qkv, d->act_dtype, err))
    return VS_EINPUT; /* Q, K, V (padded) */
  /* the output, padded: unpadded it is the output projection's input,
   * which that keeps */
  if (pd != d->d && vs_block_save_core(blk, op, d->e * d->tokens * pd * heads,
                                       d->act_dtype, err))
    return VS_EINPUT;
  return flash_core_saves(blk, op, d, heads, cp_kept, err);
}

/* ------------------------------------------------------------------------
 * Layers
 * ------------------------------------------------------------------------ */

/* The attention's input projection weights: one fused qkv, or where the
 * framework's model has separate q, k and v nn.Linear modules (modules_of:
 * Hugging Face's and torchtitan's, and autocast over them) three, whose
 * backward holds one weight's gradients at a time. */
static int qkv_weights(vs_block *blk, const vs_dims *d, uint64_t qkv_cols,
                       vs_error *err)
{
  if (d->qkv_modules != 3)
    return vs_block_linear_weight(blk, d, "qkv.weight", d->h, qkv_cols, err);
  return vs_block_linear_weight(blk, d, "q.weight", d->h, d->a * d->d / d->t,
                                err) ||
                 vs_block_linear_weight(blk, d, "k.weight", d->h,
                                        d->kv * d->d / d->t, err) ||
                 vs_block_linear_weight(blk, d, "v.weight", d->h,
                                        d->kv * d->d / d->t, err)
             ? VS_EINPUT
             : 0;
}

/* How a latent attention linear runs over tp ranks (Megatron-LM's
 * MLASelfAttention): duplicated (the down projections: every rank its
 * own tok_rep tokens, the whole weight), column-parallel (the up
 * projections: heads split, the latent gathered over tp with sp) or
 * row-parallel (the output projection). */
typedef enum { MLA_DUPLICATED, MLA_COLUMN, MLA_ROW } mla_split;

/* Whether a linear saves its input for the weight gradient, or another op
 * keeps the same tensor. */
typedef enum { MLA_SAVES_INPUT, MLA_SHARES_INPUT } mla_input;

/* A linear of `in` to `out` features (this rank's share, split as
 * `split`), its weight, and its input kept for the weight gradient as
 * `input` says. */
static vs_op_spec *mla_linear(vs_block *blk, const vs_dims *d, const char *name,
                              uint64_t in, uint64_t out, mla_split split,
                              mla_input input, vs_error *err)
{
  char pname[VS_OP_NAME_MAX];
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  /* the rows each rank keeps of its input: a row-parallel input is the
   * rank's heads over every token, the others its sequence shard */
  uint64_t kept = split == MLA_ROW ? d->tokens : d->tok_rep;
  if (!op)
    return NULL;
  vs_block_as_matmul(op, split == MLA_DUPLICATED ? d->tok_rep : d->tokens, in,
                     out, d->e);
  if (split == MLA_COLUMN)
    vs_block_column_comms(op, d, d->tokens, in, SP_REGATHER);
  else if (split == MLA_ROW)
    vs_block_row_comms(op, d, d->tokens);
  snprintf(pname, sizeof pname, "%.16s.weight", name);
  if ((input == MLA_SAVES_INPUT &&
       vs_block_save_input(blk, op, d, kept * in, KEPT_FOR_WEIGHTS, err)) ||
      vs_block_linear_weight(blk, d, pname, in, out, err))
    return NULL;
  return op;
}

/* An RMSNorm over `width` features of the tokens (MLA's latent norms). */
static int mla_norm(vs_block *blk, const vs_dims *d, const char *name,
                    uint64_t width, vs_error *err)
{
  char pname[VS_OP_NAME_MAX];
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return VS_EINPUT;
  vs_block_as_elementwise(op, d->tok_rep * width, d->e, 8.0);
  op->bwd_kernels = NORM_BWD_KERNELS;
  snprintf(pname, sizeof pname, "%.16s.weight", name);
  return vs_block_save_act(blk, op, d->e * d->tok_rep * width, d->act_dtype,
                           err) ||
                 vs_block_param(blk, d, pname, 1, width, err)
             ? VS_EINPUT
             : 0;
}

/* Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1;
 * Megatron-LM's MLASelfAttention), one rank: the query through a latent
 * (down projection to q_lora_rank, RMSNorm, up to heads x (qk_head_dim +
 * qk_rope_head_dim)) or one projection; the keys and values through one
 * shared latent (down to kv_lora_rank + qk_rope_head_dim, RMSNorm of the
 * kv_lora_rank part, up to heads x (qk_head_dim + v_head_dim)), the
 * rotary key part shared by the heads; rotary embeddings (cos/sin tables,
 * nothing saved); flash attention over query/key heads of qk_head_dim +
 * qk_rope_head_dim and value heads of v_head_dim, saving Q, K (the shared
 * rotary part expanded to every head), V and the fp32 log-sum-exp; the
 * output projection from heads x v_head_dim. Each linear keeps its input
 * (the norm output once, for both down projections). With tp the heads
 * split: the down projections and latent norms run duplicated on each
 * rank's tok_rep tokens, the up projections are column-parallel (the
 * latents, and the shared rotary key part, gathered over tp with sp), the
 * output projection row-parallel. */
static int attention_mla(vs_block *blk, const vs_dims *d, vs_error *err)
{
  uint64_t a = d->a / d->t, dqk = d->dn + d->dr, cp_kept;
  vs_op_spec *op;
  /* the up projections read the latent norms' outputs (Megatron-LM's
   * MLA spec fuses them: TELayerNormColumnParallelLinear) */
  if (d->rq) {
    if (!mla_linear(blk, d, "q_down", d->h, d->rq, MLA_DUPLICATED,
                    MLA_SAVES_INPUT, err) ||
        mla_norm(blk, d, "q_norm", d->rq, err) ||
        !(op = mla_linear(blk, d, "q_up", d->rq, a * dqk, MLA_COLUMN,
                          MLA_SAVES_INPUT, err)))
      return VS_EINPUT;
    op->input_from_norm = d->fp8_lib == VS_FP8_TE;
  } else if (!mla_linear(blk, d, "q_proj", d->h, a * dqk, MLA_COLUMN,
                         MLA_SAVES_INPUT, err)) {
    return VS_EINPUT;
  }
  /* both down projections read the norm output; under Transformer
   * Engine's fp8 each keeps its own FP8 copy of it */
  if (!mla_linear(blk, d, "kv_down", d->h, d->rkv + d->dr, MLA_DUPLICATED,
                  vs_block_fp8_copies(d) ? MLA_SAVES_INPUT : MLA_SHARES_INPUT,
                  err) ||
      mla_norm(blk, d, "kv_norm", d->rkv, err) ||
      !(op = mla_linear(blk, d, "kv_up", d->rkv, a * (d->dn + d->dv),
                        MLA_COLUMN, MLA_SAVES_INPUT, err)))
    return VS_EINPUT;
  op->input_from_norm = d->fp8_lib == VS_FP8_TE;
  /* with sp the shared rotary key part is gathered with the latent, and
   * its gradient reduce-scattered with the latent's */
  if (d->sp) {
    op->fwd_before.bytes += d->e * d->tokens * d->dr;
    op->bwd_after.bytes += d->e * d->tokens * d->dr;
  }
  if (!(op = vs_block_add_op(blk, "flash_attn", err)))
    return VS_EINPUT;
  op->matmul = true;
  op->no_fp8 = true; /* as attention_flash's */
  /* QK^T over dqk and PV over dv: 2 b a s^2 (dqk + dv) forward, halved
   * when causal; backward 2.5 x (FlashAttention-2's count) */
  op->fwd_flops = 2.0 * (double)d->b * (double)a * (double)d->s *
                  (double)d->skv * (double)(dqk + d->dv) *
                  (d->causal ? CAUSAL_FLASH_FRACTION : 1.0);
  /* backward: S again and dQ, dK over d_qk, dP and dV over d_v
   * (FlashAttention-2's five matmuls; 2.5 x forward when they match) */
  op->bwd_flops = op->fwd_flops * (double)(3 * dqk + 2 * d->dv) /
                  (double)(dqk + d->dv);
  op->bwd_kernels = FLASH_BWD_KERNELS;
  op->flash = flash_shape(d, dqk);
  op->fwd_bytes =
      (double)d->e * (double)(d->tokens * a * (2 * dqk + 2 * d->dv));
  op->bwd_bytes = 2.0 * op->fwd_bytes;
  op->bwd_temp_bytes = d->e * d->tokens * a * (2 * dqk + d->dv);
  cp_kept =
      context_parallel(op, d, a, a * dqk, a * (dqk + d->dv) / 2, a * d->dv);
  if (vs_block_save_act(blk, op, d->e * d->tokens * a * (2 * dqk + d->dv),
                        d->act_dtype, err) ||
      flash_core_saves(blk, op, d, a, cp_kept, err))
    return VS_EINPUT; /* Q, K, V; LSE; Ulysses' head-group output */
  if (!mla_linear(blk, d, "attn_out_proj", a * d->dv, d->h, MLA_ROW,
                  MLA_SAVES_INPUT, err))
    return VS_EINPUT;
  return vs_block_dropout(blk, d, "attn_out_dropout", d->tok_rep * d->h, d->e,
                          VS_OUTSIDE_ATTN_CORE, err);
}

static int standard_attention(vs_block *blk, const vs_dims *d,
                              vs_error *err)
{
  uint64_t qkv_cols = (d->a + 2 * d->kv) * d->d / d->t;
  uint64_t ad = d->a * d->d / d->t; /* the heads' width on this rank */
  const vs_lora_linear qkv[] = {{VS_LORA_Q, d->a * d->d},
                                {VS_LORA_K, d->kv * d->d},
                                {VS_LORA_V, d->kv * d->d}};
  const vs_lora_linear out[] = {{VS_LORA_O, d->h}};
  /* flash attention keeps its output, the output projection's input */
  vs_input_keeper out_keeper = d->eager ? KEPT_FOR_WEIGHTS : KEPT_BY_ANOTHER;
  if (!vs_block_column_parallel(blk, d, "qkv_proj", qkv_cols, d->qkv_casts,
                                err))
    return VS_EINPUT;
  if (qkv_weights(blk, d, qkv_cols, err) ||
      (d->qkv_bias && vs_block_param(blk, d, "qkv.bias", 1, qkv_cols, err)))
    return VS_EINPUT;
  vs_block_rope(&blk->ops[blk->n_ops - 1], d);
  if (vs_block_lora_adapter(blk, d, "lora_qkv", d->h, KEPT_FOR_WEIGHTS, qkv, 3,
                            err) ||
      (d->qk_norm && (vs_block_head_norm(blk, d, "q_norm", d->a, err) ||
                      vs_block_head_norm(blk, d, "k_norm", d->kv, err))))
    return VS_EINPUT;
  if ((d->eager ? attention_eager : attention_flash)(blk, d, err))
    return VS_EINPUT;
  if (!vs_block_row_parallel(blk, d, "attn_out_proj", ad, out_keeper, err))
    return VS_EINPUT;
  if (vs_block_linear_weight(blk, d, "attn_out.weight", ad, d->h, err) ||
      (d->out_bias && vs_block_param(blk, d, "attn_out.bias", 1, d->h, err)) ||
      vs_block_lora_adapter(blk, d, "lora_o", ad, out_keeper, out, 1, err))
    return VS_EINPUT;
  return vs_block_dropout(blk, d, "attn_out_dropout", d->tok_rep * d->h, d->e,
                          VS_OUTSIDE_ATTN_CORE, err);
}

/* A layer's attention: standard (MHA, GQA) or latent (MLA). */
static int attention_block(vs_block *blk, const vs_dims *d, vs_error *err)
{
  if (d->rkv)
    return attention_mla(blk, d, err);
  return standard_attention(blk, d, err);
}


/* Whether a layer's GeLU is GPT-2's NewGELUActivation, which framework =
 * hf runs as Python ops (transformers' activations.py: 0.5 x (1 +
 * tanh(sqrt(2/pi) (x + 0.044715 x^3)))) with eager kernels; else one
 * kernel (F.gelu; BERT's; compiled, kernels = fused, as the eager RMSNorm
 * compiled saves what a fused norm does). */
static bool new_gelu(const vs_dims *d, int role)
{
  return d->hf_modules && d->eager_kernels && role == VS_ROLE_LAYER &&
         !d->bert;
}

/* Bytes a GeLU saves per element of its input: the input, as a fused
 * kernel; NewGELU keeps x for pow, the tanh output t, 0.5x and 1 + t: 4
 * tensors of the input's dtype, and under autocast (pow on its fp32 list)
 * x's fp32 copy, t and 1 + t in fp32 beside the 16-bit 0.5x: 14 bytes. */
static uint64_t gelu_saved(const vs_dims *d, int role)
{
  if (!new_gelu(d, role))
    return d->e;
  return d->amp ? 4 + 4 + d->e + 4 : 4 * d->e;
}

/* NewGELU's kernels, as autograd runs them eagerly (the lists checked
 * with torch.profiler on the CPU, autocast's casts placed where CUDA's
 * autocast_mode.cpp puts them: pow.Tensor_Scalar on its fp32 list), per
 * element of e bytes (w = 4, fp32):
 * - forward: 0.5x (2e), pow (2e), its 0.044715 product (2e), the sum
 *   with x (3e), the sqrt(2/pi) product (2e), tanh (2e), 1 + t (2e), the
 *   final product (3e): 8 kernels, 18e. Under autocast x's fp32 cast
 *   comes first (e + w) and everything after it is fp32 but 0.5x: 9
 *   kernels, 5e + 15w; the down projection then casts the fp32 result
 *   to 16 bits (w + e, a kernel of its own, counted here);
 * - backward: the product's two gradients (6e), tanh_backward (3e), the
 *   two scalar products (4e), pow_backward's x^2, its 3x and the product
 *   with the gradient (7e), the 0.5 product (2e) and the two sums of x's
 *   three gradients (6e): 11 kernels, 28e. Under autocast the gradients
 *   of the fp32 ops are fp32 (22w of them) and three casts bring x's
 *   back to 16 bits: 14 kernels, 12e + 22w, and the down projection's
 *   cast back to fp32 (e + w). */
static void new_gelu_kernels(vs_op_spec *op, const vs_dims *d, uint64_t elems)
{
  double n = (double)elems, e = (double)d->e, w = 4.0;
  if (!d->amp) {
    op->fwd_bytes = n * 18.0 * e;
    op->bwd_bytes = n * 28.0 * e;
    op->fwd_kernels = 8;
    op->bwd_kernels = 11;
    return;
  }
  op->fwd_bytes = n * (5.0 * e + 15.0 * w + (w + e));
  op->bwd_bytes = n * (12.0 * e + 22.0 * w + (e + w));
  op->fwd_kernels = 9 + 1;
  op->bwd_kernels = 14 + 1;
}

/* An MLP's down projection from its f (per tensor-parallel rank) hidden
 * units back to the model width, with its bias and LoRA adapter, and the
 * dropout after it. */
static int mlp_down(vs_block *blk, const vs_dims *d, uint64_t f, vs_error *err)
{
  const vs_lora_linear down[] = {{VS_LORA_DOWN, d->h}};
  if (!vs_block_row_parallel(blk, d, "mlp_down", f, KEPT_FOR_WEIGHTS, err) ||
      vs_block_linear_weight(blk, d, "mlp_down.weight", f, d->h, err) ||
      (d->mlp_bias && vs_block_param(blk, d, "mlp_down.bias", 1, d->h, err)) ||
      vs_block_lora_adapter(blk, d, "lora_down", f, KEPT_FOR_WEIGHTS, down, 1,
                            err))
    return VS_EINPUT;
  return vs_block_dropout(blk, d, "mlp_dropout", d->tok_rep * d->h, d->e,
                          VS_OUTSIDE_ATTN_CORE, err);
}

/* GPT / BERT MLP: up, GeLU, down, dropout: 19sbh at 16 bits (Korthikanti). */
static int gelu_mlp(vs_block *blk, const vs_dims *d, vs_error *err)
{
  uint64_t f = d->f / d->t;
  const vs_lora_linear up[] = {{VS_LORA_UP, f}};
  vs_op_spec *op;
  if (!vs_block_column_parallel(blk, d, "mlp_up", f, 1, err) ||
      vs_block_linear_weight(blk, d, "mlp_up.weight", d->h, f, err) ||
      (d->mlp_bias && vs_block_param(blk, d, "mlp_up.bias", 1, f, err)) ||
      vs_block_lora_adapter(blk, d, "lora_up", d->h, KEPT_FOR_WEIGHTS, up, 1,
                            err))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, "gelu", err)))
    return VS_EINPUT;
  vs_block_as_elementwise(op, d->tokens * f, d->e, 8.0);
  if (new_gelu(d, blk->role))
    new_gelu_kernels(op, d, d->tokens * f);
  if (vs_block_save_act(blk, op, gelu_saved(d, blk->role) * d->tokens * f,
                        d->act_dtype, err))
    return VS_EINPUT;
  if (d->amp && gelu_saved(d, blk->role) != d->e)
    op->fwd_temp_bytes += 4 * d->tokens * f; /* its fp32 output, until the
                                                down projection's cast */
  return mlp_down(blk, d, f, err);
}

/* Llama MLP: gate and up projections, SiLU(gate) * up, down projection. */
static int swiglu_mlp(vs_block *blk, const vs_dims *d, vs_error *err)
{
  uint64_t f = d->f / d->t;
  const vs_lora_linear gate_up[] = {{VS_LORA_GATE, f}, {VS_LORA_UP, f}};
  vs_op_spec *op;
  if (!vs_block_column_parallel(blk, d, "mlp_gate_up", 2 * f, d->up_casts,
                                err) ||
      vs_block_linear_weight(blk, d, "mlp_gate.weight", d->h, f, err) ||
      vs_block_linear_weight(blk, d, "mlp_up.weight", d->h, f, err) ||
      (d->mlp_bias && (vs_block_param(blk, d, "mlp_gate.bias", 1, f, err) ||
                       vs_block_param(blk, d, "mlp_up.bias", 1, f, err))) ||
      vs_block_lora_adapter(blk, d, "lora_gate_up", d->h, KEPT_FOR_WEIGHTS,
                            gate_up, 2, err))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, "silu", err)))
    return VS_EINPUT;
  vs_block_as_elementwise(op, d->tokens * f, d->e, 4.0);
  if (vs_block_save_act(blk, op, d->e * d->tokens * f, d->act_dtype, err))
    return VS_EINPUT; /* gate, for SiLU's backward */
  if (!(op = vs_block_add_op(blk, "swiglu_mul", err)))
    return VS_EINPUT;
  vs_block_as_elementwise(op, d->tokens * f, d->e, 1.0);
  if (d->eager_kernels) { /* a product of two: reads both; backward a
                             kernel for each factor's gradient */
    op->fwd_bytes = (double)(3 * d->e * d->tokens * f);
    op->bwd_bytes = 2.0 * op->fwd_bytes;
    op->bwd_kernels = 2;
  }
  if (vs_block_save_act(blk, op, 2 * d->e * d->tokens * f, d->act_dtype, err))
    return VS_EINPUT; /* SiLU(gate) and up */
  return mlp_down(blk, d, f, err);
}

/* ------------------------------------------------------------------------
 * Mixture of experts (Megatron-LM's MoE layer: megatron/core/transformer/
 * moe; shared/reference/frameworks.md 8). With expert tensor parallelism
 * (expert_tensor_parallel_size, etp; tp by default, with sequence
 * parallelism) as Megatron-LM runs it: each rank routes its tok_rep
 * tokens, the all-to-all brings it `arrived` slots, the etp ranks gather
 * theirs (each then holds all d->slots of its experts), each expert's fc1
 * is split by columns and fc2 by rows over etp, and fc2's partial sums
 * are reduce-scattered back before the all-to-all returns. The etp ranks
 * route different tokens whatever tp is (under tp, sequence parallelism;
 * across data-parallel ranks otherwise), so their collectives are always
 * the sequence-parallel ones.
 * ------------------------------------------------------------------------ */

/* Each of the rank's routed experts' (E / ep) rows x cols weight `which`
 * ("fc1", "fc2") and, with `bias`, its bias of cols, for the newest op;
 * their states shard over the expert-data-parallel group. */
static int expert_weights(vs_block *blk, const vs_dims *d, const char *which,
                          uint64_t rows, uint64_t cols, bool bias,
                          vs_error *err)
{
  for (uint64_t x = 0; x < d->experts / d->ep; x++) {
    char name[VS_OP_NAME_MAX];
    snprintf(name, sizeof name, "e%u.%.3s", (unsigned)x, which);
    if (vs_block_param(blk, d, name, rows, cols, err))
      return VS_EINPUT;
    blk->params[blk->n_params - 1].shard_group = VS_GROUP_EXPERT_DP;
    snprintf(name, sizeof name, "e%u.%.3s.bias", (unsigned)x, which);
    if (bias && vs_block_param(blk, d, name, 1, cols, err))
      return VS_EINPUT;
    if (bias)
      blk->params[blk->n_params - 1].shard_group = VS_GROUP_EXPERT_DP;
  }
  return 0;
}

/* A routed expert GEMM over d->slots token slots as the grouped GEMM that
 * runs it: one product per local expert, each on its share of the slots
 * (balanced; a skewed rank's hottest expert sets the slots). */
static void grouped(vs_op_spec *op, const vs_dims *d)
{
  uint64_t local = d->experts / d->ep;
  op->routed = true;
  op->no_fp8 = d->fp8_lib == VS_FP8_TORCHAO;
  op->gemm.batch = local;
  op->gemm.m = vs_div_ceil(op->gemm.m, local);
}

/* d as the routed experts see it: split over the etp ranks (the tp
 * group itself when etp = tp), whose tokens differ. */
static vs_dims expert_dims(const vs_dims *d)
{
  vs_dims x = *d;
  if (d->et != d->t) {
    x.t = d->et;
    x.tp_group = VS_GROUP_ETP;
    x.sp = true;
  }
  return x;
}

/* The routed experts' FFN on d->slots token slots, as one grouped GEMM
 * pair: fc1 (gate and up when gated, else up), the activation, fc2; each
 * expert's own weights (and biases unless gated). Saves what the dense
 * MLP's ops save, on the slots: fc1's input (the permuted tokens), the
 * activation's inputs, fc2's input. */
static int routed_experts(vs_block *blk, const vs_dims *dense, bool gated,
                          vs_error *err)
{
  vs_dims x = expert_dims(dense);
  const vs_dims *d = &x;
  uint64_t fe = d->fe / d->t, fc1 = gated ? 2 * fe : fe, n = d->slots;
  vs_op_spec *op;
  if (!(op = vs_block_add_op(blk, "experts_fc1", err)))
    return VS_EINPUT;
  vs_block_as_matmul(op, n, d->h, fc1, d->e);
  grouped(op, d);
  /* the etp ranks' slots gathered in forward, kept whole for backward */
  vs_block_column_comms(op, d, n, d->h, SP_KEEPS_GATHERED);
  if (vs_block_save_input(blk, op, d, n * d->h, KEPT_FOR_WEIGHTS, err))
    return VS_EINPUT;
  if (expert_weights(blk, d, "fc1", d->h, fc1, d->mlp_bias, err))
    return VS_EINPUT;
  if (!(op =
            vs_block_add_op(blk, gated ? "experts_silu" : "experts_gelu", err)))
    return VS_EINPUT;
  vs_block_as_elementwise(op, n * fe, d->e, gated ? 4.0 : 8.0);
  op->routed = true;
  if (vs_block_save_act(blk, op, d->e * n * fe, d->act_dtype, err))
    return VS_EINPUT; /* the gate (SiLU's input), or GeLU's input */
  if (gated) {
    if (!(op = vs_block_add_op(blk, "experts_mul", err)))
      return VS_EINPUT;
    vs_block_as_elementwise(op, n * fe, d->e, 1.0);
    op->routed = true;
    if (vs_block_save_act(blk, op, 2 * d->e * n * fe, d->act_dtype, err))
      return VS_EINPUT; /* SiLU(gate) and up */
  }
  if (!(op = vs_block_add_op(blk, "experts_fc2", err)))
    return VS_EINPUT;
  vs_block_as_matmul(op, n, fe, d->h, d->e);
  grouped(op, d);
  vs_block_row_comms(op, d,
                     n); /* partial sums reduce-scattered to arrived slots */
  /* with tp they are un-sorted into a new buffer first (combine_preprocess) */
  if (d->t > 1)
    op->fwd_temp_bytes += d->e * n * d->h;
  if (vs_block_save_input(blk, op, d, n * fe, KEPT_FOR_WEIGHTS, err))
    return VS_EINPUT;
  return expert_weights(blk, d, "fc2", fe, d->h, d->mlp_bias, err);
}

/* The shared experts' sigmoid gate (Qwen2-MoE's shared_expert_gate,
 * Megatron-LM's moe_shared_expert_gate, SharedExpertMLP.forward's
 * F.linear of gate_weight, in 16 bits under fp8): a linear of the norm output
 * the router keeps to one score a token (a weight of hidden, replicated), its
 * sigmoid, and the product with the shared experts' output, which keeps
 * both factors for backward: the score and the output (after fc2's
 * reduction, on the rank's tok_rep tokens). */
static int shared_expert_gate(vs_block *blk, const vs_dims *d, vs_error *err)
{
  vs_op_spec *op = vs_block_add_op(blk, "shared_gate", err);
  if (!op)
    return VS_EINPUT;
  vs_block_as_matmul(op, d->tok_rep, d->h, 1, d->e);
  op->no_fp8 = true; /* F.linear, no Transformer Engine module */
  if (vs_block_param(blk, d, "shared.gate", 1, d->h, err) ||
      !(op = vs_block_add_op(blk, "shared_gate_mul", err)))
    return VS_EINPUT;
  vs_block_as_elementwise(op, d->tok_rep * d->h, d->e, 1.0);
  return vs_block_save_act(blk, op, d->e * d->tok_rep * (d->h + 1),
                           d->act_dtype, err);
}

/* The shared experts (DeepSeek, Qwen-MoE): one dense MLP of their total
 * width d->fs on every token, reading the norm output the router keeps. */
static int shared_experts(vs_block *blk, const vs_dims *d, bool gated,
                          vs_error *err)
{
  uint64_t t = d->tokens, fs = d->fs / d->t, fc1 = gated ? 2 * fs : fs;
  vs_op_spec *op;
  if (d->fs == 0)
    return 0;
  /* a tensor-parallel MLP (Megatron-LM's SharedExpertMLP) */
  if (!(op = vs_block_add_op(blk, "shared_fc1", err)))
    return VS_EINPUT;
  vs_block_as_matmul(op, t, d->h, fc1, d->e);
  vs_block_column_comms(op, d, t, d->h, SP_REGATHER);
  /* under fp8 its own FP8 copy of the norm output the router keeps */
  if (vs_block_fp8_copies(d) &&
      vs_block_save_input(blk, op, d, d->tok_rep * d->h, KEPT_FOR_WEIGHTS, err))
    return VS_EINPUT;
  if (vs_block_param(blk, d, "shared.fc1", d->h, fc1, err) ||
      (d->mlp_bias && vs_block_param(blk, d, "shared.fc1.bias", 1, fc1, err)))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, gated ? "shared_silu" : "shared_gelu", err)))
    return VS_EINPUT;
  vs_block_as_elementwise(op, t * fs, d->e, gated ? 4.0 : 8.0);
  if (vs_block_save_act(blk, op, (gated ? 3 : 1) * d->e * t * fs, d->act_dtype,
                        err))
    return VS_EINPUT; /* gate, SiLU(gate) and up; or GeLU's input */
  if (!(op = vs_block_add_op(blk, "shared_fc2", err)))
    return VS_EINPUT;
  vs_block_as_matmul(op, t, fs, d->h, d->e);
  vs_block_row_comms(op, d, t);
  if (vs_block_save_input(blk, op, d, t * fs, KEPT_FOR_WEIGHTS, err) ||
      vs_block_param(blk, d, "shared.fc2", fs, d->h, err) ||
      (d->mlp_bias && vs_block_param(blk, d, "shared.fc2.bias", 1, d->h, err)))
    return VS_EINPUT;
  return d->shared_gate ? shared_expert_gate(blk, d, err) : 0;
}

/* An all-to-all over the expert-parallel group (Megatron-LM's alltoall
 * token dispatcher), of the rank's `bytes`. */
static void ep_comm(vs_comm *c, uint64_t bytes)
{
  c->kind = VS_COLL_ALL_TO_ALL;
  c->group = VS_GROUP_EP;
  c->bytes = bytes;
}

/* An MoE MLP (Megatron-LM's MoELayer with its TopKRouter and the
 * token dispatcher's permute/unpermute, on one rank): the router's linear
 * (h x E, replicated) saves the norm output (which the shared experts
 * read too); its fp32 softmax keeps its output (T x E) and top-k its
 * int64 indices (T x k); the dispatch permutes the tokens into the
 * experts' slots (keeping the int64 sorted indices for the backward's
 * un-permute) and, with ep > 1, sends each copy to its expert's rank
 * (all-to-all); the routed experts run on the slots the rank receives;
 * the combine brings their outputs back, scales each by its routing
 * probability (keeping the outputs and the fp32 probabilities) and sums
 * them per token. The
 * auxiliary load-balancing loss keeps per-expert figures (E floats): not
 * counted. */
static int moe_mlp(vs_block *blk, const vs_dims *d, vs_error *err)
{
  bool gated = d->gated_mlp;
  uint64_t t = d->tok_rep, n = d->arrived;
  /* each all-to-all lasts as long as the larger of what the rank sends
   * and receives (the hot rank receives more than it sends) */
  uint64_t moved = d->e * (d->sent > n ? d->sent : n) * d->h;
  vs_op_spec *op;
  /* the router is no Transformer Engine module (Megatron-LM's TopKRouter
   * multiplies by its weight with torch's own linear) */
  if (!(op = vs_block_add_op(blk, "router", err)))
    return VS_EINPUT;
  vs_block_as_matmul(op, t, d->h, d->experts, d->e);
  op->no_fp8 = true;
  if (vs_block_save_input(blk, op, d, t * d->h,
                          d->fs && !vs_block_fp8_copies(d) ? KEPT_BY_ANOTHER
                                                           : KEPT_FOR_WEIGHTS,
                          err) ||
      vs_block_param(blk, d, "router.weight", d->h, d->experts, err))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, "router_topk", err)))
    return VS_EINPUT;
  vs_block_as_elementwise(op, t * d->experts, 4, 6.0);
  if (vs_block_save_act(blk, op, 4 * t * d->experts, VS_DTYPE_FP32, err) ||
      vs_block_save_act(blk, op, 8 * t * d->topk, VS_DTYPE_INT64, err))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, "moe_dispatch", err)))
    return VS_EINPUT;
  op->fwd_bytes = (double)(d->e * (t + d->sent) * d->h);
  op->bwd_bytes = op->fwd_bytes;
  op->bwd_temp_bytes = d->e * t * d->h;
  if (d->ep > 1) { /* the permuted copies go to their experts' ranks,
                      and what arrives is sorted by local expert into a
                      new buffer (sort_chunks_by_idxs) */
    op->fwd_temp_bytes = moved + d->e * n * d->h;
    ep_comm(&op->fwd_after, moved);
    ep_comm(&op->bwd_before, moved);
  }
  /* with etp what arrived is gathered over etp before the sort
   * (Megatron-LM's dispatch_postprocess): the gathered, unsorted slots
   * beside it */
  if (d->et > 1)
    op->fwd_temp_bytes += d->e * d->slots * d->h;
  if (vs_block_save_act(blk, op, 8 * d->sent, VS_DTYPE_INT64, err) ||
      routed_experts(blk, d, gated, err))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, "moe_combine", err)))
    return VS_EINPUT;
  vs_block_as_elementwise(op, d->sent * d->h, d->e, 2.0);
  if (d->ep > 1) { /* the experts' outputs go back to their tokens' ranks */
    op->fwd_temp_bytes = d->e * n * d->h;
    ep_comm(&op->fwd_before, moved);
    ep_comm(&op->bwd_after, moved);
  }
  if (vs_block_save_act(blk, op, d->e * d->sent * d->h, d->act_dtype, err) ||
      vs_block_save_act(blk, op, 4 * d->sent, VS_DTYPE_FP32, err) ||
      shared_experts(blk, d, gated, err))
    return VS_EINPUT;
  return vs_block_dropout(blk, d, "mlp_dropout", d->tok_rep * d->h, d->e,
                          VS_OUTSIDE_ATTN_CORE, err);
}

/* torchtitan's op-level selective checkpointing (checkpointing = ops;
 * shared/reference/frameworks.md 4.1-4.2, torchtitan 9dec370): in a
 * Llama block the matmuls run wq 1, wk 2, wv 3, wo 4, w1 5, w3 6, w2 7 and
 * the odd ones' outputs are saved, with the SDPA output and its fp32
 * log-sum-exp; everything else is recomputed. The block keeps its input
 * and those outputs, 2T(4h + h_kv + f) + 4bas at 16 bits; its recompute
 * re-runs wk (of the fused qkv), wo, w3 (of the fused gate/up) and the
 * element-wise ops, not flash attention, wq, wv, w1 or w2. With heads
 * of another width d than h / a, wq's and SDPA's outputs are ad wide:
 * 2T(2h + 2ad + h_kv + f). (Validated conditions: llama, flash, tp = 1;
 * workload.c refuses the rest.) */
static void op_level_checkpointing(vs_block *blk, const vs_dims *d)
{
  uint64_t hkv = d->kv * d->d, ad = d->a * d->d;
  blk->ckpt_bytes = d->e * d->tokens * (2 * d->h + 2 * ad + hkv + d->f) +
                    4 * d->b * d->a * d->s;
  for (uint32_t i = 0; i < blk->n_ops; i++) {
    vs_op_spec *op = &blk->ops[i];
    if (strcmp(op->name, "qkv_proj") == 0)
      op->recompute_share = (double)hkv / (double)(ad + 2 * hkv); /* wk */
    else if (strcmp(op->name, "mlp_gate_up") == 0)
      op->recompute_share = 0.5; /* w3 */
    else if (strcmp(op->name, "flash_attn") == 0 ||
             strcmp(op->name, "mlp_down") == 0)
      op->recompute_share = 0.0;
  }
}

int vs_model_build_layer(vs_block *blk, const vs_workload *wl, const vs_dims *d,
                         vs_mlp_kind mlp, vs_error *err)
{
  blk->input_bytes = d->er * d->tok_rep * d->h;
  blk->ckpt_bytes = blk->input_bytes;
  if (vs_block_norm(blk, d, "norm1", d->norm, err) ||
      attention_block(blk, d, err) ||
      (d->post_norms && vs_block_post_norm(blk, d, "attn_post_norm", err)))
    return VS_EINPUT;
  vs_block_residual_add(&blk->ops[blk->n_ops - 1], d);
  if (vs_block_norm(blk, d, "norm2", d->norm, err))
    return VS_EINPUT;
  if (mlp == MLP_MOE ? moe_mlp(blk, d, err)
                     : (d->gated_mlp ? swiglu_mlp : gelu_mlp)(blk, d, err))
    return VS_EINPUT;
  if (d->post_norms && vs_block_post_norm(blk, d, "mlp_post_norm", err))
    return VS_EINPUT;
  vs_block_residual_add(&blk->ops[blk->n_ops - 1], d);
  if (wl->training.checkpointing == VS_CKPT_OPS)
    op_level_checkpointing(blk, d);
  return 0;
}

/* A lookup of the tokens' rows in the vocabulary-parallel word
 * embeddings: each rank holds vocab / tp rows and the partial rows are
 * summed over tp (reduce-scattered with sp); the lookup gives the
 * weights' dtype, fp32 under autocast. Adds no parameter. */
static vs_op_spec *embedding_lookup(vs_block *blk, const vs_dims *d,
                                    const char *name, vs_error *err)
{
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return NULL;
  vs_block_as_elementwise(op, d->tokens * d->h, d->er, 1.0);
  op->bwd_temp_bytes = d->er * d->tokens * d->h;
  vs_block_comm(&op->fwd_after, d,
                d->sp ? VS_COLL_REDUCE_SCATTER : VS_COLL_ALL_REDUCE,
                d->e * d->tokens * d->h);
  return op;
}

/* Input batch and embeddings. Token ids and labels are int64 (8 bytes);
 * BERT also carries token types and an attention mask. */
int vs_model_build_embed(vs_block *blk, const vs_workload *wl, const vs_dims *d,
                         vs_error *err)
{
  vs_arch arch = (vs_arch)wl->model.arch;
  vs_op_spec *op = vs_block_add_op(blk, "input_batch", err);
  if (!op)
    return VS_EINPUT;
  if (vs_block_save_act(blk, op,
                        (arch == VS_ARCH_BERT ? 4u : 2u) * 8u * d->tokens,
                        VS_DTYPE_INT64, err))
    return VS_EINPUT;
  op->fwd_bytes = (double)(16 * d->tokens);

  if (!embedding_lookup(blk, d, "embedding", err) ||
      vs_block_param(blk, d, "word_embeddings", d->vocab / d->t, d->h, err))
    return VS_EINPUT;
  if (d->positions &&
      vs_block_param(blk, d, "position_embeddings", d->positions, d->h, err))
    return VS_EINPUT;
  if (arch == VS_ARCH_BERT) {
    if (vs_block_param(blk, d, "token_type_embeddings", d->type_vocab, d->h,
                       err) ||
        vs_block_norm(blk, d, "embed_norm", NORM_LAYER, err))
      return VS_EINPUT;
  }
  return vs_block_dropout(blk, d, "embed_dropout", d->tok_rep * d->h, d->er,
                          VS_OUTSIDE_ATTN_CORE, err);
}

/* How the loss treats the logits, from its source:
 * - LOSS_ATEN, PyTorch's F.cross_entropy on logits.float(): the logits
 *   and their fp32 copy (none for fp32 logits) transient in forward, a
 *   saved fp32 log-softmax, and in backward two fp32 gradients together:
 *   F.cross_entropy is log_softmax then nll_loss (aten
 *   cross_entropy_loss), nll_loss's backward fills a dense zeroed
 *   gradient of the log-probabilities (LossNLL.cpp, grad_input.zero_())
 *   and log_softmax's backward writes a new one of the logits
 *   (log_softmax_backward_data, empty_like) while that and the saved
 *   log-softmax are held.
 * - LOSS_INPLACE, Megatron-LM's vocab-parallel cross entropy
 *   (megatron/core/tensor_parallel/cross_entropy.py): logits.float(), then
 *   max subtracted, exp and the division in place, that buffer saved as
 *   the softmax, the gradient computed in it.
 * - LOSS_PARALLEL, torchtitan with tp > 1 (loss_parallel on by default;
 *   torch/distributed/tensor/parallel/loss.py): _log_softmax holds the
 *   fp32 logits, the max-shifted copy and its exp together (one fp32 copy
 *   more than aten in forward), and the fused
 *   _nll_loss_and_log_softmax_backward holds a zeroed gradient, exp of the
 *   saved log-softmax and their sum (one more in backward).
 * - LOSS_FUSED ([training] fused_cross_entropy: Liger Kernel's
 *   LigerCrossEntropy) computes the logits' gradient during forward, row
 *   by row in fp32 registers, into the 16-bit logits' own buffer, which
 *   the output layer's backward then reads: no fp32 copy, nothing saved
 *   beside the logits. */
typedef enum { LOSS_ATEN, LOSS_INPLACE, LOSS_PARALLEL, LOSS_FUSED } loss_kind;

static loss_kind loss_of(const vs_workload *wl)
{
  if (wl->training.fused_cross_entropy)
    return LOSS_FUSED;
  if (wl->training.framework == VS_FW_MEGATRON)
    return LOSS_INPLACE;
  if (wl->training.framework == VS_FW_FSDP2 && wl->parallel.tp > 1)
    return LOSS_PARALLEL;
  return LOSS_ATEN;
}

/* Whether the 16-bit logits stay allocated until the output layer's
 * backward. The fused loss leaves their gradient in them. A pipeline
 * schedule whose last stage returns the logits holds them until that
 * micro-batch's backward: torch.distributed.pipelining (FSDP2, stage.py
 * forward_one_chunk keeps the output in fwd_cache) and DeepSpeed's
 * PipelineEngine (pipe_buffers['outputs']). Elsewhere they go before
 * backward: torchtitan's train.py deletes them, the Hugging Face
 * Trainer's compute_loss returns the loss alone, Megatron-LM's last
 * stage returns the loss. */
static bool logits_kept(const vs_workload *wl)
{
  vs_framework fw = (vs_framework)wl->training.framework;
  return wl->training.fused_cross_entropy ||
         (wl->parallel.pp > 1 && (fw == VS_FW_FSDP2 || fw == VS_FW_DEEPSPEED));
}

/* The kernels of the loss over logits of e bytes (see loss_of), bytes
 * per logit read and written, besides a few on one value a row (the
 * targets' gather, the log, the row's all-reduces): logits.float() a
 * kernel each way (e + 4; none for fp32 logits, which it returns, nor
 * for the backward cast autograd's engine makes to the input's dtype,
 * validate_outputs).
 * - LOSS_INPLACE, Megatron-LM's (megatron/core/tensor_parallel/
 *   cross_entropy.py): the max over the row (4), the max subtracted in
 *   place (8), exp in place (8), the row's sum (4), the division in place
 *   (8); backward scales the saved softmax in place (8).
 * - LOSS_PARALLEL, torchtitan's loss_parallel (torch/distributed/tensor/
 *   parallel/loss.py): _log_softmax's amax (4), x - max (8), exp (8), sum
 *   (4) and the shifted minus the log-sum-exp (8); backward
 *   _nll_loss_and_log_softmax_backward's zeroed gradient (4), exp of the
 *   saved log-softmax (8), their sum (12) and the scaling by the loss's
 *   gradient (8).
 * - LOSS_ATEN: log_softmax (8); backward nll_loss's zeroed gradient (4)
 *   and log_softmax's backward (12).
 * The fused loss (LOSS_FUSED) is one kernel forward over the 16-bit
 * logits, and scales its gradient in place in backward. */
static void loss_kernels(vs_op_spec *op, loss_kind kind, uint64_t e,
                         uint64_t logits)
{
  /* bytes a logit and kernels, forward and backward, before the casts */
  static const struct {
    double fwd, bwd;
    uint8_t fwd_kernels, bwd_kernels;
  } work[] = {[LOSS_ATEN] = {8.0, 16.0, 1, 2},
              [LOSS_INPLACE] = {32.0, 8.0, 5, 1},
              [LOSS_PARALLEL] = {32.0, 32.0, 5, 4}};
  double n = (double)logits, cast = e == 4 ? 0.0 : (double)(e + 4);
  uint8_t casts = e == 4 ? 0 : 1;
  op->fwd_bytes = n * (work[kind].fwd + cast);
  op->bwd_bytes = n * (work[kind].bwd + cast);
  op->fwd_kernels = (uint8_t)(work[kind].fwd_kernels + casts);
  op->bwd_kernels = (uint8_t)(work[kind].bwd_kernels + casts);
}

/* The loss over `logits` elements (see loss_of). Bytes per logit: c for
 * logits.float()'s copy (0 when they are fp32 already, as it then returns
 * them), the saved fp32 log-softmax or softmax, and the forward's and
 * backward's temporaries beside it; logits kept by the output layer
 * (logits_kept) are not the loss's. */
static int cross_entropy(vs_block *blk, const vs_workload *wl, const vs_dims *d,
                         uint64_t logits, const char *name, vs_error *err)
{
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  loss_kind kind = loss_of(wl);
  uint64_t c = d->act_dtype == VS_DTYPE_FP32 ? 0 : 4;
  uint64_t own = logits_kept(wl) ? 0 : d->e;
  if (!op)
    return VS_EINPUT;
  if (kind == LOSS_FUSED) {
    vs_block_as_elementwise(op, logits, d->e, 6.0);
    op->bwd_flops = (double)logits; /* the gradient scaled in place */
    op->bwd_bytes = 2.0 * (double)(d->e * logits);
    op->bwd_temp_bytes = 0;
    return 0;
  }
  vs_block_as_elementwise(op, logits, 4, 6.0);
  loss_kernels(op, kind, c ? d->e : 4, logits);
  switch (kind) {
  case LOSS_INPLACE: /* 16-bit logits until cast; fp32 ones are the buffer */
    op->fwd_temp_bytes = (c ? own : 0) * logits;
    op->bwd_temp_bytes = 0;
    break;
  case LOSS_PARALLEL: /* the copy, shifted and exp; zeros, exp, sum */
    op->fwd_temp_bytes = (own + c + 4) * logits;
    op->bwd_temp_bytes = 12 * logits;
    break;
  default: /* the copy; nll_loss's and log_softmax's gradients, each a
              * tensor of its own */
    op->fwd_temp_bytes = (own + c) * logits;
    op->fwd_temp_first = own && c ? own * logits : 0;
    op->bwd_temp_bytes = 8 * logits;
    op->bwd_temp_first = 4 * logits;
    break;
  }
  if (vs_block_save(blk, op,
                    (vs_saved){.bytes = 4 * logits,
                               .dtype = VS_DTYPE_FP32,
                               .category = VS_CAT_TEMP},
                    err))
    return VS_EINPUT; /* fp32 softmax (in place) or log-softmax */
  return 0;
}

/* Whether the head holds an output weight of its own: untied, or tied
 * across a pipeline (the last stage keeps a copy, Megatron-LM). */
static bool own_head_weight(const vs_workload *wl)
{
  return !wl->model.tied_embeddings || wl->parallel.pp > 1;
}

/* The output layer over `name`'s tokens: logits = hidden @ W^T, tokens x
 * vocab / tp. Its input serves the output weight's gradient (the head's
 * own, or the embedding's when tied within one stage); the logits are
 * the loss's forward temporary (cross_entropy) unless kept to this
 * layer's backward (logits_kept). Adds no parameter. */
static vs_op_spec *output_layer(vs_block *blk, const vs_workload *wl,
                                const vs_dims *d, const char *name,
                                vs_error *err)
{
  uint64_t logits = d->tokens * (d->vocab / d->t);
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return NULL;
  vs_block_as_matmul(op, d->tokens, d->h, d->vocab / d->t, d->e);
  /* Megatron-LM's output layer is its own ColumnParallelLinear, no
   * Transformer Engine module (gpt_model.py); torchtitan's recipes leave
   * it out of float8 too (filter_fqns = ["output"], "lm_head") */
  op->no_fp8 = true;
  op->output_layer = true;
  op->embedding_grads = !own_head_weight(wl);
  if (vs_block_save_input(blk, op, d,
                          (d->sp_gathered ? d->tokens : d->tok_rep) * d->h,
                          KEPT_FOR_WEIGHTS, err))
    return NULL;
  if (logits_kept(wl) && vs_block_save(blk, op,
                                       (vs_saved){.bytes = d->e * logits,
                                                  .dtype = d->act_dtype,
                                                  .category = VS_CAT_TEMP},
                                       err))
    return NULL; /* logits, kept (logits_kept) */
  if (d->sp) {
    vs_block_comm(&op->fwd_before, d, VS_COLL_ALL_GATHER,
                  d->e * d->tokens * d->h);
    vs_block_comm(&op->bwd_after, d, VS_COLL_REDUCE_SCATTER,
                  d->e * d->tokens * d->h);
  } else {
    vs_block_comm(&op->bwd_after, d, VS_COLL_ALL_REDUCE,
                  d->e * d->tokens * d->h);
  }
  /* its input's gradient, and the logits' (a fused loss left it in the
   * logits' own buffer) */
  op->bwd_temp_bytes = d->e * d->tokens * d->h +
                       (wl->training.fused_cross_entropy ? 0 : d->e * logits);
  vs_block_autocast_input(op, d, 1, d->tok_rep * d->h);
  return op;
}

/* Under autocast the output layer's backward runs as three autograd
 * nodes, each freeing what it received before the next starts, and the
 * GEMM's freeing what it saved (the input's and the weight's 16-bit
 * copies) once it is done (the engine runs a node's successors after it,
 * the later-recorded cast first): the GEMM's, holding the logits'
 * gradient while it makes the input's and the weight's in 16 bits; the
 * weight cast's (ToCopyBackward), casting that weight gradient to fp32
 * for .grad (2 + 4 B a weight); the input cast's, casting the input's
 * gradient to fp32 for the residual stream. The input's 16-bit gradient
 * is held through all three. The op (block instance blk's op k) holds
 * the largest moment, not their sum; its saved tensors, which vsim frees
 * as the op ends, are gone for the two casts. weight_elems: the head's
 * weight (vocab x hidden on this rank). */
static void autocast_head_backward(vs_block *blk, uint32_t k,
                                   const vs_workload *wl, const vs_dims *d,
                                   uint64_t weight_elems)
{
  vs_op_spec *op = &blk->ops[k];
  uint64_t input = d->e * d->tokens * d->h, saved = 0, casts;
  uint64_t logits = wl->training.fused_cross_entropy
                        ? 0
                        : d->e * d->tokens * (d->vocab / d->t);
  uint64_t gemm = input + logits + 2 * weight_elems;
  uint64_t weight_cast = input + 6 * weight_elems;
  uint64_t input_cast = input + d->er * d->tok_rep * d->h;
  if (!d->amp || d->copy_dtype == VS_DTYPE_N)
    return;
  for (uint32_t s = op->first_saved; s < op->first_saved + op->n_saved; s++)
    saved += blk->saved[s].bytes;
  casts = weight_cast > input_cast ? weight_cast : input_cast;
  casts = casts > saved ? casts - saved : 0;
  op->bwd_temp_bytes = gemm > casts ? gemm : casts;
}

/* Whether the head keeps a copy of the word embeddings for the
 * multi-token prediction's lookups: with a pipeline, where the output
 * layer's weight is not already one (Megatron-LM builds the embedding on
 * the MTP stage too and all-reduces its gradient with the first stage's,
 * like a tied output layer's). */
static bool mtp_embedding_copy(const vs_workload *wl)
{
  return wl->model.mtp_layers > 0 && wl->parallel.pp > 1 &&
         !wl->model.tied_embeddings;
}

/* The next token's embedding for a multi-token prediction depth: the
 * shared word embeddings looked up again on the ids rolled by one
 * (Megatron-LM's roll_tensor), vocab-parallel as the first stage's. */
static int mtp_embedding(vs_block *blk, const vs_workload *wl, const vs_dims *d,
                         uint64_t depth, vs_error *err)
{
  if (!embedding_lookup(blk, d, "mtp_embedding", err))
    return VS_EINPUT;
  blk->ops[blk->n_ops - 1].embedding_grads = true;
  /* one copy serves every depth: the first one's lookup holds it; on a
   * stage of its own the module builds a whole embedding, learned
   * positions too (Megatron-LM's GPTModel builds LanguageModelEmbedding
   * where pre_process or mtp_process) */
  if (depth != 0 || wl->parallel.pp == 1)
    return 0;
  if (mtp_embedding_copy(wl) && vs_block_param(blk, d, "mtp_embeddings.weight",
                                               d->vocab / d->t, d->h, err))
    return VS_EINPUT;
  return d->positions ? vs_block_param(blk, d, "mtp_positions.weight",
                                       d->positions, d->h, err)
                      : 0;
}

/* eh_proj: the two normalized inputs concatenated (2h wide: torch.cat
 * saves nothing) and projected back to h, column-parallel; its sharded
 * output is gathered over tp (gather_from_tensor_model_parallel_region)
 * and, under sp, split by sequence again (whose backward all-gathers the
 * gradient). */
static int mtp_projection(vs_block *blk, const vs_dims *d, vs_error *err)
{
  uint64_t wide = 2 * d->tok_rep * d->h;
  vs_op_spec *op = vs_block_add_op(blk, "mtp_concat", err);
  if (!op)
    return VS_EINPUT;
  vs_block_as_elementwise(op, wide, d->er, 0.0);
  op->bwd_temp_bytes = 0; /* cat's backward hands out views */
  if (!(op = vs_block_add_op(blk, "mtp_eh_proj", err)))
    return VS_EINPUT;
  vs_block_as_matmul(op, d->tokens, 2 * d->h, d->h / d->t, d->e);
  vs_block_autocast_input(op, d, 1, wide);
  if (vs_block_save_input(blk, op, d, wide, KEPT_FOR_WEIGHTS, err))
    return VS_EINPUT;
  vs_block_column_comms(op, d, d->tokens, 2 * d->h, SP_REGATHER);
  if (vs_block_linear_weight(blk, d, "mtp_eh_proj.weight", d->h / d->t,
                             2 * d->h, err))
    return VS_EINPUT;
  if (d->t == 1)
    return 0;
  if (!(op = vs_block_add_op(blk, "mtp_eh_gather", err)))
    return VS_EINPUT;
  vs_block_as_elementwise(op, d->tokens * d->h, d->e, 0.0);
  vs_block_comm(&op->fwd_before, d, VS_COLL_ALL_GATHER,
                d->e * d->tokens * d->h);
  if (d->sp) { /* the gathered tensor, until split by sequence */
    op->fwd_temp_bytes = d->e * d->tokens * d->h;
    vs_block_comm(&op->bwd_before, d, VS_COLL_ALL_GATHER,
                  d->e * d->tokens * d->h);
  }
  return 0;
}

/* A layer like the model's last (DeepSeek-V3's MTP module holds an MoE
 * layer), its ops named "mtp_" + theirs; the head's input and checkpoint
 * sizes stay its own. */
static int mtp_layer(vs_block *blk, const vs_workload *wl, const vs_dims *d,
                     vs_error *err)
{
  uint64_t input = blk->input_bytes, ckpt = blk->ckpt_bytes;
  uint32_t first = blk->n_ops;
  vs_mlp_kind mlp = vs_workload_moe_layer(&wl->model, wl->model.layers - 1)
                        ? MLP_MOE
                        : MLP_DENSE;
  if (vs_model_build_layer(blk, wl, d, mlp, err))
    return VS_EINPUT;
  for (uint32_t i = first; i < blk->n_ops; i++) {
    /* the layers' names are at most 16 characters: all of each fits */
    char *name = blk->ops[i].name;
    size_t len = strnlen(name, sizeof blk->ops[i].name - 1);
    size_t keep =
        len + 4 < sizeof blk->ops[i].name ? len : sizeof blk->ops[i].name - 5;
    memmove(name + 4, name, keep);
    memcpy(name, "mtp_", 4);
    name[keep + 4] = '\0';
  }
  blk->input_bytes = input;
  blk->ckpt_bytes = ckpt;
  return 0;
}

/* One multi-token prediction depth (DeepSeek-V3, arXiv 2412.19437 Sec.
 * 2.2; Megatron-LM's MultiTokenPredictionLayer and process_mtp_loss in
 * megatron/core/transformer/multi_token_prediction.py): the next token's
 * embedding and the previous depth's hidden states, normalized (enorm,
 * hnorm) and projected to h (eh_proj), a transformer layer, a final norm,
 * then the shared output layer (its weight elsewhere: n_params = 0) and a
 * loss of its own. Its layer is never recomputed here: Megatron-LM
 * recomputes it only under recompute_method = uniform. */
static int mtp_depth(vs_block *blk, const vs_workload *wl, const vs_dims *d,
                     uint64_t depth, vs_error *err)
{
  if (mtp_embedding(blk, wl, d, depth, err) ||
      vs_block_norm(blk, d, "mtp_enorm", d->norm, err) ||
      vs_block_norm(blk, d, "mtp_hnorm", d->norm, err) ||
      mtp_projection(blk, d, err) || mtp_layer(blk, wl, d, err) ||
      vs_block_norm(blk, d, "mtp_final_norm", d->norm, err) ||
      !output_layer(blk, wl, d, "mtp_lm_head", err))
    return VS_EINPUT;
  return cross_entropy(blk, wl, d, d->tokens * (d->vocab / d->t),
                       "mtp_cross_entropy", err);
}

/* Final norm, the multi-token prediction depths (which Megatron-LM runs
 * before the output layer: process_mtp_loss), output layer and loss. The
 * logits (compute dtype) and the fp32 log-probabilities the cross entropy
 * keeps are `temp`: they are the loss buffers, often the largest spike of
 * the step. */
int vs_model_build_head(vs_block *blk, const vs_workload *wl, const vs_dims *d,
                        vs_error *err)
{
  vs_arch arch = (vs_arch)wl->model.arch;
  uint64_t v = d->vocab / d->t;
  uint64_t logits = d->tokens * v;
  vs_op_spec *op;
  uint32_t head;

  if (arch == VS_ARCH_BERT) { /* MLM transform: dense, GeLU, LayerNorm */
    if (!(op = vs_block_add_op(blk, "mlm_dense", err)))
      return VS_EINPUT;
    vs_block_as_matmul(op, d->tokens, d->h, d->h, d->e);
    /* no Transformer Engine module: Megatron-LM's BertLMHead makes it a
     * torch.nn.Linear (get_linear_layer, bert_lm_head.py) */
    op->no_fp8 = true;
    vs_block_autocast_input(op, d, 1, d->tokens * d->h);
    if (vs_block_save_input(blk, op, d, d->tokens * d->h, KEPT_FOR_WEIGHTS,
                            err))
      return VS_EINPUT;
    if (vs_block_param(blk, d, "mlm_dense.weight", d->h, d->h, err) ||
        vs_block_param(blk, d, "mlm_dense.bias", 1, d->h, err))
      return VS_EINPUT;
    if (!(op = vs_block_add_op(blk, "mlm_gelu", err)))
      return VS_EINPUT;
    vs_block_as_elementwise(op, d->tokens * d->h, d->e, 8.0);
    if (vs_block_save_act(blk, op, d->e * d->tokens * d->h, d->act_dtype, err))
      return VS_EINPUT;
  }
  if (vs_block_norm(blk, d, "final_norm", d->norm, err))
    return VS_EINPUT;
  for (uint64_t k = 0; k < wl->model.mtp_layers; k++)
    if (mtp_depth(blk, wl, d, k, err))
      return VS_EINPUT;

  if (!output_layer(blk, wl, d, "lm_head", err))
    return VS_EINPUT;
  head = blk->n_ops - 1;
  /* With tied embeddings and pp > 1 the last stage keeps its own copy of
   * the word embeddings (Megatron-LM), kept equal by an all-reduce. */
  if (own_head_weight(wl) &&
      vs_block_param(blk, d, "lm_head.weight", v, d->h, err))
    return VS_EINPUT;
  /* tied on one stage: autocast casts the embedding's weight here, at its
   * first GEMM */
  if (!own_head_weight(wl) && d->amp &&
      vs_block_weight_copy(blk, d, v, d->h, d->param_dtype, err))
    return VS_EINPUT;
  if (own_head_weight(wl) && wl->model.tied_embeddings && d->frozen_prefix)
    blk->params[blk->n_params - 1].trainable = false; /* the frozen
                                                         embedding's copy */
  autocast_head_backward(blk, head, wl, d, v * d->h);
  if (arch == VS_ARCH_BERT && vs_block_param(blk, d, "mlm_bias", 1, v, err))
    return VS_EINPUT;
  /* before any loss: Liger Kernel's cross entropy, swapped in for
   * F.cross_entropy, gets the capped logits (only its fused linear loss,
   * which never makes logits, caps in its kernel) */
  if (d->logit_softcap &&
      vs_block_softcap(blk, d, "logit_softcap", logits, VS_CAP_LOGITS, err))
    return VS_EINPUT;

  return cross_entropy(blk, wl, d, logits, "cross_entropy", err);
}
