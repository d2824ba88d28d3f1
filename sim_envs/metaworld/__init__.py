"""MetaWorld (MuJoCo, Sawyer arm) as a simulator family: tasks ``metaworld_<task>`` (``tasks.py``), seeded
initial states (``single.py``), camera images through MuJoCo's GL (``gl.py``, ``camera.py``) and scripted-policy
demonstrations (``demos.py``). Importing the package imports neither MetaWorld nor MuJoCo."""
