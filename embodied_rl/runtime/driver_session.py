"""Run ``embodied-rl train``'s driver in a session of its own, so that a stop signal meant for the job reaches the
driver alone and it can still write its stop checkpoint.

Why: the embedded Ray's daemons (GCS, raylet) and its workers are the driver's children, in the driver's process
group. Ray blocks SIGINT in them, not SIGTERM, so a SIGTERM sent to the whole group (``timeout``, ``kill -TERM
-PGID``, a job runner stopping a process group) ended the trainer actor before the driver could ask it for the
weights, and the run stopped without a stop checkpoint.

How: the command a user starts stays in the caller's process group as a small supervisor; it starts the real
driver (the same command line) in a new session, and forwards SIGINT and SIGTERM to it (SIGHUP as SIGTERM). The
driver's Ray is then out of reach of group signals and stops when the driver shuts it down. The driver gets SIGTERM
if the supervisor dies (``PR_SET_PDEATHSIG``), so ``kill -9`` of the supervisor still stops the run cleanly. The
exit code is the driver's (128 + N when a signal N ended it). After a stop signal the driver has
``STOP_DEADLINE_S`` to exit; then its session (the driver and its Ray) is SIGKILLed with one line saying so.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

DRIVER_ENV = "EMBODIED_RL_DRIVER_SESSION"
"""Set in the driver started by the supervisor (so it does not start another); set it by hand to run the driver in
the command's own process (under a debugger or a profiler), without the protection above."""

STOP_DEADLINE_S = 600.0
"""After a stop signal, how long the driver may take to exit (it waits up to 120 s for an update in progress, writes
the stop checkpoint, shuts its Ray down) before its session is killed."""
KILL_WAIT_S = 30.0
"""How long the driver may take to exit after SIGKILL."""

FORWARDED = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM, signal.SIGHUP: signal.SIGTERM}
"""Signal the supervisor gets -> signal it sends the driver."""


def needs_own_session() -> bool:
    """True in a command started by a user (not yet the driver) on Linux, where sessions and PDEATHSIG exist."""
    return sys.platform.startswith("linux") and not os.environ.get(DRIVER_ENV)


def stop_when_parent_dies() -> None:
    """In a child, before exec (``preexec_fn``): SIGTERM when the thread that started it dies."""
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run_driver_in_own_session(argv: list[str]) -> int:
    """Start ``embodied-rl <argv>`` as the driver in a new session, forward stop signals to it, return its exit
    code."""
    return run_in_own_session([sys.executable, "-m", "embodied_rl.cli", *argv])


def run_in_own_session(command: list[str], stop_deadline_s: float = STOP_DEADLINE_S) -> int:
    """Run ``command`` in a new session, forwarding stop signals to it; return its exit code (128 + N when signal N
    ended it). Until a stop signal it runs as long as the run does; after one, it has ``stop_deadline_s`` to exit, then
    its session is SIGKILLed (exit 137) with one line saying so."""
    started: list[subprocess.Popen] = []
    pending: list[int] = []  # signals that came before the driver existed
    stop_requested: list[float] = []

    def forward(signum, frame):
        stop_requested.append(time.monotonic())
        if not started:
            pending.append(signum)
        elif started[0].poll() is None:
            started[0].send_signal(FORWARDED[signum])

    for signum in FORWARDED:
        signal.signal(signum, forward)
    driver = subprocess.Popen(command, env={**os.environ, DRIVER_ENV: "1"}, start_new_session=True,
                              preexec_fn=stop_when_parent_dies)
    started.append(driver)
    for signum in pending:
        forward(signum, None)
    while driver.poll() is None:
        if stop_requested and time.monotonic() - stop_requested[0] > stop_deadline_s:
            print(f"error: the run did not stop within {stop_deadline_s:.0f} s of the stop signal (stop checkpoint, "
                  "then shutdown); killed it and its Ray", file=sys.stderr)
            os.killpg(driver.pid, signal.SIGKILL)  # the driver leads its session's group: its Ray's daemons too
            driver.wait(KILL_WAIT_S)  # raises TimeoutExpired naming the command if even SIGKILL did not end it
            break
        try:
            driver.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
    return 128 - driver.returncode if driver.returncode < 0 else driver.returncode
