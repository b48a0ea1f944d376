"""Mailbox scenarios through the real `sgcs simulate` path (issue 20, build point 4):
post offices as simulated sgcs nodes, loss, duplication, partitions and crashes from
the simulator; exactly once, in order, and the per-operation counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sgcs.apps.cli import main
from sgcs.services.mailboxes.messages import Mail
from sgcs.sim.mailboxes import MailboxSimulator
from sgcs.sim.mailreport import Ledger, summarise
from sgcs.sim.scenario import SCENARIOS_DIR

SHIPPED = SCENARIOS_DIR / "mailboxes.toml"


def simulate(tmp_path: Path, scenario: Path | str, *extra: str, name: str = "run") -> tuple[dict[str, Any], Path]:
    out = tmp_path / name
    code = main(["simulate", str(scenario), "--out", str(out), "--no-progress", *extra])
    assert code == 0, f"replay: sgcs simulate {scenario} --out RUN {' '.join(extra)}"
    return json.loads((out / "summary.json").read_text())["mailboxes"], out


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    return simulate(tmp_path_factory.mktemp("mailsim"), SHIPPED)


def test_every_mail_once_in_order_through_moves_loss_and_crashes(shipped: tuple[dict[str, Any], Path]) -> None:
    summary, _ = shipped
    mails = summary["mails"]
    assert mails["sent"] == 2000
    assert (mails["delivered"], mails["lost"], mails["held_undelivered"]) == (2000, 0, 0), mails
    assert (mails["duplicated"], mails["out_of_order"]) == (0, 0), mails
    assert summary["moves"] >= 20 and mails["forwarded"] > 0
    inter = summary["inter_domain"]
    assert inter["payloads_duplicated_below_mail"] > 0 and inter["payloads_delayed_below_mail"] > 0
    assert summary["post_office_crashes"] >= 2 and summary["post_office_restarts"] == summary["post_office_crashes"]


def test_the_crashes_are_node_crashes_in_the_trace(shipped: tuple[dict[str, Any], Path]) -> None:
    summary, out = shipped
    events = pq.read_table(out / "events", columns=["t", "node", "kind", "group"]).to_pandas()
    crashes = events[events["kind"] == "crash"]
    recovers = events[events["kind"] == "recover"]
    assert len(crashes) == summary["post_office_crashes"] and len(recovers) == len(crashes)
    assert set(crashes["node"]) <= {0, 1, 2, 3}
    # the post offices' envelopes travelled as sgcs unicasts inside their group
    sends = events[(events["kind"] == "send") & (events["group"] == "mailboxes:wf")]
    assert len(sends) >= summary["inter_domain"]["by_kind"]["forward"]["messages"]
    assert summary["sgcs_packets"]["datagrams"] > len(sends)


def test_the_sgcs_trace_below_the_mail_keeps_every_invariant(shipped: tuple[dict[str, Any], Path]) -> None:
    """Restarted post offices start new unicast streams (their ids never
    repeat), and a survivor starts a new stream to them: before that, each
    restart showed as duplicates and FIFO breaks of the unicasts below."""
    from sgcs.sim.checks import read_events, violations

    _, out = shipped
    found = violations(read_events(out))
    assert not any(found.values()), found


def test_counts_are_sane(shipped: tuple[dict[str, Any], Path]) -> None:
    summary, out = shipped
    mails, inter, model = summary["mails"], summary["inter_domain"], summary["cost_model"]
    paths = mails["paths"]
    assert sum(paths.values()) == mails["sent"] and min(paths.values()) > 0
    # every mail whose receiver was not local crossed domains in a MAIL at least once
    assert inter["mail_transmissions_per_mail"] * mails["sent"] >= paths["known"] + paths["unknown"]
    # unknown receivers were asked of their home (one QUERY serves every mail waiting for a name;
    # a payload duplicated below the mail layer draws a second ANSWER)
    assert inter["by_kind"]["query"]["messages"] > 0 and inter["by_kind"]["answer"]["messages"] > 0
    # a move: MIGRATE, DEREG, FORWARD and its ack at the least
    assert inter["messages_per_move"] >= 4.0
    assert inter["by_kind"]["dereg"]["messages"] >= summary["moves"]
    # the migration handshake: exactly one DEREG per move, an UPDATE per friend domain, and
    # a HOME_UPDATE unless the MI went home: (D_fri + 2) C_ctl less the moves home
    mig = model["migration_control_per_move"]
    assert mig["dereg"] == 1.0
    assert mig["measured"] == pytest.approx(mig["model"] - mig["moves_to_home"] / summary["moves"])
    assert 0.0 < model["rho1"] < 1.0 and model["traffic_per_mail"]["measured"] > 0
    # q is over the mails whose receiver was outside the sender's domain (equations (1) and (2))
    assert 0.0 <= model["q"] <= 1.0 and model["forwarded_local"] <= paths["local"]
    rows = pq.read_table(out / "mail").to_pandas()
    assert len(rows) == mails["sent"] and (rows["deliveries"] == 1).all()
    assert (rows["t_delivered"] >= rows["t_sent"]).all()


def test_same_seed_same_figures(tmp_path: Path, shipped: tuple[dict[str, Any], Path]) -> None:
    again, _ = simulate(tmp_path, SHIPPED)
    assert again == shipped[0]


PARTITIONED = """
seed = 5
nodes = 3
duration = 12.0
[network]
loss = 0.05
[mailboxes]
domains = 3
mis_per_domain = 3
mails = 600
mail_rate = 200.0
[mailboxes.settings]
retry_initial = 0.2
retry_max = 0.5
[[faults]]
at = 1.0
partition = [[0], [1, 2]]
[[faults]]
at = 2.5
heal = true
"""


def test_a_partitioned_post_office_delays_mail_but_loses_none(tmp_path: Path) -> None:
    scenario = tmp_path / "partition.toml"
    scenario.write_text(PARTITIONED)
    summary, out = simulate(tmp_path, scenario)
    mails = summary["mails"]
    assert (mails["sent"], mails["delivered"], mails["lost"], mails["duplicated"], mails["out_of_order"]) == \
        (600, 600, 0, 0, 0)
    rows = pq.read_table(out / "mail").to_pandas()
    crossing = rows[(rows["t_sent"] > 1.1) & (rows["t_sent"] < 2.0) & rows["sender"].str.startswith("wf|1|")
                    & rows["receiver"].str.startswith("wf|0|") & (rows["path"] != "local")]
    assert len(crossing) > 0 and (crossing["t_delivered"] >= 2.5).all()  # the partition held them back
    assert summary["inter_domain"]["unroutable_payloads"] + summary["sgcs_packets"]["datagrams"] > 0


def test_a_restart_without_its_durable_mail_loses_mail_and_the_check_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative control: the same run, but a restarted PO forgets its
    committed mails and pending exchanges (it keeps only its MIs, mailboxes
    and home records); the checker must see the loss."""
    real_fault = MailboxSimulator._fault

    def amnesic(self: MailboxSimulator, t: float, node: int, fault: Any, arg: Any) -> None:
        if fault.action == "recover":
            for d in fault.nodes:
                self.durable[d] = {k: v for k, v in self.durable[d].items() if k[0] in ("mi", "mbox", "home")}
        real_fault(self, t, node, fault, arg)
    monkeypatch.setattr(MailboxSimulator, "_fault", amnesic)
    summary, _ = simulate(tmp_path, SHIPPED)
    assert summary["mails"]["lost"] > 0 and summary["mails"]["delivered"] < summary["mails"]["sent"]


