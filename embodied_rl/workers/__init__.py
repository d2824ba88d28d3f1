"""RL roles on the runtime: env workers step simulators, rollout workers run the policy, actor workers train."""
