"""ExecuTorch's extension paths in edgetorch, by behaviour: training pybindings, export_util, the llama custom
ops module, tokenizers, export_llm with an LlmConfig (YAML and overrides), and the runner's generate_from_pos
and create_text_llm_runner."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.extension.llm.export.config.llm_config import DtypeOverride, LlmConfig, LlmConfigError
from edgetorch.runtime import Runtime
from tests.extension.llm.test_runner import WORDS, _eager_greedy


def test_training_pybindings_sgd():
    from edgetorch.extension.training.pybindings._training_lib import ExecuTorchSGD, get_sgd_optimizer
    from edgetorch.extension.training.pybindings._training_module import TrainingModule

    weight = np.ones(3, dtype=np.float32)
    sgd = get_sgd_optimizer({"w": weight}, lr=0.5)
    assert isinstance(sgd, ExecuTorchSGD) and TrainingModule.__name__ == "TrainingModule"
    sgd.step({"w": np.array([1.0, 2.0, -2.0], dtype=np.float32)})
    np.testing.assert_allclose(weight, [0.5, 0.0, 2.0])  # updated in place


def test_export_util_helpers(tmp_path):
    from edgetorch.extension.export_util.utils import export_to_edge, export_to_exec_prog, save_pte_program

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    x = torch.randn(2, 4)
    edge = export_to_edge(model, (x,), verbose=False)
    assert any("linear" in str(n.target) or "addmm" in str(n.target) for n in edge.exported_program().graph.nodes)
    program = export_to_exec_prog(model, (x,))
    path = save_pte_program(program, "mlp", tmp_path)
    out = Runtime.get().load_program(path).load_method("forward").execute([x.numpy()])[0]
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="nn.Module"):
        export_to_edge(lambda t: t, (x,))


def test_custom_ops_module_registers_the_llama_ops():
    import edgetorch.extension.llm.custom_ops.custom_ops  # noqa: F401

    cache = torch.zeros(1, 6, 2, 4)
    value = torch.randn(1, 2, 2, 4)
    torch.ops.llama.update_cache(value, cache, 3)
    torch.testing.assert_close(cache[:, 3:5], value)
    assert not cache[:, :3].any() and not cache[:, 5:].any()
    q = torch.randn(1, 1, 2, 4)
    out = torch.ops.llama.custom_sdpa(q, cache, cache, 4, None, 0.0, True)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), cache[:, :5].transpose(1, 2), cache[:, :5].transpose(1, 2)
    ).transpose(1, 2)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_llm_config_from_yaml_and_overrides(tmp_path):
    path = tmp_path / "llm.yaml"
    path.write_text("base:\n  model_class: tiny\nmodel:\n  use_kv_cache: true\nexport:\n  max_seq_length: 8\n")
    config = LlmConfig.from_yaml(path, ["export.max_seq_length=16", "model.dtype_override=bf16"])
    assert config.base.model_class == "tiny" and config.model.use_kv_cache
    assert config.export.max_seq_length == 16 and config.model.dtype_override is DtypeOverride.bf16
    for bad, message in [
        ("model.use_lora=1", "no option 'use_lora'"),
        ("export.max_seq_length=many", "takes a int"),
        ("model.dtype_override=fp16", r"one of \['fp32', 'bf16'\]"),
        ("nowhere.x=1", "no section 'nowhere'"),
        ("novalue", "section.field=value"),
    ]:
        with pytest.raises(LlmConfigError, match=message):
            LlmConfig.from_overrides([bad])
    assert LlmConfig.from_overrides(['base.metadata={"get_bos_id": 1}']).metadata_dict() == {"get_bos_id": 1}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny Hugging Face Llama folder exported by ``export_llm --config``, with a word-level tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from edgetorch.extension.llm.export import load_checkpoint
    from edgetorch.extension.llm.export.export_llm import main
    from tests.extension.llm.test_export import _hf_model

    folder = tmp_path_factory.mktemp("llm-config")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.save(str(folder / "tokenizer.json"))
    hf = _hf_model("llama")
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.2)  # decisive logits, so greedy decoding has no near-ties
    hf.save_pretrained(folder / "hf")
    yaml = folder / "llm.yaml"
    yaml.write_text(
        f"base:\n  model_class: tiny\n  checkpoint: {folder / 'hf'}\nmodel:\n  use_kv_cache: true\n"
        "export:\n  max_seq_length: 8\n  max_context_length: 32\n"
    )
    return folder, load_checkpoint(folder / "hf", max_seq_len=8, max_context_len=32), yaml, main


def test_export_llm_command_and_runner(exported):
    from edgetorch.extension.llm.runner import GenerationConfig, create_text_llm_runner
    from edgetorch.extension.llm.tokenizers import get_tokenizer

    folder, checkpoint, yaml, main = exported
    output = main(["--config", str(yaml), f"export.output_dir={folder}", 'base.metadata={"get_bos_id": 1}'])
    assert output == folder / "tiny.pte"
    tokenizer = get_tokenizer(folder / "tokenizer.json")
    runner = create_text_llm_runner(output, tokenizer)
    assert runner.is_loaded() and runner.metadata["get_max_seq_len"] == 8 and runner.metadata["get_bos_id"] == 1
    config = GenerationConfig(max_new_tokens=4, temperature=0.0, echo=False)
    prompt = [1, *tokenizer.encode("w5 w6 w7")]
    assert runner.generate_ids(prompt, config) == _eager_greedy(checkpoint, prompt, 4)
    # The first turn is in the cache; writing the prompt from position 0 again replaces it, so generating
    # from there repeats the first turn's text, while continuing after it does not start over.
    first = runner.generate_from_pos("w5 w6 w7", 0, config)
    assert runner.generate_from_pos("w5 w6 w7", 0, config) == first
    assert runner._pos > len(prompt)
    with pytest.raises(RuntimeError, match="start_pos"):
        runner.generate_from_pos("w5", 32, config)


def test_flat_tensor_serializer_round_trip():
    from edgetorch.extension.flat_tensor.serialize.flat_tensor_schema import TensorLayout
    from edgetorch.extension.flat_tensor.serialize.serialize import (
        FlatTensorConfig,
        FlatTensorHeader,
        FlatTensorSerializer,
    )
    from edgetorch.format.program import ScalarType

    weight = np.arange(6, dtype=np.float32).tobytes()
    layout = TensorLayout(scalar_type=ScalarType.FLOAT, sizes=[2, 3], dim_order=[0, 1])
    serializer = FlatTensorSerializer(FlatTensorConfig(segment_alignment=64))
    blob = serializer.serialize({"w": (weight, layout), "same": weight, "b": b"\x01\x02"})
    header = FlatTensorHeader.from_bytes(blob[8:])
    assert header.is_valid() and header.segment_base_offset % 64 == 0
    assert header.segment_data_size == len(blob) - header.segment_base_offset
    assert FlatTensorHeader.from_bytes(header.to_bytes()) == header
    back = serializer.read_named_data(blob)
    assert back["w"] == (weight, layout) and back["same"] == (weight, None) and back["b"][0] == b"\x01\x02"
    assert not FlatTensorHeader.from_bytes(b"XXXX" + bytes(36)).is_valid()
    with pytest.raises(ValueError, match="40 bytes"):
        FlatTensorHeader.from_bytes(b"FH01")
    executorch = pytest.importorskip("executorch.extension.flat_tensor.serialize.serialize")
    theirs = executorch.FlatTensorHeader.from_bytes(blob[8:])
    assert (theirs.flatbuffer_offset, theirs.flatbuffer_size, theirs.segment_base_offset) == (
        header.flatbuffer_offset,
        header.flatbuffer_size,
        header.segment_base_offset,
    )
