"""Training loops built from worker groups."""
