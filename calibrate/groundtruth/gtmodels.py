"""gtmodels.py - GPT- and Llama-style decoders and their training step, in
plain PyTorch, built to follow vsim's op list (sim/model/layer.c) as closely as
plain PyTorch allows. Imported only where PyTorch is installed (the harness's
child process and --selftest).

What matches sim/model/layer.c
  GPT:   learned position embeddings (seq_len rows), embedding dropout;
         per layer LayerNorm (weight and bias) -> fused QKV projection with
         bias -> attention -> output projection with bias -> dropout ->
         residual; LayerNorm -> MLP up (4h, bias) -> GeLU (tanh) -> MLP down
         (bias) -> dropout -> residual; final LayerNorm; output layer tied to
         the word embeddings; dropout 0.1 everywhere vsim has a dropout op.
  Llama: no biases, no position embeddings, no dropout; RMSNorm (weight
         only) -> separate Q, K, V projections (K, V with kv_heads heads) ->
         RoPE -> attention -> output projection -> residual; RMSNorm ->
         SiLU(gate) * up -> down -> residual; final RMSNorm; untied output
         layer.
  Saved tensors: RMSNorm is a custom autograd function that saves only its
  input (and a per-row fp32 1/rms), as a fused kernel and vsim's norm op do;
  eager attention saves Q, K, the softmax output, the dropout mask (1 byte)
  and the dropped-out probabilities and V (Korthikanti et al.'s 5as/h term),
  with K and V expanded to every head under GQA (as vsim's eager path);
  SDPA flash saves Q, K, V, the output and the fp32 log-sum-exp. The loss
  upcasts the logits to fp32 and the cross entropy keeps fp32
  log-probabilities, as vsim's cross_entropy op. Token ids and labels are
  int64. Full checkpointing (torch.utils.checkpoint, non-reentrant) keeps
  each layer's input and recomputes the layer in backward. Gradients stay
  allocated between steps (zero_grad(set_to_none=False)), as vsim holds them
  for the whole step.

Known mismatches (vsim's assumption -> what this harness does)
  * amp = autocast (the standard PyTorch recipe) is vsim's precision =
    amp_bf16 | amp_fp16, which models what autocast keeps: fp32 weights,
    gradients and moments (4+4+8 bytes/param) and a 16-bit copy of every
    weight, cached from its first use in forward and saved by each matmul
    for its backward; the fp32 residual stream and norm inputs; each
    linear's own 16-bit cast of an fp32 input (Llama's q, k, v and gate,
    up: three and two copies). amp = master runs bf16 weights and
    activations throughout (2 + 4 fp32 main grads + 12).
  * Eager attention: under autocast the softmax runs in fp32 (CUDA's
    autocast list; passed as softmax's dtype here, which the CPU's list
    does not force) and the probs matmul saves their 16-bit cast;
    otherwise the core runs in the compute dtype, as Megatron-LM's fused
    softmax and vsim do.
  * fp32 with attention = flash uses SDPA's memory-efficient backend (flash
    has no fp32 kernel); it saves the same tensors.
  * fp32 with grouped-query attention expands K and V to every head before
    the memory-efficient backend (which takes no grouped K, V), as vsim
    models it. The logits in the compute dtype are freed after the fp32
    upcast, as vsim models it outside pipelines; eager attention
    keeps a shared [seq, seq] bool causal mask (seq^2 bytes); RoPE keeps
    [seq, head_dim] cos/sin tables (in the activations' dtype, shared by
    every layer); LayerNorm and RMSNorm also save fp32 per-row statistics
    (8 or 4 bytes per token). tests/validation/saved_activations.py holds
    what autograd saves against vsim's activations.
  * Optimizers: fused AdamW/SGD (no whole-model temporaries) unless
    optimizer_impl = foreach (PyTorch's default, which allocates
    a temporary the size of one state during the step: vsim's
    [training] optimizer_impl = foreach).
  * GradScaler (fp16 autocast) and dynamic loss scaling (fp16 master) may
    skip a step on inf/nan gradients; skipped_steps counts them.
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


# ---------------------------------------------------------------------------
# RMSNorm that saves only its input (fused-kernel behaviour)
# ---------------------------------------------------------------------------

def _acc(dtype):
    return torch.promote_types(dtype, torch.float32)


class _RMSNormFn(torch.autograd.Function):
    """y = x / rms(x) * weight, rms over the last dimension. Saves x, the
    weight and the per-row 1/rms; backward recomputes the rest:
    dx = r * (g - xhat * mean(g * xhat)), g = dy * weight, xhat = x * r."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        xf = x.to(_acc(x.dtype))
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (xf * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, gy):
        x, weight, rstd = ctx.saved_tensors
        acc = _acc(x.dtype)
        xhat = x.to(acc) * rstd
        g = gy.to(acc)
        gw = (g * xhat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        g = g * weight.to(acc)
        dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return dx.to(x.dtype), gw, None


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-5, **fk):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden, **fk))
        self.eps = eps

    def forward(self, x):
        return _RMSNormFn.apply(x, self.weight, self.eps)


