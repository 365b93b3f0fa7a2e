"""Redraws every benchmark's plots from its JSON result alone, without
re-running anything:

    python -m rcuda.benchmarks.plots RESULTS_DIR
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .runner import find_benchmark


def redraw(results_dir: Path) -> list[Path]:
    """Redraw every plot from the JSON files in `results_dir`."""
    drawn = []
    for path in sorted(results_dir.glob("*.json")):
        result = json.loads(path.read_text())
        benchmark = find_benchmark(result.get("suite", ""), result.get("benchmark", ""))
        if benchmark is not None:
            drawn += benchmark.plot(result, results_dir)
    return drawn


if __name__ == "__main__":
    for drawn_path in redraw(Path(sys.argv[1] if len(sys.argv) > 1 else ".")):
        sys.stdout.write(f"{drawn_path}\n")
