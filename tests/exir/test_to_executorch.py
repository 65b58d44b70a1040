"""End to end: export -> to_executorch -> .pte bytes that the real ExecuTorch runtime runs like eager PyTorch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.export import Dim, export

from edgetorch.exir.memory_planning import verify_plan
from edgetorch.exir.to_executorch import ExecutorchBackendConfig, ExecutorchProgramManager
from edgetorch.format.pte import load_pte

et_runtime = pytest.importorskip("executorch.runtime")
warnings.filterwarnings("ignore", category=UserWarning)


def lower(model: torch.nn.Module, args: tuple, **kwargs) -> ExecutorchProgramManager:
    with torch.no_grad():
        ep = export(model, args, **kwargs).run_decompositions()
    return ExecutorchProgramManager({"forward": ep})


def run_et(buffer: bytes, inputs: list, method: str = "forward") -> list:
    program = et_runtime.Runtime.get().load_program(buffer)
    return program.load_method(method).execute(inputs)


def load_method(buffer: bytes, runtime: str, method: str = "forward"):
    """``execute(list of torch tensors) -> list`` on the real ExecuTorch runtime or on edgetorch's."""
    if runtime == "executorch":
        return et_runtime.Runtime.get().load_program(buffer).load_method(method).execute
    from edgetorch.runtime import Runtime

    loaded = Runtime.get().load_program(buffer).load_method(method)
    return lambda inputs: [_to_torch(o) for o in loaded.execute([t.numpy() for t in inputs])]


def _to_torch(value: object) -> object:
    return torch.from_numpy(np.array(value)) if isinstance(value, np.ndarray) else value


RUNTIMES = ["executorch", "edgetorch"]


def assert_close(got: list, expected: object, atol: float = 1e-5) -> None:
    flat = torch.utils._pytree.tree_leaves(expected)
    assert len(got) == len(flat)
    for g, e in zip(got, flat):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(g, e, atol=atol, rtol=atol)
        else:
            assert g == e


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x).softmax(-1)


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.MaxPool2d(2)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.head(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


class Block(torch.nn.Module):
    def __init__(self, d: int = 16, heads: int = 2):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 6, batch_first=True)
        self.gru = torch.nn.GRU(6, 5, batch_first=True)

    def forward(self, x):
        y, _ = self.lstm(x)
        z, h = self.gru(y)
        return z, h


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x):
        self.count.add_(x)
        return self.count.clone()


class OnesCounter(Counter):
    def __init__(self):
        super().__init__()
        self.count.fill_(1.0)


class KVCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(8, 4))

    def forward(self, pos, value):
        self.cache.index_copy_(0, pos, value)
        return self.cache.sum(0)


class Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


STATIC_MODELS = [
    (MLP, (torch.randn(2, 8),)),
    (ConvNet, (torch.randn(1, 3, 8, 8),)),
    (Block, (torch.randn(2, 5, 16),)),
    (Recurrent, (torch.randn(2, 3, 4),)),
]


@pytest.mark.parametrize("cls,args", STATIC_MODELS, ids=[m.__name__ for m, _ in STATIC_MODELS])
def test_model_runs_like_eager(cls, args):
    torch.manual_seed(0)
    model = cls().eval()
    prog = lower(model, args)
    verify_plan(prog.memory_plans["forward"])
    for runtime in RUNTIMES:
        assert_close(load_method(prog.buffer, runtime)(list(args)), model(*args), atol=1e-4)


def test_dynamic_batch_runs_at_several_sizes():
    model = MLP().eval()
    prog = lower(model, (torch.randn(2, 8),), dynamic_shapes={"x": {0: Dim("b", max=16)}})
    [x_spec] = [s for s in prog.memory_plans["forward"].specs if s.name == "x"]
    assert x_spec.shape == (16, 8) and x_spec.dynamic
    for runtime in RUNTIMES:
        execute = load_method(prog.buffer, runtime)
        for batch in (1, 5, 16):
            x = torch.randn(batch, 8)
            assert_close(execute([x]), model(x))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
        )  # fmt: skip

    def forward(self, x):
        return self.net(x)


