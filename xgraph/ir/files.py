"""The one way xgraph writes a file: .xmodel, reports, pictures, dumps, run outputs, traces.

Every write follows the same rules:

- the target is a regular file or does not exist yet: a folder, symbolic link (dangling or
  not), device node, FIFO or socket is refused, so saving never writes through a link or
  replaces ``/dev/null``;
- the bytes go to a new temporary file beside the target (created exclusively, never through
  a link; its name fits the folder's NAME_MAX however long the target's name is, and carries
  the writer's process id), which is then renamed over the target: readers see the old file or
  the new one, never half of one;
- an existing target keeps its permission bits (and, when running as root, its owner); a new
  one gets what ``open()`` would give under the umask;
- on any failure nothing is left behind: no temporary file, and the old file as it was; a
  Python exception (KeyboardInterrupt, or the SystemExit the command lines turn SIGTERM and
  SIGHUP into) is such a failure. What a SIGKILL or power cut leaves (temporary files of our
  naming) is removed by the next write to the same target (`remove_stale_temporaries`).

A file that belongs to a target but must keep its own, new name (an .xmodel's side file,
named by its save) is created with `write_new`: exclusively, locked while its unit is in
flight, and removed if the unit fails. `on_commit` runs a function once the unit's files are
in place (removing what the new files superseded).

Several files that belong together (``xcompile``'s .xmodel and its ``--report``, the outputs
of ``xgraph run -o``) are written as a unit inside ``all_or_nothing()``: every write is staged,
and the targets are replaced only once all of them are ready (a late failure puts back the
files already replaced).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import stat
from pathlib import Path
from typing import Callable, Iterator

from xgraph.errors import OutputFileError
from xgraph.ir.temp_files import create_exclusive, remove_stale_temporaries, temp_name

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


def _create_temp(folder: str, name: str) -> tuple[int, str]:
    """A new, exclusively created and locked file beside the target."""
    for _ in range(100):
        tmp = temp_name(folder, name)
        try:
            return create_exclusive(tmp), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name in {folder}")


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class _Staged:
    """A finished file waiting for its unit to commit: a temporary file to rename over its target
    (`tmp`), or a new file already at its own name (`fd` open and locked until the unit ends)."""

    __slots__ = ("path", "tmp", "label", "fd", "stat")

    def __init__(self, path: Path, tmp: str | None, label: str, fd: int | None, st: os.stat_result) -> None:
        self.path, self.tmp, self.label, self.fd, self.stat = path, tmp, label, fd, st

    def discard(self) -> None:
        """Remove what this write created (the temporary file, or the new file) and release it."""
        _discard(self.tmp if self.tmp is not None else str(self.path))
        self.release()

    def release(self) -> None:
        """Close a new file's descriptor: its lock goes, so the file counts as finished."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


def _write_all(fd: int, data: "bytes | Callable[[int], None]") -> None:
    if callable(data):
        data(fd)
    else:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    os.fsync(fd)


def _stage(path: str | os.PathLike, data: "bytes | Callable[[int], None]", what: str) -> _Staged:
    """Check the target, write `data` (bytes, or a function writing to the descriptor it is given)
    to a temporary file beside it with the target's mode."""
    label = f"{what} {path}".strip() if what else str(path)
    old = check_target(path, what)
    p = Path(path)
    folder = str(p.parent) if str(p.parent) else "."
    remove_stale_temporaries(p)
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
            _write_all(fd, data)
            st = os.fstat(fd)
        finally:
            os.close(fd)
    except BaseException as e:
        _discard(tmp)
        if isinstance(e, OSError):
            raise OutputFileError(f"{label}: cannot write it ({_reason(e)})") from None
        raise
    return _Staged(p, tmp, label, None, st)


