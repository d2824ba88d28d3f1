"""Run-directory plumbing: atomic files, checkpoints, metric logs, progress display."""
