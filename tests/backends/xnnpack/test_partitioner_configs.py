"""XnnpackPartitioner's ExecuTorch options: configs, config_precisions, per_op_mode, verbose, the precision
subclasses, and the XNNPACK paths around them (serialization, _passes, utils.configs).

Which ops are delegated under each precision setting is what ExecuTorch 1.5.1's
partitioner delegates for the same models (``tests/interop/test_xnnpack_partitioner_configs.py``
checks it against the real one); every lowered program must still run and match eager.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
import torch.nn as nn

from edgetorch.backends.xnnpack import XnnpackDynamicallyQuantizedPartitioner
from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.blob import parse_blob
from edgetorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS, ConfigPrecisionType
from edgetorch.backends.xnnpack.partition.config.gemm_configs import LinearConfig
from edgetorch.backends.xnnpack.partition.config.generic_node_configs import AddConfig, ReLUConfig
from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import (
    XnnpackFloatingPointPartitioner,
    XnnpackPartitioner,
    XnnpackQuantizedPartitioner,
)
from edgetorch.exir import to_edge_transform_and_lower
from edgetorch.runtime import Runtime
from tests.oracle import assert_close, eager

P = ConfigPrecisionType


class ConvLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.linear = nn.Linear(6, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return torch.sigmoid(self.linear(y + y))


INPUTS = (torch.randn(1, 3, 8, 8),)


def lower(ep, partitioner):
    return to_edge_transform_and_lower(ep, partitioner=[partitioner])


def portable_ops(edge) -> list[str]:
    """The ops left outside delegates (delegate calls as ``delegate``), in graph order."""
    names = []
    for node in edge.exported_program().graph.nodes:
        if node.op == "call_function" and "getitem" not in str(node.target):
            name = getattr(node.target, "__name__", str(node.target))
            names.append("delegate" if "call_delegate" in name else name.split(".")[-2])
    return names


def run(edge) -> list[np.ndarray]:
    pte = edge.to_executorch().buffer
    return Runtime.get().load_program(pte).load_method("forward").execute([x.numpy() for x in INPUTS])


@pytest.fixture(scope="module")
def fp32():
    torch.manual_seed(0)
    model = ConvLinear().eval()
    return model, torch.export.export(model, INPUTS)


@pytest.fixture(scope="module")
def static_quantized():
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from edgetorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    torch.manual_seed(0)
    model = torch.export.export(ConvLinear().eval(), INPUTS).module()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    model = prepare_pt2e(model, quantizer)
    model(*INPUTS)
    model = convert_pt2e(model)
    return model, torch.export.export(model, INPUTS)


@pytest.mark.parametrize(
    ("precisions", "left"),
    [
        (None, ["delegate"]),
        ([P.FP32], ["delegate"]),
        (P.STATIC_QUANT, ["delegate", "sigmoid"]),  # SigmoidConfig supports FP32 only
        (P.DYNAMIC_QUANT, ["delegate", "add", "delegate", "sigmoid"]),  # the GEMMs (and conv's fused relu) only
    ],
)
def test_config_precisions_choose_what_is_delegated(fp32, precisions, left):
    model, ep = fp32
    edge = lower(ep, XnnpackPartitioner(config_precisions=precisions))
    assert portable_ops(edge) == left
    assert_close(run(edge), eager(model, INPUTS), rtol=1e-4, atol=1e-5)


def test_fp32_only_keeps_quantized_gemms_out(static_quantized):
    model, ep = static_quantized
    default = portable_ops(lower(ep, XnnpackPartitioner()))
    edge = lower(ep, XnnpackFloatingPointPartitioner())
    left = portable_ops(edge)
    assert default == ["delegate"]
    assert "convolution" in left and "linear" not in left  # the linear reads a portable view of its dq'd input
    assert "quantize_per_tensor" in left and "dequantize_per_channel" in left
    assert left.count("delegate") >= 2  # relu, add and sigmoid still go to XNNPACK, in float
    assert_close(run(edge), eager(model, INPUTS), rtol=1e-4, atol=1e-4)


def test_static_quant_partitioner_delegates_the_quantized_pattern(static_quantized):
    model, ep = static_quantized
    edge = lower(ep, XnnpackQuantizedPartitioner())
    assert portable_ops(edge) == ["delegate", "sigmoid"]
    assert_close(run(edge), eager(model, INPUTS), rtol=1e-3, atol=2e-2)


@pytest.mark.parametrize("quantized", [False, True])
def test_per_op_mode_gives_one_delegate_per_operator(fp32, static_quantized, quantized):
    model, ep = static_quantized if quantized else fp32
    edge = lower(ep, XnnpackPartitioner(per_op_mode=True))
    left = portable_ops(edge)
    # conv with its fused relu, add, linear, sigmoid; the q/dq nodes go with the operators reading them
    assert left.count("delegate") == 4 and set(left) == {"delegate"}
    assert_close(run(edge), eager(model, INPUTS), rtol=1e-3, atol=2e-2 if quantized else 1e-5)


def test_configs_limit_the_operators(fp32):
    model, ep = fp32
    edge = lower(ep, XnnpackPartitioner(configs=[LinearConfig, AddConfig]))
    assert portable_ops(edge) == ["convolution", "relu", "delegate", "sigmoid"]
    assert_close(run(edge), eager(model, INPUTS), rtol=1e-4, atol=1e-5)


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def refusals(ep, partitioner) -> list[str]:
    logger = logging.getLogger("edgetorch.backends.xnnpack.partition")
    records, level = Records(), logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    try:
        lower(ep, partitioner)
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    return [m for m in records.messages if "leaves node" in m]


def test_a_refused_node_is_logged_with_its_reason(fp32):
    _, ep = fp32
    refused = refusals(ep, XnnpackPartitioner(configs=[LinearConfig, ReLUConfig]))
    assert any("sigmoid" in m and "no config of this partitioner claims" in m for m in refused)
    refused = refusals(ep, XnnpackPartitioner(config_precisions=P.DYNAMIC_QUANT))
    assert any("AddConfig supports ['FP32', 'STATIC_QUANT'], none of them enabled" in m for m in refused)
    assert not refusals(ep, XnnpackPartitioner())  # nothing refused, nothing logged


def test_verbose_turns_on_debug_logging(fp32):
    XnnpackPartitioner(verbose=True)
    logger = logging.getLogger("edgetorch.backends.xnnpack.partition")
    try:
        assert logger.isEnabledFor(logging.DEBUG)
    finally:
        logger.setLevel(logging.NOTSET)


def test_bad_options_raise():
    with pytest.raises(TypeError, match="ConfigPrecisionType"):
        XnnpackPartitioner(config_precisions="fp32")
    with pytest.raises(TypeError, match="XNNPartitionerConfig subclasses"):
        XnnpackPartitioner(configs=[nn.Linear])
    logger, records = logging.getLogger("edgetorch.backends.xnnpack.partition"), Records()
    logger.addHandler(records)
    try:
        XnnpackPartitioner(force_fp32_dynamic_linear=True)  # ignored, as ExecuTorch's configs ignore it
    finally:
        logger.removeHandler(records)
    assert any("unknown option 'force_fp32_dynamic_linear'" in m for m in records.messages)
    with pytest.raises(NotImplementedError, match="enable_bf16"):
        XnnpackPartitioner(enable_bf16=True)
    with pytest.raises(RuntimeError, match="both claim aten.linear.default"):
        XnnpackPartitioner(configs=[LinearConfig, LinearConfig])
    with pytest.raises(ValueError, match="DYNAMIC_QUANT"):
        XnnpackDynamicallyQuantizedPartitioner(config_precisions=P.FP32)


def test_config_classes_and_precisions():
    names = [c.__name__ for c in ALL_PARTITIONER_CONFIGS]
    assert len(names) == len(set(names)) == 54
    linear = LinearConfig()
    assert linear.target_name == "linear.default"
    assert linear.get_original_aten() == torch.ops.aten.linear.default
    linear.set_enabled_precision_types([P.STATIC_QUANT])
    assert linear.enabled_precision_types == [P.STATIC_QUANT]
    relu = ReLUConfig()
    relu.set_enabled_precision_types([P.DYNAMIC_QUANT])
    assert relu.enabled_precision_types == []


def test_config_check_constraints_and_deps(fp32):
    _, ep = fp32
    edge_ep = to_edge_transform_and_lower(ep).exported_program()
    nodes = {n.name: n for n in edge_ep.graph.nodes}
    conv = next(n for n in edge_ep.graph.nodes if "convolution" in str(n.target))
    relu = next(n for n in edge_ep.graph.nodes if "relu" in str(n.target))
    from edgetorch.backends.xnnpack.partition.config.gemm_configs import ConvolutionConfig

    config = ConvolutionConfig()
    assert config.check_constraints(conv, edge_ep)
    assert config.get_node_and_deps(conv, edge_ep) == [conv, relu]
    assert nodes  # the program still has its nodes (the configs only read the graph)


def test_serialize_xnnpack_binary_round_trips():
    from edgetorch.backends.xnnpack import schema as xs
    from edgetorch.backends.xnnpack.blob import parse_blob
    from edgetorch.backends.xnnpack.serialization.xnnpack_graph_serialize import (
        XNNHeader,
        convert_to_flatbuffer,
        serialize_xnnpack_binary,
    )

    graph = xs.XNNGraph(version="0", xnodes=[], xvalues=[], num_externs=0, input_ids=[], output_ids=[])
    flat = convert_to_flatbuffer(graph)
    assert flat[4:8] == b"XN01"
    blob = serialize_xnnpack_binary(graph, b"\x01\x02\x03")
    header = XNNHeader.from_bytes(blob[: XNNHeader.EXPECTED_LENGTH])
    assert (
        header.is_valid()
        and XNNHeader.read(blob) == header
        and header.constant_data_size == 3
        and header.constant_data_offset % 16 == 0
    )
    assert blob[header.constant_data_offset :] == b"\x01\x02\x03"
    assert parse_blob(blob).graph == graph


def test_remove_noop_expand_copy_pass():
    from edgetorch.backends.xnnpack.utils.configs import get_transform_passes, get_xnnpack_executorch_backend_config
    from edgetorch.exir import to_edge

    class Expand(nn.Module):
        def forward(self, x, y):
            return x.expand(2, 3) + y.expand(2, 3)

    x, y = torch.randn(2, 3), torch.randn(1, 3)
    edge = to_edge(torch.export.export(Expand(), (x, y))).transform(get_transform_passes())
    expands = [n for n in edge.exported_program().graph.nodes if "expand_copy" in str(n.target)]
    assert len(expands) == 1 and expands[0].args[0].name == "y"
    pte = edge.to_executorch(get_xnnpack_executorch_backend_config()).buffer
    out = Runtime.get().load_program(pte).load_method("forward").execute([x.numpy(), y.numpy()])
    np.testing.assert_allclose(out[0], (x + y).numpy(), rtol=1e-6)


def test_xnn_header_from_bytes_checks_magic_length_and_validity():
    from edgetorch.backends.xnnpack.blob import BlobError
    from edgetorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader

    data = XNNHeader(32, 64, 96, 8).to_bytes()
    assert XNNHeader.from_bytes(data) == XNNHeader(32, 64, 96, 8)
    with pytest.raises(ValueError, match="invalid magic bytes b'XH01'"):
        XNNHeader.from_bytes(data[:4] + b"XH01" + data[8:])
    with pytest.raises(BlobError, match="parsed length was 29"):
        XNNHeader.from_bytes(data[:8] + b"\x1d\x00" + data[10:])
    with pytest.raises(ValueError, match="no more than 30 bytes, got 31"):
        XNNHeader.from_bytes(data + b"\0")
    assert not XNNHeader(32, 64, 95, 8).is_valid() and not XNNHeader(32, 0, 96, 8).is_valid()
    with pytest.raises(ValueError, match="is_valid"):
        XNNHeader(32, 64, 95, 8).to_bytes()


def test_batch_norms_after_a_conv3d_stay_portable():
    """XNNPACK takes 2-d to 4-d batch norms; a 5-d one (after a Conv3d, which it lacks) stays portable."""
    model = nn.Sequential(nn.Conv3d(2, 2, 2), nn.BatchNorm3d(2), nn.ReLU(), nn.BatchNorm3d(2)).eval()
    edge = lower(torch.export.export(model, (torch.randn(1, 2, 4, 4, 4),)), XnnpackPartitioner())
    ops = portable_ops(edge)
    assert ops.count("_native_batch_norm_legit_no_training") == 2 and "convolution" in ops, ops
    flat = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).eval()
    assert portable_ops(lower(torch.export.export(flat, (torch.randn(2, 3),)), XnnpackPartitioner())) == ["delegate"]


def test_float16_nodes_are_delegated_as_float16_except_gelu():
    """ExecuTorch's default partitioner takes float16 graphs (XNNPACK's fp16 datatype), except GELU."""
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3), nn.GELU()).eval().half()
    x = torch.randn(2, 4).half()
    edge = lower(torch.export.export(model, (x,)), XnnpackPartitioner())
    assert portable_ops(edge) == ["delegate", "gelu"]
    graph = parse_blob(edge.exported_program().graph_module.lowered_module_0.processed_bytes).graph
    assert {xs.tensor_value(v).datatype for v in graph.xvalues} == {xs.XNNDatatype.xnn_datatype_fp16}
    out = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward").execute([x.numpy()])[0]
    with torch.no_grad():
        want = model(x).float().numpy()
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), want, rtol=0, atol=1e-2)
