"""The published OpenVLA / OpenVLA-OFT sequence layouts: what the language model is fed, how it attends, which
positions' outputs predict the action tokens. Each test names the reference it follows."""

import pytest
import torch

from embodied_rl.models.openvla.configuration import BYTE_SPACE_TOKEN
from embodied_rl.models.openvla.prompt import prompt_token_ids
from embodied_rl.models.text_tokenizer import BOS_ID, ByteTokenizer
from openvla_helpers import ACTION_DIM, make_obs, make_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OPENVLA_PROMPT = "In: What action should the robot take to {instruction}?\nOut:"


class Recorder:
    """Stands in for ``policy.runner``: runs it and keeps ``(embeds, mask, positions, hidden)`` of every call."""

    def __init__(self, runner):
        self.runner, self.calls = runner, []

    def __call__(self, embeds, mask, positions, cache=None):
        hidden = self.runner(embeds, mask, positions, cache)
        self.calls.append((embeds, mask, positions, hidden))
        return hidden

    def new_cache(self, language_model):
        return self.runner.new_cache(language_model)


def recorded(policy) -> Recorder:
    policy.runner = Recorder(policy.runner)
    return policy.runner


def embed(policy, ids) -> torch.Tensor:
    return policy.language_model.get_input_embeddings()(torch.as_tensor(ids)[None])[0]


def byte_ids(text: str) -> list[int]:
    return ByteTokenizer().encode(text)


@torch.no_grad()
def test_openvla_prompt_is_bos_then_patches_then_the_text_and_the_empty_token():
    """openvla/openvla ``prismatic/extern/hf/modeling_prismatic.py``: ``predict_action`` appends Llama-2's empty
    piece 29871 after ``Out:`` unless the prompt already ends with it, and ``forward`` inserts the projected
    patches after the first token (``<s>``): the LM sees ``[BOS, patches, prompt after BOS, 29871]``, the prompt
    being ``In: What action should the robot take to {instruction lowercased}?\\nOut:``
    (``experiments/robot/openvla_utils.py``). Tiny models: the byte tokenizer, its space as the empty token."""
    policy = make_policy("openvla", action_chunk=1)
    policy.config.prompt = OPENVLA_PROMPT
    obs = make_obs(1, instructions=["Pick up the Cube"])
    recorder = recorded(policy)
    policy.value(obs)
    embeds = recorder.calls[0][0][0]
    ids = byte_ids("In: What action should the robot take to pick up the cube?\nOut:") + [BYTE_SPACE_TOKEN]
    assert ids[0] == BOS_ID
    patches = policy.projector(policy.vision_backbone(obs["rgb"]))[0]
    expected = torch.cat([embed(policy, ids[:1]), patches, embed(policy, ids[1:])])
    torch.testing.assert_close(embeds[:len(expected)], expected, rtol=0, atol=1e-6)
    assert len(embeds) == len(expected) + ACTION_DIM - 1  # then the teacher-forced action tokens but the last


def test_the_empty_token_is_appended_once():
    """``predict_action``: 29871 is appended only when the prompt does not already end with it."""

    class Llama:  # the ids a Llama-2 tokenizer gives "...Out:" and "...Out: " (which ends with the empty piece)
        pad_id = 0

        def encode(self, text):
            return [1, 512, 29901] + ([29871] if text.endswith(" ") else [])

    ids, mask = prompt_token_ids(Llama(), ["Out:", "Out: "], 64, 29871)
    assert ids.tolist() == [[1, 512, 29901, 29871], [1, 512, 29901, 29871]] and mask.all()
    ids, _ = prompt_token_ids(Llama(), ["Out:"], 2, 29871)  # the cut instruction still ends with it
    assert ids.tolist() == [[1, 512, 29871]]


def test_a_published_config_uses_llama2s_empty_and_stop_tokens():
    """A published checkpoint (no embodied_rl block in config.json) runs with Llama-2's 29871 and ``</s>`` = 2
    (``prismatic/vla/constants.py``: ``STOP_INDEX = 2``) and OpenVLA's prompt."""
    from embodied_rl.models.openvla.checkpoint import _config_from_published

    config = _config_from_published({"vision_backbone_id": "dinosiglip-vit-so-224px", "text_config": {}})
    assert (config.empty_token_id, config.stop_token_id, config.prompt) == (29871, 2, OPENVLA_PROMPT)


