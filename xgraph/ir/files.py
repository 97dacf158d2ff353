"""The one way xgraph writes a file: .xmodel, reports, pictures, dumps, run outputs, traces.

Every write follows the same rules:

- the target is a regular file or does not exist yet: a folder, symbolic link (dangling or
  not), device node, FIFO or socket is refused, so saving never writes through a link or
  replaces ``/dev/null``;
- the bytes go to a new temporary file beside the target (created exclusively, never through
  a link; its name fits the folder's NAME_MAX however long the target's name is), which is
  then renamed over the target: readers see the old file or the new one, never half of one;
- an existing target keeps its permission bits (and, when running as root, its owner); a new
  one gets what ``open()`` would give under the umask;
- on any failure nothing is left behind: no temporary file, and the old file as it was.

Several files that belong together (``xcompile``'s .xmodel and its ``--report``, the outputs
of ``xgraph run -o``) are written as a unit inside ``all_or_nothing()``: every write is staged,
and the targets are replaced only once all of them are ready (a late failure puts back the
files already replaced).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import secrets
import stat
from pathlib import Path
from typing import Callable, Iterator

from xgraph.errors import OutputFileError

#: Used when the folder does not say how long a file name may be.
DEFAULT_NAME_MAX = 255


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e)


def describe_kind(mode: int) -> str:
    """'a folder', 'a character device', 'a FIFO (named pipe)'... for an st_mode that is not a regular file."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_target(path: str | os.PathLike, what: str = "") -> os.stat_result | None:
    """Refuse a target xgraph must not write (OutputFileError); its stat when it exists, else None.

    Called before any work that produces the file, so a bad target fails fast and changes nothing.
    """
    label = f"{what} {path}".strip() if what else str(path)
    p = Path(path)
    if not str(path) or str(path).endswith(("/", os.sep)):
        raise OutputFileError(f"{label or repr(str(path))}: give a file name to write")
    try:
        folder = p.parent
        if not folder.is_dir():
            raise OutputFileError(f"{label}: cannot write it, folder {folder} does not exist")
        st = os.lstat(p)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise OutputFileError(f"{label}: cannot write it ({_reason(e)})") from None
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(p)
        except OSError:
            target = "?"
        raise OutputFileError(f"{label}: is a symbolic link (to {target}); xgraph does not write through links: "
                              "write to the real path, or remove the link first")
    if not stat.S_ISREG(st.st_mode):
        raise OutputFileError(f"{label}: is {describe_kind(st.st_mode)}, not a regular file; xgraph only replaces regular "
                              "files: give the path of a file to write")
    return st


def _name_max(folder: str) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return DEFAULT_NAME_MAX


def temp_name(folder: str, name: str) -> str:
    """A hidden temporary name for `name` in `folder` that fits NAME_MAX (`name` is shortened if need be)."""
    suffix = f".{secrets.token_hex(6)}.tmp"
    room = _name_max(folder) - len(os.fsencode("." + suffix))
    stem = name
    while len(os.fsencode(stem)) > room:
        stem = stem[:-1]
    return os.path.join(folder, f".{stem}{suffix}")


def _create_temp(folder: str, name: str) -> tuple[int, str]:
    """A new, exclusively created file beside the target.

    Mode 0o666 lets the kernel apply the umask (mkstemp's 0600 would stick to the final file,
    and reading the umask is not thread-safe).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        tmp = temp_name(folder, name)
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name in {folder}")


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class _Staged:
    """A finished temporary file waiting to replace its target."""

    __slots__ = ("path", "tmp", "label")

    def __init__(self, path: Path, tmp: str, label: str) -> None:
        self.path, self.tmp, self.label = path, tmp, label


def _stage(path: str | os.PathLike, data: "bytes | Callable[[int], None]", what: str) -> _Staged:
    """Check the target, write `data` (bytes, or a function writing to the descriptor it is given)
    to a temporary file beside it with the target's mode."""
    label = f"{what} {path}".strip() if what else str(path)
    old = check_target(path, what)
    p = Path(path)
    folder = str(p.parent) if str(p.parent) else "."
    try:
        fd, tmp = _create_temp(folder, p.name)
    except (OSError, ValueError) as e:
        raise OutputFileError(f"{label}: cannot write it ({_reason(e)})") from None
    try:
        try:
            if old is not None:
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
                if os.geteuid() == 0 and (old.st_uid, old.st_gid) != (0, 0):
                    os.fchown(fd, old.st_uid, old.st_gid)
            if callable(data):
                data(fd)
            else:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException as e:
        _discard(tmp)
        if isinstance(e, OSError):
            raise OutputFileError(f"{label}: cannot write it ({_reason(e)})") from None
        raise
    return _Staged(p, tmp, label)


