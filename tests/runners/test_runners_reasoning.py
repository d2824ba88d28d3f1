"""`embodied-rl train --task math_arith` end to end on the runtime: SFT, then GRPO, held-out evaluations,
checkpoints and a model directory loadable through the same code as a real checkpoint; bad options are one line."""

import json

import pytest

from conftest import run_cli

SMALL = ["env.count=200", "env.heldout_count=20", "sft.steps=20", "sft.batch_size=16", "rl.iterations=2",
         "rl.prompts_per_iteration=4", "algorithm.group_size=4", "eval.every_iterations=1", "eval.num_problems=8",
         "rollout.max_new_tokens=4", "torch_threads=1"]


@pytest.mark.slow
def test_math_arith_trains_sft_then_grpo_and_writes_a_loadable_model(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("train", "--task", "math_arith", "--run-dir", str(run_dir), *SMALL, "eval.samples_per_problem=3",
                     "eval.dump_samples=4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iterations"] == 2 and summary["responses"] == 2 * 4 * 4
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert "eval/start/heldout_accuracy" in rows[0] and rows[1]["sft/loss"] < rows[1]["sft/first_loss"]
    rl = [r for r in rows if r.get("train/iteration", 0) >= 1]
    assert [r["train/iteration"] for r in rl] == [1, 2] and all("eval/heldout_accuracy" in r for r in rl)
    assert all(0 <= r["train/reward"] <= 1 and r["train/rollout_trainer_logp_diff"] < 1e-3 for r in rl)
    assert all(0 <= r["train/truncated_fraction"] <= 1 and r["train/response_length_max"] <= 4 for r in rl)
    for r in rl:  # k = 3 samples per held-out problem: pass@3 >= mean@3, and maj@3 is a fraction of the problems
        assert 0 <= r["eval/mean_at_3"] <= r["eval/pass_at_3"] <= 1 and 0 <= r["eval/maj_at_3"] <= 1
        assert 0 <= r["eval/truncated_fraction"] <= 1
    dumps = sorted(p.name for p in (run_dir / "samples").iterdir())
    assert dumps == ["eval_iter000001.jsonl", "eval_iter000002.jsonl", "eval_sft_iter000000.jsonl",
                     "eval_start_iter000000.jsonl"]
    sample = [json.loads(line) for line in (run_dir / "samples" / dumps[0]).read_text().splitlines()]
    assert len(sample) == 4 and {"question", "response", "extracted", "correct", "finished"} <= set(sample[0])
    assert (run_dir / "checkpoints" / "iter_000002" / "model.safetensors").is_file()
    from embodied_rl.models.causal_lm.loading import load_causal_lm

    model, tokenizer = load_causal_lm(run_dir / "model")
    assert tokenizer.apply_chat_template([{"role": "user", "content": "1+1"}], tokenize=False,
                                         add_generation_prompt=True) == "Q: 1+1\nA: "


@pytest.mark.parametrize("override, key", [("rl.iterations=-1", "rl.iterations"),
                                           ("model.name=/no/such/model", "model.name"),
                                           ("algorithm.name=ppo9", "algorithm.name"),
                                           ("env.colour=red", "colour"),
                                           ("rollout.engine=trt", "rollout.engine"),
                                           ("actor.world_size=2", "actor.world_size")])
def test_bad_reasoning_options_are_one_line_and_write_nothing(tmp_path, override, key):
    result = run_cli("train", "--task", "math_arith", "--run-dir", str(tmp_path / "run"), override, cwd=tmp_path)
    assert result.returncode == 2 and key in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_sft_lifts_held_out_accuracy_of_the_tiny_model(tmp_path):
    """A real short run: 800 SFT steps of the tiny Llama on two-digit a + b and a - b (about 30 s here) take
    greedy held-out accuracy on 100 problems from 0 to 0.10 (measured at seeds 0, 1, 2: 0.10, 0.07, 0.08); the
    test asks for 0.04."""
    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.reasoning import ReasoningRunner

    config = load_reasoning_config("math_arith", None, ["sft.steps=800", "rl.iterations=0",
                                                        "eval.num_problems=100"])
    evaluations = ReasoningRunner(config, tmp_path).run()
    assert evaluations["eval/start/heldout_accuracy"] == 0.0
    assert evaluations["eval/sft/heldout_accuracy"] >= 0.04
