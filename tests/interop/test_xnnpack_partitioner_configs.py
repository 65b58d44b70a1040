"""XnnpackPartitioner's options choose what is delegated as ExecuTorch 1.5.1's do: for each precision setting,
and per_op_mode, the ops left outside delegates and the number of delegates equal ExecuTorch's on the same
model (ExecuTorch compiles in this process; nothing runs on its runtime). The config classes are ExecuTorch's,
plus the two edgetorch lowers beyond them."""

from __future__ import annotations

import pytest
import torch

from edgetorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS, ConfigPrecisionType
from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from edgetorch.exir import to_edge_transform_and_lower
from tests.backends.xnnpack.test_partitioner_configs import INPUTS, ConvLinear, portable_ops

pytest.importorskip("executorch")

SETTINGS = [
    {},
    {"config_precisions": "FP32"},
    {"config_precisions": "STATIC_QUANT"},
    {"config_precisions": "DYNAMIC_QUANT"},
    {"per_op_mode": True},
]


def _options(setting: dict, precision_type) -> dict:
    options = dict(setting)
    if "config_precisions" in options:
        options["config_precisions"] = precision_type[options["config_precisions"]]
    return options


@pytest.fixture(scope="module")
def program():
    torch.manual_seed(0)
    return torch.export.export(ConvLinear().eval(), INPUTS)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()) or "default")
def test_same_ops_delegated_as_executorch(program, setting):
    from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType as EtPrecision
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner as EtPartitioner
    from executorch.exir import to_edge_transform_and_lower as et_lower

    ours = to_edge_transform_and_lower(
        program, partitioner=[XnnpackPartitioner(**_options(setting, ConfigPrecisionType))]
    )
    theirs = et_lower(program, partitioner=[EtPartitioner(**_options(setting, EtPrecision))])
    assert portable_ops(ours) == portable_ops(theirs)


def test_config_classes_are_executorchs():
    from executorch.backends.xnnpack.partition import config as et_config

    theirs = [c.__name__ for c in et_config.ALL_PARTITIONER_CONFIGS]
    ours = [c.__name__ for c in ALL_PARTITIONER_CONFIGS]
    assert ours == [*theirs, "EluConfig", "ScaledDotProductAttentionConfig"]
    for ours_class, theirs_class in zip(ALL_PARTITIONER_CONFIGS, et_config.ALL_PARTITIONER_CONFIGS):
        mine, other = ours_class(), theirs_class()
        assert mine.target_name == other.target_name
        assert {p.name for p in mine.supported_precision_types()} == {p.name for p in other.supported_precision_types()}
