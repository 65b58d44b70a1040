"""On-device training: joint-graph programs trained step by step against PyTorch eager with torch.optim.SGD.

Each model is compiled twice from the same joint graph (``_export_forward_backward``): by edgetorch.exir and
by ExecuTorch. Our TrainingModule trains both programs, ExecuTorch's TrainingModule trains ours (in a
subprocess), and every step's loss matches eager training from the same initial weights.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch.export.experimental import _export_forward_backward

import edgetorch.exir
from edgetorch.errors import InvalidInputError, ProgramLoadError
from edgetorch.extension.training import (
    SGD,
    _load_for_executorch_for_training,
    _load_for_executorch_for_training_from_buffer,
    get_sgd_optimizer,
)
from edgetorch.runtime import Runtime
from tests.oracle import run_executorch_training
from tests.runtime.test_torch_free import BLOCKER

STEPS = 20
BATCH = 8


class MLP(torch.nn.Module):
    """Linear-ReLU-Linear with its cross-entropy loss: one user output (the loss)."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(4, 16), torch.nn.Linear(16, 3)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, y):
        return self.loss(self.l2(torch.relu(self.l1(x))), y)


class XorNet(torch.nn.Module):
    """ExecuTorch's XOR example: the loss and the predicted class (two user outputs, ten outputs in all)."""

    def __init__(self):
        super().__init__()
        self.linear, self.linear2 = torch.nn.Linear(4, 10), torch.nn.Linear(10, 3)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, y):
        pred = self.linear2(torch.sigmoid(self.linear(x)))
        return self.loss(pred, y), pred.detach().argmax(dim=1)


class BatchNormNet(torch.nn.Module):
    """A joint graph that also updates buffers (BatchNorm's running statistics): its outputs begin with three
    buffer mutations, which a method does not return. ExecuTorch's to_edge rejects its batch-norm op."""

    def __init__(self):
        super().__init__()
        self.l1, self.bn, self.l2 = torch.nn.Linear(4, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 3)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, y):
        return self.loss(self.l2(torch.relu(self.bn(self.l1(x)))), y)


class ConvNet(torch.nn.Module):
    """A convolution first: its backward computes no input gradient (``convolution_backward`` with an output
    left out), which the compiled program must still give an out argument."""

    def __init__(self):
        super().__init__()
        self.conv, self.l2 = torch.nn.Conv2d(1, 6, 2), torch.nn.Linear(6, 3)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, y):
        return self.loss(self.l2(torch.relu(self.conv(x.view(-1, 1, 2, 2))).flatten(1)), y)


MODELS = {"mlp": MLP, "xor": XorNet}
SGD_OPTIONS = {
    "plain": dict(lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False),
    "momentum": dict(lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=False),
    "nesterov_decay": dict(lr=0.05, momentum=0.8, dampening=0.0, weight_decay=0.01, nesterov=True),
    "dampening": dict(lr=0.1, momentum=0.5, dampening=0.3, weight_decay=0.0, nesterov=False),
}


def _batches(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """A fresh batch per step; the class is a fixed linear function of the input, so there is something to learn."""
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((4, 3))
    xs = [rng.standard_normal((BATCH, 4)).astype(np.float32) for _ in range(STEPS)]
    return [(x, (x @ teacher).argmax(1).astype(np.int64)) for x in xs]


def _joint_graph(net: torch.nn.Module) -> torch.export.ExportedProgram:
    x, y = _batches()[0]
    ep = torch.export.export(net, (torch.from_numpy(x), torch.from_numpy(y)), strict=True)
    return _export_forward_backward(ep)


@pytest.fixture(scope="module", params=sorted(MODELS))
def compiled(request) -> dict:
    """One model with its initial weights, compiled by edgetorch and by ExecuTorch from the same joint graph."""
    from executorch.exir import to_edge as et_to_edge

    torch.manual_seed(0)
    net = MODELS[request.param]()
    ours = edgetorch.exir.to_edge(_joint_graph(net)).to_executorch().buffer
    theirs = et_to_edge(_joint_graph(net)).to_executorch().buffer
    return {"name": request.param, "net": net, "ours": ours, "executorch": theirs}


def _eager(net: torch.nn.Module, options: dict) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Each step's loss (before its update) and the final parameters, trained with torch.optim.SGD."""
    net = copy.deepcopy(net)
    sgd = torch.optim.SGD(net.parameters(), **options)
    losses = []
    for x, y in _batches():
        sgd.zero_grad()
        out = net(torch.from_numpy(x), torch.from_numpy(y))
        loss = out[0] if isinstance(out, tuple) else out
        loss.backward()
        sgd.step()
        losses.append(loss.item())
    return np.array(losses), {k: v.detach().numpy() for k, v in net.named_parameters()}


def _train_ours(pte: bytes, options: dict) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    module = _load_for_executorch_for_training_from_buffer(pte)
    sgd, losses = None, []
    for x, y in _batches():
        losses.append(module.forward_backward("forward", (x, y))[0])
        sgd = sgd or get_sgd_optimizer(module.named_parameters(), **options)
        sgd.step(module.named_gradients())
    return np.array(losses), {k: v.copy() for k, v in module.named_parameters().items()}


def _assert_trained_like_eager(losses, params, want_losses, want_params) -> None:
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-6)
    assert sorted(params) == sorted(want_params)
    for name, p in params.items():
        np.testing.assert_allclose(p, want_params[name], rtol=1e-4, atol=1e-5, err_msg=name)


