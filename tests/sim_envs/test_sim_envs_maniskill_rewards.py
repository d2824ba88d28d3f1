"""``reward_mode=rlinf`` on the real ManiSkill simulator (CPU): each step's reward against the staged score
hand-computed from the info dict of the same step, resets, the env paths that take it, and bad values."""

import numpy as np
import pytest
import torch

import sim_envs
from sim_envs.errors import TaskConfigError
from sim_envs.maniskill.options import ManiSkillOptions
from sim_envs.maniskill.rewards import build_env

LIMIT = 60
SEED = 3


def _pick_action(env, phase: list, step: int) -> np.ndarray:
    """A scripted end-effector controller for PickCube: above the cube, down, close, carry to the goal, then (from
    step 45) open the gripper and drop it. ``phase`` ``[int]`` is its state."""
    u = env.unwrapped
    tcp, cube, goal = (x.pose.p[0].numpy() for x in (u.agent.tcp, u.cube, u.goal_site))
    targets = [cube + [0, 0, 0.06], cube, cube, goal]
    if phase[0] < 2 and np.linalg.norm(tcp - targets[phase[0]]) < (0.01, 0.005)[phase[0]]:
        phase[0] += 1
    elif phase[0] >= 2:
        phase[0] = 2 if step < phase[1] else 3
    if phase[0] == 2 and phase[1] == LIMIT:
        phase[1] = step + 6  # close the gripper for 6 steps
    if step >= 45:
        return np.array([0, 0, 0, 1], np.float32)
    move = np.clip((targets[phase[0]] - tcp) / 0.1, -1, 1)
    return np.concatenate([move, [-1.0 if phase[0] >= 2 else 1.0]]).astype(np.float32)


def _hand_computed(infos: list[dict], grasp_key: str | None) -> list[float]:
    """r_t = R_t - R_{t-1}, R_t = 0.1 g_t + 0.1 (g_t and g_{t-1}) + 1.0 success_t, from the steps' info dicts."""
    rewards, score_before, grasped_before = [], 0.0, False
    for info in infos:
        grasped = bool(info[grasp_key][0]) if grasp_key else False
        score = 0.1 * grasped + 0.1 * (grasped and grasped_before) + 1.0 * bool(info["success"][0])
        rewards.append(score - score_before)
        score_before, grasped_before = score, grasped
    return rewards


@pytest.fixture(scope="module")
def pick_episode():
    """PickCube under rlinf rewards, the scripted episode: (env, actions [T, 4], rewards [T], info dicts)."""
    env = build_env("PickCube-v1", ManiSkillOptions(control_mode="pd_ee_delta_pos", reward_mode="rlinf",
                                                    max_episode_steps=LIMIT))
    env.reset(seed=SEED)
    phase, actions, rewards, infos = [0, LIMIT], [], [], []
    for step in range(LIMIT):
        action = _pick_action(env, phase, step)
        _, reward, _, _, info = env.step(action[None])
        actions.append(action)
        rewards.append(float(reward[0]))
        infos.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in info.items()})
    yield env, np.stack(actions), np.array(rewards), infos
    env.close()


def test_pickcube_rewards_are_the_staged_score_differences_of_the_same_steps_info(pick_episode):
    _, _, rewards, infos = pick_episode
    expected = _hand_computed(infos, "is_grasped")
    np.testing.assert_allclose(rewards, expected, atol=1e-6)
    # The episode exercises every term: a grasp (+0.1), held (+0.1), success (+1), dropped (-0.2), lost (-1).
    grasped = [bool(i["is_grasped"][0]) for i in infos]
    success = [bool(i["success"][0]) for i in infos]
    first = grasped.index(True)
    assert not success[first] and rewards[first] == pytest.approx(0.1) and rewards[first + 1] == pytest.approx(0.1)
    assert any(success) and rewards[success.index(True)] == pytest.approx(1.0, abs=1e-6)
    assert not grasped[-1] and not success[-1] and rewards.min() == pytest.approx(-1.0, abs=1e-6)
    assert rewards.sum() == pytest.approx(0.0, abs=1e-6)  # the rewards telescope to R at the last step (0)


