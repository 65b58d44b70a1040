"""Whisper tiny.en speech recognition: encoder ms, decode tokens/s, real-time factor, peak RSS, WER.

Contenders, each in a process of its own (so peak RSS is its own), all on the same espeak-ng utterance and the
same log-mel features (edgetorch's NumPy front end), greedy decoding with Whisper's suppressed tokens:
edgetorch's ``AsrRunner`` on the programs ``edgetorch asr export`` writes (portable and XNNPACK, fp32
and int8), ExecuTorch 1.5.1's runtime on edgetorch's XNNPACK program and on ExecuTorch's own lowering of
the same three methods (its ``to_edge_transform_and_lower`` + ``XnnpackPartitioner``), and transformers eager
(fp32, its own KV cache). BLAS pinned to ``--threads``. Example::

    python bench/whisper.py --threads 2 [--out out/whisper]

Prints a markdown table and writes ``bench/results/whisper.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import fmt_bytes, reexec_with_clean_blas_env, set_threads, table  # noqa: E402

SPOKEN = (
    "Hello world. This is a test of speech recognition on a small computer. "
    "Please call me tomorrow morning, I have a meeting at ten o'clock."
)
PROGRAMS = {
    "portable": ("portable", "none"),
    "portable-int8": ("portable", "int8"),
    "xnnpack": ("xnnpack", "none"),
    "xnnpack-int8": ("xnnpack", "int8"),
}
REPEATS = 3  # timed transcriptions per contender after one warm-up; the median is reported


def _peak_rss() -> int:
    """This process's peak resident set since its exec (``VmHWM``): ``getrusage``'s maximum carries the parent's
    peak over into a child process, and this script's parent grew large exporting the programs."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    from edgetorch.extension.llm.runner.stats import peak_rss_bytes

    return peak_rss_bytes()


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _result(texts: list[str], encoder_s: list[float], decode_s: list[float], tokens: int, total_s: list[float],
            audio_s: float, file: str | None) -> dict:  # fmt: skip
    from edgetorch.extension.asr.metrics import word_error_rate

    decode = _median(decode_s)
    return {
        "text": texts[-1],
        "wer": word_error_rate(SPOKEN, texts[-1]),
        "encoder_ms": _median(encoder_s) * 1e3,
        "decode_tps": tokens / decode if decode > 0 else 0.0,
        "rtf": _median(total_s) / audio_s,
        "peak_rss": _peak_rss(),
        "file_bytes": os.path.getsize(file) if file else None,
    }


def worker_ours(pte: str, wav: str, threads: int) -> dict:
    set_threads(threads, with_torch=False)
    from edgetorch.extension.asr.runner import AsrRunner

    runner = AsrRunner(pte)
    runner.load()
    runner.transcribe(wav)  # warm-up: the fast tier's kernels are compiled or loaded from numba's cache
    texts, enc, dec, total = [], [], [], []
    for _ in range(REPEATS):
        texts.append(runner.transcribe(wav))
        s = runner.stats
        enc.append((s.encoder_ms + s.cross_kv_ms) / 1e3)
        dec.append(s.decode_ms / 1e3)
        total.append(s.total_ms / 1e3)
    return _result(texts, enc, dec, runner.stats.num_generated_tokens, total, runner.stats.audio_seconds, pte)


def worker_executorch(pte: str, wav: str, threads: int) -> dict:
    """ExecuTorch's runtime on a Whisper program, driven by the same loop as ``AsrRunner`` (its greedy rule)."""
    set_threads(threads)
    import torch
    from executorch.runtime import Runtime

    from edgetorch.extension.asr.runner import AsrRunner, greedy_token

    ours = AsrRunner(pte)  # only for the metadata, the features and the tokenizer
    ours.load()
    program = Runtime.get().load_program(pte)
    methods = {name: program.load_method(name) for name in ("audio_encoder", "cross_kv", "text_decoder")}
    eos, start_ids = ours.eos_ids, ours.metadata["get_decoder_start_ids"]

    def transcribe() -> tuple[str, float, float, float, int]:
        t0 = time.perf_counter()
        mel = torch.from_numpy(ours.features(wav))
        t1 = time.perf_counter()
        (hidden,) = methods["audio_encoder"].execute([mel])
        cross = methods["cross_kv"].execute([hidden])
        t2 = time.perf_counter()
        tokens, generated = list(start_ids), []
        for pos in range(448 - 1):
            step = [torch.tensor([[tokens[pos]]]), torch.tensor([pos]), *cross]
            (logits,) = methods["text_decoder"].execute(step)
            if pos + 1 < len(tokens):
                continue
            token = greedy_token(logits.numpy(), ours.suppress, not generated, ours.suppress_begin)
            if token in eos:
                break
            generated.append(token)
            tokens.append(token)
        t3 = time.perf_counter()
        return ours.tokenizer.decode(generated).strip(), t2 - t1, t3 - t2, t3 - t0, len(generated)

    transcribe()
    runs = [transcribe() for _ in range(REPEATS)]
    texts, enc, dec, total = ([r[i] for r in runs] for i in range(4))
    return _result(texts, enc, dec, runs[-1][4], total, ours.stats.audio_seconds, pte)


