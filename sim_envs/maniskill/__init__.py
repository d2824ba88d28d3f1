"""ManiSkill3 adapter: the only place in the project that touches ManiSkill/SAPIEN."""
