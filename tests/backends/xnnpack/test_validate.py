"""The XNNPACK graph validator refuses, with a typed error, each kind of graph ExecuTorch's runtime crashes on.

Each case starts from a small valid graph (x[2, 3] + w -> NHWC transpose chain -> outputs) and breaks one thing.
"""

from __future__ import annotations

import copy

import pytest
import torch

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack import serialize
from edgetorch.backends.xnnpack.partition import XnnpackPartitioner
from edgetorch.backends.xnnpack.validate import XnnpackGraphError, validate_graph
from edgetorch.errors import EdgetorchError
from edgetorch.exir import to_edge_transform_and_lower

INV = xs.INVALID_VALUE_ID
FP32 = xs.XNNDatatype.xnn_datatype_fp32


def tensor(vid: int, dims: list[int], external: int = INV, flags: int = 0, constant: int = 0) -> xs.XValue:
    return xs.XValue(
        xs.XNNTensorValue(
            datatype=FP32,
            num_dims=len(dims),
            dims=dims,
            constant_buffer_idx=constant,
            external_id=external,
            flags=flags,
            id_out=vid,
        )
    )


def node(union: object, clamp: tuple[float, float] | None = None) -> xs.XNode:
    return xs.XNode(xnode_union=union, debug_handle=0, output_min_max=xs.OutputMinMax(*clamp) if clamp else None)


def valid_graph() -> xs.XNNGraph:
    """in0[1,2,2,3] + w[3] -> v2 -> clamp -> v3 -> NHWC->NCHW transpose -> out (external 1)."""
    return xs.XNNGraph(
        version="0",
        xvalues=[
            tensor(0, [1, 2, 2, 3], external=0, flags=xs.VALUE_FLAG_EXTERNAL_INPUT),
            tensor(1, [3], constant=1),
            tensor(2, [1, 2, 2, 3]),
            tensor(3, [1, 2, 2, 3]),
            tensor(4, [1, 3, 2, 2], external=1, flags=xs.VALUE_FLAG_EXTERNAL_OUTPUT),
        ],
        xnodes=[
            node(xs.XNNAdd(input1_id=0, input2_id=1, output_id=2, flags=0)),
            node(xs.XNNClamp(input_id=2, output_id=3, flags=0), clamp=(0.0, 6.0)),
            node(xs.XNNStaticTranspose(num_dims=4, perm=[0, 3, 1, 2], input_id=3, output_id=4, flags=0)),
        ],
        num_externs=2,
        input_ids=[0],
        output_ids=[4],
        constant_data=[xs.ConstantDataOffset(0, 0), xs.ConstantDataOffset(xs.NAMED_CONSTANT_OFFSET, 12, "w")],
    )


def check(graph: xs.XNNGraph) -> None:
    validate_graph(graph, named_keys={"w"}, num_inputs=1, num_outputs=1)


def test_the_valid_graph_passes():
    check(valid_graph())


def _values(g):
    return [v.xvalue_union for v in g.xvalues]


def use_before_definition(g):
    g.xnodes[0], g.xnodes[1] = g.xnodes[1], g.xnodes[0]


def id_out_of_range(g):
    g.xnodes[1].xnode_union.input_id = 9


def output_written_twice(g):
    g.xnodes[1].xnode_union.output_id = 2


def output_is_a_constant(g):
    g.xnodes[0].xnode_union.output_id = 1


def external_output_never_written(g):
    g.xnodes.pop()


def outputs_numbered_before_inputs(g):
    _values(g)[0].external_id, _values(g)[4].external_id = 1, 0


def input_list_disagrees_with_flags(g):
    g.input_ids = []


def wrong_num_externs(g):
    g.num_externs = 3


def input_and_output_flags_together(g):
    _values(g)[4].flags = xs.VALUE_FLAG_EXTERNAL_INPUT | xs.VALUE_FLAG_EXTERNAL_OUTPUT


def flag_without_external_id(g):
    _values(g)[2].flags = xs.VALUE_FLAG_EXTERNAL_OUTPUT


def num_dims_disagrees_with_dims(g):
    _values(g)[2].num_dims = 3


def invalid_datatype(g):
    _values(g)[2].datatype = xs.XNNDatatype.xnn_datatype_invalid


def duplicate_id_out(g):
    _values(g)[3].id_out = 2


def constant_index_out_of_range(g):
    _values(g)[1].constant_buffer_idx = 5


def named_key_nobody_holds(g):
    g.constant_data[1].named_key = "missing"


def constant_size_disagrees_with_dims(g):
    g.constant_data[1].size = 8


def constant_past_the_blob_data(g):
    g.constant_data[1] = xs.ConstantDataOffset(offset=16, size=12)


def external_constant(g):
    _values(g)[1].external_id, _values(g)[1].flags = 1, xs.VALUE_FLAG_EXTERNAL_INPUT


