"""Start an embedded Ray (default) or join an existing cluster, quietly, and always shut it down."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import threading
import uuid

import ray

from embodied_rl.runtime.transports import session_files
from embodied_rl.runtime.transports.session_files import register_process, sweep_dead_sessions
from embodied_rl.runtime.transports.shared_memory import sweep_segments

_ACTIVE: "Cluster | None" = None


class Cluster:
    """The Ray cluster a run uses.

    ``address=None`` starts a private local Ray bound to loopback with ``num_cpus`` CPU slots;
    an address (``"ray://..."``, ``"host:port"`` or ``"auto"``) joins an existing cluster.
    ``session_dir`` holds this run's channel sockets and pid files (the driver's from the start) and is removed
    at shutdown; ``start`` sweeps this node's files of dead runs (``session_files.sweep_dead_sessions``).
    """

    def __init__(self, address: str | None = None, num_cpus: float | None = None):
        self.address = address
        self.num_cpus = num_cpus
        self.session_id = uuid.uuid4().hex[:8]
        self.authkey = os.urandom(32)  # authenticates channel connections that cross nodes over TCP
        self.session_dir = tempfile.mkdtemp(prefix=f"erl-{self.session_id}-", dir=session_files.SESSIONS_ROOT)
        register_process(self.session_dir)  # this session is alive while its driver is
        self._owns_ray = False
        self._started = False
        self._directory = None

    def start(self) -> "Cluster":
        global _ACTIVE
        sweep_dead_sessions(keep=self.session_dir)  # what killed runs left in /tmp and shared memory
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        os.environ.setdefault("RAY_DEDUP_LOGS", "1")
        # Worker processes must not oversubscribe the few cores with intra-op threads.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        # Workers choose their GPUs from the placement (Worker's gpu_slots); Ray must not hide them from workers
        # that asked Ray for no GPUs.
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
        if ray.is_initialized():
            self._owns_ray = False
        elif self.address:
            ray.init(address=self.address, logging_level="ERROR", log_to_driver=True)
        else:
            _bind_to_loopback()
            # "local": a private Ray even when this machine runs another (Ray would join the one recorded in
            # /tmp/ray/ray_current_cluster, and refuse num_cpus there).
            ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False, logging_level="ERROR",
                     _node_ip_address="127.0.0.1", log_to_driver=True,
                     namespace=f"embodied-rl-{self.session_id}")
            self._owns_ray = True
        self._started = True
        _ACTIVE = self
        if threading.current_thread() is threading.main_thread():
            install_interrupt_handler()  # after ray.init, whose own SIGTERM handler aborts without cleanup
        atexit.register(self.shutdown)
        return self

    def channel_directory(self):
        """The actor that records which process reads which channel key (one per cluster session)."""
        if self._directory is None:
            from embodied_rl.runtime.channel_directory import create_directory

            self._directory = create_directory(self.session_id)
        return self._directory

    def total_cpus(self) -> float:
        return float(ray.cluster_resources().get("CPU", 0.0))

    def node_cpus(self) -> dict[str, float]:
        """CPU slots of each alive node, by Ray node id."""
        return {n["NodeID"]: float(n["Resources"].get("CPU", 0.0)) for n in ray.nodes() if n["Alive"]}

    def shutdown(self) -> None:
        global _ACTIVE
        if not self._started:
            return
        self._started = False
        if self._directory is not None and ray.is_initialized():
            ray.kill(self._directory)
            self._directory = None
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(self.session_dir, ignore_errors=True)
        sweep_segments(os.path.basename(self.session_dir))  # shared memory that killed workers left behind
        if _ACTIVE is self:
            _ACTIVE = None

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()


def _bind_to_loopback() -> None:
    """Make an embedded Ray advertise and bind 127.0.0.1 only (no port open to the network).

    Ray resolves a loopback ``_node_ip_address`` to the machine's external address unless its "local only"
    mode is on; that mode is read from this variable by the driver now and by Ray's child processes at start.
    """
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def install_interrupt_handler() -> None:
    """Raise KeyboardInterrupt on SIGINT and SIGTERM so ``with Cluster()`` blocks unwind and stop Ray.

    SIGINT is set explicitly: a process started in the background by a shell inherits SIGINT ignored.
    """

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
