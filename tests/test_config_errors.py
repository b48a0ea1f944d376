"""Bad local input: every invalid Config value is refused
with the field's name and its allowed range, and the command line turns bad
files, paths and values into one line on stderr with exit code 2."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from sgcs.apps.cli import EXIT_USAGE, main
from sgcs.config import _RANGES, Config, Order
from sgcs.errors import UsageError
from sgcs.node import Node

SECRET = b"config-errors-secret"


def _outside(low: float | None, high: float | None, kind: object) -> list[object]:
    integral = kind is int
    values: list[object] = []
    if low is not None:
        values.append(int(low) - 1 if integral else low - abs(low) * 0.5 - 0.001)
    if high is not None:
        values.append(int(high) + 1 if integral else high * 2 + 1)
    return values


CASES = [(name, value, low, high) for name, kind, low, high in _RANGES for value in _outside(low, high, kind)]


@pytest.mark.parametrize("name, value, low, high", CASES, ids=[f"{c[0]}={c[1]}" for c in CASES])
def test_a_value_out_of_range_names_the_field_and_its_range(name: str, value: object, low: object,
                                                            high: object) -> None:
    with pytest.raises(UsageError) as error:
        Config(secret=SECRET, **{name: value})  # type: ignore[arg-type]
    message = str(error.value)
    assert f"Config.{name}" in message and f"[{low}, {high}]" in message and "\n" not in message


@pytest.mark.parametrize("name", [name for name, *_ in _RANGES])
def test_a_value_of_the_wrong_type_names_the_field_and_its_range(name: str) -> None:
    for bad in ("12", True, None):
        with pytest.raises(UsageError, match=rf"Config\.{name} must be a number in \["):
            Config(secret=SECRET, **{name: bad})  # type: ignore[arg-type]


@pytest.mark.parametrize("fields, expected", [
    ({"secret": b"short"}, "Config.secret must be at least 16 bytes"),
    ({"secret": b"fifteen-bytes!!"}, "Config.secret must be at least 16 bytes"),
    ({"secret": b"1234567", "key_derivation": "hmac-v1"}, "Config.secret must be at least 8 bytes"),
    ({"key_derivation": "md5"}, "Config.key_derivation must be one of hkdf, hmac-v1"),
    ({"node_id": -1}, r"Config.node_id must be an int in \[0, 2\*\*63\)"),
    ({"name": ""}, "Config.name must be a non-empty string"),
    ({"optimistic": "yes"}, "Config.optimistic must be true or false"),
    ({"multicast_group": "10.0.0.1"}, r"Config.multicast_group must be in 224.0.0.0/4"),
    ({"bind_host": "not-an-address"}, "Config address is not an IPv4 address"),
    ({"peers": ("nohost",)}, "Config.peers entries must be 'host:port'"),
])
def test_other_fields_say_what_is_wrong(fields: dict[str, object], expected: str) -> None:
    fields = {"secret": SECRET, **fields}
    with pytest.raises(UsageError, match=expected):
        Config(**fields)  # type: ignore[arg-type]


def test_config_files_unknown_fields_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown config field 'windw_max'; known: "):
        Config.from_mapping({"secret": "config-errors-secret", "windw_max": 5})
    with pytest.raises(UsageError, match="cannot read config"):
        Config.from_toml(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("secret = [")
    with pytest.raises(UsageError, match="cannot read config"):
        Config.from_toml(bad)


def test_api_misuse_is_one_usage_error() -> None:
    node = Node(1, Config(secret=SECRET), random.Random(0))
    with pytest.raises(UsageError, match="order 'bogus' is not one of"):
        Order.parse("bogus")
    with pytest.raises(UsageError, match="group name must be"):
        node.join("", 0.0)
    with pytest.raises(UsageError, match="not a member of group"):
        node.multicast("g", b"x", 0.0)
    node.join("g", 0.0, members=[1])
    with pytest.raises(UsageError, match="payload must be bytes"):
        node.multicast("g", "text", 0.0)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="node id must be in"):
        Node(-1, Config(secret=SECRET), random.Random(0))


@pytest.mark.parametrize("argv, expected", [
    (["simulate", "SCENARIO", "--out", "/dev/null/run"], "cannot create the directory"),
    (["simulate", "SCENARIO", "--out", "RUN", "--nodes", "0"], "nodes: 0 is not in 1.."),
    (["simulate", "PROTOCOL", "--out", "RUN"], "Config.window_max must be in [16, 1000000], got 3"),
    (["simulate", "MISSING", "--out", "RUN"], "cannot read scenario"),
    (["simulate", "--bogus", "--out", "RUN"], "unrecognized arguments: --bogus"),
    (["bench", "--members", "0"], "--members must be an integer in [1, 64]"),
    (["sweep", "MISSING", "--out", "RUN"], "cannot read sweep file"),
    (["analyze", "MISSING"], "no such directory"),
    (["chat", "g", "--port", "99999"], "Config.port must be in [0, 65535]"),
    (["demo", "--members", "1"], "--members must be an integer in [2, 16]"),
])
def test_bad_command_line_input_is_one_line_and_exit_2(argv: list[str], expected: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "ok.toml"
    scenario.write_text("seed = 1\nnodes = 3\nduration = 0.5\n")
    protocol = tmp_path / "protocol.toml"
    protocol.write_text("seed = 1\nnodes = 3\nduration = 0.5\n[protocol]\nwindow_max = 3\n")
    names = {"SCENARIO": str(scenario), "PROTOCOL": str(protocol), "MISSING": str(tmp_path / "missing.toml"),
             "RUN": str(tmp_path / "run")}
    try:
        code = main([names.get(arg, arg) for arg in argv])
    except SystemExit as exit_info:  # argparse's own errors
        code = exit_info.code  # type: ignore[assignment]
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_USAGE
    assert err and expected in err[-1] or pytest.fail(f"{err}")
    assert len([line for line in err if "error" in line]) == 1 and "Traceback" not in "\n".join(err)
