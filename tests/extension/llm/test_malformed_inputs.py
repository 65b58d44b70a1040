"""A truncated or corrupt GGUF file or tokenizer.json is a typed error, never a struct.error or a bare Exception."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.errors import EdgetorchError
from edgetorch.extension.llm.runner.gguf_reader import GGUFFile
from edgetorch.extension.llm.runner.tokenizer import load_tokenizer

gguf = pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["<s>", "</s>", "a", "b", "ab"])
    writer.add_token_merges(["a b"])
    writer.add_tensor("token_embd.weight", np.arange(20, dtype=np.float32).reshape(5, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def test_the_intact_file_reads(tiny_gguf, tmp_path):
    path = tmp_path / "ok.gguf"
    path.write_bytes(tiny_gguf)
    assert "token_embd.weight" in GGUFFile(path).tensors


@pytest.mark.parametrize("cut", [0, 3, 8, 20, 40, 100, 200])
def test_a_truncated_gguf_is_a_typed_error(tiny_gguf, tmp_path, cut):
    path = tmp_path / "cut.gguf"
    path.write_bytes(tiny_gguf[:cut])
    with pytest.raises(EdgetorchError):
        GGUFFile(path)


def test_a_huge_string_length_is_a_typed_error(tiny_gguf, tmp_path):
    data = bytearray(tiny_gguf)
    data[24:32] = (2**62).to_bytes(8, "little")  # the first key's length
    path = tmp_path / "huge.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(EdgetorchError, match="past the end"):
        GGUFFile(path)


def test_a_malformed_tokenizer_json_is_a_typed_error(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text('{"version": "1.0", "model": {"type": ')
    with pytest.raises(EdgetorchError, match="not a valid Hugging Face tokenizer.json"):
        load_tokenizer(path)


def test_a_gguf_without_a_vocabulary_is_a_typed_error(tmp_path):
    path = tmp_path / "novocab.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")  # says BPE, but lists no tokens
    writer.add_tensor("token_embd.weight", np.zeros((2, 2), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(EdgetorchError, match="tokenizer.ggml.tokens"):
        load_tokenizer(path)


def test_a_gguf_merge_naming_an_unknown_token_is_a_typed_error(tmp_path):
    path = tmp_path / "badmerge.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b"])
    writer.add_token_merges(["a z"])  # "z" and "az" are not in the vocabulary
    writer.add_tensor("token_embd.weight", np.zeros((2, 2), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(EdgetorchError, match="inconsistent"):
        load_tokenizer(path)
