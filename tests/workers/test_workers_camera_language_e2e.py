"""A real short PPO run on PushCube with camera observations (env.obs_mode=rgb) and the cnn policy: images and the
task's instruction go env worker -> rollout worker -> channel -> actor, and the actor trains on them."""

import json

import numpy as np
import pytest

import sim_envs
from embodied_rl.config import load_train_config
from embodied_rl.runners import setup
from embodied_rl.runners.embodied import EmbodiedRunner
from embodied_rl.utils.checkpoint import list_checkpoints, load_checkpoint
from embodied_rl.workers.actor_worker import ActorWorker

TINY_RGB = ["env.obs_mode=rgb", "policy.name=cnn", "env.num_workers=1", "env.envs_per_worker=2",
            "rollout.steps_per_iteration=8", "total_env_steps=32", "env.max_episode_steps=8",
            "algorithm.num_minibatches=2", "algorithm.update_epochs=2", "eval.num_episodes=2",
            "eval.every_iterations=0", "checkpoint.every_iterations=0", "policy.hidden_sizes=[32]", "seed=3"]


def _recording_actor(record_path: str) -> type:
    """An actor worker that writes down the observations of every update's training samples (a class defined
    here, so Ray pickles it by value into the actor's process)."""

    class RecordingActorWorker(ActorWorker):
        def _optimize(self, samples: dict) -> dict:
            obs = samples["obs"]
            record = {k: {"type": type(v).__name__, "dtype": str(v.dtype), "shape": list(v.shape)}
                      for k, v in obs.items()}
            record["instructions"] = sorted(set(obs["instruction"].tolist()))
            record["rgb_std"] = float(obs["rgb"].float().std())
            with open(record_path, "a") as file:
                file.write(json.dumps(record) + "\n")
            return super()._optimize(samples)

    return RecordingActorWorker


@pytest.mark.slow  # 85-110 s on 2 busy cores (load 12-16), most of it the env worker's first camera env (lavapipe pipeline builds)
def test_cnn_trains_on_camera_images_and_the_actor_receives_the_instruction(cluster, tmp_path, monkeypatch):
    record_path = tmp_path / "actor_received.jsonl"
    monkeypatch.setattr(setup, "ActorWorker", _recording_actor(str(record_path)))
    config = load_train_config("maniskill_pushcube", None, TINY_RGB)
    final_eval = EmbodiedRunner(config, tmp_path / "run").run()

    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in rows] == [16, 32] and rows[-1]["train/policy_version"] == 2
    assert all(np.isfinite(r["train/policy_loss"]) and r["train/gradient_steps"] > 0 for r in rows)
    assert final_eval["eval/episodes"] == 2 and final_eval["eval/episode_length"] == 8

    received = [json.loads(line) for line in record_path.read_text().splitlines()]
    assert len(received) == 2  # one per update
    for record in received:  # 2 envs x 8 steps per update, flattened
        assert record["rgb"] == {"type": "Tensor", "dtype": "torch.uint8", "shape": [16, 64, 64, 3]}
        assert record["state"]["type"] == "Tensor" and record["state"]["shape"][0] == 16
        assert record["instruction"]["type"] == "ndarray" and record["instruction"]["shape"] == [16]
        assert record["instructions"] == [sim_envs.get_task("maniskill_pushcube").instruction]
        assert record["rgb_std"] > 1.0  # rendered scenes, not blank buffers

    spec = load_checkpoint(list_checkpoints(tmp_path / "run" / "checkpoints")[-1]).counters["policy_spec"]
    assert spec["name"] == "cnn" and spec["obs_shapes"]["rgb"] == [64, 64, 3]
    rates = [r["time/sample_steps_per_s"] for r in rows]
    print(f"rgb sampling: {', '.join(f'{x:.1f}' for x in rates)} env steps/s (1 env worker x 2 envs, 64x64 camera); "
          f"elapsed {rows[-1]['time/elapsed_s']:.1f} s")
