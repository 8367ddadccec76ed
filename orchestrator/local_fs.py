"""model_dir's filesystem: fsspec's, or for a plain local path this small stand-in.

fsspec (with asyncio, which it imports) costs a launcher ~0.1 s of CPU to import, more than
a small job's own start; a local model_dir needs none of it. ``LocalFS`` answers the few
calls the readers make (``cat_file``, ``info``, ``glob``, ``ls``, ``open`` and the protocol
helpers) as fsspec's ``LocalFileSystem`` does, with ``os``; any URL with a protocol other
than ``file://``, or storage options, goes to fsspec.
"""

from __future__ import annotations

import glob as _glob
import os
from typing import IO, Any

LOCAL_PROTOCOLS = ("file", "local")


def is_plain_local(url: str, options: dict[str, Any] | None = None) -> bool:
    """A path on this machine's filesystem (no protocol, or ``file://``), no options."""
    return not options and ("://" not in url or url.startswith("file://"))


def url_to_fs(url: str, **options: Any) -> tuple[Any, str]:
    """(filesystem, path) as ``fsspec.core.url_to_fs`` gives them."""
    if is_plain_local(url, options):
        return LocalFS(), LocalFS._strip_protocol(url)
    import fsspec

    return fsspec.core.url_to_fs(url, **options)


def open_url(url: str, mode: str = "rb", **options: Any) -> IO[Any]:
    """``fsspec.open(url, mode, **options)``, opened; plain ``open`` for a local path."""
    if is_plain_local(url, {k: v for k, v in options.items() if k != "encoding"}):
        return open(LocalFS._strip_protocol(url), mode,  # noqa: SIM115
                    encoding=options.get("encoding"))
    import fsspec

    return fsspec.open(url, mode, **options).open()


class LocalFS:
    """The subset of fsspec's ``LocalFileSystem`` the model_dir readers use."""

    protocol = LOCAL_PROTOCOLS

    @staticmethod
    def _strip_protocol(path: str) -> str:
        path = os.path.expanduser(path.removeprefix("file://"))
        if not os.path.isabs(path):
            path = os.path.join(os.getcwd(), path)
        return path.rstrip("/") or "/"

    def unstrip_protocol(self, path: str) -> str:
        return "file://" + self._strip_protocol(path)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        with open(self._strip_protocol(path), "rb") as f:
            if start:
                f.seek(start)
            return f.read() if end is None else f.read(max(0, end - (start or 0)))

    def info(self, path: str) -> dict[str, Any]:
        path = self._strip_protocol(path)
        st = os.stat(path)      # FileNotFoundError, as fsspec raises it
        kind = "directory" if os.path.isdir(path) else "file"
        return {"name": path, "size": st.st_size, "type": kind, "mtime": st.st_mtime}

    def exists(self, path: str) -> bool:
        return os.path.exists(self._strip_protocol(path))

    def ls(self, path: str, detail: bool = False) -> list[Any]:
        path = self._strip_protocol(path)
        names = sorted(os.path.join(path, n) for n in os.listdir(path))
        return [self.info(n) for n in names] if detail else names

    def find(self, path: str, detail: bool = False) -> Any:
        """Every file under ``path`` (recursively): {path: info} with ``detail``, else the
        sorted paths. Files removed while it walks are left out."""
        found: dict[str, dict[str, Any]] = {}
        for top, _dirs, files in os.walk(self._strip_protocol(path)):
            for name in files:
                try:
                    found[os.path.join(top, name)] = self.info(os.path.join(top, name))
                except OSError:
                    continue
        return found if detail else sorted(found)

    def glob(self, pattern: str) -> list[str]:
        return sorted(_glob.glob(self._strip_protocol(pattern)))

    def open(self, path: str, mode: str = "rb", **options: Any) -> IO[Any]:
        return open(self._strip_protocol(path), mode,  # noqa: SIM115
                    encoding=options.get("encoding"))
