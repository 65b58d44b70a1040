"""The registry's reading of kernel signatures against ATen's own schemas (torch is the oracle here)."""

from __future__ import annotations

import pytest
import torch

from edgetorch.runtime.kernels import registry


def _aten_schema(name: str):
    namespace, _, rest = name.partition("::")
    op, _, overload = rest.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")._schema
    except (AttributeError, RuntimeError):
        return None


def test_every_argument_the_load_check_requires_is_one_aten_does_not_make_optional():
    """The executor refuses at load a None passed where ``required_parameters`` says a kernel needs a value; a
    kernel annotated more strictly than ATen's schema would refuse valid programs. Arguments line up by position
    (some kernels name them differently: ``x`` for ``self``)."""
    registry.load_all_families()
    checked, wrong = 0, []
    for name, kernel in registry.KERNELS.items():
        schema = _aten_schema(name)
        if schema is None:
            continue
        fn, nargs = kernel
        for position, argument, _ in registry.required_parameters(fn, nargs):
            if position >= len(schema.arguments):
                continue
            checked += 1
            declared = schema.arguments[position]
            if isinstance(declared.type, torch.OptionalType):
                wrong.append(f"{name} argument {position} ({argument}): ATen has {declared.name}: {declared.type}")
    assert checked > 1000, f"only {checked} arguments compared: the registry or torch.ops lookup changed"
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("annotation", "required"),
    [
        ("np.ndarray", True),
        ("int", True),
        ("list[int]", True),
        ("float", True),
        ("bool", True),
        ("Number", True),
        ("int | None", False),
        ("Optional[int]", False),
        ("Any", False),
        ("np.ndarray | None", False),
    ],
)
def test_required_parameters_reads_the_annotation(annotation, required):
    def kernel(a, out):
        pass

    kernel.__annotations__ = {"a": annotation}
    found = registry.required_parameters(kernel, 2)
    assert [p for p, _, _ in found] == ([0, 1] if required else [1])
