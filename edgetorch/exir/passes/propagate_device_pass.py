"""PropagateDevicePass: the tensors at a device delegate's boundary live on that device.

A partitioner that lowers to an accelerator names the device in its delegate's compile specs, under the key
``target_device`` (``b"cuda:0"``, ``b"cuda"`` meaning index 0). After lowering, this pass marks the
TensorSpecs the delegate reads and writes with that device, so the emitter writes it into each tensor's extra
info. With ``enable_non_cpu_memory_planning`` the moves also become explicit operators: an
``et_copy._h2d_copy`` before each input the delegate reads from the host, an ``et_copy._d2h_copy`` after each
output the host reads back; a copy to the host that only feeds a copy back to the same device is removed
again (two delegates on one device pass the tensor directly). Memory planning then puts device tensors in
arenas of their own device. ``skip_h2d_for_method_inputs`` / ``skip_d2h_for_method_outputs`` leave out the
copies of method inputs and outputs (the caller hands over device tensors). May import torch.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.errors import EdgetorchError
from edgetorch.exir.backend.delegate import executorch_call_delegate
from edgetorch.exir.passes.propagate_device_config import PropagateDeviceConfig
from edgetorch.exir.tensor import TensorSpec
from edgetorch.format.program import DeviceType

__all__ = ["TARGET_DEVICE_COMPILE_SPEC_KEY", "PropagateDeviceConfig", "PropagateDevicePass", "parse_device"]

TARGET_DEVICE_COMPILE_SPEC_KEY = "target_device"
"""The compile-spec key under which a partitioner names its delegate's device (value: ``b"cuda:0"``)."""

Device = tuple[DeviceType, int]


class DevicePropagationError(EdgetorchError, RuntimeError):
    """A graph the pass cannot place as asked (a shared method input to hand over to the device)."""


def parse_device(value: bytes | str) -> Device:
    """``b"cuda:1"`` -> ``(DeviceType.CUDA, 1)``; the type is matched without regard to case, the index
    defaults to 0. ValueError names the known types for anything else."""
    text = (value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else value).strip().lower()
    kind, _, index = text.partition(":")
    by_name = {t.name.lower(): t for t in DeviceType}
    if kind not in by_name:
        raise ValueError(f"unknown device type {kind!r} in {text!r}; expected one of {[t.name for t in DeviceType]}")
    if index and not index.isdigit():
        raise ValueError(f"device index {index!r} in {text!r} is not a non-negative integer")
    return by_name[kind], int(index or 0)


def delegate_device(lowered: Any) -> Device | None:
    """The device a lowered module's compile specs name, or None (a host delegate)."""
    for spec in getattr(lowered, "compile_specs", None) or ():
        if spec.key == TARGET_DEVICE_COMPILE_SPEC_KEY:
            return parse_device(spec.value)
    return None


def _specs(value: object) -> list[TensorSpec]:
    if isinstance(value, TensorSpec):
        return [value]
    if isinstance(value, (tuple, list)):
        return [s for s in value if isinstance(s, TensorSpec)]
    return []


def _place(specs: Iterable[TensorSpec], device: Device) -> bool:
    placed = False
    for spec in specs:
        spec.device, spec.device_index = device
        placed = True
    return placed


def _on(spec: TensorSpec, device: Device) -> TensorSpec:
    """A copy of ``spec`` on ``device``, not yet planned (the copy is a new tensor)."""
    moved = copy.copy(spec)
    moved.init_mem_planning_fields()
    moved.device, moved.device_index = device
    return moved


