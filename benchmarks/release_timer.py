"""Run by a nanobot release's own Python: time its ``Session.get_history`` once per user turn.

Reads ``{"sessions": [{"key", "messages", "offsets": {at: last_consolidated}}], "calls":
[{"label", "kwargs"}]}`` as JSON on stdin; writes ``{"nanobot": version, "results": {label:
{"seconds", "sizes"}}}`` (``sizes``: entries returned per turn, in session and turn order).
Only the standard library and the release are imported, so the project venv stays out of it.
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version

from nanobot.session.manager import Session


def main() -> None:
    request = json.load(sys.stdin)
    results = {}
    for call in request["calls"]:
        seconds, sizes = 0.0, []
        for stored in request["sessions"]:
            session = Session(key=stored["key"], messages=[])
            for at, offset in stored["offsets"]:
                session.messages = stored["messages"][:at]
                session.last_consolidated = offset
                start = time.perf_counter()
                history = session.get_history(**call["kwargs"])
                seconds += time.perf_counter() - start
                sizes.append(len(history))
        results[call["label"]] = {"seconds": seconds, "sizes": sizes}
    json.dump({"nanobot": version("nanobot-ai"), "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
