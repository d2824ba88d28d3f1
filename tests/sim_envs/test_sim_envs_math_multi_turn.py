"""The multi-turn tool-use text env: its calculator (hand-parsed, never eval), tool-call parsing, the composite
reward's parts, the turn limit, split hygiene and demonstrations that the env itself scores as right."""

import builtins
import random
from fractions import Fraction

import numpy as np
import pytest

import sim_envs
from sim_envs.math.arithmetic import Problem, split_of
from sim_envs.math.calculator import CalcError, calculate
from sim_envs.math.multi_turn import ToolTaskEnv, answer_text, demonstration, generate_problems, parse_turn


def test_the_calculator_follows_precedence_as_python_does():
    rng = random.Random(0)
    for _ in range(300):
        values = [str(rng.randrange(1000)) for _ in range(rng.randint(1, 6))]
        text = values[0] + "".join(rng.choice("+-*") + v for v in values[1:])
        assert calculate(text) == eval(text), text
    assert calculate(" (2+3) * -4 ") == -20 and calculate("7/2") == Fraction(7, 2) and calculate("--3") == 3


@pytest.mark.parametrize("expression", [
    "__import__('os').system('touch pwned')", "2**10", "2^3", "1/0", "(1+2", "1+2)", "", "  ", "1+", "3 4",
    "1e5", "0x10", "9" * 13, "1+" * 40 + "1", "abs(-3)", "1;2", "1.5*2"])
def test_the_calculator_refuses_anything_but_bounded_arithmetic(expression):
    with pytest.raises(CalcError):
        calculate(expression)


def test_no_expression_reaches_eval(monkeypatch, tmp_path):
    def forbidden(*args, **kwargs):
        raise AssertionError("eval called")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.chdir(tmp_path)
    assert calculate("12*7+1") == 85
    env = ToolTaskEnv(generate_problems(4, terms=5), 1)  # problem answers come from the calculator too
    env.reset()
    batch = env.step(["<calc>__import__('os').system('touch pwned')</calc>"])
    assert batch.obs["observation"][0] == " = error\n" and not list(tmp_path.iterdir())


@pytest.mark.parametrize("text, kept, expression, result, malformed", [
    ("<calc>12*7</calc>", "<calc>12*7</calc>", "12*7", "84", 0),
    ("first <calc>3-5</calc> = 99\nAnswer: 1", "first <calc>3-5</calc>", "3-5", "-2", 0),  # cut after the call
    ("<calc>7/2</calc>", "<calc>7/2</calc>", "7/2", "7/2", 0),
    ("<calc>12*</calc>", "<calc>12*</calc>", "12*", None, 1),
    ("<calc>open()</calc>", "<calc>open()</calc>", "open()", None, 1),
    ("12*7</calc>", "12*7</calc>", "12*7", None, 1),  # closed without being opened
    ("<calc>1+<calc>2</calc>", "<calc>1+<calc>2</calc>", "2", "2", 0),  # the innermost open counts
])
def test_a_tool_call_ends_a_turn_and_is_evaluated_or_malformed(text, kept, expression, result, malformed):
    turn = parse_turn(text)
    assert (turn.text, turn.call.expression, turn.call.result, turn.malformed) == (kept, expression, result,
                                                                                   malformed)


def test_a_turn_without_a_call_is_final_and_an_unclosed_call_is_malformed():
    assert parse_turn("Answer: 5").call is None and parse_turn("Answer: 5").malformed == 0
    assert parse_turn("<calc>12*7").call is None and parse_turn("<calc>12*7").malformed == 1
    assert answer_text("<calc>12*7</calc>Answer: 84 <calc>9") == " Answer: 84  "


def test_reward_components_by_hand():
    problems = [Problem("2*3+4", "10"), Problem("5*5-1", "24")]
    env = ToolTaskEnv(problems, 4, group_size=2, format_weight=0.5, malformed_penalty=0.25, call_cost=0.125,
                      use_math_verify=False)
    obs = env.reset(state_ids=[0, 0, 1, 1])
    assert obs["prompt"].tolist() == ["2*3+4", "2*3+4", "5*5-1", "5*5-1"]
    first = env.step(["<calc>2*3+4</calc> = 7\nAnswer: 7",  # cut after the call: its made-up result is dropped
                      "10",  # right, not formatted, no call
                      "<calc>5*5-</calc>",  # malformed: an error observation, the conversation goes on
                      "<calc>5*5"])  # unclosed: final, malformed, and its 5s are no answer
    assert first.obs["observation"].tolist() == [" = 10\n", "", " = error\n", ""]
    assert first.terminated.tolist() == [False, True, False, True] and not first.truncated.any()
    second = env.step(["Answer: 10", None, "<calc>5*5-1</calc>", None])
    assert second.obs["observation"].tolist() == ["", "", " = 24\n", ""]
    third = env.step([None, None, "\\boxed{23}", None])
    rewards = first.rewards + second.rewards + third.rewards
    assert rewards.tolist() == pytest.approx([1 + 0.5 - 0.125, 1, 0.5 - 0.25 - 2 * 0.125, -0.25])
    info = {k: first.info[k] + second.info[k] + third.info[k] for k in first.info}
    assert info["reward/outcome"].tolist() == [1, 1, 0, 0] and info["reward/format"].tolist() == [1, 0, 1, 0]
    assert info["reward/tool"].tolist() == pytest.approx([-0.125, 0, -0.5, -0.25])
    assert info["tool/calls"].tolist() == [1, 0, 2, 0] and info["tool/malformed"].tolist() == [0, 0, 1, 1]
    assert info["turns"].tolist() == [2, 1, 3, 1]
    with pytest.raises(ValueError, match="reset"):
        env.step([None] * 4)


