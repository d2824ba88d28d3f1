"""OpenVLA-OFT's L1 regression action head: the LM's hidden states at the action positions -> a chunk of
normalised continuous actions.

Reference (moojink/openvla-oft, ``prismatic/models/action_heads.py``, ``L1RegressionActionHead`` built with
``input_dim = hidden_dim = llm width``): the ``K * A`` hidden states ``[B, K * A, W]`` are regrouped per action
``[B, K, A * W]`` and go through an MLP-ResNet: LayerNorm -> fc1 (``A W -> W``) -> ReLU -> 2 blocks of
``x + ReLU(Linear(LayerNorm(x)))`` -> LayerNorm -> fc2 (``W -> A``). Its output is the action in the [-1, 1]
normalised space (q01/q99 bounds); training minimises the L1 distance to the normalised target. Module names are
the published ones (``model.fc1.weight``, ``model.mlp_resnet_blocks.0.ffn.1.weight``, ...), so an
``action_head--*_checkpoint.pt`` state dict loads as is."""

from __future__ import annotations

import torch
from torch import nn

RESNET_BLOCKS = 2
"""MLP-ResNet blocks of the published head."""


class MLPResNetBlock(nn.Module):
    """``x + ReLU(Linear(LayerNorm(x)))`` on ``[..., W]`` (pre-norm feed-forward block)."""

    def __init__(self, width: int):
        super().__init__()
        self.ffn = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ffn(x)


class MLPResNet(nn.Module):
    """``[..., input]`` -> ``[..., output]``: LayerNorm, fc1, ReLU, residual blocks, LayerNorm, fc2."""

    def __init__(self, blocks: int, input_dim: int, hidden_dim: int, output_dim: int):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(input_dim)
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.mlp_resnet_blocks = nn.ModuleList(MLPResNetBlock(hidden_dim) for _ in range(blocks))
        self.layer_norm2 = nn.LayerNorm(hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, output_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(self.layer_norm1(x)))
        for block in self.mlp_resnet_blocks:
            x = block(x)
        return self.fc2(self.layer_norm2(x))


class L1RegressionActionHead(nn.Module):
    """Hidden states ``[B, K * A, W]`` -> normalised actions ``[B, K, A]`` (the published ``model`` MLP-ResNet)."""

    def __init__(self, llm_width: int, action_dim: int):
        super().__init__()
        self.action_dim = int(action_dim)
        self.model = MLPResNet(RESNET_BLOCKS, llm_width * self.action_dim, llm_width, self.action_dim)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = hidden.shape
        return self.model(hidden.reshape(batch, tokens // self.action_dim, -1))
