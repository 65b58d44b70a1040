"""The XNNPACK graph passes at ExecuTorch's paths (``backends.xnnpack._passes``, ``backends.transforms``):
each rewrite leaves the program computing what eager PyTorch computes, with the ops ExecuTorch's namesake
leaves, and ``XNNPACKPassManager`` runs a list of them (or its default list) as ExecuTorch's does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgetorch.backends.transforms.remove_getitem_op import RemoveGetItemPass
from edgetorch.backends.transforms.utils import get_param_tensor
from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.backends.xnnpack._passes import (
    ChannelsLastTaggedReshapePass,
    ConvertToLinearPass,
    FuseActivationPass,
    FuseBatchNormPass,
    XNNPACKPassManager,
)
from edgetorch.backends.xnnpack.blob import parse_blob
from edgetorch.backends.xnnpack.utils.configs import get_xnnpack_edge_compile_config
from edgetorch.errors import InvalidArgumentError
from edgetorch.exir import to_edge, to_edge_transform_and_lower
from edgetorch.exir.dialects import to_aten
from edgetorch.runtime import Runtime


def _edge(model: nn.Module, *inputs: torch.Tensor) -> torch.export.ExportedProgram:
    program = torch.export.export(model.eval(), inputs)
    return to_edge(program, compile_config=get_xnnpack_edge_compile_config()).exported_program()


def _ops(program: torch.export.ExportedProgram) -> list[str]:
    targets = [to_aten(n.target) for n in program.graph.nodes if n.op == "call_function"]
    return [t._opname if isinstance(t, torch._ops.OpOverload) else t.__name__ for t in targets]


class ConvBN(nn.Module):
    """A conv whose only reader is a batch norm (fusable), and the same conv read by an add (not fusable)."""

    def __init__(self, transposed: bool, groups: int):
        super().__init__()
        conv = nn.ConvTranspose2d if transposed else nn.Conv2d
        self.conv = conv(4, 4, 2, groups=groups)
        self.bn = nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 2)
            self.bn.bias.uniform_(-1, 1)

    def forward(self, x):
        y = self.bn(self.conv(x))
        y = self.conv(y)
        return self.bn(y + y)


@pytest.mark.parametrize("transposed,groups", [(False, 1), (True, 1), (True, 2), (False, 2)])
def test_fuse_batch_norm_folds_the_fusable_norm_into_new_parameters(transposed, groups):
    torch.manual_seed(0)
    model, x = ConvBN(transposed, groups), torch.randn(1, 4, 6, 6)
    program = XNNPACKPassManager(_edge(model, x), [FuseBatchNormPass]).transform()
    assert _ops(program).count("_native_batch_norm_legit_no_training") == 1
    torch.testing.assert_close(program.module()(x), model(x), rtol=1e-5, atol=1e-5)
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    assert [s.arg.name for s in program.graph_signature.input_specs] == [p.name for p in placeholders]
    fused = [p for p in placeholders if "fused_bn" in p.name]
    assert len(fused) == 2 and all(get_param_tensor(program, p) is not None for p in fused)


def test_fuse_batch_norm_folds_linear_and_drops_unused_weights():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5)).eval()
    model[1].running_mean.uniform_(-1, 1)
    x = torch.randn(4, 3)
    program = XNNPACKPassManager(_edge(model, x), [ConvertToLinearPass, FuseBatchNormPass]).transform()
    assert _ops(program) == ["linear"]
    assert len(program.state_dict) == 2 + 1  # fused weight and bias, and the untouched num_batches_tracked buffer
    torch.testing.assert_close(program.module()(x), model(x), rtol=1e-5, atol=1e-5)


def test_convert_to_linear_rebuilds_linear_with_and_without_bias():
    model = nn.Sequential(nn.Linear(6, 4), nn.Linear(4, 3, bias=False))
    x = torch.randn(2, 5, 6)
    program = XNNPACKPassManager(_edge(model, x), [ConvertToLinearPass]).transform()
    ops = _ops(program)
    assert ops.count("linear") == 2 and "addmm" not in ops and "mm" not in ops and "permute_copy" not in ops
    assert "view_copy" not in ops  # the 3-D input's flatten and unflatten views went with the matmuls
    torch.testing.assert_close(program.module()(x), model(x))


def test_convert_to_linear_leaves_a_plain_matmul():
    class MatMul(nn.Module):
        def forward(self, a, b):
            return a @ b.t()

    a, b = torch.randn(3, 4), torch.randn(5, 4)
    program = XNNPACKPassManager(_edge(MatMul(), a, b), [ConvertToLinearPass]).transform()
    assert "linear" not in _ops(program)


class MaxBoth(nn.Module):
    def forward(self, x):
        values, indices = torch.max(x, dim=1, keepdim=True)
        return nn.functional.max_pool2d(x, 2), values, indices


class MaxValues(nn.Module):
    def forward(self, x):
        return nn.functional.max_pool2d(x, 2), torch.max(x, dim=1)[0]


def test_remove_getitem_keeps_ops_whose_indices_are_read():
    x = torch.randn(1, 2, 4, 4)
    program = XNNPACKPassManager(_edge(MaxBoth(), x), [RemoveGetItemPass]).transform()
    assert _ops(program).count("max_pool2d") == 1 and "max" in _ops(program) and "amax" not in _ops(program)
    values = XNNPACKPassManager(_edge(MaxValues(), x), [RemoveGetItemPass]).transform()
    assert sorted(_ops(values)) == ["amax", "max_pool2d"]
    for got, want in zip(values.module()(x), MaxValues()(x)):
        torch.testing.assert_close(got, want)


def test_pass_manager_default_list_and_refusal():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 2, 1), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(32, 3))
    x = torch.randn(1, 2, 4, 4)
    program = XNNPACKPassManager(_edge(model, x)).transform()
    assert "linear" in _ops(program) and "_native_batch_norm_legit_no_training" not in _ops(program)
    torch.testing.assert_close(program.module()(x), model.eval()(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(InvalidArgumentError, match="ExportPass classes"):
        XNNPACKPassManager(program, [ConvertToLinearPass()]).transform()


class Activations(nn.Module):
    """Fusable: conv -> ReLU, 4-D linear -> hardtanh, add -> ReLU. Not fusable: a ReLU on a conv output
    that is also returned, and a ReLU after a batch norm."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.shared = nn.Conv2d(4, 4, 1)
        self.linear = nn.Linear(5, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        shared = self.shared(y)
        z = nn.functional.hardtanh(self.linear(shared), -0.5, 0.25)
        w = torch.relu(z + 1.0)
        return w, shared, torch.relu(shared), torch.relu(self.bn(y))


def test_fuse_activation_tags_producers_and_the_lowering_writes_their_clamps():
    torch.manual_seed(0)
    model, x = Activations().eval(), torch.randn(1, 2, 5, 5)
    program = XNNPACKPassManager(_edge(model, x), [ConvertToLinearPass, FuseActivationPass]).transform()
    assert _ops(program).count("relu") == 2 and "hardtanh" not in _ops(program)
    clamps = {
        _ops_name(n): FuseActivationPass.get_fused_activation(n)
        for n in program.graph.nodes
        if n.op == "call_function" and FuseActivationPass.get_fused_activation(n) is not None
    }
    assert set(clamps) == {"convolution", "linear", "add"}
    assert (clamps["linear"].output_min, clamps["linear"].output_max) == (-0.5, 0.25)
    # The rewritten graph no longer computes the clamps; the delegate does, from the tags.
    lowered = to_edge_transform_and_lower(torch.export.export(model, (x,)), partitioner=[XnnpackPartitioner()])
    method = Runtime.get().load_program(lowered.to_executorch().buffer).load_method("forward")
    for got, want in zip(method.execute([x.numpy()]), model(x)):
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-5)
    graph = parse_blob(lowered.exported_program().graph_module.lowered_module_0.processed_bytes).graph
    fused = [(type(n.xnode_union).__name__, n.output_min_max) for n in graph.xnodes if n.output_min_max]
    kinds = [kind for kind, _ in fused]
    assert kinds.count("XNNConv2d") == 1 and "XNNFullyConnected" in kinds and "XNNAdd" in kinds, fused
    assert ("XNNFullyConnected", (-0.5, 0.25)) in [(k, (m.output_min, m.output_max)) for k, m in fused]


