"""What the console shows of a task's output: TensorFlow's routine noise hidden, everything
else in full, progress bars as their latest state."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from launcher.output.console import Console
from launcher.output.noise import NoiseFilter, latest_state

# As TensorFlow 2.15 and its Estimator write them (paths shortened).
DEPRECATION = [
    "WARNING:tensorflow:From train.py:121: RunConfig.__init__ (from tensorflow_estimator.python"
    ".estimator.run_config) is deprecated and will be removed in a future version.",
    "Instructions for updating:",
    "Use tf.keras instead.",
]
ABSL_DEPRECATION = [
    "W1201 07:12:01.385531 139 deprecation.py:50] From train.py:61: numeric_column (from "
    "tensorflow.python.feature_column.feature_column_v2) is deprecated and will be removed in "
    "a future version.",
    "Instructions for updating:",
    "Use Keras preprocessing layers instead, either directly or via the "
    "`tf.keras.utils.FeatureSpace` utility.",
]
USING_CONFIG = [
    "INFO:tensorflow:Using config: {'_model_dir': 'm', '_session_config': allow_soft_placement: "
    "true",
    "graph_options {",
    "  rewrite_options {",
    "    meta_optimizer_iterations: ONE",
    "  }",
    "}",
    ", '_keep_checkpoint_max': 100, '_train_distribute': None}",
]
TF221_BANNERS = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796195202.232355   16504 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors.",
]
BANNERS = [
    "2026-12-01 07:12:00.123456: I tensorflow/core/util/port.cc:113] oneDNN custom operations "
    "are on. You may see slightly different numerical results due to floating-point round-off "
    "errors from different computation orders.",
    "2026-12-01 07:12:00.223456: I tensorflow/core/platform/cpu_feature_guard.cc:182] This "
    "TensorFlow binary is optimized to use available CPU instructions in performance-critical "
    "operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow "
    "with the appropriate compiler flags.",
    "2026-12-01 07:12:01.000001: I external/local_tsl/tsl/cuda/cudart_stub.cc:31] Could not "
    "find cuda drivers on your machine, GPU will not be used.",
]
INFO = ["INFO:tensorflow:Done calling model_fn.", "INFO:tensorflow:loss = 0.69, step = 0",
        "INFO:tensorflow:global_step/sec: 85.3",
        "I1201 07:12:02.000001 139 basic_session_run_hooks.py:262] loss = 0.52, step = 100"]
KEPT = [
    "my own print: epoch 1 done",
    "WARNING:tensorflow:It seems that global step (tf.train.get_global_step) has not been "
    "increased. Current value (could be stable): 100 vs previous value: 100.",
    "ERROR:tensorflow:Model diverged with loss = NaN.",
    "E1201 07:12:03.000001 139 coordinator.py:219] Error reported to Coordinator",
    "/site-packages/keras/src/engine/training.py:3103: UserWarning: You are saving your model "
    "as an HDF5 file.",
    "  saving_api.save_model(",
    "INFO:tensorflow:Saving dict for global step 300: accuracy = 0.73, loss = 0.53",
    "INFO:tensorflow:Loss for final step: 0.55.",
    "Traceback (most recent call last):",
    '  File "train.py", line 9, in <module>',
    "    main()",
    "ValueError: bad batch size",
    "",
]


def shown(lines: list[str]) -> list[str]:
    f = NoiseFilter()
    return [line for line in lines if f.show(line)]


@pytest.mark.parametrize("noise", [DEPRECATION, ABSL_DEPRECATION, USING_CONFIG,
                                   BANNERS, TF221_BANNERS, INFO],
                         ids=["deprecation", "absl-deprecation", "multi-line-info", "banners",
                              "tf221-banners", "info"])
def test_routine_noise_is_hidden_and_what_follows_is_not(noise):
    f = NoiseFilter()
    assert [line for line in noise + KEPT if f.show(line)] == KEPT
    assert f.hidden == len(noise)


def test_warnings_errors_tracebacks_and_prints_are_shown_in_full():
    assert shown(KEPT) == KEPT


def test_a_print_right_after_a_hidden_info_line_is_shown():
    assert shown(["INFO:tensorflow:Done calling model_fn.", "step 5: my metric 0.3"]) == \
        ["step 5: my metric 0.3"]


def test_a_traceback_right_after_instructions_is_shown():
    lines = DEPRECATION[:2] + ["Traceback (most recent call last):", '  File "t.py", line 1',
                               "KeyError: 'x'"]
    assert shown(lines) == lines[2:]


@pytest.mark.parametrize("raw, expected", [
    ("1/100 [..] - ETA: 9s\r50/100 [=>.] - ETA: 4s\r100/100 [====] - 5s - loss: 0.3",
     "100/100 [====] - 5s - loss: 0.3"),
    ("10%|#         |\r100%|##########| 10/10", "100%|##########| 10/10"),
    ("progress\r\r", "progress"),
    ("abc\b\bX", "aX"),
    ("plain line", "plain line"),
])
def test_a_redrawn_progress_bar_shows_its_latest_state(raw, expected):
    assert latest_state(raw) == expected


def test_console_hides_noise_unless_verbose():
    """Every kept line is printed (the traceback once its task's end is known: here, at
    close), but for the empty one."""
    printed = len(KEPT) - 1
    for verbose, expected in ((False, printed), (True, printed + len(DEPRECATION))):
        out = io.StringIO()
        console = Console(out=out, err=io.StringIO(), verbose=verbose)
        for line in DEPRECATION + KEPT:
            console.task_line("chief:0", line)
        console.close()
        assert len(out.getvalue().splitlines()) == expected
        assert console.hidden == (0 if verbose else len(DEPRECATION))


def test_an_unclosed_bracket_in_a_hidden_line_hides_a_bounded_number_of_lines():
    lines = ["INFO:tensorflow:Using config: {'a': 1,"] + [f"user line {i}" for i in range(60)]
    assert shown(lines) == lines[41:]
    assert shown(["INFO:tensorflow:step (3 of 4", "my print"]) == ["my print"]


def test_a_recorded_estimator_log_with_absl_info_records_shows_only_what_matters():
    # TensorFlow 2.15's Estimator under absl.app.run, absl verbosity INFO (every record
    # twice: Python's and absl's format); absl's header "estimator.py:200]" ends in a "]"
    # that closes no bracket of its "Using config: {...}" record, which goes on for 6 lines.
    log = (Path(__file__).parent / "logs" / "estimator_absl_info.log").read_text()
    lines = log.splitlines()
    assert sum("estimator.py:200] Using config: {" in line for line in lines) == 1
    assert shown(lines) == ["INFO:tensorflow:Loss for final step: 0.6531401.",
                            lines[-2], "my own print after training"]
    assert lines[-2].endswith("estimator.py:361] Loss for final step: 0.6531401.")


TENSORBOARD = [
    "[2026-12-01T07:12:01Z INFO  rustboard_core::cli] Starting load cycle",
    "[2026-12-01T07:12:01Z INFO  rustboard_core::cli] Finished load cycle (2.1 ms)",
    "NOTE: Using experimental fast data loading logic. To disable, pass",
    '    "--load_fast=false" and report issues on GitHub. More details:',
    "    https://github.com/tensorflow/tensorboard/issues/4784",
    "Serving TensorBoard on localhost; to expose to the network, use a proxy or pass "
    "--bind_all",
    '127.0.0.1 - - [01/Dec/2026 07:12:03] "GET /data/runs HTTP/1.1" 200 -',
]
TENSORBOARD_KEPT = [
    "TensorBoard 2.15.2 at http://localhost:6006/ (Press CTRL+C to quit)",
    "[2026-12-01T07:12:04Z WARN  rustboard_core::run] Read error in events file",
    "[2026-12-01T07:12:04Z ERROR rustboard_core::logdir] could not list the log directory",
]


def test_a_tensorboard_the_script_starts_is_routine_but_its_address_and_errors():
    """A user's chief that starts TensorBoard: its data server's INFO records every 5 s,
    its start-up notes and its request log stay in the log, like TF's INFO lines."""
    f = NoiseFilter()
    assert [line for line in TENSORBOARD + TENSORBOARD_KEPT if f.show(line)] == \
        TENSORBOARD_KEPT
    assert f.hidden == len(TENSORBOARD)
