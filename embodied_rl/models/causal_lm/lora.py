"""LoRA for the causal LMs the LM actor trains (peft): adapters on the attention and MLP projections, the base frozen
in its checkpoint's dtype, the adapters float32 master weights. Generation workers hold the plain model: they get
the merged weights (``W + scale B A`` under the plain names), as do saved models."""

from __future__ import annotations

import torch

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def add_lora(model: torch.nn.Module, rank: int, alpha: float = 0.0) -> int:
    """Inject rank-``rank`` adapters (``alpha`` 0: 2 x rank) into ``model``'s projections, freeze everything else,
    keep the adapters in float32; returns the number of trained parameters."""
    from peft import LoraConfig, inject_adapter_in_model

    present = sorted({name.rsplit(".", 1)[-1] for name, _ in model.named_modules()} & set(TARGETS))
    if not present:
        raise ValueError(f"{type(model).__name__} has none of the projections LoRA targets ({', '.join(TARGETS)})")
    inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, lora_dropout=0.0,
                                       target_modules=present), model)
    trained = 0
    for name, parameter in model.named_parameters():
        parameter.requires_grad_("lora_" in name)
        if "lora_" in name:
            parameter.data = parameter.data.float()
            trained += parameter.numel()
    return trained


def merged_state_dict(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """``model``'s weights under the plain model's names, each adapter merged into its base weight (in the base's
    dtype, or ``dtype``); a model without adapters: its own state dict."""
    state = {}
    for name, value in model.state_dict().items():
        if "lora_" in name:
            continue
        state[name.replace(".base_layer.", ".")] = value.detach()
    for name, module in model.named_modules():
        if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight"):
            base = module.base_layer.weight
            with torch.no_grad():
                delta = sum(module.get_delta_weight(a) for a in module.active_adapters)
            state[f"{name}.weight"] = (base.detach().float() + delta.float()).to(base.dtype)
    return {k: v.to(dtype) if dtype is not None and v.is_floating_point() else v for k, v in state.items()}
