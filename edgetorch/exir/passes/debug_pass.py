"""``DebugPass``: log a graph module's code, each node (with its tensor specs), its source lines and op counts.

Everything goes to the root logger at DEBUG level, which the pass enables while it runs; with
``log_filename`` the same lines are also written to that file (replacing it). The graph is not
changed. May import torch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterator

import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.exir.tensor import spec_leaves

__all__ = ["DebugPass"]


@contextlib.contextmanager
def _debug_logging(filename: str | None) -> Iterator[None]:
    """Root logger at DEBUG with bare messages, also to ``filename`` if given; restored afterwards."""
    root = logging.getLogger()
    level, formats = root.level, [h.formatter for h in root.handlers]
    bare = logging.Formatter("%(message)s")
    extra = logging.FileHandler(filename, mode="w") if filename else None
    root.setLevel(logging.DEBUG)
    for handler in root.handlers:
        handler.setFormatter(bare)
    if extra is not None:
        extra.setFormatter(bare)
        root.addHandler(extra)
    try:
        yield
    finally:
        if extra is not None:
            root.removeHandler(extra)
            extra.close()
        for handler, fmt in zip(root.handlers, formats):
            handler.setFormatter(fmt)
        root.setLevel(level)


class DebugPass(PassBase):
    """Log the graph for debugging (see the module docstring); ``enable_debug_pass=False`` makes it a no-op.

    ``show_spec`` adds each node's TensorSpecs and fake value; ``show_src`` the source frame(s) that
    produced each node (``show_all_frames``: every frame, not only the last; ``show_full_path``: full file
    names; ``path_filter``: only frames whose file matches this regular expression).
    """

    def __init__(
        self,
        msg: str = "",
        enable_debug_pass: bool = True,
        show_src: bool = False,
        show_full_path: bool = False,
        show_all_frames: bool = False,
        path_filter: str | None = None,
        show_spec: bool = False,
        log_filename: str | None = None,
    ) -> None:
        self.msg = msg
        self.enable_debug_pass = enable_debug_pass
        self.show_src = show_src
        self.show_full_path = show_full_path
        self.show_all_frames = show_all_frames
        self.path_filter_re = re.compile(path_filter) if path_filter else None
        self.show_spec = show_spec
        self.log_filename = log_filename

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        if not self.enable_debug_pass:
            return PassResult(graph_module, False)
        with _debug_logging(self.log_filename):
            for line in self.lines(graph_module):
                logging.debug(line)
        return PassResult(graph_module, False)

    def lines(self, graph_module: torch.fx.GraphModule) -> Iterator[str]:
        """The report, line by line."""
        if self.msg:
            yield self.msg
        graph_module.recompile()
        yield f"Code is:\n{graph_module.code}"
        yield "Nodes:"
        kinds: Counter[str] = Counter()
        calls: Counter[str] = Counter()
        for i, node in enumerate(graph_module.graph.nodes):
            yield f"{i:4}: {node.format_node()}"
            if self.show_spec:
                for spec in spec_leaves(node.meta.get("spec")):
                    yield f"      {spec.debug()}"
                yield f"      val: {node.meta.get('val')}"
            if self.show_src:
                yield from self._frames(node)
            kinds[node.op] += 1
            if node.op == "call_function":
                calls[str(node.target)] += 1
        yield "-- node op type stat --"
        yield from (f" op {op}, cnt {n}" for op, n in kinds.items())
        yield "-- call_function stat --"
        yield from (f" fn {fn}, cnt {n}" for fn, n in calls.items())

    def _frames(self, node: torch.fx.Node) -> Iterator[str]:
        trace = node.meta.get("stack_trace")
        if not trace:
            return
        try:
            frames = json.loads(trace)  # older tracers stored a list of frame dicts
        except json.JSONDecodeError:
            yield trace  # torch.export's free-form "File ..., line ..." text
            return
        rows = []
        for frame in frames:
            filename = frame["filename"] if self.show_full_path else os.path.basename(frame["filename"])
            if self.path_filter_re is None or self.path_filter_re.search(filename):
                rows.append(f"      > {filename}:{frame['lineno']} in {frame['name']}: {frame['line']}")
        yield from (rows if self.show_all_frames else rows[-1:])
