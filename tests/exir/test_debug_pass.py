"""DebugPass: the report lists code, nodes with their specs, op counts; it changes nothing; it can be disabled."""

from __future__ import annotations

import torch

from edgetorch.exir import to_edge
from edgetorch.exir.passes import DebugPass, SpecPropPass


class _M(torch.nn.Module):
    def forward(self, x):
        return (x * 2).sum(0)


def test_report_and_log_file(tmp_path):
    gm = to_edge(torch.export.export(_M(), (torch.ones(3, 4),))).transform([SpecPropPass()])
    gm = gm.exported_program().graph_module
    code = gm.code
    log = tmp_path / "debug.log"
    result = DebugPass(msg="hello", show_spec=True, show_src=True, log_filename=str(log))(gm)
    assert not result.modified and gm.code == code
    text = log.read_text()
    assert text.startswith("hello\nCode is:")
    assert "TensorSpec(" in text and "shape=(3, 4)" in text and "allocated_memory=48" in text
    assert " fn aten.mul.Tensor, cnt 1" in text and " op placeholder, cnt 2" in text
    assert "x * 2" in text  # the source line of the nodes
    assert DebugPass(enable_debug_pass=False)(gm).modified is False


def test_frames_of_the_older_json_stack_trace_format():
    import json

    gm = torch.fx.symbolic_trace(_M())
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    frames = [
        {"filename": "/a/b/outer.py", "name": "f", "lineno": 1, "line": "f()"},
        {"filename": "/a/b/inner.py", "name": "g", "lineno": 2, "line": "x * 2"},
    ]
    node.meta["stack_trace"] = json.dumps(frames)
    last = list(DebugPass(show_src=True)._frames(node))
    assert last == ["      > inner.py:2 in g: x * 2"]
    every = list(DebugPass(show_src=True, show_all_frames=True, show_full_path=True, path_filter="outer")._frames(node))
    assert every == ["      > /a/b/outer.py:1 in f: f()"]
