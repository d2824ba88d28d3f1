"""Read back what the trackers stored for a run directory and compare it with ``metrics.jsonl``, row by row.

W&B: the offline run's ``.wandb`` file (W&B's record log: a 7-byte header, then 32 KiB blocks of records, each a
4-byte CRC-32, a 2-byte length and a 1-byte fragment type before its bytes; a record is W&B's ``Record`` protobuf,
which the wandb package ships). MLflow: ``MlflowClient.get_metric_history`` on the run that
``tracker_runs.json`` names.

    python -m embodied_rl.utils.loggers.readback RUN_DIR [RUN_DIR ...]

prints, per backend, the scalars compared and the largest absolute difference (exit 1 when any differ).
"""

from __future__ import annotations

import json
import math
import struct
import sys
import zlib
from pathlib import Path

from embodied_rl.utils.loggers.base import saved_run_ids

WANDB_HEADER = b":W&B"
WANDB_BLOCK = 32768
WANDB_RECORD_HEADER = 7  # CRC-32 (4 bytes), length (2), fragment type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def metrics_rows(run_dir: Path) -> list[dict]:
    """The rows of ``metrics.jsonl``."""
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if line]


def wandb_records(path: Path) -> list:
    """Every record of a ``.wandb`` file, parsed (``wandb.proto.wandb_internal_pb2.Record``); ValueError on a
    damaged block."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    if data[:4] != WANDB_HEADER:
        raise ValueError(f"{path}: not a W&B run file")
    records, pending, position = [], b"", WANDB_RECORD_HEADER
    while position + WANDB_RECORD_HEADER <= len(data):
        left = WANDB_BLOCK - position % WANDB_BLOCK
        if left < WANDB_RECORD_HEADER:  # a block's tail too short for a header is padding
            position += left
            continue
        checksum, length, kind = struct.unpack("<IHB", data[position:position + WANDB_RECORD_HEADER])
        chunk = data[position + WANDB_RECORD_HEADER:position + WANDB_RECORD_HEADER + length]
        position += WANDB_RECORD_HEADER + length
        if kind == 0 and length == 0:
            continue
        if zlib.crc32(bytes([kind]) + chunk) & 0xFFFFFFFF != checksum:
            raise ValueError(f"{path}: damaged record at byte {position - length - WANDB_RECORD_HEADER}")
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_files(run_dir: Path) -> list[Path]:
    """The run directory's W&B run files (offline or online), oldest first."""
    return sorted((Path(run_dir) / "wandb").glob("*run-*/run-*.wandb"))


def wandb_history(run_dir: Path) -> list[dict]:
    """The W&B history rows of the run directory's newest W&B run, W&B's own keys (``_step``, ``_runtime``,
    ``_timestamp``) and media left out."""
    files = wandb_files(run_dir)
    if not files:
        raise FileNotFoundError(f"{run_dir}: no W&B run file under wandb/")
    rows = []
    for record in wandb_records(files[-1]):
        if record.WhichOneof("record_type") != "history":
            continue
        row = {}
        for item in record.history.item:
            if len(item.nested_key) > 1:  # a field of a media value (a video's size, path, ...)
                continue
            key = item.key or item.nested_key[0]
            value = json.loads(item.value_json)
            if not key.startswith("_") and isinstance(value, (int, float)):
                row[key] = value
        rows.append(row)
    return rows


def wandb_record_kinds(run_dir: Path) -> dict:
    """What the newest W&B run file holds besides history: its run record (config, group, name), summary updates
    and file names, for checks."""
    run, summary, files = None, {}, []
    for record in wandb_records(wandb_files(run_dir)[-1]):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
        elif kind == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "files":
            files += [f.path for f in record.files.files]
    return {"run": run, "summary": summary, "files": files}


