"""openvla (autoregressive) and openvla_oft (parallel): shapes, act/evaluate log-prob agreement, row independence
under padding, supervised learning."""

import pytest
import torch

from openvla_helpers import ACTION_DIM, make_obs, make_policy, rows, supervised_losses

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MODES = ["openvla", "openvla_oft"]


@pytest.mark.parametrize("name", MODES)
@pytest.mark.parametrize("chunk", [1, 3])
def test_shapes(name, chunk):
    policy = make_policy(name, action_chunk=chunk)
    obs = make_obs(4)
    actions, logp, values, stored = policy.act(obs)
    assert actions.shape == ((4, chunk, ACTION_DIM) if chunk > 1 else (4, ACTION_DIM))
    assert actions.dtype == torch.float32 and logp.shape == values.shape == (4,)
    assert stored["stored.action_tokens"].shape == (4, chunk * ACTION_DIM)
    assert stored["stored.action_tokens"].dtype == torch.int64
    assert actions.abs().max() <= 1.0  # default statistics: ManiSkill's [-1, 1] actions
    assert policy.value(obs).shape == (4,)
    del obs["instruction"], obs["state"]  # both may be absent ("" and a zero state)
    assert policy.act(obs)[0].shape[0] == 4


@pytest.mark.parametrize("name", MODES)
@pytest.mark.parametrize("chunk", [3, 8])
def test_evaluate_reproduces_act_log_probs_with_mixed_instruction_lengths(name, chunk):
    policy = make_policy(name, action_chunk=chunk)
    obs = make_obs(4)  # instructions of 21, 5, 37 and 0 characters
    actions, logp, values, stored = policy.act(obs)
    full = {**obs, **stored}
    new_logp, entropy, new_values = policy.evaluate(full, actions)
    assert (new_logp - logp).abs().max() < 1e-5
    assert (new_values - values).abs().max() < 1e-5
    assert (entropy > 0).all() and (entropy <= chunk * ACTION_DIM * torch.log(torch.tensor(256.0)) + 1e-4).all()
    # a row's result does not depend on the other rows (left padding): each row alone, in another order
    for i in range(4):
        alone, _, alone_values = policy.evaluate(rows(full, [i]), actions[i:i + 1])
        # a sum of chunk x ACTION_DIM log-probs of a few hundred in size: fp32's spacing there is ~3e-5
        assert abs(alone.item() - logp[i].item()) < 1e-5 + 1e-6 * abs(logp[i].item())
        assert abs(alone_values.item() - values[i].item()) < 1e-5
    order = [2, 0, 3, 1]
    shuffled, _, _ = policy.evaluate(rows(full, order), actions[order])
    assert (shuffled - logp[order]).abs().max() < 1e-5
    # the stored tokens are what is scored: other tokens, other log-probs
    other = {**full, "stored.action_tokens": full["stored.action_tokens"].flip(1)}
    assert (policy.evaluate(other, actions)[0] - logp).abs().max() > 1e-3


@pytest.mark.parametrize("name", MODES)
def test_deterministic_act_is_the_argmax(name):
    policy = make_policy(name)
    obs = make_obs(3)
    first = policy.act(obs, deterministic=True)
    second = policy.act(obs, deterministic=True)
    assert torch.equal(first[0], second[0])
    sampled_logp = torch.stack([policy.act(obs)[1] for _ in range(5)])
    assert (first[1][None] >= sampled_logp - 1e-5).all()  # per token argmax: the most probable decision


def test_autoregressive_tokens_condition_on_earlier_tokens():
    """Autoregressive: token j's distribution depends on tokens < j (teacher forcing), OFT's does not."""
    for name, depends in (("openvla", True), ("openvla_oft", False)):
        policy = make_policy(name, action_chunk=2)
        obs = make_obs(2)
        columns = torch.randint(0, 256, (2, 2 * ACTION_DIM), generator=torch.Generator().manual_seed(1))
        changed = columns.clone()
        changed[:, 0] = (changed[:, 0] + 128) % 256
        a = policy.token_log_probs(obs, columns)[0][:, 1:]
        b = policy.token_log_probs(obs, changed)[0][:, 1:]
        assert ((a - b).abs().max() > 1e-4) == depends


@pytest.mark.parametrize("name", MODES)
def test_supervised_loss_learns_the_target_bins(name):
    policy = make_policy(name, action_chunk=2)
    obs = make_obs(4)
    targets = torch.rand(4, 2, ACTION_DIM, generator=torch.Generator().manual_seed(3)) * 2 - 1
    losses = supervised_losses(policy, obs, targets, 50)
    assert losses[0] > 5.0 and losses[-1] < 0.2 * losses[0]
    actions, _, _, stored = policy.act(obs, deterministic=True)
    expected = policy.action_tokenizer.tokens(targets).reshape(4, -1)
    assert torch.equal(stored["stored.action_tokens"], expected)
    assert (actions - targets).abs().max() <= 1 / 255 + 1e-5


@pytest.mark.parametrize("name", MODES)
def test_token_log_probs_stored_at_act_are_those_evaluate_tokens_recomputes(name):
    policy = make_policy(name, action_chunk=3)
    obs = make_obs(4)
    actions, logp, _, stored = policy.act(obs)
    token_logp = stored["stored.token_logp"]
    assert token_logp.shape == (4, 3 * ACTION_DIM) and token_logp.dtype == torch.float32
    assert torch.equal(token_logp.sum(-1), logp)
    again, entropy, _ = policy.evaluate_tokens({**obs, **stored}, actions)
    assert again.shape == entropy.shape == token_logp.shape
    assert (again - token_logp).abs().max() < 1e-5
    assert (token_logp <= 0).all() and (entropy >= 0).all()


@pytest.mark.parametrize("name", MODES)
def test_temperature_sharpens_the_sampling_distribution_but_keeps_its_argmax(name):
    warm, cold = make_policy(name, seed=0), make_policy(name, seed=0, temperature=0.25)
    obs = make_obs(3)
    assert torch.equal(warm.act(obs, deterministic=True)[0], cold.act(obs, deterministic=True)[0])
    actions, _, _, stored = warm.act(obs)
    warm_entropy = warm.evaluate({**obs, **stored}, actions)[1]
    cold_entropy = cold.evaluate({**obs, **stored}, actions)[1]
    assert (cold_entropy < warm_entropy).all()
    # act and evaluate share the sharpened distribution
    actions, logp, _, stored = cold.act(obs)
    assert (cold.evaluate({**obs, **stored}, actions)[0] - logp).abs().max() < 1e-5
    with pytest.raises(ValueError, match="temperature=0"):
        make_policy(name, temperature=0)


def test_sdpa_attention_gives_eager_attentions_result_under_the_action_block_mask():
    """The language model runs SDPA (fused kernels, no [B, heads, S, S] scores kept for the backward pass); with
    OFT's additive mask (left padding, bidirectional attention over the whole sequence) it equals eager attention."""
    import copy

    policy = make_policy("openvla_oft")
    obs = make_obs(3)
    with torch.no_grad():
        logits, values = policy._forward(obs, None)
        eager = copy.deepcopy(policy)
        eager.language_model.config._attn_implementation = "eager"  # read by every layer at each forward
        eager_logits, eager_values = eager._forward(obs, None)
    assert policy.language_model.config._attn_implementation == "sdpa"
    torch.testing.assert_close(logits, eager_logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(values, eager_values, rtol=1e-4, atol=1e-5)
