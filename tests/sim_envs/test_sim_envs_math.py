"""The text-task building blocks: the synthetic arithmetic set, its splits, JSONL problem sets and the verifier."""

import json

import pytest

from sim_envs.errors import TaskConfigError
from sim_envs.math.arithmetic import generate, split_of
from sim_envs.math.problem_set import load_jsonl
from sim_envs.math.verifier import extract_answer, score


def test_problems_are_reproducible_correct_and_never_cross_splits():
    train = generate(300, "train", seed=1)
    assert train == generate(300, "train", seed=1) and train != generate(300, "train", seed=2)
    heldout = generate(100, "heldout", seed=1)
    assert not {p.question for p in train} & {p.question for p in heldout}
    assert all(split_of(p.question) == "heldout" for p in heldout)
    assert len({p.question for p in train}) == 300
    for p in train[:50]:
        assert int(p.answer) == eval(p.question)  # the text evaluates to its answer
    three = generate(20, "train", terms=3, operators=("+", "*"))
    assert all(p.question.count("+") + p.question.count("*") == 2 for p in three)


def test_impossible_requests_are_refused():
    with pytest.raises(ValueError, match="at most half"):
        generate(60, "heldout", digits=1)
    with pytest.raises(ValueError, match="split="):
        generate(1, "test")


@pytest.mark.parametrize("response, answer, formatted", [
    ("so the result is \\boxed{68}", "68", True), ("Answer: 68", "68", True), ("#### 1,024", "1,024", True),
    ("I think 12 then 68", "68", False), ("no idea", None, False)])
def test_answers_are_extracted_from_the_usual_formats(response, answer, formatted):
    assert extract_answer(response) == (answer, formatted)


def test_scores_compare_numbers_as_numbers_and_report_the_format():
    assert score("Answer: 68.0", "68").correct and score("Answer: 68.0", "68").extracted == "68.0"
    assert score("Answer: 68", "68").correct and score("Answer: 68", "68").formatted
    assert not score("Answer: 67", "68").correct
    assert score("so 1/2", "0.5", use_math_verify=False).correct  # a number, not formatted
    assert not score("so 1/2", "0.5", use_math_verify=False).formatted
    assert not score("nothing here", "3").correct


def test_math_verify_decides_what_plain_comparison_cannot():
    pytest.importorskip("math_verify")
    assert score("\\boxed{\\frac{1}{2}}", "0.5").correct
    assert not score("\\boxed{\\frac{1}{3}}", "0.5").correct


def test_jsonl_problem_sets_name_their_fields_and_bad_lines(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps({"q": "2+2", "a": 4}) + "\n\n" + json.dumps({"q": "3*3", "a": "9"}) + "\n")
    problems = load_jsonl(path, "q", "a")
    assert [(p.question, p.answer) for p in problems] == [("2+2", "4"), ("3*3", "9")]
    with pytest.raises(TaskConfigError, match=r"set.jsonl:1: no field 'prompt'"):
        load_jsonl(path)
    path.write_text("{not json\n")
    with pytest.raises(TaskConfigError, match=r"set.jsonl:1: not JSON"):
        load_jsonl(path, "q", "a")


def test_the_text_env_scores_responses_with_composite_rewards_and_groups_problems():
    from sim_envs.math.arithmetic import Problem
    from sim_envs.math.text_env import TextTaskEnv

    problems = [Problem("1+1", "2"), Problem("2+2", "4"), Problem("3+3", "6")]
    env = TextTaskEnv(problems, num_envs=4, seed=0, group_size=2, outcome_weight=1.0, format_weight=0.1)
    obs = env.reset()
    prompts = list(obs["prompt"])
    assert prompts[0] == prompts[1] and prompts[2] == prompts[3]  # one problem per group
    answers = {p.question: p.answer for p in problems}
    responses = [f"Answer: {answers[prompts[0]]}", answers[prompts[1]], "Answer: 999", "no idea"]
    batch = env.step(responses)
    assert batch.rewards.tolist() == pytest.approx([1.1, 1.0, 0.1, 0.0])
    assert batch.info["reward/outcome"].tolist() == [1, 1, 0, 0] and batch.info["reward/format"].tolist() == [1, 0, 1, 0]
    assert batch.terminated.all() and batch.episodes.success_once.tolist() == [True, True, False, False]
    assert list(batch.final_obs["prompt"]) == prompts  # the problems answered; obs holds the next ones
    assert {*prompts[::2], batch.obs["prompt"][0]} == set(answers)  # one shuffled pass covers every problem


def test_a_worked_reference_solution_is_scored_by_the_answer_it_states():
    """GSM8K's answer field is a worked solution ending ``#### n``; MATH's holds ``\\boxed{}``: the response is
    compared with that answer, not with the solution's text."""
    from sim_envs.math.verifier import reference_answer, score

    gsm8k = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nAltogether she sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
    assert reference_answer(gsm8k) == "72" and reference_answer(" 72 ") == "72"
    assert score("She sold 72 clips in all. #### 72", gsm8k).correct
    assert not score("#### 24", gsm8k).correct
    assert score("so the answer is \\boxed{\\frac{1}{2}}", "... hence $\\boxed{\\frac12}$.").correct