def test_the_checker_sees_loss_duplicates_and_disorder() -> None:
    ledger = Ledger()
    a, b = "wf|0|h|a", "wf|1|h|b"
    for seq in range(4):
        ledger.sent((b, a, seq), 0.0, "known", False)
    mail = [Mail(a, b, seq, "", b"", 0, 0.0) for seq in range(4)]
    ledger.pulled([mail[0], mail[2]], 1.0)  # 1 skipped: out of order
    ledger.pulled([mail[2]], 2.0)  # twice
    summary = summarise(ledger, held={(b, a, 3)})
    got = summary["mails"]
    assert (got["delivered"], got["duplicated"], got["out_of_order"]) == (2, 1, 1)
    assert (got["lost"], got["held_undelivered"]) == (1, 1) and got["lost_examples"] == [[b, a, 1]]


BASE = """
seed = 1
nodes = 4
duration = 2.0
[mailboxes]
domains = 4
mails = 10
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BASE.replace("domains = 4", "domains = 6"), "mailboxes.domains: 6 post offices run on nodes 0..5, but nodes = 4"),
        (BASE + "colour = 1\n", "mailboxes.colour: unknown field; allowed here: domains,"),
        (BASE + "move_interval = 2.0\n", "mailboxes.move_interval: must be [min, max] in seconds"),
        (BASE + "move_interval = [2.0, 1.0]\n", "mailboxes.move_interval: max 1 is below min 2"),
        (BASE + "local = 0.7\nunknown = 0.5\n", "mailboxes.unknown: local + unknown must be at most 1"),
        (BASE.replace("mails = 10", "mails = \"many\""), "mailboxes.mails: must be an integer"),
        (BASE + "crash_every = 1.0\ndown_for = 2.0\n", "mailboxes.down_for: 2 s must be shorter than crash_every"),
        (BASE + "system = \"a|b\"\n", "mailboxes.system: must be a non-empty string"),
        (BASE + "[mailboxes.settings]\nretry_soon = 1\n", "mailboxes.settings.retry_soon: unknown field"),
        (BASE + "[mailboxes.settings]\nbook_max = 0.5\n", "mailboxes.settings.book_max: must be an integer"),
        (BASE + "crash_every = 1.0\n[[faults]]\nat = 0.5\ncrash = [2]\n",
         "faults[0].crash: node 2 is a post office and mailboxes.crash_every crashes post offices"),
        (BASE + "[[faults]]\nat = 0.5\nleave = [1]\n", "faults[0].leave: node 1 is a post office"),
        ("seed = 1\nnodes = 4\nduration = 2.0\nmailboxes = 3\n", "mailboxes: must be a table"),
    ],
)
def test_a_bad_mailboxes_table_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                          expected: str) -> None:
    scenario = tmp_path / "bad.toml"
    scenario.write_text(text)
    assert main(["simulate", str(scenario), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err
