"""What the suite's numbers mean: contender names, the ratios we report, and the charts.

Reads the dictionary ``bench/suite.py`` writes to ``suite.json`` (or ``bench/llm.py``'s ``llm.json``); imports
only the standard library and matplotlib, so the charts can be redrawn without torch:

    .venv/bin/python bench/plots.py [bench/results/suite.json | bench/results/llm.json]
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

CONTENDERS = ("edgetorch-xnnpack", "edgetorch-portable", "et-xnnpack", "et-portable", "ort", "eager")
LABELS = {
    "edgetorch-xnnpack": "edgetorch XNNPACK",
    "edgetorch-portable": "edgetorch portable",
    "et-xnnpack": "ExecuTorch XNNPACK",
    "et-portable": "ExecuTorch portable",
    "ort": "ONNX Runtime",
    "eager": "PyTorch eager",
}
COMPARISONS = (
    ("edgetorch-xnnpack", "et-xnnpack"),
    ("edgetorch-xnnpack", "ort"),
    ("edgetorch-portable", "et-portable"),
)
"""(ours, theirs) pairs reported as time ratios ours / theirs: below 1 means edgetorch is faster."""


def comparison_label(ours: str, theirs: str) -> str:
    return f"{LABELS[ours]} / {LABELS[theirs]}"


def ratios(results: dict, ours: str, theirs: str) -> dict[str, float]:
    """Time ratio ours / theirs per model, for the models where both contenders ran."""
    out = {}
    for model, res in results["models"].items():
        a, b = res["latency_ms"].get(ours), res["latency_ms"].get(theirs)
        if a and b:
            out[model] = a / b
    return out


def geomean(values: list[float]) -> float | None:
    """The geometric mean, the average that treats 2x faster and 2x slower symmetrically; None when empty."""
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _axes(width: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, 4.8), layout="constrained")
    return plt, fig, ax


def latency_plot(results: dict, path: pathlib.Path) -> None:
    """Grouped bars: median latency of every contender on every model, log scale."""
    models = list(results["models"])
    contenders = results["contenders"]
    plt, fig, ax = _axes(max(7.0, 1.6 * len(models) + 2))
    width = 0.8 / len(contenders)
    for i, c in enumerate(contenders):
        xs = [m + (i - (len(contenders) - 1) / 2) * width for m in range(len(models))]
        ys = [results["models"][name]["latency_ms"].get(c) or math.nan for name in models]
        ax.bar(xs, ys, width, label=LABELS[c])
    ax.set_yscale("log")
    ax.set_xticks(range(len(models)), models)
    ax.set_ylabel("median latency, ms (log scale)")
    ax.set_title(f"Latency per model, one process, {results['meta']['threads']} threads (lower is better)")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ratio_plot(results: dict, path: pathlib.Path) -> None:
    """Grouped bars: each comparison's time ratio per model and its geometric mean, log scale, 1 = parity."""
    models = list(results["models"]) + ["geomean"]
    plt, fig, ax = _axes(max(7.0, 1.3 * len(models) + 2))
    width = 0.8 / len(COMPARISONS)
    for i, (ours, theirs) in enumerate(COMPARISONS):
        per_model = ratios(results, ours, theirs)
        per_model["geomean"] = geomean(list(per_model.values())) or math.nan
        xs = [m + (i - (len(COMPARISONS) - 1) / 2) * width for m in range(len(models))]
        ys = [per_model.get(name, math.nan) for name in models]
        # bars grow from parity (1) so slower reads as up and faster as down on the log axis
        bars = ax.bar(xs, [y - 1 for y in ys], width, bottom=1, label=comparison_label(ours, theirs))
        ax.bar_label(bars, labels=["" if math.isnan(y) else f"{y:.2g}" for y in ys], fontsize=7)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_yscale("log")
    ax.set_xticks(range(len(models)), models)
    ax.set_ylabel("edgetorch time / other time (log scale)")
    ax.set_title("edgetorch time / other time (below 1: edgetorch faster)")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def llm_plot(results: dict, path: pathlib.Path) -> None:
    """``bench/llm.py``'s contenders side by side: decode and prefill tokens/s, and peak RSS against file size."""
    rows = {name: r for name, r in results["results"].items() if "error" not in r}
    names = list(rows)
    plt, fig, _ = _axes(max(9.0, 1.4 * len(names) + 3))
    fig.set_size_inches(max(9.0, 1.4 * len(names) + 3), 7.5)
    fig.clear()
    speed, memory = fig.subplots(2, 1)
    xs = range(len(names))
    for offset, key, label in ((-0.2, "decode_tps", "decode tok/s"), (0.2, "prefill_tps", "prefill tok/s")):
        bars = speed.bar([x + offset for x in xs], [rows[n][key] for n in names], 0.4, label=label)
        speed.bar_label(bars, fmt="%.0f", fontsize=7)
    speed.set_xticks(list(xs), [n.replace(" ", "\n", 1) for n in names], fontsize=7)
    speed.set_ylabel("tokens / s")
    speed.set_title(f"{results['new_tokens']} new tokens, {results['threads']} thread(s); higher is better")
    speed.legend(fontsize=8)
    for offset, key, label in ((-0.2, "peak_rss", "peak RSS"), (0.2, "file_bytes", "file")):
        bars = memory.bar([x + offset for x in xs], [rows[n][key] / 2**20 for n in names], 0.4, label=label)
        memory.bar_label(bars, fmt="%.0f", fontsize=7)
    memory.set_xticks(list(xs), [n.replace(" ", "\n", 1) for n in names], fontsize=7)
    memory.set_ylabel("MiB")
    memory.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw(results: dict, out_dir: pathlib.Path) -> list[pathlib.Path]:
    """Write latency.png and ratios.png into ``out_dir``; returns their paths."""
    paths = [out_dir / "latency.png", out_dir / "ratios.png"]
    latency_plot(results, paths[0])
    ratio_plot(results, paths[1])
    return paths


if __name__ == "__main__":
    source = pathlib.Path(
        sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent / "results" / "suite.json"
    )
    data = json.loads(source.read_text())
    if "models" not in data:  # bench/llm.py's results
        llm_plot(data, source.with_suffix(".png"))
        print(f"wrote {source.with_suffix('.png')}")
    else:
        for p in draw(data, source.parent):
            print(f"wrote {p}")
