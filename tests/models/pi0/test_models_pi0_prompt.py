"""Pi0's prompt as transformers' PI0Processor builds it."""

import pytest
import torch

from embodied_rl.models.text_tokenizer import BOS_ID
from pi0_helpers import observations, tiny_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@torch.no_grad()
def test_the_prompt_is_bos_text_newline_also_without_an_instruction():
    """transformers ``models/pi0/processing_pi0.py`` (``build_prompts``): image tokens, then ``<bos>{text}\\n``;
    a missing text is the empty prompt (``""``), so the model still sees ``<bos>\\n``."""
    policy = tiny_policy()
    seen = []
    encode = policy.tokenizer.encode
    policy.tokenizer.encode = lambda text: seen.append(text) or encode(text)
    obs = observations(batch=2, instructions=["pick up the cube", "push"])
    policy.value(obs)
    assert seen == ["pick up the cube\n", "push\n"]
    assert encode(seen[1])[0] == BOS_ID
    seen.clear()
    del obs["instruction"]
    policy.value(obs)
    assert seen == ["\n", "\n"]
