"""Training engines: how one model is trained across processes (``data_parallel``: single, torch DDP, FSDP2)."""

from embodied_rl.engines.training.data_parallel import BACKENDS, DataParallelConfig, DataParallelEngine

__all__ = ["BACKENDS", "DataParallelConfig", "DataParallelEngine"]
