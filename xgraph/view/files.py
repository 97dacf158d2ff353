"""Writing a view to disk: all or nothing, with errors that name the file."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from xgraph.errors import XGraphError


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically: on any error an existing file is left as it was."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise XGraphError(f"{path}: cannot write it, folder {folder} does not exist")
    if path.is_dir():
        raise XGraphError(f"{path}: is a folder; give a file name to write")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise XGraphError(f"{path}: cannot write it ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="\n") as f:
            f.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except OSError as e:
        _discard(tmp)
        raise XGraphError(f"{path}: cannot write it ({e.strerror or e})") from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


__all__ = ["write_text"]
