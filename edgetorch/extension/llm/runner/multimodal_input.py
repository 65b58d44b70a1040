"""ExecuTorch's multimodal inputs: ``Image``, ``Audio``, ``RawAudio``, ``MultimodalInput`` and its ``make_*_input``
constructors. NumPy only; the constructors take arrays or anything with ``__array__`` (a torch tensor too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgetorch.errors import InvalidInputError

__all__ = [
    "Audio",
    "Image",
    "MultimodalInput",
    "RawAudio",
    "make_audio_input",
    "make_image_input",
    "make_raw_audio_input",
    "make_text_input",
    "make_token_input",
]


@dataclass
class Image:
    """An image as ``[channels, height, width]`` pixels, uint8 or float32."""

    data: np.ndarray

    @property
    def channels(self) -> int:
        return int(self.data.shape[0])

    @property
    def height(self) -> int:
        return int(self.data.shape[1])

    @property
    def width(self) -> int:
        return int(self.data.shape[2])

    def is_uint8(self) -> bool:
        return self.data.dtype == np.uint8

    def is_float(self) -> bool:
        return self.data.dtype == np.float32

    @property
    def uint8_data(self) -> list[int]:
        return self.data.reshape(-1).tolist() if self.is_uint8() else []

    @property
    def float_data(self) -> list[float]:
        return self.data.reshape(-1).tolist() if self.is_float() else []


@dataclass
class Audio:
    """Preprocessed audio (a spectrogram such as Whisper's log-mel features): ``[batch, n_bins, n_frames]``."""

    data: np.ndarray

    @property
    def batch_size(self) -> int:
        return int(self.data.shape[0])

    @property
    def n_bins(self) -> int:
        return int(self.data.shape[1])

    @property
    def n_frames(self) -> int:
        return int(self.data.shape[2])


@dataclass
class RawAudio:
    """Waveform samples ``[batch, n_channels, n_samples]`` at ``sample_rate`` Hz (16 kHz unless told)."""

    data: np.ndarray
    sample_rate: int = 16000

    @property
    def batch_size(self) -> int:
        return int(self.data.shape[0])

    @property
    def n_channels(self) -> int:
        return int(self.data.shape[1])

    @property
    def n_samples(self) -> int:
        return int(self.data.shape[2])


class MultimodalInput:
    """One piece of a multimodal prompt: text, token ids, an image, audio features or raw audio."""

    def __init__(self, value: str | list[int] | Image | Audio | RawAudio) -> None:
        if not isinstance(value, (str, list, Image, Audio, RawAudio)):
            raise InvalidInputError(
                f"a MultimodalInput holds text, token ids, an Image, Audio or RawAudio; found {type(value).__name__}"
            )
        self.value = value

    def is_text(self) -> bool:
        return isinstance(self.value, str)

    def is_tokens(self) -> bool:
        return isinstance(self.value, list)

    def is_image(self) -> bool:
        return isinstance(self.value, Image)

    def is_audio(self) -> bool:
        return isinstance(self.value, Audio)

    def is_raw_audio(self) -> bool:
        return isinstance(self.value, RawAudio)

    def get_text(self) -> str | None:
        return self.value if isinstance(self.value, str) else None

    def get_tokens(self) -> list[int] | None:
        return self.value if isinstance(self.value, list) else None

    def get_image(self) -> Image | None:
        return self.value if isinstance(self.value, Image) else None

    def get_audio(self) -> Audio | None:
        return self.value if isinstance(self.value, Audio) else None

    def get_raw_audio(self) -> RawAudio | None:
        return self.value if isinstance(self.value, RawAudio) else None

    def __repr__(self) -> str:
        kind = type(self.value).__name__
        return f"MultimodalInput({self.value!r})" if self.is_text() else f"MultimodalInput(<{kind}>)"


def _array(value: Any, what: str) -> np.ndarray:
    try:
        return np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as e:
        raise InvalidInputError(f"{what} must be an array or tensor; found {type(value).__name__} ({e})") from None


def make_text_input(text: str) -> MultimodalInput:
    return MultimodalInput(str(text))


def make_token_input(tokens: Any) -> MultimodalInput:
    """Token ids given as they are, not through the tokenizer."""
    return MultimodalInput([int(t) for t in np.asarray(tokens).reshape(-1)])


def make_image_input(image: Any) -> MultimodalInput:
    """An image from ``[H, W, C]``, ``[1, H, W, C]``, ``[C, H, W]`` or ``[1, C, H, W]`` (C of 1, 3 or 4) pixels; a
    last dimension of 1, 3 or 4 is read as the channels."""
    data = _array(image, "the image")
    if data.ndim == 4 and data.shape[0] == 1:
        data = data[0]
    if data.ndim != 3 or (data.shape[0] not in (1, 3, 4) and data.shape[-1] not in (1, 3, 4)):
        raise InvalidInputError(
            f"expected an image of shape [H, W, C], [C, H, W] or with a leading 1, C of 1, 3 or 4; found "
            f"{list(np.shape(image))}"
        )
    if data.shape[-1] in (1, 3, 4):
        data = data.transpose(2, 0, 1)
    dtype = np.uint8 if data.dtype == np.uint8 else np.float32
    return MultimodalInput(Image(np.ascontiguousarray(data, dtype)))


def make_audio_input(features: Any) -> MultimodalInput:
    """Preprocessed audio ``[batch, n_bins, n_frames]`` (float)."""
    data = _array(features, "the audio features")
    if data.ndim != 3 or not np.issubdtype(data.dtype, np.floating):
        raise InvalidInputError(
            f"expected audio features of shape [batch, n_bins, n_frames] and a float dtype; found shape "
            f"{list(data.shape)}, dtype {data.dtype}"
        )
    return MultimodalInput(Audio(np.ascontiguousarray(data, np.float32)))


def make_raw_audio_input(samples: Any, sample_rate: int = 16000) -> MultimodalInput:
    """Raw audio ``[batch, n_channels, n_samples]`` (or ``[n_samples]`` for one mono clip) at ``sample_rate``."""
    data = _array(samples, "the raw audio")
    if data.ndim == 1:
        data = data[None, None]
    if data.ndim != 3 or data.shape[2] == 0 or not np.issubdtype(data.dtype, np.floating):
        raise InvalidInputError(
            f"expected raw audio of shape [batch, n_channels, n_samples] (samples > 0) and a float dtype; found "
            f"shape {list(data.shape)}, dtype {data.dtype}"
        )
    return MultimodalInput(RawAudio(np.ascontiguousarray(data, np.float32), int(sample_rate)))
