"""The autosizer's policy: which elasticity factor a job should run at, decided from its metrics.

SEP-32 asks for "interfaces/api/configs for autosizing controller to size the
job". This module is that interface, kept pure (no Spark, Delta or I/O) so a
policy can be tested from numbers alone:

* :class:`AutosizeConfig` — the bounds and thresholds a job sets in its
  ``autosize:`` section (checked by the job's model, ``pipelines.jobs.spec``,
  so a bad value fails at ``job create`` with the field named).
* :class:`Observation` — what a policy sees: the current factor, rates, the lag
  samples of the active model version and how busy its virtual tasks are.
  ``pipelines.operations.autosize.observe`` builds it from the metrics table.
* :class:`Decision` — "up", "down" or "hold", the target factor, and reasons
  that name the figures they were decided from; "skip" when the job is being
  scaled by another operation (its metrics are in flux), naming its holder.
* :class:`AutosizePolicy` — the extension point: any object with a ``name`` and
  ``decide(observation, config) -> Decision``, plugged in by
  ``autosize: {policy: "package.module:Class"}`` (see :func:`load_policy`).

The default policy (:class:`DefaultPolicy`):

* **Up** (double, capped at ``max_factor``) only when the lag *grows* (the
  least-squares slope of total lag over time is above
  ``lag_growth_records_per_s``) *and* the busiest virtual task is busy (its
  busy ratio, processing seconds per batch wall second, is above
  ``scale_up_busy``). Growing lag alone may be an input burst the job is
  absorbing with room to spare; busy tasks alone are a job keeping up.
* **Down** (halve, not below ``min_factor``) only when even the busiest task is
  idle (below ``scale_down_busy``), the lag is not growing, and the lag is
  small (at most ``small_lag_s`` seconds of input at the observed rate).
* **Hold** inside the cooldown after a scaling step, with fewer than
  ``min_batches`` batches of the active model version, and otherwise.

Why it does not flap, and which factors it prefers: docs/design.md#the-autosizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from pipelines.core.dotted import is_dotted, resolve
from pipelines.core.limits import MAX_REASON, printable
from pipelines.errors import ConfigError

UP = "up"
DOWN = "down"
HOLD = "hold"
SKIP = "skip"
"""Not decided: another scaling operation holds the job's lock (the platform's verdict, never a policy's)."""
ACTIONS = (UP, DOWN, HOLD, SKIP)

SPLIT_MERGE = "split_merge"
POWERS_OF_TWO = "powers_of_two"
ANY = "any"
ALLOWED = (SPLIT_MERGE, POWERS_OF_TWO, ANY)

DEFAULT_POLICY = "default"


