"""Pages seen in a real browser: Debian's ``chromium``, headless (scripts/setup.sh installs
it). ``dump_dom`` gives the DOM after the page's scripts ran (a JS app such as TensorBoard's
renders within the virtual time budget); ``screenshot`` what it draws."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is not installed: scripts/setup.sh installs it (apt: chromium)"
    return found


def _run(args: list[str], timeout: float) -> str:
    """chromium ARGS with a profile of its own, removed afterwards; its stdout."""
    profile = tempfile.mkdtemp(prefix="tfc-chromium-")
    proc = subprocess.Popen([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)     # its renderer and helper processes
        except ProcessLookupError:
            pass
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
    return out.decode(errors="replace")


def dump_dom(url: str, budget_ms: int = 10000, timeout: float = 120) -> str:
    return _run([f"--virtual-time-budget={budget_ms}", "--dump-dom", url], timeout)


def screenshot(url: str, path: Path, size: str = "1280,1800", budget_ms: int = 3000,
               timeout: float = 120) -> Path:
    _run([f"--virtual-time-budget={budget_ms}", f"--window-size={size}",
          f"--screenshot={path}", url], timeout)
    assert path.exists(), f"chromium drew no screenshot of {url}"
    return path


def visible_text(dom: str) -> list[str]:
    """The text a person sees on the page, one piece per element."""
    dom = re.sub(r"<(style|script|noscript)\b.*?</\1>", "", dom, flags=re.S | re.I)
    return [t.strip() for t in re.split(r"<[^>]+>", dom) if t.strip()]
