"""One TinyNet run per runtime, shared by the ETDump and Inspector tests (ExecuTorch's runtime starts slowly)."""

from __future__ import annotations

import pytest

from tests.devtools.helpers import lower_edgetorch, run_edgetorch, run_executorch
from tests.devtools.models import tinynet


@pytest.fixture(scope="session")
def traced(tmp_path_factory):
    """(model, args, program manager, ETRecord path, our ETDump+buffer, ExecuTorch's ETDump+buffer); 3 runs each.

    The ETRecord holds the representative inputs, so the numeric gap can be computed.
    """
    tmp = tmp_path_factory.mktemp("traced")
    model, args = tinynet()
    _, prog = lower_edgetorch(model, args, generate_etrecord=True)
    record = prog.get_etrecord()
    record.update_representative_inputs([list(args)])
    record.save(tmp / "etrecord.bin")
    ours = run_edgetorch(prog.buffer, args, tmp, runs=3)
    theirs = run_executorch(prog.buffer, args, tmp, runs=3)
    return model, args, prog, tmp / "etrecord.bin", ours, theirs
