"""ssh.sync's two halves without ssh: the launcher's manifest (what is left out, symlinks,
modes, the cache key) and the host's store (agent/sync_store.py: a tree built whole or not at
all, never changed, old trees collected unless in use), joined here by a real ``tar``."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support import REPO

from launcher.backends.agent import sync_store as host
from launcher.backends.workdir_sync import IgnoreRules, manifest, size_check, write_tar
from launcher.errors import PreflightError


@pytest.fixture(autouse=True)
def _released():
    """Each test's locks and scratch folders end with it (a bootstrap's end)."""
    yield
    host.drop_scratch()
    for fd in host.SYNC["locks"]:
        os.close(fd)
    host.SYNC["locks"] = []


def folder(root: Path) -> Path:
    (root / "pkg" / "deep").mkdir(parents=True)
    (root / "train.py").write_text("import pkg\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "deep" / "run.sh").write_text("#!/bin/sh\n")
    (root / "pkg" / "deep" / "run.sh").chmod(0o755)
    return root


def paths(found) -> list[str]:
    return [e[0] for e in found.entries]


def copy_to(found, area: Path) -> dict:
    """What the launcher and the host do for a host that lacks the tree."""
    state = host.sync_state({"area": str(area), "tree": found.tree,
                             "objects": list(found.sizes)})
    if state["root"]:
        return state
    stream = io.BytesIO()
    write_tar(found, state["missing"], stream)
    subprocess.run(["tar", "-x", "-f", "-", "-C", state["incoming"]], input=stream.getvalue(),
                   check=True)
    result = host.sync_install({"area": str(area), "tree": found.tree,
                                "entries": found.entries, "incoming": state["incoming"]})
    return dict(result, missing=state["missing"])


def test_left_out_vcs_caches_environments_run_dirs_and_ignore_patterns(tmp_path):
    root = folder(tmp_path / "w")
    for name in (".git/objects", "pkg/__pycache__", "venv/bin", "env2/conda-meta", "runs/x",
                 "model", "data/raw", "logs/keep"):
        (root / name).mkdir(parents=True)
    (root / "venv" / "pyvenv.cfg").write_text("")
    (root / "notes.log").write_text("")
    (root / "logs" / "keep" / "a.log").write_text("")
    (root / "logs" / "important.log").write_text("")
    (root / "pkg" / "data").mkdir()
    (root / ".tfclusterignore").write_text("# comment\n*.log\n!important.log\n/data/\n")
    found = manifest(str(root), leave_out=(str(root / "runs"), str(root / "model")))
    assert paths(found) == [".tfclusterignore", "logs", "logs/important.log", "logs/keep",
                            "pkg", "pkg/__init__.py", "pkg/data", "pkg/deep",
                            "pkg/deep/run.sh", "train.py"]


@pytest.mark.parametrize("pattern, path, is_dir, ignored", [
    ("*.ckpt", "a/b/model.ckpt", False, True),
    ("/build", "build", True, True),
    ("/build", "src/build", True, False),
    ("cache/", "x/cache", True, True),
    ("cache/", "x/cache", False, False),
    ("docs/**/*.png", "docs/a/b/c.png", False, True),
    ("**/tmp", "a/tmp", True, True),
    ("a?c", "abc", False, True),
    ("[ab].txt", "c.txt", False, False),
])
def test_gitignore_patterns(pattern, path, is_dir, ignored):
    assert IgnoreRules([pattern]).ignored(path, is_dir) is ignored


def test_symlinks_inside_are_kept_as_links_and_out_of_the_folder_refused(tmp_path):
    root = folder(tmp_path / "w")
    os.symlink("pkg/deep", root / "inner")
    os.symlink(root / "train.py", root / "absolute_inside")
    found = manifest(str(root))
    links = {e[0]: e[3] for e in found.entries if e[1] == "l"}
    assert links == {"inner": "pkg/deep", "absolute_inside": "train.py"}
    os.symlink(tmp_path, root / "pkg" / "out")
    with pytest.raises(PreflightError, match=r"symlink pkg/out points out of the folder"):
        manifest(str(root))


def test_unreadable_file_and_missing_workdir_are_one_line(tmp_path):
    with pytest.raises(PreflightError, match=r"workdir .*/nowhere does not exist"):
        manifest(str(tmp_path / "nowhere"))
    root = folder(Path(tempfile.mkdtemp(prefix="tfc-sync-")) / "w")   # others may enter
    try:
        os.mkfifo(root / "pipe")                  # neither file nor folder: not copied
        assert "pipe" not in paths(manifest(str(root)))
        (root / "secret").write_text("x")
        (root / "secret").chmod(0)
        for path in (root.parent, root, root / "pkg", root / "pkg" / "deep"):
            path.chmod(0o755)
        code = ("import sys; from launcher.backends.workdir_sync import manifest\n"
                "from launcher.errors import PreflightError\n"
                "try:\n    manifest(sys.argv[1])\nexcept PreflightError as e:\n"
                "    print(e)")
        as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] \
            if os.geteuid() == 0 else []     # root reads a file of mode 000
        done = subprocess.run([*as_user, sys.executable, "-c", code, str(root)],
                              capture_output=True, text=True, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.stdout.strip() == (
            f"workdir {root}: cannot read secret: Permission denied (list it in "
            '.tfclusterignore, or remove it; "ssh": {"sync": true} copies the workdir)'), \
            done.stderr
    finally:
        shutil.rmtree(root.parent)


def test_cache_key_follows_content_modes_and_links_not_times(tmp_path):
    root = folder(tmp_path / "w")
    key = manifest(str(root)).tree
    os.utime(root / "train.py", (1, 1))
    assert manifest(str(root)).tree == key
    (root / "pkg" / "deep" / "run.sh").chmod(0o644)
    assert manifest(str(root)).tree != key
    (root / "pkg" / "deep" / "run.sh").chmod(0o755)
    assert manifest(str(root)).tree == key
    (root / "train.py").write_text("import pkg  # changed\n")
    assert manifest(str(root)).tree != key


def test_size_line_names_the_largest_entries_and_the_limit_refuses(tmp_path, monkeypatch):
    from launcher.backends import workdir_sync

    root = folder(tmp_path / "w")
    (root / "weights.bin").write_bytes(b"\0" * 3000)
    monkeypatch.setattr(workdir_sync, "SIZE_NOTE", 1000)
    monkeypatch.setattr(workdir_sync, "SIZE_LIMIT", 2000)
    found = manifest(str(root))
    with pytest.raises(PreflightError, match=r"largest: weights.bin 2.9 kB.*\"force\""):
        size_check(found, force=False)
    note = size_check(found, force=True)
    assert "(largest: weights.bin 2.9 kB, train.py 11 B, pkg 10 B)" in str(note)


def test_copy_keeps_owner_modes_private_and_sends_only_what_changed(tmp_path):
    root, area = folder(tmp_path / "w"), tmp_path / "area"
    first = copy_to(manifest(str(root)), area)
    tree = Path(first["root"])
    assert stat.S_IMODE(os.stat(tree / "pkg" / "deep" / "run.sh").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tree / "train.py").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(area).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tree / "pkg").st_mode) == 0o700
    assert len(first["missing"]) == 3
    again = copy_to(manifest(str(root)), area)
    assert again == {"root": str(tree)}          # the tree is there: nothing to send
    (root / "train.py").write_text("import pkg  # changed\n")
    changed = copy_to(manifest(str(root)), area)
    assert len(changed["missing"]) == 1          # only the changed file
    assert (tree / "train.py").read_text() == "import pkg\n"   # the old tree is untouched
    assert Path(changed["root"], "train.py").read_text() == "import pkg  # changed\n"


def test_a_tree_is_built_whole_or_not_at_all(tmp_path):
    root, area = folder(tmp_path / "w"), tmp_path / "area"
    found = manifest(str(root))
    state = host.sync_state({"area": str(area), "tree": found.tree,
                             "objects": list(found.sizes)})
    stream = io.BytesIO()
    write_tar(found, state["missing"][:-1], stream)          # one file never arrives
    subprocess.run(["tar", "-x", "-f", "-", "-C", state["incoming"]], input=stream.getvalue(),
                   check=True)
    result = host.sync_install({"area": str(area), "tree": found.tree,
                                "entries": found.entries, "incoming": state["incoming"]})
    assert "No such file or directory" in result["problem"] and "root" not in result
    assert os.listdir(area / "trees") == os.listdir(area / "tmp") == []
    assert os.listdir(area / "incoming") == []
    (Path(state["incoming"])).mkdir()
    bad = Path(state["incoming"]) / next(e[3] for e in found.entries if e[1] == "f")
    bad.write_text("not what the hash says")
    result = host.sync_install({"area": str(area), "tree": found.tree,
                                "entries": found.entries, "incoming": state["incoming"]})
    assert result == {"problem": f"a copied file does not match its hash ({bad.name})"}
    assert os.listdir(area / "trees") == []


def test_old_trees_are_collected_unless_in_use(tmp_path):
    root, area = folder(tmp_path / "w"), tmp_path / "area"
    trees = []
    for i in range(host.KEEP_TREES + 2):
        (root / "train.py").write_text(f"version {i}\n")
        trees.append(Path(copy_to(manifest(str(root)), area)["root"]).name)
        os.utime(area / "manifests" / trees[-1], (i, i))      # oldest first
        if i > 0:                              # only the first stays held (a running run)
            os.close(host.SYNC["locks"].pop())
    host.collect(str(area))
    kept = sorted(os.listdir(area / "trees"))
    assert trees[0] in kept                    # in use: kept although it is the oldest
    assert trees[1] not in kept                # neither in use nor among the newest
    assert set(trees[-host.KEEP_TREES:]) <= set(kept)


def test_paths_out_of_the_copy_are_refused_by_the_host(tmp_path):
    root, area = folder(tmp_path / "w"), tmp_path / "area"
    found = manifest(str(root))
    state = host.sync_state({"area": str(area), "tree": found.tree, "objects": []})
    entries = [["../escape", "d", 0o700, ""]]
    with pytest.raises(ValueError, match="path out of the folder"):
        host.sync_install({"area": str(area), "tree": found.tree, "entries": entries,
                           "incoming": state["incoming"]})


def test_unchanged_files_are_not_read_again_and_a_changed_one_is(tmp_path, monkeypatch):
    from launcher.backends import workdir_sync

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = folder(tmp_path / "w")
    for path in (root / "train.py", root / "pkg" / "__init__.py", root / "pkg" / "deep" / "run.sh"):
        os.utime(path, (1, 1))                     # long ago: not racy
    read: list[str] = []
    digest = workdir_sync._digest
    monkeypatch.setattr(workdir_sync, "_digest", lambda p: (read.append(p), digest(p))[1])
    first = manifest(str(root))
    assert len(read) == 3
    read.clear()
    assert manifest(str(root)).tree == first.tree and read == []
    (root / "train.py").write_text("import pkg  # changed\n")    # new mtime: read again
    changed = manifest(str(root))
    assert read == [str(root / "train.py")] and changed.tree != first.tree
    assert stat.S_IMODE(os.stat(tmp_path / "cache" / "tfcluster" / "sync-hashes").st_mode) \
        == 0o700
