"""Generation engines by name: the Hugging Face engine for real, one clear error where vLLM or SGLang is missing,
the vLLM and SGLang engines' mapping onto their APIs (stand-in modules: the real ones run in
scripts/gpu_llm_checks.py), and the GPU check script skipping on a machine without a GPU."""

import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest
import torch

from embodied_rl.engines.generation import SamplingParams
from embodied_rl.engines.hf_generation import HFGenerationEngine
from embodied_rl.engines.registry import make_generation_engine
from embodied_rl.models.causal_lm.loading import build_tiny_causal_lm, save_causal_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_causal_lm(seed=2)


def test_hf_engine_by_name_generates(tiny):
    model, tokenizer = tiny
    engine = make_generation_engine("hf", model, tokenizer)
    assert isinstance(engine, HFGenerationEngine) and engine.eos_id == tokenizer.eos_token_id
    out = engine.generate([tokenizer("Q: 1+2\nA: ")["input_ids"]], SamplingParams(max_new_tokens=4, temperature=0))
    assert 1 <= len(out[0].token_ids) == len(out[0].logprobs) <= 4
    with pytest.raises(ValueError, match="takes no options"):
        make_generation_engine("hf", model, tokenizer, dtype="float32")


def test_unknown_engine_names_the_allowed_ones(tiny):
    with pytest.raises(ValueError, match="allowed: hf, vllm, sglang"):
        make_generation_engine("tgi", *tiny)


@pytest.mark.parametrize("name, hint", [("vllm", "pip install vllm"), ("sglang", "pip install sglang")])
def test_missing_package_is_one_clear_error(tiny, monkeypatch, name, hint):
    monkeypatch.setitem(sys.modules, name, None)  # import fails, whether or not the package is installed
    with pytest.raises(ValueError) as error:
        make_generation_engine(name, *tiny)
    message = str(error.value)
    assert "\n" not in message and f"generation engine {name!r} needs the {name} package" in message
    assert hint in message


def _fake_vllm(calls: dict) -> types.ModuleType:
    """Just the surface of ``vllm`` the engine uses, recording what it is given."""

    class LLM:
        def __init__(self, model, **options):
            calls["init"] = dict(model=model, **options)

        def generate(self, prompts, params, use_tqdm=True):
            calls["generate"] = (prompts, params)
            outputs = []
            for prompt, p in zip(prompts, params):
                tokens = [5, 2] if prompt["prompt_token_ids"][0] == 7 else [5, 6, 8][:p.max_tokens]
                logprobs = [{t: types.SimpleNamespace(logprob=-0.1 * t)} for t in tokens]
                reason = "stop" if tokens[-1] in (p.stop_token_ids or []) else "length"
                completion = types.SimpleNamespace(token_ids=tokens, logprobs=logprobs, finish_reason=reason)
                outputs.append(types.SimpleNamespace(outputs=[completion]))
            return outputs

        def collective_rpc(self, method, args=()):
            calls.setdefault("rpc", []).append((method, args))

        def reset_prefix_cache(self):
            calls["reset"] = calls.get("reset", 0) + 1

        def sleep(self, level=1):
            calls.setdefault("memory", []).append(f"sleep({level})")

        def wake_up(self, tags=None):
            calls.setdefault("memory", []).append("wake_up")

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, types.SimpleNamespace
    vllm.inputs = types.ModuleType("vllm.inputs")
    vllm.inputs.TokensPrompt = dict
    return vllm


def test_vllm_engine_maps_onto_vllms_api(tiny, monkeypatch, tmp_path):
    calls = {}
    vllm = _fake_vllm(calls)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", vllm.inputs)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model, tokenizer = tiny
    engine = make_generation_engine("vllm", model, tokenizer, dtype="float32")  # no checkpoint: saves one
    init = calls["init"]
    assert (Path(init["model"]) / "config.json").is_file() and init["dtype"] == "float32"
    assert init["logprobs_mode"] == "processed_logprobs"
    assert init["worker_extension_cls"] == "embodied_rl.engines.vllm_generation.WeightUpdateExtension"

    out = engine.generate([[7, 1], [9, 1, 1]], SamplingParams(max_new_tokens=3, temperature=0.7, top_p=0.9, seed=4))
    prompts, params = calls["generate"]
    assert prompts == [{"prompt_token_ids": [7, 1]}, {"prompt_token_ids": [9, 1, 1]}]
    assert [p.seed for p in params] == [4, 5] and {p.top_p for p in params} == {0.9}
    assert all(p.logprobs == 0 and p.stop_token_ids == [tokenizer.eos_token_id] and p.max_tokens == 3
               for p in params)
    assert [(g.token_ids, g.finished) for g in out] == [([5, 2], True), ([5, 6, 8], False)]
    assert out[0].logprobs == pytest.approx([-0.5, -0.2])
    engine.generate([[7]], SamplingParams(temperature=0, top_p=0.5, seed=4))
    assert calls["generate"][1][0].top_p == 1.0 and calls["generate"][1][0].seed is None

    engine.load_weights({name: value.numpy() for name, value in model.state_dict().items()})
    (method, (named,)), = calls["rpc"]
    assert method == "embodied_rl_load_weights" and calls["reset"] == 1
    assert {n for n, _ in named} == set(model.state_dict()) and all(isinstance(t, torch.Tensor) for _, t in named)
    with pytest.raises(ValueError, match="q_proj/k_proj/v_proj"):
        engine.load_weights({"model.layers.0.self_attn.q_proj.weight": torch.zeros(64, 64)})