@dataclass(frozen=True)
class AutosizeConfig:
    """A job's ``autosize:`` section; the defaults suit a job that runs continuously with a 1 s trigger.

    Plain data: ``pipelines.jobs.spec.AutosizeSpec`` checks a section (types, bounds, and the fields that must
    agree) and is the only way a user's values get here."""

    min_factor: int = 1
    max_factor: int = 16
    cooldown_s: float = 300.0
    """Seconds after a scaling step ends before the next may be decided: the new model's metrics must settle."""
    scale_up_busy: float = 0.75
    scale_down_busy: float = 0.25
    lag_growth_records_per_s: float = 1.0
    """Lag counts as growing when its least-squares slope is above this; small, but above rounding noise."""
    small_lag_s: float = 30.0
    """Lag counts as small when the job would read it in at most this many seconds at its observed rate."""
    window_batches: int = 60
    """At most this many of the active model version's latest batches are observed ..."""
    window_s: float = 300.0
    """... and only those committed in the last ``window_s`` seconds."""
    min_batches: int = 5
    """Fewer batches of the active model version than this: hold, the picture is not there yet."""
    allowed: str = SPLIT_MERGE
    policy: str = DEFAULT_POLICY
    """``default`` or ``package.module:Class`` of an :class:`AutosizePolicy`."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Observation:
    """What a policy sees of one job, over a window of its active model version's batches.

    ``lag_samples`` are ``(time in seconds, total lag in records)`` pairs, any
    time origin; the busy ratios are a virtual task's processing seconds per
    batch wall second (0 = idle, 1 = never stops), mean and maximum over tasks.
    """

    factor: int
    partitions: int
    virtual_tasks: int
    input_rate: float
    """Records per second arriving at the inputs (read rate plus lag growth)."""
    processed_rate: float
    """Records per second the job read and processed."""
    lag_samples: tuple[tuple[float, float], ...]
    busy_mean: float
    busy_max: float
    seconds_since_scaling: float | None
    """Since the last scaling step finished (an unfinished one: since it started); None if there never was one."""
    batches: int
    """Batches of the active model version whose wall time was measured (the busy ratios and rates cover these)."""

    def __post_init__(self) -> None:
        if isinstance(self.factor, bool) or not isinstance(self.factor, int) or self.factor < 1:
            raise ValueError(f"observation factor must be a whole number >= 1, got {self.factor!r}")
        if self.batches < 0 or self.partitions < 0 or self.virtual_tasks < 0:
            raise ValueError("observation counts (batches, partitions, virtual_tasks) must be >= 0")
        object.__setattr__(self, "lag_samples", tuple((float(t), float(v)) for t, v in self.lag_samples))

    @property
    def lag_slope(self) -> float:
        """Records per second the total lag grows by (negative: it shrinks)."""
        return lag_slope(self.lag_samples)

    @property
    def latest_lag(self) -> float | None:
        return max(self.lag_samples)[1] if self.lag_samples else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["lag_samples"] = [list(s) for s in self.lag_samples]
        out["lag_slope"] = self.lag_slope
        return out


@dataclass(frozen=True)
class Decision:
    """A policy's verdict; ``factor`` is the target, equal to the current factor on hold."""

    action: str
    factor: int
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"decision action must be one of {', '.join(ACTIONS)}, got {self.action!r}")
        if isinstance(self.factor, bool) or not isinstance(self.factor, int) or self.factor < 1:
            raise ValueError(f"decision factor must be a whole number >= 1, got {self.factor!r}")
        object.__setattr__(self, "reasons", tuple(str(r) for r in self.reasons))

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "factor": self.factor, "reasons": list(self.reasons)}

    def reason_for(self, reason: str) -> str:
        """The reason a model this decision chose is saved with: the operator's (already checked), then ours.

        Held to the operator's rule (``limits.check_reason``) so the rescale is not refused for what the
        autosizer added: on one line (a plugged policy's reasons may hold newlines) and cut to ``MAX_REASON``;
        the decision itself is recorded whole in ``autosize_decisions``.
        """
        said = printable(f"{reason} (auto: {'; '.join(self.reasons)})")
        return said if len(said) <= MAX_REASON else said[: MAX_REASON - 1] + "…"


@runtime_checkable
class AutosizePolicy(Protocol):
    """The extension point: decide a job's factor from an observation. Must be pure and cheap.

    A policy may return any factor within ``[config.min_factor,
    config.max_factor]``; ``check_decision`` refuses anything else before it is
    recorded or acted on.
    """

    name: str

    def decide(self, observation: Observation, config: AutosizeConfig) -> Decision: ...


