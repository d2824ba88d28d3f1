#!/usr/bin/env bash
# Read a LeRobot dataset that embodied-rl wrote with lerobot's own LeRobotDataset (lerobot 0.4.4, in a separate
# virtual environment) and compare every frame's camera images, state, action, reward, success, indices and task
# with what our reader (embodied_rl/datasets/lerobot) returns. Prints one line per feature and exits non-zero on
# any difference.
#
#   scripts/check_lerobot_reader.sh DATASET_DIR
#
# Why a separate venv: lerobot 0.4.4 needs numpy 2 (ManiSkill's mplib needs numpy < 2). How it is built:
#   * lerobot imports torchvision at module level, and no torchvision imports beside torch 2.13.0+cpu ("operator
#     torchvision::nms does not exist"), so the venv takes the torch/torchvision pair that works on this machine
#     class: torch 2.14.1 + torchvision 0.29.1 (a CUDA build that runs on the CPU; on these machines pip takes
#     both from the local wheel store, elsewhere it downloads several GB). Set TORCH_SPECS to choose others.
#   * lerobot 0.4.4 itself is installed with --no-deps (its own pins would pull torch < 2.11 from the registry),
#     then the packages its dataset reader imports: datasets, huggingface-hub, accelerate, av, and torchcodec for
#     torch 2.14 (0.14; torchvision 0.29 has no video reader, so torchcodec is lerobot's only video decoder here).
#   * torchcodec loads the system's FFmpeg libraries; on Debian they are installed with apt-get when missing.
# Environment: LEROBOT_VENV (default /tmp/lerobot-venv), PROJECT_PYTHON (default .venv/bin/python of this repo).
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 DATASET_DIR" >&2
    exit 2
fi
DATASET=$(cd "$1" && pwd)
REPO=$(cd "$(dirname "$0")/.." && pwd)
VENV=${LEROBOT_VENV:-/tmp/lerobot-venv}
PROJECT_PYTHON=${PROJECT_PYTHON:-$REPO/.venv/bin/python}
TORCH_SPECS=${TORCH_SPECS:-"torch==2.14.1 torchvision==0.29.1"}
TORCHCODEC_SPEC=${TORCHCODEC_SPEC:-"torchcodec==0.14.*"}

if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
fi
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check)
if ! "$VENV/bin/python" -c "import torch, torchvision" >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    "${PIP[@]}" $TORCH_SPECS
fi
if ! "$VENV/bin/python" -c "import lerobot" >/dev/null 2>&1; then
    "${PIP[@]}" --no-deps "lerobot==0.4.4"
fi
if ! "$VENV/bin/python" -c "import datasets, huggingface_hub, accelerate, av, torchcodec" >/dev/null 2>&1; then
    "${PIP[@]}" "datasets>=4.0.0,<5.0.0" "huggingface-hub>=0.34.2,<0.36.0" "accelerate>=1.10.0,<2.0.0" \
        "av>=15.0.0,<16.0.0" "$TORCHCODEC_SPEC"
fi
if ! ldconfig -p | grep -q "libavutil\.so"; then
    if command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
        apt-get install -y -q --no-install-recommends libavutil57 libavcodec59 libavformat59 libavdevice59 \
            libavfilter8 libswscale6 libswresample4 >/dev/null \
            || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends libavutil57 \
                 libavcodec59 libavformat59 libavdevice59 libavfilter8 libswscale6 libswresample4 >/dev/null; }
    else
        echo "torchcodec needs FFmpeg's shared libraries (libavutil ...): install them, then run again" >&2
        exit 1
    fi
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Our reader, in the project's environment: every array to one .npz.
"$PROJECT_PYTHON" - "$DATASET" "$WORK/ours.npz" <<'EOF'
import sys

import numpy as np

from embodied_rl.datasets.lerobot import read_info, read_instructions, read_lerobot_dataset
from embodied_rl.datasets.lerobot.spaces import camera_keys

