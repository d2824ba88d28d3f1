"""Every command the parser accepts has a handler in ``cli.HANDLERS`` and no handler is left without a command."""

from embodied_rl.cli import HANDLERS, build_parser


def _choices(parser) -> dict:
    return parser._subparsers._group_actions[0].choices


def test_every_command_and_bench_has_exactly_one_handler():
    commands = _choices(build_parser())
    names = {name for name in commands if name != "bench"} | {f"bench {b}" for b in _choices(commands["bench"])}
    assert names == set(HANDLERS)
