"""LeRobotDataset v3.0 directories written from and read into ``DemoDataset`` without lerobot (pyarrow + ffmpeg).

``write_lerobot_dataset(demos, out, fps, instructions)`` (writer.py), ``read_lerobot_dataset(path, spaces)``
(reader.py), ``is_lerobot_dataset(path)`` (layout.py), ``TaskSpaces`` (spaces.py: the task's shapes a dataset must
fit). The layout and feature names are lerobot's (layout.py); statistics statistics.py; camera frames video.py.
"""

from embodied_rl.datasets.lerobot.layout import is_lerobot_dataset
from embodied_rl.datasets.lerobot.reader import read_info, read_instructions, read_lerobot_dataset
from embodied_rl.datasets.lerobot.spaces import TaskSpaces
from embodied_rl.datasets.lerobot.writer import WriteResult, write_lerobot_dataset

__all__ = ["TaskSpaces", "WriteResult", "is_lerobot_dataset", "read_info", "read_instructions",
           "read_lerobot_dataset", "write_lerobot_dataset"]
