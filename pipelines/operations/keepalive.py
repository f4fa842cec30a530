"""Keeping jobs running the way they are configured: available-now on a schedule, continuous always.

A continuous driver beats every 10 s into the ``drivers`` table; that
heartbeat, not a pid, is what says it is alive, because the driver may run on
another machine (a cluster's driver host) than the one that checks. Its age
is measured on the store's clock (``scaling.last_heartbeat``), so a checker
whose clock is off neither relaunches a live driver beside itself nor waits
on a dead one. A job whose heartbeat is stale is launched again, detached;
its new driver continues from the active model's checkpoints, so a relaunch
loses and doubles nothing. A driver this host launched that has not beaten
yet (a JVM starting) is known by its pid file, which only this host judges.

Where something else keeps the drivers running (the compose file's driver
services and their restart policy, a Kubernetes Deployment), a second
supervisor would start a second driver of the same job whenever the first is
restarting: ``PIPELINES_KEEPALIVE=report`` makes this module report only.
"""

from __future__ import annotations

import os
import time
from typing import Any

from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingLock
from pipelines.errors import ConfigError, PipelinesError
from pipelines.jobs.config import job_config
from pipelines.operations.scaling.readings import last_heartbeat
from pipelines.storage.home import Home

KEEPALIVE_ENV = "PIPELINES_KEEPALIVE"
LAUNCH, REPORT = "launch", "report"


def launches(env: dict[str, str] | None = None) -> bool:
    """Whether a stale continuous job is launched again here (``launch``, the default) or only reported."""
    value = (os.environ if env is None else env).get(KEEPALIVE_ENV, "").strip().lower() or LAUNCH
    if value not in (LAUNCH, REPORT):
        raise ConfigError(f"{KEEPALIVE_ENV}={value!r}: use {LAUNCH!r} (the default) or {REPORT!r}")
    return value == LAUNCH


def jobs_by_trigger(home: Home) -> dict[str, list[str]]:
    """Active jobs grouped by their configured trigger: ``available-now`` and ``continuous``."""
    control = ControlPlane(home)
    groups: dict[str, list[str]] = {"available-now": [], "continuous": []}
    for job in control.job_models.jobs():
        try:
            model = control.job_models.active(job)
        except PipelinesError:
            continue
        groups.setdefault(job_config(model).trigger, []).append(job)
    return groups


def keep_running(home: Home, *, master: str | None = None, launch: bool = True) -> dict[str, Any]:
    """Every continuous job's heartbeat age; relaunch those whose driver is not live (unless being scaled).

    The relaunched drivers start together and are waited for together, until each has registered or exited
    (at most ``launcher.START_WAIT_S``): a relaunch whose driver dies while starting (a conf the JVM refuses,
    a sink it cannot open) is no relaunch. A job whose previous driver recorded a failure is relaunched too
    (the failure may have passed), with that failure beside it (``previous_failure``). Once every job was looked
    at, either ends the round in one ``PipelinesError`` naming each job and why, so the Airflow task that runs
    this fails and says so; the next round tries again. A driver that was killed records nothing and is
    relaunched quietly: that is what the keepalive is for. But one that fails minutes into every run (an input
    made again under it, a sink it may not write) would otherwise be relaunched round after round with the task
    green.
    """
    from pipelines.runtime import launcher

    control = ControlPlane(home)
    lock = ScalingLock(home)
    report: dict[str, Any] = {}
    spawned: dict[str, launcher.Spawned] = {}
    for job in jobs_by_trigger(home)["continuous"]:
        beat = last_heartbeat(control, job)
        age = None if beat is None else round(beat["age_s"], 1)
        if beat is not None and beat["live"]:
            report[job] = {"state": "live", "heartbeat_age_s": age, "model_version": beat["model_version"]}
            continue
        state = lock.state(job)
        if state is not None and state.held:
            report[job] = {"state": "being scaled", "heartbeat_age_s": age, "lock": state.describe()}
            continue
        if launcher.running_pid(home, job) is not None:
            report[job] = {"state": "starting", "heartbeat_age_s": age}
            continue
        if not launch:
            report[job] = {"state": "down", "heartbeat_age_s": age}
            continue
        master = master or launcher.default_master()
        report[job] = {"state": "relaunched", "heartbeat_age_s": age}
        previous = launcher.failure(home, job)  # read before the launch, which clears it
        if previous is not None:
            report[job]["previous_failure"] = str(previous)
        try:
            spawned[job] = launcher.spawn(home, job, available_now=False, master=master)
        except PipelinesError as error:  # refused before a JVM: a live driver on another host, a bad conf
            report[job] |= {"state": "not relaunched", "error": str(error)}
    until = time.monotonic() + launcher.START_WAIT_S
    for job, driver in spawned.items():
        try:
            started = launcher.settle(home, driver, until=until)
        except PipelinesError as error:
            report[job] |= {"state": "failed to start", "pid": driver.proc.pid, "error": str(error)}
            continue
        report[job] |= {"pid": started.pid, "start": started.state.value}
    for job, entry in report.items():
        print(f"{job}: {entry}")
    failed = [f"{job}: {entry['error']}" for job, entry in report.items() if "error" in entry]
    failed += [
        f"{job}: its driver had failed ({entry['previous_failure']}); relaunched as pid {entry['pid']}"
        for job, entry in report.items()
        if "previous_failure" in entry and "error" not in entry
    ]
    if failed:
        raise PipelinesError(f"{len(failed)} continuous job(s) failed: " + "; ".join(failed))
    return report
