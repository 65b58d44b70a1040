"""Symbolic shape expressions in serialized programs (the ``expr_str`` of a dynamic size: ``s0``, ``64*s0``).

torch.export writes them as sympy's ``srepr`` (``Mul(Integer(64), Symbol('s0', integer=True))``), ExecuTorch
as sympy's ``str`` (``64*s0``) and looks a bare symbol's bounds up by that text, so ExecuTorch's form is the
one written. Both deserializers turn the text back into sympy with ``sympify``, which evaluates it as
Python: :func:`check` first admits only the arithmetic of shapes (numbers, symbol names, sympy's and
torch's symbolic functions with keyword assumptions, operators), and powers and shifts only by a small
literal exponent, so that no file can run code or ask for a number with billions of digits.
May import torch and sympy.
"""

from __future__ import annotations

import functools
import re

import sympy
import torch.utils._sympy.functions as torch_sympy_functions

__all__ = ["check", "to_executorch_form"]

# torch's own symbolic functions (FloorDiv, CeilDiv, Mod, PowByNatural, ...), as its deserializer names them.
_TORCH_FUNCTIONS = {
    name: f for name, f in vars(torch_sympy_functions).items() if isinstance(f, type) and issubclass(f, sympy.Basic)
}
_SYMPY_NAMES = {"Symbol", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Mod", "Max", "Min", "Abs"}
_SYMPY_NAMES |= {"floor", "ceiling", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Not", "Piecewise"}
_SYMPY_NAMES |= {"StrictLessThan", "StrictGreaterThan", "LessThan", "GreaterThan", "Equality", "Unequality"}
_SYMPY_NAMES |= {"ExprCondPair", "true", "false", "True", "False", "oo", "zoo", "nan", "int_oo"}
_ASSUMPTIONS = {"integer", "positive", "negative", "nonnegative", "nonpositive", "nonzero", "zero", "real"}
_ASSUMPTIONS |= {"finite", "infinite", "even", "odd", "rational", "commutative", "extended_real"}
_NAMES = _SYMPY_NAMES | _ASSUMPTIONS | set(_TORCH_FUNCTIONS)
_SYMBOL = re.compile(r"[a-z]+\d+")  # torch's symbol names: s0, u3, zuf0, ...
# A number, a name, a quoted symbol name, or an operator.
_TOKEN = re.compile(
    r"\s*(?:(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|([A-Za-z_]\w*)|'([^']*)'|(\*\*|//|[-+*/%(),=<>!]=?|[&|~]))"
)
_POWERS = {"Pow", "PowByNatural", "FloatPow", "LShift"}  # functions whose second argument is an exponent
MAX_LENGTH = 4096
MAX_DIGITS = 20
MAX_EXPONENT = 64


@functools.cache
def to_executorch_form(text: str) -> str:
    """torch.export's ``srepr`` text of an expression (our own serializer's output) as sympy's ``str``."""
    return str(sympy.sympify(text, locals=dict(_TORCH_FUNCTIONS)))


def check(text: str) -> None:
    """Raise ValueError unless ``text`` is a shape expression that is safe to give to ``sympify``."""
    tokens = _tokens(text)
    depth = 0
    for i, (number, name, quoted, op) in enumerate(tokens):
        depth += (op == "(") - (op == ")")
        if depth < 0:
            raise ValueError(f"expected balanced parentheses in {text[:80]!r}")
        if number is not None and len(number) > MAX_DIGITS:
            raise ValueError(f"expected numbers of at most {MAX_DIGITS} digits in {text[:80]!r}, found {number[:40]}")
        if name is not None and name not in _NAMES and not _SYMBOL.fullmatch(name):
            raise ValueError(f"expected a symbol name or a sympy/torch shape function in {text[:80]!r}, found {name!r}")
        if quoted is not None and not _SYMBOL.fullmatch(quoted):
            raise ValueError(f"expected a quoted symbol name such as 's0' in {text[:80]!r}, found {quoted!r}")
        if op == "**":
            _check_exponent(text, _operand(tokens, i + 1))
        if name in _POWERS:
            _check_exponent(text, _second_argument(tokens, i + 1))
    if depth != 0:
        raise ValueError(f"expected balanced parentheses in {text[:80]!r}")


def _tokens(text: str) -> list[tuple]:
    if len(text) > MAX_LENGTH:
        raise ValueError(f"expected a shape expression of at most {MAX_LENGTH} characters, found {len(text)}")
    tokens, at, text = [], 0, text.rstrip()
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            raise ValueError(f"expected a shape expression, found {text[at : at + 20]!r} in {text[:80]!r}")
        tokens.append(match.groups())
        at = match.end()
    return tokens


def _operand(tokens: list[tuple], start: int) -> list[tuple]:
    """The tokens of a literal exponent after ``**``: a number, possibly negative (anything longer fails)."""
    end = start + 1 if start < len(tokens) and tokens[start][3] != "-" else start + 2
    return tokens[start:end]


def _second_argument(tokens: list[tuple], start: int) -> list[tuple]:
    """The tokens of the second argument of the call whose ``(`` is at ``start``."""
    depth, comma = 0, None
    for i in range(start, len(tokens)):
        op = tokens[i][3]
        depth += op == "("
        depth -= op == ")"
        if op == "," and depth == 1 and comma is None:
            comma = i
        if depth == 0 or (op == "," and depth == 1 and comma != i):
            return tokens[comma + 1 : i] if comma is not None else []
    return tokens[comma + 1 :] if comma is not None else []


def _check_exponent(text: str, tokens: list[tuple]) -> None:
    """An exponent must be a literal integer (``2``, ``-1``, ``Integer(2)``) of at most MAX_EXPONENT."""
    words = [next(t for t in token if t is not None) for token in tokens]
    if words[:2] == ["Integer", "("] and words[-1:] == [")"]:
        words = words[2:-1]
    if words[:1] == ["-"]:
        words = words[1:]
    if len(words) != 1 or not words[0].isdigit() or int(words[0]) > MAX_EXPONENT:
        raise ValueError(
            f"expected a literal integer exponent of at most {MAX_EXPONENT} in {text[:80]!r}, found {''.join(words)!r}"
        )