def test_dynamic_image_size_is_planned_at_the_upper_bound():
    model = CNN().eval()
    dims = {"x": {2: Dim("h", min=16, max=64), 3: Dim("w", min=16, max=64)}}
    prog = lower(model, (torch.randn(1, 1, 16, 16),), dynamic_shapes=dims)
    [x_spec] = [s for s in prog.memory_plans["forward"].specs if s.name == "x"]
    assert x_spec.shape == (1, 1, 64, 64)
    for runtime in RUNTIMES:
        execute = load_method(prog.buffer, runtime)
        for h, w in ((16, 16), (32, 48), (64, 64)):
            x = torch.randn(1, 1, h, w)
            assert_close(execute([x]), model(x), atol=1e-4)
    with pytest.raises(ValueError, match="upper bound"):
        load_method(prog.buffer, "edgetorch")([torch.randn(1, 1, 128, 128)])


def test_symbolic_sizes_become_executorch_prim_ops():
    class Flatten(torch.nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0] * x.shape[1])

    dims = {"x": {0: Dim("a", max=8), 1: Dim("b", max=8)}}
    prog = lower(Flatten(), (torch.randn(3, 4),), dynamic_shapes=dims)
    names = {op.name for op in prog.executorch_program.execution_plan[0].operators}
    assert "executorch_prim::mul" in names and "aten::sym_size" in names
    x = torch.randn(5, 7)
    for runtime in RUNTIMES:
        assert_close(load_method(prog.buffer, runtime)([x]), x.reshape(35))


def test_item_feeds_scalar_overloads():
    class ScaleByMax(torch.nn.Module):
        def forward(self, x):
            return x * x.max().item() + x.shape[0]

    x = torch.randn(4)
    prog = lower(ScaleByMax(), (x,))
    assert "aten.mul.Scalar_out" in str(prog.exported_program().graph)
    for runtime in RUNTIMES:
        assert_close(load_method(prog.buffer, runtime)([x]), ScaleByMax()(x))


def test_buffer_counter_keeps_state_across_calls():
    prog = lower(Counter(), (torch.ones(3),))
    graph = str(prog.exported_program().graph_module.graph)
    assert "aten.copy_.default" in graph and "alloc" in graph
    for runtime in RUNTIMES:
        execute = load_method(prog.buffer, runtime)
        for step in (1, 2, 3):
            assert_close(execute([torch.ones(3)]), torch.full((3,), float(step)))


def test_buffer_initial_state_is_stored():
    prog = lower(OnesCounter(), (torch.ones(3),))
    assert len(load_pte(prog.buffer).program.mutable_data_segments) == 1
    for runtime in RUNTIMES:
        execute = load_method(prog.buffer, runtime)
        for step in (2, 3):
            assert_close(execute([torch.ones(3)]), torch.full((3,), float(step)))


def test_user_input_mutation_is_written_back():
    class AddInPlace(torch.nn.Module):
        def forward(self, x):
            x.add_(1.0)
            return x * 2

    x = torch.zeros(3)
    prog = lower(AddInPlace(), (torch.zeros(3),))
    assert "copy_" in str(prog.exported_program())
    assert_close(run_et(prog.buffer, [x]), torch.full((3,), 2.0))


def test_kv_cache_index_copy_into_buffer():
    prog = lower(KVCache(), (torch.tensor([0]), torch.ones(1, 4)))
    for runtime in RUNTIMES:
        model, execute = KVCache(), load_method(prog.buffer, runtime)
        for pos in (0, 3, 5):
            value = torch.randn(1, 4)
            expected = model(torch.tensor([pos]), value)
            assert_close(execute([torch.tensor([pos]), value]), expected)


def test_cond_takes_the_right_branch():
    prog = lower(Cond(), (torch.randn(4),))
    verify_plan(prog.memory_plans["forward"])
    for runtime in RUNTIMES:
        execute = load_method(prog.buffer, runtime)
        for x in (torch.rand(4), -torch.rand(4)):
            assert_close(execute([x]), x.sin() if x.sum() > 0 else x.cos())


