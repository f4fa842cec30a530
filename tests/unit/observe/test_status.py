"""``status``'s own bounds on ``--minutes`` and ``--watch``, checked before the home is read (the CLI's argument
types refuse the same values; these hold for every other caller)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from pipelines.errors import ConfigError
from pipelines.observe.collect import check_minutes
from pipelines.observe.status import status
from pipelines.storage.home import Home


class _Output:
    as_json = False

    def __init__(self) -> None:
        self.out = io.StringIO()
        self.err = io.StringIO()

    def emit(self, data: Any, human: Any) -> None:
        raise AssertionError("nothing is shown for a refused window")

    def note(self, message: str) -> None:
        raise AssertionError("nothing is noted for a refused window")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"watch": 1e300}, "--watch needs a refresh period > 0 and at most 86,400 seconds (a day), got 1e+300"),
        ({"watch": float("nan")}, "--watch needs a refresh period > 0 and at most 86,400 seconds (a day), got nan"),
        ({"watch": 0.0}, "--watch needs a refresh period > 0"),
        (
            {"minutes": 1e12},
            "--minutes must be a number of minutes from 0 to 5,270,400 (ten years), got 1000000000000.0",
        ),
        ({"minutes": 1e300}, "--minutes must be a number of minutes from 0 to 5,270,400 (ten years), got 1e+300"),
        ({"minutes": float("inf")}, "--minutes must be a number of minutes from 0 to 5,270,400 (ten years), got inf"),
        ({"minutes": -1.0}, "--minutes must be a number of minutes from 0 to 5,270,400 (ten years), got -1.0"),
    ],
)
def test_a_window_or_period_out_of_bounds_is_refused_before_the_home_is_read(
    tmp_path: Path, options: dict[str, float], message: str
) -> None:
    """``--minutes 1e12`` ended in ``ValueError: year is out of range``, ``--watch 1e300`` in ``time.sleep``."""
    output = _Output()
    with pytest.raises(ConfigError) as info:
        status(Home(tmp_path / "absent"), "j", output, **options)
    assert str(info.value).startswith(message)
    assert not (tmp_path / "absent").exists() and output.out.getvalue() == ""


def test_check_minutes_takes_the_window_up_to_ten_years() -> None:
    assert check_minutes(0) == 0 and check_minutes(60.0) == 60.0 and check_minutes(5_270_400) == 5_270_400
    with pytest.raises(ConfigError, match="got <a number of about 401 digits>"):
        check_minutes(10**400)
    with pytest.raises(ConfigError, match="got True"):
        check_minutes(True)


def test_an_export_into_a_folder_that_does_not_exist_is_refused_before_anything_is_drawn(tmp_path: Path) -> None:
    from pipelines.observe.status import write_export

    for name in ("report.html", "report.png"):  # Chromium would have made the folders for the .png
        with pytest.raises(ConfigError, match=r"the folder .*missing.* does not exist"):
            write_export({}, str(tmp_path / "missing" / "deeper" / name))
    assert not (tmp_path / "missing").exists()
