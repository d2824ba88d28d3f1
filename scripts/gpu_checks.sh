#!/usr/bin/env bash
# Every check that needs a GPU, in one go, for the day a GPU machine is lent:
#   bash scripts/gpu_checks.sh            (from the repository root; after install.sh, or on a bare image with
#                                          torch, transformers, peft and safetensors, where the checks that need
#                                          Ray or ManiSkill say SKIP with the missing module)
# One PASS / FAIL / SKIP line per check at the end; exit 1 if any check failed. Logs under ${OUT:-/tmp}.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$(pwd)" PYTHONUNBUFFERED=1
LOGS="${OUT:-/tmp}"
RESULTS=()
FAILED=0

# check NAME "module module ..." command...: runs the command if every module imports, else SKIP naming the first
# missing one.
check() {
  local name="$1" modules="$2"
  shift 2
  for module in $modules; do
    if ! python -c "import $module" >/dev/null 2>&1; then
      RESULTS+=("SKIP $name: python module $module is not installed")
      return
    fi
  done
  echo "=== $name: $*"
  local start=$SECONDS
  if "$@" 2>&1 | tee "$LOGS/gpu-$name.log"; then
    RESULTS+=("PASS $name ($((SECONDS - start)) s)")
  else
    RESULTS+=("FAIL $name ($((SECONDS - start)) s): see $LOGS/gpu-$name.log")
    FAILED=1
  fi
}

python - <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
PY

# Full-size OpenVLA-OFT and Pi0 in bf16 (LoRA 32): act, evaluate + backward, an Adam step, the weight sync's payload
# and a checkpoint with its reload, each asserted; times and peak memory per phase.
check vla-full "torch transformers peft safetensors" python scripts/gpu_vla_checks.py
# A tiny Qwen2 saved in bf16 on the GPU: float32 masters under autocast, chunked log-probs, AdamW, LoRA merging, HF
# sampling that ignores the checkpoint's generation_config.
check lm-mixed "torch transformers peft tokenizers" python scripts/gpu_lm_checks.py
# The GPU-marked tests (CUDA IPC, offload, devices of workers, NCCL collectives, the GPU simulator).
check pytest-gpu "ray mani_skill pytest" python -m pytest -q -m gpu -rs
# A short GPU-sim training run (PPO, 256 envs).
check pushcube-gpu-sim "ray mani_skill" embodied-rl train --task maniskill_pushcube --run-dir "$LOGS/gpu-pushcube" \
  env.backend=gpu env.num_workers=1 env.envs_per_worker=256 rollout.steps_per_iteration=20 total_env_steps=200000 \
  eval.every_iterations=10 eval.num_episodes=64 algorithm.num_minibatches=32
# A short GPU-sim rollout with a tiny VLA in bf16 on camera observations (PPO through its value head), checkpointed.
check pushcube-vla-bf16 "ray mani_skill" embodied-rl train --task maniskill_pushcube \
  --run-dir "$LOGS/gpu-pushcube-vla" env.backend=gpu env.obs_mode=rgb policy.name=openvla_oft \
  policy.options.dtype=bfloat16 policy.options.action_chunk=8 env.num_workers=1 env.envs_per_worker=64 \
  rollout.steps_per_iteration=48 env.max_episode_steps=48 total_env_steps=12288 eval.every_iterations=0 \
  eval.num_episodes=64 algorithm.num_minibatches=8 algorithm.update_epochs=1
# The channel's CUDA IPC route between two processes on one GPU (trajectory-sized tensors: bytes equal, no host copy,
# memory kept while the receiver holds them and released after), against the host route; torch alone.
check channel-cuda-ipc "torch" python scripts/gpu_channel_checks.py
# vLLM and SGLang generation engines (each where installed): greedy and sampled outputs against Hugging Face before
# and after an in-place weight update, and tokens/s.
check llm-engines "ray transformers" python scripts/gpu_llm_checks.py

echo "=== summary"
printf '%s\n' "${RESULTS[@]}"
exit $FAILED
