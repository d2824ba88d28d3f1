"""Peak memory of a reasoning run's trainer and generation, measured on this machine's CPU for what
``plan_text`` predicts: one ``rl_update`` of an LM actor (after a first one, so AdamW's moments and the KL reference
exist) and one generation batch, on sequences as long as the plan assumes, under torch's ``MemTracker`` (every
tensor alive at once, by the tracker's own accounting). Small models only: the batch really runs."""

from __future__ import annotations

import math
import warnings

import torch

from embodied_rl.config.reasoning import actor_memory


def _device_tracker():
    """torch's ``MemTracker`` counting per device only: its per-module statistics refuse a module called twice in
    one iteration (micro-batches, the old and reference passes), so its module hooks are left out."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class DeviceMemTracker(MemTracker):
        def _pre_fw_hook(self, module, inputs):
            pass

        def _post_fw_hook(self, module, inputs, outputs):
            pass

        def _pre_bw_hook(self, module, args):
            pass

        def _post_bw_hook(self, module, args):
            pass

    return DeviceMemTracker()


def _batch(config, prompt_tokens: int, vocab: int, generator: torch.Generator) -> dict:
    G = config.algorithm.group_size
    n = config.rl.prompts_per_iteration * G
    ids = lambda length: torch.randint(3, vocab, (length,), generator=generator).tolist()  # noqa: E731
    # scores that differ within every group, so that every response is trained on
    scores = [float((i % G) / max(G - 1, 1)) for i in range(n)]
    return {"prompt_ids": [ids(prompt_tokens) for _ in range(n)],
            "token_ids": [ids(config.rollout.max_new_tokens) for _ in range(n)],
            "logprobs": [[-1.0] * config.rollout.max_new_tokens for _ in range(n)], "scores": scores}


def _peak(tracker) -> int:
    snapshot = tracker.get_tracker_snapshot("peak")
    return int(sum(entry["Total"] for entry in snapshot.values()))


def measured_trainer_peak(config, prompt_tokens: int) -> int:
    """Bytes alive at the peak of the second of two ``rl_update`` calls on a single-process trainer."""
    from embodied_rl.workers.lm_actor_worker import LMActorWorker

    worker = LMActorWorker(model={"name": config.model.name}, algorithm=config.algorithm, seed=config.seed,
                           lora={"rank": config.actor.lora_rank}, memory=actor_memory(config.actor),
                           group="lm-actor", rank=0, world_size=1)
    batch = _batch(config, prompt_tokens, worker.model.config.vocab_size, torch.Generator().manual_seed(0))
    arguments = dict(lr=1e-4, temperature=1.0, num_minibatches=config.rl.num_minibatches)
    worker.rl_update(batch, **arguments)
    tracker = _device_tracker()
    external = [worker.model, worker.optimizer]
    if worker.reference.copy is not None:
        external.append(worker.reference.copy)
    tracker.track_external(*external)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the module-hierarchy warning of checkpointed layers
        with tracker:
            worker.rl_update(batch, **arguments)
    return _peak(tracker)


def measured_generation_peak(config, prompt_tokens: int) -> int:
    """Bytes alive at the peak of one Hugging Face generation of a worker's share of an iteration's sequences."""
    from embodied_rl.engines.generation import SamplingParams
    from embodied_rl.engines.hf_generation import HFGenerationEngine
    from embodied_rl.models.causal_lm.chat import build_lm

    model, tokenizer = build_lm(config.model.name, 0)
    n = math.ceil(config.rl.prompts_per_iteration * config.algorithm.group_size / config.rollout.num_workers)
    vocab = model.config.vocab_size
    engine = HFGenerationEngine(model, 0, vocab + 1)  # an end token never drawn: every answer runs full length
    prompts = [torch.randint(3, vocab, (prompt_tokens,), generator=torch.Generator().manual_seed(i)).tolist()
               for i in range(n)]
    params = SamplingParams(max_new_tokens=config.rollout.max_new_tokens, temperature=1.0, seed=0)
    tracker = _device_tracker()
    tracker.track_external(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tracker, torch.no_grad():
            engine.generate(prompts, params)
    return _peak(tracker)
