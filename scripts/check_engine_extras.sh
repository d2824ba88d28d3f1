#!/usr/bin/env bash
# Whether each generation-engine extra resolves beside this project's own pins, without installing anything:
#   bash scripts/check_engine_extras.sh        (needs the package index; a few minutes: pip reads CUDA wheels' metadata)
# For each: `pip install --dry-run` of the project with the extra in a scratch venv, then the torch, transformers and
# numpy it would install, or pip's conflict. vllm is tried as a user would ask for it (no extra exists: see
# pyproject.toml), pinned to the release the engine adapter was written against.
set -uo pipefail
cd "$(dirname "$0")/.."
scratch="$(mktemp -d)"
python3.11 -m venv "$scratch/venv" && . "$scratch/venv/bin/activate"
python -m pip install -q --upgrade pip
status=0
for request in ".[sglang]" ". vllm==0.33.0"; do
  echo "=== pip install --dry-run $request"
  # shellcheck disable=SC2086
  if python -m pip install --dry-run --ignore-installed --report "$scratch/report.json" -e $request \
      > "$scratch/log" 2>&1; then
    python - "$scratch/report.json" <<'PY'
import json, sys
installs = {p["metadata"]["name"].lower(): p["metadata"]["version"] for p in json.load(open(sys.argv[1]))["install"]}
print("resolves:", ", ".join(f"{k} {installs[k]}" for k in ("torch", "transformers", "numpy", "sglang", "vllm")
                             if k in installs))
PY
  else
    status=1
    echo "does not resolve:"
    grep -E "embodied-rl[^ ]* [0-9.]+ depends on numpy|opencv-python-headless .* depends on numpy>=2" "$scratch/log" \
      | sort -u | head -4
  fi
done
rm -rf "$scratch"
exit $status