def _commit(staged: list[_Staged]) -> None:
    """Rename every staged file over its target; a failure puts back what was replaced and raises.

    Putting back needs a hard link to each old file; where the file system has none, that file
    stays replaced (said in docs/security.md).
    """
    done: list[tuple[_Staged, str | None, bool]] = []  # (file, backup of the old one, it existed)
    try:
        for s in staged:
            check_target(s.path)  # not swapped for a link, device or folder since it was staged
            existed = os.path.lexists(s.path)
            backup = None
            if len(staged) > 1 and existed:
                backup = temp_name(str(s.path.parent) or ".", s.path.name)
                try:
                    os.link(s.path, backup, follow_symlinks=False)
                except OSError:
                    backup = None
            try:
                os.replace(s.tmp, s.path)  # renames over the target's entry; never follows a link
            except BaseException:
                if backup is not None:
                    _discard(backup)
                raise
            done.append((s, backup, existed))
    except BaseException as e:
        for s, backup, existed in reversed(done):
            with contextlib.suppress(OSError):
                if backup is not None:
                    os.replace(backup, s.path)
                elif not existed:
                    os.unlink(s.path)
        for s in staged:
            _discard(s.tmp)
        if isinstance(e, OSError):
            failed = staged[len(done)] if len(done) < len(staged) else staged[-1]
            raise OutputFileError(f"{failed.label}: cannot write it ({_reason(e)})") from None
        raise
    for _, backup, _ in done:
        if backup is not None:
            with contextlib.suppress(OSError):
                os.unlink(backup)


_UNIT: contextvars.ContextVar[list[_Staged] | None] = contextvars.ContextVar("xgraph_file_unit", default=None)


def write_bytes(path: str | os.PathLike, data: bytes, what: str = "") -> None:
    """Write `data` to `path` by the rules above (OutputFileError naming `what` and the path on failure)."""
    _write(_stage(path, bytes(data) if not isinstance(data, bytes) else data, what))


def write_with(path: str | os.PathLike, writer: Callable[[int], None], what: str = "") -> None:
    """Write `path` by the rules above with `writer(fd)`, which writes the whole content to the
    descriptor (a file too large to hold in memory: an .xmodel's side data file)."""
    _write(_stage(path, writer, what))


def _write(staged: _Staged) -> None:
    unit = _UNIT.get()
    if unit is not None:
        if any(os.path.abspath(s.path) == os.path.abspath(staged.path) for s in unit):
            _discard(staged.tmp)
            raise OutputFileError(f"{staged.label}: the same file is written twice; give each output its own path")
        unit.append(staged)
        return
    _commit([staged])


def write_text(path: str | os.PathLike, text: str, what: str = "") -> None:
    """Write `text` as UTF-8 (unencodable characters backslash-escaped) by the same rules."""
    write_bytes(path, text.encode("utf-8", errors="backslashreplace"), what)


@contextlib.contextmanager
def all_or_nothing() -> Iterator[None]:
    """Stage every write inside the block; replace the targets together when the block succeeds.

    If the block raises (or a target cannot be replaced), no target changes and no temporary
    file is left.
    """
    if _UNIT.get() is not None:  # nested: the outer unit commits
        yield
        return
    unit: list[_Staged] = []
    token = _UNIT.set(unit)
    try:
        yield
    except BaseException:
        for s in unit:
            _discard(s.tmp)
        raise
    finally:
        _UNIT.reset(token)
    _commit(unit)


__all__ = ["all_or_nothing", "check_target", "describe_kind", "temp_name", "write_bytes", "write_text", "write_with"]
