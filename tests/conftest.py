"""Shared fixtures: one local Ray cluster per test session, and process-leak checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("MS_SKIP_ASSET_DOWNLOAD_PROMPT", "1")


@pytest.fixture(scope="session")
def cluster():
    from embodied_rl.runtime import Cluster

    with Cluster(num_cpus=2) as running:
        yield running


@pytest.fixture
def one_torch_thread():
    """Model tests on a busy 2-core machine: torch threads fighting other processes run many times slower than one
    (use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run_cli(*args: str, env: dict | None = None, timeout: float = 600, cwd: Path | None = None):
    """Run the real ``embodied-rl`` entry point in a subprocess."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "embodied_rl.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=cwd or REPO)