def test_a_reset_starts_from_zero_score_ungrasped(pick_episode):
    env, actions, rewards, infos = pick_episode
    success = [bool(i["success"][0]) for i in infos]
    holding = success.index(True) + 2  # grasped and succeeded: R = 1.2
    for partial in (False, True):  # a whole reset, and a reset of the env's row (ManiSkill's autoreset)
        env.reset(seed=SEED)
        for action in actions[:holding]:
            env.step(action[None])
        options = {"env_idx": torch.tensor([0])} if partial else None
        env.reset(seed=SEED + 1, options=options)
        _, reward, _, _, info = env.step(np.zeros((1, 4), np.float32))
        assert float(reward[0]) == pytest.approx(_hand_computed([info], "is_grasped")[0], abs=1e-6)
        assert float(reward[0]) == pytest.approx(0.0)  # not -1.2


@pytest.mark.parametrize("processes", [False, True], ids=["in_process", "processes"])
def test_the_vector_envs_give_the_same_rewards(pick_episode, processes):
    _, actions, rewards, _ = pick_episode
    count = 2 if processes else 1
    env = sim_envs.make("maniskill_pickcube", count, processes=processes, control_mode="pd_ee_delta_pos",
                        reward_mode="rlinf", max_episode_steps=LIMIT, ignore_terminations=True)
    try:
        env.reset(state_ids=[SEED] * count)
        got = np.stack([env.step(np.repeat(a[None], count, 0)).rewards for a in actions])
    finally:
        env.close()
    for row in range(count):
        np.testing.assert_allclose(got[:, row], rewards, atol=1e-5)


def test_pushcube_has_no_grasp_so_its_reward_is_the_success_difference():
    env = build_env("PushCube-v1", ManiSkillOptions(control_mode="pd_ee_delta_pos", reward_mode="rlinf",
                                                    max_episode_steps=30))
    try:
        env.reset(seed=SEED)
        u, phase, rewards, infos = env.unwrapped, 0, [], []
        for _ in range(30):  # behind the cube, down, push it through the goal
            tcp, cube, goal = (x.pose.p[0].numpy() for x in (u.agent.tcp, u.obj, u.goal_region))
            direction = (goal - cube)[:2] / np.linalg.norm((goal - cube)[:2])
            behind = np.r_[cube[:2] - 0.05 * direction, 0.02]
            targets = [behind + [0, 0, 0.05], behind, np.r_[goal[:2] + 0.02 * direction, 0.02]]
            if phase < 2 and np.linalg.norm(tcp - targets[phase]) < 0.01:
                phase += 1
            action = np.r_[np.clip((targets[phase] - tcp) / 0.1, -1, 1), -1.0].astype(np.float32)
            _, reward, _, _, info = env.step(action[None])
            rewards.append(float(reward[0]))
            infos.append(info)
    finally:
        env.close()
    assert not any(key in infos[0] for key in ("is_grasped", "is_cubeA_grasped"))
    np.testing.assert_allclose(rewards, _hand_computed(infos, None), atol=1e-6)
    assert max(rewards) == pytest.approx(1.0) and min(rewards) == pytest.approx(-1.0)  # pushed on, then past


def test_a_bad_reward_mode_is_one_clear_line():
    with pytest.raises(TaskConfigError, match=r"reward_mode='rlnif' is not supported; allowed: normalized_dense, "
                                              r"dense, sparse, rlinf"):
        sim_envs.make("maniskill_pushcube", 1, processes=False, reward_mode="rlnif")


def test_a_bad_reward_mode_in_a_run_config_exits_2_with_one_line():
    from conftest import run_cli

    done = run_cli("plan", "--task", "maniskill_pushcube", "env.reward_mode=rlnif", timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: env.reward_mode='rlnif' is out of range; allowed: normalized_dense, dense, sparse, rlinf"]
