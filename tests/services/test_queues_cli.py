"""``sgcs queue``: put/get/ls/bind/unbind/purge on a store file, the one-line
errors, and put/get to QUEUE@NODE through a queue manager in another process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sgcs.apps.cli import main

from _net import private_multicast

ROOT = Path(__file__).resolve().parents[2]


def queue(store: Path, *argv: str) -> int:
    return main(["queue", "--store", str(store), *argv])


def test_put_get_ls_and_the_unbind_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "q.db"
    assert queue(store, "put", "jobs", "low", "--bind") == 0
    assert queue(store, "put", "jobs", "--count", "300", "--size", "50", "--priority", "5") == 0
    assert queue(store, "put", "jobs", "urgent", "--priority", "9") == 0
    capsys.readouterr()
    assert queue(store, "ls", "--json") == 0
    (info,) = json.loads(capsys.readouterr().out)["queues"]
    assert info["depth"][9] == 1 and info["depth"][5] == 300 and info["depth"][0] == 1
    assert info["bytes"] == len("low") + 300 * 50 + len("urgent")
    assert queue(store, "get", "jobs", "--count", "2") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("9\t") and lines[0].endswith("\turgent") and lines[1].startswith("5\t")
    assert queue(store, "get", "jobs", "--count", "5", "--no-ack", "--quiet") == 0
    assert queue(store, "unbind", "jobs", "--rule", "lowest") == 0
    assert "draining: 300 messages left" in capsys.readouterr().out
    assert queue(store, "get", "jobs", "--count", "1000", "--quiet") == 0
    assert queue(store, "ls") == 0
    assert "jobs" not in capsys.readouterr().out  # drained, so unbound
    assert queue(store, "put", "other", "a", "b", "--bind") == 0
    assert queue(store, "unbind", "other", "--rule", "highest") == 0
    assert "2 dead messages left for purge" in capsys.readouterr().out
    assert queue(store, "purge") == 0
    assert "purged 2" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["put", "jobs", "x"], "no queue store at"),
    (["put", "jobs", "x", "--priority", "10"], "--priority must be 0 to 9"),
    (["get", "nope"], "no queue store at"),
    (["put", "jobs@b", "x"], "needs the group's secret"),
    (["get", "jobs@b"], "needs the group's secret"),
    (["purge"], "no queue store at"),
    (["put", "a@", "x"], "names no node after '@'"),
    (["unbind", "jobs"], "no queue store at"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str) -> None:
    monkeypatch.delenv("SGCS_SECRET", raising=False)
    assert queue(tmp_path / "q.db", *argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "q.db").exists(), "a command that failed left a store behind"


def test_a_queue_not_bound_in_an_existing_store_is_one_line(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "q.db"
    assert queue(store, "bind", "other") == 0
    for argv, message in ((["put", "jobs", "x"], "queue 'jobs' is not bound"), (["unbind", "jobs"], "not bound here"),
                          (["get", "jobs"], "not bound here")):
        capsys.readouterr()
        assert queue(store, *argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)


def test_a_remote_put_that_fails_commits_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Seven failed tries used to leave seven messages in the transmission queue."""
    monkeypatch.delenv("SGCS_SECRET", raising=False)
    store = tmp_path / "q.db"
    assert queue(store, "bind", "local") == 0
    for _ in range(3):
        assert queue(store, "put", "jobs@b", "x") == 2
    capsys.readouterr()
    assert queue(store, "ls", "--json") == 0
    assert json.loads(capsys.readouterr().out)["forwarding"] == {}


def test_options_may_follow_the_action(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "q.db"
    assert main(["queue", "bind", "jobs", "--store", str(store)]) == 0
    assert main(["queue", "ls", "--store", str(store), "--fsync", "off"]) == 0
    assert "jobs" in capsys.readouterr().out
    assert main(["queue", "--store", str(tmp_path / "other.db"), "ls", "--store", str(store)]) == 0


def test_a_get_from_a_node_nobody_heard_fails_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    network = private_multicast()
    monkeypatch.setenv("SGCS_SECRET", "cli test secret!")
    toml = tmp_path / "node.toml"
    toml.write_text(f'name = "cli"\nsecret = "cli test secret!"\nmulticast_group = "{network["multicast_group"]}"\n'
                    f'multicast_port = {network["multicast_port"]}\nbeacon_interval = 0.1\n')
    assert queue(tmp_path / "q.db", "get", "jobs@nobody", "--config", str(toml), "--timeout", "1") == 1
    err = capsys.readouterr().err
    assert "no queue manager named 'nobody'" in err and err.count("\n") == 1


MANAGER = textwrap.dedent("""
    import sys, trio, sgcs
    from sgcs.services.queues.manager import open_queue_manager
    async def main():
        config = sgcs.Config(name="m", secret=b"cli test secret!", multicast_group=sys.argv[1],
                             multicast_port=int(sys.argv[2]), beacon_interval=0.1)
        async with sgcs.open_node(config) as node, open_queue_manager(node, "m", path=sys.argv[3]) as m:
            m.bind("jobs")
            print("ready", flush=True)
            await trio.sleep_forever()
    trio.run(main)
""")


def test_put_and_get_through_a_remote_manager(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    network = private_multicast()
    group, port = network["multicast_group"], network["multicast_port"]
    toml = tmp_path / "node.toml"
    toml.write_text(f'name = "cli"\nsecret = "cli test secret!"\nmulticast_group = "{group}"\n'
                    f"multicast_port = {port}\nbeacon_interval = 0.1\n")
    manager = subprocess.Popen([sys.executable, "-c", MANAGER, group, str(port), str(tmp_path / "m.db")],
                               stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert manager.stdout is not None and manager.stdout.readline().strip() == "ready"
        store = tmp_path / "cli.db"
        assert queue(store, "put", "jobs@m", "--count", "200", "--priority", "3", "--config", str(toml),
                     "--timeout", "20") == 0
        assert "committed there" in capsys.readouterr().out
        assert queue(store, "put", "jobs@m", "hi", "--priority", "8", "--config", str(toml)) == 0
        capsys.readouterr()
        assert queue(store, "get", "jobs@m", "--count", "201", "--config", str(toml), "--timeout", "20") == 0
        out = capsys.readouterr()
        lines = out.out.splitlines()
        assert len(lines) == 201 and lines[0].endswith("\thi") and "got 201" in out.err
    finally:
        manager.kill()
        manager.wait(timeout=10)
