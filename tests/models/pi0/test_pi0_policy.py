"""act / evaluate of the pi0 policy: log-prob agreement, the chain, determinism, rows, values, a PPO-like step."""

import numpy as np
import pytest
import torch

from embodied_rl.models.pi0 import CHAIN_KEY
from embodied_rl.models.registry import POLICIES
from embodied_rl.models.text_tokenizer import encode_batch
from pi0_helpers import observations, tiny_policy


def _agreement(policy, obs):
    actions, logp, values, stored = policy.act(obs)
    new_logp, entropy, new_values = policy.evaluate({**obs, **stored}, actions)
    return actions, logp, values, stored, new_logp, entropy, new_values


@pytest.mark.parametrize("chunk, steps, options", [(4, 5, {}), (8, 10, {}), (4, 6, {"stochastic_steps": [1, 3]}),
                                                   (4, 5, {"noise_mode": "flow_noise"}),
                                                   (4, 5, {"logp_dims": "all", "settings": {"max_action_dim": 6}})])
def test_evaluate_reproduces_act_log_probs_in_fp32(chunk, steps, options):
    policy = tiny_policy(chunk=chunk, steps=steps, **options)
    obs = observations(batch=4)  # four instructions of different lengths, one empty
    actions, logp, values, stored, new_logp, entropy, new_values = _agreement(policy, obs)
    assert "pi0" in POLICIES
    assert actions.shape == (4, chunk, 4) and logp.shape == values.shape == entropy.shape == (4,)
    assert stored[CHAIN_KEY].shape == (4, steps + 1, chunk, policy.model_action_dim)
    assert stored[CHAIN_KEY].dtype == torch.float32
    assert torch.isfinite(logp).all()
    assert (new_logp - logp).abs().max().item() < 1e-5
    torch.testing.assert_close(new_values, values, atol=1e-6, rtol=0)
    # The log-prob really depends on the chain: a nudged chain scores differently.
    nudged = stored[CHAIN_KEY].clone()
    first = (policy.settings.stochastic_steps or (0,))[0]
    nudged[:, first + 1] += 0.05  # the output of a stochastic step
    assert (policy.evaluate({**obs, CHAIN_KEY: nudged}, actions)[0] - logp).abs().min() > 1e-3


@pytest.mark.parametrize("options", [{}, {"stochastic_steps": [1, 3]}, {"logp_dims": "all",
                                                                       "settings": {"max_action_dim": 6}}])
def test_token_log_probs_are_one_per_gaussian_coordinate_and_recomputed_by_evaluate_tokens(options):
    policy = tiny_policy(chunk=4, steps=6, **options)
    obs = observations(batch=3)
    actions, logp, _, stored = policy.act(obs)
    stochastic = len(policy.settings.stochastic_steps or range(6))
    dims = policy.model_action_dim if options.get("logp_dims") == "all" else 4
    token_logp = stored["stored.token_logp"]
    assert token_logp.shape == (3, stochastic * 4 * dims)
    assert torch.equal(token_logp.sum(-1), logp)
    again, entropy, _ = policy.evaluate_tokens({**obs, **stored}, actions)
    assert again.shape == entropy.shape == token_logp.shape
    assert (again - token_logp).abs().max() < 1e-5


def test_entropy_is_the_sum_of_the_transition_entropies():
    policy = tiny_policy(chunk=4, steps=5, noise_level=0.5)
    obs = observations(batch=2)
    *_, entropy, _ = _agreement(policy, obs)
    expected = 0.0
    for i in range(5):
        t = 1 - i / 5
        sigma = 0.5 * np.sqrt(min(t, 0.8) / (1 - min(t, 0.8)))
        expected += 4 * 4 * (0.5 + 0.5 * np.log(2 * np.pi) + np.log(sigma * np.sqrt(0.2)))
    torch.testing.assert_close(entropy, torch.full((2,), float(expected)), atol=1e-4, rtol=0)


