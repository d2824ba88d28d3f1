"""Checkpoints in the published OpenVLA / OpenVLA-OFT Hugging Face layout (``openvla/openvla-7b``):
``config.json`` (model_type "openvla", Prismatic fields, ``text_config``, ``norm_stats``), ``model-0000x-of-0000y
.safetensors`` with ``model.safetensors.index.json``, timm key names for the vision backbone
(``vision_backbone.featurizer.blocks.N.attn.qkv.weight``, ...), ``projector.fc1/fc2/fc3``,
``language_model.model.layers.N...`` / ``language_model.lm_head.weight``; OFT adds
``proprio_projector--<step>_checkpoint.pt``, ``action_head--<step>_checkpoint.pt`` (the L1 regression head) and
``dataset_statistics.json`` (``components.py``).

``load_published_checkpoint`` maps those names onto the transformers modules of this package (timm's fused
``qkv`` split into q/k/v, ``pos_embed`` reshaped, LayerScale ``scale_factor``/``gamma`` -> ``lambda1``);
``save_published_checkpoint`` writes the same layout (LoRA merged into the base weights; OFT's proprio projector
and L1 head as ``<component>--latest_checkpoint.pt``, the statistics also as ``dataset_statistics.json``) plus
``embodied_rl_heads.safetensors`` (value head, OFT action queries, state normalisation, the L1 head's log-std),
atomically.
SigLIP's attention-pool head (``featurizer.attn_pool.*``, unused by Prismatic's patch features) is skipped on load
and not written."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from embodied_rl.models.openvla import components
from embodied_rl.models.openvla.configuration import (LanguageConfig, OpenVLAConfig, VisionConfig, full,
                                                      invalid_option)

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
HEADS_FILE = "embodied_rl_heads.safetensors"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
PUBLISHED_VISION = ("dinosiglip-vit-so-224px", "siglip-vit-so400m")
_TIMM_IDS = {"dinosiglip-vit-so-224px": ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"],
             "siglip-vit-so400m": ["vit_so400m_patch14_siglip_224"]}
# Prismatic's ``featurizer`` is the first timm id: DINOv2 for dinosiglip. This package's ``featurizer`` is always
# SigLIP and ``fused_featurizer`` DINOv2, so for fused backbones the published prefixes are swapped.

_SIGLIP_RULES = [
    (r"embeddings\.patch_embedding\.(weight|bias)", r"patch_embed.proj.\1", None),
    (r"embeddings\.position_embedding\.weight", "pos_embed", "pos_siglip"),
    (r"encoder\.layers\.(\d+)\.layer_norm([12])\.(weight|bias)", r"blocks.\1.norm\2.\3", None),
    (r"encoder\.layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", r"blocks.\1.attn.qkv.\3", "qkv"),
    (r"encoder\.layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2", None),
    (r"encoder\.layers\.(\d+)\.mlp\.(fc[12])\.(weight|bias)", r"blocks.\1.mlp.\2.\3", None),
    (r"post_layernorm\.(weight|bias)", r"norm.\1", None),
]
_DINO_RULES = [
    (r"embeddings\.cls_token", "cls_token", None),
    (r"embeddings\.register_tokens", "reg_token", None),
    (r"embeddings\.mask_token", None, None),  # HF-only (masked image modelling), unused
    (r"embeddings\.position_embeddings", "pos_embed", "pos_dino"),
    (r"embeddings\.patch_embeddings\.projection\.(weight|bias)", r"patch_embed.proj.\1", None),
    (r"encoder\.layer\.(\d+)\.norm([12])\.(weight|bias)", r"blocks.\1.norm\2.\3", None),
    (r"encoder\.layer\.(\d+)\.attention\.([qkv])_proj\.(weight|bias)", r"blocks.\1.attn.qkv.\3", "qkv"),
    (r"encoder\.layer\.(\d+)\.attention\.o_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2", None),
    (r"encoder\.layer\.(\d+)\.layer_scale([12])\.lambda1", r"blocks.\1.ls\2.scale_factor", "layerscale"),
    (r"encoder\.layer\.(\d+)\.mlp\.(fc[12])\.(weight|bias)", r"blocks.\1.mlp.\2.\3", None),
    (r"layernorm\.(weight|bias)", r"norm.\1", None),
]


def _published_prefixes(fused: bool) -> dict[str, str]:
    """This package's vision module prefixes -> the published ones."""
    if fused:
        return {"vision_backbone.featurizer.": "vision_backbone.fused_featurizer.",
                "vision_backbone.fused_featurizer.": "vision_backbone.featurizer."}
    return {"vision_backbone.featurizer.": "vision_backbone.featurizer."}


