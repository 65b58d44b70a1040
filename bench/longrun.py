"""Long runs: memory stays flat and nothing leaks over many executions and loads.

    .venv/bin/python bench/longrun.py [--executions 100000] [--loads 10000] [--decode-steps 4000]

Three runs, each watching the process's resident set size (RSS, from /proc/self/status) and its open file
descriptors:
1. ``--executions`` runs of one loaded method of a small MLP;
2. ``--loads`` load_program(path) + load_method + execute cycles, each program dropped after use;
3. ``--decode-steps`` steps of a KV-cache decoder (mutable cache buffers written at the step's position, as
   an LLM's decode loop does), one token per call;
4. ``--llm-tokens`` greedy tokens from ``TextLLMRunner`` on a small random-weight Llama exported by
   ``export_llm`` (KV cache, ``llama::custom_sdpa``), one ``generate_ids`` call; with ``--llm-pte PATH
   --llm-tokenizer PATH`` on that program instead (a real model exported with a context long enough), then a
   prompt longer than what is left of the context, which must stop with a clear error. Its KV caches' pages
   become resident as positions are first written, so RSS may grow by up to the caches' size (reported) and
   must be flat over the second half of the run.
RSS is sampled after a warm-up tenth of each run; "flat" means the last sample is within 5% of the first.
Results go to ``bench/results/longrun.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "longrun.json"


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def programs() -> tuple[bytes, bytes, int]:
    import torch

    from edgetorch.exir import to_edge

    torch.manual_seed(0)

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    class Decoder(torch.nn.Module):
        """One attention head with a KV cache in mutable buffers, fed one token per call."""

        def __init__(self, dim: int = 32, context: int = 4096) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(dim, 3 * dim)
            self.out = torch.nn.Linear(dim, dim)
            self.register_buffer("k_cache", torch.zeros(context, dim))
            self.register_buffer("v_cache", torch.zeros(context, dim))
            self.context = context

        def forward(self, x, pos):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            self.k_cache.index_copy_(0, pos, k)
            self.v_cache.index_copy_(0, pos, v)
            mask = torch.arange(self.context) <= pos
            scores = (q @ self.k_cache.T).masked_fill(~mask, float("-inf")).softmax(-1)
            return self.out(scores @ self.v_cache)

    mlp = to_edge(torch.export.export(Mlp().eval(), (torch.randn(4, 16),))).to_executorch().buffer
    context = 4096
    dec = Decoder(context=context).eval()
    ep = torch.export.export(dec, (torch.randn(1, 32), torch.tensor([0])))
    return mlp, to_edge(ep).to_executorch().buffer, context


def llm_run(tokens: int) -> dict:
    """Greedy generation of ``tokens`` tokens with the text runner, RSS sampled every tenth of the run."""
    import torch

    from edgetorch.extension.llm.export import export_llm
    from edgetorch.extension.llm.export.checkpoint import Checkpoint
    from edgetorch.extension.llm.model import ModelArgs, Transformer
    from edgetorch.extension.llm.runner import GenerationConfig, TextLLMRunner
    from edgetorch.extension.llm.runner.tokenizer import Tokenizer

    class IdTokenizer(Tokenizer):
        """Token ids in, token ids out: generate_ids needs no text, only the tokenizer's bos/eos fields."""

        bos_id, eos_ids, vocab_size = 1, [], 100

        def encode(self, text: str) -> list[int]:
            return [int(t) for t in text.split()]

        def decode(self, ids: list[int]) -> str:
            return " ".join(map(str, ids))

    args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=100, hidden_dim=96, tie_embeddings=True)
    torch.manual_seed(0)
    model = Transformer(args)
    checkpoint = Checkpoint(args, dict(model.state_dict()), bos_id=1, eos_ids=[])  # no EOS: run to the budget
    samples: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        pte = pathlib.Path(folder) / "tiny_llm.pte"
        export_llm(checkpoint, pte, max_seq_len=16, max_context_len=tokens + 32, use_sdpa_with_kv_cache=True)
        runner = TextLLMRunner(pte, IdTokenizer())
        t0 = time.perf_counter()
        config = GenerationConfig(max_new_tokens=tokens, temperature=0.0)
        out = runner.generate_ids([1, 5, 7, 9], config, _rss_every(samples, max(1, tokens // 10)))
        seconds = time.perf_counter() - t0
    samples.append(rss_mb())
    return {"tokens": len(out), "rss_mb": samples, "flat": flat(samples), "seconds": round(seconds, 1)}


def _rss_every(samples: list[float], every: int):
    """A token callback that appends the RSS to ``samples`` at every ``every``-th token."""
    count = 0

    def watch(token: int) -> None:
        nonlocal count
        count += 1
        if count % every == 0:
            samples.append(rss_mb())

    return watch


def real_llm_run(pte: str, tokenizer: str, tokens: int) -> dict:
    """``tokens`` greedy tokens from a real exported LLM, RSS sampled every tenth of the run, then one
    ``generate_ids`` call past the end of the context, which must stop with a clear error, not crash."""
    from edgetorch.errors import EdgetorchError
    from edgetorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    runner = TextLLMRunner(pte, tokenizer)
    runner.load()
    ex = runner._method._executor
    caches = [ex.bound[j] for j, slot in ex.slots.items() if not slot.constant and len(slot.sizes) == 4]
    kv_mb = sum(c.nbytes for c in caches if c.shape[1] >= tokens) / 2**20  # [batch, positions, heads, dim]
    prompt = runner.tokenizer.encode("Write a long story about a lighthouse keeper and the sea.")
    samples: list[float] = []
    config = GenerationConfig(max_new_tokens=tokens, temperature=0.0)
    runner.metadata["get_eos_ids"], runner.tokenizer.eos_ids = [], []  # run to the budget: a story may end early
    t0 = time.perf_counter()
    out = runner.generate_ids(prompt, config, _rss_every(samples, max(1, tokens // 10)))
    seconds = time.perf_counter() - t0
    samples.append(rss_mb())
    try:
        runner.generate_ids(list(range(10, 10 + int(runner.metadata["get_max_context_len"]))), config)
        past_end = "no error"
    except EdgetorchError as e:
        past_end = f"{type(e).__name__}: {e}"
    return {
        "tokens": len(out),
        "rss_mb": samples,
        "kv_cache_mb": round(kv_mb, 1),
        # The caches' pages become resident as positions are first written: RSS may grow by up to their size,
        # then must stay flat.
        "growth_within_kv_cache": samples[-1] - samples[0] <= kv_mb,
        "flat": flat(samples[len(samples) // 2 :]),
        "seconds": round(seconds, 1),
        "past_the_context": past_end,
    }


def flat(samples: list[float]) -> bool:
    return abs(samples[-1] - samples[0]) <= 0.05 * samples[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--executions", type=int, default=100_000)
    ap.add_argument("--loads", type=int, default=10_000)
    ap.add_argument("--decode-steps", type=int, default=4000)
    ap.add_argument("--llm-tokens", type=int, default=4000)
    ap.add_argument("--llm-pte", help="a real exported LLM (its context must hold the prompt and --llm-tokens)")
    ap.add_argument("--llm-tokenizer", help="its tokenizer (e.g. the GGUF it came from)")
    args = ap.parse_args()
    reexec_with_clean_blas_env()
    import numpy as np

    from edgetorch.runtime import Runtime

    mlp, decoder, context = programs()
    report: dict[str, dict] = {}
    rng = np.random.default_rng(0)

    x = rng.standard_normal((4, 16)).astype(np.float32)
    method = Runtime.get().load_program(mlp).load_method("forward")
    samples, t0 = [], time.perf_counter()
    for i in range(args.executions):
        method.execute([x])
        if i >= args.executions // 10 and i % max(1, args.executions // 10) == 0:
            samples.append(rss_mb())
    samples.append(rss_mb())
    report["executions"] = {
        "runs": args.executions,
        "rss_mb": samples,
        "flat": flat(samples),
        "seconds": round(time.perf_counter() - t0, 1),
    }

    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "mlp.pte"
        path.write_bytes(mlp)
        samples, fds, t0 = [], [], time.perf_counter()
        for i in range(args.loads):
            Runtime.get().load_program(path).load_method("forward").execute([x])
            if i >= args.loads // 10 and i % max(1, args.loads // 10) == 0:
                gc.collect()
                samples.append(rss_mb())
                fds.append(open_fds())
        gc.collect()
        samples.append(rss_mb())
        fds.append(open_fds())
    report["loads"] = {
        "cycles": args.loads,
        "rss_mb": samples,
        "flat": flat(samples),
        "open_fds": fds,
        "fds_leaked": fds[-1] - fds[0],
        "seconds": round(time.perf_counter() - t0, 1),
    }

    steps = min(args.decode_steps, context)
    method = Runtime.get().load_program(decoder).load_method("forward")
    samples, t0 = [], time.perf_counter()
    for pos in range(steps):
        method.execute([rng.standard_normal((1, 32)).astype(np.float32), np.array([pos], np.int64)])
        if pos >= steps // 10 and pos % max(1, steps // 10) == 0:
            samples.append(rss_mb())
    samples.append(rss_mb())
    report["decode"] = {
        "steps": steps,
        "rss_mb": samples,
        "flat": flat(samples),
        "seconds": round(time.perf_counter() - t0, 1),
    }

    if args.llm_tokens and args.llm_pte:
        report["llm"] = real_llm_run(args.llm_pte, args.llm_tokenizer, args.llm_tokens)
    elif args.llm_tokens:
        report["llm"] = llm_run(args.llm_tokens)

    report["command"] = "bench/longrun.py " + " ".join(sys.argv[1:])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=1) + "\n")
    for name, r in report.items():
        if isinstance(r, dict):
            print(
                f"{name}: flat={r['flat']} rss {r['rss_mb'][0]:.1f} -> {r['rss_mb'][-1]:.1f} MB, {r['seconds']} s"
                + (f", fds leaked {r['fds_leaked']}" if "fds_leaked" in r else "")
            )
    ok = all(r["flat"] for r in report.values() if isinstance(r, dict)) and report["loads"]["fds_leaked"] <= 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