dataset, out = sys.argv[1], sys.argv[2]
demos = read_lerobot_dataset(dataset, cameras=True)
arrays = dict(obs=demos.obs, actions=demos.actions, episode_index=demos.episode_index, step_index=demos.step_index,
              instructions=np.array(read_instructions(dataset)),
              cameras=np.array(camera_keys(read_info(dataset)["features"])))
for key in ("rgb", "rewards", "success"):
    if getattr(demos, key) is not None:
        arrays[key] = getattr(demos, key)
np.savez(out, **arrays)
print(f"our reader: {demos.num_episodes} episodes, {demos.num_steps} frames, cameras "
      f"{list(arrays['cameras'])}")
EOF

# lerobot's reader, in its own environment, against those arrays.
"$VENV/bin/python" - "$DATASET" "$WORK/ours.npz" <<'EOF'
import sys
import time

import numpy as np
import lerobot
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset

dataset, ours_path = sys.argv[1], sys.argv[2]
ours = np.load(ours_path)
started = time.perf_counter()
ds = LeRobotDataset(repo_id="local/x", root=dataset)
print(f"lerobot {lerobot.__version__} (torch {torch.__version__}, video backend {ds.video_backend}): "
      f"{ds.num_episodes} episodes, {ds.num_frames} frames, fps {ds.fps}, features {list(ds.features)}")
cameras = [str(c) for c in ours["cameras"]]
n = len(ds)
checks = {"frames": n == len(ours["actions"])}
worst = {"observation.state": 0.0, "action": 0.0, "next.reward": 0.0}
images_equal = {camera: 0 for camera in cameras}
flags_equal = tasks_equal = indices_equal = 0
previous_episode = -1
for i in range(n):
    item = ds[i]
    worst["observation.state"] = max(worst["observation.state"],
                                     float(np.abs(item["observation.state"].numpy() - ours["obs"][i]).max()))
    worst["action"] = max(worst["action"], float(np.abs(item["action"].numpy() - ours["actions"][i]).max()))
    if "rewards" in ours:
        worst["next.reward"] = max(worst["next.reward"], abs(float(item["next.reward"]) - float(ours["rewards"][i])))
    if "success" in ours:
        flags_equal += bool(item["next.success"]) == bool(ours["success"][i])
    episode = int(ours["episode_index"][i])
    indices_equal += int(item["frame_index"]) == int(ours["step_index"][i]) and (
        i == 0 or (int(item["episode_index"]) != previous_episode) == (episode != int(ours["episode_index"][i - 1])))
    previous_episode = int(item["episode_index"])
    tasks_equal += item["task"] == str(ours["instructions"][episode])
    for c, camera in enumerate(cameras):
        frame = (item[camera].numpy() * 255.0).round().astype(np.uint8).transpose(1, 2, 0)  # [3, H, W] in [0, 1]
        images_equal[camera] += bool(np.array_equal(frame, ours["rgb"][i, :, :, 3 * c:3 * c + 3]))
ok = checks["frames"]
for key, value in worst.items():
    print(f"{key}: max |lerobot - ours| = {value:.3g} over {n} frames")
    ok &= value == 0.0
for camera, equal in images_equal.items():
    print(f"{camera}: {equal}/{n} frames identical (uint8)")
    ok &= equal == n
if "success" in ours:
    print(f"next.success: {flags_equal}/{n} equal")
    ok &= flags_equal == n
print(f"episode boundaries and frame_index: {indices_equal}/{n} equal; task: {tasks_equal}/{n} equal")
ok &= indices_equal == n and tasks_equal == n
stats = ds.meta.stats or {}
print(f"meta/stats.json: {len(stats)} features, keys {sorted(next(iter(stats.values())).keys()) if stats else []}")
print(f"{'PASS' if ok else 'FAIL'}: lerobot's LeRobotDataset and our reader agree "
      f"({time.perf_counter() - started:.1f} s)")
sys.exit(0 if ok else 1)
EOF
