"""Perplexity of an LLM checkpoint under weight/activation quantization variants, in eager PyTorch.

Loads the checkpoint once (a GGUF file or a Hugging Face folder), then for each variant replaces the linears
(all but the output) and scores a fixed text in one full-sequence pass: exp(mean negative log-likelihood of
each next token). The variants are fake-quantized on the fly, so they need not be exportable; the ones that
are (``8da4w``, ``8da4w-q41``) match their exported programs (see ``tests/extension/llm/``). Example::

    python bench/llm_ppl.py --checkpoint SmolLM2-135M-Instruct.Q4_1.gguf fp32 act8 8da4w 8da4w-q41
    python bench/llm_ppl.py --checkpoint ... --text-file /usr/share/common-licenses/GPL-3 --max-tokens 512 8da4w

Variants: ``fp32``; ``act8`` (int8 per-token activations only); ``w4`` (symmetric int4 weight-only, max-abs
/ 7.5, groups of ``--group-size``); ``8da4w`` (torchao's, as exported); ``8da4w-asym`` (asymmetric int4,
integer zero point); ``8da4w-mse`` (symmetric int4, each group's scale chosen among 17 candidates to
minimise squared error); ``8da4w-q41`` (the exporter's Q4_1 path); ``8da4w-q41-bf16`` (its scales rounded
to bfloat16, as XNNPACK's QB4W stores them). ``--only attention|ffn|layers:A-B`` quantizes a subset.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TEXT = (  # the text of tests/extension/llm/test_smollm2_perplexity.py
    "The river runs through the middle of the old town. In the morning, fishermen push their boats into the "
    "water and the market opens on the square. By noon the streets are full of people buying bread, fruit and "
    "fresh fish, and children play by the fountain until their parents call them home for lunch."
)
VARIANTS = ("fp32", "act8", "w4", "8da4w", "8da4w-asym", "8da4w-mse", "8da4w-q41", "8da4w-q41-bf16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="+", choices=VARIANTS)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--text-file", default=None, help="score this file's text instead of the test's")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--group-size", type=int, default=32)
    parser.add_argument("--only", default=None, help="attention, ffn, or layers:A-B (quantize only these)")
    args = parser.parse_args()

    import torch
    from torch import nn

    from edgetorch.extension.llm.export import build_model, load_checkpoint, quantize_model
    from edgetorch.extension.llm.runner import load_tokenizer

    text = " ".join(Path(args.text_file).read_text().split()) if args.text_file else TEXT
    ids = load_tokenizer(args.checkpoint).encode(text)[: args.max_tokens]
    checkpoint = load_checkpoint(args.checkpoint, max_seq_len=len(ids), max_context_len=len(ids), use_kv_cache=False)

    def selected(name: str) -> bool:
        if name == "output":
            return False
        if args.only is None:
            return True
        if args.only == "attention":
            return ".attention." in name
        if args.only == "ffn":
            return ".feed_forward." in name
        low, high = (int(v) for v in args.only.removeprefix("layers:").split("-"))
        return low <= int(name.split(".")[1]) <= high

    # torchao's own per-token asymmetric int8 quantize-dequantize, what its 8da4w linears apply to their input
    from torchao.quantization.quantize_.workflows.intx.intx_unpacked_to_int8_tensor import (
        _apply_int8_act_asym_per_token_quant_dequant as act8,
    )

    def int4(w: torch.Tensor, how: str) -> torch.Tensor:
        g = args.group_size
        groups = w.reshape(w.shape[0], -1, g)
        if how == "asym":
            lo, hi = groups.amin(-1, keepdim=True).clamp(max=0), groups.amax(-1, keepdim=True).clamp(min=0)
            scale = ((hi - lo) / 15).clamp(min=1e-9)
            zero = (-8 - (lo / scale).round()).clamp(-8, 7)
            return (((groups / scale).round() + zero).clamp(-8, 7) - zero).mul(scale).reshape(w.shape)
        peak = groups.abs().amax(-1, keepdim=True).clamp(min=1e-9)
        factors = torch.linspace(0.6, 1.0, 17) if how == "mse" else torch.tensor([1.0])
        best, best_err = None, None
        for f in factors:
            scale = peak * f / 7.5
            q = (groups / scale).round().clamp(-8, 7) * scale
            err = (q - groups).pow(2).sum(-1, keepdim=True)
            best = q if best is None else torch.where(err < best_err, q, best)
            best_err = err if best_err is None else torch.minimum(err, best_err)
        return best.reshape(w.shape)

    class Fake(nn.Module):
        def __init__(self, weight: torch.Tensor, activations: bool) -> None:
            super().__init__()
            self.weight, self.activations = weight, activations

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (act8(x) if self.activations else x) @ self.weight.t()

    def model_for(variant: str) -> nn.Module:
        model = build_model(checkpoint)
        if variant == "fp32":
            return model
        if variant == "8da4w" and args.only is None:
            quantize_model(model, "8da4w", args.group_size)
            return model
        if variant.startswith("8da4w-q41"):
            blocks = {name: pair for name, pair in checkpoint.q4_1_blocks.items() if selected(name)}
            if variant.endswith("bf16"):
                blocks = {name: (scale.bfloat16().float(), low) for name, (scale, low) in blocks.items()}
            quantize_model(model, "8da4w-q41", 32, blocks)
            return model
        for name, module in list(model.named_modules()):
            if isinstance(module, nn.Linear) and selected(name):
                weight = module.weight.detach()
                if variant != "act8":
                    weight = int4(weight, {"8da4w-asym": "asym", "8da4w-mse": "mse"}.get(variant, "sym"))
                parent, _, attr = name.rpartition(".")
                setattr(model.get_submodule(parent), attr, Fake(weight, variant != "w4"))
        return model

    def perplexity(model: nn.Module) -> float:
        tokens, positions = torch.tensor([ids]), torch.arange(len(ids))
        with torch.no_grad():
            h = model.tok_embeddings(tokens)
            rope = (model.rope_cos[positions].unsqueeze(1), model.rope_sin[positions].unsqueeze(1))
            mask = positions.unsqueeze(0) <= positions.unsqueeze(1)
            for layer in model.layers:
                h = layer(h, positions, 0, rope, mask)
            logits = model.output(model.norm(h))[0, :-1].double()
        nll = torch.logsumexp(logits, -1) - logits.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        return math.exp(float(nll.mean()))

    print(f"{len(ids)} tokens, groups of {args.group_size}, quantized: {args.only or 'all linears but the output'}")
    base = None
    for variant in args.variants:
        value = perplexity(model_for(variant))
        base = value if variant == "fp32" else base
        change = f" ({value / base - 1:+.1%} vs fp32)" if base and variant != "fp32" else ""
        print(f"{variant:16s} {value:8.3f}{change}", flush=True)


if __name__ == "__main__":
    main()