def clamp_min_above_max(g):
    g.xnodes[1].output_min_max = xs.OutputMinMax(6.0, 0.0)


def transpose_perm_not_a_permutation(g):
    g.xnodes[2].xnode_union.perm = [0, 3, 3, 2]


def transpose_num_dims_wrong(g):
    g.xnodes[2].xnode_union.num_dims = 3


def transpose_output_dims_wrong(g):
    _values(g)[4].dims = [1, 2, 2, 3]


def broadcast_impossible(g):
    _values(g)[1].dims = [2]
    g.constant_data[1].size = 8


def elementwise_output_dims_wrong(g):
    _values(g)[3].dims = [1, 2, 2, 4]


def missing_required_input(g):
    g.xnodes[0].xnode_union.input2_id = INV


def empty_value(g):
    g.xvalues[2].xvalue_union = None


BREAKS = [
    use_before_definition,
    id_out_of_range,
    output_written_twice,
    output_is_a_constant,
    external_output_never_written,
    outputs_numbered_before_inputs,
    input_list_disagrees_with_flags,
    wrong_num_externs,
    input_and_output_flags_together,
    flag_without_external_id,
    num_dims_disagrees_with_dims,
    invalid_datatype,
    duplicate_id_out,
    constant_index_out_of_range,
    named_key_nobody_holds,
    constant_size_disagrees_with_dims,
    constant_past_the_blob_data,
    external_constant,
    clamp_min_above_max,
    transpose_perm_not_a_permutation,
    transpose_num_dims_wrong,
    transpose_output_dims_wrong,
    broadcast_impossible,
    elementwise_output_dims_wrong,
    missing_required_input,
    empty_value,
]


@pytest.mark.parametrize("breaks", BREAKS, ids=[b.__name__ for b in BREAKS])
def test_a_broken_graph_is_refused_with_a_typed_error(breaks):
    graph = valid_graph()
    breaks(graph)
    with pytest.raises(XnnpackGraphError) as info:
        check(graph)
    assert isinstance(info.value, EdgetorchError)
    message = str(info.value)
    assert "expected" in message and "found" in message and "; " in message


def test_the_delegate_argument_counts_are_checked():
    with pytest.raises(XnnpackGraphError, match="2 .the delegate's inputs"):
        validate_graph(valid_graph(), named_keys={"w"}, num_inputs=2, num_outputs=1)


# ------------------------------------------------------------- node geometry


def single_node_graph(values: list[tuple[list[int], int]], union: object) -> xs.XNNGraph:
    """Values given as (dims, constant size in floats or 0); value 0 is the input, the last the output."""
    xvalues, entries = [], [xs.ConstantDataOffset(0, 0)]
    last = len(values) - 1
    for vid, (dims, size) in enumerate(values):
        if vid == 0:
            xvalues.append(tensor(0, dims, external=0, flags=xs.VALUE_FLAG_EXTERNAL_INPUT))
        elif vid == last:
            xvalues.append(tensor(vid, dims, external=1, flags=xs.VALUE_FLAG_EXTERNAL_OUTPUT))
        elif size:
            entries.append(xs.ConstantDataOffset(xs.NAMED_CONSTANT_OFFSET, 4 * size, f"c{vid}"))
            xvalues.append(tensor(vid, dims, constant=len(entries) - 1))
        else:
            xvalues.append(tensor(vid, dims))
    return xs.XNNGraph(
        version="0",
        xvalues=xvalues,
        xnodes=[node(union)],
        num_externs=2,
        input_ids=[0],
        output_ids=[last],
        constant_data=entries,
    )


def conv(**changes):
    params = dict(
        padding_top=1, padding_right=1, padding_bottom=1, padding_left=1, kernel_height=3, kernel_width=3,
        subsampling_height=2, subsampling_width=2, dilation_height=1, dilation_width=1, group_input_channels=3,
        group_output_channels=4, groups=1, adjustment_height=0, adjustment_width=0, input1_id=0, filter_id=1,
        bias_id=2, output_id=3, flags=0,
    )  # fmt: skip
    params.update(changes)
    return xs.XNNConv2d(**params)


CONV_VALUES = [([1, 8, 8, 3], 0), ([4, 3, 3, 3], 108), ([4], 4), ([1, 4, 4, 4], 0)]


def pool(**changes):
    params = dict(
        padding_top=0, padding_right=0, padding_bottom=0, padding_left=0, pooling_height=2, pooling_width=2,
        stride_height=2, stride_width=2, dilation_height=1, dilation_width=1, input_id=0, output_id=1,
        flags=xs.FLAG_KEEP_DIMS,
    )  # fmt: skip
    params.update(changes)
    return xs.XNNMaxPooling2d(**params)


