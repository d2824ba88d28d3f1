#!/usr/bin/env bash
# Every check that needs a GPU, in one go, for the day a GPU machine is lent:
#   bash scripts/gpu_checks.sh            (from the repository root, after install.sh)
# Prints the device, then runs the GPU-marked tests and a short GPU-sim training run.
set -uo pipefail
cd "$(dirname "$0")/.."
python - <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
PY
python -m pytest -q -m gpu -rs
embodied-rl train --task maniskill_pushcube --run-dir "${OUT:-/tmp}/gpu-pushcube" env.backend=gpu \
  env.num_workers=1 env.envs_per_worker=256 rollout.steps_per_iteration=20 total_env_steps=200000 \
  eval.every_iterations=10 eval.num_episodes=64 algorithm.num_minibatches=32
# Full-size VLAs (random weights, bf16, LoRA): forward + backward and peak memory.
python scripts/gpu_vla_checks.py
# A short GPU-sim rollout with a tiny VLA on camera observations (PPO through its value head).
embodied-rl train --task maniskill_pushcube --run-dir "${OUT:-/tmp}/gpu-pushcube-vla" env.backend=gpu \
  env.obs_mode=rgb policy.name=openvla_oft policy.options.action_chunk=8 env.num_workers=1 env.envs_per_worker=64 \
  rollout.steps_per_iteration=48 env.max_episode_steps=48 total_env_steps=12288 eval.every_iterations=0 \
  eval.num_episodes=64 algorithm.num_minibatches=8 algorithm.update_epochs=1
# vLLM and SGLang generation engines (each where installed): greedy and sampled outputs against Hugging Face before
# and after an in-place weight update, and tokens/s.
python scripts/gpu_llm_checks.py
