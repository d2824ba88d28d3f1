"""``embodied-rl train|eval|scale|demos|export|report|sweep|tasks|bench|doctor|plan``.

Exit codes: 0 success, 2 bad configuration or arguments (one line naming the key and what is allowed),
1 runtime failure, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from embodied_rl.config.errors import ConfigError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, instead of argparse's usage dump
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def _retries(text: str) -> int:
    """``--retries``: an integer >= 0 (argparse turns the error into one line, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: an integer >= 0")
    return value


def _add_loop_arguments(parser, env_workers: int, envs_per_worker: int, steps: int, repeats: int = 2) -> None:
    """Arguments of the benches that run the env/rollout loop."""
    parser.add_argument("--task", default="maniskill_pickcube")
    parser.add_argument("--env-workers", type=int, default=env_workers, help="env processes")
    parser.add_argument("--envs-per-worker", type=int, default=envs_per_worker, help="envs per env process")
    parser.add_argument("--steps", type=int, default=steps, help="steps per env per measurement")
    parser.add_argument("--repeats", type=int, default=repeats, help="alternating measurements of each variant "
                        "(the median is reported)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="embodied-rl", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser("train", help="train a policy on a task")
    train.add_argument("--task", help="a registered task (see `embodied-rl tasks`)")
    train.add_argument("--config", help="YAML file merged over the task's recipe")
    train.add_argument("--run-dir", help="run directory (default runs/<task>-<time>)")
    train.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its newest "
                       "checkpoint (a clean one unless a stop checkpoint is of a later iteration)")
    train.add_argument("--ray-address", help="join this Ray cluster instead of starting a local one")
    train.add_argument("--retries", type=_retries, default=0, metavar="N",
                       help="after a runtime failure, resume from the newest checkpoint up to N times (default 0)")
    train.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. algorithm.lr=1e-4")

    evaluate = commands.add_parser("eval", help="evaluate a checkpoint")
    evaluate.add_argument("--checkpoint", required=True, help="checkpoint directory or run directory (latest)")
    evaluate.add_argument("--episodes", type=int, help="episodes to run, one from each initial state eval.seed, "
                          "eval.seed + 1, ... (default: the checkpoint's eval.num_episodes)")
    evaluate.add_argument("--ray-address", help="join this Ray cluster instead of starting a local one")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument("--video", action="store_true", help="also film deterministic episodes into an mp4 "
                          "(eval_<checkpoint>.mp4 beside the checkpoint, or in --video-dir) and print its path")
    evaluate.add_argument("--video-episodes", type=int, help="episodes in the video grid (default 4; implies --video)")
    evaluate.add_argument("--video-dir", help="directory for the video (implies --video)")
    evaluate.add_argument("overrides", nargs="*", metavar="key=value",
                          help="over the checkpoint's config, e.g. eval.max_episode_steps=50 (any time limit), "
                               "eval.seed=9000 (another state set), eval.sampled=true (sampled actions too), "
                               "eval.greedy=false policy.options.temperature=0.5 (sampled only)")

    demos = commands.add_parser("demos", help="make demonstrations (ManiSkill trajectory .h5 + .json), cached")
    demos.add_argument("--task", required=True, help="a registered task (see `embodied-rl tasks`)")
    demos.add_argument("--episodes", type=int, required=True, help="demonstrations to write")
    demos.add_argument("--source", nargs="+", metavar="SOURCE", default=None,
                       help="the task family's default when left out: motion_planning (ManiSkill's planner) or "
                       "scripted (MetaWorld's scripted policies); or checkpoint PATH (a trained policy)")
    demos.add_argument("--obs", default="state", help="observations to record: state, rgb or state,rgb")
    demos.add_argument("--control-mode", help="controller of the actions (default the family's: pd_joint_delta_pos, "
                       "MetaWorld's ee_delta_pos; "
                       "a checkpoint's own mode for --source checkpoint)")
    demos.add_argument("--out", help="h5: cache root (default ~/.cache/embodied-rl/demos); demos go to "
                       "OUT/<task>/<source>-<control_mode>-<obs>-<N>-seed<S>/. lerobot: the dataset directory to "
                       "create (new or empty; the .h5 stay in the default cache)")
    demos.add_argument("--format", default="h5", dest="output_format", help="h5 (ManiSkill's trajectory format, "
                       "the default) or lerobot (a LeRobotDataset v3 directory at --out)")
    demos.add_argument("--fps", type=int, help="lerobot: frames per second (default the task family's control "
                       "rate: ManiSkill 20, MetaWorld 80)")
    demos.add_argument("--image-storage", default="video", help="lerobot: camera frames as video (lossless mp4, "
                       "the default) or image (PNG in the parquet)")
    demos.add_argument("--keep-failures", action="store_true", help="keep episodes that do not end in success")
    demos.add_argument("--seed", type=int, default=0, help="seed of the first episode (then +1 per episode)")
    demos.add_argument("--planner-speed", type=float, help="joint velocity and acceleration limits of the motion "
                       "planner in rad/s (default ManiSkill's 0.9; faster plans make shorter demos)")

    export = commands.add_parser("export", help="a trained run's evaluation episodes as a dataset (LeRobot v3)")
    export.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (of a staged recipe: its last stage)")
    export.add_argument("--format", default="lerobot", dest="output_format", help="lerobot (the only one)")
    export.add_argument("--out", required=True, help="the dataset directory to create (new or empty)")
    export.add_argument("--episodes", type=int, help="episodes, from the run's evaluation states eval.seed, "
                        "eval.seed + 1, ... (default the run's eval.num_episodes)")
    export.add_argument("--checkpoint", default=None, help="best, last or a checkpoint PATH (default best where the "
                        "run kept one, else last)")
    export.add_argument("--obs", default="state,rgb", help="observations to record: state, rgb or state,rgb "
                        "(default; cameras rendered at the run's env.image_size)")
    export.add_argument("--fps", type=int, help="frames per second (default the task family's control rate)")
    export.add_argument("--image-storage", default="video", help="video (lossless mp4, the default) or image "
                        "(PNG in the parquet)")

    scale = commands.add_parser("scale", help="resize the env and rollout workers of a live run")
    scale.add_argument("run_dir", help="the run directory (of a staged recipe: its newest stage's is used)")
    scale.add_argument("sizes", nargs="+", metavar="group=N", help="env=N and/or rollout=N")

    plan = commands.add_parser("plan", help="memory of each component and whether each placement fits, before a "
                               "run starts")
    plan.add_argument("--task", help="a registered task (see `embodied-rl tasks`)")
    plan.add_argument("--config", help="YAML file merged over the task's recipe")
    plan.add_argument("--gpus", type=int, default=1, help="GPUs on the machine (default 1)")
    plan.add_argument("--gpu-memory", default="80GB", help="memory of each GPU (default 80GB)")
    plan.add_argument("--prompt-tokens", type=int, default=256, help="reasoning tasks: prompt length assumed for "
                      "every sequence (default 256)")
    plan.add_argument("--profile", action="store_true", help="also profile the components on this machine and "
                      "say which placement placement.auto would choose, and why")
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    plan.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, as for train")

    report = commands.add_parser("report", help="one HTML page comparing runs: curves over seeds, final table, "
                                 "videos, config differences")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories, or directories holding "
                        "them (a sweep's)")
    report.add_argument("--out", help="output directory (default reports/report-<time>)")
    report.add_argument("--title", help="the page's title")
    report.add_argument("--metric", action="append", metavar="KEY", help="also plot this metrics.jsonl key "
                        "(repeatable)")
    report.add_argument("--group-by", action="append", metavar="KEY", help="config keys that make a setting "
                        "(repeatable; default: every key that differs, less seed and paths)")
    report.add_argument("--video-mb", type=float, default=20.0, help="megabytes of videos embedded in the page; "
                        "later ones are linked (default 20)")
    report.add_argument("--score", metavar="KEY", help="the final table's score (default eval/success_once; "
                        "eval/heldout_accuracy for text tasks)")
    report.add_argument("--screenshot", action="store_true", help="also save report.png as headless Chromium "
                        "draws the page")

    sweep = commands.add_parser("sweep", help="grid or random search over config keys and seeds as Ray Tune "
                                "trials, then a report")
    sweep.add_argument("--task", help="a registered task (see `embodied-rl tasks`)")
    sweep.add_argument("--config", help="YAML file merged over the task's recipe")
    sweep.add_argument("--grid", action="append", metavar="KEY=[V1,V2]", help="every value of KEY, crossed with "
                       "the other grids (repeatable)")
    sweep.add_argument("--sample", action="append", metavar="KEY=DIST", help="KEY drawn per sample: "
                       "uniform:LOW:HIGH, loguniform:LOW:HIGH, randint:LOW:HIGH or choice:[V1,V2] (repeatable)")
    sweep.add_argument("--samples", type=int, default=1, help="random draws of the --sample keys (default 1)")
    sweep.add_argument("--seeds", default="1", help="N (seeds 0..N-1) or a list 0,5,9; crossed with every point")
    sweep.add_argument("--out", help="output directory (default sweeps/<task>-<time>)")
    sweep.add_argument("--ray-address", help="run the trials on this Ray cluster instead of a local one")
    sweep.add_argument("--max-concurrent", type=int, help="trials running at once, at most (default: as many "
                       "as their resource requests fit)")
    sweep.add_argument("--early-stop", default="none", help="none (default) or asha: stop trials that trail "
                       "at each rung of env steps")
    sweep.add_argument("--grace-env-steps", type=int, help="env steps before asha's first cut (default: a "
                       "quarter of the RL stages' budget)")
    sweep.add_argument("--no-report", action="store_true", help="skip the report at the end")
    sweep.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides of every trial")

    commands.add_parser("tasks", help="list the registered tasks")
    commands.add_parser("doctor", help="check that the simulator and runtime work on this machine")

    bench = commands.add_parser("bench", help="measure throughput")
    benches = bench.add_subparsers(dest="bench", required=True, parser_class=_Parser)
    env_bench = benches.add_parser("env", help="runtime env loop vs the task family's Gymnasium "
                                 "vector env loop (AsyncVectorEnv; MetaWorld also SyncVectorEnv)")
    _add_loop_arguments(env_bench, env_workers=4, envs_per_worker=1, steps=400)
    placement_bench = benches.add_parser("placement", help="sampling throughput of the placement modes")
    # 4 repeats: on a shared 2-core machine single measurements of one mode ranged 123-193 env steps/s.
    _add_loop_arguments(placement_bench, env_workers=1, envs_per_worker=16, steps=60, repeats=4)
    placement_bench.add_argument("--policies", default="mlp,transformer", help="comma-separated: mlp, transformer, "
                                 "openvla_oft, pi0 (the VLAs tiny, on camera observations)")
    placement_bench.add_argument("--full-loop", action="store_true", help="measure whole training iterations: "
                                 "sampling, PPO update and weight sync (default: sampling only)")
    placement_bench.add_argument("--auto", action="store_true", help="also measure the placement placement.auto "
                                 "chooses, against the best preset")
    placement_bench.add_argument("--iterations", type=int, default=10, help="text tasks: RL iterations per run")
    placement_bench.add_argument("--sft-steps", type=int, default=300, help="text tasks: SFT steps of the warm "
                                 "start every run begins from")
    render_bench = benches.add_parser("render", help="camera steps/s: rendering every step vs after each chunk")
    render_bench.add_argument("--task", default="maniskill_pickcube")
    render_bench.add_argument("--chunk", type=int, default=8, help="action chunk length K")
    render_bench.add_argument("--image-size", type=int, default=64, help="camera width = height")
    render_bench.add_argument("--decisions", type=int, default=6, help="chunks per measurement")
    render_bench.add_argument("--repeats", type=int, default=3, help="alternating measurements of each variant")
    render_bench.add_argument("--json", action="store_true", help="print one JSON object")
    elastic_bench = benches.add_parser("elastic", help="a live training loop resized: throughput before and after "
                                       "adding (then removing) an env and a rollout worker, resize latency, "
                                       "transitions lost and duplicated")
    _add_loop_arguments(elastic_bench, env_workers=1, envs_per_worker=4, steps=50)
    elastic_bench.set_defaults(task="maniskill_pushcube")
    elastic_bench.add_argument("--rounds", type=int, default=3, help="training iterations per phase")
    overlap_bench = benches.add_parser("overlap", help="synchronous vs overlapped PPO on one placement: training "
                                       "env steps/s and time to an eval success, and the bare simulator loop")
    overlap_bench.add_argument("--task", default="maniskill_pushcube")
    overlap_bench.add_argument("--target", type=float, default=0.8, help="eval success_once that ends a run")
    overlap_bench.add_argument("--max-env-steps", type=int, default=300_000, help="a run's limit if it never does")
    overlap_bench.add_argument("--eval-every", type=int, default=10, help="iterations between evaluations")
    overlap_bench.add_argument("--eval-episodes", type=int, default=128, help="episodes per evaluation")
    overlap_bench.add_argument("--json", action="store_true", help="print one JSON object")
    overlap_bench.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for both runs")
    generation_bench = benches.add_parser("generation", help="tokens/s of each generation engine on one model and "
                                          "prompts (HF full precision, HF int8 rollout copy)")
    generation_bench.add_argument("--model", default="small", help="tiny, small, or a local checkpoint directory")
    generation_bench.add_argument("--prompts", type=int, default=128, help="held-out math_arith prompts per call")
    generation_bench.add_argument("--new-tokens", type=int, default=8, help="max new tokens per response")
    generation_bench.add_argument("--repeats", type=int, default=3, help="alternating measurements (best kept)")
    generation_bench.add_argument("--threads", type=int, default=1, help="torch threads")
    generation_bench.add_argument("--json", action="store_true", help="print one JSON object")
    text_async_bench = benches.add_parser("text-async", help="synchronous vs async rollout on math_arith: seconds "
                                          "per RL iteration, same workers and threads")
    text_async_bench.add_argument("--iterations", type=int, default=20, help="RL iterations per mode")
    text_async_bench.add_argument("--sft-steps", type=int, default=1000, help="the shared SFT warm start")
    text_async_bench.add_argument("--json", action="store_true", help="print one JSON object")
    text_async_bench.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for all runs")
    text_tis_bench = benches.add_parser("text-tis", help="held-out accuracy under int8 rollout without and with "
                                        "truncated importance sampling (and full precision), one SFT warm start")
    text_tis_bench.add_argument("--iterations", type=int, default=200, help="RL iterations per mode")
    text_tis_bench.add_argument("--sft-steps", type=int, default=4000, help="the shared SFT warm start")
    text_tis_bench.add_argument("--eval-every", type=int, default=20, help="iterations between evaluations")
    text_tis_bench.add_argument("--json", action="store_true", help="print one JSON object")
    text_tis_bench.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for all runs")
    channel_bench = benches.add_parser("channel", help="bandwidth and latency of each transport between two workers")
    channel_bench.add_argument("--repeats", type=int, default=2, help="measurements per transport (best kept)")
    channel_bench.add_argument("--sizes", default=None, help="comma list of message sizes to measure, from "
                               "1KB,1MB,10MB,100MB (default: all)")
    channel_bench.add_argument("--nodes", type=int, default=1, help="1: both workers on one node; 2: on two local "
                               "Ray nodes (every route crosses the node boundary)")
    channel_bench.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _plan(args) -> int:
    from embodied_rl.commands.plan import run_plan

    return run_plan(args.task, args.config, args.overrides, args.gpus, args.gpu_memory, args.json,
                    args.prompt_tokens, args.profile)