# ---------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------

def sdpa_context(backend):
    """Restricts scaled_dot_product_attention to one backend: 'flash',
    'efficient' or 'math'; None lets PyTorch choose."""
    if backend is None:
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION,
                            "efficient": SDPBackend.EFFICIENT_ATTENTION,
                            "math": SDPBackend.MATH}[backend])
    except ImportError:  # torch < 2.3
        return torch.backends.cuda.sdp_kernel(
            enable_flash=backend == "flash",
            enable_mem_efficient=backend == "efficient",
            enable_math=backend == "math")


def _expand_kv(t, heads):
    n = heads // t.shape[1]
    return t if n == 1 else t.repeat_interleave(n, dim=1)


def attention(q, k, v, shared, training):
    """q [b, heads, s, d], k and v [b, kv_heads, s, d] -> [b, heads, s, d]."""
    heads = q.shape[1]
    p = shared["dropout"] if training else 0.0
    if shared["eager"]:
        k, v = _expand_kv(k, heads), _expand_kv(v, heads)
        s = q.shape[2]
        scores = torch.matmul(q, k.transpose(-2, -1))
        scores.mul_(1.0 / math.sqrt(q.shape[-1]))
        scores.masked_fill_(shared["mask"][:s, :s], float("-inf"))
        # CUDA's autocast runs softmax in fp32 (its fp32_set_opt_dtype
        # policy passes dtype=float32); the CPU's list does not, so it is
        # asked for here. Without autocast it stays in the compute dtype.
        amp = (torch.is_autocast_enabled() if q.is_cuda
               else torch.is_autocast_cpu_enabled())
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32 if amp else None)
        if p > 0:
            probs = F.dropout(probs, p, True)
        return torch.matmul(probs, v)
    kw = {}
    if k.shape[1] != heads:
        if shared["gqa_native"]:
            kw["enable_gqa"] = True
        else:
            k, v = _expand_kv(k, heads), _expand_kv(v, heads)
    with sdpa_context(shared["backend"]):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p,
                                              is_causal=True, **kw)


def rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


# ---------------------------------------------------------------------------
# Layers and the decoder
# ---------------------------------------------------------------------------

class GPTBlock(nn.Module):
    def __init__(self, c, shared, fk):
        super().__init__()
        h, self.a, self.kv = c["hidden"], c["heads"], c["kv_heads"]
        self.d = h // self.a
        self.shared = shared
        self.norm1 = nn.LayerNorm(h, **fk)
        self.qkv = nn.Linear(h, (self.a + 2 * self.kv) * self.d, bias=True, **fk)
        self.proj = nn.Linear(h, h, bias=True, **fk)
        self.norm2 = nn.LayerNorm(h, **fk)
        self.up = nn.Linear(h, c["ffn_hidden"], bias=True, **fk)
        self.down = nn.Linear(c["ffn_hidden"], h, bias=True, **fk)

    def _drop(self, x):
        p = self.shared["dropout"]
        return F.dropout(x, p, self.training) if p > 0 else x

    def forward(self, x):
        b, s, h = x.shape
        qkv = self.qkv(self.norm1(x))
        q, k, v = qkv.split([self.a * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = q.view(b, s, self.a, self.d).transpose(1, 2)
        k = k.view(b, s, self.kv, self.d).transpose(1, 2)
        v = v.view(b, s, self.kv, self.d).transpose(1, 2)
        y = attention(q, k, v, self.shared, self.training)
        x = x + self._drop(self.proj(y.transpose(1, 2).reshape(b, s, h)))
        y = self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))
        return x + self._drop(y)


