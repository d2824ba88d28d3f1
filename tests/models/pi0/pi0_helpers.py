"""Tiny Pi0 policies and observations for the pi0 tests."""

import numpy as np
import torch

from embodied_rl.models.pi0 import Pi0Policy

INSTRUCTIONS = np.array(["pick", "pick up the red cube and place it on the green goal", "", "push"])


def tiny_policy(chunk=4, steps=5, state_dim=5, action_dim=4, image=32, cameras=1, seed=0, **options):
    torch.manual_seed(seed)
    return Pi0Policy(obs_dim=state_dim, action_dim=action_dim, hidden_sizes=(16,),
                     obs_shapes={"rgb": [image, image, 3 * cameras], "state": [state_dim]}, action_chunk=chunk,
                     num_denoising_steps=steps, **options)


def observations(batch=4, state_dim=5, image=32, cameras=1, seed=1, instructions=INSTRUCTIONS):
    generator = torch.Generator().manual_seed(seed)
    obs = {"rgb": torch.randint(0, 256, (batch, image, image, 3 * cameras), dtype=torch.uint8, generator=generator),
           "instruction": np.resize(instructions, batch)}
    if state_dim:
        obs["state"] = torch.randn(batch, state_dim, generator=generator)
    return obs
