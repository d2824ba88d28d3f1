"""robosuite tasks through ``sim_envs.make``: real robosuite and MuJoCo, no mocks. Envs are built once per module
(a robosuite scene takes ~2-4 s to build)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sim_envs
from sim_envs.robosuite.scripted import SCRIPTS
from sim_envs.robosuite.tasks import INSTRUCTIONS, task_name

CONFIGS = Path(__file__).resolve().parents[3] / "embodied_rl" / "configs"


@pytest.fixture(scope="module")
def lift():
    env = sim_envs.make("robosuite_lift", 2, seed=7)
    yield env
    env.close()


def test_the_single_arm_tasks_are_builtin_robosuite_tasks_with_instructions_and_recipes():
    names = [task_name(env_id) for env_id in INSTRUCTIONS]
    assert set(names) <= set(sim_envs.list_tasks()) and len(names) == 13
    assert {"robosuite_lift", "robosuite_door", "robosuite_nut_assembly_square", "robosuite_pick_place_can",
            "robosuite_tool_hang", "robosuite_wipe", "robosuite_stack"} <= set(names)
    entry = sim_envs.get_task("robosuite_nut_assembly_square")
    assert (entry.simulator, entry.env_id, entry.builtin) == ("robosuite", "NutAssemblySquare", True)
    assert entry.instruction == "fit the square nut onto the square peg"
    for name in names + ["robosuite"]:
        assert (CONFIGS / f"{name}.yaml").is_file(), name


def test_state_shapes_dtypes_reward_and_the_benchmark_horizon(lift):
    obs = lift.reset()
    assert obs.shape == (2, 60) and obs.dtype == np.float32  # object-state [10] + Panda proprio-state [50]
    assert lift.single_action_shape == (7,) and lift.max_episode_steps == 500  # osc_pose + grip
    batch = lift.step(np.zeros((2, 7), np.float32))
    assert batch.obs.shape == (2, 60) and batch.rewards.dtype == np.float32 and batch.success.dtype == bool
    assert np.all((batch.rewards > 0) & (batch.rewards <= 1))  # shaped reward at reward_scale=1: reaching > 0
    assert not batch.terminated.any() and not batch.truncated.any()


def test_a_seed_gives_one_initial_state_across_evaluations(lift):
    first = lift.reset(state_ids=[100, 101])
    cube = first[:, :3]  # cube_pos leads the object-state
    assert not np.allclose(cube[0], cube[1])  # robosuite's placement
    rng = np.random.default_rng(0)
    for _ in range(5):  # an evaluation moves the arm and the cube ...
        lift.step(rng.uniform(-1, 1, (2, 7)).astype(np.float32))
    again = lift.reset(state_ids=[101, 100])  # ... the next one starts from the same states
    assert np.array_equal(again[0], first[1]) and np.array_equal(again[1], first[0])
    same = lift.reset(state_ids=[100, 100])  # one state id, one initial state
    assert np.array_equal(same[0], first[0]) and np.array_equal(same[1], first[0])


def test_a_seed_gives_the_same_initial_state_in_another_process(lift):
    lift.reset(state_ids=[5, 6])  # this process's env has run other episodes before seed 101
    here = lift.reset(state_ids=[101, 102])[0]
    code = ("import json, sim_envs; env = sim_envs.make('robosuite_lift', 1); "
            "print(json.dumps(env.reset(state_ids=[101])[0].tolist()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    there = np.asarray(json.loads(done.stdout.strip().splitlines()[-1]), np.float32)
    assert np.array_equal(here, there)


def test_snapshot_restore_rebuilds_the_exact_state(lift):
    rng = np.random.default_rng(1)
    lift.reset(seed=20)
    for _ in range(4):
        lift.step(rng.uniform(-1, 1, (2, 7)).astype(np.float32))
    snapshot = lift.snapshot()
    actions = rng.uniform(-1, 1, (2, 7)).astype(np.float32)
    expected = lift.step(actions)
    lift.reset(seed=999)
    lift.restore(snapshot)
    replayed = lift.step(actions)
    assert np.array_equal(expected.obs, replayed.obs) and np.array_equal(expected.rewards, replayed.rewards)


def test_the_scripted_lift_succeeds_and_the_episode_ends_at_its_first_success_step():
    env = sim_envs.make("robosuite_lift", 1, seed=3, max_episode_steps=80)
    script = SCRIPTS["Lift"]()
    try:
        env.reset()
        script.reset()
        for step in range(80):
            batch = env.step(script(env.envs[0].raw_obs)[None])
            if batch.episodes.done[0]:
                break
        assert batch.terminated[0] and batch.success[0] and batch.rewards[0] == pytest.approx(1.0)
        assert batch.episodes.success_once[0] and step < 60, step
    finally:
        env.close()


def test_camera_observations_with_ignore_terminations_and_the_sparse_reward():
    env = sim_envs.make("robosuite_lift", 1, obs_mode="rgb", image_size=32, ignore_terminations=True,
                        reward_mode="sparse", max_episode_steps=60)
    script = SCRIPTS["Lift"]()
    try:
        obs = env.reset(state_ids=[4])
        assert obs["rgb"].shape == (1, 32, 32, 3) and obs["rgb"].dtype == np.uint8 and obs["rgb"].std() > 10
        assert obs["state"].shape == (1, 60) and list(obs["instruction"]) == ["lift the red cube"]
        top, bottom = obs["rgb"][0, :8].mean(), obs["rgb"][0, -8:].mean()
        assert bottom > top  # upright: the bright table fills the bottom rows, the dark background the top
        script.reset()
        held = env.step(script(env.envs[0].raw_obs)[None], observe=False)
        assert np.array_equal(held.obs["rgb"], obs["rgb"])  # not rendered: the last image again
        rewards, successes = [], []
        for step in range(45):  # the script lifts the cube by step ~36; only the last step is rendered
            batch = env.step(script(env.envs[0].raw_obs)[None], observe=step == 44)
            rewards.append(batch.rewards[0])
            successes.append(batch.success[0])
            assert not batch.terminated[0]  # runs past success
        assert successes[-1] and set(rewards) <= {0.0, 1.0} and rewards == [float(s) for s in successes]
        assert not np.array_equal(batch.obs["rgb"], obs["rgb"])  # the arm moved
    finally:
        env.close()


@pytest.mark.parametrize("overrides, fragment", [
    (dict(obs_mode="depth"), "obs_mode='depth' is not supported for robosuite tasks; allowed: state, rgb"),
    (dict(control_mode="joint_velocity"), "control_mode='joint_velocity' is not supported for robosuite tasks"),
    (dict(reward_mode="rlinf"), "reward_mode='rlinf'"),
    (dict(backend="gpu"), "backend='gpu'"),
    (dict(robot="Baxter"), "robot='Baxter'"),
    (dict(colour="red"), "unknown env option 'colour'"),
    (dict(processes=True), "processes=True"),
    (dict(kwargs={"horizon": 10}), "kwargs.horizon is set by the robosuite adapter"),
])
def test_bad_options_are_one_line_errors(overrides, fragment):
    with pytest.raises(sim_envs.TaskConfigError) as error:
        sim_envs.make("robosuite_lift", 1, **overrides)
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_the_bare_reference_loop_runs_robosuites_gym_wrapper_on_the_same_states(lift):
    from sim_envs.robosuite.reference import sync_vector_env

    ours = lift.reset(state_ids=[101, 102])[0]
    reference = sync_vector_env("Lift", 1, dict(obs_mode="state", control_mode="osc_pose",
                                                reward_mode="normalized_dense", max_episode_steps=3))
    try:
        obs, _ = reference.reset(seed=[101])
        np.testing.assert_allclose(obs[0], ours, rtol=1e-6, atol=1e-7)  # float64 GymWrapper obs as float32
        for _ in range(3):
            obs, rewards, terminated, truncated, _ = reference.step(np.zeros((1, 7), np.float32))
        assert truncated[0] and not terminated[0] and obs.shape == (1, 60)
    finally:
        reference.close()


@pytest.mark.heavy
def test_doctor_builds_and_steps_robosuite():
    from embodied_rl.commands import doctor

    check = doctor.check_robosuite()
    assert check.passed and "(1, 60)" in check.detail and "steps/s" in check.detail
