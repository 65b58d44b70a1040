"""Measure which dtypes each Edge op accepts and returns, and write edgetorch/exir/dialects/_dtype_table.py.

For every Core ATen (and ``*_copy`` view) overload with OpInfo samples, each sample is
re-run in PyTorch eager on the CPU with its tensors cast to every combination of the
11 dtypes ExecuTorch's portable kernels cover, its Python scalars as bool, int and float,
and its dtype arguments as each dtype. Every call that succeeds records one allowed row:
the dtype of each tensor, scalar (bool, int32, float32) and dtype argument and of each
returned tensor. Overloads without a usable sample are left out,
which leaves them unconstrained. Run from the repository root (about two minutes):

    python scripts/gen_edge_dtypes.py
"""

from __future__ import annotations

import itertools
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.testing._internal.common_methods_invocations import op_db

OUT = Path(__file__).resolve().parents[1] / "edgetorch" / "exir" / "dialects" / "_dtype_table.py"

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]
LETTER = {d: chr(ord("a") + i) for i, d in enumerate(DTYPES)}
SCALARS = [True, 2, 1.5]
SAMPLES_PER_OP = 8
FULL_PRODUCT_SLOTS = 3  # more tensor slots than this: every tensor gets the same dtype
OPINFO_NAMES = {"convolution": "conv2d", "max_pool2d_with_indices": "nn.functional.max_pool2d"}


SCALAR_KINDS = ("number", "Optional[number]")
DTYPE_KINDS = ("ScalarType", "Optional[ScalarType]")
# A Python scalar's dtype in a row, as ExecuTorch writes it.
SCALAR_DTYPE = {bool: torch.bool, int: torch.int32, float: torch.float32}


def kind(arg: Any) -> str:
    """An argument's declared type as the schema writes it ('Tensor', 'Optional[ScalarType]', 'number', ...)."""
    return str(arg.real_type)


