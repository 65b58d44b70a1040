"""The decoder-only transformer: Llama family (GQA, RoPE, RMSNorm, SwiGLU) and GPT-2, with a KV cache.

The KV cache is a pair of mutable buffers per layer in ExecuTorch's ``[batch, context, kv_heads,
head_dim]`` layout, written at the positions ``input_pos .. input_pos + seq_len``. Attention is either
plain tensor math over the whole cache under a position mask, or, with ``use_sdpa_with_kv_cache``,
ExecuTorch's ``llama::custom_sdpa`` over the rows written so far. May import torch.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from edgetorch.extension.llm.model.args import ModelArgs


class RMSNorm(nn.Module):
    """Root-mean-square normalisation with a learned scale (computed in float32)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.register_buffer("mean_row", None, persistent=False)

    def mean_as_linear(self) -> None:
        """Take the mean of squares as a linear with one output (weights 1 / dim), not as ``mean``: the
        whole norm is then operators XNNPACK's partitioner takes, so it joins the linears around it in one
        delegate. The sum runs in another order, so the result may differ in the last bit."""
        self.mean_row = torch.full((1, self.weight.shape[0]), 1.0 / self.weight.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        squares = h.pow(2)
        mean = squares.mean(-1, keepdim=True) if self.mean_row is None else F.linear(squares, self.mean_row)
        h = h * torch.rsqrt(mean + self.eps)
        return self.weight * h.to(x.dtype)


def rope_frequencies(args: ModelArgs) -> torch.Tensor:
    """The rotary inverse frequencies ``[head_dim / 2]``, with Llama 3's long-context scaling if configured."""
    dim = args.head_dim
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = args.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        old_context = scaling.get("original_max_position_embeddings", 8192)
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_context / wavelen - low) / (high - low)
        blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        inv_freq = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
        medium = (wavelen <= old_context / low) & (wavelen >= old_context / high)
        inv_freq = torch.where(medium, blended, inv_freq)
    elif kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind not in (None, "default"):
        raise ValueError(f"unsupported rope scaling {kind!r}; expected llama3, linear or none")
    return inv_freq.float()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply the rotary embedding (half-split pairs, as Hugging Face checkpoints store q/k) to ``[b, s, h, d]``."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class PackedLinear(nn.Module):
    """One or more linears of the same input as a single ``x @ weight_t`` over 2-D ``x``, the weights stored
    transposed and side by side (``[in, sum(out)]``).

    Exported, that is one ``mm`` on a constant: no weight transpose (``nn.Linear``'s ``permute`` of the weight,
    which a runtime that folds constants only in static methods would copy on every call), no activation
    transposes or reshapes, and one gemv instead of several when decoding. :func:`pack_for_decode` swaps these in.
    """

    def __init__(self, *linears: nn.Linear) -> None:
        super().__init__()
        self.sizes = [linear.out_features for linear in linears]
        weight = torch.cat([linear.weight.detach().t() for linear in linears], dim=1).contiguous()
        self.weight_t = nn.Parameter(weight, requires_grad=False)
        self.bias: nn.Parameter | None = None
        if any(linear.bias is not None for linear in linears):
            parts = [
                linear.bias.detach() if linear.bias is not None else torch.zeros(linear.out_features)
                for linear in linears
            ]
            self.bias = nn.Parameter(torch.cat(parts), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.weight_t
        return y if self.bias is None else y + self.bias


def merged_linear(*linears: nn.Linear) -> nn.Linear:
    """One ``nn.Linear`` computing ``linears`` of the same input side by side (their rows stacked)."""
    merged = nn.Linear(linears[0].in_features, sum(m.out_features for m in linears), bias=False)
    merged.weight = nn.Parameter(torch.cat([m.weight.detach() for m in linears]), requires_grad=False)
    if any(m.bias is not None for m in linears):
        parts = [m.bias.detach() if m.bias is not None else torch.zeros(m.out_features) for m in linears]
        merged.bias = nn.Parameter(torch.cat(parts), requires_grad=False)
    return merged


def pack_for_decode(model: Transformer, linears: bool = False, delegated: bool = False) -> Transformer:
    """Rewrite ``model`` (in place) for a runtime that runs one kernel per graph node: activations stay 2-D
    ``[seq, dim]``, q/k/v and the SwiGLU gate/up projections become one :class:`PackedLinear` each, RoPE's
    half rotation is one ``index_select`` with the sign folded into the sine table. The numbers are the
    same sums (up to BLAS summation order); a SmolLM2-size decode step runs about half the instructions.

    With tied embeddings the transposed output matrix also serves the embedding lookup (one copy of it).

    ``linears=True`` keeps every projection an ``nn.Linear`` (q/k/v and gate/up merged by stacking rows, see
    :func:`merged_linear`), the output and the embedding as they are: the form to quantize (``quantize_``
    replaces ``nn.Linear``; per-row weight groups quantize a stacked matrix exactly as its parts) and to
    delegate, with three projections a layer fewer.

    ``delegated=True`` (with ``linears``; for XNNPACK) keeps gate and up apart and takes each RMSNorm's mean as
    a linear (:meth:`RMSNorm.mean_as_linear`): then no slice or ``mean`` sits between the norm, the
    projections and the SwiGLU, and each layer's feed-forward half is one delegate instead of three pieces.
    """
    args = model.args
    for layer in model.layers:
        attention, ffn = layer.attention, layer.feed_forward
        if linears:
            attention.wqkv = merged_linear(attention.wq, attention.wk, attention.wv)
        else:
            attention.wqkv = PackedLinear(attention.wq, attention.wk, attention.wv)
            attention.wo = PackedLinear(attention.wo)
        del attention.wq, attention.wk, attention.wv
        if ffn.gated and not delegated:
            ffn.w13 = merged_linear(ffn.w1, ffn.w3) if linears else PackedLinear(ffn.w1, ffn.w3)
            del ffn.w1, ffn.w3
        elif not linears:
            ffn.w1 = PackedLinear(ffn.w1)
        if not linears:
            ffn.w2 = PackedLinear(ffn.w2)
        attention.packed = ffn.packed = True
    if delegated:
        for norm in model.modules():
            if isinstance(norm, RMSNorm):
                norm.mean_as_linear()
    tied = isinstance(model.tok_embeddings, nn.Embedding) and model.tok_embeddings.weight is model.output.weight
    if not linears:
        model.output = PackedLinear(model.output)
    if tied and not linears:  # a quantized embedding table (quantize_embeddings) stays
        del model.tok_embeddings
    if args.arch != "gpt2":
        half = args.head_dim // 2
        sign = torch.cat((-torch.ones(half), torch.ones(half)))
        model.register_buffer("rope_sin_signed", model.rope_sin * sign, persistent=False)
        model.register_buffer(
            "rope_half_turn", torch.cat((torch.arange(half, args.head_dim), torch.arange(half))), persistent=False
        )
        del model.rope_sin
    model.packed = True
    return model


def rotate_packed(
    x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor, half_turn: torch.Tensor
) -> torch.Tensor:
    """:func:`rotate` with ``cat(-x2, x1)`` computed as ``x[..., half_turn] * sign`` (the sign lives in ``sin_signed``)."""
    return x * cos + torch.index_select(x, -1, half_turn) * sin_signed


class Attention(nn.Module):
    packed = False  # set by pack_for_decode: 2-D activations and one wqkv projection

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        qkv_bias = args.attention_bias or args.arch == "gpt2"
        self.wq = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=qkv_bias)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=qkv_bias)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=qkv_bias)
        self.wo = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=args.arch == "gpt2")
        if args.qk_norm:
            self.q_norm = RMSNorm(args.head_dim, args.norm_eps)
            self.k_norm = RMSNorm(args.head_dim, args.norm_eps)
        if args.use_kv_cache:
            shape = (1, args.max_context_len, args.n_kv_heads, args.head_dim)
            self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
            self.register_buffer("v_cache", torch.zeros(shape), persistent=False)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        start: torch.Tensor | int,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        if self.packed:
            return self._forward_packed(x, positions, start, rope, mask)
        batch, seq_len, _ = x.shape
        q = self.wq(x).view(batch, seq_len, self.n_heads, self.head_dim)
        k = self.wk(x).view(batch, seq_len, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(batch, seq_len, self.n_kv_heads, self.head_dim)
        if self.args.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        if not self.args.use_kv_cache:
            keys, values = k, v
        else:
            self.k_cache.index_copy_(1, positions, k)
            self.v_cache.index_copy_(1, positions, v)
            if self.args.use_sdpa_with_kv_cache:
                out = torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, start, None, 0.0, True)
                return self.wo(out.reshape(batch, seq_len, -1))
            keys, values = self.k_cache, self.v_cache
        return self.wo(self._attend(q, keys, values, mask))

    def _forward_packed(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        start: torch.Tensor | int,
        rope: tuple | None,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """:meth:`forward` on 2-D ``x`` ``[seq, dim]`` after :func:`pack_for_decode`."""
        seq_len = x.shape[0]
        heads, kv_heads = self.n_heads, self.n_kv_heads
        qkv = self.wqkv(x).view(1, seq_len, heads + 2 * kv_heads, self.head_dim)
        if self.args.qk_norm or rope is None:
            q, k = qkv[:, :, :heads], qkv[:, :, heads : heads + kv_heads]
            if self.args.qk_norm:
                q, k = self.q_norm(q), self.k_norm(k)
            if rope is not None:
                q, k = rotate_packed(q, *rope), rotate_packed(k, *rope)
        else:  # one rotation for the query and key heads together
            qk = rotate_packed(qkv[:, :, : heads + kv_heads], *rope)
            q, k = qk[:, :, :heads], qk[:, :, heads:]
        v = qkv[:, :, heads + kv_heads :]
        if not self.args.use_kv_cache:
            out = self._attend(q, k, v, mask)
        else:
            self.k_cache.index_copy_(1, positions, k)
            self.v_cache.index_copy_(1, positions, v)
            if self.args.use_sdpa_with_kv_cache:
                out = torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, start, None, 0.0, True)
            else:
                out = self._attend(q, self.k_cache, self.v_cache, mask)
        return self.wo(out.reshape(seq_len, heads * self.head_dim))

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked softmax attention; each key/value head serves its group of query heads in one matmul."""
        batch, seq_len = q.shape[:2]
        group = self.n_heads // self.n_kv_heads
        q = q.view(batch, seq_len, self.n_kv_heads, group, self.head_dim).permute(0, 2, 3, 1, 4)
        q = q.reshape(batch, self.n_kv_heads, group * seq_len, self.head_dim)
        scores = (q @ keys.permute(0, 2, 3, 1)) * (1.0 / math.sqrt(self.head_dim))
        scores = scores.view(batch, self.n_kv_heads, group, seq_len, -1)
        scores = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        out = scores.view(batch, self.n_kv_heads, group * seq_len, -1) @ values.transpose(1, 2)
        out = out.view(batch, self.n_kv_heads, group, seq_len, self.head_dim).permute(0, 3, 1, 2, 4)
        return out.reshape(batch, seq_len, self.n_heads * self.head_dim)


class FeedForward(nn.Module):
    """SwiGLU (Llama family) or a GELU MLP (GPT-2)."""

    packed = False  # set by pack_for_decode: one w13 projection (gated)

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.gated = args.arch == "llama"
        bias = not self.gated
        self.w1 = nn.Linear(args.dim, args.hidden_dim, bias=bias)
        self.w2 = nn.Linear(args.hidden_dim, args.dim, bias=bias)
        if self.gated:
            self.w3 = nn.Linear(args.dim, args.hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed and self.gated and hasattr(self, "w13"):
            gate_up = self.w13(x)
            hidden = gate_up.shape[-1] // 2
            return self.w2(F.silu(gate_up[..., :hidden]) * gate_up[..., hidden:])
        if self.gated:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))


def _norm(args: ModelArgs, dim: int) -> nn.Module:
    return RMSNorm(dim, args.norm_eps) if args.arch == "llama" else nn.LayerNorm(dim, eps=args.norm_eps)


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.attention_norm = _norm(args, args.dim)
        self.attention = Attention(args)
        self.ffn_norm = _norm(args, args.dim)
        self.feed_forward = FeedForward(args)

    def forward(self, x, positions, start, rope, mask):
        h = x + self.attention(self.attention_norm(x), positions, start, rope, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """A decoder-only LLM; ``forward(tokens, input_pos)`` returns the last position's logits ``[1, vocab]``."""

    packed = False  # set by pack_for_decode

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        if args.arch == "gpt2":
            self.pos_embeddings = nn.Embedding(args.max_context_len, args.dim)
        else:
            angles = torch.outer(torch.arange(args.max_context_len, dtype=torch.float32), rope_frequencies(args))
            angles = torch.cat((angles, angles), dim=-1)
            self.register_buffer("rope_cos", angles.cos(), persistent=False)
            self.register_buffer("rope_sin", angles.sin(), persistent=False)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = _norm(args, args.dim)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        if args.use_sdpa_with_kv_cache:
            from edgetorch.extension.llm import custom_ops

            custom_ops.ensure_registered()

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None) -> torch.Tensor:
        seq_len = tokens.shape[1]
        if self.args.use_kv_cache:
            if input_pos is None:
                raise ValueError("a KV-cache model takes input_pos, the cache position of the first token")
            positions = input_pos + torch.arange(seq_len)
        else:
            positions = torch.arange(seq_len)
        start = 0
        if self.args.use_sdpa_with_kv_cache:
            start = input_pos[0].item()
            torch._check(start >= 0)
            torch._check(start + seq_len <= self.args.max_context_len)
        if self.packed:
            return self._forward_packed(tokens, positions, start)
        h = self.tok_embeddings(tokens)
        rope = None
        if self.args.arch == "gpt2":
            h = h + self.pos_embeddings(positions)
        else:
            rope = (self.rope_cos[positions].unsqueeze(1), self.rope_sin[positions].unsqueeze(1))
        # Which key positions each query may see (the mask is unused by llama::custom_sdpa).
        keys = self.args.max_context_len if self.args.use_kv_cache else seq_len
        mask = torch.arange(keys).unsqueeze(0) <= positions.unsqueeze(1)
        for layer in self.layers:
            h = layer(h, positions, start, rope, mask)
        return self.output(self.norm(h[:, -1, :]))

    def _forward_packed(self, tokens: torch.Tensor, positions: torch.Tensor, start: torch.Tensor | int) -> torch.Tensor:
        """:meth:`forward` after :func:`pack_for_decode`: the residual stream is ``[seq, dim]``."""
        flat = tokens.reshape(-1)
        embeddings = getattr(self, "tok_embeddings", None)
        if embeddings is None:  # tied: rows of the embedding = columns of the transposed output matrix
            h = torch.index_select(self.output.weight_t, 1, flat).t()
        else:
            h = embeddings(flat)
        rope = None
        if self.args.arch == "gpt2":
            h = h + self.pos_embeddings(positions)
        else:
            rope = (
                self.rope_cos[positions].unsqueeze(1),
                self.rope_sin_signed[positions].unsqueeze(1),
                self.rope_half_turn,
            )
        keys = self.args.max_context_len if self.args.use_kv_cache else flat.shape[0]
        mask = torch.arange(keys).unsqueeze(0) <= positions.unsqueeze(1)
        for layer in self.layers:
            h = layer(h, positions, start, rope, mask)
        return self.output(self.norm(h[-1:]))
