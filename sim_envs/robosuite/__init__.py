"""robosuite (MuJoCo, Panda arm by default) as a simulator family: tasks ``robosuite_<task>`` (``tasks.py``), options
(``options.py``), seeded initial states (``single.py``), camera images through robosuite's off-screen renderer
(``camera.py``), scripted demonstrations (``scripted.py``, ``demos.py``) and the bare robosuite loop ``embodied-rl
bench env`` measures against (``reference.py``). Importing the package imports neither robosuite nor MuJoCo."""