def _constant(program, method: str) -> list:
    return program.load_method(method).execute()


def test_program_layout_matches_executorch(compiled):
    """Same outputs (user outputs, gradients, parameters), metadata methods and initial parameter values."""
    user_outputs = 2 if compiled["name"] == "xor" else 1
    names = [n for n, _ in compiled["net"].named_parameters()]
    programs = {k: Runtime.get().load_program(compiled[k]) for k in ("ours", "executorch")}
    for kind, program in programs.items():
        meta = program.metadata("forward")
        assert (meta.num_inputs, meta.num_outputs) == (2, user_outputs + 2 * len(names)), kind
        assert sorted(program.method_names) == sorted(
            ["forward"] + [f"__et_training_{m}_forward" for m in ("gradients_index", "parameters_index", "fqn")]
        ), kind
        assert _constant(program, "__et_training_gradients_index_forward") == [user_outputs], kind
        assert _constant(program, "__et_training_parameters_index_forward") == [user_outputs + len(names)], kind
        assert _constant(program, "__et_training_fqn_forward") == names, kind
    assert programs["ours"].method_names == programs["executorch"].method_names
    for kind in programs:
        module = _load_for_executorch_for_training(compiled[kind])
        want = {k: v.detach().numpy() for k, v in compiled["net"].named_parameters()}
        got = module.named_parameters()
        assert list(got) == list(want), kind
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{kind}: {name}")


@pytest.mark.parametrize("options", sorted(SGD_OPTIONS))
@pytest.mark.parametrize("program", ["ours", "executorch"])
def test_our_runtime_trains_like_eager(compiled, program, options):
    """Our TrainingModule and SGD, on our program and on ExecuTorch's, step by step against eager."""
    want_losses, want_params = _eager(compiled["net"], SGD_OPTIONS[options])
    losses, params = _train_ours(compiled[program], SGD_OPTIONS[options])
    assert losses[-1] < losses[0]
    _assert_trained_like_eager(losses, params, want_losses, want_params)


@pytest.mark.parametrize("options", ["momentum"])
def test_executorch_trains_our_program_like_eager(compiled, options):
    """ExecuTorch's own TrainingModule and SGD (its runtime, in a subprocess) train the program we compiled."""
    want_losses, want_params = _eager(compiled["net"], SGD_OPTIONS[options])
    losses, params, grads = run_executorch_training(
        compiled["ours"], [list(b) for b in _batches()], SGD_OPTIONS[options]
    )
    _assert_trained_like_eager(losses, params, want_losses, want_params)
    assert sorted(grads) == sorted(want_params)


