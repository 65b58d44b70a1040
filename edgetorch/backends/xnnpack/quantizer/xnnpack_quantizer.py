"""``XNNPACKQuantizer``: the PT2E quantizer for models that will run on the XNNPACK backend.

Used with torchao's ``prepare_pt2e`` / ``prepare_qat_pt2e`` / ``convert_pt2e``:
it annotates the operator patterns XNNPACK runs in int8 (see
``xnnpack_quantizer_utils``) with a :class:`QuantizationConfig`, chosen per
module name, per module type, per operator or globally, in that order of
precedence. ``get_symmetric_quantization_config`` builds the configs XNNPACK
supports: int8 asymmetric activations (static or dynamic), int8 symmetric
weights per tensor or per channel, float bias. Imports torch and torchao.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e import (
    FakeQuantize,
    FusedMovingAvgObsFakeQuantize,
    HistogramObserver,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    PerChannelMinMaxObserver,
    PlaceholderObserver,
)
from torchao.quantization.pt2e.quantizer import (
    QuantizationConfig,
    QuantizationSpec,
    Quantizer,
    get_module_name_filter,
)

from edgetorch.backends.xnnpack.quantizer import xnnpack_quantizer_utils as patterns

__all__ = ["XNNPACKQuantizer", "get_symmetric_quantization_config"]

# Smallest scale an observer may choose, so that a constant tensor does not get scale 0.
_EPS = 2**-12


@functools.lru_cache
def get_symmetric_quantization_config(
    is_per_channel: bool = False,
    is_qat: bool = False,
    is_dynamic: bool = False,
    act_qmin: int = -128,
    act_qmax: int = 127,
    weight_qmin: int = -127,
    weight_qmax: int = 127,
) -> QuantizationConfig:
    """The int8 config XNNPACK runs: asymmetric per-tensor activations, symmetric weights (zero point 0).

    ``is_per_channel`` gives each output channel of a weight its own scale;
    ``is_dynamic`` computes activation parameters at run time (no output
    quantization, so only linear and conv are quantized); ``is_qat`` uses fake
    quantization for quantization-aware training with ``prepare_qat_pt2e``.
    """
    act_args: dict = {"eps": _EPS}
    if is_qat and is_dynamic:
        act_ctr = FakeQuantize
        act_args["observer"] = MovingAverageMinMaxObserver.with_args(averaging_constant=1)
    elif is_qat:
        act_ctr = FusedMovingAvgObsFakeQuantize
    else:
        act_ctr = PlaceholderObserver if is_dynamic else HistogramObserver
    activation = QuantizationSpec(
        dtype=torch.int8,
        quant_min=act_qmin,
        quant_max=act_qmax,
        qscheme=torch.per_tensor_affine,
        is_dynamic=is_dynamic,
        observer_or_fake_quant_ctr=act_ctr.with_args(**act_args),
    )

    weight_args: dict = {"eps": _EPS}
    if is_qat:
        weight_ctr = FusedMovingAvgObsFakeQuantize
        weight_args["observer"] = (
            MovingAveragePerChannelMinMaxObserver if is_per_channel else MovingAverageMinMaxObserver
        )
    else:
        weight_ctr = PerChannelMinMaxObserver if is_per_channel else MinMaxObserver
    weight = QuantizationSpec(
        dtype=torch.int8,
        quant_min=weight_qmin,
        quant_max=weight_qmax,
        qscheme=torch.per_channel_symmetric if is_per_channel else torch.per_tensor_symmetric,
        ch_axis=0,
        is_dynamic=False,
        observer_or_fake_quant_ctr=weight_ctr.with_args(**weight_args),
    )
    return QuantizationConfig(activation, None if is_dynamic else activation, weight, None, is_qat)


@dataclass(frozen=True)
class _Pattern:
    name: str
    dynamic: bool  # may be quantized with dynamic activations
    qat: bool  # exists only in QAT graphs (conv + batch norm)
    targets: frozenset


_PATTERNS = [
    _Pattern("conv_bn_relu", False, True, frozenset(patterns.CONV_TARGETS)),
    _Pattern("conv_bn", False, True, frozenset(patterns.CONV_TARGETS)),
    _Pattern("conv_transpose_bn_relu", False, True, frozenset(patterns.CONV_TRANSPOSE_TARGETS)),
    _Pattern("conv_transpose_bn", False, True, frozenset(patterns.CONV_TRANSPOSE_TARGETS)),
    _Pattern("linear_relu", False, False, frozenset(patterns.LINEAR_TARGETS)),
    _Pattern("linear", True, False, frozenset(patterns.LINEAR_TARGETS)),
    _Pattern("conv", True, False, frozenset(patterns.CONV_TARGETS)),
    _Pattern("conv_transpose", True, False, frozenset(patterns.CONV_TRANSPOSE_TARGETS)),
    _Pattern("conv_relu", False, False, frozenset(patterns.CONV_TARGETS)),
    _Pattern("conv_transpose_relu", False, False, frozenset(patterns.CONV_TRANSPOSE_TARGETS)),
    _Pattern("adaptive_avg_pool2d", False, False, frozenset(patterns.ADAPTIVE_AVG_POOL2D_TARGETS)),
    _Pattern("add_relu", False, False, frozenset(patterns.ADD_TARGETS)),
    _Pattern("add", False, False, frozenset(patterns.ADD_TARGETS)),
    _Pattern("mul_relu", False, False, frozenset(patterns.MUL_TARGETS)),
    _Pattern("mul", False, False, frozenset(patterns.MUL_TARGETS)),
    _Pattern("cat", False, False, frozenset(patterns.CAT_TARGETS)),
]


def _module_type_filter(module_type: Callable) -> Callable[[Node], bool]:
    """Whether a node was traced inside a module of ``module_type`` (at any depth)."""
    wanted = f"{module_type.__module__}.{module_type.__qualname__}"

    def inside(node: Node) -> bool:
        for _, t in node.meta.get("nn_module_stack", {}).values():
            if (f"{t.__module__}.{t.__qualname__}" if isinstance(t, type) else t) == wanted:
                return True
        return False

    return inside


class XNNPACKQuantizer(Quantizer):
    """Annotates a model's XNNPACK-quantizable patterns for ``prepare_pt2e`` / ``prepare_qat_pt2e``.

    Configs set with ``set_module_name`` win over ``set_module_type``, which win
    over ``set_operator_type``, which win over ``set_global``. Each setter
    returns the quantizer, so calls chain.
    """

    def __init__(self) -> None:
        super().__init__()
        self.global_config: QuantizationConfig | None = None
        self.operator_type_config: dict[torch._ops.OpOverloadPacket, QuantizationConfig | None] = {}
        self.module_type_config: dict[Callable, QuantizationConfig | None] = {}
        self.module_name_config: dict[str, QuantizationConfig | None] = {}
        self.filter_fn: Callable[[Node], bool] | None = None

    def set_global(self, quantization_config: QuantizationConfig | None) -> XNNPACKQuantizer:
        self.global_config = quantization_config
        return self

    def set_operator_type(
        self, operator_type: torch._ops.OpOverloadPacket, quantization_config: QuantizationConfig | None
    ) -> XNNPACKQuantizer:
        """Quantize the patterns built around ``operator_type`` with this config.

        Takes an overload packet (``torch.ops.aten.linear``) or one overload
        (``torch.ops.aten.linear.default``); ExecuTorch's quantizer matches the
        packet only for transposed convs, which leaves ``set_operator_type(aten.linear, ...)``
        without effect there.
        """
        self.operator_type_config[operator_type] = quantization_config
        return self

    def set_module_type(
        self, module_type: Callable, quantization_config: QuantizationConfig | None
    ) -> XNNPACKQuantizer:
        """Quantize the patterns inside every submodule of type ``module_type`` with this config."""
        self.module_type_config[module_type] = quantization_config
        return self

    set_object_type = set_module_type  # the name ExecuTorch's documentation uses

    def set_module_name(self, module_name: str, quantization_config: QuantizationConfig) -> XNNPACKQuantizer:
        """Quantize the patterns inside submodule ``module_name`` (e.g. ``"blocks.0.fc"``) with this config."""
        # An AssertionError, as ExecuTorch's quantizer raises: None cannot un-quantize a submodule yet.
        assert quantization_config is not None, " quantization_config == None is not supported yet"
        self.module_name_config[module_name] = quantization_config
        return self

    def set_filter_function(self, filter_fn: Callable[[Node], bool]) -> XNNPACKQuantizer:
        """Quantize only nodes for which ``filter_fn`` returns True."""
        self.filter_fn = filter_fn
        return self

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        return patterns.scalars_to_attributes(model)

    def annotate(self, model: GraphModule) -> GraphModule:
        names, types = list(self.module_name_config), list(self.module_type_config)
        for name, config in self.module_name_config.items():
            self._annotate_patterns(model, config, get_module_name_filter(name))
        for module_type, config in self.module_type_config.items():
            self._annotate_patterns(model, config, _module_type_filter(module_type))
        elsewhere = self._outside(names, types)
        for operator, config in self.operator_type_config.items():
            self._annotate_patterns(model, config, elsewhere, operator)
        self._annotate_patterns(model, self.global_config, elsewhere)
        patterns.propagate_annotation(model)
        return model

    def validate(self, model: GraphModule) -> None:
        pass

    @staticmethod
    def _outside(names: list[str], types: list[Callable]) -> Callable[[Node], bool]:
        """A filter for nodes that no per-name or per-type config claims."""
        filters = [get_module_name_filter(n) for n in names] + [_module_type_filter(t) for t in types]
        return lambda node: not any(f(node) for f in filters)

    def _annotate_patterns(
        self,
        model: GraphModule,
        config: QuantizationConfig | None,
        filter_fn: Callable[[Node], bool],
        operator: torch._ops.OpOverloadPacket | None = None,
    ) -> None:
        if config is None:
            return

        def accepted(node: Node) -> bool:
            return filter_fn(node) and (self.filter_fn is None or self.filter_fn(node))

        dynamic = config.input_activation is not None and config.input_activation.is_dynamic
        for pattern in _PATTERNS:
            if operator is not None and not any(
                operator in (t, getattr(t, "overloadpacket", t)) for t in pattern.targets
            ):
                continue
            if (pattern.dynamic if dynamic else True) or (config.is_qat and pattern.qat):
                patterns.ANNOTATORS[pattern.name](model, config, accepted)
