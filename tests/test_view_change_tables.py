"""The view change's state machines: the document shows what the code holds,
and the tables describe machines that can always finish a change."""

from __future__ import annotations

from pathlib import Path

from sgcs.membership.describe import BEGIN, END, markdown
from sgcs.membership.stages import COORDINATING, STAGES, Coordinating, Stage
from sgcs.membership.synchrony import PHASES, TRANSITIONS, Phase

DOC = Path(__file__).resolve().parent.parent / "docs" / "view-change.md"


def test_the_document_prints_the_tables_the_code_holds() -> None:
    text = DOC.read_text()
    generated = text[text.index(BEGIN):text.index(END) + len(END)]
    assert generated == markdown(), "run: python -m sgcs.membership.describe, and paste its output into the document"


def _reachable(table: dict, start: object) -> set:
    seen, todo = {start}, [start]
    while todo:
        state = todo.pop()
        for (before, _), after in table.items():
            after = after[0] if isinstance(after, tuple) else after
            if before == state and after not in seen:
                seen.add(after)
                todo.append(after)
    return seen


def test_every_state_is_reached_from_rest_and_leads_back_to_it() -> None:
    for table, rest, states in ((STAGES, Stage.STABLE, set(Stage)), (COORDINATING, Coordinating.IDLE,
                                                                    set(Coordinating)),
                                (TRANSITIONS, Phase.STABLE, set(Phase))):
        assert _reachable(table, rest) == states, f"a state no change reaches: {states - _reachable(table, rest)}"
        for state in states:
            assert rest in _reachable(table, state), f"{state} never leads back to {rest}"


def test_every_move_names_its_rule_and_every_stage_its_phases() -> None:
    for (before, event), (_, rule) in {**STAGES, **COORDINATING}.items():
        assert len(rule) > 10, f"{before} on {event}: no rule"
    assert set(PHASES) == set(Stage) and all(PHASES.values())
