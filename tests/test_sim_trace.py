"""The trace of a small seeded run: schema 1, readable by pyarrow and pandas, replayable."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sgcs.sim.run import RunSummary, simulate
from sgcs.sim.scenario import load_scenario

from _scenario import group, write_scenario

SMALL = {
    "nodes": 20, "duration": 5.0,
    "network": {"latency_ms": {"median": 1.0, "sigma": 0.5}, "loss": 0.05, "duplicate": 0.01},
    "groups": [group(order="fifo", rate=30.0, size=100)],
    "faults": [{"at": 2.0, "crash": [4]}, {"at": 3.0, "recover": [4]}],
}

EVENT_TYPES = [
    ("t", pa.float64()), ("node", pa.int64()), ("kind", pa.string()), ("group", pa.string()),
    ("sender", pa.int64()), ("seq", pa.int64()), ("order", pa.string()), ("view_id", pa.string()),
    ("members", pa.list_(pa.int64())), ("optimistic", pa.bool_()), ("target", pa.int64()),
    ("size", pa.int32()), ("dest", pa.int64()), ("reason", pa.string()),
]
NET_TYPES = [
    ("t", pa.float64()), ("node", pa.int64()), ("msg_type", pa.string()), ("sent_count", pa.int64()),
    ("sent_bytes", pa.int64()), ("recv_count", pa.int64()), ("recv_bytes", pa.int64()), ("lost_count", pa.int64()),
]


def run_small(tmp_path: Path, seed: int, name: str = "run") -> tuple[Path, RunSummary, str]:
    """Run SMALL with ``seed``; returns (run dir, summary, replay command)."""
    scenario = load_scenario(write_scenario(tmp_path / f"small-{seed}.toml", seed=seed, **SMALL))
    out = tmp_path / name
    return out, simulate(scenario, out, progress=False), scenario.replay_command(str(out))


def events_digest(run: Path) -> str:
    table = pq.read_table(run / "events").combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def test_events_have_exactly_schema_1_columns(tmp_path: Path) -> None:
    run, summary, replay = run_small(tmp_path, seed=5)
    table = pq.read_table(run / "events")
    assert [(f.name, f.type) for f in table.schema] == EVENT_TYPES, replay
    frame = table.to_pandas()
    assert list(frame.columns) == [name for name, _ in EVENT_TYPES], replay
    assert len(frame) == summary.rows > 0, replay
    assert {"join", "view", "send", "deliver", "crash", "recover", "suspect"} <= set(frame["kind"]) <= {
        "join", "view", "send", "deliver", "crash", "recover", "suspect", "unsuspect", "rollback", "drop"}, replay
    assert frame["t"].is_monotonic_increasing, f"rows must be in event order; replay: {replay}"
    views = frame[frame["kind"] == "view"]
    assert all(list(m) == sorted(m) for m in views["members"]), replay
    sends = frame[frame["kind"] == "send"]
    assert (sends["sender"] == sends["node"]).all() and (sends["size"] == 100).all(), replay
    assert frame["dest"].isna().all(), replay
    assert set(frame["reason"].dropna()) <= {"busy", "replay"}, \
        "only a busy verdict and the network's duplicates (refused as replays) give a reason here; " + replay
    assert 4 in set(frame.loc[frame["kind"] == "suspect", "target"]), replay
    installed = frame[(frame["kind"] == "view") & ~frame["optimistic"].fillna(False).astype(bool)
                      & (frame["node"] != 4)]  # node 4 recovers as a singleton and merges back
    assert all(set(range(20)) - {4} <= set(m) for m in installed["members"]), \
        "live members may be suspected (5% loss) but never excluded; " + replay


def test_net_table_and_meta(tmp_path: Path) -> None:
    run, summary, replay = run_small(tmp_path, seed=5)
    net = pq.read_table(run / "net")
    assert [(f.name, f.type) for f in net.schema] == NET_TYPES, replay
    frame = net.to_pandas()
    assert "data" in set(frame["msg_type"]) <= {
        "data", "retransmit", "gossip", "nack", "digest", "null", "stable", "hello", "heartbeat", "probe",
        "probe_ack", "ask", "ask_reply", "beacon", "propose", "flush", "commit", "installed"}, replay
    assert "heartbeat" in set(frame["msg_type"]), replay
    assert set(frame["t"]) <= {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}, replay
    assert frame["sent_count"].sum() == summary.datagrams, replay
    data = frame[frame["msg_type"] == "data"]
    assert 0 < data["sent_count"].sum() <= summary.sends, "batching may pack several messages per datagram"
    assert frame["lost_count"].sum() == summary.lost > 0, replay
    assert not frame.duplicated(subset=["t", "node", "msg_type"]).any(), replay
    meta: dict[str, Any] = json.loads((run / "meta.json").read_text())
    assert meta["schema"] == 1 and meta["seed"] == 5 and meta["nodes"] == 20 and meta["duration"] == 5.0
    assert meta["scenario"]["network"]["loss"] == 0.05 and meta["sgcs_version"]
    assert 0.9 < summary.reliability <= 1.0, replay


def test_same_seed_same_events_other_seed_differs(tmp_path: Path) -> None:
    first, _, replay = run_small(tmp_path, seed=5, name="a")
    again, _, _ = run_small(tmp_path, seed=5, name="b")
    other, _, _ = run_small(tmp_path, seed=6, name="c")
    assert events_digest(first) == events_digest(again), f"same seed, different trace; replay: {replay}"
    assert events_digest(first) != events_digest(other), replay


def test_rerun_into_the_same_directory_replaces_the_trace(tmp_path: Path) -> None:
    run, _, _ = run_small(tmp_path, seed=5)
    digest = events_digest(run)
    run_small(tmp_path, seed=5)
    assert events_digest(run) == digest
    assert len(list((run / "events").iterdir())) == 1


def test_out_directory_that_is_not_a_trace_is_refused(tmp_path: Path) -> None:
    from sgcs import UsageError

    (tmp_path / "keep.txt").write_text("precious")
    with pytest.raises(UsageError, match="holds no sgcs trace"):
        simulate(load_scenario(None, nodes=10, duration=0.5), tmp_path, progress=False)


def test_small_row_groups_keep_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many row groups and part files read back as the same table."""
    from sgcs import trace

    run, _, _ = run_small(tmp_path, seed=5, name="big-groups")
    monkeypatch.setattr(trace, "ROW_BUDGET", 97)
    monkeypatch.setattr(trace, "ROW_GROUPS_PER_PART", 3)
    chunked, _, replay = run_small(tmp_path, seed=5, name="small-groups")
    assert len(list((chunked / "events").iterdir())) > 3, replay
    assert pq.read_table(chunked / "events").equals(pq.read_table(run / "events")), replay
