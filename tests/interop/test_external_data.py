"""Program-data separation: weights in a ``.ptd`` next to the ``.pte``, written and read by both stacks.

edgetorch and the real ExecuTorch 1.5.1 lower the same export with the same request (non-delegated
constants via ``ExecutorchBackendConfig(external_constants=...)``, XNNPACK weights via
``delegate_external_constants_pass_unlifted``). Each pair must keep its weights out of the ``.pte``;
the two ``.ptd`` files must agree (keys, tensor layouts, bytes); and every pairing of program and data
file runs on both runtimes and matches eager. A program loaded without its data file is refused with a
typed error that names the missing key and says what to pass.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

import edgetorch.exir
from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.errors import DelegateLoadError, ProgramLoadError
from edgetorch.exir import ExecutorchBackendConfig
from edgetorch.exir.passes.external_constants_pass import (
    DEFAULT_EXTERNAL_TAG,
    delegate_external_constants_pass_unlifted,
)
from edgetorch.format.ptd import load_ptd
from edgetorch.runtime import Runtime
from tests.oracle import assert_close, eager, run_executorch


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class ScaledMLP(MLP):
    """A constant buffer (goes to the .ptd) and a constant made in forward (stays in the .pte)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))

    def forward(self, x):
        return super().forward(x) * self.scale + torch.tensor([1.0, 2.0, 3.0, 4.0])


class ConvNet(torch.nn.Module):
    def __init__(self, batch_norm: bool = False) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8) if batch_norm else torch.nn.Identity()
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


def _seeded(factory):
    def make():
        torch.manual_seed(0)
        model = factory().eval()
        if isinstance(getattr(model, "bn", None), torch.nn.BatchNorm2d):
            model.bn.running_mean.uniform_(-0.5, 0.5)
            model.bn.running_var.uniform_(0.5, 2.0)
        return model

    return make


MODELS = {
    "mlp": (_seeded(MLP), (16,)),
    "scaled_mlp": (_seeded(ScaledMLP), (16,)),
    "conv": (_seeded(ConvNet), (3, 8, 8)),
    "conv_bn": (_seeded(lambda: ConvNet(batch_norm=True)), (3, 8, 8)),
}


def _export(
    name: str, xnnpack: bool, tag_weights
) -> tuple[torch.nn.Module, torch.Tensor, torch.export.ExportedProgram]:
    factory, shape = MODELS[name]
    model = factory()
    torch.manual_seed(1)
    x = torch.randn(2, *shape)
    ep = torch.export.export(model, (x,), strict=False)
    if xnnpack:
        unlifted = ep.module()
        tag_weights(unlifted, lambda node: "model")
        ep = torch.export.export(unlifted, (x,), strict=False)
    return model, x, ep


def _lower(name: str, xnnpack: bool, stack: str) -> tuple[torch.nn.Module, torch.Tensor, bytes, dict[str, bytes]]:
    """The model, an input, the .pte ``stack`` makes of it and its data files by name.

    XNNPACK weights and the other constants share one file: ExecuTorch's runtime takes a single data_path.
    """
    if stack == "edgetorch":
        model, x, ep = _export(name, xnnpack, delegate_external_constants_pass_unlifted)
        if xnnpack:
            lowered = edgetorch.exir.to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
            manager = lowered.to_executorch(ExecutorchBackendConfig(external_constants=lambda n: "model"))
        else:
            manager = edgetorch.exir.to_edge(ep).to_executorch(ExecutorchBackendConfig(external_constants=True))
        return model, x, manager.buffer, manager.data_files

    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner as EtPartitioner
    from executorch.exir import ExecutorchBackendConfig as EtConfig
    from executorch.exir import to_edge, to_edge_transform_and_lower
    from executorch.exir.passes.external_constants_pass import delegate_external_constants_pass_unlifted as et_tag

    model, x, ep = _export(name, xnnpack, et_tag)
    if xnnpack:
        lowered = to_edge_transform_and_lower(ep, partitioner=[EtPartitioner()])
        manager = lowered.to_executorch(EtConfig(external_constants=lambda n: "model"))
    else:
        manager = to_edge(ep).to_executorch(EtConfig(external_constants=True))
    with tempfile.TemporaryDirectory() as folder:
        manager.write_tensor_data_to_file(folder)
        files = {p.stem: p.read_bytes() for p in Path(folder).glob("*.ptd")}
    return model, x, manager.buffer, files