def _t(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


# Ops whose OpInfo samples do not fit the ATen overload's argument list: small samples by hand.
HAND_SAMPLES = {
    "aten::_softmax": lambda: [{"self": _t(2, 3), "dim": 1, "half_to_float": False}],
    "aten::_log_softmax": lambda: [{"self": _t(2, 3), "dim": 1, "half_to_float": False}],
    "aten::_to_copy": lambda: [{"self": _t(2, 3), "dtype": torch.float32}],
    "aten::where.self": lambda: [{"condition": _t(2, 3) > 0, "self": _t(2, 3), "other": _t(2, 3)}],
    "aten::convolution": lambda: [
        {
            "input": _t(1, 2, 5, 5),
            "weight": _t(3, 2, 3, 3),
            "bias": _t(3),
            "stride": [1, 1],
            "padding": [0, 0],
            "dilation": [1, 1],
            "transposed": False,
            "output_padding": [0, 0],
            "groups": 1,
        }
    ],
    "aten::index.Tensor": lambda: [
        {"self": _t(3, 4), "indices": [torch.tensor([0, 2])]},
        {"self": _t(3, 4), "indices": [torch.tensor([True, False, True])]},
    ],
    "aten::full": lambda: [{"size": [2, 3], "fill_value": 1.5}],
    "aten::arange.start_step": lambda: [{"start": 0, "end": 4, "step": 1}],
    "aten::empty.memory_format": lambda: [{"size": [2, 3]}],
    "aten::max_pool2d_with_indices": lambda: [{"self": _t(1, 2, 4, 4), "kernel_size": [2, 2]}],
    "aten::_native_batch_norm_legit_no_training": lambda: [
        {
            "input": _t(2, 3, 4),
            "weight": _t(3),
            "bias": _t(3),
            "running_mean": _t(3),
            "running_var": _t(3).abs(),
            "momentum": 0.1,
            "eps": 1e-5,
        }
    ],
    "aten::upsample_nearest2d.vec": lambda: [{"input": _t(1, 2, 3, 3), "output_size": [6, 6], "scale_factors": None}],
    "aten::upsample_bilinear2d.vec": lambda: [
        {"input": _t(1, 2, 3, 3), "output_size": [6, 6], "align_corners": False, "scale_factors": None}
    ],
    "aten::squeeze_copy.dims": lambda: [{"self": _t(2, 1, 3), "dim": [1]}],
    "aten::scalar_tensor": lambda: [{"s": 1.5}],
    "aten::div.Tensor_mode": lambda: [{"self": _t(2, 3), "other": _t(2, 3), "rounding_mode": "floor"}],
    "aten::nonzero": lambda: [{"self": _t(2, 3)}],
    "aten::clamp": lambda: [{"self": _t(2, 3), "min": -0.5, "max": 0.5}],
}


def edge_overloads() -> list[torch._ops.OpOverload]:
    """Core ATen overloads as the Edge dialect holds them: aliasing views replaced by their ``*_copy`` twins."""
    found: dict[str, torch._ops.OpOverload] = {}
    for name in sorted(dir(torch.ops.aten)):
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if not (torch.Tag.core in op.tags or torch.Tag.view_copy in op.tags) or op._schema.is_mutable:
                continue
            first = op._schema.arguments[0].alias_info if op._schema.arguments else None
            twin = getattr(getattr(torch.ops.aten, f"{name}_copy", None), overload, None)
            op = twin if first is not None and twin is not None else op
            found[op.name()] = op
    return [found[k] for k in sorted(found)]


def opinfos_for(op: torch._ops.OpOverload, by_name: dict[str, list[Any]]) -> list[Any]:
    """The OpInfo entries (every variant) whose samples may fit ``op``."""
    base = op._opname.strip("_")
    base = base[: -len("_copy")] if base.endswith("_copy") else base
    for key in (OPINFO_NAMES.get(base), op._opname, base, f"nn.functional.{base}"):
        if key in by_name:
            return by_name[key]
    return []


def is_tensor_list(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(t, torch.Tensor) for t in x)


def bound_args(op: torch._ops.OpOverload, sample: Any) -> dict[str, Any] | None:
    """The sample as a name -> value mapping for ``op``'s schema, or None if it does not fit."""
    positional = [sample.input, *sample.args]
    schema = op._schema.arguments
    bound: dict[str, Any] = {}
    i = 0
    for arg in schema:
        if arg.kwarg_only:
            break
        if i < len(positional):
            bound[arg.name] = positional[i]
            i += 1
    if i < len(positional):
        return None
    names = {a.name for a in schema}
    for key, value in sample.kwargs.items():
        if key not in names:
            return None
        bound[key] = value
    for arg in schema:  # a Scalar overload takes the one-element value of the Tensor overload's sample
        value = bound.get(arg.name)
        if kind(arg) in SCALAR_KINDS and isinstance(value, torch.Tensor):
            if value.numel() == 0:
                return None
            bound[arg.name] = value.flatten()[0].item()
    return bound


def call(op: torch._ops.OpOverload, bound: dict[str, Any]) -> Any:
    args, kwargs = [], {}
    for arg in op._schema.arguments:
        if arg.name not in bound:
            continue
        if arg.kwarg_only:
            kwargs[arg.name] = bound[arg.name]
        else:
            args.append(bound[arg.name])
    return op(*args, **kwargs)


def cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` as ``dtype``; floats becoming integers are made positive and non-zero (no division by zero)."""
    if t.dtype.is_floating_point and not dtype.is_floating_point and dtype != torch.bool:
        return (t.abs() * 4).round().clamp(min=1).to(dtype)
    return t.to(dtype)


def slots(op: torch._ops.OpOverload, bound: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """Names of the tensor arguments the sample passes, of every dtype argument, and of the Python-scalar
    arguments it passes or could leave at their default."""
    tensors, scalar_types, scalars = [], [], []
    for arg in op._schema.arguments:
        value = bound.get(arg.name)
        if isinstance(value, torch.Tensor) or is_tensor_list(value):
            tensors.append(arg.name)
        elif kind(arg) in DTYPE_KINDS:
            scalar_types.append(arg.name)
        elif kind(arg) in SCALAR_KINDS and (isinstance(value, (bool, int, float)) or arg.has_default_value()):
            scalars.append(arg.name)
    return tensors, scalar_types, scalars


def scalar_choices(bound: dict[str, Any], name: str) -> list[Any]:
    """Values to try for a Python-scalar argument: each kind, and None (left out) when it has a default."""
    return SCALARS if name in bound else [None, *SCALARS]


def retyped(bound: dict[str, Any], names: list[str], dtypes: tuple) -> dict[str, Any]:
    new = dict(bound)
    for name, dtype in zip(names, dtypes):
        value = bound[name]
        new[name] = [cast(t, dtype) for t in value] if isinstance(value, (list, tuple)) else cast(value, dtype)
    return new


def returned_dtypes(op: torch._ops.OpOverload, result: Any) -> dict[str, torch.dtype | None] | None:
    results = result if len(op._schema.returns) > 1 else (result,)
    found = {}
    for i, (ret, value) in enumerate(zip(op._schema.returns, results)):
        name = ret.name or f"__ret_{i}"
        if isinstance(value, torch.Tensor):
            found[name] = value.dtype
        elif is_tensor_list(value):
            found[name] = value[0].dtype
        elif isinstance(value, (list, tuple)) and not value:
            found[name] = None
    return found


def with_zero_dim(bound: dict[str, Any], tensors: list[str]) -> list[dict[str, Any]]:
    """The sample plus variants where one non-first tensor argument is 0-d (scalars lifted to tensors)."""
    variants = [bound]
    for name in tensors[1:]:
        value = bound[name]
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.numel() > 0:
            variants.append({**bound, name: value.flatten()[0].clone()})
    return variants


def runnable_samples(op: torch._ops.OpOverload, infos: list[Any]) -> list[dict[str, Any]]:
    """Up to SAMPLES_PER_OP argument sets that ``op`` runs in the sample's own dtype."""
    candidates: list[dict[str, Any]] = [dict(b) for b in HAND_SAMPLES.get(op.name(), lambda: [])()]
    for info in infos:
        dtype = torch.float32 if torch.float32 in info.dtypes else sorted(info.dtypes, key=str)[0]
        for sample in info.sample_inputs("cpu", dtype):
            bound = bound_args(op, sample)
            if bound is not None:
                candidates.append(bound)
    samples: list[dict[str, Any]] = []
    for bound in candidates:
        for variant in with_zero_dim(bound, slots(op, bound)[0]):
            try:
                call(op, variant)
            except Exception:
                continue
            samples.append(variant)
        if len(samples) >= SAMPLES_PER_OP:
            break
    return samples


def measure(op: torch._ops.OpOverload, samples: list[dict[str, Any]]) -> tuple[list[str], list[str], set[str]]:
    typed = [a for a in op._schema.arguments if "Tensor" in kind(a) or kind(a) in SCALAR_KINDS + DTYPE_KINDS]
    optional = [a.name for a in typed if kind(a) != "Tensor" and kind(a) != "List[Tensor]"]
    returns = [r.name or f"__ret_{i}" for i, r in enumerate(op._schema.returns) if "Tensor" in kind(r)]
    names = [a.name for a in typed] + returns
    args = {a.name: a for a in op._schema.arguments}
    rows: set[str] = set()
    for bound in samples:
        tensors, scalar_types, scalars = slots(op, bound)
        choices = [DTYPES] * len(tensors) if len(tensors) <= FULL_PRODUCT_SLOTS else None
        tensor_combos = itertools.product(*choices) if choices else [(d,) * len(tensors) for d in DTYPES]
        dtype_choices = [[None, *DTYPES] if kind(args[n]).startswith("Optional") else DTYPES for n in scalar_types]
        for combo in tensor_combos:
            for kinds in itertools.product(*dtype_choices, *(scalar_choices(bound, n) for n in scalars)):
                trial = retyped(bound, tensors, combo)
                trial.update(zip(scalar_types + scalars, kinds))
                trial = {k: v for k, v in trial.items() if v is not None or k not in scalars}
                try:
                    result = call(op, trial)
                except Exception:
                    continue
                got = returned_dtypes(op, result)
                if got is None:
                    continue
                seen = dict(zip(tensors, combo)) | dict(zip(scalar_types, kinds)) | got
                given = zip(scalars, kinds[len(scalar_types) :])
                seen |= {name: SCALAR_DTYPE[type(v)] for name, v in given if v is not None}
                rows.add("".join(LETTER[seen[n]] if seen.get(n) is not None else "-" for n in names))
    return names, optional, rows


def main() -> int:
    warnings.simplefilter("ignore")
    by_name: dict[str, list[Any]] = {}
    for info in op_db:
        by_name.setdefault(info.name, []).append(info)
    table, skipped = {}, []
    for op in edge_overloads():
        samples = runnable_samples(op, opinfos_for(op, by_name))
        names, optional, rows = measure(op, samples)
        if not rows:
            skipped.append(op.name())
            continue
        table[op.name()] = (names, optional, " ".join(sorted(rows)))
    lines = [
        f'"""Allowed dtypes of Edge ops, measured in PyTorch {torch.__version__} eager on CPU by',
        "scripts/gen_edge_dtypes.py; regenerate it, do not edit.",
        "",
        "One op a line: name, the names of its typed arguments (tensors, scalars, dtypes) and returned",
        "tensors (comma-separated), those that may be absent ('-' for none), then the allowed rows: one",
        "letter per name indexing DTYPES (a = bool, ...; a Python int scalar is int32, a float float32),",
        "or '-' where the argument is absent.",
        '"""',
        "",
        f"DTYPES = {tuple(str(d).removeprefix('torch.') for d in DTYPES)!r}".replace("'", '"'),
        "",
        'TABLE = """',
    ]
    for name, (names, optional, rows) in sorted(table.items()):
        lines.append(f"{name} {','.join(names)} {','.join(optional) or '-'} {rows}")
    lines += ['"""', ""]
    OUT.write_text("\n".join(lines))
    print(f"wrote {len(table)} ops to {OUT}; no usable sample for {len(skipped)}: {' '.join(skipped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
