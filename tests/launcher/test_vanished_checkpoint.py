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


def test_a_vanished_file_wrapped_in_restoring_failed_is_found_in_the_chain(tmp_path):
    """As seen: TF 2.15 raises 'Restoring from checkpoint failed' during the handling of
    the NotFoundError; the last 20 lines are the frames of the wrapped message."""
    from launcher.output.tracebacks import describe

    log = tmp_path / "evaluator-0.log"
    log.write_text("\n".join([
        "Traceback (most recent call last):", '  File "saver.py", line 1, in restore',
        SEEN[0], "", "During handling of the above exception, another exception occurred:",
        "", "Traceback (most recent call last):", '  File "saver.py", line 9, in restore',
        "tensorflow.python.framework.errors_impl.NotFoundError: Restoring from checkpoint "
        "failed. This is most likely due to a Variable name or other graph key that is "
        "missing from the checkpoint.", "Original error:", ""]
        + [f'  File "ops.py", line {i}, in f' for i in range(30)]) + "\n")
    chain = describe(str(log)).chain
    assert classify_exit(1, list(chain), "evaluator")[0] == TRANSIENT