def test_the_turn_limit_ends_a_conversation_without_an_observation_and_turns_are_checked():
    env = ToolTaskEnv([Problem("1+1", "2")], 2, max_turns=2)
    env.reset()
    with pytest.raises(ValueError, match="conversation 1 is still going"):
        env.step(["<calc>1+1</calc>", None])
    assert env.step(["<calc>1*2</calc>", "<calc>1+1</calc>"]).obs["observation"].tolist() == [" = 2\n"] * 2
    last = env.step(["<calc>1*2</calc>", "Answer: 2"])
    assert last.truncated.tolist() == [True, False] and last.terminated.tolist() == [False, True]
    # no answer in conversation 0: the 2 in its calls (and in the env's turns) is not read as one
    assert last.obs["observation"].tolist() == ["", ""] and last.rewards.tolist() == pytest.approx([0, 1])
    assert last.info["turns"].tolist() == [2, 2] and env.done.all()
    env.reset()
    with pytest.raises(ValueError, match="conversation 0 is still going"):
        env.step([None, "Answer: 2"])


def test_problems_have_the_terms_asked_for_and_never_cross_splits():
    train = generate_problems(400, "train", digits=2, terms=5)
    heldout = generate_problems(100, "heldout", digits=2, terms=5)
    assert train == generate_problems(400, "train", digits=2, terms=5) != generate_problems(400, "train", seed=1,
                                                                                               digits=2, terms=5)
    assert not {p.question for p in train} & {p.question for p in heldout}
    assert all(split_of(p.question) == "train" for p in train)
    assert all(split_of(p.question) == "heldout" for p in heldout)
    assert all(sum(p.question.count(o) for o in "+-*") == 4 for p in train)
    assert all(int(p.answer) == eval(p.question) for p in train[:100])
    with pytest.raises(ValueError, match="terms=7"):
        generate_problems(1, terms=7)
    with pytest.raises(ValueError, match="at most half"):
        generate_problems(20, "heldout", digits=1, terms=2)


def test_demonstrations_use_the_tool_and_score_as_right():
    env = sim_envs.make("math_tool", 4, group_size=1, count=50, heldout_count=10, terms=4)
    assert isinstance(env, ToolTaskEnv) and env.max_turns == 3 and len(env.problems) == 50
    obs = env.reset(state_ids=[0, 1, 2, 3])
    segments = [demonstration(env.problems[i]) for i in obs["problem_id"]]
    assert [s[0][1] for s in segments] == [True] * 4 and [s[1][1] for s in segments] == [False] * 4
    first = env.step([s[0][0] for s in segments])
    assert first.obs["observation"].tolist() == [s[1][0] for s in segments]  # the env writes the demo's turn
    last = env.step([s[2][0] for s in segments])
    assert last.terminated.all() and last.rewards.tolist() == [1.0] * 4
    assert last.info["tool/calls"].tolist() == [1] * 4 and last.info["tool/malformed"].tolist() == [0] * 4
    question, response = env.sft_examples()[0]
    assert question == env.problems[0].question
    assert response == f"<calc>{question}</calc> = {env.problems[0].answer}\nAnswer: {env.problems[0].answer}"


def test_the_task_is_registered_with_checked_options():
    heldout = sim_envs.make("math_tool", 2, split="heldout", heldout_count=8, max_turns=5)
    assert len(heldout.problems) == 8 and heldout.max_turns == 5
    assert all(split_of(p.question) == "heldout" for p in heldout.problems)
    with pytest.raises(sim_envs.TaskConfigError, match="unknown text-env option 'colour'"):
        sim_envs.make("math_tool", 2, colour="red")
    with pytest.raises(sim_envs.TaskConfigError, match="math_tool: max_turns=0"):
        sim_envs.make("math_tool", 2, max_turns=0, count=10)
    assert np.unique(sim_envs.make("math_tool", 4, group_size=2, count=10).reset()["prompt"][:2]).size == 1
