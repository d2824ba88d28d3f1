"""When evaluation videos are due. The CLI's videos (a training run films its final evaluation, `eval --video` a
checkpoint) are tested in test_cli_train_flow.py, on its run."""

from types import SimpleNamespace

from embodied_rl.runners.eval_video import video_due


def test_videos_are_due_at_the_final_evaluation_and_every_nth_one():
    config = SimpleNamespace(video_episodes=4, video_every_evaluations=3, every_iterations=10)
    assert video_due(config, 7, finished=True)
    assert [i for i in range(10, 100, 10) if video_due(config, i, finished=False)] == [30, 60, 90]
    config.video_every_evaluations = 0
    assert not video_due(config, 30, finished=False)
    config.video_episodes = 0
    assert not video_due(config, 7, finished=True)