def mlflow_client(run_dir: Path):
    """``(MlflowClient, run_id)`` of the run directory's MLflow run (``tracker_runs.json``)."""
    from mlflow.tracking import MlflowClient

    entry = saved_run_ids(run_dir).get("mlflow")
    if not entry:
        raise FileNotFoundError(f"{run_dir}: tracker_runs.json names no MLflow run")
    return MlflowClient(tracking_uri=entry["tracking_uri"]), entry["run_id"]


def mlflow_history(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Each metric's ``(step, value)`` history in the run directory's MLflow run, in logging order."""
    from embodied_rl.utils.loggers.mlflow_tracker import file_store_allowed

    entry = saved_run_ids(run_dir).get("mlflow") or {}
    with file_store_allowed(entry.get("tracking_uri", "")):
        client, run_id = mlflow_client(run_dir)
        keys = client.get_run(run_id).data.metrics.keys()
        return {key: [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key),
                                                        key=lambda m: (m.step, m.timestamp))]
                for key in keys}


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _difference(a: float, b: float) -> float:
    if _same(a, b):
        return 0.0
    return abs(a - b) if math.isfinite(a) and math.isfinite(b) else math.inf


def compare_wandb(run_dir: Path) -> dict:
    """``{"scalars", "max_abs_difference", "rows", "problems"}``: W&B's history against ``metrics.jsonl``, row by
    row (same keys, same values, ``env_steps`` included)."""
    expected, stored = metrics_rows(run_dir), wandb_history(run_dir)
    problems, scalars, worst = [], 0, 0.0
    if len(expected) != len(stored):
        problems.append(f"{len(stored)} W&B rows, {len(expected)} in metrics.jsonl")
    for index, (want, got) in enumerate(zip(expected, stored)):
        if set(want) != set(got):
            problems.append(f"row {index}: keys differ: {sorted(set(want) ^ set(got))}")
        for key in set(want) & set(got):
            scalars += 1
            worst = max(worst, _difference(float(want[key]), float(got[key])))
    return {"scalars": scalars, "max_abs_difference": worst, "rows": len(stored), "problems": problems}


def compare_mlflow(run_dir: Path) -> dict:
    """The same for MLflow: each key's history (step, value) against ``metrics.jsonl``'s rows that have it, a row's
    step being its value of the run's step key (recorded in ``tracker_runs.json``)."""
    expected, stored = metrics_rows(run_dir), mlflow_history(run_dir)
    step_key = saved_run_ids(run_dir)["mlflow"].get("step_key", "env_steps")
    wanted: dict[str, list[tuple[int, float]]] = {}
    for row in expected:
        for key, value in row.items():
            if key != "env_steps":
                wanted.setdefault(key, []).append((int(row.get(step_key, row["env_steps"])), float(value)))
    problems, scalars, worst = [], 0, 0.0
    if set(wanted) != set(stored):
        problems.append(f"keys differ: {sorted(set(wanted) ^ set(stored))}")
    for key in set(wanted) & set(stored):
        want, got = sorted(wanted[key], key=lambda p: p[0]), stored[key]
        if len(want) != len(got) or [s for s, _ in want] != [s for s, _ in got]:
            problems.append(f"{key}: steps {[s for s, _ in got]} in MLflow, {[s for s, _ in want]} in metrics.jsonl")
            continue
        for (_, a), (_, b) in zip(want, got):
            scalars += 1
            worst = max(worst, _difference(a, b))
    return {"scalars": scalars, "max_abs_difference": worst, "rows": len(expected), "problems": problems}


def main(argv: list[str]) -> int:
    failed = False
    for run_dir in map(Path, argv):
        ids = saved_run_ids(run_dir)
        for backend, compare in (("wandb", compare_wandb), ("mlflow", compare_mlflow)):
            if backend not in ids:
                continue
            result = compare(run_dir)
            failed |= bool(result["problems"]) or result["max_abs_difference"] != 0
            print(f"{run_dir} {backend}: {result['rows']} rows, {result['scalars']} scalars compared with "
                  f"metrics.jsonl, max abs difference {result['max_abs_difference']:g}"
                  + (f"; problems: {'; '.join(result['problems'])}" if result["problems"] else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
