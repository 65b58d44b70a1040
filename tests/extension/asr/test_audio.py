"""The speech runner's torch-free front end: WAV reading, resampling, Whisper's log-mel features, the
CTranslate2 reader, and the word error rate, against transformers and hand-made files."""

from __future__ import annotations

import struct
import wave
from pathlib import Path

import numpy as np
import pytest

from edgetorch.errors import InvalidInputError, ProgramLoadError
from edgetorch.extension.asr.audio import log_mel_spectrogram, mel_filter_bank, read_wav, resample
from edgetorch.extension.asr.ctranslate2 import read_model_bin
from edgetorch.extension.asr.metrics import word_error_rate


def wav_bytes(samples: bytes, *, tag: int = 1, channels: int = 1, rate: int = 16000, bits: int = 16) -> bytes:
    """A RIFF/WAVE file holding ``samples`` with the given format fields."""
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(samples)) + samples
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_features_equal_transformers_feature_extractor(speech):
    from transformers import WhisperFeatureExtractor

    wave_, rate = read_wav(speech)
    noise = np.random.default_rng(0).standard_normal(16000 * 3).astype(np.float32) * 0.1
    extractor = WhisperFeatureExtractor(feature_size=80)
    for audio in (resample(wave_, rate), noise):
        expected = extractor(audio, sampling_rate=16000, return_tensors="np").input_features
        ours = log_mel_spectrogram(audio)
        assert ours.shape == expected.shape == (1, 80, 3000)
        np.testing.assert_allclose(ours, expected, atol=1e-4)


def test_mel_filter_bank_equals_transformers():
    from transformers.audio_utils import mel_filter_bank as reference

    expected = reference(
        num_frequency_bins=201,
        num_mel_filters=80,
        min_frequency=0.0,
        max_frequency=8000.0,
        sampling_rate=16000,
        norm="slaney",
        mel_scale="slaney",
    )
    np.testing.assert_allclose(mel_filter_bank(80), expected, rtol=1e-6, atol=1e-12)


def test_resample_keeps_a_tone_and_its_loudness():
    t = np.arange(22050 * 2) / 22050
    tone = (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    out = resample(tone, 22050)
    assert len(out) == 32000
    spectrum = np.abs(np.fft.rfft(out))
    assert np.argmax(spectrum) * 16000 / len(out) == pytest.approx(440.0, abs=1.0)
    assert np.sqrt(np.mean(out[1000:-1000] ** 2)) == pytest.approx(0.5 / np.sqrt(2), rel=1e-2)


@pytest.mark.parametrize("bits", [8, 16, 24, 32])
def test_read_wav_integer_pcm(tmp_path, bits):
    values = np.array([0.0, 0.5, -0.5, 0.25, -1.0])
    if bits == 8:
        raw = (values * 128 + 128).clip(0, 255).astype(np.uint8).tobytes()
    else:
        ints = (values * 2 ** (bits - 1)).astype(np.int64).clip(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        raw = b"".join(int(v).to_bytes(bits // 8, "little", signed=True) for v in ints)
    path = tmp_path / "pcm.wav"
    with wave.open(str(path), "wb") as w:  # the standard library's writer as the format oracle
        w.setnchannels(1)
        w.setsampwidth(bits // 8)
        w.setframerate(8000)
        w.writeframes(raw)
    samples, rate = read_wav(path)
    assert rate == 8000
    np.testing.assert_allclose(samples, values, atol=2.0 ** (1 - bits) * 2)


def test_read_wav_float_stereo_is_averaged():
    stereo = np.array([[0.5, -0.5], [0.25, 0.75], [1.0, 0.0]], np.float32)
    samples, rate = read_wav(wav_bytes(stereo.tobytes(), tag=3, channels=2, rate=44100, bits=32))
    assert rate == 44100
    np.testing.assert_allclose(samples, stereo.mean(1))


@pytest.mark.parametrize(
    "data, found",
    [
        (b"ID3\x04 this is an mp3 file, not a wav", "a file starting with"),
        (wav_bytes(b""), "no samples"),
        (wav_bytes(b"\0" * 16000 * 2 * 31), "31.0 s of audio"),
        (wav_bytes(b"\x55" * 100, tag=6, bits=8), "format tag 0x0006"),
        (wav_bytes(b"\0" * 100, bits=12), "integer PCM samples of 12 bits"),
        (b"RIFF\x04\x00\x00\x00WAVE" + b"data\x04\x00\x00\x00abcd", "no 'fmt ' chunk"),
    ],
    ids=["not-riff", "empty", "too-long", "a-law", "12-bit", "no-fmt"],
)
def test_bad_audio_is_refused_with_what_to_do(data, found):
    with pytest.raises(InvalidInputError) as info:
        read_wav(data)
    assert found in str(info.value) and "expected" in str(info.value)


def test_ctranslate2_reader_refuses_damaged_files(tmp_path, checkpoint):
    model = read_model_bin(checkpoint / "model.bin")
    assert model.spec == "WhisperSpec"
    assert model.variables["decoder/projection/weight"] is model.variables["decoder/embeddings/weight"]
    head = (checkpoint / "model.bin").read_bytes()[:4096]
    (tmp_path / "cut.bin").write_bytes(head)
    with pytest.raises(ProgramLoadError, match="truncated"):
        read_model_bin(tmp_path / "cut.bin")
    (tmp_path / "old.bin").write_bytes(struct.pack("<I", 2) + head[4:])
    with pytest.raises(ProgramLoadError, match="binary version 2"):
        read_model_bin(tmp_path / "old.bin")


def test_word_error_rate():
    assert word_error_rate("Hello, world!", "hello world") == 0.0
    assert word_error_rate("a b c d", "a x c") == pytest.approx(0.5)  # one substitution, one deletion
    assert word_error_rate("it's ten", "it's ten o'clock") == pytest.approx(0.5)  # one insertion


def test_raw_bytes_and_path_read_the_same(speech: Path):
    a, rate_a = read_wav(speech)
    b, rate_b = read_wav(speech.read_bytes())
    assert rate_a == rate_b == 22050 and np.array_equal(a, b)
