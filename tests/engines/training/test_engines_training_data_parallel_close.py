"""``DataParallelEngine.close`` with a peer already gone: the barrier it runs first fails, and the rank still leaves
the group (with a warning), never raises or waits for the group's timeout.

2 DDP ranks on loopback gloo run as subprocesses of this file as a script; rank 1 exits without closing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # ~7 s: two processes importing torch


def test_close_leaves_the_group_when_the_other_rank_is_gone():
    from embodied_rl.engines.training.data_parallel import serve_rendezvous

    store = serve_rendezvous(timeout_s=60)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH", "")]))
    ranks = [subprocess.Popen([sys.executable, __file__, str(rank), str(store.port)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for rank in range(2)]
    logs = [process.communicate(timeout=120)[0] for process in ranks]
    assert [process.returncode for process in ranks] == [0, 0], "\n".join(logs)
    assert "left the group in" in logs[0] and "without the other ranks" in logs[0], logs[0]
    seconds = float(logs[0].split("left the group in")[1].split()[0])
    assert seconds < 30, f"close() waited {seconds:.1f} s for a rank that was gone (the group's timeout is 60 s)"


def rank_main(rank: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    from embodied_rl.engines.training.data_parallel import DataParallelConfig, DataParallelEngine

    config = DataParallelConfig("ddp", rank, 2, "127.0.0.1", port, served_store=True, timeout_s=60)
    engine = DataParallelEngine(torch.nn.Linear(2, 2), config, torch.device("cpu"))
    if rank == 1:
        os._exit(0)  # gone without closing, as a crashed rank is
    time.sleep(1.0)
    started = time.perf_counter()
    engine.close()
    assert not dist.is_initialized()
    print(f"left the group in {time.perf_counter() - started:.3f} s", flush=True)


if __name__ == "__main__":
    rank_main(int(sys.argv[1]), int(sys.argv[2]))