def test_sglang_engine_maps_onto_sglangs_api(tiny, monkeypatch, tmp_path):
    calls = {}

    class Engine:
        def __init__(self, model_path, **options):
            calls["init"] = dict(model_path=model_path, **options)

        def generate(self, input_ids, sampling_params, return_logprob):
            calls["generate"] = (input_ids, sampling_params, return_logprob)
            return [{"meta_info": {"output_token_logprobs": [(-0.5, 5, None), (-0.2, 2, None)],
                                   "finish_reason": {"type": "stop", "matched": 2}}},
                    {"meta_info": {"output_token_logprobs": [(-0.3, 6, None)], "finish_reason": {"type": "length"}}}]

        def update_weights_from_tensor(self, named_tensors):
            calls["update"] = named_tensors
            return (len(named_tensors) > 1, "one tensor is not enough")

    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(Engine=Engine))
    model, tokenizer = tiny
    save_causal_lm(model, tokenizer, tmp_path)
    engine = make_generation_engine("sglang", model, tokenizer, tmp_path, dtype="float32")
    assert calls["init"]["model_path"] == str(tmp_path) and calls["init"]["dtype"] == "float32"
    out = engine.generate([[7, 1], [9]], SamplingParams(max_new_tokens=3, temperature=0.7, seed=4))
    input_ids, params, return_logprob = calls["generate"]
    assert input_ids == [[7, 1], [9]] and return_logprob
    assert [p["sampling_seed"] for p in params] == [4, 5] and params[0]["stop_token_ids"] == [tokenizer.eos_token_id]
    assert [(g.token_ids, g.logprobs, g.finished) for g in out] == [([5, 2], [-0.5, -0.2], True), ([6], [-0.3], False)]
    engine.load_weights({name: value.numpy() for name, value in model.state_dict().items()})
    assert len(calls["update"]) == len(model.state_dict())
    with pytest.raises(RuntimeError, match="one tensor is not enough"):
        engine.load_weights({"lm_head.weight": model.lm_head.weight})


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script runs the real checks")
def test_gpu_llm_checks_skips_without_a_gpu():
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_llm_checks.py")], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["vllm", "sglang"]
    assert all(": SKIP " in line for line in lines), lines


@pytest.mark.parametrize("checkpoint", [True, False])
def test_a_vllm_generation_worker_passes_engine_options_and_keeps_no_model_of_its_own(monkeypatch, tmp_path,
                                                                                      checkpoint):
    """``rollout.engine_options`` reach ``vllm.LLM``; with a checkpoint directory the worker loads only its tokenizer
    (vLLM loads the weights), and a model built in code is saved for vLLM and then dropped."""
    from embodied_rl.models.causal_lm.tiny_checkpoints import write_tiny_checkpoint
    from embodied_rl.workers import generation_worker
    from embodied_rl.workers.generation_worker import GenerationWorker

    calls = {}
    vllm = _fake_vllm(calls)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", vllm.inputs)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    built = []
    monkeypatch.setattr(generation_worker, "build_lm", lambda *a, **k: built.append(a) or build_tiny_causal_lm("tiny"))
    name = str(write_tiny_checkpoint(tmp_path / "qwen2", "qwen2")) if checkpoint else "tiny"
    worker = GenerationWorker(model={"name": name}, engine="vllm", group="generation", rank=0, world_size=1,
                              engine_options={"gpu_memory_utilization": 0.4, "tensor_parallel_size": 1})
    assert calls["init"]["gpu_memory_utilization"] == 0.4 and calls["init"]["tensor_parallel_size"] == 1
    assert worker.model is None and bool(built) == (not checkpoint)
    if checkpoint:
        assert calls["init"]["model"] == name
    with pytest.raises(RuntimeError, match="owns its weights"):
        worker.get_weights()


