"""Helpers shared by tests (importable because pytest puts tests/ on sys.path)."""

import subprocess


def ray_daemons_now() -> set[int]:
    """PIDs of Ray's node daemons (raylet, gcs_server) on this machine."""
    out = subprocess.run(["pgrep", "-f", "ray/core/src/ray/(raylet|gcs)"], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}