def published_name(name: str, fused: bool) -> tuple[str | None, str | None, str | None]:
    """A name of this package's state dict -> ``(published name or None to skip, transform, q/k/v letter)``."""
    for ours, theirs in _published_prefixes(fused).items():
        if name.startswith(ours):
            rest = name[len(ours):]
            rest = rest[len("vision_model."):] if rest.startswith("vision_model.") else rest
            rules = _SIGLIP_RULES if ours.endswith(".featurizer.") else _DINO_RULES
            for pattern, replacement, transform in rules:
                match = re.fullmatch(pattern, rest)
                if match:
                    if replacement is None:
                        return None, None, None
                    letter = match.group(2) if transform == "qkv" else None
                    return theirs + match.expand(replacement), transform, letter
            raise KeyError(f"openvla checkpoint: no published name for {name!r}")
    return name, None, None


# --- reading -----------------------------------------------------------------------------------------------------
@dataclass
class LoadedCheckpoint:
    """What ``load_published_checkpoint`` read: the network configuration, weights under this package's names,
    the action normalisation (q01/q99/mask ``[A]``) and state normalisation (``mean``/``std`` ``[D]`` and the
    ``mode`` of ``PROPRIO_NORMALIZATIONS``, or None), the extra heads, OFT's proprio projector and L1 head."""

    config: OpenVLAConfig
    weights: Mapping[str, torch.Tensor]  # read from the files as looked up (``OurWeights``)
    action_stats: dict | None = None
    state_stats: dict | None = None
    heads: dict[str, torch.Tensor] = field(default_factory=dict)
    proprio: dict[str, torch.Tensor] | None = None
    action_head: dict[str, torch.Tensor] | None = None
    directory: str = ""


def _config_from_published(values: dict) -> OpenVLAConfig:
    """A config.json without this package's block (a published checkpoint) -> OpenVLAConfig."""
    backbone = values.get("vision_backbone_id")
    if backbone not in PUBLISHED_VISION:
        raise invalid_option("vision_backbone_id", backbone, PUBLISHED_VISION)
    config = full()
    if backbone == "siglip-vit-so400m":
        config.vision = VisionConfig(**{**config.vision.__dict__, "fused": False})
    text = values.get("text_config") or {}
    vocab = int(text.get("vocab_size", 32064))
    pad = values.get("pad_token_id")
    config.language = LanguageConfig(
        family=text.get("model_type", "llama"), width=int(text.get("hidden_size", 4096)),
        layers=int(text.get("num_hidden_layers", 32)), heads=int(text.get("num_attention_heads", 32)),
        kv_heads=int(text.get("num_key_value_heads") or text.get("num_attention_heads", 32)),
        mlp=int(text.get("intermediate_size", 11008)), vocab_size=vocab,
        tokenizer_vocab_size=int(pad) if pad is not None and int(pad) < vocab else vocab,
        max_positions=int(text.get("max_position_embeddings", 4096)),
        rms_norm_eps=float(text.get("rms_norm_eps", 1e-5)), rope_theta=float(text.get("rope_theta", 10000.0)))
    config.n_action_bins = int(values.get("n_action_bins", 256))
    config.vision_backbone_id, config.llm_backbone_id = backbone, values.get("llm_backbone_id", "llama2-7b-pure")
    return config


