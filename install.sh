#!/usr/bin/env bash
# One-command setup: system Vulkan driver for ManiSkill3 (and with `test` a headless Chromium), CPU torch pinned,
# then this package.
# Usage: bash install.sh            (the library and CLI)
#        bash install.sh test       (plus the test tools)
set -euo pipefail
cd "$(dirname "$0")"
extras="${1:-}"
bash scripts/install_system_deps.sh "$extras"
python -m pip install -q --upgrade pip
# Exactly 2.13.0 first: on a CPU-only machine a looser requirement resolves to a multi-GB CUDA build.
python -m pip install -q "torch==2.13.0"
if [ -n "$extras" ]; then python -m pip install -q -e ".[$extras]"; else python -m pip install -q -e .; fi
echo "embodied-rl installed: $(command -v embodied-rl)"
