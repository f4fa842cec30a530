"""The autosize policy: its invariants over arbitrary configs and observations, its rules by example, its config."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.autosize import (
    ALLOWED,
    DOWN,
    HOLD,
    UP,
    AutosizeConfig,
    AutosizePolicy,
    Decision,
    DefaultPolicy,
    Observation,
    check_decision,
    is_allowed,
    lag_slope,
    load_policy,
)
from pipelines.core.limits import MAX_REASON, check_reason, printable
from pipelines.errors import ConfigError

POLICY = DefaultPolicy()


def observation(**changes: Any) -> Observation:
    """A job at factor 2 that keeps up: flat lag of 100 records, tasks half busy, long out of cooldown."""
    base: dict[str, Any] = {
        "factor": 2,
        "partitions": 2,
        "virtual_tasks": 4,
        "input_rate": 500.0,
        "processed_rate": 500.0,
        "lag_samples": tuple((float(t), 100.0) for t in range(10)),
        "busy_mean": 0.5,
        "busy_max": 0.5,
        "seconds_since_scaling": None,
        "batches": 10,
    }
    base.update(changes)
    return Observation(**base)


def growing(per_s: float = 50.0, n: int = 10) -> tuple[tuple[float, float], ...]:
    return tuple((float(t), 100.0 + per_s * t) for t in range(n))


# --- strategies ----------------------------------------------------------------------------------------------------

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def configs(draw: st.DrawFn) -> AutosizeConfig:
    low = draw(st.integers(1, 8))
    high = draw(st.integers(low, 64))
    down = draw(st.floats(0.0, 0.9, allow_nan=False))
    up = draw(st.floats(down, 1.0, allow_nan=False).filter(lambda u: u > down))
    min_batches = draw(st.integers(2, 8))
    return AutosizeConfig(
        min_factor=low,
        max_factor=high,
        cooldown_s=draw(st.floats(0.0, 1000.0, allow_nan=False)),
        scale_up_busy=up,
        scale_down_busy=down,
        lag_growth_records_per_s=draw(st.floats(0.0, 100.0, allow_nan=False)),
        small_lag_s=draw(st.floats(0.0, 100.0, allow_nan=False)),
        window_batches=draw(st.integers(min_batches, 100)),
        min_batches=min_batches,
        allowed=draw(st.sampled_from(ALLOWED)),
    )


@st.composite
def lag_samples(draw: st.DrawFn) -> tuple[tuple[float, float], ...]:
    n = draw(st.integers(0, 12))
    step = draw(st.floats(0.1, 30.0, allow_nan=False))
    start = draw(st.floats(0.0, 1e5, allow_nan=False))
    slope = draw(st.floats(-500.0, 500.0, allow_nan=False))
    noise = draw(st.lists(st.floats(-200.0, 200.0, allow_nan=False), min_size=n, max_size=n))
    return tuple((i * step, max(0.0, start + slope * i * step + e)) for i, e in enumerate(noise))


@st.composite
def observations(draw: st.DrawFn, config: AutosizeConfig, *, in_bounds: bool = True) -> Observation:
    factor = draw(
        st.integers(config.min_factor, config.max_factor) if in_bounds else st.integers(1, config.max_factor * 3)
    )
    busy_max = draw(unit)
    return Observation(
        factor=factor,
        partitions=draw(st.integers(1, 8)),
        virtual_tasks=factor * 2,
        input_rate=draw(st.floats(0.0, 1e5, allow_nan=False)),
        processed_rate=draw(st.floats(0.0, 1e5, allow_nan=False)),
        lag_samples=draw(lag_samples()),
        busy_mean=draw(st.floats(0.0, busy_max, allow_nan=False)),
        busy_max=busy_max,
        seconds_since_scaling=draw(st.none() | st.floats(0.0, 5000.0, allow_nan=False)),
        batches=draw(st.integers(0, 100)),
    )


@st.composite
def cases(draw: st.DrawFn, *, in_bounds: bool = True) -> tuple[AutosizeConfig, Observation]:
    config = draw(configs())
    return config, draw(observations(config, in_bounds=in_bounds))


# --- invariants ----------------------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(cases())
def test_target_is_always_within_bounds_and_passes_the_check(case: tuple[AutosizeConfig, Observation]) -> None:
    config, obs = case
    decision = POLICY.decide(obs, config)
    assert config.min_factor <= decision.factor <= config.max_factor
    assert check_decision(decision, obs, config, POLICY.name) is decision
    assert decision.reasons, "every decision says why"
    if decision.action != HOLD:
        assert is_allowed(decision.factor, obs.factor, config.allowed)


@given(cases(in_bounds=False))
def test_a_factor_out_of_bounds_is_brought_back_after_the_cooldown(case: tuple[AutosizeConfig, Observation]) -> None:
    config, obs = case
    obs = replace(obs, seconds_since_scaling=None)
    decision = POLICY.decide(obs, config)
    assert config.min_factor <= decision.factor <= config.max_factor
    check_decision(decision, obs, config, POLICY.name)


@given(cases(in_bounds=False), st.data())
def test_hold_inside_the_cooldown(case: tuple[AutosizeConfig, Observation], data: st.DataObject) -> None:
    config, obs = case
    if config.cooldown_s == 0:
        return  # no cooldown to be inside of
    since = data.draw(st.floats(0.0, config.cooldown_s, exclude_max=True, allow_nan=False))
    decision = POLICY.decide(replace(obs, seconds_since_scaling=since), config)
    assert decision == Decision(HOLD, obs.factor, decision.reasons)
    assert "cooldown" in decision.reasons[0]


@settings(max_examples=300)
@given(cases())
def test_never_up_when_the_lag_is_not_growing(case: tuple[AutosizeConfig, Observation]) -> None:
    config, obs = case
    if obs.lag_slope <= config.lag_growth_records_per_s:
        assert POLICY.decide(obs, config).action != UP


@settings(max_examples=300)
@given(cases())
def test_never_down_while_tasks_are_not_idle(case: tuple[AutosizeConfig, Observation]) -> None:
    config, obs = case
    if obs.busy_max >= config.scale_down_busy:
        assert POLICY.decide(obs, config).action != DOWN


@given(cases(), st.data())
def test_too_few_batches_hold(case: tuple[AutosizeConfig, Observation], data: st.DataObject) -> None:
    config, obs = case
    obs = replace(obs, batches=data.draw(st.integers(0, config.min_batches - 1)), seconds_since_scaling=None)
    assert POLICY.decide(obs, config).action == HOLD


@settings(max_examples=300)
@given(configs(), st.data())
def test_no_flapping_after_a_step_up(config: AutosizeConfig, data: st.DataObject) -> None:
    """After "up" to F, the same load on F tasks (busy scaled by old/new, lag flat) never goes back below F."""
    growth = config.lag_growth_records_per_s + data.draw(st.floats(0.5, 500.0, allow_nan=False))
    busy = data.draw(st.floats(config.scale_up_busy, 1.0, allow_nan=False).filter(lambda b: b > config.scale_up_busy))
    current = data.draw(st.integers(config.min_factor, config.max_factor))
    before = observation(
        factor=current,
        lag_samples=growing(growth),
        busy_max=busy,
        busy_mean=busy,
        batches=config.min_batches,
    )
    first = POLICY.decide(before, config)
    if first.action != UP:
        return  # at the top, or no allowed factor above
    after = replace(
        before,
        factor=first.factor,
        virtual_tasks=before.partitions * first.factor,
        busy_max=busy * current / first.factor,
        busy_mean=busy * current / first.factor,
        lag_samples=tuple((t, 0.0) for t, _ in before.lag_samples),  # flat, and drained
        seconds_since_scaling=config.cooldown_s + 1,
        batches=config.min_batches + 10,
    )
    second = POLICY.decide(after, config)
    assert not (second.action == DOWN and second.factor < first.factor), (first, second)


# --- the rules by example ------------------------------------------------------------------------------------------


def test_up_doubles_when_the_lag_grows_and_tasks_are_busy() -> None:
    decision = POLICY.decide(observation(lag_samples=growing(50), busy_max=0.9, busy_mean=0.8), AutosizeConfig())
    assert (decision.action, decision.factor) == (UP, 4)
    text = " ".join(decision.reasons)
    assert "+50.0 records/s" in text and "busy 0.90" in text and "2 -> 4" in text


def test_growing_lag_alone_or_busy_tasks_alone_hold() -> None:
    assert POLICY.decide(observation(lag_samples=growing(50), busy_max=0.5), AutosizeConfig()).action == HOLD
    assert POLICY.decide(observation(busy_max=0.95), AutosizeConfig()).action == HOLD


def test_up_is_capped_at_max_factor() -> None:
    busy_growing = {"lag_samples": growing(50), "busy_max": 0.9}
    assert POLICY.decide(observation(factor=3, **busy_growing), AutosizeConfig(max_factor=5, allowed="any")).factor == 5
    held = POLICY.decide(observation(factor=4, **busy_growing), AutosizeConfig(max_factor=4))
    assert held.action == HOLD and "max_factor=4" in held.reasons[-1]
    # split_merge: 8 -> 16 exceeds the max and 12 is not a multiple of 8
    held = POLICY.decide(observation(factor=8, **busy_growing), AutosizeConfig(max_factor=12))
    assert held.action == HOLD and "split_merge" in held.reasons[-1]
    assert POLICY.decide(observation(factor=6, **busy_growing), AutosizeConfig(allowed="powers_of_two")).factor == 8


def test_down_halves_when_idle_and_the_lag_is_small() -> None:
    decision = POLICY.decide(observation(factor=8, busy_max=0.1, busy_mean=0.05), AutosizeConfig())
    assert (decision.action, decision.factor) == (DOWN, 4)
    assert "projected busy 0.20" in decision.reasons[-1]


def test_down_respects_min_factor_and_exact_merges() -> None:
    idle = {"busy_max": 0.1, "busy_mean": 0.1}
    assert POLICY.decide(observation(factor=4, **idle), AutosizeConfig(min_factor=3, allowed="any")).factor == 3
    assert POLICY.decide(observation(factor=4, **idle), AutosizeConfig(min_factor=3)).action == HOLD  # 3 ∤ 4
    assert POLICY.decide(observation(factor=1, **idle), AutosizeConfig()).action == HOLD
    assert POLICY.decide(observation(factor=9, **idle), AutosizeConfig()).factor == 3  # largest divisor <= 4
    assert POLICY.decide(observation(factor=5, **idle), AutosizeConfig()).factor == 1


def test_down_is_refused_when_the_smaller_job_would_scale_straight_back_up() -> None:
    config = AutosizeConfig(scale_down_busy=0.5, scale_up_busy=0.75)
    decision = POLICY.decide(observation(factor=4, busy_max=0.45), config)
    assert decision.action == HOLD and "projected busy 0.90" in decision.reasons[-1]


def test_no_down_while_a_large_lag_drains_or_the_lag_grows() -> None:
    idle = {"factor": 4, "busy_max": 0.1}
    big = tuple((float(t), 100_000.0) for t in range(10))  # 200 s of input at 500 records/s
    assert POLICY.decide(observation(lag_samples=big, **idle), AutosizeConfig()).action == HOLD
    assert POLICY.decide(observation(lag_samples=growing(20), **idle), AutosizeConfig()).action == HOLD
    stalled = observation(processed_rate=0.0, lag_samples=((0.0, 5.0), (1.0, 5.0)), **idle)
    assert POLICY.decide(stalled, AutosizeConfig()).action == HOLD
    empty = observation(processed_rate=0.0, lag_samples=((0.0, 0.0), (1.0, 0.0)), **idle)
    assert POLICY.decide(empty, AutosizeConfig()).action == DOWN


def test_cooldown_and_too_few_batches_hold_whatever_the_load() -> None:
    hot = {"lag_samples": growing(50), "busy_max": 0.95}
    held = POLICY.decide(observation(seconds_since_scaling=12.0, **hot), AutosizeConfig())
    assert held == Decision(HOLD, 2, held.reasons) and "12s ago" in held.reasons[0]
    held = POLICY.decide(observation(batches=3, **hot), AutosizeConfig())
    assert held.action == HOLD and "min_batches=5" in held.reasons[0]
    assert POLICY.decide(observation(seconds_since_scaling=301.0, **hot), AutosizeConfig()).action == UP


def test_factor_outside_the_bounds_is_corrected() -> None:
    decision = POLICY.decide(observation(factor=32), AutosizeConfig(max_factor=12))
    assert (decision.action, decision.factor) == (DOWN, 8)  # the largest divisor of 32 within the bounds
    decision = POLICY.decide(observation(factor=3), AutosizeConfig(min_factor=4, max_factor=8))
    assert (decision.action, decision.factor) == (UP, 6)
    decision = POLICY.decide(observation(factor=7), AutosizeConfig(min_factor=2, max_factor=6))
    assert (decision.action, decision.factor) == (DOWN, 6)  # no divisor of 7 fits: the bound wins


def test_lag_slope_is_least_squares() -> None:
    assert lag_slope([]) == 0.0
    assert lag_slope([(5.0, 10.0)]) == 0.0
    assert lag_slope([(1.0, 10.0), (1.0, 20.0)]) == 0.0
    assert lag_slope(growing(7.5)) == pytest.approx(7.5)
    assert lag_slope([(0.0, 0.0), (1.0, 10.0), (2.0, 0.0), (3.0, 10.0)]) == pytest.approx(2.0)


def test_decision_and_observation_serialize() -> None:
    decision = Decision(UP, 4, ["lag grows"])  # type: ignore[arg-type]
    assert decision.reasons == ("lag grows",)
    assert decision.to_dict() == {"action": "up", "factor": 4, "reasons": ["lag grows"]}
    obs = observation(lag_samples=growing(2.0, n=3))
    data = json.loads(json.dumps(obs.to_dict()))
    assert data["lag_samples"] == [[0.0, 100.0], [1.0, 102.0], [2.0, 104.0]]
    assert data["lag_slope"] == pytest.approx(2.0)
    assert obs.latest_lag == 104.0
    with pytest.raises(ValueError, match="action"):
        Decision("sideways", 2)
    with pytest.raises(ValueError, match="factor"):
        Decision(HOLD, 0)
    with pytest.raises(ValueError, match="factor"):
        observation(factor=0)


def test_check_decision_refuses_what_a_plugged_policy_gets_wrong() -> None:
    obs, config = observation(factor=4), AutosizeConfig(max_factor=8)
    for bad, words in [
        (Decision(HOLD, 8), "hold"),
        (Decision(UP, 2), "up"),
        (Decision(DOWN, 8), "down"),
        (Decision(UP, 16), "max_factor=8"),
        ("up", "not a Decision"),
    ]:
        with pytest.raises(ConfigError, match=words):
            check_decision(bad, obs, config, "mine")


# --- config --------------------------------------------------------------------------------------------------------


def test_defaults() -> None:
    config = AutosizeConfig()
    assert (config.min_factor, config.max_factor, config.cooldown_s) == (1, 16, 300.0)
    assert (config.scale_up_busy, config.scale_down_busy) == (0.75, 0.25)
    assert config.lag_growth_records_per_s > 0
    assert config.allowed == "split_merge" and config.policy == "default"


# --- plugging a policy ---------------------------------------------------------------------------------------------


class AlwaysUp:
    """A user's policy: one step up whenever it is asked, within the bounds."""

    name = "always-up"

    def decide(self, observation: Observation, config: AutosizeConfig) -> Decision:
        if observation.factor >= config.max_factor:
            return Decision(HOLD, observation.factor, ("at the top",))
        return Decision(UP, observation.factor + 1, ("asked",))