class DefaultPolicy:
    """Double on growing lag with busy tasks, halve when idle with small lag, hold otherwise (module docstring)."""

    name = DEFAULT_POLICY

    def decide(self, observation: Observation, config: AutosizeConfig) -> Decision:
        obs, cfg = observation, config
        current = obs.factor
        since = obs.seconds_since_scaling
        if since is not None and since < cfg.cooldown_s:
            return Decision(
                HOLD,
                current,
                (f"in cooldown: the last scaling step was {since:.0f}s ago, cooldown_s={cfg.cooldown_s:g}",),
            )
        if current > cfg.max_factor:
            target = _largest_allowed(current, cfg.min_factor, cfg.max_factor, cfg.allowed) or cfg.max_factor
            return Decision(DOWN, target, (f"factor {current} is above max_factor={cfg.max_factor}",))
        if current < cfg.min_factor:
            target = _smallest_allowed(current, cfg.min_factor, cfg.max_factor, cfg.allowed) or cfg.min_factor
            return Decision(UP, target, (f"factor {current} is below min_factor={cfg.min_factor}",))
        if obs.batches < cfg.min_batches:
            return Decision(
                HOLD,
                current,
                (f"only {obs.batches} batch(es) of this model version observed, min_batches={cfg.min_batches}",),
            )

        slope = obs.lag_slope
        growing = slope > cfg.lag_growth_records_per_s
        busy = obs.busy_max
        lag_text = f"lag {'grows' if growing else 'does not grow'}: {slope:+.1f} records/s " + (
            f"(> lag_growth_records_per_s={cfg.lag_growth_records_per_s:g})"
            if growing
            else f"(<= lag_growth_records_per_s={cfg.lag_growth_records_per_s:g})"
        )
        busy_text = f"busiest task busy {busy:.2f}, mean {obs.busy_mean:.2f}"

        if growing and busy > cfg.scale_up_busy:
            reasons: tuple[str, ...] = (lag_text, f"{busy_text} (> scale_up_busy={cfg.scale_up_busy:g})")
            up = _up_target(current, cfg)
            if up is None:
                why = (
                    f"factor {current} is at max_factor={cfg.max_factor}"
                    if current >= cfg.max_factor
                    else f"no {cfg.allowed} factor above {current} fits max_factor={cfg.max_factor}"
                )
                return Decision(HOLD, current, (*reasons, f"would scale up, but {why}"))
            return Decision(UP, up, (*reasons, f"factor {current} -> {up} ({cfg.allowed})"))

        lag = obs.latest_lag or 0.0
        drain_s = _drain_seconds(lag, obs.processed_rate)
        small = drain_s <= cfg.small_lag_s
        if not growing and busy < cfg.scale_down_busy and small:
            reasons = (
                lag_text,
                f"{busy_text} (< scale_down_busy={cfg.scale_down_busy:g})",
                f"lag {lag:.0f} records is {_seconds(drain_s)} of input (<= small_lag_s={cfg.small_lag_s:g})",
            )
            down = _down_target(current, cfg)
            if down is None:
                why = (
                    f"factor {current} is at min_factor={cfg.min_factor}"
                    if current <= cfg.min_factor
                    else f"no {cfg.allowed} factor between min_factor={cfg.min_factor} and {current // 2}"
                )
                return Decision(HOLD, current, (*reasons, f"would scale down, but {why}"))
            projected = busy * current / down
            if projected >= cfg.scale_up_busy:
                return Decision(
                    HOLD,
                    current,
                    (
                        *reasons,
                        f"would scale down to {down}, but its projected busy {projected:.2f} is not below "
                        f"scale_up_busy={cfg.scale_up_busy:g}: it would be scaled straight back up",
                    ),
                )
            return Decision(
                DOWN,
                down,
                (*reasons, f"factor {current} -> {down}, projected busy {projected:.2f} ({cfg.allowed})"),
            )

        notes = [lag_text, busy_text]
        if growing:
            notes.append(f"not busy enough to scale up (scale_up_busy={cfg.scale_up_busy:g})")
        elif busy >= cfg.scale_down_busy:
            notes.append(
                f"between scale_down_busy={cfg.scale_down_busy:g} and scale_up_busy={cfg.scale_up_busy:g}: "
                "the job keeps up"
            )
        else:
            notes.append(
                f"lag {lag:.0f} records is {_seconds(drain_s)} of input (> small_lag_s={cfg.small_lag_s:g}): "
                "not scaling down while it drains"
            )
        return Decision(HOLD, current, tuple(notes))


