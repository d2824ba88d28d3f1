"""``embodied-rl doctor``: one PASS/FAIL line per check with what was seen, the fix under each failure, exit code 1
when any failed."""

from embodied_rl.commands import doctor


def test_the_renderer_check_passes_where_maniskill_renders_and_a_failure_names_the_fix():
    passed = doctor.check_renderer()
    assert passed.passed and "(1, 64, 64, 3)" in passed.detail  # a camera image of this machine's renderer
    failed = doctor._maniskill("no_such_mode", "renderer")
    assert not failed.passed and "no_such_mode" in failed.detail
    assert "scripts/install_system_deps.sh" in failed.fix


def test_too_little_free_disk_fails_and_says_what_to_free():
    assert doctor.check_disk(min_free_gib=0.0).passed
    short = doctor.check_disk(min_free_gib=1e9)
    assert not short.passed and "working directory" in short.fix and "RAY_TMPDIR" in short.fix


def test_the_report_has_a_line_per_check_a_fix_under_each_failure_and_exit_code_one(capsys):
    checks = (lambda: doctor.Check("devices", True, "no GPU"),
              lambda: doctor.Check("renderer", False, "no Vulkan device", "install a driver"))
    assert doctor.run_doctor(checks) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["PASS devices: no GPU", "FAIL renderer: no Vulkan device", "     fix: install a driver",
                     "some checks failed: see each fix above"]
    assert doctor.run_doctor(checks[:1]) == 0


def test_the_mujoco_renderer_check_renders_a_metaworld_image_and_a_failure_names_the_fix(monkeypatch):
    passed = doctor.check_mujoco_renderer()
    assert passed.passed and "(1, 64, 64, 3)" in passed.detail and "MUJOCO_GL=" in passed.detail
    monkeypatch.setenv("MUJOCO_GL", "vulkan")  # not a MuJoCo backend: the check fails with the fix
    failed = doctor.check_mujoco_renderer()
    assert not failed.passed and "MUJOCO_GL='vulkan'" in failed.detail
    assert "scripts/install_system_deps.sh" in failed.fix and "libosmesa6" in failed.fix
