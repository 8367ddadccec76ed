"""How the suite is shared among pytest-xdist workers (tests/conftest.py): a bed's tests in
one worker, a module sharing one real run in one worker, every other test alone."""

from __future__ import annotations

from work_units import work_unit


def test_a_bed_s_tests_are_one_unit():
    assert work_unit("tests/slurm/test_slurm_jobs.py::test_a") == "slurm"
    assert work_unit("tests/docker/test_image.py::test_b") == "docker"
    assert work_unit("tests/orchestrator/test_checkpoints.py::test_x[s3]") == "s3"


def test_a_module_that_shares_a_run_is_one_unit():
    for test in ("test_metrics_file_holds_a_fresh_evaluation_of_each_checkpoint",
                 "test_the_report_page_in_chromium"):
        path = ("tests/evaluation/test_estimator_metrics.py" if "metrics" in test
                else "tests/output/test_tensorboard_job.py")
        assert work_unit(f"{path}::{test}") == path


def test_other_tests_are_units_of_their_own():
    nodeid = "tests/launcher/test_spec.py::test_something"
    assert work_unit(nodeid) == nodeid
