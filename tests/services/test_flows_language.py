"""The flow language (issue 19, build item 1): parsing, one-line errors with
their column, type checking against schemas, evaluation without eval, and
the paper's transform and collapse rules."""

from __future__ import annotations

import pytest

from sgcs.services.flows.collapse import Collapse, State
from sgcs.services.flows.evaluate import EvalError, Memo, compile_predicate, evaluate
from sgcs.services.flows.rules import Select, Transform
from sgcs.services.flows.schema import DEFAULT_FUNCTIONS, EventSchema, StateSchema
from sgcs.services.flows.syntax import FlowError, parse_collapse, parse_expression, render

QUOTES = EventSchema.of("issue: str, price: float, capital: float")
TRADES = EventSchema.of("name: str, price: float, volume: float")
PRICES = StateSchema.of("issue: str", "maxPrice: float, curPrice: float")
MAX_CUR = ["[n,p,v] -> <n: p, p>",
           "[n,p,v], <n: maxP, curP>, p > maxP -> <n: p, p>",
           "[n,p,v], <n: maxP, curP>, p <= maxP -> <n: maxP, p>"]


@pytest.mark.parametrize("text, env, expected", [
    ('issue = "IBM" & price < 120', {"issue": "IBM", "price": 100.0}, True),
    ('issue = "IBM" & price < 120', {"issue": "IBM", "price": 130.0}, False),
    ('!(issue = "IBM") | price >= 120', {"issue": "IBM", "price": 120.0}, True),
    ("(price + 1) * 2 - capital / 4", {"price": 3.0, "capital": 8.0}, 6.0),
    ("-price % 7", {"price": 3.0}, 4.0),
    ('NAS(issue) = "NAS:IBM"', {"issue": "ibm"}, True),
    ("max(price, capital) ≥ 10 ∧ ¬(price ≠ 3)", {"price": 3.0, "capital": 10.0}, True),
    ("price == 3 & true", {"price": 3.0}, True),
    ("1e3 + .5", {}, 1000.5),
    ("'it\\'s' = \"it's\"", {}, True),
])
def test_expressions_evaluate(text: str, env: dict[str, object], expected: object) -> None:
    assert evaluate(parse_expression(text), env) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("text, message", [
    ("(price < 120 & x", 'flows: expected \')\', found end of text at column 17 in "(price < 120 & x"'),
    ("price < < 3", "at column 9"),
    ("price ^ 3", "unexpected character '^' at column 7"),
    ('issue = "IBM', "unterminated string at column 9"),
    ("f(1,", "at column 5"),
    ("a b", "expected end of text, found 'b' at column 3"),
])
def test_syntax_errors_are_one_line_with_a_column(text: str, message: str) -> None:
    with pytest.raises(FlowError) as error:
        parse_expression(text)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("text, message", [
    ("issue < 3", "'<' needs two numbers or two strings, got str and int at column 7"),
    ("issu = 3", "unknown name 'issu' (known: capital, issue, price) at column 1"),
    ("price + 1", "a predicate must be bool"),
    ('price & issue = "x"', "'&' needs bool on both sides"),
    ("NAS(price) = \"a\"", "NAS needs str, got float at column 5"),
    ("nope(price)", "unknown function 'nope'"),
    ("max(price) > 1", "max takes 2 argument(s), got 1"),
])
def test_type_errors_name_the_culprit(text: str, message: str) -> None:
    with pytest.raises(FlowError, match="^flows: ") as error:
        Select.parse(QUOTES, text)
    assert message in str(error.value)


def test_the_papers_transform() -> None:
    transform = Transform.parse(QUOTES, TRADES, "[issue:i, price:p, capital:c] -> [name: NAS(i), price: p, volume: c/p]")
    apply = transform.compiled()
    assert apply({"issue": "ibm", "price": 100.0, "capital": 5000.0}) == ("NAS:IBM", 100.0, 50.0)
    with pytest.raises(EvalError):
        apply({"issue": "ibm", "price": 0.0, "capital": 5000.0})  # dropped: volume undefined
    positional = Transform.parse(QUOTES, TRADES, "[i, p, c] -> [NAS(i), p, c / p]")
    assert positional.outputs == transform.outputs


@pytest.mark.parametrize("rule, message", [
    ("[issue:i] -> [name: i, price: 1]", "outputs must name each target field once (missing ['volume']"),
    ("[issue:i, price:p] -> [name: p, price: p, volume: p]", "output 'name' must be str, the rule gives float"),
    ("[issue:i, size:p] -> [i, p, p]", "unknown field 'size'"),
    ("[i, p, c] -> [i, p]", "rule gives 2 values, target"),
    ("[i, p, c, d] -> [i, p, c]", "pattern has 4 variables"),
    ("[i, p, c] -> [i, p, z]", "unknown name 'z'"),
])
def test_transform_errors(rule: str, message: str) -> None:
    with pytest.raises(FlowError) as error:
        Transform.parse(QUOTES, TRADES, rule)
    assert message in str(error.value)


