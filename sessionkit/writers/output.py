"""Files sessionkit writes for the user (reports): whole or not at all, never over an existing
file unless asked, never into a folder that is not there unless asked."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from sessionkit.nanobot.writer import check_folder

__all__ = ["check_output", "write_output"]


def check_output(
    final: str | os.PathLike[str], *, overwrite: bool = False, create: bool = False
) -> Path:
    """``final`` as a path, once it is known :func:`write_output` may write it (checked
    before slow work, so a typo fails at once)."""
    target = Path(final).expanduser()
    check_folder(target.parent, create)
    if not overwrite and os.path.lexists(target):
        raise FileExistsError(
            errno.EEXIST,
            f"{target} exists, so nothing was written: name another file or pass "
            "overwrite=True (command line: --overwrite)",
            str(target),
        )
    return target


def write_output(
    final: str | os.PathLike[str], data: bytes, *, overwrite: bool = False, create: bool = False
) -> Path:
    """Write ``data`` as ``final`` atomically (a hidden temporary file beside it, then moved
    into place); refuses an existing file without ``overwrite`` and a missing folder without
    ``create`` (which makes the missing folders)."""
    target = check_output(final, overwrite=overwrite, create=create)
    if create:
        target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with open(fd, "wb", closefd=True) as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        if overwrite:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)  # fails, never replaces, when the file appeared meanwhile
            os.unlink(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _umask() -> int:
    """This process's umask (read by setting it, then put back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
