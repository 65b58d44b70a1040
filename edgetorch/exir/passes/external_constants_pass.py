"""Tag constants that should live in a ``.ptd`` file instead of the ``.pte``.

Two tags, as in ExecuTorch:

* ``node.meta["constant_tag"]`` on a constant placeholder of an execution-dialect graph:
  ``to_executorch`` stores that constant under its fully qualified name in ``<tag>.ptd``
  (set by :func:`external_constants_pass`, which ``ExecutorchBackendConfig(external_constants=...)`` runs);
* ``node.meta["custom"]["delegate_constant_tag"]`` on a ``get_attr`` node of an unlifted module
  (:func:`delegate_external_constants_pass_unlifted`): ``torch.export`` carries it to the placeholder,
  and a backend that stores weights as named data (XNNPACK) puts that weight in ``<tag>.ptd``.

May import torch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.export import ExportedProgram

from edgetorch.exir.pass_base import PassResult
from edgetorch.exir.tensor import TensorSpec

__all__ = ["DEFAULT_EXTERNAL_TAG", "external_constants_pass", "delegate_external_constants_pass_unlifted"]

DEFAULT_EXTERNAL_TAG = "_default_external_constant"
"""The tag (and so the ``.ptd`` file name) when ``external_constants=True``."""

TagFn = Callable[[torch.fx.Node], str | None]


def external_constants_pass(ep: ExportedProgram, gen_tag_fn: TagFn | None = None) -> PassResult:
    """Tag each constant placeholder of ``ep`` (parameters, constant buffers, named tensor constants).

    Constants torch.export lifted out of the code (``lifted_tensor_*``) stay in the program: they are part
    of the computation, not weights. ``gen_tag_fn`` picks the tag per node (None keeps that constant in
    the program); without it every constant goes to ``_default_external_constant.ptd``.
    """
    sig = ep.graph_signature
    names = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
    tagged = False
    for node in ep.graph.nodes:
        spec = node.meta.get("spec")
        fqn = names.get(node.name)
        if node.op != "placeholder" or fqn is None or not (isinstance(spec, TensorSpec) and spec.const):
            continue
        if fqn.split(".")[-1].lstrip("_").startswith("lifted_tensor"):
            continue
        tag = DEFAULT_EXTERNAL_TAG if gen_tag_fn is None else gen_tag_fn(node)
        if tag is not None:
            node.meta["constant_tag"] = tag
            tagged = True
    return PassResult(ep.graph_module, tagged)


def delegate_external_constants_pass_unlifted(module: torch.nn.Module, gen_tag_fn: TagFn) -> PassResult:
    """Tag the ``get_attr`` nodes of an unlifted module (``ep.module()``) for a backend's external weights.

    Export the module again afterwards; the tag travels in ``node.meta["custom"]`` to the placeholders.
    """
    tagged = False
    for sub in module.modules():
        if not isinstance(sub, torch.fx.GraphModule):
            continue
        for node in sub.graph.nodes:
            if node.op == "get_attr":
                node.meta.setdefault("custom", {})["delegate_constant_tag"] = gen_tag_fn(node)
                tagged = True
    return PassResult(module, tagged)
