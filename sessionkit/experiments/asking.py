"""One experiment call over HTTP: sent, retried with backoff while the endpoint refuses it
(429, a 5xx status, no connection), never after it may have answered (a timeout, an answer
that cannot be read), so no call is paid twice."""

from __future__ import annotations

import json
import time
from email.utils import parsedate_to_datetime

import httpx

from sessionkit.experiments.answers import Answer, Failure, reader
from sessionkit.tuning import TUNING

__all__ = ["ask"]

_SHOWN_CHARS = 200
"""Characters of an error response kept in the ``error`` column."""


def _retry_after(response: httpx.Response) -> float | None:
    """The seconds ``Retry-After`` asks for (a number or an HTTP date), else None."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), TUNING.experiment_retry_after_max_s)


def _shown(text: str, key: str | None) -> str:
    """An endpoint's text as an error shows it: cut short, any echo of the key masked."""
    text = text[:_SHOWN_CHARS]
    return text.replace(key, "[key]") if key else text


def ask(
    client: httpx.Client, url: str, headers: dict[str, str], payload: bytes, wire: str = "openai"
) -> Answer | Failure:
    """POST ``payload`` to ``url`` and read the answer in its ``wire`` form (see the module
    docstring)."""
    key = headers.get("x-api-key") or headers.get("Authorization", "").removeprefix("Bearer ")
    attempts = TUNING.experiment_retries + 1
    attempt = 0
    while True:
        attempt += 1
        started = time.perf_counter()
        try:
            response = client.post(
                url, content=payload, headers=headers, timeout=TUNING.experiment_timeout_s
            )
        except httpx.TimeoutException:
            return Failure(f"no answer within {TUNING.experiment_timeout_s:g} s", billed=True)
        except httpx.ConnectError as exc:
            if attempt < attempts:
                time.sleep(TUNING.experiment_backoff_s * 2 ** (attempt - 1))
                continue
            problem = f"no connection to the endpoint ({type(exc).__name__})"
            return Failure(f"{problem} after {attempts} attempts", billed=False)
        except httpx.HTTPError as exc:
            return Failure(f"the request failed ({type(exc).__name__})", billed=True)
        latency = time.perf_counter() - started
        status = response.status_code
        if (status == 429 or status >= 500) and attempt < attempts:
            wait = _retry_after(response)
            time.sleep(TUNING.experiment_backoff_s * 2 ** (attempt - 1) if wait is None else wait)
            continue
        if status >= 400:
            tried = f" after {attempt} attempts" if attempt > 1 else ""
            return Failure(f"HTTP {status}{tried}: {_shown(response.text, key)}", billed=False)
        try:
            data = json.loads(response.content)
        except ValueError:
            return Failure(f"the answer is not JSON: {_shown(response.text, key)!r}", billed=True)
        return reader(wire)(data, latency)