def test_single_action_chunk_returns_batch_by_action_and_the_chain_ends_in_the_actions():
    policy = tiny_policy(chunk=1, steps=5)
    obs = observations(batch=3)
    actions, logp, values, stored = policy.act(obs)
    assert actions.shape == (3, 4) and values.shape == (3,)
    torch.testing.assert_close(stored[CHAIN_KEY][:, -1, 0, :4], actions, atol=0, rtol=0)
    chunked = tiny_policy(chunk=4, steps=5, action_normalization="mean_std")
    chunked.set_action_statistics(np.random.default_rng(0).normal(0.3, 0.2, size=(100, 4, 4)))
    actions, _, _, stored = chunked.act(observations(batch=3))
    unnormalised = stored[CHAIN_KEY][:, -1, :, :4] * chunked.action_scale + chunked.action_offset
    torch.testing.assert_close(unnormalised, actions, atol=0, rtol=0)
    assert not torch.allclose(chunked.action_offset, torch.zeros(4))


def test_deterministic_act_is_the_plain_ode_of_transformers_and_draws_no_noise():
    policy = tiny_policy(chunk=4, steps=5)
    obs = observations(batch=3)
    rng = torch.get_rng_state()
    first = policy.act(obs, deterministic=True)
    assert torch.equal(torch.get_rng_state(), rng)  # no random draw at all
    second = policy.act(obs, deterministic=True)
    torch.testing.assert_close(first[0], second[0], atol=0, rtol=0)
    torch.testing.assert_close(first[1], second[1], atol=0, rtol=0)
    assert torch.equal(first[3][CHAIN_KEY][:, 0], torch.zeros(3, 4, 4))
    # transformers' own Euler sampler from zero noise gives the same chunk.
    pixels = policy._pixels(obs["rgb"])
    texts = [s + "\n" for s in obs["instruction"]]
    ids, mask = encode_batch(policy.tokenizer, texts, policy.settings.max_text_tokens)
    images = torch.full((3, policy.tokens_per_image), policy.image_token_id)
    input_ids = torch.cat([images, ids], 1)
    attention = torch.cat([torch.ones_like(images), mask.long()], 1)
    reference = policy.pi0.sample_actions(state=policy._state(obs, 3), input_ids=input_ids, pixel_values=pixels,
                                          noise=torch.zeros(3, 4, 4), attention_mask=attention,
                                          pixel_attention_mask=torch.ones(3, 1, dtype=torch.bool), num_steps=5)
    torch.testing.assert_close(first[0], reference, atol=1e-5, rtol=0)
    stochastic = policy.act(obs)[0]
    assert (stochastic - first[0]).abs().max() > 1e-2


def test_a_row_does_not_depend_on_the_other_rows_instructions():
    policy = tiny_policy(chunk=4, steps=5)
    obs = observations(batch=4)
    together = policy.act(obs, deterministic=True)
    alone = policy.act({k: v[1:2] for k, v in obs.items()}, deterministic=True)
    torch.testing.assert_close(together[0][1:2], alone[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(together[2][1:2], alone[2], atol=1e-5, rtol=0)
    short = policy.act({k: v[0:1] for k, v in obs.items()}, deterministic=True)
    torch.testing.assert_close(together[0][0:1], short[0], atol=1e-5, rtol=0)
    # ... but does depend on its own instruction and image.
    other = dict(obs, instruction=np.array(["open the drawer"] * 4))
    assert (policy.act(other, deterministic=True)[0] - together[0]).abs().max() > 1e-4


def test_missing_instruction_and_state_and_several_cameras():
    policy = tiny_policy(chunk=2, steps=3, state_dim=0, cameras=2, image=48)
    obs = observations(batch=2, state_dim=0, cameras=2, image=48)
    del obs["instruction"]
    actions, logp, values, stored = policy.act(obs)
    assert actions.shape == (2, 2, 4) and values.shape == (2,)
    assert (policy.evaluate({**obs, **stored}, actions)[0] - logp).abs().max() < 1e-5


def test_a_ppo_like_step_with_positive_advantage_raises_the_log_prob():
    policy = tiny_policy(chunk=4, steps=5)
    obs = observations(batch=4)
    actions, logp, _, stored = policy.act(obs)
    batch = {**obs, **stored}
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-4)
    advantages = torch.tensor([1.0, 0.5, 2.0, 1.0])  # all positive
    for _ in range(2):
        ratio = (policy.evaluate(batch, actions)[0] - logp).exp()
        loss = -torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages).mean()  # clipped PPO surrogate
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    grads = [p.grad for n, p in policy.named_parameters() if n.startswith("pi0.model.vlm.language_model")]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)  # gradients reach the prefix model
    after = policy.evaluate(batch, actions)[0]
    assert ((after - logp) * advantages).mean() > 0.05


