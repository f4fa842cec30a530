"""The store's clock on a real store (a local folder and SeaweedFS), and a lease measured on it by skewed hosts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipelines.control.locks import ScalingInProgressError
from pipelines.storage.clock import PROBES, store_clock
from pipelines.storage.home import Home
from testbed.servers.s3 import S3Server
from tests.skew import SkewedHost

pytestmark = pytest.mark.integration


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])  # S3: a server, so slow
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Home:
    if request.param == "local":
        return Home(tmp_path / "home")
    server: S3Server = request.getfixturevalue("s3_server")
    return Home(f"s3://{server.create_bucket()}/home")


def test_the_stores_time_is_read_from_a_probe_and_the_probe_is_removed(home: Home) -> None:
    """Both stores run on this machine, so their clocks are this machine's: the reading must match it."""
    clock = store_clock(home.root)
    before = time.time()
    now = clock.now_s()
    after = time.time()
    tolerance = 0.05 if home.is_local else 1.1  # S3 stamps to the second
    assert before - tolerance <= now <= after + tolerance
    assert clock.now_s() > now
    assert [e for e in home.store.walk(home.root / PROBES)] == [], "no probe object is left behind"


def test_two_hosts_minutes_apart_measure_one_lease_alike(home: Home) -> None:
    """A holder 20 min ahead with a 3 s lease, a reader 20 min behind: held at first, then taken over after ~3 s."""
    ahead, behind = SkewedHost(home, +1200.0, 5e5), SkewedHost(home, -1200.0, -3e3)
    asked = time.monotonic()
    with ahead.wall():
        ahead.lock().acquire("job", "run-ahead", "rescale", ttl_s=3.0)
    taken = time.monotonic()
    with behind.wall():
        state = behind.lock().state("job")
        # What is left of the lease is 3 s less the time its acquire and this read took on the store (seconds on a
        # loaded S3 server), never 20 minutes off either way: the reader judges it on the store's clock.
        elapsed = time.monotonic() - asked
        assert state is not None and state.held and 3.0 - elapsed - 0.5 < state.remaining_s <= 4.2, (state, elapsed)
        while time.monotonic() - taken < 30:
            try:
                state = behind.lock().acquire("job", "run-behind", "rescale")
                break
            except ScalingInProgressError:
                time.sleep(0.2)
    waited, since_asked = time.monotonic() - taken, time.monotonic() - asked
    assert state.owner == "run-behind" and state.status == "taken over"
    # Not before the lease's 3 s from the acquire (less the store clock's rounding), and seconds after, not minutes.
    assert since_asked > 1.5 and waited < 8.0, f"a 3 s lease was taken over {since_asked:.1f}s after its acquire"
