"""Whisper tiny.en end to end: exported by edgetorch (portable, XNNPACK, XNNPACK with 8-bit weights), run by the
torch-free speech runner on espeak-ng speech, against transformers' model with the same weights.

fp32 programs give the reference's greedy transcript token for token; the int8 one stays within a loose word
error rate of the spoken text. The runner and ``edgetorch asr run`` work with torch blocked from import.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from edgetorch.errors import InvalidInputError
from edgetorch.extension.asr.metrics import word_error_rate
from edgetorch.extension.asr.runner import AsrRunner
from tests.extension.asr.conftest import SPOKEN
from tests.runtime.test_torch_free import BLOCKER

ROOT = Path(__file__).resolve().parents[3]
PROGRAMS = {"portable": ("portable", "none"), "xnnpack": ("xnnpack", "none"), "xnnpack-int8": ("xnnpack", "int8")}
INT8_WER_MARGIN = 0.25  # the int8 transcript's WER may exceed the reference's by this much


class Whisper:
    """The reference model's answers on the test speech, and edgetorch's programs as files (each made when a test
    first asks for it: the portable and int8 ones only serve slow tests)."""

    def __init__(self, checkpoint: Path, speech: Path, folder: Path) -> None:
        from edgetorch.extension.asr.whisper import load_whisper, reference_greedy, whisper_metadata

        self.checkpoint = checkpoint
        model = load_whisper(checkpoint)
        self.runner = AsrRunner(folder / "unused.pte", checkpoint / "tokenizer.json")
        self.mel = self.runner.features(speech)
        self.metadata = whisper_metadata(model, checkpoint)
        self.reference_ids = reference_greedy(model, self.mel, self.metadata)
        self.reference_text = self.runner.tokenizer.decode(self.reference_ids).strip()
        with torch.no_grad():
            self.encoder_out = model.model.encoder(torch.from_numpy(self.mel)).last_hidden_state.numpy()
        self.model, self.folder = model, folder
        self._exported: dict | None = None
        self._paths: dict[str, Path] = {}
        self._runners: dict[str, AsrRunner] = {}

    def path(self, name: str) -> Path:
        """The file of program ``name`` (a key of ``PROGRAMS``), lowered on first use. The float programs share
        one export (lowering leaves an exported program as it was); the int8 one goes through export_whisper, as
        `edgetorch asr export` does."""
        if name not in self._paths:
            from edgetorch.extension.asr.whisper import export_whisper, whisper_programs
            from edgetorch.extension.llm.export.exporter import lower_to_pte

            backend, quantize = PROGRAMS[name]
            path = self.folder / f"whisper_{name}.pte"
            if quantize == "none":
                if self._exported is None:
                    self._exported = whisper_programs(self.model)
                lower_to_pte(self._exported, backend, self.metadata, path)
            else:
                export_whisper(self.checkpoint, path, backend=backend, quantize=quantize)
            self._paths[name] = path
        return self._paths[name]

    def runner_for(self, name: str) -> AsrRunner:
        """The loaded runner of program ``name`` (one per program: loading costs a second or more)."""
        if name not in self._runners:
            self._runners[name] = AsrRunner(self.path(name), self.checkpoint / "tokenizer.json")
            self._runners[name].load()
        return self._runners[name]


@pytest.fixture(scope="module")
def whisper(checkpoint, speech, tmp_path_factory) -> Whisper:
    return Whisper(checkpoint, speech, tmp_path_factory.mktemp("whisper"))


def test_reference_transcribes_the_speech(whisper):
    wer = word_error_rate(SPOKEN, whisper.reference_text)
    print(f"\nreference: {whisper.reference_text!r} (WER {wer:.2f})")
    assert wer < 0.3, whisper.reference_text


# The portable and int8 programs are slow tests: each is a lowering of its own (~10 s), and the portable path and
# 8-bit quantization are covered on smaller models in the default suite.
@pytest.mark.parametrize("name", [pytest.param("portable", marks=pytest.mark.slow), "xnnpack"])
def test_fp32_transcript_equals_the_reference(whisper, speech, name):
    runner = whisper.runner_for(name)
    text = runner.transcribe(speech)
    (hidden,) = runner.methods["audio_encoder"].execute([whisper.mel])
    np.testing.assert_allclose(hidden, whisper.encoder_out, atol=2e-3)
    assert text == whisper.reference_text
    stats = runner.stats
    assert stats.num_generated_tokens == len(whisper.reference_ids) and stats.real_time_factor > 0


@pytest.mark.slow
def test_int8_transcript_is_close(whisper, speech):
    text = whisper.runner_for("xnnpack-int8").transcribe(speech)
    wer, reference_wer = word_error_rate(SPOKEN, text), word_error_rate(SPOKEN, whisper.reference_text)
    print(f"\nint8: {text!r} (WER {wer:.2f}; fp32 reference {reference_wer:.2f})")
    assert wer <= reference_wer + INT8_WER_MARGIN, text


def test_bad_audio_through_the_runner(whisper, tmp_path):
    runner = whisper.runner_for("xnnpack")
    (tmp_path / "notes.wav").write_text("not audio at all")
    with pytest.raises(InvalidInputError, match="RIFF/WAVE"):
        runner.transcribe(tmp_path / "notes.wav")
    with pytest.raises(InvalidInputError, match="no samples"):
        runner.transcribe(np.zeros(0, np.float32))


def test_asr_run_with_torch_blocked(whisper, speech):
    script = BLOCKER + textwrap.dedent(
        f"""
        from edgetorch.cli import main
        code = main(["asr", "run", {str(whisper.path("xnnpack"))!r}, "--audio", {str(speech)!r},
                     "--tokenizer", {str(whisper.checkpoint / "tokenizer.json")!r}])
        assert not any(m.split(".")[0] in ("torch", "executorch") for m in sys.modules), "torch was imported"
        sys.exit(code)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == whisper.reference_text
    assert "Real-time factor" in result.stderr and "tokens/second" in result.stderr