def test_value_head_is_named_critic_and_detached_from_the_prefix():
    policy = tiny_policy(chunk=2, steps=3)
    obs = observations(batch=3)
    values = policy.evaluate({**obs, **policy.act(obs)[3]})[2]
    assert values.shape == (3,) and any(n.startswith("critic") for n, _ in policy.named_parameters())
    values.sum().backward()
    assert all(p.grad is None for n, p in policy.named_parameters() if n.startswith("pi0."))
    assert all(p.grad is not None for n, p in policy.named_parameters() if n.startswith("critic"))


@pytest.mark.parametrize("noise_mode", ["sde", "flow_noise"])
def test_one_random_step_draws_noise_at_each_decisions_stored_step_only(noise_mode):
    steps, chunk = 4, 2
    policy = tiny_policy(chunk=chunk, steps=steps, stochastic_steps="one_random", noise_mode=noise_mode)
    obs = observations(batch=16)
    torch.manual_seed(3)
    actions, logp, values, stored = policy.act(obs)
    chosen, chain = stored["stored.sde_step"], stored[CHAIN_KEY]
    assert chosen.shape == (16,) and chosen.dtype == torch.int64 and len(set(chosen.tolist())) > 1
    assert stored["stored.token_logp"].shape == (16, chunk * 4)  # one step's Gaussian coordinates
    # every step but the stored one is the ODE step: replaying the chain deterministically reproduces them
    prefix = policy._prefix(obs)
    for step, t, dt in policy._times():
        v, _ = policy._velocity(prefix, chain[:, step], t)
        ode = chain[:, step] + v * dt
        off = (chain[:, step + 1] - ode).abs().amax(dim=(1, 2))
        assert (off[chosen != step] < 1e-5).all() and (off[chosen == step] > 1e-3).all()
    new_logp, entropy, new_values = policy.evaluate({**obs, **stored}, actions)
    assert (new_logp - logp).abs().max() < 1e-4 and torch.isfinite(entropy).all()
    torch.testing.assert_close(new_values, values, atol=1e-6, rtol=0)
    # the log-prob is the stored step's: scoring the same chain at another step gives other values
    moved = {**obs, **stored, "stored.sde_step": (chosen + 1) % steps}
    assert (policy.evaluate(moved, actions)[0] - logp).abs().min() > 1e-3


def test_one_random_step_is_the_only_string_stochastic_steps_allows():
    with pytest.raises(ValueError, match="stochastic_steps='last' is not allowed.*'one_random'"):
        tiny_policy(stochastic_steps="last")


def test_zero_initial_noise_leaves_the_stochastic_step_as_the_only_randomness():
    """``initial_noise="zero"``: sampled chains start where the deterministic one does (``x_1 = 0``), so up to
    their stochastic step they are the deterministic chain; log-probs still agree with ``evaluate``."""
    steps = 4
    policy = tiny_policy(chunk=2, steps=steps, stochastic_steps="one_random", initial_noise="zero")
    obs = observations(batch=16)
    torch.manual_seed(5)
    actions, logp, _, stored = policy.act(obs)
    chain, chosen = stored[CHAIN_KEY], stored["stored.sde_step"]
    assert torch.equal(chain[:, 0], torch.zeros_like(chain[:, 0]))
    deterministic = policy.act(obs, deterministic=True)[3][CHAIN_KEY]
    first = chosen > 0  # rows whose first step is an ODE step: it equals the deterministic chain's
    torch.testing.assert_close(chain[first, 1], deterministic[first, 1], atol=1e-6, rtol=0)
    new_logp = policy.evaluate({**obs, **stored}, actions)[0]
    assert (new_logp - logp).abs().max() < 1e-4
    gaussian = tiny_policy(chunk=2, steps=steps, stochastic_steps="one_random")
    assert gaussian.act(obs)[3][CHAIN_KEY][:, 0].abs().max() > 0.5  # the default draws x_1 ~ N(0, I)
    with pytest.raises(ValueError, match="initial_noise='ones' is not allowed.*'gaussian', 'zero'"):
        tiny_policy(initial_noise="ones")