class PropagateDevicePass(PassBase):
    """Place the tensors at each device delegate's boundary on its device (see the module's description)."""

    def __init__(
        self,
        skip_h2d_for_method_inputs: bool = False,
        skip_d2h_for_method_outputs: bool = False,
        enable_non_cpu_memory_planning: bool = False,
    ) -> None:
        super().__init__()
        if (skip_h2d_for_method_inputs or skip_d2h_for_method_outputs) and not enable_non_cpu_memory_planning:
            raise ValueError(
                "skip_h2d_for_method_inputs / skip_d2h_for_method_outputs leave out host/device copies, which "
                "exist only with device-aware memory planning; set enable_non_cpu_memory_planning=True or drop "
                "the skip options"
            )
        self.skip_h2d_for_method_inputs = skip_h2d_for_method_inputs
        self.skip_d2h_for_method_outputs = skip_d2h_for_method_outputs
        self.enable_non_cpu_memory_planning = enable_non_cpu_memory_planning

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        graph = graph_module.graph
        devices: dict[torch.fx.Node, Device] = {}
        changed = False
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is executorch_call_delegate:
                device = delegate_device(self._lowered(graph_module, node))
                if device is None:
                    continue
                devices[node] = device
                changed |= self._inputs(graph_module, node, device)
                changed |= _place(_specs(node.meta.get("spec")), device)
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is operator.getitem and node.args[0] in devices:
                changed |= self._output(graph_module, node)
        if changed and self.enable_non_cpu_memory_planning:
            self._drop_round_trips(graph_module)
        graph_module.recompile()
        return PassResult(graph_module, changed)

    @staticmethod
    def _lowered(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> Any:
        """The module a delegate call runs (None if the call does not name one: nothing to place then)."""
        ref = node.args[0] if node.args else None
        return getattr(graph_module, ref.target, None) if isinstance(ref, torch.fx.Node) else None

    def _inputs(self, graph_module: torch.fx.GraphModule, call: torch.fx.Node, device: Device) -> bool:
        """Place what the delegate reads on ``device``: copied there (device planning) or just marked."""
        changed = False
        args = list(call.args)
        for i, arg in enumerate(args[1:], start=1):
            if not isinstance(arg, torch.fx.Node):
                continue
            if not self.enable_non_cpu_memory_planning:
                changed |= _place(_specs(arg.meta.get("spec")), device)
                continue
            spec = arg.meta.get("spec")
            if not isinstance(spec, TensorSpec):
                continue
            if self.skip_h2d_for_method_inputs and arg.op == "placeholder":
                if len(arg.users) != 1:
                    raise DevicePropagationError(
                        f"method input {arg.name} has {len(arg.users)} users; skip_h2d_for_method_inputs hands an "
                        "input to the device only when the delegate is its one user. Disable the option or give "
                        "the delegate an input of its own"
                    )
                changed |= _place([spec], device)
                continue
            args[i] = self._copy_node(graph_module, "_h2d_copy", arg, _on(spec, device), before=call)
            changed = True
        call.args = tuple(args)
        return changed

    def _output(self, graph_module: torch.fx.GraphModule, item: torch.fx.Node) -> bool:
        """Put output ``item`` of a device delegate on its device, and copy it back for host readers."""
        spec, outs, index = item.meta.get("spec"), item.args[0].meta.get("spec"), item.args[1]
        if not (isinstance(spec, TensorSpec) and isinstance(outs, (tuple, list)) and isinstance(index, int)):
            return False
        if not (0 <= index < len(outs) and isinstance(outs[index], TensorSpec)):
            return False
        source = outs[index]
        _place([spec], (source.device, source.device_index))
        if not self.enable_non_cpu_memory_planning:
            return True
        if self.skip_d2h_for_method_outputs and all(u.op == "output" for u in item.users):
            return True
        back = self._copy_node(graph_module, "_d2h_copy", item, _on(spec, (DeviceType.CPU, 0)), after=item)
        item.replace_all_uses_with(back, delete_user_cb=lambda user: user is not back)
        return True

    @staticmethod
    def _copy_node(
        graph_module: torch.fx.GraphModule,
        name: str,
        source: torch.fx.Node,
        spec: TensorSpec,
        before: torch.fx.Node | None = None,
        after: torch.fx.Node | None = None,
    ) -> torch.fx.Node:
        from edgetorch.exir.passes import _device_copy_ops_registry  # registers torch.ops.et_copy

        _device_copy_ops_registry.ensure_registered()
        op = getattr(torch.ops.et_copy, name).default
        graph = graph_module.graph
        with graph.inserting_before(before) if before is not None else graph.inserting_after(after):
            node = graph.call_function(op, (source,))
        node.meta["spec"] = spec
        for key in ("val", "tensor_meta"):
            if key in source.meta:
                node.meta[key] = source.meta[key]
        return node

    @staticmethod
    def _drop_round_trips(graph_module: torch.fx.GraphModule) -> None:
        """``_h2d_copy(_d2h_copy(x))`` back onto the device ``x`` is on: read ``x`` directly."""
        to_device, to_host = torch.ops.et_copy._h2d_copy.default, torch.ops.et_copy._d2h_copy.default
        emptied: list[torch.fx.Node] = []
        for node in list(graph_module.graph.nodes):
            if node.op != "call_function" or node.target is not to_device:
                continue
            src = node.args[0]
            if not (isinstance(src, torch.fx.Node) and src.op == "call_function" and src.target is to_host):
                continue
            x = src.args[0]
            here, there = x.meta.get("spec") if isinstance(x, torch.fx.Node) else None, node.meta.get("spec")
            if not (isinstance(here, TensorSpec) and isinstance(there, TensorSpec)):
                continue
            if (here.device, here.device_index) != (there.device, there.device_index):
                continue  # a real move between two devices
            node.replace_all_uses_with(x)
            graph_module.graph.erase_node(node)
            emptied.append(src)
        for src in dict.fromkeys(emptied):
            if not src.users:  # a copy to the host that still feeds a host reader stays
                graph_module.graph.erase_node(src)