def test_our_runtime_trains_executorch_program_with_external_weights(tmp_path):
    """ExecuTorch's ``external_mutable_weights`` program: the initial weights come from its .ptd (data_path)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir import to_edge as et_to_edge

    torch.manual_seed(0)
    net = MLP()
    manager = et_to_edge(_joint_graph(net)).to_executorch(ExecutorchBackendConfig(external_mutable_weights=True))
    manager.write_tensor_data_to_file(str(tmp_path))
    (ptd,) = tmp_path.glob("*.ptd")
    module = _load_for_executorch_for_training(manager.buffer, data_path=ptd.read_bytes())
    want_losses, want_params = _eager(net, SGD_OPTIONS["momentum"])
    sgd, losses = get_sgd_optimizer(module.named_parameters(), **SGD_OPTIONS["momentum"]), []
    for x, y in _batches():
        losses.append(module.forward_backward("forward", (x, y))[0])
        sgd.step(module.named_gradients())
    _assert_trained_like_eager(np.array(losses), module.named_parameters(), want_losses, want_params)
    with pytest.raises(ProgramLoadError, match=r"\.ptd file"):
        _load_for_executorch_for_training(manager.buffer).named_parameters()


def test_joint_graph_with_buffer_mutations_trains_like_eager():
    """Gradients and parameters are found after the returned outputs, not after the buffer write-backs."""
    torch.manual_seed(0)
    net = BatchNormNet()
    pte = edgetorch.exir.to_edge(_joint_graph(net)).to_executorch().buffer
    program = Runtime.get().load_program(pte)
    assert program.metadata("forward").num_outputs == 1 + 2 * 6
    assert _constant(program, "__et_training_gradients_index_forward") == [1]
    assert _constant(program, "__et_training_parameters_index_forward") == [7]
    want_losses, want_params = _eager(net, SGD_OPTIONS["momentum"])
    _assert_trained_like_eager(*_train_ours(pte, SGD_OPTIONS["momentum"]), want_losses, want_params)


def test_a_convolution_whose_input_needs_no_gradient_trains_like_eager():
    torch.manual_seed(0)
    net = ConvNet()
    pte = edgetorch.exir.to_edge(_joint_graph(net)).to_executorch().buffer
    want_losses, want_params = _eager(net, SGD_OPTIONS["plain"])
    _assert_trained_like_eager(*_train_ours(pte, SGD_OPTIONS["plain"]), want_losses, want_params)


def test_gradients_match_eager(compiled):
    """The first step's gradients, by name, as eager autograd computes them."""
    x, y = _batches()[0]
    net = copy.deepcopy(compiled["net"])
    out = net(torch.from_numpy(x), torch.from_numpy(y))
    (out[0] if isinstance(out, tuple) else out).backward()
    module = _load_for_executorch_for_training(compiled["ours"])
    user = module.forward_backward("forward", (x, y))
    if compiled["name"] == "xor":
        np.testing.assert_array_equal(user[1], out[1].numpy())
    grads = module.named_gradients()
    assert list(grads) == [n for n, _ in net.named_parameters()]
    for name, p in net.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_parameters_are_the_programs_state(compiled):
    """Writing the arrays named_parameters returns changes what the next run computes; gradients are copies."""
    module = _load_for_executorch_for_training(compiled["ours"])
    x, y = _batches()[0]
    first = module.forward_backward("forward", (x, y))[0]
    grads = module.named_gradients()
    for p in module.named_parameters().values():
        p[...] = 0
    second = module.forward_backward("forward", (x, y))[0]
    np.testing.assert_allclose(second, np.log(3.0), rtol=1e-6)  # all-zero weights: uniform over 3 classes
    assert not np.allclose(first, second)
    assert any(np.any(g != 0) for g in grads.values())


def test_not_a_training_method():
    class Net(torch.nn.Module):
        def forward(self, x):
            return x * 2

    pte = edgetorch.exir.to_edge(torch.export.export(Net(), (torch.ones(2),))).to_executorch().buffer
    module = _load_for_executorch_for_training_from_buffer(pte)
    with pytest.raises(InvalidInputError, match="not a training method.*_export_forward_backward"):
        module.forward_backward("forward", (np.ones(2, np.float32),))
    with pytest.raises(InvalidInputError, match="no gradients for method 'forward'"):
        module.named_gradients()


