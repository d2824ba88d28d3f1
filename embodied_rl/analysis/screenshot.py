"""A page as a real headless browser draws it: Chromium's ``--headless --screenshot`` (the Debian package
``chromium``, which ``scripts/install_system_deps.sh test`` installs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from embodied_rl.config.errors import ConfigError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    """``$CHROME`` if set, else the first Chromium-family browser on ``PATH``."""
    if os.environ.get("CHROME"):
        return os.environ["CHROME"]
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    return None


def screenshot(page: Path, out: Path, width: int = 1400, height: int = 2600, timeout_s: float = 120.0) -> Path:
    """A PNG of ``page`` (an HTML file) at ``width`` x ``height`` CSS pixels, written to ``out``."""
    browser = find_browser()
    if browser is None:
        raise ConfigError("--screenshot needs a Chromium browser; install it (Debian/Ubuntu: apt-get install "
                          "chromium) or set CHROME to one")
    out = Path(out).resolve()
    with tempfile.TemporaryDirectory(prefix="erl-browser-") as profile:
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                   "--hide-scrollbars", "--mute-audio", "--no-first-run", f"--user-data-dir={profile}",
                   f"--window-size={width},{height}", f"--screenshot={out}", Path(page).resolve().as_uri()]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if result.returncode != 0 or not out.is_file():
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{browser} did not write a screenshot (exit {result.returncode}): {last}")
    return out