def test_asr_export_without_a_model_folder_says_what_to_do(tmp_path, capsys):
    from edgetorch.cli import main

    assert main(["asr", "export", "--checkpoint", str(tmp_path), "--output", str(tmp_path / "w.pte")]) == 1
    assert "holds no model.bin" in capsys.readouterr().err


def test_multimodal_runner_transcribes_raw_audio_and_features(whisper, speech):
    from edgetorch.extension.asr.audio import read_wav
    from edgetorch.extension.llm.runner import (
        GenerationConfig,
        MultimodalRunner,
        make_audio_input,
        make_raw_audio_input,
        make_token_input,
    )

    runner = MultimodalRunner(whisper.path("xnnpack"), whisper.checkpoint / "tokenizer.json")
    samples, rate = read_wav(speech)
    pieces, seen = [], []
    runner.generate([make_raw_audio_input(samples, rate)], GenerationConfig(), pieces.append, seen.append)
    assert "".join(pieces).strip() == whisper.reference_text
    assert seen[0].num_generated_tokens == len(whisper.reference_ids) and seen[0].first_token_ms > 0
    prompt = make_token_input(whisper.metadata["get_decoder_start_ids"])
    three = runner.generate_text([make_audio_input(whisper.mel), prompt], GenerationConfig(max_new_tokens=3))
    assert three == whisper.runner.tokenizer.decode(whisper.reference_ids[:3])
    with pytest.raises(InvalidInputError, match="one audio input"):
        runner.generate_text([make_raw_audio_input(samples, rate), make_raw_audio_input(samples, rate)])


def test_both_ways_with_executorch(whisper):
    """ExecuTorch 1.5.1's runtime (in a subprocess) runs edgetorch's XNNPACK program: the encoder and two decoder
    steps (its KV cache carried over) agree with edgetorch's runtime; and edgetorch's runtime runs ExecuTorch's
    own lowering of the same encoder."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from edgetorch.extension.asr.whisper import AudioEncoder, load_whisper
    from edgetorch.runtime import Runtime
    from tests.oracle import run_executorch_calls

    pte = whisper.path("xnnpack").read_bytes()
    runner = whisper.runner_for("xnnpack")
    (hidden,) = runner.methods["audio_encoder"].execute([whisper.mel])
    ((theirs,),) = run_executorch_calls(pte, [[whisper.mel]], method="audio_encoder")
    np.testing.assert_allclose(theirs, hidden, atol=1e-3)
    cross = runner.methods["cross_kv"].execute([hidden])
    start = whisper.metadata["get_decoder_start_ids"]
    calls = [[np.array([[token]]), np.array([pos]), *cross] for pos, token in enumerate(start)]
    ours = [runner.methods["text_decoder"].execute(call)[0] for call in calls]
    for (their_logits,), our_logits in zip(run_executorch_calls(pte, calls, method="text_decoder"), ours):
        np.testing.assert_allclose(their_logits, our_logits, atol=1e-3)

    encoder = AudioEncoder(load_whisper(whisper.checkpoint))
    with torch.no_grad():
        exported = torch.export.export(encoder, (torch.from_numpy(whisper.mel),), strict=False)
    theirs_pte = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    (from_theirs,) = Runtime.get().load_program(theirs_pte).load_method("forward").execute([whisper.mel])
    np.testing.assert_allclose(from_theirs, whisper.encoder_out, atol=2e-3)