def worker_hf(wav: str, threads: int) -> dict:
    set_threads(threads)
    import torch

    from edgetorch.extension.asr.runner import AsrRunner, default_checkpoint
    from edgetorch.extension.asr.whisper import load_whisper, reference_greedy, whisper_metadata

    folder = default_checkpoint()
    model = load_whisper(folder)
    metadata = whisper_metadata(model, folder)
    front = AsrRunner(Path("unused.pte"), folder / "tokenizer.json")
    texts, enc, dec, total, count = [], [], [], [], 0
    for i in range(REPEATS + 1):
        t0 = time.perf_counter()
        mel = front.features(wav)
        t1 = time.perf_counter()
        with torch.no_grad():
            model.model.encoder(torch.from_numpy(mel))
        t2 = time.perf_counter()
        ids = reference_greedy(model, mel, metadata)  # runs the encoder again: its time is taken off below
        t3 = time.perf_counter()
        if i:  # the first run is the warm-up
            texts.append(front.tokenizer.decode(ids).strip())
            enc.append(t2 - t1)
            dec.append(t3 - t2 - (t2 - t1))
            total.append(t3 - t0 - (t2 - t1))
            count = len(ids)
    return _result(texts, enc, dec, count, total, front.stats.audio_seconds, None)


def export_programs(out: Path) -> dict[str, Path]:
    """edgetorch's three programs and ExecuTorch's lowering of the same methods, into ``out`` (kept if there)."""
    paths = {name: out / f"whisper_{name}.pte" for name in PROGRAMS}
    paths["executorch-xnnpack"] = out / "whisper_executorch_xnnpack.pte"
    if all(p.exists() for p in paths.values()):
        return paths
    from edgetorch.extension.asr.runner import default_checkpoint
    from edgetorch.extension.asr.whisper import export_whisper

    folder = default_checkpoint()
    for name, (backend, quantize) in PROGRAMS.items():
        if not paths[name].exists():
            print(f"exporting {name} with edgetorch", flush=True)
            export_whisper(folder, paths[name], backend=backend, quantize=quantize)
    if not paths["executorch-xnnpack"].exists():
        print("exporting xnnpack with ExecuTorch's own lowering", flush=True)
        paths["executorch-xnnpack"].write_bytes(executorch_program(folder))
    return paths


def executorch_program(folder: Path) -> bytes:
    """ExecuTorch 1.5.1's ``to_edge_transform_and_lower`` + ``XnnpackPartitioner`` on edgetorch's three Whisper
    modules, with the same constant methods."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower

    from edgetorch.extension.asr.whisper import load_whisper, whisper_metadata, whisper_programs

    model = load_whisper(folder)
    programs = whisper_programs(model)
    edge = to_edge_transform_and_lower(
        programs,
        partitioner=[XnnpackPartitioner()],
        constant_methods=whisper_metadata(model, folder),
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    return edge.to_executorch(ExecutorchBackendConfig(run_reinplace_pass=True)).buffer


def _spawn(args: list[str]) -> dict:
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "out" / "whisper")
    parser.add_argument("--no-executorch", action="store_true", help="skip ExecuTorch's runtime and lowering")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        if kind == "ours":
            result = worker_ours(rest[0], rest[1], args.threads)
        elif kind == "executorch":
            result = worker_executorch(rest[0], rest[1], args.threads)
        else:
            result = worker_hf(rest[0], args.threads)
        print(json.dumps(result))
        return
    reexec_with_clean_blas_env()
    if shutil.which("espeak-ng") is None:
        raise SystemExit("espeak-ng is not installed (apt-get install espeak-ng); it speaks the benchmark's sentences")
    args.out.mkdir(parents=True, exist_ok=True)
    wav = args.out / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(wav), SPOKEN], check=True)
    paths = export_programs(args.out)
    common = ["--threads", str(args.threads)]
    results = {}
    for name in PROGRAMS:
        print(f"running edgetorch {name}", flush=True)
        results[f"edgetorch {name}"] = _spawn(["ours", str(paths[name]), str(wav), *common])
    if not args.no_executorch:
        print("running ExecuTorch", flush=True)
        results["ExecuTorch on edgetorch's xnnpack"] = _spawn(["executorch", str(paths["xnnpack"]), str(wav), *common])
        theirs = str(paths["executorch-xnnpack"])
        results["ExecuTorch on its own xnnpack"] = _spawn(["executorch", theirs, str(wav), *common])
        results["edgetorch on ExecuTorch's xnnpack"] = _spawn(["ours", theirs, str(wav), *common])
    print("running transformers eager", flush=True)
    results["transformers eager (fp32)"] = _spawn(["hf", str(wav), *common])
    reference = results["transformers eager (fp32)"].get("text")
    rows = []
    for name, r in results.items():
        if "error" in r:
            rows.append([name, "error: " + r["error"][:80], "", "", "", "", "", ""])
            continue
        rows.append([
            name, f"{r['encoder_ms']:.0f}", f"{r['decode_tps']:.1f}", f"{r['rtf']:.3f}", fmt_bytes(r["peak_rss"]),
            fmt_bytes(r["file_bytes"]) if r["file_bytes"] else "-", f"{r['wer']:.2f}", str(r["text"] == reference),
        ])  # fmt: skip
    print(f"\nWhisper tiny.en on {wav.name} (espeak-ng), {args.threads} BLAS thread(s), median of {REPEATS}")
    headers = ["contender", "encoder ms", "decode tok/s", "RTF", "peak RSS", "file", "WER", "same text as HF"]
    print(table(headers, rows))
    print(f"\nspoken: {SPOKEN!r}\nHF:     {reference!r}")
    out = Path(__file__).resolve().parent / "results" / "whisper.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"threads": args.threads, "spoken": SPOKEN, "results": results}, indent=1))


if __name__ == "__main__":
    main()
