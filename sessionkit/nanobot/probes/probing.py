"""What the 0.3.x probes share: the sentinel, the error, the process overrides, the
no-trace guard, the prompt-part capture and the stdin/stdout protocol.

Imported by a probe from its own folder, inside the release's interpreter: the standard
library only, never sessionkit, never anything of the release at import time.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SENTINEL = "\u0000SK:{}\u0000"


class ProbeError(RuntimeError):
    """The release did not render or check out as the probe expects."""


@contextlib.contextmanager
def no_new_folders() -> Iterator[None]:
    """Remove again, when empty, every folder created while the release was being built."""
    created: list[str] = []
    original = os.mkdir

    def recording_mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        original(path, mode, dir_fd=dir_fd)
        if dir_fd is None:
            created.append(os.path.abspath(os.fspath(path)))

    os.mkdir = recording_mkdir
    try:
        yield
    finally:
        os.mkdir = original
        for folder in sorted(created, key=len, reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def apply_runtime(runtime: dict[str, Any]) -> None:
    """Make this process report the overridden facts the release writes into its prompt."""
    for name in ("system", "machine", "python_version"):
        if name in runtime:
            value = str(runtime[name])
            setattr(platform, name, lambda value=value: value)
    if "path" in runtime:
        os.environ["PATH"] = str(runtime["path"])
    for name, value in (runtime.get("env") or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)


def captured_parts(build: Callable[[], str], code: Any) -> tuple[str, list[str]]:
    """What ``build`` returned and the ``parts`` list ``code`` held when it returned."""
    seen: list[list[str]] = []

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event == "return" and frame.f_code is code:
            seen.append(list(frame.f_locals["parts"]))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        text = build()
    finally:
        sys.setprofile(previous)
    if len(seen) != 1:
        raise ProbeError(f"expected one parts list from {code.co_name}, saw {len(seen)}")
    return text, seen[0]


def bootstrap_files(context: Any, root: Path, text: str) -> list[dict[str, str]]:
    """The bootstrap section's files in order, each as the release's context builder rendered
    it, checked to join back to the section."""
    method = context._load_bootstrap_files
    _, files = captured_parts(lambda: method(root), method.__code__)
    names = list(context.BOOTSTRAP_FILES)
    out = []
    for rendered in files:
        while names and not rendered.startswith(f"## {names[0]}\n\n"):
            names.pop(0)
        if not names:
            raise ProbeError("a bootstrap file's section names no bootstrap file")
        out.append({"part": f"bootstrap:{names.pop(0)}", "text": rendered})
    if "\n\n".join(f["text"] for f in out) != text:
        raise ProbeError("the bootstrap files do not join to the bootstrap section")
    return out


def serve(
    name: str, release: str, answer: Callable[[dict[str, Any], Path], dict[str, Any]]
) -> None:
    """Answer one JSON request from stdin with ``answer(request, scratch)`` as JSON on stdout.

    Whatever the release prints goes to stderr (it must not corrupt the reply); the scratch
    folder is removed afterwards; a :class:`ProbeError`, or a release other than ``release``
    (the answer's ``nanobot``), exits 2 with the probe's name and message on stderr.
    """
    request = json.loads(sys.stdin.read() or "{}")
    stdout = sys.stdout
    sys.stdout = sys.stderr
    scratch = Path(tempfile.mkdtemp(prefix="sk-probe-"))
    try:
        reply = answer(request, scratch)
    except ProbeError as exc:
        sys.stderr.write(f"{name}: {exc}\n")
        raise SystemExit(2) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        sys.stdout = stdout
    if reply["nanobot"] != release:
        sys.stderr.write(f"{name}: this is nanobot {reply['nanobot']}, not {release}\n")
        raise SystemExit(2)
    sys.stdout.write(json.dumps(reply))