def lag_slope(samples: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of lag over time, in records per second; 0 without two distinct times.

    A least-squares fit rather than last-minus-first, so one batch that landed
    just before a burst of input (or just after) does not decide the trend.
    """
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var <= 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in samples) / var


def is_allowed(factor: int, current: int, allowed: str) -> bool:
    """Whether ``allowed`` accepts moving from ``current`` to ``factor``."""
    if allowed == SPLIT_MERGE:
        return factor % current == 0 or current % factor == 0
    if allowed == POWERS_OF_TWO:
        return factor & (factor - 1) == 0
    return True


def check_decision(decision: object, observation: Observation, config: AutosizeConfig, policy: str) -> Decision:
    """Refuse a (plugged-in) policy's decision that is malformed, points the wrong way or leaves the bounds."""
    if not isinstance(decision, Decision):
        raise ConfigError(f"autosize policy {policy!r} returned {type(decision).__name__}, not a Decision")
    current, target = observation.factor, decision.factor
    if decision.action == SKIP:
        raise ConfigError(f"autosize policy {policy!r} decided {SKIP!r}, which only the platform decides; use hold")
    if decision.action == HOLD and target != current:
        raise ConfigError(f"autosize policy {policy!r} decided hold but target factor {target} != current {current}")
    if decision.action == UP and target <= current:
        raise ConfigError(f"autosize policy {policy!r} decided up but target factor {target} <= current {current}")
    if decision.action == DOWN and target >= current:
        raise ConfigError(f"autosize policy {policy!r} decided down but target factor {target} >= current {current}")
    if decision.action != HOLD and not config.min_factor <= target <= config.max_factor:
        raise ConfigError(
            f"autosize policy {policy!r} decided factor {target}, outside "
            f"[min_factor={config.min_factor}, max_factor={config.max_factor}]"
        )
    return decision


def load_policy(name: str | None) -> AutosizePolicy:
    """The policy named in a job's config: ``default`` (or None), or ``package.module:Class``.

    The named attribute may be a class (instantiated without arguments) or a
    ready policy object; either way it must have ``name`` and ``decide``.
    """
    if name is None or name == DEFAULT_POLICY:
        return DefaultPolicy()
    if not is_dotted(name):
        raise ConfigError(f"autosize policy must be {DEFAULT_POLICY!r} or 'package.module:Class', got {name!r}")
    target = resolve(name, "autosize policy")
    if isinstance(target, type):
        try:
            target = target()
        except Exception as e:
            raise ConfigError(
                f"autosize policy {name!r}: {target.__name__}() failed ({type(e).__name__}: {e})"
            ) from None
    if not isinstance(target, AutosizePolicy) or not callable(target.decide) or not isinstance(target.name, str):
        raise ConfigError(
            f"autosize policy {name!r} is not a policy: it needs a 'name' string and a "
            "decide(observation, config) -> Decision method"
        )
    return target


# ---------------------------------------------------------------------------------------------- factor arithmetic


def _up_target(current: int, cfg: AutosizeConfig) -> int | None:
    """The largest allowed factor in (current, min(2 x current, max_factor)], None at the top."""
    desired = min(current * 2, cfg.max_factor)
    if desired <= current:
        return None
    return _largest_allowed(current, current + 1, desired, cfg.allowed)


def _down_target(current: int, cfg: AutosizeConfig) -> int | None:
    """The largest allowed factor in [min_factor, max(current // 2, min_factor)], None at the bottom."""
    desired = max(current // 2, cfg.min_factor)
    if desired >= current:
        return None
    return _largest_allowed(current, cfg.min_factor, desired, cfg.allowed)


def _largest_allowed(current: int, low: int, high: int, allowed: str) -> int | None:
    if low > high:
        return None
    if allowed == ANY:
        return high
    if allowed == POWERS_OF_TWO:
        power = 1 << (high.bit_length() - 1)
        return power if power >= low else None
    # split_merge: the multiples of current up to high, else its divisors
    if high >= current:
        multiple = high // current * current
        if multiple >= max(low, current):
            return multiple
    best = None
    for d in _divisors(current):
        if low <= d <= high and (best is None or d > best):
            best = d
    return best


def _smallest_allowed(current: int, low: int, high: int, allowed: str) -> int | None:
    if low > high:
        return None
    if allowed == ANY:
        return low
    if allowed == POWERS_OF_TWO:
        power = 1 << max(low - 1, 0).bit_length()
        return power if power <= high else None
    if low <= current:
        divisors = [d for d in _divisors(current) if low <= d <= high]
        if divisors:
            return min(divisors)
    multiple = -(-low // current) * current
    return multiple if multiple <= high else None


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def _drain_seconds(lag: float, rate: float) -> float:
    if lag <= 0:
        return 0.0
    return lag / rate if rate > 0 else math.inf


def _seconds(value: float) -> str:
    return "unbounded (no records read)" if math.isinf(value) else f"{value:.1f}s"