def test_the_papers_collapse_max_and_current() -> None:
    history = EventSchema.of("issue: str, price: float, volume: float")
    state = State(Collapse(history, PRICES, MAX_CUR))
    for event in [("IBM", 160, 1), ("IBM", 140, 1), ("HP", 50, 2), ("IBM", 200, 1), ("IBM", 120, 1)]:
        state.apply(history.event(event))
    assert state.rows == {("IBM",): (200.0, 120.0), ("HP",): (50.0, 50.0)}
    assert state.records()[0] == {"issue": "HP", "maxPrice": 50.0, "curPrice": 50.0}


@pytest.mark.parametrize("rules, message", [
    (["[n,p,v], <n: m, c>, p -> <n: p, p>"], "a predicate must be bool"),
    (["[n,p,v], <n: m> -> <n: p, p>"], "state pattern needs 1 key and 2 value variable(s)"),
    (["[n,p,v] -> <n: p>"], "result needs 1 key and 2 value(s)"),
    (["[n,p,v] -> <n: n, p>"], "result 'maxPrice' must be float, the rule gives str"),
    (["[n,p,v] -> <n: p, p>", "[n,p,v], <m: a, b> -> <p: a, b>"], "result 'issue' must be str"),
    (["[n,p,v] -> <n: p, p>", "[n,p,v], <m: a, b> -> <upper(n): a, b>"], "compute the key alike"),
    ([], "at least one rule"),
])
def test_collapse_errors(rules: list[str], message: str) -> None:
    history = EventSchema.of("issue: str, price: float, volume: float")
    with pytest.raises(FlowError) as error:
        Collapse(history, PRICES, rules)
    assert message in str(error.value)


def test_collapse_rule_syntax_accepts_the_papers_symbols() -> None:
    rule = parse_collapse("[n,p,v], ⟨n: maxP, curP⟩, p ≤ maxP → ⟨n: maxP, p⟩")
    assert rule.state is not None and rule.state.values == ("maxP", "curP") and render(rule.guard) == "p <= maxP"


@pytest.mark.parametrize("spec, message", [
    ("issue str", "needs a type"),
    ("issue: text", "unknown type 'text'"),
    ("a: int, a: int", "appears twice"),
    ("", "at least one field"),
])
def test_schema_errors(spec: str, message: str) -> None:
    with pytest.raises(FlowError, match=message):
        EventSchema.of(spec)


def test_events_are_checked_against_the_schema() -> None:
    assert QUOTES.event({"issue": "IBM", "price": 1, "capital": 2.5}) == ("IBM", 1.0, 2.5)
    with pytest.raises(FlowError, match="field 'price' must be float, got str"):
        QUOTES.event(("IBM", "x", 1.0))
    with pytest.raises(FlowError, match="lacks field"):
        QUOTES.event({"issue": "IBM"})
    with pytest.raises(FlowError, match="must be float, got bool"):
        QUOTES.event(("IBM", True, 1.0))


def test_an_undefined_predicate_is_false_and_memo_shares_subexpressions() -> None:
    predicate = compile_predicate(parse_expression("capital / price > 1 | issue = \"IBM\""))
    assert predicate({"issue": "IBM", "price": 0.0, "capital": 1.0}) is False  # an error anywhere: false
    memo = Memo(DEFAULT_FUNCTIONS)
    shared = 'issue = "IBM" & price < 120'
    for extra in ("capital > 1", "capital > 2", "capital > 1"):
        memo.add(parse_expression(f"({shared}) & {extra}"))
    assert memo.distinct_nodes == 1 + 2 + 2 + 1 + 1  # the shared conjunction and its 2 leaves once
    assert memo.match({"issue": "IBM", "price": 100.0, "capital": 1.5}) == [0, 2]


def test_hostile_texts_are_one_line_errors_not_crashes() -> None:
    with pytest.raises(FlowError, match="nests deeper than 64 levels"):
        parse_expression("(" * 5_000 + "1" + ")" * 5_000)
    with pytest.raises(FlowError, match="nests deeper than 64 levels"):
        parse_expression(" + ".join(["price"] * 3_000))
    assert evaluate(parse_expression("!" * 3 + "true"), {}) is False  # a run of '!' is a loop, not recursion
    assert evaluate(parse_expression("-" * 4 + "2"), {}) == 2
    with pytest.raises(FlowError, match="expected"):
        Transform.parse(QUOTES, TRADES, "[i, p, c] -> [")
    with pytest.raises(FlowError, match="too large for a float"):
        QUOTES.event(("IBM", 10 ** 400, 1.0))


def test_overflow_is_undefined() -> None:
    ints = EventSchema.of("a: int, b: float")
    transform = Transform.parse(ints, EventSchema.of("x: float"), "[a, b] -> [a * a]")
    with pytest.raises(EvalError):
        transform.compiled()({"a": 10 ** 200, "b": 1.0})
    assert compile_predicate(parse_expression("a * a / b > 1"))({"a": 10 ** 200, "b": 1.0}) is False  # int/float overflows
