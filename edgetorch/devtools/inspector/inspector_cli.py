"""``python -m edgetorch.devtools.inspector.inspector_cli --etdump_path run.etdp [...]``: the Inspector's table of
an ETDump (with an ETRecord and debug buffer when given), as ExecuTorch's ``inspector_cli``; ``--tsv_path``
also saves it, ``--compare_results`` prints each run's output quality against the ETRecord's reference outputs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from edgetorch.devtools.inspector._inspector import Inspector
from edgetorch.devtools.inspector._inspector_utils import TimeScale, compare_results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print the Inspector's table of an ETDump.")
    parser.add_argument("--etdump_path", required=True, help="the ETDump file")
    scales = [t.value for t in TimeScale]
    parser.add_argument("--source_time_scale", choices=scales, default=TimeScale.NS.value, help="the ETDump's ticks")
    parser.add_argument("--target_time_scale", choices=scales, default=TimeScale.MS.value, help="the table's unit")
    parser.add_argument("--etrecord_path", help="the ETRecord of the program, to name each event's operators")
    parser.add_argument("--debug_buffer_path", help="the debug buffer the ETDump's values point into")
    parser.add_argument("--tsv_path", help="also save the table as tab-separated values")
    parser.add_argument(
        "--compare_results",
        action="store_true",
        help="compare each Execute block's outputs with the ETRecord's reference outputs (plots them)",
    )
    args = parser.parse_args(argv)
    inspector = Inspector(
        etdump_path=args.etdump_path,
        etrecord=args.etrecord_path,
        debug_buffer_path=args.debug_buffer_path,
        source_time_scale=TimeScale(args.source_time_scale),
        target_time_scale=TimeScale(args.target_time_scale),
    )
    inspector.print_data_tabular()
    if args.tsv_path:
        inspector.save_data_to_tsv(args.tsv_path)  # a path or an open text file
    if args.compare_results:
        for block in inspector.event_blocks:
            if block.name != "Execute":
                continue
            if block.reference_output is None or block.run_output is None:
                print(
                    f"block {block.name!r}: nothing to compare (the ETRecord needs reference outputs and the "
                    "ETDump program outputs: a bundled run traced with a debug buffer)"
                )
                continue
            compare_results(block.reference_output, block.run_output, plot=True)


if __name__ == "__main__":
    main()