def _proprio_stats(proprio: dict | None) -> dict | None:
    """A ``norm_stats`` proprio entry -> ``{"mean", "std", "mode"}`` such that ``(x - mean) / std`` is the
    reference's normalisation. OFT (``experiments/robot/openvla_utils.py``, ``normalize_proprio``, BOUNDS_Q99):
    ``clip(2 (x - q01) / (q99 - q01 + 1e-8) - 1, -1, 1)`` where ``mask``, ``clip(x, -1, 1)`` elsewhere, i.e.
    ``mean = q01 + h``, ``std = h`` with ``h = (q99 - q01 + 1e-8) / 2`` (0 and 1 where masked) and a clip."""
    if not proprio:
        return None
    if "q01" in proprio and "q99" in proprio:
        low = torch.tensor(proprio["q01"], dtype=torch.float64)
        high = torch.tensor(proprio["q99"], dtype=torch.float64)
        mask = torch.tensor(proprio.get("mask", [True] * len(low)), dtype=torch.bool)
        half = (high - low + 1e-8) / 2
        mean, std = torch.where(mask, low + half, 0.0), torch.where(mask, half, 1.0)
        return {"mean": mean.float(), "std": std.float(), "mode": "bounds_q99"}
    if "mean" in proprio:
        return {"mean": torch.tensor(proprio["mean"], dtype=torch.float32),
                "std": torch.tensor(proprio["std"], dtype=torch.float32), "mode": "mean_std"}
    return None


def _norm_stats(stats: dict, unnorm_key: str | None) -> tuple[dict | None, dict | None]:
    if not stats:
        return None, None
    if unnorm_key is None:
        if len(stats) != 1:
            raise invalid_option("unnorm_key", unnorm_key, sorted(stats))
        unnorm_key = next(iter(stats))
    if unnorm_key not in stats:
        raise invalid_option("unnorm_key", unnorm_key, sorted(stats))
    entry = stats[unnorm_key]
    action = entry.get("action")
    action = None if action is None else {
        "q01": torch.tensor(action["q01"], dtype=torch.float32), "q99": torch.tensor(action["q99"], dtype=torch.float32),
        "mask": torch.tensor(action.get("mask", [True] * len(action["q01"])), dtype=torch.bool)}
    return action, _proprio_stats(entry.get("proprio"))


class PublishedWeights(Mapping):
    """The tensors of a checkpoint's ``model*.safetensors`` files by published name, each read from its file when
    looked up (safetensors' ``safe_open``): a 15 GB checkpoint is never in memory as a whole besides the model."""

    def __init__(self, directory: str):
        from safetensors import safe_open

        index = os.path.join(directory, INDEX_FILE)
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, "model*.safetensors")))
        if not files:
            raise FileNotFoundError(f"openvla checkpoint {directory!r} has no model*.safetensors files")
        self._handles = [safe_open(os.path.join(directory, name), framework="pt") for name in files]
        self._where = {key: handle for handle in self._handles for key in handle.keys()}

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._where[key].get_tensor(key)

    def __contains__(self, key) -> bool:  # (Mapping's would read the tensor)
        return key in self._where

    def __iter__(self):
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


class OurWeights(Mapping):
    """Published tensors under this package's names ``names`` (those the network has; ``published_name``), each
    read and transformed (q/k/v split from the fused tensor, position embeddings reshaped) when looked up."""

    def __init__(self, published: Mapping, names: list[str], fused: bool):
        self._published, self._sources = published, {}
        for name in names:
            theirs, transform, letter = published_name(name, fused)
            if theirs is None:
                continue
            if transform == "layerscale" and theirs not in published:
                theirs = theirs.replace(".scale_factor", ".gamma")
            if theirs not in published:
                raise KeyError(f"openvla checkpoint: missing {theirs!r} (for {name!r})")
            self._sources[name] = (theirs, transform, letter)

    def __contains__(self, name) -> bool:
        return name in self._sources

    def __getitem__(self, name: str) -> torch.Tensor:
        theirs, transform, letter = self._sources[name]
        tensor = self._published[theirs]
        if transform == "qkv":
            tensor = tensor.chunk(3, dim=0)["qkv".index(letter)]
        elif transform == "pos_siglip":
            tensor = tensor.reshape(tensor.shape[-2], tensor.shape[-1])
        elif transform == "pos_dino":  # timm: patches only (no class position) -> HF: a zero class position first
            tensor = torch.cat([torch.zeros_like(tensor[:, :1]), tensor], dim=1)
        return tensor

    def __iter__(self):
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)