def _entries(ptd: bytes) -> dict[str, tuple[bytes, tuple | None]]:
    parsed = load_ptd(ptd)
    data = parsed.named_data()
    layouts = {
        nd.key: None
        if nd.tensor_layout is None
        else (nd.tensor_layout.scalar_type, nd.tensor_layout.sizes, nd.tensor_layout.dim_order)
        for nd in parsed.flat_tensor.named_data
    }
    return {key: (bytes(view), layouts[key]) for key, view in data.items()}


def _ours(pte: bytes, ptd: bytes, x: torch.Tensor) -> list:
    return Runtime.get().load_program(pte, data_files=[ptd]).load_method("forward").execute([x.numpy()])


# Models both stacks partition alike, so the data files must match entry for entry.
CASES = [("scaled_mlp", False), ("conv", False), ("mlp", True), ("conv", True)]


@pytest.mark.parametrize("name,xnnpack", CASES, ids=[f"{n}-{'xnnpack' if x else 'portable'}" for n, x in CASES])
def test_both_stacks_write_the_same_data_file_and_run_every_pairing(name, xnnpack):
    model, x, our_pte, our_files = _lower(name, xnnpack, "edgetorch")
    _, _, their_pte, their_files = _lower(name, xnnpack, "executorch")
    expected_file = "model" if xnnpack else DEFAULT_EXTERNAL_TAG
    assert set(our_files) == set(their_files) == {expected_file}
    ours, theirs = _entries(our_files[expected_file]), _entries(their_files[expected_file])
    assert ours == theirs, "the two .ptd files differ in keys, tensor layouts or bytes"
    for key, (data, _) in ours.items():
        if len(data) >= 16:
            assert data not in our_pte and data not in their_pte, f"{key}'s bytes are still in the .pte"
    want = eager(model, (x,))
    for pte in (our_pte, their_pte):
        for ptd in (our_files[expected_file], their_files[expected_file]):
            assert_close(_ours(pte, ptd, x), want, rtol=1e-5, atol=1e-5)
    for pte, ptd in ((our_pte, our_files), (their_pte, our_files), (our_pte, their_files)):
        assert_close(run_executorch(pte, [x], data=ptd[expected_file]), want, rtol=1e-5, atol=1e-5)


def test_folded_batch_norm_weights_go_to_the_data_file_too():
    """ExecuTorch's conv+batch-norm fusion makes new weights without the tag and keeps them in its .pte;
    edgetorch carries the tag to the folded weights. Every key ExecuTorch externalises is in ours."""
    model, x, our_pte, our_files = _lower("conv_bn", True, "edgetorch")
    _, _, their_pte, their_files = _lower("conv_bn", True, "executorch")
    ours, theirs = _entries(our_files["model"]), _entries(their_files["model"])
    assert theirs.items() <= ours.items()
    assert len(ours) > len(theirs)
    for key, (data, _) in ours.items():
        if len(data) >= 16:
            assert data not in our_pte, f"{key}'s bytes are still in the .pte"
    want = eager(model, (x,))
    assert_close(_ours(our_pte, our_files["model"], x), want, rtol=1e-5, atol=1e-5)
    assert_close(_ours(their_pte, their_files["model"], x), want, rtol=1e-5, atol=1e-5)
    assert_close(run_executorch(our_pte, [x], data=our_files["model"]), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("xnnpack", [False, True], ids=["portable", "xnnpack"])
@pytest.mark.parametrize("stack", ["edgetorch", "executorch"])
def test_missing_data_file_is_a_typed_error_naming_the_key(stack, xnnpack, tmp_path):
    model, x, pte, files = _lower("mlp", xnnpack, stack)
    (ptd,) = files.values()
    error = DelegateLoadError if xnnpack else ProgramLoadError
    with pytest.raises(error, match=r"data_files=\[ptd\]") as info:
        Runtime.get().load_program(pte).load_method("forward")
    assert any(repr(key) in str(info.value) for key in _entries(ptd)), f"no key named in: {info.value}"
    path = tmp_path / "weights.ptd"
    path.write_bytes(ptd)
    got = Runtime.get().load_program(pte, data_path=path).load_method("forward").execute([x.numpy()])
    assert_close(got, eager(model, (x,)), rtol=1e-5, atol=1e-5)