@torch.no_grad()
def test_openvla_action_token_j_is_predicted_at_the_position_before_it():
    """Causal next-token prediction (``generate`` in ``predict_action``): the first action token's logits are the
    LM head at the last prompt token (29871), token j's at the position of token j - 1."""
    policy = make_policy("openvla", action_chunk=2)
    obs = make_obs(2)
    columns = torch.randint(0, 256, (2, 2 * ACTION_DIM), generator=torch.Generator().manual_seed(0))
    recorder = recorded(policy)
    logits, _ = policy._forward(obs, columns)
    hidden = recorder.calls[0][3]
    n = 2 * ACTION_DIM
    prompt = hidden.shape[1] - (n - 1)
    torch.testing.assert_close(logits, policy._action_logits(hidden[:, prompt - 1:prompt - 1 + n]))


def _published_oft(action_chunk=2):
    policy = make_policy("openvla_oft", action_chunk=action_chunk)
    with torch.no_grad():
        policy.action_queries.zero_()  # OFT's placeholders are zero embeddings (a published load gives zeros)
    return policy


@torch.no_grad()
def test_oft_sequence_places_proprio_after_the_patches_and_ends_with_placeholders_and_the_stop_token():
    """moojink/openvla-oft ``prismatic/extern/hf/modeling_prismatic.py``: ``predict_action`` appends 29871, then
    ``K * A`` placeholder tokens whose embeddings are zeroed and the stop token ``</s>`` (it "appears at train
    time"); ``_process_proprio_features`` appends the proprio token to the patches, and the patches go after BOS:
    ``[BOS, patches, proprio, prompt after BOS, 29871, 0 x K A, </s>]``."""
    policy = _published_oft()
    obs = make_obs(1, instructions=["push"])
    recorder = recorded(policy)
    policy.act(obs, deterministic=True)
    embeds = recorder.calls[0][0][0]
    ids = byte_ids("push") + [BYTE_SPACE_TOKEN]
    patches = policy.projector(policy.vision_backbone(obs["rgb"]))[0]
    proprio = policy.proprio_projector((obs["state"] - policy.state_mean) / policy.state_std)
    n = 2 * ACTION_DIM
    expected = torch.cat([embed(policy, ids[:1]), patches, proprio, embed(policy, ids[1:]),
                          torch.zeros(n, patches.shape[1]), embed(policy, [policy.config.stop_token_id])])
    assert embeds.shape == expected.shape
    torch.testing.assert_close(embeds, expected, rtol=0, atol=1e-6)


@torch.no_grad()
def test_oft_attention_is_bidirectional_over_the_whole_sequence():
    """openvla-oft runs on its transformers fork whose Llama attention is non-causal: "all attention masks become
    bidirectional" (maintainer, moojink/openvla-oft issue #27). Only padding keys are masked here: a prompt
    position sees the placeholders and the stop token after it."""
    policy = _published_oft()
    obs = make_obs(2, instructions=["pick up the red cube", "push"])
    recorder = recorded(policy)
    policy.act(obs, deterministic=True)
    _, mask, _, _ = recorder.calls[0]
    valid = mask[:, 0, -1] == 0  # the keys the stop token (always real) sees
    for row in range(2):
        keys = mask[row, 0][valid[row]]
        assert (keys[:, valid[row]] == 0).all()  # every valid position sees every valid position
        assert (keys[:, ~valid[row]] < -1e30).all()  # and no padding
    assert (~valid[1]).any()  # the short row is padded
    # behaviour: the value (read at the last prompt token) changes with the stop token after it
    values = policy.value(obs)
    policy.config.stop_token_id = 7
    assert (policy.value(obs) - values).abs().min() > 1e-6


@torch.no_grad()
def test_oft_reads_the_hidden_states_one_position_before_each_placeholder():
    """``_regression_or_discrete_prediction``: the action hidden states / logits are taken at
    ``[NUM_PATCHES + NUM_PROMPT_TOKENS, + K * A)``, i.e. from the last prompt token (29871) to the placeholder
    before the last: shifted by one, as next-token prediction, although decoding is parallel."""
    policy = _published_oft()
    obs = make_obs(3)
    recorder = recorded(policy)
    logits, _ = policy._forward(obs, None)
    hidden = recorder.calls[0][3]
    n = 2 * ACTION_DIM
    prompt = hidden.shape[1] - n - 1  # then n placeholders and the stop token
    torch.testing.assert_close(logits, policy._action_logits(hidden[:, prompt - 1:prompt - 1 + n]))
    assert (logits - policy._action_logits(hidden[:, prompt:prompt + n])).abs().max() > 1e-4
