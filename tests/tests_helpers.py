"""Helpers shared by tests (importable because pytest puts tests/ on sys.path)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


class TrackedProcess:
    """A subprocess (the real CLI, or ``args`` as given with ``cli=False``) whose descendants (Ray's daemons and
    workers) are recorded while it runs. ``new_session``: in a session (and process group) of its own, as a shell
    job is, so that a test can signal its whole group."""

    def __init__(self, args: list[str], env: dict | None = None, cwd: Path | None = None, cli: bool = True,
                 new_session: bool = False):
        argv = [sys.executable, "-m", "embodied_rl.cli", *args] if cli else args
        self.popen = subprocess.Popen(argv, cwd=cwd or REPO,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=dict(os.environ, **(env or {})), start_new_session=new_session)
        self.descendants: set[int] = set()

    def poll(self):
        try:
            self.descendants |= {child.pid for child in psutil.Process(self.popen.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pass
        return self.popen.poll()

    def wait(self, timeout: float = 600) -> tuple[int, str, str]:
        deadline = time.time() + timeout
        while self.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        stdout, stderr = self.popen.communicate(timeout=max(1.0, deadline - time.time()))
        return self.popen.returncode, stdout, stderr

    def leftovers(self, grace_s: float = 30) -> set[int]:
        """Descendants still running ``grace_s`` seconds after the process exited (zombies count as gone)."""
        deadline = time.time() + grace_s
        while True:
            alive = set()
            for pid in self.descendants:
                try:
                    if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                        alive.add(pid)
                except psutil.NoSuchProcess:
                    pass
            if not alive or time.time() > deadline:
                return alive
            time.sleep(0.5)


def ray_worker_pids(class_name: str) -> list[int]:
    """This process's descendants (the embedded Ray's workers) whose title Ray set to ``ray::<class_name>...``,
    idle or inside a method: the processes an operator would ``kill -9``."""
    pids = []
    for child in psutil.Process().children(recursive=True):
        try:
            title = (child.cmdline() or [""])[0]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if title.startswith(f"ray::{class_name}"):
            pids.append(child.pid)
    return pids


def act_during_run(run_dir: Path, plan: list[tuple[int, object]], act, deadline_s: float = 300) -> None:
    """For each ``(iterations, what)`` of ``plan``: once the run in ``run_dir`` has logged that many iterations
    (rows of ``metrics.jsonl``), call ``act(what)`` (run from a thread beside the run)."""
    start = time.monotonic()
    path = Path(run_dir) / "metrics.jsonl"
    for after, what in plan:
        while (len(path.read_text().splitlines()) if path.exists() else 0) < after \
                and time.monotonic() - start < deadline_s:
            time.sleep(0.05)
        act(what)


def start_rank_processes(script: str, world_size: int, *args: str) -> list[subprocess.Popen]:
    """``python script RANK WORLD_SIZE *args`` for every rank, with the repository on ``PYTHONPATH`` and gloo on
    loopback (every rank is on this machine); stdout and stderr captured for ``wait_rank_processes``."""
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo",
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    return [subprocess.Popen([sys.executable, script, str(rank), str(world_size), *map(str, args)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for rank in range(world_size)]


def wait_rank_processes(ranks: list[subprocess.Popen], timeout_s: float = 300) -> None:
    """Every rank's exit; on a failure or a timeout, an assertion error with every rank's log."""
    try:
        logs = [process.communicate(timeout=timeout_s)[0] for process in ranks]
    except subprocess.TimeoutExpired:
        for process in ranks:
            process.kill()
        logs = [process.communicate()[0] for process in ranks]
    codes = [process.returncode for process in ranks]
    assert codes == [0] * len(ranks), "rank exit codes %s:\n%s" % (codes, "\n".join(
        f"--- rank {rank}:\n{log[-3000:]}" for rank, log in enumerate(logs)))


def acted_round(policy, obs: dict, steps: int, envs: int, rewards=None, sampling_round: int = 1,
                policy_version: int = 0):
    """One env worker's round ``[steps, envs]`` acted by ``policy`` on ``obs`` (``steps * envs`` rows, time-major),
    every episode truncated at its last step; ``rewards`` ``[steps, envs]``, or a function of the stored outputs
    ``{"stored.*": [steps * envs, ...]}`` giving them (default: standard normal, seed 0), sampled by
    ``policy_version``, for an actor's ``update``."""
    import numpy as np
    import torch

    from embodied_rl.workers.messages import Trajectory

    with torch.no_grad():
        actions, logp, values, stored = policy.act(obs)
    if callable(rewards):
        rewards = rewards(stored)
    if rewards is None:
        rewards = np.random.default_rng(0).standard_normal((steps, envs))
    arrays = {k: v.numpy() if torch.is_tensor(v) else v for k, v in {**obs, **stored}.items()}
    truncated = np.zeros((steps, envs), bool)
    truncated[-1] = True
    zeros = np.zeros((steps, envs), np.float32)
    return Trajectory(obs={k: v.reshape(steps, envs, *v.shape[1:]) for k, v in arrays.items()},
                      actions=actions.numpy().reshape(steps, envs, *actions.shape[1:]),
                      logp=logp.numpy().reshape(steps, envs), values=values.numpy().reshape(steps, envs),
                      rewards=np.asarray(rewards, np.float32).reshape(steps, envs), terminated=truncated & False,
                      truncated=truncated, success=truncated & False, final_values=zeros,
                      next_value=np.zeros(envs, np.float32), policy_versions=np.full(steps, policy_version, np.int64),
                      env_rank=0,
                      sampling_round=sampling_round)