def _report(args) -> int:
    from embodied_rl.commands.report import run_report

    return run_report(args.run_dirs, args.out, args.title, args.metric, args.group_by, args.video_mb,
                      args.screenshot, args.score)


def _sweep(args) -> int:
    from embodied_rl.commands.sweep import run_sweep

    return run_sweep(args.task, args.config, args.overrides, args.grid, args.sample, args.seeds, args.samples,
                     args.out, args.ray_address, args.max_concurrent, args.early_stop, args.grace_env_steps,
                     not args.no_report)


def _tasks(args) -> int:
    from embodied_rl.commands.listing import run_tasks

    return run_tasks()


def _doctor(args) -> int:
    from embodied_rl.commands.doctor import run_doctor

    return run_doctor()


def _demos(args) -> int:
    from embodied_rl.commands.demos import run_demos

    return run_demos(args.task, args.episodes, args.source, args.obs, args.control_mode, args.out,
                     args.keep_failures, args.seed, args.planner_speed, args.output_format, args.fps,
                     args.image_storage)


def _export(args) -> int:
    from embodied_rl.commands.export import run_export

    return run_export(args.run_dir, args.out, args.output_format, args.episodes, args.checkpoint, args.obs,
                      args.fps, args.image_storage)


def _scale(args) -> int:
    from embodied_rl.commands.scale import run_scale

    return run_scale(args.run_dir, args.sizes)


