"""Live progress: a rich bar on a terminal, a plain line every few seconds otherwise (CI, log files)."""

from __future__ import annotations

import sys
import time


def rate_text(per_second: float, unit: str) -> str:
    """A rate as people read it: ``12.3 steps/s``, or per minute or hour when slower than one a second or minute
    (an SFT iteration of 40 s is ``1.5 iterations/min``, not ``0.0 iterations/s``)."""
    for per, scale in (("s", 1.0), ("min", 60.0)):
        if per_second * scale >= 1.0:
            return f"{per_second * scale:,.1f} {unit}/{per}"
    return f"{per_second * 3600.0:,.1f} {unit}/h"


def eta_seconds(done: int, total: int, per_second: float) -> float:
    """Seconds until ``total`` at ``per_second`` from ``done``; 0 once done (a stage that overshoots its total by
    part of an iteration is finished, not ``-2 s`` early); infinite before any progress."""
    if done >= total:
        return 0.0
    return (total - done) / per_second if per_second > 0 else float("inf")


class TrainingProgress:
    """Progress of a run towards ``total_steps`` (env steps, or a stage's iterations). ``done``: steps already done
    when it starts (a resumed run), left out of the rate."""

    def __init__(self, total_steps: int, description: str, plain_every_s: float = 10.0, unit: str = "steps",
                 done: int = 0, metric: str = "success"):
        self.total = total_steps
        self.metric = metric
        self.unit = unit
        self.done_at_start = done
        self.start = time.monotonic()
        self.last_plain = 0.0
        self.plain_every_s = plain_every_s
        self.interactive = sys.stderr.isatty()
        self.success = float("nan")
        self.bar = None
        if self.interactive:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                TextColumn("{task.completed:,}/{task.total:,} " + unit),
                                TextColumn("{task.fields[rate]}"),
                                TextColumn(metric + " {task.fields[success]}"), TimeRemainingColumn(),
                                transient=False)
            self.bar.start()
            self.task = self.bar.add_task(description, total=total_steps, completed=done, rate="-", success="-")

    def update(self, steps: int, success: float | None = None) -> None:
        if success is not None:
            self.success = success
        elapsed = time.monotonic() - self.start
        if self.bar is not None:
            self.bar.update(self.task, completed=steps, rate=rate_text(self._rate(steps, elapsed), self.unit),
                            success=self._success_text())
        elif time.monotonic() - self.last_plain >= self.plain_every_s or steps >= self.total:
            self.last_plain = time.monotonic()
            print(self.line(steps, elapsed), file=sys.stderr, flush=True)

    def _rate(self, steps: int, elapsed: float) -> float:
        return max(steps - self.done_at_start, 0) / max(elapsed, 1e-9)

    def _success_text(self) -> str:
        if self.success != self.success:
            return "-"
        return f"{self.success:.2f}" if abs(self.success) < 10 else f"{self.success:.1f}"

    def line(self, steps: int, elapsed: float) -> str:
        """The plain progress line at ``steps`` after ``elapsed`` seconds of this process."""
        rate = self._rate(steps, elapsed)
        eta = eta_seconds(steps, self.total, rate)
        return (f"{self.unit} {steps:,}/{self.total:,}  {rate_text(rate, self.unit)}  eval {self.metric} "
                f"{self._success_text()}  elapsed {elapsed:,.0f}s  eta {eta:,.0f}s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


class CountProgress:
    """Progress over ``total`` items (demos, episodes): a rich bar on a terminal, a plain line every few seconds
    otherwise. ``update(done, note)`` shows the rate per minute and a short note (e.g. ``12/13 succeeded``)."""

    def __init__(self, total: int, description: str, unit: str, plain_every_s: float = 10.0):
        self.total = total
        self.unit = unit
        self.start = time.monotonic()
        self.last_plain = 0.0
        self.plain_every_s = plain_every_s
        self.bar = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                TextColumn("{task.completed:,}/{task.total:,} " + unit),
                                TextColumn("{task.fields[rate]:,.1f} " + unit + "/min"),
                                TextColumn("{task.fields[note]}"), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=False)
            self.bar.start()
            self.task = self.bar.add_task(description, total=total, rate=0.0, note="")

    def update(self, done: int, note: str = "") -> None:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        per_minute = 60.0 * done / elapsed
        if self.bar is not None:
            self.bar.update(self.task, completed=done, rate=per_minute, note=note)
        elif time.monotonic() - self.last_plain >= self.plain_every_s or done >= self.total:
            self.last_plain = time.monotonic()
            print(f"{done:,}/{self.total:,} {self.unit}  {per_minute:,.1f} {self.unit}/min  {note}  "
                  f"elapsed {elapsed:,.0f}s", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