def test_two_methods_and_constant_methods():
    enc, dec = torch.nn.Linear(10, 5), torch.nn.Linear(5, 10)
    with torch.no_grad():
        programs = {
            "encode": export(enc, (torch.randn(1, 10),)).run_decompositions(),
            "decode": export(dec, (torch.randn(1, 5),)).run_decompositions(),
        }
    constants = {"get_max_seq_len": 128, "use_kv": True, "scale": 0.5}
    prog = ExecutorchProgramManager(programs, constants)
    assert prog.methods == {"encode", "decode"} and prog.config_methods == set(constants)
    x, z = torch.randn(1, 10), torch.randn(1, 5)
    for runtime in RUNTIMES:
        assert_close(load_method(prog.buffer, runtime, "encode")([x]), enc(x), atol=1e-4)
        assert_close(load_method(prog.buffer, runtime, "decode")([z]), dec(z), atol=1e-4)
        for name, value in constants.items():
            assert load_method(prog.buffer, runtime, name)([]) == [value]
    plans = {p.name: p for p in load_pte(prog.buffer).program.execution_plan}
    assert plans["get_max_seq_len"].chains[0].instructions == []


def test_outputs_scalars_lists_and_aliases():
    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))

        def forward(self, x):
            values, indices = x.max(0)
            return [values, indices], x, self.w, x.shape[0], 2.5, True

    model = Mixed()
    x = torch.randn(4, 3)
    prog = lower(model, (x,))
    for runtime in RUNTIMES:
        assert_close(load_method(prog.buffer, runtime)([x]), list(torch.utils._pytree.tree_leaves(model(x))))


def test_constants_live_in_one_aligned_segment():
    model = MLP()
    prog = lower(model, (torch.randn(2, 8),))
    pte = load_pte(prog.buffer)
    offsets = pte.program.constant_segment.offsets
    assert offsets[0] == 0 and len(offsets) == 5 and all(o % 16 == 0 for o in offsets)
    weight = pte.segment(0)[offsets[1] : offsets[1] + 16 * 8 * 4]
    assert torch.equal(torch.frombuffer(bytearray(weight), dtype=torch.float32).reshape(16, 8), model.net[0].weight)


def test_save_and_write_to_file(tmp_path):
    prog = lower(MLP(), (torch.randn(2, 8),))
    prog.save(tmp_path / "m.pte")
    assert (tmp_path / "m.pte").read_bytes() == prog.buffer and prog.buffer[4:8] == b"ET12"
    with pytest.raises(ValueError, match=".pte"):
        prog.save(tmp_path / "m.bin")


def test_debug_handle_map_covers_every_kernel_call():
    from edgetorch.exir import to_edge

    prog = to_edge(export(MLP(), (torch.randn(2, 8),))).to_executorch()
    handles = prog.debug_handle_map["forward"]
    graph_handles = {n.meta["debug_handle"] for n in prog.exported_program().graph.nodes if "debug_handle" in n.meta}
    assert sorted(handles) == list(range(len(prog.executorch_program.execution_plan[0].chains[0].instructions)))
    assert set(handles.values()) <= graph_handles


def test_unsupported_operator_names_op_and_source_line():
    from edgetorch.errors import UnsupportedOperatorError

    @torch.library.custom_op("edgetorch_test::no_out", mutates_args=())
    def no_out(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    no_out.register_fake(lambda x: torch.empty_like(x))

    class NoOut(torch.nn.Module):
        def forward(self, x):
            return no_out(x) + 1

    with pytest.raises(
        UnsupportedOperatorError,
        match=r"test_to_executorch.py.*no_out\(x\) \+ 1.*edgetorch_test::no_out has no out variant",
    ):
        lower(NoOut(), (torch.randn(8),))


def test_config_passes_run_first_on_the_edge_graph_as_in_executorch():
    seen = []

    def record(gm: torch.fx.GraphModule) -> None:
        calls = [n for n in gm.graph.nodes if n.op == "call_function"]
        seen.append((any("spec" in n.meta for n in calls), any("out" in str(n.target) for n in calls)))

    with torch.no_grad():
        ep = export(MLP(), (torch.randn(2, 8),)).run_decompositions()
    ExecutorchProgramManager({"forward": ep}, config=ExecutorchBackendConfig(passes=[record]))
    assert seen == [(False, False)]