def _train(args) -> int:
    from embodied_rl.commands.train import run_train

    return run_train(args.task, args.config, args.overrides, args.run_dir, args.resume, args.ray_address,
                     args.retries)


def _eval(args) -> int:
    from embodied_rl.commands.evaluate import run_eval

    return run_eval(args.checkpoint, args.episodes, args.ray_address, args.json, args.video, args.video_episodes,
                    args.video_dir, args.overrides)


def _bench_env(args) -> int:
    from embodied_rl.bench.env_bench import run_env_bench

    return run_env_bench(args.task, args.env_workers, args.envs_per_worker, args.steps, args.repeats, args.json)


def _bench_placement(args) -> int:
    from embodied_rl.commands.train_reasoning import is_text_task

    if args.auto and (is_text_task(args.task) or not args.full_loop):
        raise ConfigError("--auto needs --full-loop on an embodied task: placement.auto weighs whole iterations "
                          "(sampling, update, weight sync)")
    if is_text_task(args.task):
        from embodied_rl.bench.text_placement_bench import run_text_placement_bench

        return run_text_placement_bench(args.task, args.iterations, args.repeats, args.sft_steps, args.json)
    from embodied_rl.bench.placement_bench import run_placement_bench

    return run_placement_bench(args.task, args.env_workers, args.envs_per_worker, args.steps, args.repeats,
                               args.json, args.policies, args.full_loop, args.auto)


