"""Flow-SDE: the stochastic version of Pi0's Euler denoising, with Gaussian transition log-densities (the
construction of Flow-GRPO's ``sde_step_with_logprob``, written for Pi0's time convention). Pure tensor functions.

Pi0's flow: ``x_t = t * noise + (1 - t) * actions``, velocity ``v = noise - actions``; sampling integrates from
t = 1 (noise) to t = 0 (actions) with Euler steps ``dt = -1 / S`` (negative). Given the velocity, the score of the
marginal is ``grad log p_t(x) = -(x + (1 - t) v) / t``. The reverse-time SDE with the same marginals as the ODE,

    dx = [v - sigma_t^2 / 2 * score] dt + sigma_t dW,     sigma_t = a * sqrt(t / (1 - t)),

discretised by Euler-Maruyama gives the Gaussian transition

    x_{t+dt} ~ N(mean, std^2),  mean = x + [v + sigma_t^2 / (2 t) * (x + (1 - t) v)] dt,  std = sigma_t sqrt(|dt|).

``a`` is the noise level; ``t`` inside ``sigma_t`` is clamped to ``t_limit`` < 1 (at t = 1 it would be infinite).
With ``a = 0`` the step is the plain ODE step ``x + v dt``. All functions broadcast; ``t`` and ``dt`` may be floats
or tensors broadcastable to ``x`` (e.g. ``[B, 1, 1]`` for ``x`` ``[B, K, A]``).
"""

from __future__ import annotations

import math

import torch

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def sde_sigma(t, noise_level: float, t_limit: float):
    """``sigma_t = noise_level * sqrt(tc / (1 - tc))`` with ``tc = min(t, t_limit)``; same type/shape as ``t``."""
    if isinstance(t, torch.Tensor):
        tc = t.clamp(max=t_limit)
        return noise_level * torch.sqrt(tc / (1 - tc))
    tc = min(float(t), t_limit)
    return noise_level * math.sqrt(tc / (1 - tc))


def ode_step(x: torch.Tensor, v: torch.Tensor, dt) -> torch.Tensor:
    """Deterministic Euler step ``x + v * dt``; ``x``, ``v`` ``[..., K, A]``."""
    return x + v * dt


def sde_step_mean_std(x: torch.Tensor, v: torch.Tensor, t, dt, sigma):
    """Mean and std of the Flow-SDE transition from ``x`` at time ``t`` (``> 0``) to time ``t + dt`` (``dt < 0``).

    x, v: ``[..., K, A]`` state and predicted velocity; sigma: ``sigma_t`` (float or broadcastable tensor).
    Returns ``(mean [..., K, A], std)`` with std broadcastable to mean (``sigma * sqrt(|dt|)``)."""
    correction = sigma ** 2 / (2 * t)
    mean = x + (v + correction * (x + (1 - t) * v)) * dt
    std = sigma * (abs(dt) ** 0.5 if not isinstance(dt, torch.Tensor) else dt.abs().sqrt())
    return mean, std


def flow_noise_mean_std(x: torch.Tensor, v: torch.Tensor, dt, noise_scale: torch.Tensor):
    """Flow-Noise transition: the ODE mean ``x + v dt`` and a learned std ``noise_scale * sqrt(|dt|)``
    (``noise_scale`` ``[..., K, A]``, positive)."""
    root = abs(dt) ** 0.5 if not isinstance(dt, torch.Tensor) else dt.abs().sqrt()
    return ode_step(x, v, dt), noise_scale * root


def gaussian_log_prob(value: torch.Tensor, mean: torch.Tensor, std) -> torch.Tensor:
    """Elementwise ``log N(value; mean, std^2)`` (broadcast shape)."""
    std = torch.as_tensor(std, dtype=mean.dtype, device=mean.device)
    return -((value - mean) ** 2) / (2 * std ** 2) - torch.log(std) - LOG_SQRT_2PI


def gaussian_entropy(std) -> torch.Tensor:
    """Elementwise entropy ``0.5 + log(sqrt(2 pi) std)`` of ``N(., std^2)``."""
    std = torch.as_tensor(std)
    return 0.5 + LOG_SQRT_2PI + torch.log(std)
