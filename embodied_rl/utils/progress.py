"""Live progress: a rich bar on a terminal, a plain line every few seconds otherwise (CI, log files)."""

from __future__ import annotations

import sys
import time


class TrainingProgress:
    def __init__(self, total_steps: int, description: str, plain_every_s: float = 10.0, unit: str = "steps"):
        self.total = total_steps
        self.unit = unit
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
                                TextColumn("{task.fields[rate]:,.1f} " + unit + "/s"),
                                TextColumn("success {task.fields[success]}"), TimeRemainingColumn(),
                                transient=False)
            self.bar.start()
            self.task = self.bar.add_task(description, total=total_steps, rate=0.0, success="-")

    def update(self, steps: int, success: float | None = None) -> None:
        if success is not None:
            self.success = success
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = steps / elapsed
        success_text = "-" if self.success != self.success else f"{self.success:.2f}"
        if self.bar is not None:
            self.bar.update(self.task, completed=steps, rate=rate, success=success_text)
        elif time.monotonic() - self.last_plain >= self.plain_every_s or steps >= self.total:
            self.last_plain = time.monotonic()
            eta = (self.total - steps) / rate if rate > 0 else float("inf")
            print(f"{self.unit} {steps:,}/{self.total:,}  {rate:,.1f} {self.unit}/s  eval success {success_text}  "
                  f"elapsed {elapsed:,.0f}s  eta {eta:,.0f}s", file=sys.stderr, flush=True)

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
