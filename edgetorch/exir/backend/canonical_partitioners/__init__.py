"""Ready-made partitioners and partitioning helpers, at ExecuTorch's ``exir.backend.canonical_partitioners``.

``pattern_op_partitioner`` groups nodes an operator-support rule or a graph pattern accepts;
``all_node_partitioner`` hands a whole program to one backend; ``config_partitioner`` builds a
partitioner from per-op configs; ``duplicate_dequant_node_pass`` gives each quantized op its
own dequantize node and ``duplicate_constant_node_pass`` each user of a weight its own copy, so
that they can be partitioned apart.
"""
