"""Reliability of the runtime under use: threads, memory limits, repeated loads, and no code run from file contents.

The long runs the reliability issue asks for (100,000 executions, 10,000 load/unload cycles, RSS and file
descriptors watched) are in ``bench/longrun.py``; here are shorter versions of the same checks.
"""

from __future__ import annotations

import ast
import gc
import os
import pathlib
import threading

import numpy as np
import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.runtime import ProgramLoadError, Runtime

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "edgetorch"


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x))).softmax(-1)


class Noisy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand_like(x)


def lower(model: torch.nn.Module, args: tuple) -> bytes:
    return to_edge(torch.export.export(model, args, strict=False)).to_executorch().buffer


@pytest.fixture(scope="module")
def mlp_pte() -> bytes:
    return lower(Mlp(), (torch.randn(3, 8),))


def _inputs(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((3, 8)).astype(np.float32) for _ in range(n)]


def test_threads_each_with_their_own_method_match_single_threaded(mlp_pte):
    program = Runtime.get().load_program(mlp_pte)
    inputs = _inputs(16)
    method = program.load_method("forward")
    want = [method.execute([x])[0] for x in inputs]
    errors: list[str] = []

    def work(k: int) -> None:
        own = program.load_method("forward")
        for step in range(1000):
            i = (k + step) % len(inputs)
            got = own.execute([inputs[i]])[0]
            if not np.array_equal(got, want[i]):
                errors.append(f"thread {k} step {step}: output differs from the single-threaded run")
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def test_one_method_shared_by_threads_runs_one_call_at_a_time(mlp_pte):
    method = Runtime.get().load_program(mlp_pte).load_method("forward")
    inputs = _inputs(16)
    want = [method.execute([x])[0] for x in inputs]
    errors: list[str] = []

    def work(k: int) -> None:
        for step in range(1000):
            i = (k * 3 + step) % len(inputs)
            if not np.array_equal(method.execute([inputs[i]])[0], want[i]):
                errors.append(f"thread {k} step {step}: a concurrent run changed this run's output")
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def test_random_streams_are_per_method_and_per_thread():
    pte = lower(Noisy(), (torch.zeros(4),))
    program = Runtime.get().load_program(pte)
    alone = program.load_method("forward", seed=5)
    want = [alone.execute([np.zeros(4, np.float32)])[0] for _ in range(50)]
    results: dict[int, list[np.ndarray]] = {}

    def work(k: int) -> None:
        method = program.load_method("forward", seed=5)
        results[k] = [method.execute([np.zeros(4, np.float32)])[0] for _ in range(50)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, got in results.items():
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b, err_msg=f"thread {k}")


def test_max_memory_refuses_a_plan_before_allocating(mlp_pte):
    program = Runtime.get().load_program(mlp_pte, max_memory=64)
    with pytest.raises(ProgramLoadError, match=r"limit of 64.*max_memory"):
        program.load_method("forward")
    roomy = Runtime.get().load_program(mlp_pte, max_memory=1 << 20)
    assert roomy.load_method("forward").execute(_inputs(1))[0].shape == (3, 4)


def test_max_memory_must_be_a_byte_count(mlp_pte):
    from edgetorch.runtime import InvalidInputError

    with pytest.raises(InvalidInputError, match="max_memory"):
        Runtime.get().load_program(mlp_pte, max_memory=-1)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to count file descriptors")
def test_loading_from_a_path_leaks_no_file_descriptors(tmp_path, mlp_pte):
    path = tmp_path / "mlp.pte"
    path.write_bytes(mlp_pte)
    x = _inputs(1)
    for _ in range(20):  # warm up: caches and lazily imported modules
        Runtime.get().load_program(path).load_method("forward").execute(x)
    gc.collect()
    before = _open_fds()
    for _ in range(500):
        Runtime.get().load_program(path).load_method("forward").execute(x)
    gc.collect()
    assert _open_fds() <= before, f"{_open_fds() - before} file descriptors left open after 500 loads"


