"""`sgcs bench`: a tiny run of real member processes completes and reports.

Not a performance test (tests are never timed): it checks that the members
deliver exactly N x M messages, the JSON report's shape, and that bad input
stops with one line.
"""

from __future__ import annotations

import json

import pytest

from sgcs.apps.cli import main

REPORT_KEYS = {
    "members", "messages", "size", "order", "rate_offered", "max_datagram", "delivered", "rates", "rate_median",
    "rate_min", "rate_max", "latency_p50_ms", "latency_p99_ms", "wall_seconds", "totals", "per_member",
}
MEMBER_KEYS = {"index", "id", "delivered", "per_sender", "seconds", "rate", "latency_p50_ms", "latency_p99_ms",
               "statistics"}


def test_tiny_run_delivers_everything_and_reports_json(capsys: pytest.CaptureFixture[str]) -> None:
    members, messages = 3, 200
    code = main(["bench", "--members", str(members), "--messages", str(messages), "--size", "64",
                 "--json", "--no-progress", "--timeout", "60"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert REPORT_KEYS <= set(report)
    assert (report["members"], report["messages"], report["size"], report["order"]) == (members, messages, 64, "fifo")
    assert report["delivered"] == [members * messages] * members
    assert len(report["per_member"]) == members
    for member in report["per_member"]:
        assert MEMBER_KEYS <= set(member)
        assert member["per_sender"] == [messages] * members  # exactly M from each member, its own included
        assert member["rate"] > 0 and member["latency_p99_ms"] >= member["latency_p50_ms"] >= 0
        assert {"retransmissions", "peak_buffered", "datagrams_sent"} <= set(member["statistics"])
    assert len({m["id"] for m in report["per_member"]}) == members
    assert "msg/s received per member" in captured.err  # the summary line, off stdout with --json


def test_encrypted_run_delivers_everything(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--members", "2", "--messages", "100", "--size", "64", "--encrypt",
                 "--json", "--no-progress", "--timeout", "60"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["encrypt"] is True and report["delivered"] == [200, 200]
    assert all(m["statistics"]["dropped"] == 0 for m in report["per_member"]), "no policy or mac drops"
    assert ", encrypted:" in captured.err


def test_settings_reach_every_member(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--members", "2", "--messages", "100", "--size", "64", "--order", "total",
                 "--set", "ack_interval=0.002", "--json", "--no-progress", "--timeout", "60"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["settings"] == {"ack_interval": 0.002} and report["delivered"] == [200, 200]


def _exit_code(argv: list[str]) -> int:
    """main's return value, or argparse's exit code for bad arguments."""
    try:
        return main(argv)
    except SystemExit as exit:
        return int(exit.code or 0)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--size", "4"], "--size must be an integer in [8,"),
        (["--members", "0"], "--members must be an integer in [1,"),
        (["--rate", "-1"], "--rate must be a positive number"),
        (["--order", "random"], "invalid choice"),
        (["--set", "bogus=1"], "--set bogus: Config has no such field"),
        (["--set", "ack_interval"], "expected FIELD=VALUE"),
        (["--set", "ack_interval=-1"], "Config.ack_interval must be in"),
        (["--set", "port=5"], "the bench sets that field itself"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = _exit_code(["bench", "--no-progress", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err and len(err.strip().splitlines()) == 1


def test_members_run_where_their_hosts_say() -> None:
    """Each member runs under its host's command prefix, bound to its address
    (``benchmarks/bench_netns.py`` passes network namespaces; ``env`` stands in)."""
    from sgcs.apps.bench import BenchOptions, run_bench
    from sgcs.errors import UsageError

    with pytest.raises(UsageError, match="hosts: 1 given for 2 members"):
        BenchOptions(members=2, messages=10, size=64, hosts=(("127.0.0.1", ()),))
    hosts = tuple(("127.0.0.1", ("env", f"SGCS_BENCH_HOST={i}")) for i in range(2))
    report = run_bench(BenchOptions(members=2, messages=20, size=64, hosts=hosts), progress=False).to_json()
    assert report["hosts"] == ["127.0.0.1", "127.0.0.1"] and report["delivered"] == [40, 40]
