"""Pi0 checkpoints: a local directory in transformers' PI0 layout (``config.json`` + ``model.safetensors`` of
``PI0ForConditionalGeneration.save_pretrained``; LoRA adapters merged into the base weights), optional tokenizer
files, the normalisation statistics as transformers' ``PI0Processor`` writes them (``processor_config.json``,
``normalization.py``), and our side file ``embodied_rl_pi0.safetensors`` (value head, noise head, state / action
normalisation buffers) with ``embodied_rl_pi0.json`` (the policy options). Written into a temporary sibling directory and renamed
into place, so a crash never leaves a half-written checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import torch

from embodied_rl.models.pi0.normalization import write_processor_statistics

SIDE_WEIGHTS = "embodied_rl_pi0.safetensors"
SIDE_OPTIONS = "embodied_rl_pi0.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


def has_tokenizer(directory: str) -> bool:
    """Whether ``directory`` holds tokenizer files (then the policy uses ``PretrainedTokenizer``)."""
    return any(os.path.exists(os.path.join(directory, name)) for name in TOKENIZER_FILES)


def load_pi0_model(directory: str, chunk: int, dtype: torch.dtype = torch.float32):
    """``PI0ForConditionalGeneration`` from a local directory (nothing downloaded), its ``chunk_size`` set to
    ``chunk`` (no weight depends on it: the expert's action tokens carry rotary positions only)."""
    from transformers import PI0Config, PI0ForConditionalGeneration

    if not os.path.isfile(os.path.join(directory, "config.json")):
        raise ValueError(f"pi0 option checkpoint={directory!r} is not allowed; allowed values: a local directory "
                         "with transformers' PI0 config.json and model.safetensors")
    config = PI0Config.from_pretrained(directory, local_files_only=True)
    config.chunk_size = int(chunk)
    return PI0ForConditionalGeneration.from_pretrained(directory, config=config, dtype=dtype,
                                                       local_files_only=True)


def merged_pi0_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with every LoRA layer merged (``W + B A * scaling``) under the plain PI0 names."""
    from peft.tuners.lora import LoraLayer

    merged = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            weight = module.get_base_layer().weight
            for adapter in module.active_adapters:
                weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
            merged[f"{name}.weight"] = weight
    state = {}
    for key, value in model.state_dict().items():
        if "lora_" in key:
            continue
        key = key.replace(".base_layer.", ".")
        state[key] = merged.get(key, value).detach().contiguous().clone()
    return state


def side_state(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The policy's own tensors outside the PI0 model (value head, noise head, normalisation buffers)."""
    return {k: v.detach().contiguous().clone() for k, v in policy.state_dict().items() if not k.startswith("pi0.")}


def save_checkpoint(policy, directory: str) -> None:
    """Writes ``policy`` (a ``Pi0Policy``) to ``directory`` (replaced if it exists), atomically."""
    from safetensors.torch import save_file

    directory = os.path.abspath(directory)
    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=f".{os.path.basename(directory)}.tmp-", dir=parent)
    try:
        policy.pi0.save_pretrained(temporary, state_dict=merged_pi0_state_dict(policy.pi0))
        tokenizer = getattr(policy.tokenizer, "tokenizer", None)
        if tokenizer is not None:
            tokenizer.save_pretrained(temporary)
        save_file(side_state(policy), os.path.join(temporary, SIDE_WEIGHTS))
        write_processor_statistics(policy, temporary)
        options = {"obs_dim": policy.state_dim, "action_dim": policy.action_dim, "action_chunk": policy.action_chunk,
                   "cameras": policy.cameras, "settings": {k: (list(v) if isinstance(v, tuple) else v)
                                                           for k, v in vars(policy.settings).items()}}
        with open(os.path.join(temporary, SIDE_OPTIONS), "w") as f:
            json.dump(options, f, indent=1)
        old = None
        if os.path.exists(directory):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(directory)}.old-", dir=parent)
            os.rename(directory, os.path.join(old, "previous"))
        os.rename(temporary, directory)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def load_side_state(policy, directory: str) -> None:
    """Loads the side file into ``policy`` where present; tensors whose shapes differ (another head width, another
    state / action width) are left at their fresh values."""
    from safetensors.torch import load_file

    path = os.path.join(directory, SIDE_WEIGHTS)
    if not os.path.isfile(path):
        return
    own = policy.state_dict()
    fitting = {k: v for k, v in load_file(path).items() if k in own and own[k].shape == v.shape}
    policy.load_state_dict(fitting, strict=False)


def read_options(directory: str) -> dict:
    """The policy options saved beside the weights (``{}`` for a plain transformers PI0 directory)."""
    path = os.path.join(directory, SIDE_OPTIONS)
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        return json.load(f)