def _bench_render(args) -> int:
    from embodied_rl.bench.render_bench import run_render_bench

    return run_render_bench(args.task, args.chunk, args.image_size, args.decisions, args.repeats, args.json)


def _bench_elastic(args) -> int:
    from embodied_rl.bench.elastic_bench import run_elastic_bench

    return run_elastic_bench(args.task, args.env_workers, args.envs_per_worker, args.steps, args.rounds, args.json)


def _bench_overlap(args) -> int:
    from embodied_rl.bench.overlap_bench import run_overlap_bench

    return run_overlap_bench(args.task, args.target, args.max_env_steps, args.eval_every, args.eval_episodes,
                             args.json, args.overrides)


def _bench_generation(args) -> int:
    from embodied_rl.bench.reasoning_bench import run_generation_bench

    return run_generation_bench(args.model, args.prompts, args.new_tokens, args.repeats, args.threads, args.json)


def _bench_text_async(args) -> int:
    from embodied_rl.bench.reasoning_bench import run_text_async_bench

    return run_text_async_bench(args.iterations, args.sft_steps, args.json, args.overrides)


def _bench_text_tis(args) -> int:
    from embodied_rl.bench.reasoning_bench import run_text_tis_bench

    return run_text_tis_bench(args.iterations, args.sft_steps, args.eval_every, args.json, args.overrides)