# Calls that would run code chosen by a file's contents. The runtime and format readers use none of them; the
# compiler side (which reads only what the user's own Python hands it) is scanned too.
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "marshal", "shelve", "cloudpickle"}
# importlib.import_module with a computed name: allowed only where the name comes from our own tables.
DYNAMIC_IMPORT_ALLOWED = {
    "edgetorch/runtime/kernels/registry.py": "family names come from the generated _index.FAMILIES, not from files",
    "edgetorch/runtime/backends.py": "backend modules come from installed entry points, not from files",
    "edgetorch/runtime/selective.py": "the generated selective module imports family names written by us",
    "edgetorch/_lazy.py": "lazy attribute table written in our source",
    "edgetorch/cli/__init__.py": "command modules come from the COMMANDS list in our source",
    "edgetorch/devtools/extras.py": "optional packages (pandas, tabulate, matplotlib) named in our source",
}


# exec/compile of Python source: allowed only for source our own code wrote, which it runs as an import would.
EXEC_ALLOWED = {
    "edgetorch/devtools/fuzz/generator.py": "runs the Python source of a fuzz case the generator wrote (or a kept "
    "finding of it in tests/regressions), as importing that .py would; never the bytes of a program file",
}


def _base(node: ast.Attribute) -> str:
    value = node.value
    return value.id if isinstance(value, ast.Name) else ""


def _python_files() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_code_runs_from_file_contents():
    found = []
    for path in _python_files():
        rel = path.relative_to(PACKAGE.parent).as_posix()
        tree = ast.parse(path.read_text(), rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "").split(".")[0]]
            else:
                names = []
            found += [f"{rel}:{node.lineno} imports {n}" for n in names if n in FORBIDDEN_MODULES]
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                builtin = isinstance(fn, ast.Name) or (isinstance(fn, ast.Attribute) and _base(fn) == "builtins")
                exempt = name in ("exec", "compile") and rel in EXEC_ALLOWED
                if name in FORBIDDEN_CALLS and builtin and not exempt:  # not torch's module.eval() or re.compile()
                    found.append(f"{rel}:{node.lineno} calls {name}()")
                if name == "load" and isinstance(fn, ast.Attribute) and _base(fn) in ("np", "numpy", "torch"):
                    safe = {"np": "allow_pickle", "numpy": "allow_pickle", "torch": "weights_only"}[_base(fn)]
                    wanted = _base(fn) == "torch"  # weights_only=True; allow_pickle=False
                    if not any(k.arg == safe and getattr(k.value, "value", None) is wanted for k in node.keywords):
                        found.append(f"{rel}:{node.lineno} calls {_base(fn)}.load without {safe}={wanted}")
                if name == "import_module" and rel not in DYNAMIC_IMPORT_ALLOWED:
                    found.append(f"{rel}:{node.lineno} imports a module by computed name")
    assert not found, "\n".join(found)


def test_unplanned_tensors_count_against_max_memory():
    """Inputs are unplanned (allocated at load): many of them under a small budget are refused before allocation."""

    class Wide(torch.nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            return torch.stack(xs).sum(0)

    from edgetorch.exir import ExecutorchBackendConfig
    from edgetorch.exir.passes import MemoryPlanningPass

    xs = tuple(torch.randn(64, 64) for _ in range(8))  # 8 unplanned inputs of 16 KiB
    config = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))
    pte = to_edge(torch.export.export(Wide(), xs, strict=False)).to_executorch(config).buffer
    planned = Runtime.get().load_program(pte).metadata("forward").memory_planned_buffer_size(0)
    with pytest.raises(ProgramLoadError, match="max_memory"):
        Runtime.get().load_program(pte, max_memory=planned + 4 * 16384).load_method("forward")
    method = Runtime.get().load_program(pte, max_memory=planned + 8 * 16384).load_method("forward")
    np.testing.assert_allclose(method.execute(list(xs))[0], torch.stack(xs).sum(0).numpy(), rtol=1e-5, atol=1e-5)
