"""The vLLM and SGLang adapters against the pinned releases' own API (``engines/pinned_signatures.json``, recorded
from their wheels by scripts/record_engine_signatures.py): every method the adapters call on ``vllm.LLM`` /
``sglang.Engine`` exists there and takes every keyword they pass, and every constructor option they set is one the
release knows. Read from the adapters' source, so a misspelt or removed name fails here, not on a GPU."""

import ast
import json
from pathlib import Path

import pytest

import embodied_rl.engines as engines

RECORD = json.loads((Path(engines.__file__).parent / "pinned_signatures.json").read_text())
ADAPTERS = {"vllm": ("vllm_generation.py", "llm"), "sglang": ("sglang_generation.py", "engine")}


def calls_on(source: str, attribute: str) -> list[tuple[str, list[str]]]:
    """``(method, keywords)`` of every ``self.<attribute>.<method>(...)`` call in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if isinstance(target, ast.Attribute) and target.attr == attribute and \
                    isinstance(target.value, ast.Name) and target.value.id == "self":
                found.append((node.func.attr, [k.arg for k in node.keywords if k.arg]))
    return found


def options_set(source: str) -> set[str]:
    """The option names the adapter's constructor puts into ``options`` (``dict(...)``, ``options.update(...)``,
    ``options.setdefault("...")``)."""
    names = set()
    constructors = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    for node in (inner for constructor in constructors for inner in ast.walk(constructor)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "options" for t in node.targets) \
                and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "dict":
            names |= {k.arg for k in node.value.keywords if k.arg}
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                getattr(node.func.value, "id", None) == "options":
            if node.func.attr == "update":
                names |= {k.arg for k in node.keywords if k.arg}
            if node.func.attr == "setdefault" and isinstance(node.args[0], ast.Constant):
                names.add(node.args[0].value)
    return names


def problems(package: str, source: str) -> list[str]:
    record = RECORD[package]
    methods, attribute = record["methods"], ADAPTERS[package][1]
    found = []
    for method, keywords in calls_on(source, attribute):
        if method not in methods:
            found.append(f"{package} {record['version']} has no {method}()")
            continue
        params = methods[method]
        if not any(p.startswith("**") for p in params):
            found += [f"{package} {record['version']} {method}() takes no {k}=" for k in keywords if k not in params]
    known = set(record["options"]) | set(methods.get("__init__", []))
    found += [f"{package} {record['version']} knows no option {name}" for name in options_set(source) - known]
    return found


@pytest.mark.parametrize("package", ["vllm", "sglang"])
def test_every_call_and_option_exists_in_the_pinned_release(package):
    source = (Path(engines.__file__).parent / ADAPTERS[package][0]).read_text()
    calls = calls_on(source, ADAPTERS[package][1])
    used = {method for method, _ in calls}
    # the surface the runtime relies on: generation, weight updates, memory release between turns
    expected = {"vllm": {"generate", "collective_rpc", "reset_prefix_cache", "sleep", "wake_up"},
                "sglang": {"generate", "update_weights_from_tensor", "release_memory_occupation",
                           "resume_memory_occupation", "shutdown"}}[package]
    assert expected <= used, expected - used
    assert problems(package, source) == []


def test_a_misspelt_call_or_option_is_caught():
    source = (Path(engines.__file__).parent / "sglang_generation.py").read_text()
    broken = source.replace("release_memory_occupation()", "release_memory()").replace(
        "enable_memory_saver=True", "enable_mem_saver=True").replace("return_logprob=True", "return_logprobs=True")
    assert sorted(problems("sglang", broken)) == [
        "sglang 0.5.23 generate() takes no return_logprobs=", "sglang 0.5.23 has no release_memory()",
        "sglang 0.5.23 knows no option enable_mem_saver"]
    vllm = (Path(engines.__file__).parent / "vllm_generation.py").read_text()
    assert problems("vllm", vllm.replace("self.llm.sleep(level=1)", "self.llm.sleep(depth=1)")) == [
        "vllm 0.33.0 sleep() takes no depth="]
