"""Pure tensor functions for RL algorithms: advantage estimators, policy/value
losses, reward shaping, off-policy correction and sample filters.

Nothing here starts processes or does I/O; every function takes and returns
torch tensors (plus python scalars/metrics) so it can be unit tested in isolation.
"""
