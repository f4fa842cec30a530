"""The rule a rescale's (or a saved model's) reason is held to: one line of printable text, 1 to 500 characters.

The reason is stored with the new job model, in the Airflow run's conf and its note, and shown on one line in
``job history``, on the page and in log lines; the CLI, the plugin and the DAG all check it with
``core.limits.check_reason``.
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.limits import MAX_REASON, check_reason, printable
from pipelines.errors import ConfigError


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("a\x00b", r"^reason holds a NUL \(U\+0000\) at character 2: a reason is one line of printable text"),
        ("more keys\nin flight", r"^reason holds a newline \(U\+000A\) at character 10: "),
        ("a\tb", r"holds a tab \(U\+0009\) at character 2"),
        ("\x1b[2Jcleared", r"holds a control character \(U\+001B\) at character 1"),
        ("a\x7fb", r"holds a control character \(U\+007F\)"),
        ("a\x85b", r"holds a control character \(U\+0085\)"),  # NEL: str.splitlines breaks there
        ("a\u2028b", r"holds a line separator \(U\+2028\)"),
        ("a\u2029b", r"holds a paragraph separator \(U\+2029\)"),
        ("a\ud800b", r"holds a lone surrogate \(U\+D800\) at character 2, which is not UTF-8 text"),
        ("x" * (MAX_REASON + 1), rf"^reason has {MAX_REASON + 1} characters: at most {MAX_REASON}"),
        ("x" * 200_000, r"^reason has 200,000 characters: at most 500"),
        ("", r"^reason is empty: a new job model needs a reason"),
        ("   ", r"^reason is empty: a new job model needs a reason"),
        (None, r"^reason must be text, got None"),
        (42, r"^reason must be text, got 42"),
    ],
)
def test_what_is_not_one_line_of_printable_text_is_refused_without_echoing_it(reason: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        check_reason(reason)
    said = str(raised.value)
    assert len(said) < 300 and "\n" not in said and "xxxxxxxxxx" not in said  # the text is named, never quoted


def test_the_field_is_named_as_the_caller_calls_it() -> None:
    with pytest.raises(ConfigError, match=r"^the form's reason holds a NUL"):
        check_reason("\x00", "the form's reason")


@pytest.mark.parametrize(
    "reason",
    [
        "x" * MAX_REASON,  # the limit itself
        "  more keys in flight  ",
        "Lastspitze: Faktor 2 → 4 (Ticket #1234) 🚀",
        "بازگشت\u200cپذیر",  # a zero-width non-joiner: a format character Persian needs, not a control one
        "👩\u200d💻 scaled by the on-call",  # a zero-width joiner inside an emoji sequence
        "café — naïve ½",
    ],
)
def test_printable_text_of_any_script_up_to_the_limit_is_kept_stripped(reason: str) -> None:
    assert check_reason(reason) == reason.strip()


REFUSED = {"Cc", "Cs", "Zl", "Zp"}
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"  # embeddings, overrides, isolates


def refused(char: str) -> bool:
    return unicodedata.category(char) in REFUSED or char in BIDI_CONTROLS


@pytest.mark.parametrize("control", BIDI_CONTROLS)
def test_a_bidirectional_control_is_refused_by_name_and_place(control: str) -> None:
    """``factor 2 \u202e4 rotcaf`` shows as "factor 2 factor 4" where bidi is rendered: the text would lie."""
    with pytest.raises(ConfigError, match=rf"^reason holds a bidirectional control \(U\+{ord(control):04X}\) at "):
        check_reason(f"factor 2 {control}4 rotcaf")
    assert printable(f"a{control}b") == "a b"


def test_the_marks_that_only_hint_a_direction_are_kept() -> None:
    for mark in ("\u200e", "\u200f", "\u061c"):  # LRM, RLM, the Arabic letter mark
        assert check_reason(f"שינוי{mark} factor 4") == f"שינוי{mark} factor 4"


@given(st.text(max_size=MAX_REASON + 20))
def test_a_reason_is_kept_exactly_when_it_is_short_printable_and_not_blank(text: str) -> None:
    """The rule as a whole, for any text: kept (stripped) iff at most MAX_REASON characters, none a control
    character, separator of lines or lone surrogate, and something left after stripping; otherwise refused
    with a short line that does not quote it."""
    fine = len(text) <= MAX_REASON and not any(refused(c) for c in text) and bool(text.strip())
    try:
        kept = check_reason(text)
    except ConfigError as e:
        assert not fine, text
        assert len(str(e)) < 300 and "\n" not in str(e)
    else:
        assert fine and kept == text.strip()


@given(st.text(max_size=2_000))
def test_printable_makes_any_text_one_line_a_reason_may_hold(text: str) -> None:
    """What the autosizer adds to a reason (a custom policy's reasons may hold anything) is made printable."""
    made = printable(text)
    assert len(made) == len(text)
    assert not any(refused(c) for c in made)
    if made.strip() and len(made) <= MAX_REASON:
        assert check_reason(made) == made.strip()
