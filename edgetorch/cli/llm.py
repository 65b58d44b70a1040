"""``edgetorch llm export|run``: export an LLM checkpoint to a ``.pte``; chat with one.

``export`` imports the compiler (and torch) when run; ``run`` is torch-free: it streams the generated
text to stdout and prints ExecuTorch's stats report to stderr.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
from typing import Any

from edgetorch.cli._common import EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from edgetorch.extension.llm.export import export_llm

    start = time.perf_counter()
    buffer = export_llm(
        args.checkpoint,
        args.output,
        backend=args.backend,
        max_seq_len=args.max_seq_len,
        max_context_len=args.max_context_len or args.max_seq_len,
        dtype=args.dtype,
        quantize=args.quantize,
        group_size=args.group_size,
        use_sdpa_with_kv_cache=args.use_sdpa_with_kv_cache,
        embedding_quantize=args.embedding_quantize,
    )
    print(f"wrote {args.output}: {len(buffer) / 2**20:.1f} MiB in {time.perf_counter() - start:.1f} s")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from edgetorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    if args.threads:
        limit_threads(args.threads)
    runner = TextLLMRunner(args.model, args.tokenizer)
    runner.load()
    prompt = args.prompt
    if args.chat:
        prompt = runner.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
    config = GenerationConfig(
        echo=not args.chat,
        max_new_tokens=args.max_new_tokens,
        seq_len=args.seq_len,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
    )

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    def report(stats) -> None:
        print(file=sys.stderr)
        print(stats.to_json(), file=sys.stderr)
        print(stats.report(), file=sys.stderr)

    if args.warmup:
        runner.warmup()
    runner.generate(prompt, config, token_callback=stream, stats_callback=report)
    sys.stdout.write("\n")
    return EXIT_OK


def limit_threads(n: int) -> None:
    """Run on ``n`` threads: the runtime's own kernels (``edgetorch.runtime.set_num_threads``) and NumPy's BLAS
    (threadpoolctl when installed, else the environment for a later load)."""
    from edgetorch.runtime import set_num_threads

    set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(n)
        return
    threadpool_limits(n)


def register(sub: Any) -> None:
    parser = sub.add_parser("llm", help="export an LLM checkpoint to a .pte, or generate text with one")
    llm = parser.add_subparsers(dest="llm_command", required=True)

    p = llm.add_parser("export", help="export a Hugging Face model folder or a GGUF file to a .pte")
    p.add_argument("--checkpoint", required=True, type=pathlib.Path, help="model folder (config.json) or .gguf")
    p.add_argument("--output", "-o", required=True, help="where to write the .pte")
    p.add_argument("--backend", choices=("portable", "xnnpack"), default="portable")
    p.add_argument("--max-seq-len", type=int, default=128, help="most prompt tokens one call takes (default 128)")
    p.add_argument("--max-context-len", type=int, default=None, help="KV cache length (default: max-seq-len)")
    p.add_argument(
        "--dtype", choices=("fp32", "bf16"), default="fp32", help="weights and activations (bf16: half the file)"
    )
    p.add_argument(
        "--quantize",
        choices=("none", "int8", "8da4w", "8da4w-q41"),
        default="none",
        help="linear weights: int8 per channel, 8da4w (ExecuTorch's), or 8da4w-q41 (a Q4_1 GGUF's own 4-bit "
        "blocks as 8da4w plus a per-block offset: no re-quantization loss)",
    )
    p.add_argument("--group-size", type=int, default=32, help="8da4w weight group size (default 32)")
    p.add_argument(
        "--embedding-quantize",
        "-E",
        default=None,
        metavar="BITS,GROUP",
        help="token embedding table in 8 or 4 bits, ExecuTorch's format: '8,0' (a scale per row), '4,32'",
    )
    p.add_argument(
        "--use-sdpa-with-kv-cache", action="store_true", help="attend with ExecuTorch's llama::custom_sdpa op"
    )
    p.set_defaults(func=cmd_export)

    p = llm.add_parser("run", help="generate text with an LLM .pte (torch-free)")
    p.add_argument("model", help="the .pte")
    p.add_argument("--tokenizer", required=True, help="tokenizer.json, tokenizer.model, tiktoken file or .gguf")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=-1)
    p.add_argument("--seq-len", type=int, default=-1, help="most tokens in total, prompt included")
    p.add_argument("--temperature", type=float, default=0.8, help="0 for greedy decoding")
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    p.add_argument("--warmup", action="store_true", help="run a short warm-up generation first")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads of the runtime's kernels and of BLAS (default: the CPUs available)",
    )
    p.set_defaults(func=cmd_run)
