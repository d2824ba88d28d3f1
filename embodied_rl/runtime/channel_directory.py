"""Who consumes which channel key: a small Ray actor consulted only when a sender first uses a key."""

from __future__ import annotations

import ray

DIRECTORY_NAME = "embodied_rl_channel_directory"


class ChannelDirectory:
    """Maps ``(channel, key)`` to the readers of that key: ``(inbox address, load cell path)`` pairs.

    Several readers of one key share its messages (each message goes to one of them). ``version`` changes
    whenever membership changes so senders can refresh between batches when workers join or leave.
    """

    def __init__(self):
        self._consumers: dict[tuple[str, str], list[tuple]] = {}
        self.version = 0

    def subscribe(self, channel: str, key: str, address, load_path: str | None = None) -> int:
        readers = self._consumers.setdefault((channel, key), [])
        if all(a != address for a, _ in readers):
            readers.append((address, load_path))
            self.version += 1
        return self.version

    def unsubscribe(self, channel: str, key: str, address) -> int:
        readers = self._consumers.get((channel, key), [])
        kept = [(a, path) for a, path in readers if a != address]
        if len(kept) != len(readers):
            self._consumers[(channel, key)] = kept
            self.version += 1
        return self.version

    def consumers(self, channel: str, key: str) -> list[tuple]:
        return list(self._consumers.get((channel, key), []))


def create_directory(session_id: str):
    """A directory actor for one cluster session; the Cluster keeps the handle, so it lives as long as the session."""
    return ray.remote(ChannelDirectory).options(
        name=f"{DIRECTORY_NAME}-{session_id}", get_if_exists=True, num_cpus=0).remote()