def load_published_checkpoint(directory: str, unnorm_key: str | None = None) -> LoadedCheckpoint:
    """Read a checkpoint directory in the published OpenVLA(-OFT) layout (local files only). The weights come back
    under this package's state-dict names (``vision_backbone.featurizer`` = SigLIP, ``fused_featurizer`` =
    DINOv2, ``projector``, ``language_model``); ``unnorm_key`` picks the dataset of ``norm_stats`` (needed when it
    holds several)."""
    from embodied_rl.models.openvla.modeling import build_network

    path = os.path.join(directory, CONFIG_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"openvla checkpoint {directory!r} has no {CONFIG_FILE}")
    with open(path) as f:
        values = json.load(f)
    ours = values.get("embodied_rl")
    config = OpenVLAConfig.from_dict(ours["config"]) if ours else _config_from_published(values)
    config.validate()
    published = PublishedWeights(directory)
    with torch.device("meta"):  # only the names and shapes: nothing allocated
        vision, projector, language = build_network(config)
    names = ([f"vision_backbone.{k}" for k in vision.state_dict()] + [f"projector.{k}" for k in projector.state_dict()]
             + [f"language_model.{k}" for k in language.state_dict()])
    weights = OurWeights(published, names, config.vision.fused)
    # as the reference's _load_dataset_stats: the fine-tuning data's statistics replace the config's
    stats = components.dataset_statistics(directory) or values.get("norm_stats") or {}
    action_stats, state_stats = _norm_stats(stats, unnorm_key)
    heads = {}
    if os.path.exists(os.path.join(directory, HEADS_FILE)):
        from safetensors.torch import load_file

        heads = load_file(os.path.join(directory, HEADS_FILE))
    if state_stats is not None and "state_mean" not in heads:  # the published statistics normalise the state
        config.proprio_normalization = state_stats["mode"]
    proprio = components.load_component(directory, components.PROPRIO_PROJECTOR)
    action_head = components.load_action_head(directory)
    return LoadedCheckpoint(config, weights, action_stats, state_stats, heads, proprio, action_head, directory)


def apply_loaded(policy, loaded: LoadedCheckpoint) -> None:
    """Copy ``loaded`` into a freshly built policy of the same configuration (before LoRA is added), one tensor at a
    time (each read from its file, cast to the policy's dtype as it is copied, then dropped: the load's peak is the
    model plus one tensor). The network's weights were built uninitialised (``models.policy.uninitialised``): each
    of them comes from the checkpoint, except unused ones, which are zeroed."""
    extra = {}
    if loaded.proprio is not None and policy.proprio_projector is not None:
        extra.update({f"proprio_projector.{k}": v for k, v in loaded.proprio.items()})
    if loaded.action_head is not None and getattr(policy, "action_head", None) is not None:
        extra.update({f"action_head.{k}": v for k, v in loaded.action_head.items()})
    extra.update(loaded.heads)
    if policy.action_queries is not None and "action_queries" not in extra:
        extra["action_queries"] = torch.zeros_like(policy.action_queries)  # OFT's empty action embeddings
    network = {f"{part}.{name}" for part in ("vision_backbone", "projector", "language_model")
               for name, _ in getattr(policy, part).named_parameters()}
    own = policy.state_dict()
    with torch.no_grad():
        for source in (loaded.weights, extra):  # the heads file's entries last: they replace the network's
            for name in source:
                if name not in own:
                    raise KeyError(f"openvla checkpoint {loaded.directory!r}: {name!r} does not fit this policy")
                value = source[name]
                if tuple(value.shape) != tuple(own[name].shape):
                    raise ValueError(f"openvla checkpoint {loaded.directory!r}: {name!r} has shape "
                                     f"{tuple(value.shape)}, the policy {tuple(own[name].shape)} (action_dim, "
                                     "action_chunk or state size differ?)")
                own[name].copy_(value)
        for name in network - set(loaded.weights) - set(extra):  # e.g. DINOv2's mask token (image modelling only)
            own[name].zero_()
    if loaded.action_stats is not None and not any(k.startswith("action_tokenizer.") for k in loaded.heads):
        for key in ("q01", "q99", "mask"):
            getattr(policy.action_tokenizer, key).copy_(loaded.action_stats[key])
    if loaded.state_stats is not None and "state_mean" not in loaded.heads and policy.state_dim:
        if loaded.state_stats["mean"].shape != policy.state_mean.shape:
            raise ValueError(f"openvla checkpoint {loaded.directory!r}: its proprio statistics have "
                             f"{len(loaded.state_stats['mean'])} dims, the env's state {policy.state_dim}")
        policy.state_mean.copy_(loaded.state_stats["mean"])
        policy.state_std.copy_(loaded.state_stats["std"])