class NotAPolicy:
    name = "nothing"


def broken_factory() -> None:
    raise RuntimeError("boom")


class Broken:
    name = "broken"

    def __init__(self) -> None:
        broken_factory()

    def decide(self, observation: Observation, config: AutosizeConfig) -> Decision:
        raise NotImplementedError


def test_load_policy() -> None:
    assert isinstance(load_policy(None), DefaultPolicy)
    assert isinstance(load_policy("default"), DefaultPolicy)
    mine = load_policy(f"{__name__}:AlwaysUp")
    assert isinstance(mine, AutosizePolicy) and mine.name == "always-up"
    assert mine.decide(observation(), AutosizeConfig()).factor == 3
    assert isinstance(DefaultPolicy(), AutosizePolicy)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("nodots", "package.module:Class"),
        ("no_such_module_xyz:Policy", "cannot import"),
        (f"{__name__}:Missing", "has no 'Missing'"),
        (f"{__name__}:NotAPolicy", "not a policy"),
        (f"{__name__}:Broken", "Broken\\(\\) failed"),
    ],
)
def test_load_policy_refuses_bad_names(name: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        load_policy(name)


def test_an_auto_reason_is_the_operators_then_the_decisions_on_one_line_within_the_limit() -> None:
    """The model of an auto rescale records why: the operator's reason, then the autosizer's. A custom policy's
    reasons may hold newlines or run long; the decision is recorded whole in ``autosize_decisions``, so the model's
    reason is made one line and cut to the limit every reason is held to (``core.limits.check_reason``)."""
    decision = Decision(UP, 4, ("lag grows:\n+12.0 records/s", "busiest task busy 0.90"))
    assert decision.reason_for("nightly") == "nightly (auto: lag grows: +12.0 records/s; busiest task busy 0.90)"
    wordy = Decision(UP, 4, tuple(f"reason {i} " + "x" * 100 for i in range(10)))
    said = wordy.reason_for("nightly")
    assert len(said) == MAX_REASON and said.startswith("nightly (auto: reason 0 x") and said.endswith("…")
    assert check_reason(said) == said


@given(
    st.text(min_size=1, max_size=MAX_REASON).filter(lambda text: text.strip() and printable(text) == text),
    st.lists(st.text(max_size=300), max_size=6),
)
def test_an_auto_reason_passes_the_reason_rule_whatever_the_policy_says(reason: str, reasons: list[str]) -> None:
    said = Decision(HOLD, 2, tuple(reasons)).reason_for(reason)
    assert check_reason(said) == said.strip() and said.startswith(reason[: MAX_REASON - 1])
