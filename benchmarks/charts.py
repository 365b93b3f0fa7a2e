"""The charts the benchmarks draw (latency CDFs, throughput curves, labelled
bars), each from a result dict alone, with a note of the machine and commit
that measured it.

matplotlib with the Agg backend: files only, no display needed.
"""
from __future__ import annotations

from pathlib import Path


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ImportError("the benchmark plots need matplotlib: pip install 'rcuda[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def source_note(result: dict) -> str:
    m = result.get("machine", {})
    gpus = ", ".join(g["name"] for g in m.get("gpus", [])) or "no GPU"
    mode = " (quick)" if result.get("quick") else ""
    return (f"{m.get('cpu_cores', '?')}-core {m.get('cpu_model', '?')}, {gpus}; "
            f"{m.get('date', '?')[:10]}, rcuda {str(m.get('rcuda_commit') or '?')[:10]}{mode}")


def finish(fig, ax, result: dict, path: Path) -> None:
    fig.text(0.01, 0.005, source_note(result), fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    pyplot().close(fig)


def latency_cdf(result: dict, path: Path) -> None:
    """One CDF per variant, log time axis, p50/p99 marked in the legend."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for name, stats in result["variants"].items():
        cdf = stats["cdf_us"]
        fractions = [i / (len(cdf) - 1) for i in range(len(cdf))]
        ax.plot(cdf, fractions, label=f"{stats['label']}: p50 {stats['p50']:.0f} µs, p99 {stats['p99']:.0f} µs",
                linewidth=2 if name == "forwarded" else 1.2)
    ax.set_xscale("log")
    ax.set_xlabel("round-trip time (µs, log scale)")
    ax.set_ylabel("fraction of calls")
    ax.set_ylim(0, 1)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title("Synchronous call latency, loopback (same run, interleaved rounds)")
    ax.legend(fontsize=7, loc="lower right")
    finish(fig, ax, result, path)


def bandwidth(result: dict, path: Path) -> None:
    """Throughput against copy size, one panel per direction."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, direction in zip(axes, ("htod", "dtoh")):
        for name, series in result["series"].items():
            if series["direction"] != direction:
                continue
            sizes = [p["bytes"] for p in series["points"]]
            rates = [p["gb_per_s"] for p in series["points"]]
            ax.plot(sizes, rates, marker="o", markersize=3, label=series["label"],
                    linewidth=2 if name.startswith("rcuda") else 1.2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per copy")
        ax.set_title("host → device" if direction == "htod" else "device → host")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        ticks = [s for s in result["parameters"]["sizes"]]
        ax.set_xticks(ticks, [_size_label(s) for s in ticks], fontsize=7, rotation=45)
    axes[0].set_ylabel("GB/s (median of repeats)")
    fig.suptitle("Copy throughput through rcuda vs a raw socket stream (loopback, same run)", fontsize=10)
    finish(fig, axes[0], result, path)


def _size_label(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


def bars(result: dict, path: Path, bars_: list[tuple[str, float]], ylabel: str, title: str,
         goal: tuple[str, float] | None = None, log: bool = False) -> None:
    """Labelled bars (values written on them), with an optional goal line:
    launch rates, start-up times, and the paper table's scaling."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, max(4.5, 1.5 + 0.25 * len(bars_))))  # a bar's label stays legible
    labels = [label for label, _ in bars_]
    values = [value for _, value in bars_]
    drawn = ax.barh(range(len(values)), values, color="tab:blue")
    ax.set_yticks(range(len(values)), labels, fontsize=8)
    ax.invert_yaxis()
    for bar, value in zip(drawn, values):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {value:,.0f}", va="center", fontsize=8)
    if goal:
        ax.axvline(goal[1], color="tab:red", linestyle="--", label=goal[0])
        ax.legend(fontsize=8, loc="lower right")
    if log:
        ax.set_xscale("log")
        ax.set_xlim(min(values) / 2, max(values) * 4)  # room for the labels
    else:
        ax.margins(x=0.15)
    ax.set_xlabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    finish(fig, ax, result, path)


def bar_panels(result: dict, path: Path, panels: list[tuple[str, str, list[tuple[str, float]], bool]],
               title: str) -> None:
    """Labelled bars in panels one above the other, one unit each: (panel
    title, axis label, bars, log scale)."""
    plt = pyplot()
    heights = [max(2.0, 0.8 + 0.3 * len(bars_)) for _, _, bars_, _ in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, sum(heights) + 0.8),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    axes = axes[:, 0]
    for ax, (panel_title, xlabel, bars_, log) in zip(axes, panels):
        values = [value for _, value in bars_]
        drawn = ax.barh(range(len(values)), values, color="tab:blue")
        ax.set_yticks(range(len(values)), [label for label, _ in bars_], fontsize=7)
        ax.invert_yaxis()
        for bar, value in zip(drawn, values):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {value:,.1f}", va="center", fontsize=7)
        if log:
            ax.set_xscale("log")
            ax.set_xlim(min(values) / 2, max(values) * 4)  # room for the labels
        else:
            ax.margins(x=0.2)
        ax.set_xlabel(xlabel)
        ax.set_title(panel_title, fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    finish(fig, axes[0], result, path)