def instruction_tokenizer(directory: str | None, config: OpenVLAConfig):
    """The checkpoint's tokenizer files (``PretrainedTokenizer``) when present, else the byte tokenizer (whose ids
    must stay below the 256 action ids)."""
    from embodied_rl.models.text_tokenizer import BYTE_VOCAB_SIZE, ByteTokenizer, PretrainedTokenizer

    if directory and any(os.path.exists(os.path.join(directory, f)) for f in TOKENIZER_FILES):
        return PretrainedTokenizer(directory)
    if config.language.tokenizer_vocab_size - config.n_action_bins < BYTE_VOCAB_SIZE:
        raise ValueError(f"openvla: the byte tokenizer needs a vocabulary of at least "
                         f"{BYTE_VOCAB_SIZE + config.n_action_bins} ids, got {config.language.tokenizer_vocab_size}")
    return ByteTokenizer()


# --- writing -----------------------------------------------------------------------------------------------------
def _merged_language_state(language_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The LM's state dict under plain names, LoRA (if injected) merged into the base weights."""
    state = {k.replace(".base_layer.", "."): v for k, v in language_model.state_dict().items() if "lora_" not in k}
    for name, module in language_model.named_modules():
        if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight"):
            for adapter in getattr(module, "active_adapters", ["default"]):
                delta = module.get_delta_weight(adapter)
                state[f"{name}.weight"] = module.base_layer.weight.detach() + delta.to(module.base_layer.weight.dtype)
    return state


def _published_config(policy) -> dict:
    from embodied_rl.models.openvla.modeling import language_model_text_config

    config: OpenVLAConfig = policy.config
    fused = config.vision.fused
    tokenizer = policy.action_tokenizer
    stats = {"action": {"q01": tokenizer.q01.tolist(), "q99": tokenizer.q99.tolist(), "mask": tokenizer.mask.tolist()}}
    if policy.state_dim:  # q01/q99 = mean -/+ std: the reference's BOUNDS_Q99 reads back (x - mean) / std
        mean, std = policy.state_mean.double(), policy.state_std.double()
        stats["proprio"] = {"mean": mean.tolist(), "std": std.tolist(), "q01": (mean - std).tolist(),
                            "q99": (mean + std).tolist()}
    backbone = config.vision_backbone_id if fused else "siglip-vit-so400m"
    return {
        "model_type": "openvla", "architectures": ["OpenVLAForActionPrediction"],
        "vision_backbone_id": backbone, "llm_backbone_id": config.llm_backbone_id,
        "arch_specifier": "no-align+fused-gelu-mlp" if fused else "no-align+gelu-mlp",
        "use_fused_vision_backbone": fused, "image_resize_strategy": "resize-naive",
        "image_sizes": [config.vision.image_size] * (2 if fused else 1),
        "timm_model_ids": _TIMM_IDS[backbone], "timm_override_act_layers": [None] * (2 if fused else 1),
        "text_config": language_model_text_config(config.language), "llm_max_length": config.language.max_positions,
        "pad_token_id": config.language.tokenizer_vocab_size, "pad_to_multiple_of": 64,
        "n_action_bins": config.n_action_bins, "norm_stats": {"embodied_rl": stats},
        "torch_dtype": str(policy.compute_dtype).replace("torch.", ""),
        "embodied_rl": {"config": config.to_dict(), "policy": type(policy).__name__, "action_dim": policy.action_dim,
                        "action_chunk": policy.action_chunk, "state_dim": policy.state_dim},
    }


def published_weights(policy) -> dict[str, torch.Tensor]:
    """The policy's vision backbone, projector and LM (LoRA merged) under the published names, in the policy's
    compute dtype as its ``torch_dtype`` says (float32 master weights of a bf16 policy are saved in bf16, as the
    published checkpoints are)."""
    fused = policy.config.vision.fused
    ours = {f"vision_backbone.{k}": v for k, v in policy.vision_backbone.state_dict().items()}
    ours.update({f"projector.{k}": v for k, v in policy.projector.state_dict().items()})
    ours.update({f"language_model.{k}": v for k, v in _merged_language_state(policy.language_model).items()})
    out: dict[str, torch.Tensor] = {}
    qkv: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in ours.items():
        theirs, transform, letter = published_name(name, fused)
        if theirs is None:
            continue
        tensor = tensor.detach().cpu()
        if tensor.is_floating_point():
            tensor = tensor.to(policy.compute_dtype)
        if transform == "qkv":
            qkv.setdefault(theirs, {})[letter] = tensor
            continue
        if transform == "pos_siglip":
            tensor = tensor[None]
        elif transform == "pos_dino":
            tensor = tensor[:, 1:]
        out[theirs] = tensor.contiguous().clone()
    for theirs, parts in qkv.items():
        out[theirs] = torch.cat([parts["q"], parts["k"], parts["v"]], dim=0).contiguous()
    return out


def _heads(policy) -> dict[str, torch.Tensor]:
    """What the published layout has no place for: value head, OFT action queries, the L1 head's log-std,
    state/action statistics."""
    keep = ("critic_head.", "action_queries", "action_log_std", "state_mean", "state_std", "action_tokenizer.")
    return {k: v.detach().cpu().contiguous().clone() for k, v in policy.state_dict().items() if k.startswith(keep)}


def save_published_checkpoint(policy, directory: str, max_shard_bytes: int = 5 * 2**30) -> None:
    """Write ``policy`` to ``directory`` in the published layout (config.json, sharded model safetensors with
    their index, OFT's proprio projector file, this package's heads file). Atomic: everything is written to a
    temporary directory beside it, which then replaces ``directory``."""
    from safetensors.torch import save_file

    directory = os.path.abspath(directory)
    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=os.path.basename(directory) + ".tmp-", dir=parent)
    try:
        weights = published_weights(policy)
        shards: list[dict[str, torch.Tensor]] = [{}]
        size = 0
        for name in sorted(weights):
            nbytes = weights[name].numel() * weights[name].element_size()
            if shards[-1] and size + nbytes > max_shard_bytes:
                shards.append({})
                size = 0
            shards[-1][name] = weights[name]
            size += nbytes
        weight_map = {}
        for i, shard in enumerate(shards):
            filename = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, os.path.join(temporary, filename), metadata={"format": "pt"})
            weight_map.update({name: filename for name in shard})
        total = sum(t.numel() * t.element_size() for t in weights.values())
        with open(os.path.join(temporary, INDEX_FILE), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        with open(os.path.join(temporary, CONFIG_FILE), "w") as f:
            json.dump(_published_config(policy), f, indent=2)
        if policy.proprio_projector is not None:
            components.save_component(policy.proprio_projector, temporary, components.PROPRIO_PROJECTOR)
        if getattr(policy, "action_head", None) is not None:
            components.save_component(policy.action_head, temporary, components.ACTION_HEAD)
        with open(os.path.join(temporary, components.DATASET_STATISTICS), "w") as f:
            json.dump(_published_config(policy)["norm_stats"], f, indent=2)
        save_file(_heads(policy), os.path.join(temporary, HEADS_FILE))
        tokenizer = getattr(policy.tokenizer, "tokenizer", None)
        if tokenizer is not None:
            tokenizer.save_pretrained(temporary)
        old = None
        if os.path.exists(directory):
            old = tempfile.mkdtemp(prefix=os.path.basename(directory) + ".old-", dir=parent)
            os.rmdir(old)
            os.rename(directory, old)
        os.rename(temporary, directory)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
