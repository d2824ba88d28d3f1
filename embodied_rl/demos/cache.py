"""Demonstrations cached on disk: ``<root>/<task>/<source>-<control_mode>-<obs>-<N>-seed<S>/``.

A directory holds the ManiSkill trajectory files and ``manifest.json`` (the request and how it was made). It is
generated in a hidden staging directory beside it and renamed into place when complete, so a directory that
exists is whole; a second equal request finds it and generates nothing. Equal requests racing each other both
generate; the first to finish is kept.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from embodied_rl.demos.generate import DemoResult, DemoStats, ResolvedRequest, generate_demos
from embodied_rl.utils.atomic import publish_directory, write_text_atomic

MANIFEST_FILE = "manifest.json"


def default_cache_root() -> Path:
    """``$XDG_CACHE_HOME/embodied-rl/demos`` (``~/.cache/embodied-rl/demos``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "embodied-rl" / "demos"


def demos_directory(resolved: ResolvedRequest, root: Path | None = None) -> Path:
    return Path(root or default_cache_root()) / resolved.request.task / resolved.cache_name


def read_cached(resolved: ResolvedRequest, root: Path | None = None) -> DemoResult | None:
    """The cached demos of this request, or None if there are none (or they were made for another request)."""
    directory = demos_directory(resolved, root)
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("request") != resolved.describe() or not (directory / manifest["trajectory"]).is_file():
        return None
    known = set(DemoStats.__dataclass_fields__)
    stats = DemoStats(**{k: v for k, v in manifest.get("stats", {}).items() if k in known})
    return DemoResult(directory, manifest["trajectory"], manifest["source_trajectory"], manifest["request"]["env_id"],
                      manifest["request"]["obs_mode"], manifest["request"]["control_mode"], stats)


def ensure_demos(resolved: ResolvedRequest, root: Path | None = None,
                 on_attempt: Callable[[DemoStats], None] | None = None) -> tuple[DemoResult, bool]:
    """The demos of ``resolved``: from the cache, or generated and published there. Returns (result, cache_hit)."""
    cached = read_cached(resolved, root)
    if cached is not None:
        return cached, True
    final = demos_directory(resolved, root)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".staging-{final.name}-"))
    staging.chmod(0o755)
    try:
        result = generate_demos(resolved, staging, on_attempt)
        manifest = dict(request=resolved.describe(), trajectory=result.trajectory,
                        source_trajectory=result.source_trajectory, stats=asdict(result.stats),
                        demos_per_minute=round(result.stats.demos_per_minute, 2),
                        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        write_text_atomic(staging / MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")
        winner = read_cached(resolved, root)  # an equal request finished while we worked: keep its files
        if winner is not None:
            shutil.rmtree(staging, ignore_errors=True)
            return winner, True
        publish_directory(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    result.directory = final
    return result, False
