"""Calibration: per model, a line from sessionkit's estimate to the reported prompt tokens,
with the errors of the raw and the calibrated estimate on held-back calls."""

from __future__ import annotations

import bpe_openai
import numpy as np
import pandas as pd
import pytest

import sessionkit as sk
from sessionkit.accounting.calibration import calibrate
from sessionkit.accounting.ledger import KINDS
from sessionkit.nanobot.tokens import estimate_message_tokens, message_payload
from sessionkit.schema import CALIBRATION, USAGE, frame


def _usage(model: list[str], estimated: list[int], reported: list[int]) -> pd.DataFrame:
    n = len(model)
    values = {c.name: [None] * n for c in USAGE} | {
        "time": pd.date_range("2026-01-01", periods=n, freq="min", tz="UTC"),
        "kind": pd.Categorical(["agent"] * n, categories=KINDS),
        "model": model,
        "prompt_tokens": reported,
        "estimated_prompt_tokens": estimated,
        "reported": [True] * n,
        "calls": [1] * n,
    }
    return frame(USAGE, values)


def test_a_linear_undercount_is_fitted_and_the_errors_reported() -> None:
    estimated = list(range(100, 1100, 100))
    usage = _usage(
        ["m"] * 10 + ["n"] * 3,
        [*estimated, 10, 20, 30],
        [e * 3 // 2 for e in estimated] + [11, 22, 33],
    )
    calibration = calibrate(usage)
    report = calibration.report
    assert list(report.columns) == [c.name for c in CALIBRATION]
    m = report.set_index("model").loc["m"]
    assert (m["calls"], m["held_back"]) == (8, 2)
    assert m["slope"] == pytest.approx(1.5, abs=1e-12)
    assert m["intercept"] == pytest.approx(0.0, abs=1e-9)
    assert (m["raw_median"], m["raw_p90"]) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert m["calibrated_median"] == pytest.approx(0.0, abs=1e-12)
    assert calibration.predict(np.array([200, 400]), "m") == pytest.approx([300.0, 600.0])
    n = report.set_index("model").loc["n"]
    assert (n["calls"], n["held_back"], n["slope"]) == (3, 0, pytest.approx(1.1))
    assert np.isnan(n["raw_median"])
    with pytest.raises(KeyError, match="no calibration for model 'x'"):
        calibration.predict(10, "x")


def test_rows_that_say_nothing_about_the_estimate_are_left_out() -> None:
    usage = _usage(["m"] * 4, [100, 200, 300, 400], [150, 300, 450, 600])
    usage.loc[0, "kind"] = "summary"
    usage.loc[1, "reported"] = False
    usage.loc[2, "estimated_prompt_tokens"] = pd.NA
    calibration = calibrate(usage)
    assert calibration.report[["model", "calls", "held_back"]].values.tolist() == [["m", 1, 0]]
    assert calibration.predict(800, "m") == 1200.0


def test_another_tokenizer_and_framing_are_calibrated_within_3_percent(data_dir) -> None:
    """Requests of the sample store (its first 3,000 messages) counted as a provider with
    o200k and its own framing (12 tokens per message, 1,500 for the tool definitions) would
    report them, against nanobot's cl100k estimate: raw error far above 3%, calibrated
    median under 3% on held-back calls."""
    o200k = bpe_openai.get_encoding("o200k_base")
    estimated, reported = [], []
    budget = 3000
    for session in sk.load(data_dir / "sessions", tokens=None):
        history_e = history_r = 0
        for message in session.messages[: max(budget, 0)]:
            budget -= 1
            history_e += estimate_message_tokens(message)
            history_r += len(o200k.encode(message_payload(message))) + 12
            if message.get("role") == "user":
                estimated.append(history_e)
                reported.append(history_r + 1500)
    usage = _usage(["m"] * len(estimated), estimated, reported)
    fit = calibrate(usage).report.iloc[0]
    assert fit["calls"] + fit["held_back"] == len(estimated) > 100
    assert fit["raw_median"] > 0.1
    assert fit["calibrated_median"] < 0.03


def test_the_stored_answers_are_fitted_to_the_reported_completions() -> None:
    answers = list(range(20, 220, 20))
    usage = _usage(["m"] * 10, [100] * 10, [150] * 10)
    usage["estimated_completion_tokens"] = pd.array(answers, dtype="Int64")
    usage["completion_tokens"] = pd.array([a // 2 + 3 for a in answers], dtype="Int64")
    calibration = calibrate(usage)
    m = calibration.report.set_index("model").loc["m"]
    assert (m["output_slope"], m["output_intercept"]) == (pytest.approx(0.5), pytest.approx(3.0))
    assert calibration.predict_output(np.array([40, 100]), "m") == pytest.approx([23.0, 53.0])
    assert calibration.predict_output(np.array([40]), "x").tolist() == [40.0]  # no line: as is
    without = calibrate(_usage(["m"] * 3, [100, 200, 300], [150, 300, 450])).report
    assert np.isnan(without["output_slope"]).all()