class LlamaBlock(nn.Module):
    def __init__(self, c, shared, fk):
        super().__init__()
        h, self.a, self.kv = c["hidden"], c["heads"], c["kv_heads"]
        self.d = h // self.a
        self.shared = shared
        self.norm1 = RMSNorm(h, **fk)
        self.q = nn.Linear(h, self.a * self.d, bias=False, **fk)
        self.k = nn.Linear(h, self.kv * self.d, bias=False, **fk)
        self.v = nn.Linear(h, self.kv * self.d, bias=False, **fk)
        self.o = nn.Linear(self.a * self.d, h, bias=False, **fk)
        self.norm2 = RMSNorm(h, **fk)
        self.gate = nn.Linear(h, c["ffn_hidden"], bias=False, **fk)
        self.up = nn.Linear(h, c["ffn_hidden"], bias=False, **fk)
        self.down = nn.Linear(c["ffn_hidden"], h, bias=False, **fk)

    def forward(self, x):
        b, s, h = x.shape
        cos, sin = self.shared["cos"][:s], self.shared["sin"][:s]
        n = self.norm1(x)
        q = rope(self.q(n).view(b, s, self.a, self.d).transpose(1, 2), cos, sin)
        k = rope(self.k(n).view(b, s, self.kv, self.d).transpose(1, 2), cos, sin)
        v = self.v(n).view(b, s, self.kv, self.d).transpose(1, 2)
        y = attention(q, k, v, self.shared, self.training)
        x = x + self.o(y.transpose(1, 2).reshape(b, s, h))
        n = self.norm2(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


class Decoder(nn.Module):
    """The whole model; forward(ids, labels) returns the mean cross entropy.

    backend: SDPA backend for attention = flash ('flash', 'efficient', or
    None to let PyTorch choose); gqa_native: pass enable_gqa to SDPA instead
    of expanding K and V."""

    def __init__(self, c, device, dtype, backend=None, gqa_native=False):
        super().__init__()
        self.c = c
        gpt = c["arch"] == "gpt"
        h, s, v = c["hidden"], c["seq_len"], c["vocab"]
        fk = dict(device=device, dtype=dtype)
        self.shared = dict(dropout=float(c["dropout"]),
                           eager=c["attention"] == "eager",
                           backend=backend, gqa_native=gqa_native,
                           checkpointing=c["checkpointing"] == "full")
        if self.shared["eager"]:
            self.register_buffer("mask", torch.ones(s, s, dtype=torch.bool,
                                                    device=device).triu(1),
                                 persistent=False)
            self.shared["mask"] = self.mask
        self.embed = nn.Embedding(v, h, **fk)
        if gpt:
            self.pos = nn.Embedding(s, h, **fk)
            self.register_buffer("pos_ids", torch.arange(s, device=device),
                                 persistent=False)
        else:
            d = h // c["heads"]
            inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=device,
                                                  dtype=torch.float32) / d))
            ang = torch.outer(torch.arange(s, device=device, dtype=torch.float32), inv)
            ang = torch.cat((ang, ang), dim=-1)
            # Held in the activations' dtype, as Hugging Face's rotary
            # embedding casts them once per forward: cast in every layer,
            # each q and k would save its own copies of the tables.
            act = DTYPES[c["precision"]]
            self.register_buffer("cos", ang.cos().to(act), persistent=False)
            self.register_buffer("sin", ang.sin().to(act), persistent=False)
            self.shared["cos"], self.shared["sin"] = self.cos, self.sin
        block = GPTBlock if gpt else LlamaBlock
        self.layers = nn.ModuleList(block(c, self.shared, fk) for _ in range(c["layers"]))
        self.norm_f = nn.LayerNorm(h, **fk) if gpt else RMSNorm(h, **fk)
        self.lm_head = None if c["tied_embeddings"] else nn.Linear(h, v, bias=False, **fk)
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self):
        """GPT-2 / Llama initialisation: N(0, 0.02) weights, zero biases."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.zero_()

    def forward(self, ids, labels):
        x = self.embed(ids)
        if self.c["arch"] == "gpt":
            x = x + self.pos(self.pos_ids[: ids.shape[1]])
            if self.shared["dropout"] > 0:
                x = F.dropout(x, self.shared["dropout"], self.training)
        for layer in self.layers:
            if self.shared["checkpointing"] and self.training:
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        x = self.norm_f(x)
        w = self.embed.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(x, w)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                               labels.view(-1))


# ---------------------------------------------------------------------------
# Optimizer and the training step
# ---------------------------------------------------------------------------

def make_optimizer(params, name, impl, lr=None):
    """Returns (optimizer, implementation used). Fused when asked and
    supported, else the single-tensor for-loop (no whole-model temporaries);
    foreach when asked. lr defaults to 1e-4 (Adam) or 1e-3 (SGD)."""
    if name in ("adamw", "adam"):
        cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
        args = dict(lr=lr or 1e-4, weight_decay=0.1 if name == "adamw" else 0.0)
    else:
        cls = torch.optim.SGD
        args = dict(lr=lr or 1e-3, momentum=0.9 if name == "momentum" else 0.0)
    params = list(params)
    if impl == "fused":
        try:
            return cls(params, fused=True, **args), "fused"
        except (TypeError, RuntimeError, ValueError):
            impl = "forloop"
    if impl == "foreach":
        return cls(params, foreach=True, **args), "foreach"
    return cls(params, foreach=False, **args), "forloop"


class Trainer:
    """One model, its optimizer and mixed-precision machinery; step() runs
    forward, backward and the optimizer step and returns (loss, skipped).
    `phase` names the part of the step in progress (for OOM reports)."""

    def __init__(self, c, device, backend=None, gqa_native=False, lr=None):
        self.c = c
        self.device = torch.device(device)
        self.amp = c["amp"]
        self.cdt = DTYPES[c["precision"]]
        self.phase = "model"
        pdt = self.cdt if self.amp == "master" else torch.float32
        self.model = Decoder(c, self.device, pdt, backend, gqa_native)
        self.model.train()
        self.scaler = None
        self.loss_scale = 2.0 ** 16 if (self.amp == "master" and c["precision"] == "fp16") else 1.0
        if self.amp == "master":
            self._setup_master()
            params = self.masters
        else:
            params = self.model.parameters()
            if self.amp == "autocast" and c["precision"] == "fp16":
                try:
                    self.scaler = torch.amp.GradScaler(self.device.type)
                except (AttributeError, TypeError):  # torch < 2.3
                    self.scaler = torch.cuda.amp.GradScaler()
        self.opt, self.optimizer_impl = make_optimizer(params, c["optimizer"],
                                                       c["optimizer_impl"], lr)

    def _setup_master(self):
        """fp32 master weights with persistent fp32 main gradients; each
        half-precision gradient is added into its main gradient as soon as
        autograd has accumulated it, then freed (Megatron-LM style)."""
        if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
            raise RuntimeError("amp = master needs torch >= 2.1 "
                               "(Tensor.register_post_accumulate_grad_hook)")
        self.params = [p for p in self.model.parameters()]
        self.masters = []
        for p in self.params:
            m = nn.Parameter(p.detach().to(torch.float32))
            m.grad = torch.zeros_like(m)
            self.masters.append(m)
            p.register_post_accumulate_grad_hook(self._hook(m))

    @staticmethod
    def _hook(m):
        def hook(p):
            m.grad.add_(p.grad)
            p.grad = None
        return hook

    def _master_step(self):
        skipped = False
        if self.loss_scale != 1.0:
            grads = [m.grad for m in self.masters]
            found = torch.zeros(1, device=self.device)
            inv = torch.full((1,), 1.0 / self.loss_scale, device=self.device)
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
            skipped = bool(found.item())
        if skipped:
            self.loss_scale /= 2.0
        else:
            self.opt.step()
            with torch.no_grad():
                for p, m in zip(self.params, self.masters):
                    p.copy_(m)
        return skipped

    def step(self, ids, labels):
        self.phase = "forward"
        if self.amp == "autocast":
            with torch.autocast(device_type=self.device.type, dtype=self.cdt):
                loss = self.model(ids, labels)
        else:
            loss = self.model(ids, labels)
        self.phase = "backward"
        skipped = False
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.phase = "optimizer"
            before = self.scaler.get_scale()
            self.scaler.step(self.opt)
            self.scaler.update()
            skipped = self.scaler.get_scale() < before
        elif self.amp == "master":
            (loss * self.loss_scale if self.loss_scale != 1.0 else loss).backward()
            self.phase = "optimizer"
            skipped = self._master_step()
        else:
            loss.backward()
            self.phase = "optimizer"
            self.opt.step()
        self.opt.zero_grad(set_to_none=False)
        self.phase = "done"
        return loss.detach(), skipped
