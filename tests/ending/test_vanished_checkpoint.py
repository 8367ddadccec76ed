"""An evaluator whose checkpoint was deleted under it (keep_checkpoint_max) is restarted,
never taken for an error in the user's code; the same words from a trainer are an error."""

from __future__ import annotations

import pytest

from launcher.restarts import ERROR, TRANSIENT, RestartBook, classify_exit

# As TensorFlow 2.15 words them (seen in real runs of tests/thirdparty/stock_estimator.py).
SEEN = [
    "tensorflow.python.framework.errors_impl.NotFoundError: Unsuccessful TensorSliceReader "
    "constructor: Failed to find any matching files for /m/model.ckpt-140",
    "ValueError: The passed save_path is not a valid checkpoint: /m/model.ckpt-120",
]


@pytest.mark.parametrize("line", SEEN)
def test_the_evaluator_is_restarted(line):
    kind, what = classify_exit(1, ["INFO:tensorflow:Restoring parameters", line], "evaluator")
    assert kind == TRANSIENT and "deleted under it" in what
    verdict = RestartBook().judge_exit("evaluator", "evaluator:0", 1, [line], finishing=True)
    assert verdict.action == "restart"
    assert verdict.reason.startswith("evaluator:0 failed with exit status 1 (the checkpoint "
                                     "it read was deleted under it")


@pytest.mark.parametrize("line", SEEN)
def test_a_trainer_with_the_same_words_is_not(line):
    assert classify_exit(1, [line], "chief")[0] == ERROR
