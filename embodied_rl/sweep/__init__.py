"""``embodied-rl sweep``: grid and random searches over config keys and seeds as Ray Tune trials."""
