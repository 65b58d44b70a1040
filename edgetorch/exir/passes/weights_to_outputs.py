"""Joint graphs (``torch.export.experimental._export_forward_backward``): trainable weights become outputs.

A joint graph returns the loss (and any other user outputs) followed by one
gradient per trainable parameter. For on-device training the program must
also hand back the parameters themselves, as planned memory that keeps its
value from one run to the next, so an optimizer can update them in place.
``weights_to_outputs`` appends them to the graph's outputs; ExecuTorch marks
these extra outputs ``OutputKind.TOKEN`` (torch has no kind for "a parameter
returned as is") and so do we, so both read the same signature.

``training_metadata`` names the constant methods ExecuTorch's TrainingModule
reads to slice a joint method's outputs: where the gradients start, where the
parameters start, and the parameters' fully qualified names. May import torch.
"""

from __future__ import annotations

from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind, OutputSpec, TensorArgument

from edgetorch.exir.emit import STATE_WRITES
from edgetorch.exir.passes.spec_prop import TRAINABLE

GRADIENTS_INDEX = "__et_training_gradients_index_"
PARAMETERS_INDEX = "__et_training_parameters_index_"
FQN = "__et_training_fqn_"


def trainable_parameters(ep: ExportedProgram) -> list[str]:
    """Fully qualified names of the parameters ``ep`` returns gradients for, in the order of the gradients."""
    return [s.target for s in ep.graph_signature.output_specs if s.kind == OutputKind.GRADIENT_TO_PARAMETER]


def weights_to_outputs(ep: ExportedProgram) -> None:
    """Append each trainable parameter's placeholder to ``ep``'s outputs (in gradient order) and mark it
    ``TRAINABLE``, so it is planned as mutable state and returned after the gradients."""
    fqns = trainable_parameters(ep)
    if not fqns:
        return
    signature, graph = ep.graph_signature, ep.graph
    by_fqn = {fqn: name for name, fqn in signature.inputs_to_parameters.items()}
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    weights = [placeholders[by_fqn[fqn]] for fqn in fqns]
    for node in weights:
        node.meta[TRAINABLE] = True
    output = graph.output_node()
    output.args = ((*output.args[0], *weights),)
    signature.output_specs.extend(OutputSpec(OutputKind.TOKEN, TensorArgument(node.name), None) for node in weights)
    ep.graph_module.recompile()


def training_metadata(methods: dict[str, ExportedProgram]) -> dict[str, object]:
    """The constant methods that describe each joint method's outputs (after ``weights_to_outputs``).

    For a method ``m``: ``__et_training_gradients_index_m`` (int), ``__et_training_fqn_m`` (the parameter
    names, a list of str) and ``__et_training_parameters_index_m`` (int), in the order ExecuTorch emits them.
    """
    metadata: dict[str, object] = {}
    for name, ep in methods.items():
        kinds = [s.kind for s in ep.graph_signature.output_specs if s.kind not in STATE_WRITES]
        if OutputKind.GRADIENT_TO_PARAMETER not in kinds:
            continue
        metadata[GRADIENTS_INDEX + name] = kinds.index(OutputKind.GRADIENT_TO_PARAMETER)
        metadata[FQN + name] = trainable_parameters(ep)
        metadata[PARAMETERS_INDEX + name] = kinds.index(OutputKind.TOKEN)
    return metadata
