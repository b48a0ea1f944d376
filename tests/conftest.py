"""Test-wide set-up: one printed seed for every randomized (hypothesis) test.

The property machines explore fresh random examples in every run; a failure
must still replay. Unless ``--hypothesis-seed`` is given, one is drawn here
and printed in the session header with the command that replays it."""

from __future__ import annotations

import random

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "hypothesis_seed", None) is None:
        config.option.hypothesis_seed = random.SystemRandom().getrandbits(32)


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.option.hypothesis_seed
    return f"hypothesis seed {seed}: replay a failure with `pytest --hypothesis-seed={seed} <test id>`"