class ListChannel:
    """The two methods an actor worker uses of its trajectory channel, over a list (for an actor built without Ray):
    ``items`` are what ``get_batch`` hands out, oldest first."""

    def __init__(self):
        self.items = []

    def subscribe(self, key: str) -> None:
        pass

    def get_batch(self, key: str, most: int, timeout: float | None = None) -> list:
        taken, self.items = self.items[:most], self.items[most:]
        return taken


def write_run(path: Path, config: dict, stages: list[tuple[str, list[dict], dict]]) -> Path:
    """A run directory as ``embodied-rl train`` lays it out, from given rows: ``config.yaml``, and per stage
    ``(name, metrics.jsonl rows, summary.json)`` its own directory (``<i>-<name>/``), or the run directory itself
    for one stage named ``train``."""
    import json

    import yaml

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    for index, (name, rows, summary) in enumerate(stages):
        stage = path if name == "train" else path / f"{index}-{name}"
        stage.mkdir(exist_ok=True)
        (stage / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        (stage / "summary.json").write_text(json.dumps(summary))
    return path


def busy_pids(class_name: str, method: str) -> list[int]:
    """Workers of ``class_name`` whose process title says they are inside ``method``."""
    return [pid for pid in ray_worker_pids(class_name) if method in " ".join(psutil.Process(pid).cmdline())]


def kill_one_while_sampling(class_name: str, rank_pids: list[int], killed: list, timeout_s: float = 120,
                            signal_number: int = signal.SIGKILL) -> None:
    """Once an env worker is inside ``interact``, send ``signal_number`` (SIGKILL) to the first of ``rank_pids`` (a
    ``class_name`` worker)."""
    start = time.monotonic()
    while not busy_pids("EnvWorker", "interact") and time.monotonic() - start < timeout_s:
        time.sleep(0.01)
    time.sleep(0.5)  # well inside the round
    os.kill(rank_pids[0], signal_number)
    killed.append((class_name, rank_pids[0]))


def kill_during_sample(workers, class_name: str, pid: int, steps: int) -> list:
    """``workers.sample(steps)`` while ``kill_one_while_sampling`` SIGKILLs ``pid`` (a ``class_name`` worker) inside
    the round; the round's episodes."""
    killed: list = []
    killer = threading.Thread(target=kill_one_while_sampling, args=(class_name, [pid], killed), daemon=True)
    killer.start()
    episodes = workers.sample(steps)
    killer.join(timeout=5)
    assert killed == [(class_name, pid)]
    return episodes
