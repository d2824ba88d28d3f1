"""Datasets in the formats other tools read and write: ``lerobot/`` (LeRobotDataset v3.0 directories)."""
