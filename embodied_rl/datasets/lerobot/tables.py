"""The parquet tables of a LeRobot dataset as pyarrow builds and reads them: frames, episodes, tasks.

Column types are the ones lerobot's reader (Hugging Face ``datasets`` with the features of ``meta/info.json``)
casts to: a feature of shape ``[1]`` is a plain column (float32, int64 or bool); a vector ``[D]`` a fixed-size list
of D values; an ``image`` feature a struct ``{bytes: PNG, path: null}`` (``datasets.Image``). Frames tables also
carry the Hugging Face features in their schema metadata, so ``datasets`` alone reads them right.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

_ARROW_TYPES = {"float32": pa.float32(), "float64": pa.float64(), "int64": pa.int64(), "int32": pa.int32(),
                "bool": pa.bool_(), "string": pa.string()}
IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
"""Arrow storage of ``datasets.Image``."""


def column(values: np.ndarray | list, feature: dict) -> pa.Array:
    """One frames-table column of ``feature`` (``{"dtype", "shape"}``): ``values`` ``[N]`` / ``[N, 1]`` for shape
    ``[1]``, ``[N, D]`` for a vector, a list of PNG ``bytes`` for an image."""
    dtype, shape = feature["dtype"], list(feature["shape"])
    if dtype == "image":
        return pa.array([{"bytes": data, "path": None} for data in values], type=IMAGE_TYPE)
    value_type = _ARROW_TYPES[dtype]
    array = np.asarray(values)
    if shape == [1]:
        return pa.array(array.reshape(-1), type=value_type)
    if len(shape) != 1:
        raise ValueError(f"feature of shape {shape}: only [1], [D] and images are written")
    flat = pa.array(array.reshape(-1), type=value_type)
    return pa.FixedSizeListArray.from_arrays(flat, shape[0])


def hugging_face_features(features: dict) -> dict:
    """The ``datasets`` features (its JSON form) of the non-video ``features``, for the parquet metadata."""
    out = {}
    for key, feature in features.items():
        if feature["dtype"] == "video":
            continue
        if feature["dtype"] == "image":
            out[key] = {"_type": "Image"}
        elif list(feature["shape"]) == [1]:
            out[key] = {"dtype": feature["dtype"], "_type": "Value"}
        else:
            out[key] = {"feature": {"dtype": feature["dtype"], "_type": "Value"}, "length": int(feature["shape"][0]),
                        "_type": "Sequence"}
    return out


def frames_table(columns: dict[str, pa.Array], features: dict) -> pa.Table:
    """A frames table of ``columns`` (in ``features`` order) with the Hugging Face features as metadata."""
    table = pa.table({key: columns[key] for key in features if key in columns})
    metadata = {b"huggingface": json.dumps({"info": {"features": hugging_face_features(features)}}).encode()}
    return table.replace_schema_metadata(metadata)


def tasks_table(tasks: list[str]) -> pa.Table:
    """``meta/tasks.parquet``: ``task_index`` with the task texts as its (pandas) index, as lerobot writes it with
    ``pandas.DataFrame({"task_index": ...}, index=tasks).to_parquet``."""
    table = pa.table({"task_index": pa.array(np.arange(len(tasks)), pa.int64()),
                      "__index_level_0__": pa.array(tasks, pa.string())})
    pandas_metadata = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                     "numpy_type": "int64", "metadata": None},
                    {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode",
                     "numpy_type": "object", "metadata": None}],
        "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.2.3"}
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_metadata).encode()})


def read_directory_tables(directory: Path) -> pa.Table:
    """Every ``chunk-*/file-*.parquet`` under ``directory``, concatenated in file order."""
    paths = sorted(Path(directory).glob("chunk-*/file-*.parquet"))
    if not paths:
        raise FileNotFoundError(f"no parquet files under {directory}")
    return pa.concat_tables([pq.read_table(path) for path in paths], promote_options="default")


def write_table(table: pa.Table, path: Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="snappy")


def png_bytes(image: np.ndarray) -> bytes:
    """uint8 ``[H, W, 3]`` -> PNG (lossless)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def png_image(data: bytes) -> np.ndarray:
    """PNG (or any format Pillow reads) -> uint8 ``[H, W, 3]``."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"), np.uint8)


def column_array(table: pa.Table, key: str, feature: dict) -> np.ndarray:
    """A numeric frames-table column as numpy: ``[N]`` for shape ``[1]``, ``[N, D]`` for a vector (fixed-size or
    variable lists)."""
    array = table.column(key).combine_chunks()
    listed = pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or \
        pa.types.is_fixed_size_list(array.type)
    if not listed:
        return array.to_numpy(zero_copy_only=False)
    values = array.flatten().to_numpy(zero_copy_only=False)
    if len(array) and len(values) % len(array):
        raise ValueError(f"column {key!r}: rows of different lengths (feature shape {list(feature['shape'])})")
    return values.reshape(len(array), -1)


def read_columns(path: Path, columns: list[str]) -> pa.Table:
    """The ``columns`` of the parquet file ``path`` that it has."""
    present = set(pq.read_schema(path).names)
    return pq.read_table(path, columns=[name for name in columns if name in present])
