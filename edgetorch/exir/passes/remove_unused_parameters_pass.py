"""Drop parameters that no node reads.

``torch.export`` lifts every parameter of the module, used or not. After PT2E's ``convert_pt2e`` the float
weights of quantized layers are such leftovers (the graph reads the int8 copies), and writing them would make
a quantized program about as large as the float one. ExecuTorch removes them when it lowers to Edge
(``remove_unused_parameters_pass``); so does ``lower_to_edge``. Like ExecuTorch it leaves buffers and
constant tensors alone (an unread ``num_batches_tracked`` stays), so both write the same named data.
May import torch.
"""

from __future__ import annotations

from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, InputKind


def remove_unused_parameters_pass(program: ExportedProgram) -> ExportedProgram:
    """``program`` without the unread parameters (changed in place: call it on a program you own, such as
    the one a decomposition returns); returned unchanged when every input is read."""
    signature = program.graph_signature
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    unused = [
        (spec, node)
        for spec, node in zip(signature.input_specs, placeholders)
        if spec.kind == InputKind.PARAMETER and not node.users
    ]
    if not unused:
        return program
    dropped = {spec.target for spec, _ in unused}
    for _, node in unused:
        program.graph.erase_node(node)
    program.graph_module.recompile()
    gone = {id(spec) for spec, _ in unused}
    return ExportedProgram(
        root=program.graph_module,
        graph=program.graph,
        graph_signature=ExportGraphSignature(
            input_specs=[s for s in signature.input_specs if id(s) not in gone], output_specs=signature.output_specs
        ),
        state_dict={k: v for k, v in program.state_dict.items() if k not in dropped},
        range_constraints=program.range_constraints,
        module_call_graph=program.module_call_graph,
        example_inputs=program.example_inputs,
        constants={k: v for k, v in program.constants.items() if k not in dropped},
        verifiers=program.verifiers,
    )
