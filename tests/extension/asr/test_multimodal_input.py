"""ExecuTorch's multimodal input constructors: the layouts they accept and the errors for the rest."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.runner import (
    make_audio_input,
    make_image_input,
    make_raw_audio_input,
    make_text_input,
    make_token_input,
)


@pytest.mark.parametrize("shape", [(4, 5, 3), (1, 4, 5, 3), (3, 4, 5), (1, 3, 4, 5)])
def test_image_layouts_become_channels_first(shape):
    pixels = np.arange(60, dtype=np.uint8).reshape(shape)
    image = make_image_input(pixels).get_image()
    assert (image.channels, image.height, image.width) == (3, 4, 5) and image.is_uint8()
    hwc = pixels.reshape(shape[-3:]) if shape[-1] == 3 else pixels.reshape(shape[-3:]).transpose(1, 2, 0)
    assert np.array_equal(image.data.transpose(1, 2, 0), hwc)


def test_inputs_say_what_they_hold():
    text, tokens = make_text_input("hi"), make_token_input(np.array([[1, 2]]))
    assert text.is_text() and text.get_text() == "hi" and text.get_audio() is None
    assert tokens.is_tokens() and tokens.get_tokens() == [1, 2]
    raw = make_raw_audio_input(np.zeros(8, np.float32), 8000).get_raw_audio()
    assert (raw.batch_size, raw.n_channels, raw.n_samples, raw.sample_rate) == (1, 1, 8, 8000)
    audio = make_audio_input(np.zeros((1, 80, 3000), np.float32)).get_audio()
    assert (audio.batch_size, audio.n_bins, audio.n_frames) == (1, 80, 3000)


@pytest.mark.parametrize(
    "make, value",
    [
        (make_image_input, np.zeros((4, 5), np.uint8)),
        (make_image_input, np.zeros((2, 4, 5, 3), np.uint8)),
        (make_audio_input, np.zeros((80, 3000), np.float32)),
        (make_audio_input, np.zeros((1, 80, 3000), np.int16)),
        (make_raw_audio_input, np.zeros((1, 1, 0), np.float32)),
    ],
    ids=["image-2d", "image-batch", "audio-2d", "audio-int", "raw-empty"],
)
def test_wrong_shapes_are_refused(make, value):
    with pytest.raises(InvalidInputError, match="expected"):
        make(value)
