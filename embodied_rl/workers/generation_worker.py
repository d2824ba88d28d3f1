"""Generation worker: an inference copy of the causal LM behind a generation engine; answers batches of questions
with sampled responses and each token's log-prob. The engine is Hugging Face ``generate`` on the worker's own model
copy, or vLLM / SGLang (``engines/registry.py``), whose weights are updated in place. With ``quantization="int8"``
the HF engine samples from an int8 copy, quantised anew after every weight update (``engines/quantization.py``)."""

from __future__ import annotations

import time

import torch

from embodied_rl.engines.generation import SamplingParams
from embodied_rl.engines.quantization import quantized_copy
from embodied_rl.engines.registry import make_generation_engine
from embodied_rl.models.causal_lm.chat import build_lm, prompt_ids
from embodied_rl.models.causal_lm.loading import TINY_SIZES, load_tokenizer
from embodied_rl.runtime import Worker
from embodied_rl.runtime.offload import MoveReport, Offloader
from embodied_rl.workers.messages import POLICY_VERSION_KEY, TEXT_ROUNDS_KEY, ResponsePart
from embodied_rl.workers.weights import load_host_weights, weights_template, host_weights


class GenerationWorker(Worker):
    prompt = {"prompt_format": "chat", "template": "{question}"}
    """How questions become prompts (``prompt_ids``' options; set per worker from ``model.prompt_*``)."""

    CHANNEL_ONLY = ("prompt_ids", "token_ids", "logprobs")
    """What of a response goes to the trainer through the channel only (``generate_into_channel``)."""

    def __init__(self, model: dict, quantization: str = "none", engine: str = "hf",
                 engine_options: dict | None = None, channel=None, put_timeout_s: float = 120.0, **kwargs):
        super().__init__(**kwargs)
        self.channel, self.put_timeout_s = channel, put_timeout_s
        self.quantization, self.engine_name = quantization, engine
        self.prompt = dict(prompt_format=model.get("prompt_format", "chat"),
                           template=model.get("prompt_template", "{question}"))
        checkpoint = model["name"] if model["name"] not in TINY_SIZES else None
        if engine != "hf" and checkpoint is not None:  # the engine loads the checkpoint: no model of our own
            self.model, self.tokenizer = None, load_tokenizer(checkpoint)
            self.engine = make_generation_engine(engine, None, self.tokenizer, checkpoint, **(engine_options or {}))
        else:
            self.model, self.tokenizer = build_lm(model["name"], model.get("seed", 0))
            self.model.to(self.device)
            if engine == "hf":
                self._build_engine()
            else:  # a model built in code: the engine loads a saved copy of it, which this worker then drops
                self.engine = make_generation_engine(engine, self.model, self.tokenizer, None, **(engine_options or {}))
                self.model = None
        self.policy_version = 0
        self.offloader = Offloader([self.model] if self.model is not None else [])
        self.released = False  # vLLM / SGLang: the engine's memory freed for the trainer's turn
        self.pending_weights: dict | None = None  # weights published while released, loaded at the next onload

    def offload(self) -> MoveReport:
        """Give the device up between generation turns: the hf engine's model to host memory; vLLM and SGLang free
        their own memory (``release_memory``: weights to host, KV cache dropped), where they were made with
        ``release_between_turns``."""
        report = self.offloader.offload()
        if self.engine_name != "hf":
            self.engine.release_memory()
            self.released = True
        return report

    def onload(self) -> MoveReport:
        """Take the device back for a generation turn; weights published meanwhile go into the engine now."""
        if self.engine_name != "hf" and self.released:
            self.engine.resume_memory()
            self.released = False
            if self.pending_weights is not None:
                self.engine.load_weights(self.pending_weights)
                self.pending_weights = None
        return self.offloader.onload()

    def _build_engine(self) -> None:
        self.engine = make_generation_engine("hf", quantized_copy(self.model, self.quantization), self.tokenizer)

    def load_weights(self, weights_and_version: tuple[dict, int]) -> int:
        state_dict, version = weights_and_version
        if self.engine_name != "hf" and self.released:  # loaded into the engine when it resumes (onload)
            self.pending_weights = {**(self.pending_weights or {}), **state_dict}
        elif self.engine_name != "hf":
            self.engine.load_weights(state_dict)
        else:
            load_host_weights(self.model, state_dict)
            if self.quantization != "none":
                self._build_engine()
        self.policy_version = version
        return version

    def receive_weights(self, collective: str, only_trained: bool = False) -> int:
        """Receive the model broadcast by rank 0 of ``collective`` (``LMActorWorker.broadcast_weights``) into this
        worker's model in place, re-quantise the int8 copy if there is one; returns the policy version.
        ``only_trained`` is taken for ``WeightSync``'s one interface (every weight of the LM travels).

        vLLM and SGLang own their weights: each bucket of the broadcast (whole layers, on this worker's device: over
        NCCL on GPUs) goes into the engine as it arrives (``load_weights``: in-process into vLLM's model, through
        CUDA IPC into SGLang's), so neither the object store nor a second whole copy of the model is involved."""
        if self.engine_name != "hf":
            version = []

            def into_engine(bucket: dict) -> None:
                if POLICY_VERSION_KEY in bucket:
                    version.append(int(bucket.pop(POLICY_VERSION_KEY)))
                if bucket:
                    self.engine.load_weights(bucket)

            self.collectives[collective].broadcast_state_dict(None, src=0, on_bucket=into_engine)
            self.policy_version = version[0]
            return self.policy_version
        template = weights_template(self.model)
        template[POLICY_VERSION_KEY] = torch.zeros((), dtype=torch.int64)
        received = self.collectives[collective].broadcast_state_dict(template, src=0)
        if self.quantization != "none":
            self._build_engine()
        self.policy_version = int(received[POLICY_VERSION_KEY])
        return self.policy_version

    def get_weights(self) -> tuple[dict, int]:
        """``({name: tensor}, policy_version)`` of this worker's model (the hf engine's; vLLM and SGLang own theirs)."""
        if self.model is None:
            raise RuntimeError(f"generation worker {self.address}: engine {self.engine_name!r} owns its weights")
        return host_weights(self.model), self.policy_version

    def generate(self, questions: list[str], params: dict) -> list[dict]:
        """For each question (through the tokenizer's chat template): as ``generate_ids`` on its prompt ids."""
        return self.generate_ids([prompt_ids(self.tokenizer, q, **self.prompt) for q in questions], params)

    def generate_ids(self, prompts: list[list[int]], params: dict) -> list[dict]:
        """For each prompt (token ids, e.g. a multi-turn conversation so far): ``prompt_ids``, ``token_ids``,
        ``logprobs`` (the engine's), ``response_tokens`` (their count), ``text`` (decoded without special tokens), ``finished``, the
        ``policy_version`` that answered, ``generate_s`` (the whole call's seconds) and its wall-clock
        ``generate_started`` / ``generate_ended`` (``time.time()``)."""
        started, wall_started = time.perf_counter(), time.time()
        prompts = [list(p) for p in prompts]
        generations = self.engine.generate(prompts, SamplingParams(**params))
        seconds = time.perf_counter() - started
        return [dict(prompt_ids=p, token_ids=g.token_ids, logprobs=g.logprobs, finished=g.finished,
                     response_tokens=len(g.token_ids),
                     text=self.tokenizer.decode(g.token_ids, skip_special_tokens=True),
                     policy_version=self.policy_version, generate_s=seconds, generate_started=wall_started,
                     generate_ended=wall_started + seconds) for p, g in zip(prompts, generations)]

    def generate_into_channel(self, questions: list[str], params: dict, round_id: int, part: int,
                              attempt: int = 0) -> list[dict]:
        """``generate``, with what the trainer needs of each response sent on the channel as part ``part`` of round
        ``round_id`` (a ``ResponsePart``: ``CHANNEL_ONLY``, ``finished`` and ``policy_version``; see
        ``generate_ids``); returns the rest, which the driver scores and reports (``text``, ``finished``,
        ``response_tokens``, the version and times): token ids and log-probs never pass through the driver."""
        answers = self.generate(questions, params)
        trained = [{**{key: answer.pop(key) for key in self.CHANNEL_ONLY}, "finished": answer["finished"],
                    "policy_version": answer["policy_version"]} for answer in answers]
        self.channel.put(ResponsePart(round_id, part, trained, attempt), TEXT_ROUNDS_KEY,
                         timeout=self.put_timeout_s)
        return answers