def test_fuse_activation_refuses_other_activations():
    graph = torch.fx.Graph()
    sigmoid = graph.call_function(torch.ops.aten.sigmoid.default, (graph.placeholder("x"),))
    with pytest.raises(InvalidArgumentError, match="FuseActivationPass folds"):
        FuseActivationPass(None).get_output_min_max_from_activation(sigmoid)


def _ops_name(node: torch.fx.Node) -> str:
    return to_aten(node.target)._opname


class ConvViewLinear(nn.Module):
    """Two convs into an add (NHWC throughout), a view (NCHW) and a linear on a 4-d value (NCHW)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(2, 4, 1)
        self.linear = nn.Linear(6, 2)

    def forward(self, x, y):
        z = self.conv1(x) + self.conv2(y)
        return self.linear(z.view(1, 4, 6, 6)), torch.relu(z)


def _copies(program: torch.export.ExportedProgram) -> list[tuple[str, bool]]:
    """(input name, into NHWC) of each tagged ``_to_copy`` in graph order."""
    return [
        (n.args[0].name, n.kwargs["memory_format"] == torch.channels_last)
        for n in program.graph.nodes
        if n.op == "call_function" and _ops_name(n) == "_to_copy"
    ]


def test_channels_last_pass_converts_once_per_value_and_keeps_results():
    torch.manual_seed(0)
    model, x, y = ConvViewLinear().eval(), torch.randn(1, 3, 6, 6), torch.randn(1, 2, 6, 6)
    program = XNNPACKPassManager(_edge(model, x, y), [ChannelsLastTaggedReshapePass]).transform()
    copies = _copies(program)
    # x and y into NHWC for the convs; the add's NHWC result back for the view, the relu's for the output.
    assert copies == [("x", True), ("y", True), ("aten_add_tensor", False), ("aten_relu_default", False)], copies
    tags = {n.name: n.meta.get(ChannelsLastTaggedReshapePass.XNN_NHWC_NODE) for n in program.graph.nodes}
    assert tags["aten_add_tensor"] is True and tags["aten_view_copy_default"] is not True
    for got, want in zip(program.module()(x, y), model(x, y)):
        torch.testing.assert_close(got, want)
    nhwc_x = x.to(memory_format=torch.channels_last)
    program = XNNPACKPassManager(_edge(model, nhwc_x, y), [ChannelsLastTaggedReshapePass]).transform()
    assert [name for name, _ in _copies(program)][0] == "y"  # a channels-last input needs no copy


def test_channels_last_pass_keeps_quantized_values_quantized_around_copies():
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from edgetorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from edgetorch.backends.xnnpack.utils.quant_utils import is_tagged_as_implicit_q_dq

    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval(), torch.randn(1, 3, 6, 6)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    prepared(x)
    quantized = convert_pt2e(prepared)
    edge = to_edge(torch.export.export(quantized, (x,)), compile_config=get_xnnpack_edge_compile_config())
    program = XNNPACKPassManager(edge.exported_program(), [ChannelsLastTaggedReshapePass]).transform()
    ops = _ops(program)
    ops = ops[ops.index("quantize_per_tensor") :]  # from the input's quantize on (the weight's dq comes first)
    copy_in = ["quantize_per_tensor", "dequantize_per_tensor", "_to_copy", "quantize_per_tensor"]
    assert ops[: len(copy_in) + 1] == [*copy_in, "dequantize_per_tensor"], ops
    assert ops[-3:] == ["_to_copy", "quantize_per_tensor", "dequantize_per_tensor"], ops
    implicit = [is_tagged_as_implicit_q_dq(n) for n in program.graph.nodes if "quantize_per_tensor" in str(n.target)]
    assert implicit.count(True) == 4, implicit
    torch.testing.assert_close(program.module()(x), quantized(x))
