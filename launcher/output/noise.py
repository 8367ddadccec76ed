"""What of a task's output the console shows: TensorFlow's known noise (deprecation notices
with their "Instructions for updating:" block, oneDNN / CPU-feature / CUDA banners, INFO
chatter) stays in the task's log but not on the console, and so does the routine output of
well-known helpers a script starts (TensorBoard: its data server's INFO records, its
start-up notes; werkzeug's request log); warnings, errors, tracebacks and the user's own
prints are shown in full. And a ``\\r``-updated progress bar is shown as its latest state.

Pure functions and one small per-task state machine: no I/O, no TensorFlow.
"""

from __future__ import annotations

import re

# The start of a log record, in each format TensorFlow writes: Python logging
# ("WARNING:tensorflow:..."), absl ("W1201 07:12:01.000123 140 file.py:50] ..."; TF 2.16+'s C++
# runtime writes absl's format before absl is set up: "I0000 00:00:1796195202.232355  16504
# port.cc:153] ..."), and TF <= 2.15's C++ runtime ("2026-12-01 07:12:01.000123: I
# tensorflow/core/...] ...").
_PY_RECORD = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL|FATAL):(tensorflow|absl|root|"
                        r"keras|h5py\S*|py\.warnings):")
_ABSL_RECORD = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\]]*:\d+\] ")
_CPP_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) ")

BANNERS = re.compile("|".join([
    r"oneDNN custom operations are on",
    r"This TensorFlow binary is optimized to use available CPU instructions",
    r"To enable the following instructions: .*rebuild TensorFlow",
    r"cpu_feature_guard",
    r"Could not find cuda drivers on your machine",
    r"Unable to register (cuDNN|cuFFT|cuBLAS) factory",
    r"TF-TRT Warning: Could not find TensorRT",
    r"computation_placer\.cc.*already registered",
    r"Your kernel may have been built without NUMA support",
    r"successful NUMA node read from SysFS",
    r"failed call to cuInit",
    r"All log messages before absl::InitializeLog\(\) is called are written to STDERR",
]))
# Routine lines of helpers a script starts: TensorBoard's Rust data server logs through
# env_logger ("[2026-12-01T07:12:01Z INFO  rustboard_core::cli] Finished load cycle");
# TensorBoard's start-up notes; werkzeug's (TensorBoard's web server) request log.
HELPERS = re.compile("|".join([
    r"^\[[^\]]*\b(?:INFO|DEBUG|TRACE)\s+rustboard\w*(?:::\w+)*\]",
    r"^NOTE: Using experimental fast data loading logic",
    r"^Serving TensorBoard on localhost; to expose to the network",
    r'^\S+ - - \[[^\]]+\] "(?:GET|POST|HEAD) ',
]))
HELPER_CONTINUED = ('    "--load_fast=false" and report issues on GitHub',
                    "    https://github.com/tensorflow/tensorboard/issues/4784")
DEPRECATION = re.compile(r"is deprecated and will be removed|is deprecated\. Please use|"
                         r"\bdeprecation\.py:\d+\]|Instructions for updating:|"
                         r"deprecated arguments\) are deprecated")
# INFO records worth a line on the console: an evaluation's results, the final loss
KEEP_INFO = re.compile(r"Saving dict for global step|Loss for final step")
INSTRUCTIONS = "Instructions for updating:"
MAX_INSTRUCTION_LINES = 1     # TF writes one; a print after it is the user's


def latest_state(line: str) -> str:
    """What a terminal would show of ``line``: the text after its last carriage return
    (a progress bar redrawn in place), backspaces applied."""
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    if "\b" in line:
        out: list[str] = []
        for c in line:
            if c == "\b":
                if out:
                    out.pop()
            else:
                out.append(c)
        line = "".join(out)
    return line


def is_banner(line: str) -> bool:
    """A line of TensorFlow's start-up banners (oneDNN, CPU features, CUDA, absl's)."""
    return BANNERS.search(line) is not None


def message(line: str) -> str:
    """A log record's text without its header: an absl or C++ header ends in ``file:N] ``,
    whose ``]`` belongs to no bracket of the message."""
    if _ABSL_RECORD.match(line) or _CPP_RECORD.match(line):
        return line.split("] ", 1)[-1]
    return line


def record_level(line: str) -> str | None:
    """The level letter (I, W, E, F, D, C) when ``line`` starts a log record, else None."""
    m = _PY_RECORD.match(line)
    if m:
        return m.group(1)[0]
    m = _ABSL_RECORD.match(line) or _CPP_RECORD.match(line)
    return m.group(1) if m else None


class NoiseFilter:
    """One task's output, line by line: ``show(line)`` says whether the console prints it.
    Stateful only for the lines after "Instructions for updating:"."""

    def __init__(self) -> None:
        self.hidden = 0
        self._instructions_left = 0
        self._open = 0      # brackets a hidden record left open: its next lines are its own
        self._continued = 0

    def show(self, line: str) -> bool:
        keep = self._judge(line)
        if not keep:
            self.hidden += 1
        return keep

    def _judge(self, line: str) -> bool:
        level = record_level(line)
        starts = level is not None or line.startswith("Traceback (most recent call last)")
        if self._open and not starts and self._continued < MAX_CONTINUATION:
            self._open = max(0, self._open + _balance(line))    # a hidden record's dict or
            self._continued += 1                                # proto goes on ("{...")
            return False
        self._open = self._continued = 0
        if self._instructions_left and not starts and line.strip():
            self._instructions_left -= 1
            return False        # the text of a deprecation's "Instructions for updating:"
        self._instructions_left = 0
        if line.strip() == INSTRUCTIONS or line.endswith(INSTRUCTIONS):
            self._instructions_left = MAX_INSTRUCTION_LINES
            return False
        if is_banner(line) or HELPERS.search(line) or line.startswith(HELPER_CONTINUED):
            return False
        if level is not None and DEPRECATION.search(line):
            return False
        if level in ("I", "D") and not KEEP_INFO.search(line):
            self._open = min(max(0, _balance(message(line))), MAX_OPEN)
            return False
        return True


MAX_OPEN = 8
MAX_CONTINUATION = 40     # lines of one hidden record, at most (Estimator's config: 8)


def _balance(line: str) -> int:
    return line.count("{") + line.count("[") - line.count("}") - line.count("]")
