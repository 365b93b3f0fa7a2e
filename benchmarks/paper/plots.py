"""The paper table's plots, drawn from its JSON alone:

    paper_table.png     the paper's five rows next to ours on each testbed
                        (seconds per 1000 batches, log scale)
    paper_scaling.png   per testbed: time per 1000 batches and speed-up over
                        one remote GPU, for 1, 2 and 4 GPUs, both syncs, global
                        batch 64 and per-GPU batch 64
"""
from __future__ import annotations

from pathlib import Path

from ..charts import finish, pyplot, source_note

PAPER_COLOUR = "0.55"
TESTBED_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:red"]
VARIANTS = [("host", "global"), ("peer", "global"), ("host", "per-GPU"), ("peer", "per-GPU")]
VARIANT_COLOURS = {"host": "tab:blue", "peer": "tab:orange"}


def draw(result: dict, out_dir: Path) -> list[Path]:
    table = out_dir / "paper_table.png"
    scaling = out_dir / "paper_scaling.png"
    draw_table(result, table)
    draw_scaling(result, scaling)
    return [table, scaling]


def _testbed_label(result: dict, key: str) -> str:
    bed = next((b for b in result["testbeds"] if b["key"] == key), None)
    return f"{key} (EMULATED)" if bed and bed["emulated"] else key


def draw_table(result: dict, path: Path) -> None:
    plt = pyplot()
    tables = result["table"]
    names = [line["row"] for line in next(iter(tables.values()))] if tables else []
    series = [("paper (its own hardware)", [l["paper_s"] for l in next(iter(tables.values()))], PAPER_COLOUR)] \
        if tables else []
    for i, (key, lines) in enumerate(tables.items()):
        series.append((f"ours: {_testbed_label(result, key)}", [l["ours_s"] for l in lines],
                       TESTBED_COLOURS[i % len(TESTBED_COLOURS)]))
    fig, ax = plt.subplots(figsize=(9, 5.2))
    height = 0.8 / max(len(series), 1)
    for s, (label, values, colour) in enumerate(series):
        for r, value in enumerate(values):
            y = r + s * height
            if value is None:
                ax.text(1e-3, y, "  not measured here", va="center", fontsize=6, color="0.4")
                continue
            ax.barh(y, value, height=height, color=colour, label=label if r == 0 or values[0] is None else None)
            ax.text(value, y, f" {value:.3g}", va="center", fontsize=6)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="lower right")
    ax.set_yticks([r + 0.4 - height / 2 for r in range(len(names))], names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(1e-3, 2e4)
    ax.set_xlabel("seconds per 1000 batches (log scale); ours: batches of 64 images, "
                  f"measured over {result['parameters']['batches_measured']} and scaled")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.set_title("The paper's table and ours (best sync per row, global batch 64)", fontsize=10)
    finish(fig, ax, result, path)


def draw_scaling(result: dict, path: Path) -> None:
    plt = pyplot()
    remote = [r for r in result["rows"] if r["kind"] == "remote"]
    keys = list(dict.fromkeys(r["testbed"] for r in remote))
    fig, axes = plt.subplots(2, max(len(keys), 1), figsize=(4.2 * max(len(keys), 1), 7), squeeze=False)
    paper = result["paper"]
    for c, key in enumerate(keys):
        rows = [r for r in remote if r["testbed"] == key]
        top, bottom = axes[0][c], axes[1][c]
        width = 0.8 / len(VARIANTS)
        for v, (sync, scaling) in enumerate(VARIANTS):
            for n_index, n in enumerate((1, 2, 4)):
                if n == 1 and scaling == "per-GPU":
                    continue  # one GPU: its batch is the global batch
                batch = 64 * n if scaling == "per-GPU" else 64
                row = next((r for r in rows if r["devices"] == n and r["sync"] == sync and r["global_batch"] == batch),
                           None)
                if row is None:
                    continue
                x = n_index + (v - len(VARIANTS) / 2 + 0.5) * width
                style = {"color": VARIANT_COLOURS[sync], "hatch": "//" if scaling == "per-GPU" else None,
                         "edgecolor": "white", "label": f"sync {sync}, {scaling} batch 64"}
                top.bar(x, row["s_per_1000_batches"], width, **style)
                speedup = row.get("speedup_over_one_remote")
                if speedup is not None:
                    bottom.bar(x, speedup, width, **style)
                    bottom.text(x, speedup, f"{speedup:.2f}", ha="center", va="bottom", fontsize=6)
        for ax in (top, bottom):
            ax.set_xticks(range(3), ["1 GPU", "2 GPUs", "4 GPUs"], fontsize=8)
            ax.grid(True, axis="y", alpha=0.3)
        top.set_title(_testbed_label(result, key), fontsize=9)
        top.set_ylabel("seconds per 1000 batches of 64")
        bottom.set_ylabel("speed-up over one remote GPU (same sync)")
        bottom.plot([0.6, 1.4], [paper["speedup_2_over_1"]] * 2, color="0.3", linestyle=":", label="paper")
        bottom.plot([1.6, 2.4], [paper["speedup_4_over_1"]] * 2, color="0.3", linestyle=":")
        bottom.axhline(3.5, color="tab:red", linestyle="--", linewidth=1, label="goal: 4 GPUs >= 3.5x")
        bottom.set_ylim(0, max(4.2, *(r.get("speedup_over_one_remote", 0) * 1.15 for r in rows)))
    unique = {}
    for ax in (*axes[0], *axes[1]):
        handles, labels = ax.get_legend_handles_labels()
        unique.update(zip(labels, handles))
    fig.suptitle("Scaling over remote GPUs (EMULATED where marked)", fontsize=10)
    fig.legend(unique.values(), unique.keys(), fontsize=7, loc="lower center", ncol=3, bbox_to_anchor=(0.5, 0.025))
    fig.text(0.01, 0.005, source_note(result), fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.09, 1, 0.97))  # room for the legend and the source line
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
