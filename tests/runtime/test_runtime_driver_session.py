"""The supervisor `embodied-rl train` runs its driver under: the driver in a session of its own, stop signals
forwarded to it, its exit code passed on, and a driver that does not stop after a stop signal killed at the
deadline (no wait without one)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

# The command under the supervisor: writes its session id, exits 7 on SIGTERM, or ignores it with "ignore".
DRIVER = textwrap.dedent("""
    import os, signal, sys, time
    if sys.argv[2] == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
    open(sys.argv[1], "w").write(f"{os.getpid()} {os.getsid(0)}")
    while True:
        time.sleep(0.1)
""")


def _supervise(tmp_path, behaviour: str, deadline_s: float) -> tuple[subprocess.Popen, int, int]:
    """Start a supervisor (in its own session, so the test can signal it alone) over DRIVER; returns it and the
    driver's pid and session id once the driver is up."""
    marker = tmp_path / "driver"
    supervisor = subprocess.Popen(
        [sys.executable, "-c", "import sys; from embodied_rl.runtime.driver_session import run_in_own_session; "
         f"sys.exit(run_in_own_session([sys.executable, '-c', {DRIVER!r}, {str(marker)!r}, {behaviour!r}], "
         f"stop_deadline_s={deadline_s}))"], stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (marker.exists() and marker.read_text()):
        assert supervisor.poll() is None and time.monotonic() < deadline, supervisor.communicate()[1]
        time.sleep(0.05)
    pid, session = map(int, marker.read_text().split())
    return supervisor, pid, session


def test_the_driver_runs_in_its_own_session_gets_the_stop_signal_and_its_exit_code_is_passed_on(tmp_path):
    supervisor, pid, session = _supervise(tmp_path, "exit", 60)
    try:
        assert session == pid != os.getsid(supervisor.pid)  # a session of its own: group signals do not reach it
        os.killpg(supervisor.pid, signal.SIGTERM)  # the supervisor's whole group, as `timeout` signals it
        assert supervisor.wait(timeout=30) == 7
    finally:
        _kill(supervisor, pid)


def test_a_driver_that_does_not_stop_is_killed_at_the_deadline_with_one_line(tmp_path):
    supervisor, pid, _ = _supervise(tmp_path, "ignore", 2)
    try:
        signalled = time.monotonic()
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=30) == 128 + signal.SIGKILL
        assert 2 <= time.monotonic() - signalled < 20
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        stderr = supervisor.stderr.read()
        assert "did not stop within 2 s of the stop signal" in stderr and "Traceback" not in stderr, stderr
    finally:
        _kill(supervisor, pid)


def _kill(supervisor: subprocess.Popen, driver_pid: int) -> None:
    """Whatever a failed test left running."""
    for pid in (supervisor.pid, driver_pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    supervisor.wait(timeout=30)
