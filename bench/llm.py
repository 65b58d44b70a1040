"""LLM generation: prefill and decode tokens/s, time to first token, peak RSS, file size.

Contenders, each in a process of its own (so peak RSS is its own): edgetorch's TextLLMRunner on one or
more exported ``.pte`` files, Hugging Face transformers eager on the GGUF the programs came from, ExecuTorch's
runtime on a program ExecuTorch's own ``export_llm`` wrote (``--executorch-pte``, made by
``bench/llm_executorch_export.py``), and llama.cpp (``llama-cpp-python``) on the same GGUF (``--llama-cpp``).
Every contender is fed the same prompt token ids (our tokenizer's) and decodes greedily.
Greedy decoding of ``--new-tokens`` tokens after a chat prompt of ~40 tokens, BLAS pinned to
``--threads``. Example::

    python -m edgetorch llm export --checkpoint SmolLM2.gguf --output /tmp/smol.pte --max-context-len 512
    python bench/llm.py --gguf SmolLM2.gguf --pte /tmp/smol.pte --threads 1 --new-tokens 128

Prints a markdown table and writes ``bench/results/llm.json`` and its chart ``llm.png`` (``bench/plots.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import fmt_bytes, reexec_with_clean_blas_env, set_threads, table  # noqa: E402

PROMPT = "Explain in a few sentences how a transformer language model turns a prompt into an answer."


def worker_ours(pte: str, tokenizer: str, new_tokens: int, threads: int) -> dict:
    set_threads(threads, with_torch=False)
    from edgetorch.extension.llm.runner import GenerationConfig, TextLLMRunner
    from edgetorch.extension.llm.runner.stats import peak_rss_bytes

    runner = TextLLMRunner(pte, tokenizer)
    runner.load()
    ids = prompt_ids(runner.tokenizer)
    runner.metadata["get_eos_ids"], runner.tokenizer.eos_ids = [], []  # always make new_tokens tokens
    runner.warmup("Hello", 4)
    runner.reset()
    out = runner.generate_ids(ids, GenerationConfig(temperature=0, max_new_tokens=new_tokens))
    s = runner.stats
    return {
        "load_s": s.model_load_s,
        "prompt_tokens": s.num_prompt_tokens,
        "generated": len(out),
        "ttft_s": s.time_to_first_token_s,
        "prefill_tps": s.prefill_tokens_per_s,
        "decode_tps": s.decode_tokens_per_s,
        "peak_rss": peak_rss_bytes(),
        "file_bytes": os.path.getsize(pte),
        "tokens": out,
    }


def prompt_ids(tokenizer) -> list[int]:
    """``PROMPT`` as a chat turn, encoded by ``tokenizer`` (ours): the ids every contender and script is fed."""
    return tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}]))


def _prompt_ids(gguf: str) -> list[int]:
    from edgetorch.extension.llm.runner import load_tokenizer

    return prompt_ids(load_tokenizer(gguf))


def _greedy(model_step: Callable[[list[int], int], int], ids: list[int]) -> Iterator[int]:
    """Greedy tokens from ``model_step(tokens, start_pos) -> next token``: the prompt in one call, then one a call."""
    token = model_step(ids, 0)
    pos = len(ids)
    while True:
        yield token
        token = model_step([token], pos)
        pos += 1


def _timed(load_s: float, ids: list[int], tokens: Iterator[int], new_tokens: int, file: str) -> dict:
    """Take ``new_tokens`` tokens from ``tokens`` (whose first one ends the prefill) and report them as ours are."""
    from edgetorch.extension.llm.runner.stats import peak_rss_bytes

    start = first = time.perf_counter()
    out: list[int] = []
    for token in tokens:
        out.append(int(token))
        if len(out) == 1:
            first = time.perf_counter()
        if len(out) == new_tokens:
            break
    end = time.perf_counter()
    return {
        "load_s": load_s,
        "prompt_tokens": len(ids),
        "generated": len(out),
        "ttft_s": first - start,
        "prefill_tps": len(ids) / (first - start),
        "decode_tps": (len(out) - 1) / (end - first),
        "peak_rss": peak_rss_bytes(),
        "file_bytes": os.path.getsize(file),
        "tokens": out,
    }


def worker_hf(gguf: str, new_tokens: int, threads: int) -> dict:
    set_threads(threads)
    import torch
    from transformers import AutoModelForCausalLM

    path = Path(gguf)
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    load = time.perf_counter() - start
    ids = _prompt_ids(gguf)
    cache: list = [None]

    def step(tokens: list[int], pos: int) -> int:
        result = model(torch.tensor([tokens]), past_key_values=cache[0] if pos else None, use_cache=True)
        cache[0] = result.past_key_values
        return int(result.logits[0, -1].argmax())

    with torch.no_grad():
        step(ids[:4], 0)  # warm-up (its cache is dropped: the prompt below starts at position 0)
        return _timed(load, ids, _greedy(step, ids), new_tokens, gguf)


def worker_executorch(pte: str, gguf: str, new_tokens: int, threads: int) -> dict:
    """ExecuTorch's runtime (pybindings, XNNPACK, its llama custom ops and quantized kernels) on an LLM program: the
    same prefill-then-decode loop as our runner, driven from Python, greedy."""
    set_threads(threads)
    start = time.perf_counter()
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  registers the llama::* kernels
    import executorch.kernels.quantized  # noqa: F401  quantized_decomposed::* (a quantized token table)
    import torch
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    load = time.perf_counter() - start
    ids = _prompt_ids(gguf)

    def step(tokens: list[int], pos: int) -> int:
        logits = method.execute([torch.tensor([tokens], dtype=torch.long), torch.tensor([pos], dtype=torch.long)])[0]
        return int(logits.reshape(-1, logits.shape[-1])[-1].argmax())

    step(ids[:4], 0)  # warm-up (the cache positions it wrote are overwritten below)
    return _timed(load, ids, _greedy(step, ids), new_tokens, pte)


def worker_llama_cpp(gguf: str, new_tokens: int, threads: int) -> dict:
    """llama.cpp through ``llama-cpp-python`` on the GGUF itself (Q4_1 weights, its own CPU kernels)."""
    set_threads(threads, with_torch=False)
    start = time.perf_counter()
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=512, n_threads=threads, n_threads_batch=threads, verbose=False)
    load = time.perf_counter() - start
    ids = _prompt_ids(gguf)
    llm.eval(ids[:4])  # warm-up
    llm.reset()
    tokens = llm.generate(ids, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0, reset=True)
    return _timed(load, ids, tokens, new_tokens, gguf)


def _spawn(args: list[str]) -> dict:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", required=True, help="the GGUF checkpoint (tokenizer and HF reference)")
    parser.add_argument("--pte", action="append", default=[], help="an exported program (repeatable)")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-hf", action="store_true", help="skip the transformers eager contender")
    parser.add_argument("--executorch-pte", help="a program from ExecuTorch's export_llm, run on ExecuTorch's runtime")
    parser.add_argument("--llama-cpp", action="store_true", help="add llama.cpp (llama-cpp-python) on the GGUF")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        if kind == "ours":
            result = worker_ours(rest[0], args.gguf, args.new_tokens, args.threads)
        elif kind == "executorch":
            result = worker_executorch(rest[0], args.gguf, args.new_tokens, args.threads)
        elif kind == "llama_cpp":
            result = worker_llama_cpp(args.gguf, args.new_tokens, args.threads)
        else:
            result = worker_hf(args.gguf, args.new_tokens, args.threads)
        print(json.dumps(result))
        return
    reexec_with_clean_blas_env()
    common = ["--gguf", args.gguf, "--new-tokens", str(args.new_tokens), "--threads", str(args.threads)]
    results = {}
    for pte in args.pte:
        results[f"edgetorch {Path(pte).name}"] = _spawn(["ours", pte, *common])
    if args.executorch_pte:
        results[f"ExecuTorch {Path(args.executorch_pte).name}"] = _spawn(["executorch", args.executorch_pte, *common])
    if args.llama_cpp:
        results[f"llama.cpp {Path(args.gguf).name}"] = _spawn(["llama_cpp", *common])
    if not args.no_hf:
        results["transformers eager (fp32)"] = _spawn(["hf", *common])
    reference = results.get("transformers eager (fp32)", {}).get("tokens")
    rows = []
    for name, r in results.items():
        if "error" in r:
            rows.append([name, "error: " + r["error"][:80], "", "", "", "", "", ""])
            continue
        same = "-" if reference is None else str(r["tokens"] == reference)
        rows.append([
            name, f"{r['prefill_tps']:.1f}", f"{r['decode_tps']:.2f}", f"{r['ttft_s']:.3f}", f"{r['load_s']:.2f}",
            fmt_bytes(r["peak_rss"]), fmt_bytes(r["file_bytes"]), same,
        ])  # fmt: skip
    print(f"{args.new_tokens} new tokens after a {next(iter(results.values())).get('prompt_tokens', '?')}-token "
          f"prompt, greedy, {args.threads} BLAS thread(s)")  # fmt: skip
    print(
        table(
            ["contender", "prefill tok/s", "decode tok/s", "TTFT s", "load s", "peak RSS", "file", "same tokens as HF"],
            rows,
        )
    )
    out = Path(__file__).resolve().parent / "results" / "llm.json"
    out.parent.mkdir(exist_ok=True)
    summary = {"threads": args.threads, "new_tokens": args.new_tokens, "results": results}
    out.write_text(json.dumps(summary, indent=1))
    from bench.plots import llm_plot

    llm_plot(summary, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
