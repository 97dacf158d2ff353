"""The files a write makes beside its target: names that fit NAME_MAX and say which process made
them, the advisory lock a writer holds on what it is writing, and removing the files of our own
naming that killed writers left (`xgraph.ir.files` writes; this decides what is stale).

A file counts as stale only when it is clearly ours and no one is writing it: its name has our
pattern for that target, the process named in it is gone (temporary files), and its `flock` is
free. Another program's files, files of a live process, and files whose writer cannot be told
(a platform without `flock` aside) are never removed.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Callable

#: Used when the folder does not say how long a file name may be.
DEFAULT_NAME_MAX = 255


def name_max(folder: str | os.PathLike) -> int:
    """The longest file name (bytes) `folder` takes."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return DEFAULT_NAME_MAX


def fit_name(name: str, room: int) -> str:
    """`name` when its file-system bytes fit in `room`, else a prefix of it, ``~`` and 12 hex digits
    of its hash: as distinct as the names it stands for, and always the same for the same name."""
    if len(os.fsencode(name)) <= room:
        return name
    tag = "~" + hashlib.sha256(os.fsencode(name)).hexdigest()[:12]
    stem = name
    while len(os.fsencode(stem + tag)) > room:
        stem = stem[:-1]
    return stem + tag


#: A temporary file: ``.<target name, fitted>.<pid>.<12 hex digits>.tmp``.
_TEMP = re.compile(r"\.(?P<pid>[0-9]{1,10})\.[0-9a-f]{12}\.tmp")
_PID_ROOM = 10  # digits reserved for the pid, so the fitted stem does not depend on it


def _temp_stem(folder: str, name: str) -> str:
    return fit_name(name, name_max(folder) - len(f"..{'9' * _PID_ROOM}.{'0' * 12}.tmp"))


def temp_name(folder: str, name: str) -> str:
    """A hidden temporary name for `name` in `folder` that fits NAME_MAX and says which process made it."""
    return os.path.join(folder, f".{_temp_stem(folder, name)}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def lock_file(fd: int) -> bool:
    """Take an exclusive advisory lock on `fd` without waiting; False when another holder has it.

    Where the platform has no `flock`, every file counts as unlocked.
    """
    try:
        import fcntl
    except ImportError:  # Windows: open files cannot be removed there anyway
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # a file system without locks: no writer can be told apart, so none is
        return True
    return True


def create_exclusive(path: str) -> int:
    """Create `path` (never through a link; FileExistsError if any entry has that name) and lock it.

    The lock says "being written" to `remove_unlocked`; it is taken after the creation, so a
    cleaner may remove the file in between: then the file has no link any more and this fails
    with FileExistsError (the caller picks another name).
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o666)  # 0o666: the umask applies (mkstemp's 0600 would stick to the file)
    if lock_file(fd) and os.fstat(fd).st_nlink == 1:
        return fd
    os.close(fd)
    raise FileExistsError(path)


def remove_unlocked(path: str | os.PathLike, still_stale: Callable[[], bool] = lambda: True) -> bool:
    """Remove `path` if it is a regular file no one is writing (its lock is free) and `still_stale()`
    holds once the lock is ours; whether it was removed. Never follows a link, never raises OSError."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError):
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or not lock_file(fd) or not still_stale():
            return False
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's process
        return True
    except (OverflowError, OSError):  # gone, or a number no process has
        return False
    return True


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Remove the temporary files of earlier writes to `path` whose process is gone (a SIGKILL, a
    power cut) and that no one has locked; the names removed. Only names of our own pattern for
    this target are considered: another program's files, and ours still being written, stay."""
    p = Path(path)
    folder = str(p.parent) if str(p.parent) else "."
    prefix = f".{_temp_stem(folder, p.name)}"
    removed = []
    try:
        entries = [e.name for e in os.scandir(folder) if e.name.startswith(prefix)]
    except OSError:
        return removed
    for name in entries:
        m = _TEMP.fullmatch(name, len(prefix))
        if m is None or int(m["pid"]) == os.getpid() or _pid_alive(int(m["pid"])):
            continue
        if remove_unlocked(os.path.join(folder, name)):
            removed.append(name)
    return removed


__all__ = ["DEFAULT_NAME_MAX", "create_exclusive", "fit_name", "lock_file", "name_max", "remove_stale_temporaries",
           "remove_unlocked", "temp_name"]
