"""Writing an experiment's report: markdown tables, timings and the figure under ``OUT/NAME/``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pymc_crf.reproduce.registry import Report, TrialResult

__all__ = ["label_axes", "markdown_table", "mean_se", "new_figure", "write_report"]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table from a header and rows of already formatted cells."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


def mean_se(values: Sequence[float], scale: float = 1.0, digits: int = 2) -> str:
    """``"mean ± standard error"`` of ``values * scale`` (just the mean for a single value, "—" for
    none)."""
    v = scale * np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return "—"
    if v.size == 1:
        return f"{v[0]:.{digits}f}"
    return f"{v.mean():.{digits}f} ± {v.std(ddof=1) / np.sqrt(v.size):.{digits}f}"


def new_figure(ncols: int = 1, width: float = 5.0, height: float = 3.8):
    """A matplotlib figure and axes with the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)


def label_axes(ax, xlabel: str, ylabel: str, title: str, logx: bool = False,
               logy: bool = False) -> None:
    """Axis labels, title, log scales and a small legend on ``ax``."""
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    ax.figure.tight_layout()


def write_report(out: str | Path, name: str, report: Report, results: Sequence[TrialResult],
                 params: dict[str, Any], command: str) -> dict[str, Path]:
    """Write ``OUT/NAME/NAME.md`` (command, parameters, tables, timings), ``OUT/NAME/NAME.png``
    (the figure, when there is one) and ``OUT/NAME/trials.json`` (every trial's numbers).

    Returns
    -------
    dict
        The written paths by kind (``"markdown"``, ``"figure"``, ``"trials"``).
    """
    folder = Path(out) / name
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": folder / f"{name}.md", "trials": folder / "trials.json"}
    text = [f"# {name}", "", f"Command: `{command}`", "",
            "Parameters: `" + json.dumps(params, sort_keys=True) + "`", "", report.tables, ""]
    if report.timings:
        text += ["Wall times (vary between runs and machines):", "", report.timings, ""]
    if report.figure is not None:
        import matplotlib.pyplot as plt

        paths["figure"] = folder / f"{name}.png"
        report.figure.savefig(paths["figure"], dpi=110)
        plt.close(report.figure)
        text += [f"![{name}]({name}.png)", ""]
    paths["markdown"].write_text("\n".join(text))
    paths["trials"].write_text(json.dumps(
        [{"settings": r.settings, "seed": r.seed, "values": r.values} for r in results],
        indent=1, sort_keys=True))
    return paths
