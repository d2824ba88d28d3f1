import json
import os

import pytest

from conftest import run_cli


def _one_json_line(result) -> dict:
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


# Left out of the default run (CI time; pytest -m heavy runs it):
# the placement modes themselves are tested in
# test_runners_collocated_turns.
@pytest.mark.heavy
@pytest.mark.slow
def test_bench_placement_reports_every_mode_with_ratios_and_time_shares(tmp_path):
    # the transformer policy here; the full-loop test below runs the MLP
    report = _one_json_line(run_cli("bench", "placement", "--task", "maniskill_pushcube", "--envs-per-worker", "2",
                                    "--steps", "4", "--repeats", "1", "--policies", "transformer", "--json",
                                    cwd=tmp_path))
    assert set(report["policies"]) == {"transformer"}
    for row in report["policies"].values():
        rates = row["env_steps_per_s"]
        split = "disaggregated" if (os.cpu_count() or 1) >= 3 else "hybrid_split"  # 3 components need 3 cores
        assert set(rates) == {"collocated", split, "hybrid_pipelined"} and min(rates.values()) > 0
        assert row[f"hybrid_pipelined_over_{split}"] == pytest.approx(
            rates["hybrid_pipelined"] / rates[split], rel=1e-2)
        for mode, derived in row["derived_modes"].items():  # each run named for the mode Placement derives
            assert derived.startswith(f"placement {mode.split('_')[0]} ")
        for shares in row["time_shares"].values():
            assert 0 < shares["env_simulating"] < 1 and 0 < shares["rollout_inferring"] < 1
            assert shares["env_simulating"] + shares["env_waiting_for_actions"] <= 1.0 + 1e-3


def test_bench_placement_rejects_a_single_env_per_process(tmp_path):
    result = run_cli("bench", "placement", "--task", "maniskill_pushcube", "--envs-per-worker", "1", cwd=tmp_path)
    assert result.returncode == 2 and "--envs-per-worker must be >= 2" in result.stderr
    assert "Traceback" not in result.stderr


# Left out of the default run (CI time; pytest -m heavy runs it):
# a bench end to end; the transports are tested in tests/runtime
@pytest.mark.heavy
@pytest.mark.slow
def test_bench_channel_measures_every_transport_against_copy_and_ray(tmp_path):
    # 100 MB messages take most of the bench's time; the README's figures come from a full run.
    report = _one_json_line(run_cli("bench", "channel", "--repeats", "1", "--sizes", "1KB,1MB", "--json",
                                    cwd=tmp_path))
    assert set(report["sizes"]) == {"1KB", "1MB"}
    for row in report["sizes"].values():
        bandwidth = row["bandwidth_GBps"]
        assert set(bandwidth) == {"in_process_copy", "socket", "shared_memory", "shared_memory_by_reference",
                                  "gloo_point_to_point", "ray_object_store"}
        assert min(bandwidth.values()) > 0 and min(row["one_way_latency_ms"].values()) > 0
        assert row["shared_memory_over_ray_object_store"] == pytest.approx(
            bandwidth["shared_memory"] / bandwidth["ray_object_store"], rel=2e-2)
        assert row["gloo_point_to_point_over_socket"] == pytest.approx(
            bandwidth["gloo_point_to_point"] / bandwidth["socket"], rel=2e-2)


def test_bench_channel_refuses_an_unknown_size_with_one_line(tmp_path):
    result = run_cli("bench", "channel", "--sizes", "1KB,2GB", cwd=tmp_path)
    assert result.returncode == 2 and "--sizes='1KB,2GB'; allowed: a comma list of 1KB, 1MB, 10MB, 100MB" in \
        result.stderr
    assert "Traceback" not in result.stderr
    result = run_cli("bench", "channel", "--nodes", "3", cwd=tmp_path)
    assert result.returncode == 2 and "--nodes=3; allowed: 1, 2" in result.stderr and "Traceback" not in result.stderr


def test_bench_placement_refuses_an_unknown_policy_with_one_line(tmp_path):
    result = run_cli("bench", "placement", "--policies", "mlp,resnet", cwd=tmp_path)
    assert result.returncode == 2 and "--policies='mlp,resnet': allowed:" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.heavy  # left out of the default run (CI time): pytest -m heavy
def test_bench_placement_full_loop_times_updates_and_labels_runs_as_placement_derives_them(tmp_path):
    report = _one_json_line(run_cli("bench", "placement", "--task", "maniskill_pushcube", "--envs-per-worker", "2",
                                    "--steps", "8", "--repeats", "1", "--policies", "mlp", "--full-loop", "--auto",
                                    "--json", cwd=tmp_path))
    assert report["measured"].startswith("full training iterations")
    row = report["policies"]["mlp"]
    rates = row["env_steps_per_s"]
    auto_rate = rates[row["auto_chose"] if row["auto_chose"] in rates else "auto"]
    assert row["auto_over_best_preset"] == pytest.approx(auto_rate / rates[row["best_preset"]], rel=1e-2)
    assert "chose " in row["auto_report"] and "predicted" in row["auto_report"]
    for mode, shares in row["time_shares"].items():
        assert 0 < shares["update_s"] < shares["iteration_s"]
        assert row["derived_modes"][mode].startswith("placement ")
    assert "2 pipeline stages" in row["derived_modes"]["hybrid_pipelined"]


def test_bench_placement_auto_needs_the_full_loop(tmp_path):
    result = run_cli("bench", "placement", "--task", "maniskill_pushcube", "--auto", cwd=tmp_path)
    assert result.returncode == 2 and "--auto needs --full-loop on an embodied task" in result.stderr
    assert "Traceback" not in result.stderr
