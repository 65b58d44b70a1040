"""Speech in, Whisper's features out: WAV reading, resampling to 16 kHz and the log-mel spectrogram. NumPy only.

The features are Whisper's: the waveform padded with silence (or cut) to 30 s, a short-time Fourier
transform (400-sample periodic Hann window, hop 160, reflect-padded at both ends), the power spectrum
through a Slaney-normalised mel filter bank, ``log10`` clamped at 1e-10, values kept within 8 of the
largest, then ``(x + 4) / 4``: what transformers' ``WhisperFeatureExtractor`` computes.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from edgetorch.errors import InvalidInputError

__all__ = [
    "CHUNK_SECONDS",
    "SAMPLE_RATE",
    "log_mel_spectrogram",
    "mel_filter_bank",
    "read_wav",
    "resample",
]

SAMPLE_RATE = 16000
CHUNK_SECONDS = 30
N_FFT = 400
HOP_LENGTH = 160

_PCM, _FLOAT, _EXTENSIBLE = 0x0001, 0x0003, 0xFFFE


def _wav_error(path: str, found: str, todo: str = "convert it with `sox IN.wav -b 16 OUT.wav`") -> InvalidInputError:
    return InvalidInputError(f"{path}: expected a RIFF/WAVE file of PCM or float samples, found {found}; {todo}")


def read_wav(source: str | Path | bytes, max_seconds: float = CHUNK_SECONDS) -> tuple[np.ndarray, int]:
    """The samples of a WAV file (a path or its bytes) as float32 in [-1, 1], channels averaged to mono, and
    the file's sample rate.

    Takes integer PCM of 8, 16, 24 or 32 bits and IEEE float of 32 or 64 bits (plain or
    WAVE_FORMAT_EXTENSIBLE headers). Refuses, with an :class:`~edgetorch.errors.InvalidInputError` saying
    what was found, anything else, a file with no samples, or one longer than ``max_seconds``.
    """
    name = "the audio" if isinstance(source, bytes) else str(source)
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise _wav_error(name, f"a file starting with {bytes(data[:12])!r}", "pass a .wav file")
    fmt: tuple[int, int, int, int] | None = None
    samples: bytes | None = None
    offset = 12
    while offset + 8 <= len(data):
        chunk, size = data[offset : offset + 4], struct.unpack_from("<I", data, offset + 4)[0]
        body = data[offset + 8 : offset + 8 + size]
        if chunk == b"fmt ":
            if len(body) < 16:
                raise _wav_error(name, f"a 'fmt ' chunk of {len(body)} bytes (16 at least)", "the file is corrupt")
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", body)
            if tag == _EXTENSIBLE and len(body) >= 26:
                tag = struct.unpack_from("<H", body, 24)[0]  # the sub-format GUID's first two bytes
            fmt = (tag, channels, rate, bits)
        elif chunk == b"data":
            samples = body
        offset += 8 + size + (size & 1)  # chunks are padded to an even length
    if fmt is None or samples is None:
        raise _wav_error(name, "no 'fmt ' chunk" if fmt is None else "no 'data' chunk", "the file is corrupt")
    tag, channels, rate, bits = fmt
    if channels < 1 or rate < 1:
        raise _wav_error(name, f"{channels} channels at {rate} Hz", "the file is corrupt")
    if tag == _PCM and bits in (8, 16, 24, 32):
        wave = _pcm(samples, bits)
    elif tag == _FLOAT and bits in (32, 64):
        whole = len(samples) // (bits // 8) * (bits // 8)
        wave = np.frombuffer(samples[:whole], "<f4" if bits == 32 else "<f8").astype(np.float32)
    else:
        kind = {_PCM: "integer PCM", _FLOAT: "float"}.get(tag, f"format tag 0x{tag:04x}")
        raise _wav_error(name, f"{kind} samples of {bits} bits")
    frames = len(wave) // channels
    if frames == 0:
        raise InvalidInputError(f"{name}: the WAV file holds no samples; expected some speech, record it again")
    seconds = frames / rate
    if seconds > max_seconds:
        raise InvalidInputError(
            f"{name}: {seconds:.1f} s of audio; expected at most {max_seconds:g} s (Whisper hears 30 s at a time): "
            f"cut it into shorter files, e.g. `sox IN.wav OUT.wav trim 0 {max_seconds:g} : newfile : restart`"
        )
    return wave[: frames * channels].reshape(frames, channels).mean(axis=1, dtype=np.float32), rate


def _pcm(raw: bytes, bits: int) -> np.ndarray:
    """Integer PCM (8-bit unsigned, else signed little-endian) scaled to [-1, 1)."""
    width = bits // 8
    raw = raw[: len(raw) // width * width]
    if bits == 8:
        return (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    if bits == 24:  # widen each 3-byte sample to 4 bytes, the sign coming from the top byte
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        value = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        return (np.where(value >= 1 << 23, value - (1 << 24), value) / float(1 << 23)).astype(np.float32)
    return (np.frombuffer(raw, f"<i{width}").astype(np.float64) / float(1 << (bits - 1))).astype(np.float32)


def resample(wave: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    """``wave`` sampled at ``rate`` Hz, resampled to ``target`` Hz by band-limited (Fourier) interpolation:
    the spectrum cut (or zero-padded) at the lower Nyquist frequency."""
    if rate == target:
        return np.asarray(wave, np.float32)
    n_in = len(wave)
    n_out = max(1, round(n_in * target / rate))
    spectrum = np.fft.rfft(np.asarray(wave, np.float64))
    keep = min(len(spectrum), n_out // 2 + 1)
    out = np.fft.irfft(spectrum[:keep], n_out) * (n_out / n_in)
    return out.astype(np.float32)


def _hz_to_mel(hz: float | np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    hz = np.asarray(hz, np.float64)
    log_part = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) * (27.0 / np.log(6.4))
    return np.where(hz >= 1000.0, log_part, 3.0 * hz / 200.0)


def _mel_to_hz(mel: float | np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, np.float64)
    return np.where(mel >= 15.0, 1000.0 * np.exp(np.log(6.4) * (mel - 15.0) / 27.0), 200.0 * mel / 3.0)


def mel_filter_bank(n_mels: int = 80, n_fft: int = N_FFT, rate: int = SAMPLE_RATE) -> np.ndarray:
    """The ``[n_fft // 2 + 1, n_mels]`` triangular filters from 0 Hz to ``rate / 2`` on Slaney's mel scale, each
    scaled by 2 / its width in Hz (Slaney's area normalisation)."""
    fft_hz = np.linspace(0.0, rate / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(rate / 2), n_mels + 2))
    width = np.diff(edges)
    offsets = edges[None, :] - fft_hz[:, None]
    rising = -offsets[:, :-2] / width[:-1]
    falling = offsets[:, 2:] / width[1:]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    return filters * (2.0 / (edges[2:] - edges[:-2]))


def log_mel_spectrogram(wave: np.ndarray, n_mels: int = 80) -> np.ndarray:
    """Whisper's ``[1, n_mels, 3000]`` float32 input features of a 16 kHz waveform (at most 30 s)."""
    n_samples = CHUNK_SECONDS * SAMPLE_RATE
    audio = np.zeros(n_samples, np.float64)
    clip = np.asarray(wave, np.float64)[:n_samples]
    audio[: len(clip)] = clip
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    mel = power[:-1] @ mel_filter_bank(n_mels)  # the last frame is dropped, as Whisper does
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return np.ascontiguousarray(((log_spec + 4.0) / 4.0).T[None], np.float32)