def _commit(staged: list[_Staged]) -> None:
    """Rename every staged file over its target; a failure puts back what was replaced and raises.

    Putting back needs a hard link to each old file; where the file system has none, that file
    stays replaced (said in docs/security.md).
    """
    done: list[tuple[_Staged, str | None, bool]] = []  # (file, backup of the old one, it existed)
    renamed = [s for s in staged if s.tmp is not None]
    try:
        for s in renamed:
            check_target(s.path)  # not swapped for a link, device or folder since it was staged
            existed = os.path.lexists(s.path)
            backup = None
            if len(renamed) > 1 and existed:
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
            s.discard()
        if isinstance(e, OSError):
            failed = renamed[len(done)] if len(done) < len(renamed) else renamed[-1]
            raise OutputFileError(f"{failed.label}: cannot write it ({_reason(e)})") from None
        raise
    for _, backup, _ in done:
        if backup is not None:
            with contextlib.suppress(OSError):
                os.unlink(backup)


def _finish(staged: list[_Staged], then: list[Callable[[], None]]) -> None:
    """After a commit: run the unit's `on_commit` functions, then release its new files."""
    try:
        for fn in then:
            fn()
    finally:
        for s in staged:
            s.release()


class _Unit:
    """The files staged inside one `all_or_nothing` block, and what to run once they are in place."""

    __slots__ = ("staged", "then")

    def __init__(self) -> None:
        self.staged: list[_Staged] = []
        self.then: list[Callable[[], None]] = []

    def abort(self) -> None:
        for s in self.staged:
            s.discard()

    def commit(self) -> None:
        _commit(self.staged)
        _finish(self.staged, self.then)


_UNIT: contextvars.ContextVar[_Unit | None] = contextvars.ContextVar("xgraph_file_unit", default=None)


def write_bytes(path: str | os.PathLike, data: bytes, what: str = "") -> os.stat_result:
    """Write `data` to `path` by the rules above (OutputFileError naming `what` and the path on failure);
    the new file's stat (its inode is the one `path` holds once the unit commits)."""
    return _write(_stage(path, bytes(data) if not isinstance(data, bytes) else data, what))


def write_with(path: str | os.PathLike, writer: Callable[[int], None], what: str = "") -> os.stat_result:
    """Write `path` by the rules above with `writer(fd)`, which writes the whole content to the
    descriptor (a file too large to hold in memory); the new file's stat."""
    return _write(_stage(path, writer, what))


def write_new(path: str | os.PathLike, writer: Callable[[int], None], what: str = "") -> None:
    """Create `path`, which must not exist (FileExistsError: pick another name), and write it with
    `writer(fd)`. The file is locked until its unit commits, so cleaners of stale files leave it,
    and removed if the unit fails; readers find it only through a file the unit renames into place."""
    label = f"{what} {path}".strip() if what else str(path)
    p = Path(path)
    try:
        fd = create_exclusive(str(p))
    except FileExistsError:
        raise
    except (OSError, ValueError) as e:
        raise OutputFileError(f"{label}: cannot write it ({_reason(e)})") from None
    staged = _Staged(p, None, label, fd, os.fstat(fd))
    try:
        _write_all(fd, writer)
    except BaseException as e:
        staged.discard()
        if isinstance(e, OSError):
            raise OutputFileError(f"{label}: cannot write it ({_reason(e)})") from None
        raise
    _write(staged)


def on_commit(fn: Callable[[], None]) -> None:
    """Run `fn()` once the current unit's files are in place (at once outside `all_or_nothing`).

    Its new files are still locked while `fn` runs; an error in `fn` does not undo the commit.
    """
    unit = _UNIT.get()
    if unit is None:
        fn()
    else:
        unit.then.append(fn)


def _write(staged: _Staged) -> os.stat_result:
    unit = _UNIT.get()
    if unit is not None:
        if any(os.path.abspath(s.path) == os.path.abspath(staged.path) for s in unit.staged):
            staged.discard()
            raise OutputFileError(f"{staged.label}: the same file is written twice; give each output its own path")
        unit.staged.append(staged)
        return staged.stat
    try:
        _commit([staged])
    finally:
        staged.release()
    return staged.stat


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
    unit = _Unit()
    token = _UNIT.set(unit)
    try:
        yield
    except BaseException:
        unit.abort()
        raise
    finally:
        _UNIT.reset(token)
    unit.commit()


__all__ = ["all_or_nothing", "check_target", "describe_kind", "on_commit", "temp_name", "write_bytes", "write_new",
           "write_text", "write_with"]
