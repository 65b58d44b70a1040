"""Export a checkpoint with ExecuTorch's own ``export_llm`` (the ExecuTorch-XNNPACK contender of bench/llm.py).

ExecuTorch's exporter reads Meta's Llama layout (``consolidated.pth`` + ``params.json``); our checkpoint loader
already renames Hugging Face and GGUF weights to that layout (rotary halves split, as ``use_hf_rope`` expects),
so this script writes those two files and runs ``python -m executorch.extension.llm.export.export_llm`` with
the KV cache, the custom SDPA op, dynamic prefill length and XNNPACK delegation, in fp32::

    python bench/llm_executorch_export.py --checkpoint SmolLM2.gguf --output-dir /tmp/etllm \\
        --max-seq-len 128 --max-context-len 512

It needs the ``executorch`` package (bench-only; edgetorch never imports it). Prints the ``.pte`` path.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a Hugging Face model folder or a .gguf file")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--max-context-len", type=int, default=512)
    parser.add_argument("--name", default="executorch_xnnpack.pte")
    args = parser.parse_args()

    import torch

    from edgetorch.extension.llm.export import load_checkpoint

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = load_checkpoint(args.checkpoint)
    a = checkpoint.args
    if a.arch != "llama" or a.qk_norm or a.attention_bias or a.rope_scaling:
        raise SystemExit(f"this script handles plain Llama-family checkpoints only, got {a}")
    torch.save(dict(checkpoint.state_dict), out / "consolidated.pth")
    params = dict(dim=a.dim, n_layers=a.n_layers, n_heads=a.n_heads, n_kv_heads=a.n_kv_heads,
                  vocab_size=a.vocab_size, hidden_dim=a.hidden_dim, norm_eps=a.norm_eps,
                  rope_theta=a.rope_theta, use_hf_rope=True)  # fmt: skip
    (out / "params.json").write_text(json.dumps(params))
    command = [
        sys.executable, "-m", "executorch.extension.llm.export.export_llm", "base.model_class=llama3",
        f"base.params={out / 'params.json'}", f"base.checkpoint={out / 'consolidated.pth'}",
        "model.use_kv_cache=True", "model.use_sdpa_with_kv_cache=True", "model.enable_dynamic_shape=True",
        "model.dtype_override=fp32", "backend.xnnpack.enabled=True",
        f"export.max_seq_length={args.max_seq_len}", f"export.max_context_length={args.max_context_len}",
        f"export.output_dir={out}", f"export.output_name={args.name}",
    ]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=out)
    print(f"exported in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    print(out / args.name)


if __name__ == "__main__":
    main()