def test_a_vllm_generation_worker_takes_a_broadcast_into_its_engine_bucket_by_bucket(monkeypatch, tmp_path):
    """Under broadcast weight sync a vLLM (or SGLang) worker hands each bucket of the broadcast to its engine as it
    arrives (whole layers, on its device) and keeps no copy; the policy version travels with them."""
    import torch

    from embodied_rl.models.causal_lm.tiny_checkpoints import write_tiny_checkpoint
    from embodied_rl.workers.generation_worker import GenerationWorker
    from embodied_rl.workers.messages import POLICY_VERSION_KEY

    vllm = _fake_vllm({})
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", vllm.inputs)
    name = str(write_tiny_checkpoint(tmp_path / "qwen2", "qwen2"))
    worker = GenerationWorker(model={"name": name}, engine="vllm", group="generation", rank=0, world_size=1)
    loads = []
    monkeypatch.setattr(worker.engine, "load_weights", lambda state: loads.append(dict(state)))
    buckets = [{"model.layers.0.q_proj.weight": torch.ones(2), POLICY_VERSION_KEY: torch.tensor(5)},
               {"model.layers.1.q_proj.weight": torch.zeros(2)}]

    class Arriving:  # the receiving side of ``CollectiveGroup.broadcast_state_dict`` with ``on_bucket``
        def broadcast_state_dict(self, state, src, on_bucket=None):
            assert state is None and src == 0 and on_bucket is not None
            for bucket in buckets:
                on_bucket(dict(bucket))
            return {}

    worker.collectives["weights:0"] = Arriving()
    assert worker.receive_weights("weights:0") == 5 == worker.policy_version
    assert [list(load) for load in loads] == [["model.layers.0.q_proj.weight"], ["model.layers.1.q_proj.weight"]]


def test_engine_options_with_the_hf_engine_are_refused():
    from embodied_rl.config.errors import ConfigError
    from embodied_rl.config.reasoning import load_reasoning_config

    with pytest.raises(ConfigError, match="rollout.engine_options"):
        load_reasoning_config("math_arith", None, ["rollout.engine_options={dtype: bfloat16}"])


def test_a_vllm_worker_on_a_shared_gpu_sleeps_between_turns_and_takes_weights_on_waking(monkeypatch, tmp_path):
    """With ``release_between_turns`` (a shared slot, ``placement.offload=auto``) vLLM is made in sleep mode; the
    worker's offload puts it to sleep (level 1: weights to host, KV cache dropped), weights published while it
    sleeps wait in the worker (in the dtype sent) and go into the engine after ``wake_up``, in that order. Without
    the option nothing sleeps."""
    from embodied_rl.models.causal_lm.tiny_checkpoints import write_tiny_checkpoint
    from embodied_rl.workers.generation_worker import GenerationWorker

    calls = {}
    vllm = _fake_vllm(calls)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", vllm.inputs)
    name = str(write_tiny_checkpoint(tmp_path / "qwen2", "qwen2"))
    worker = GenerationWorker(model={"name": name}, engine="vllm", group="generation", rank=0, world_size=1,
                              engine_options={"release_between_turns": True})
    assert calls["init"]["enable_sleep_mode"] is True and "release_between_turns" not in calls["init"]
    worker.offload()
    weights = {"lm_head.weight": torch.zeros(4, 4, dtype=torch.bfloat16)}
    assert worker.load_weights((weights, 3)) == 3
    assert "rpc" not in calls and calls["memory"] == ["sleep(1)"]  # nothing goes into a sleeping engine
    worker.onload()
    assert calls["memory"] == ["sleep(1)", "wake_up"]
    (method, (named,)), = calls["rpc"]
    assert method == "embodied_rl_load_weights" and [n for n, _ in named] == ["lm_head.weight"]
    assert named[0][1].dtype == torch.bfloat16 and worker.pending_weights is None

    calls.clear()
    plain = GenerationWorker(model={"name": name}, engine="vllm", group="generation", rank=0, world_size=1)
    assert "enable_sleep_mode" not in calls["init"]
    plain.offload()
    plain.onload()
    assert "memory" not in calls


def test_engines_release_memory_only_on_shared_slots():
    """``engine_options``: vLLM / SGLang on slots shared with the trainer (offload auto) release their memory
    between turns; on slots of their own, with offload=never, or for the hf engine they do not."""
    from embodied_rl.config.reasoning import engine_options, load_reasoning_config

    shared = "placement.components={'env,rollout,actor': '0'}"
    split = "placement.components={'env,rollout': '0', 'actor': '1'}"

    def options(*overrides, given=None):
        config = load_reasoning_config("math_arith", None, list(overrides))
        config.rollout.engine = "vllm"  # set after loading: the package is not installed here
        config.rollout.engine_options = dict(given or {})
        return engine_options(config)

    assert options(shared) == {"release_between_turns": True}
    assert options(split) == {} and options(shared, "placement.offload=never") == {}
    assert options(shared, given={"release_between_turns": False}) == {"release_between_turns": False}
    config = load_reasoning_config("math_arith", None, [shared])
    assert engine_options(config) == {}  # hf: the worker's offloader moves its model
