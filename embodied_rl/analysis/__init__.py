"""Comparing runs: statistics over seeds as RL papers report them (``statistics.py``)."""
