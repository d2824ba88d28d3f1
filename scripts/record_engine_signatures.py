"""Record the pinned generation engines' API, as their wheels hold it, into
``embodied_rl/engines/pinned_signatures.json``: the parameters of ``sglang.Engine``'s and ``vllm.LLM``'s public
methods and the option names their constructors take (SGLang's ``ServerArgs`` fields, vLLM's ``EngineArgs``
fields). Read from the source files in the wheels (``pip download --no-deps``, nothing installed or imported):

    python scripts/record_engine_signatures.py          # needs the package index; downloads ~380 MB once

``tests/engines/test_engines_pinned_signatures.py`` checks every call and option of the engine adapters against
the file, so a version bump is: change the pins here and in pyproject.toml, rerun, fix what the test names."""

import ast
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PINS = {"sglang": "0.5.23", "vllm": "0.33.0"}
OUT = Path(__file__).resolve().parents[1] / "embodied_rl/engines/pinned_signatures.json"


def methods(source: str, class_name: str) -> dict[str, list[str]]:
    """Public methods of ``class_name`` in ``source``: their parameter names (``**name`` for a ``**kwargs``)."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        (not item.name.startswith("_") or item.name == "__init__"):
                    a = item.args
                    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg != "self"]
                    found[item.name] = names + ([f"**{a.kwarg.arg}"] if a.kwarg else [])
    return found


def fields(source: str, class_name: str | None = None) -> set[str]:
    """Annotated class-level names (dataclass fields) of ``class_name`` (None: of every class) in ``source``."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and (class_name is None or node.name == class_name):
            names |= {item.target.id for item in node.body
                      if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
    return names


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", scratch,
                        *(f"{name}=={version}" for name, version in PINS.items())], check=True)
        wheels = {name: zipfile.ZipFile(next(Path(scratch).glob(f"{name}-{version}-*.whl")))
                  for name, version in PINS.items()}
        sglang, vllm = wheels["sglang"], wheels["vllm"]
        read = lambda wheel, path: wheel.read(path).decode()  # noqa: E731
        sglang_options = set()
        for path in sglang.namelist():
            if path.startswith("sglang/srt/arg_groups/fields/") and path.endswith(".py") or \
                    path == "sglang/srt/server_args.py":
                sglang_options |= fields(read(sglang, path))
        record = {
            "sglang": {"version": PINS["sglang"],
                       "methods": methods(read(sglang, "sglang/srt/entrypoints/engine.py"), "Engine"),
                       "options": sorted(sglang_options)},
            "vllm": {"version": PINS["vllm"],
                     "methods": methods(read(vllm, "vllm/entrypoints/llm.py"), "LLM"),
                     "options": sorted(fields(read(vllm, "vllm/engine/arg_utils.py"), "EngineArgs"))},
        }
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}: " + ", ".join(f"{k} {v['version']}: {len(v['methods'])} methods, {len(v['options'])} "
                                       "options" for k, v in record.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