def _bench_channel(args) -> int:
    from embodied_rl.bench.channel_bench import run_channel_bench

    return run_channel_bench(args.json, args.repeats, args.sizes, args.nodes)


HANDLERS = {"plan": _plan, "report": _report, "sweep": _sweep, "tasks": _tasks, "doctor": _doctor, "demos": _demos,
            "export": _export, "scale": _scale, "train": _train, "eval": _eval,
            "bench env": _bench_env, "bench placement": _bench_placement, "bench render": _bench_render,
            "bench elastic": _bench_elastic, "bench overlap": _bench_overlap, "bench generation": _bench_generation,
            "bench text-async": _bench_text_async, "bench text-tis": _bench_text_tis, "bench channel": _bench_channel}
"""Each command (``bench`` with its bench's name) and its handler; a handler imports what it runs when it runs."""


def dispatch(args) -> int:
    name = f"{args.command} {args.bench}" if args.command == "bench" else args.command
    if name not in HANDLERS:
        raise ConfigError(f"unknown command {name!r}")
    return HANDLERS[name](args)


def parse_arguments(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parse_args``, except that ``key=value`` overrides may also follow the options (argparse alone takes the
    positional overrides only in one run: ``eval --checkpoint C --video a=1`` would be refused)."""
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and all("=" in item and not item.startswith("-") for item in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MS_SKIP_ASSET_DOWNLOAD_PROMPT", "1")
    args = parse_arguments(build_parser(), argv)
    if argv is None and args.command == "train":
        from embodied_rl.runtime.driver_session import needs_own_session, run_driver_in_own_session

        if needs_own_session():  # a group-wide SIGTERM must reach the driver, not its Ray (driver_session.py)
            return run_driver_in_own_session(sys.argv[1:])
    from embodied_rl.runtime.cluster import install_interrupt_handler

    install_interrupt_handler()
    try:
        return dispatch(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; workers stopped", file=sys.stderr)
        return 130
    except Exception as error:  # a runtime failure: say what, keep the details out of the user's way
        log = os.environ.get("EMBODIED_RL_TRACEBACK_FILE", "/tmp/embodied-rl-last-error.log")
        with open(log, "w") as handle:
            traceback.print_exc(file=handle)
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print(f"error: {type(error).__name__}: {first_line} (traceback in {log})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
