"""OpenVLA / OpenVLA-OFT vision-language-action policies (registered as ``openvla`` and ``openvla_oft``), built
from transformers modules (imported lazily: importing this package registers the policies cheaply).

Files: ``configuration.py`` (sizes, presets), ``action_tokenizer.py`` (256 action bins, q01/q99 normalisation),
``modeling.py`` (vision backbone, projectors, LM runner), ``prompt.py`` (the published prompt layout),
``action_head.py`` (OFT's L1 regression head), ``policy.py`` (``openvla``), ``oft.py`` (``openvla_oft``),
``checkpoint.py`` (published OpenVLA layout load/save), ``components.py`` (OFT's side files)."""

from embodied_rl.models.openvla.oft import OpenVLAOFT
from embodied_rl.models.openvla.policy import OpenVLA, OpenVLAPolicy


def load_published_checkpoint(directory: str, unnorm_key: str | None = None):
    """See ``checkpoint.load_published_checkpoint``."""
    from embodied_rl.models.openvla.checkpoint import load_published_checkpoint as load

    return load(directory, unnorm_key)


def save_published_checkpoint(policy, directory: str, max_shard_bytes: int = 5 * 2**30) -> None:
    """See ``checkpoint.save_published_checkpoint``."""
    from embodied_rl.models.openvla.checkpoint import save_published_checkpoint as save

    save(policy, directory, max_shard_bytes)


__all__ = ["OpenVLA", "OpenVLAOFT", "OpenVLAPolicy", "load_published_checkpoint", "save_published_checkpoint"]
