"""Any registered Gymnasium env as a task: ``gym:<id>`` (``gym:CartPole-v1``, ``gym:Pendulum-v1``), with
``env.kwargs.*`` passed to ``gymnasium.make``. Box and Discrete observation and action spaces (``spaces.py``),
initial states from ``reset(seed=...)`` (``single.py``), the env's own reward and time limit. Importing the package
imports no Gymnasium env."""
