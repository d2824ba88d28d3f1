#!/usr/bin/env bash
# A math_arith run through the CLI: SIGKILL one generation worker (kill -9, as an operator would) after 5
# iterations, then `embodied-rl scale RUN_DIR rollout=3` after 12; print the counters.
set -u
. .venv/bin/activate
RUN=${RUN:-runs/text-fault-demo}
rm -rf "$RUN"; mkdir -p "$(dirname "$RUN")"
embodied-rl train --task math_arith --run-dir $RUN sft.steps=300 rl.iterations=30 rl.prompts_per_iteration=16 \
  rollout.num_workers=2 eval.every_iterations=0 eval.num_problems=100 checkpoint.every_iterations=0 \
  > $RUN.log 2>&1 &
TRAIN=$!
rows() { local n; n=$(grep -c "\"time/iteration_s\"" $RUN/metrics.jsonl 2>/dev/null); echo ${n:-0}; }
while [ "$(rows)" -lt 5 ]; do sleep 0.2; done
VICTIM=$(pgrep -f '^ray::GenerationWorker' | head -1)
echo "iteration $(rows): kill -9 $VICTIM ($(ps -o args= -p $VICTIM | cut -c1-40))"
kill -9 $VICTIM
while [ "$(rows)" -lt 12 ]; do sleep 0.2; done
echo "iteration $(rows): $(embodied-rl scale $RUN rollout=3)"
wait $TRAIN; echo "exit $?"
RUN=$RUN python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["RUN"] + "/metrics.jsonl")]
trained = [r for r in rows if "time/iteration_s" in r]
last = trained[-1]
print("iterations", [r["train/iteration"] for r in trained][-1], "responses", json.load(open(os.environ["RUN"] + "/summary.json"))["responses"])
print({k: v for k, v in last.items() if k.startswith("fault/")})
print([(r["train/iteration"], r["scale/rollout_workers"], round(r["scale/seconds"], 2)) for r in trained if "scale/rollout_workers" in r])
print("staleness", sorted({r["train/policy_staleness"] for r in trained}))
PY
grep -E "replacing|scaled|died" $RUN.log | head
