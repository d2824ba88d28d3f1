"""Curves of a report as PNG bytes (matplotlib, no display): one metric against env steps or wall time, one colour
per setting: each seed a thin line, the mean over seeds a thick line, the band between the lowest and highest seed
(on the steps every seed reached)."""

from __future__ import annotations

import io

import numpy as np

from embodied_rl.analysis.grouping import Setting
from embodied_rl.analysis.statistics import curves_on_grid

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
"""One per setting, in order (the screenshot test looks for the first two)."""

X_LABELS = {"env_steps": "env steps (stages end to end)", "wall_s": "wall time (s)"}


def colour(index: int) -> str:
    return COLOURS[index % len(COLOURS)]


def plot_metric(settings: list[Setting], key: str, x: str, title: str) -> bytes | None:
    """A PNG of ``key`` against ``x`` (``env_steps`` or ``wall_s``); None when no run logged ``key``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 3.8), dpi=100)
    drawn = False
    try:
        for index, setting in enumerate(settings):
            curves = [run.curve(key, x) for run in setting.runs]
            curves = [(np.asarray(xs), np.asarray(ys)) for xs, ys in curves if xs]
            if not curves:
                continue
            drawn = True
            c = colour(index)
            label = f"{setting.label} ({len(curves)} seed{'s' if len(curves) > 1 else ''})"
            if len(curves) == 1 or min(len(xs) for xs, _ in curves) < 2:
                for n, (xs, ys) in enumerate(curves):
                    axes.plot(xs, ys, "o-", color=c, linewidth=1.5, markersize=4, label=label if n == 0 else None)
                continue
            for xs, ys in curves:
                axes.plot(xs, ys, color=c, linewidth=0.8, alpha=0.35)
            try:
                grid, values = curves_on_grid([(xs, ys) for xs, ys in curves], points=100)
            except ValueError:  # the seeds' steps do not overlap: seeds only
                continue
            axes.fill_between(grid, values.min(axis=0), values.max(axis=0), color=c, alpha=0.18, linewidth=0)
            axes.plot(grid, values.mean(axis=0), color=c, linewidth=2.2, label=label + ", mean; band: min-max")
        if not drawn:
            return None
        axes.set_title(title, fontsize=11)
        axes.set_xlabel(X_LABELS.get(x, x))
        axes.set_ylabel(key)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7, loc="best")
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(figure)
