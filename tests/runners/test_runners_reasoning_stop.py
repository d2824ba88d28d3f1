"""An interrupted reasoning run (Ctrl-C or SIGTERM: a KeyboardInterrupt in the driver) leaves a stop checkpoint at
an iteration's boundary, whichever step the interrupt cut, and ``--resume`` from it continues bit for bit: the
final weights equal the uninterrupted run's."""

import pytest
import torch
from safetensors.torch import load_file

from test_runners_reasoning_resume import SMALL, _rows

OVERRIDES = [o for o in SMALL if not o.startswith("checkpoint.")] + ["checkpoint.every_iterations=0"]


def _final_weights(run_dir) -> dict:
    return load_file(str(run_dir / "model" / "model.safetensors"))


@pytest.fixture(scope="module")
def whole(tmp_path_factory, cluster):
    """The uninterrupted run's directory."""
    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.reasoning import ReasoningRunner

    run_dir = tmp_path_factory.mktemp("whole")
    ReasoningRunner(load_reasoning_config("math_arith", None, OVERRIDES), run_dir).run()
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize("cut", ["sampling", pytest.param("update", marks=pytest.mark.heavy)])  # heavy: CI time
def test_a_stopped_text_run_resumes_from_its_stop_checkpoint_bit_for_bit(tmp_path, cluster, whole, cut):
    from embodied_rl.config.reasoning import load_reasoning_config
    from embodied_rl.runners.reasoning import ReasoningRunner
    from embodied_rl.utils.checkpoint import is_stop_checkpoint, load_checkpoint

    stopped = tmp_path / "stopped"
    runner = ReasoningRunner(load_reasoning_config("math_arith", None, OVERRIDES), stopped)
    # the third iteration, cut once its round was scored (the sampler has drawn the next prompts) but before its
    # update began, or once the update has begun
    method = "_score" if cut == "sampling" else "start_update"
    real = getattr(runner, method)

    def interrupted(*args):
        result = real(*args)
        if runner.iteration == 2:
            raise KeyboardInterrupt("signal 2")
        return result

    setattr(runner, method, interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    checkpoint = load_checkpoint(stopped)
    assert is_stop_checkpoint(checkpoint.path) and checkpoint.counters["stop_reason"] == "interrupt"
    # cut while sampling: the checkpoint is of the two finished iterations; once updating: of the third too
    assert checkpoint.counters["iteration"] == (2 if cut == "sampling" else 3)
    assert checkpoint.counters["env_steps"] == checkpoint.counters["iteration"] * 2 * 4  # 2 prompts x 4 answers

    resumed = ReasoningRunner(load_reasoning_config("math_arith", None, OVERRIDES), stopped, checkpoint)
    resumed.run()
    assert resumed.iteration == 4
    # every iteration both runs logged measured the same (the one cut short is not logged by the stopped run)
    def updates(run_dir) -> dict:
        return {r["train/iteration"]: r for r in _rows(run_dir) if "train/gradient_steps" in r}

    rows, expected_rows = updates(stopped), updates(whole)
    assert list(rows) == ([1, 2, 3, 4] if cut == "sampling" else [1, 2, 4])
    assert all(rows[i] == expected_rows[i] for i in rows)
    expected, got = _final_weights(whole), _final_weights(stopped)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