GOOD_NODES = {
    "conv": (CONV_VALUES, conv()),
    "max_pool": ([([1, 8, 8, 3], 0), ([1, 4, 4, 3], 0)], pool()),
    "fully_connected": (
        [([5, 3], 0), ([4, 3], 12), ([4], 4), ([5, 4], 0)],
        xs.XNNFullyConnected(input1_id=0, filter_id=1, bias_id=2, output_id=3, flags=0),
    ),
    "reshape": (
        [([2, 6], 0), ([3, 4], 0)],
        xs.XNNStaticReshape(num_dims=2, new_shape=[3, 4], input_id=0, output_id=1, flags=0),
    ),
    "slice": (
        [([4, 6], 0), ([2, 3], 0)],
        xs.XNNStaticSlice(num_dims=2, offsets=[1, 3], sizes=[2, 3], input_id=0, output_id=1, flags=0),
    ),
    "pad": (
        [([2, 3], 0), ([3, 6], 0)],
        xs.XNNStaticConstantPad(
            pre_paddings=[1, 1], post_paddings=[0, 2], padding_value=0.0, input_id=0, output_id=1, flags=0
        ),
    ),
    "concatenate": (
        [([2, 3], 0), ([2, 5], 10), ([2, 8], 0)],
        xs.XNNConcatenate2(
            axis=1, input1_id=0, input2_id=1, input3_id=INV, input4_id=INV, input5_id=INV, output_id=2, flags=0
        ),
    ),
    "batch_matmul": (
        [([2, 3, 4], 0), ([2, 5, 4], 40), ([2, 3, 5], 0)],
        xs.XNNBatchMatrixMultiply(input1_id=0, input2_id=1, output_id=2, flags=xs.FLAG_TRANSPOSE_B),
    ),
}

BAD_NODES = {
    "conv_stride_zero": ("conv", lambda n, v: setattr(n, "subsampling_height", 0)),
    "conv_filter_dims": ("conv", lambda n, v: v.__setitem__(1, ([4, 3, 3, 2], 72))),
    "conv_channels": ("conv", lambda n, v: setattr(n, "group_input_channels", 2)),
    "conv_output_size": ("conv", lambda n, v: v.__setitem__(3, ([1, 5, 5, 4], 0))),
    "conv_bias_size": ("conv", lambda n, v: v.__setitem__(2, ([3], 3))),
    "pool_window_zero": ("max_pool", lambda n, v: setattr(n, "pooling_width", 0)),
    "pool_output_size": ("max_pool", lambda n, v: v.__setitem__(1, ([1, 3, 3, 3], 0))),
    "fc_features": ("fully_connected", lambda n, v: v.__setitem__(0, ([5, 2], 0))),
    "fc_filter_rank": ("fully_connected", lambda n, v: v.__setitem__(1, ([4, 3, 1], 12))),
    "reshape_count": ("reshape", lambda n, v: (setattr(n, "new_shape", [3, 5]), v.__setitem__(1, ([3, 5], 0)))),
    "reshape_two_inferred": ("reshape", lambda n, v: setattr(n, "new_shape", [0, 0])),
    "slice_past_the_end": ("slice", lambda n, v: setattr(n, "offsets", [3, 3])),
    "pad_rank": ("pad", lambda n, v: setattr(n, "pre_paddings", [1])),
    "concatenate_axis": ("concatenate", lambda n, v: setattr(n, "axis", 2)),
    "concatenate_unused_slot_set": ("concatenate", lambda n, v: setattr(n, "input3_id", 1)),
    "concatenate_off_axis": ("concatenate", lambda n, v: v.__setitem__(1, ([3, 5], 15))),
    "batch_matmul_inner": ("batch_matmul", lambda n, v: setattr(n, "flags", 0)),
}


@pytest.mark.parametrize("name", sorted(GOOD_NODES))
def test_a_well_formed_node_passes(name):
    values, union = GOOD_NODES[name]
    validate_graph(single_node_graph(values, union))


@pytest.mark.parametrize("name", sorted(BAD_NODES))
def test_a_node_with_bad_parameters_or_shapes_is_refused(name):
    base, breaks = BAD_NODES[name]
    values, union = copy.deepcopy(GOOD_NODES[base])
    breaks(union, values)
    with pytest.raises(XnnpackGraphError, match="expected .* found"):
        validate_graph(single_node_graph(values, union))


def test_the_serializer_validates_before_writing(monkeypatch):
    """A serializer bug (here: a node dropped, so the output is never written) is a typed error at lowering."""
    add = serialize.XnnpackGraphBuilder.add

    def add_all_but_negate(self, union, clamp=None):
        if not isinstance(union, xs.XNNNegate):
            add(self, union, clamp)

    monkeypatch.setattr(serialize.XnnpackGraphBuilder, "add", add_all_but_negate)

    class Negate(torch.nn.Module):
        def forward(self, x):
            return torch.neg(x)

    ep = torch.export.export(Negate(), (torch.randn(2, 3),), strict=False)
    with pytest.raises(XnnpackGraphError, match="every external output written"):
        to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