@pytest.mark.parametrize("options", sorted(SGD_OPTIONS))
def test_sgd_matches_torch(options):
    """Our SGD on arrays against torch.optim.SGD on tensors, same gradients, several steps."""
    rng = np.random.default_rng(1)
    start = {"w": rng.standard_normal((3, 5)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
    grads = [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in start.items()} for _ in range(5)]
    ours = {k: v.copy() for k, v in start.items()}
    theirs = {k: torch.tensor(v, requires_grad=True) for k, v in start.items()}
    sgd, ref = SGD(ours, **SGD_OPTIONS[options]), torch.optim.SGD(list(theirs.values()), **SGD_OPTIONS[options])
    for g in grads:
        sgd.step(g)
        for k, t in theirs.items():
            t.grad = torch.from_numpy(g[k])
        ref.step()
    for k in start:
        np.testing.assert_allclose(ours[k], theirs[k].detach().numpy(), rtol=1e-6, atol=1e-6, err_msg=k)


@pytest.mark.parametrize(
    "params, options, match",
    [
        ({"w": np.zeros(2, np.float32)}, dict(lr=-1.0), "lr must be >= 0"),
        ({"w": np.zeros(2, np.float32)}, dict(lr=0.1, nesterov=True), "Nesterov momentum needs momentum > 0"),
        ({"w": np.zeros(2, np.float32)}, dict(lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), "dampening 0"),
        ({"w": np.zeros(2, np.float32).view()}, dict(lr=0.1), None),
        ({"w": np.frombuffer(bytes(8), np.float32)}, dict(lr=0.1), "must be a writable NumPy array"),
        ({"w": [0.0, 0.0]}, dict(lr=0.1), "found list"),
    ],
)
def test_sgd_rejects_bad_options(params, options, match):
    if match is None:
        SGD(params, **options).step({"w": np.ones(2, np.float32)})
        np.testing.assert_allclose(params["w"], -0.1)
        return
    with pytest.raises(InvalidInputError, match=match):
        SGD(params, **options)


def test_sgd_rejects_gradient_of_wrong_shape():
    sgd = get_sgd_optimizer({"w": np.zeros(2, np.float32)}, 0.1)
    with pytest.raises(InvalidInputError, match=r"gradient 'w' has shape \[3\], its parameter \[2\]"):
        sgd.step({"w": np.ones(3, np.float32)})


def test_trains_with_torch_blocked(compiled, tmp_path):
    """The training runtime (module and SGD) imports and trains with torch and executorch blocked."""
    (tmp_path / "m.pte").write_bytes(compiled["ours"])
    x, y = _batches()[0]
    np.savez(tmp_path / "batch.npz", x=x, y=y)
    script = BLOCKER + textwrap.dedent(
        f"""
        import numpy as np
        from edgetorch.extension.training import _load_for_executorch_for_training, get_sgd_optimizer
        batch = np.load({str(tmp_path / "batch.npz")!r})
        module = _load_for_executorch_for_training({str(tmp_path / "m.pte")!r})
        sgd = get_sgd_optimizer(module.named_parameters(), 0.1)
        losses = []
        for _ in range(2):
            losses.append(module.forward_backward("forward", (batch["x"], batch["y"]))[0])
            sgd.step(module.named_gradients())
        np.save({str(tmp_path / "losses.npy")!r}, np.array(losses))
        assert not any(m.split(".")[0] in ("torch", "executorch") for m in sys.modules), "torch was imported"
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    options = dict(SGD_OPTIONS["plain"])
    want = _eager(compiled["net"], options)[0][:1]
    losses = np.load(tmp_path / "losses.npy")
    np.testing.assert_allclose(losses[:1], want, rtol=1e-5)
    assert losses[1] != losses[0]


def test_torch_inputs_give_torch_tensors_that_train(compiled):
    """Run on torch tensors, the module hands out torch tensors: losses are copies (a later run does not
    overwrite them), parameters share the program's memory, and SGD takes them as they are."""
    module = _load_for_executorch_for_training_from_buffer(compiled["ours"])
    x, y = (torch.from_numpy(np.asarray(a)) for a in _batches()[0])
    first = module.forward_backward("forward", (x, y))[0]
    params = module.named_parameters()
    assert all(isinstance(p, torch.Tensor) for p in params.values())
    assert all(isinstance(g, torch.Tensor) for g in module.named_gradients().values())
    before = {k: p.clone() for k, p in params.items()}
    get_sgd_optimizer(params, 0.1).step(module.named_gradients())
    assert all(not torch.equal(module.named_parameters()[k], before[k]) for k in before)
    first_value = first.item()
    second = module.forward_backward("forward", (x, y))[0]
    assert first.item() == first_value and second.item() != first_value
