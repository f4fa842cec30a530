"""The scaling path as Airflow tasks: one task per step of ``pipelines.operations.scaling``.

``elastic_rescale`` runs it once per run; ``repartition_watch`` maps it over
the jobs whose inputs grew. Taking the lock is a *setup* task and recording
the event (which releases the lock) its *teardown*, so Airflow runs the
release whatever failed in between, and skips it only when the lock was never
taken. The lock's owner is the run (plus the map index), so a retried or
cleared task of the same run resumes its own operation.

The waits (for the job's lock while another operation holds it, a live
driver's switch to the new model, the new model's catch-up) are deferrable
operators: each looks once and, if it must wait, hands the wait to a trigger
on Airflow's triggerer (``pipelines_airflow.triggers``) and gives its worker
slot back until the trigger fires. A deployment needs a
running ``airflow triggerer`` for them (``scripts/airflow.sh`` and the compose
file start one). The catch-up *run* of a job with no live driver is work, not
a wait: it runs in ``restart_job``'s slot, as a spark-submit on that worker.

Every task here finds the deployment through the home alone (the ``pipelines``
connection or ``PIPELINES_HOME``), and passes only JSON between tasks (the
operation, the switch mode, figures): no path of a worker's disk, no pid. So
any worker that reaches the home and Airflow's database can run any step.

Run parameters read here, all optional (``elastic_rescale`` exposes them as
typed Params): ``lock_wait_s``, ``restart_timeout_s``, ``catch_up_timeout_s``,
``sequence_column``, ``spark_master``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator, Context, Param, get_current_context, task, task_group
from airflow.sdk.exceptions import AirflowFailException

from pipelines.control.dq_results import DagRunRef
from pipelines.control.locks import ScalingInProgressError
from pipelines.core.limits import MAX_WAIT_S
from pipelines.operations import scaling
from pipelines_airflow import triggers
from pipelines_airflow.assets import JOB_MODELS, QUALITY, SCALING_EVENTS
from pipelines_airflow.hooks import PipelinesHook
from pipelines_airflow.notes import noted_failure, skip


def _home() -> Any:
    return PipelinesHook().home()


def _param(name: str, default: Any = None) -> Any:
    value = get_current_context()["params"].get(name, default)
    return default if value in (None, "") else value


def _op(op: dict[str, Any]) -> scaling.ScalingOperation:
    """The operation from its XCom (a JSON object): typed, so a missing field fails here, by name."""
    return scaling.ScalingOperation.of(op)


def run_owner() -> str:
    """Stable across retries and clears of this run's task, distinct for every run and mapped instance."""
    context = get_current_context()
    ti = context["ti"]
    index = getattr(ti, "map_index", -1)
    suffix = f"#{index}" if index is not None and index >= 0 else ""
    return f"airflow:{ti.dag_id}:{context['run_id']}{suffix}"


@task
def stop_at_batch_boundary(op: dict[str, Any]) -> str:
    with noted_failure():
        return str(scaling.stop(_home(), _op(op))["mode"])


@task
def migrate_checkpoints(op: dict[str, Any]) -> int:
    with noted_failure():
        version: int = scaling.migrate(_home(), _op(op))["to_version"]
        return version


@task(outlets=[JOB_MODELS])
def activate_model(op: dict[str, Any]) -> int:
    with noted_failure():
        version: int = scaling.activate(_home(), _op(op))["to_version"]
        return version


RESUME_RETRIES = 1
"""The deferrable waits are retried once: Airflow 3.3 can fail a resumed task that runs already when the executor's
report of the deferring try arrives late, as on a loaded worker ("finished with state success, but the task
instance's state attribute is running", apache/airflow#71580 and #72716, open). Each wait starts with one look, so
a retry after the switch or the catch-up returns at once. A wait that timed out fails for good
(``AirflowFailException``): retrying would only wait as long again."""


def _deferrable(kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs.setdefault("retries", RESUME_RETRIES)
    kwargs.setdefault("retry_delay", timedelta(seconds=5))
    return kwargs


LOCK_WAIT_S = 600
"""How long a step waits for the job's lock by default: a rescale through Airflow takes about a minute, a catch-up
run a few; past it the run ends skipped with the holder named in its note, and nothing was changed."""


def seconds_param(default: int, description: str, *, minimum: int = 1) -> Param:
    """A scaling DAG's wait or timeout in seconds: Airflow's form and REST API refuse one past ``MAX_WAIT_S`` at
    trigger time, the bound every wait of the platform is held to."""
    return Param(default, type="integer", minimum=minimum, maximum=MAX_WAIT_S, description=description)


class BeginScaling(BaseOperator):
    """Take the job's lock, settle earlier unfinished operations, open the event: the path's setup.

    Operations on one job queue on its lock: while another holds it, this
    waits on the triggerer (no worker slot: the holder's own steps need
    them), up to ``lock_wait_s``, then plans again against the model in force
    (``scaling.begin``'s ``replan``). Ends skipped, with the reason as the
    run's note, when it waited past its bound or has nothing left to do.
    Returns the operation (its XCom) for the steps after it.
    """

    template_fields = ("request",)
    ui_color = "#e8f4fa"

    def __init__(self, *, request: Any, **kwargs: Any) -> None:
        super().__init__(**_deferrable(kwargs))
        self.request = request

    def execute(self, context: Context) -> dict[str, Any]:
        return self._take(0.0)

    def resume(self, context: Context, event: dict[str, Any], waited_s: float = 0.0) -> dict[str, Any]:
        """Back on a worker once the lock looked free (another may still be faster: then it waits again).

        ``waited_s``: the waits before this one (``dag.test`` resumes without the deferral's kwargs: none)."""
        _report(event)
        return self._take(waited_s + float(event["waited_s"]))

    def _take(self, waited_s: float) -> dict[str, Any]:
        home, request = _home(), scaling.ScalingRequest.from_dict(self.request)
        owner = run_owner()
        with noted_failure():
            try:
                return scaling.begin(home, request, owner).to_dict()
            except scaling.ScalingSkipped as e:
                skip(str(e))
            except ScalingInProgressError as e:
                left = float(_param("lock_wait_s", LOCK_WAIT_S)) - waited_s
                if left <= 0:
                    skip(f"waited {waited_s:.0f} s (lock_wait_s) for the scaling lock: {e}")
                print(f"waiting up to {left:.0f} s for the scaling lock, on the triggerer (no worker slot): {e}")
        self.defer(
            trigger=triggers.ScalingWaitTrigger(
                home=str(home.root),
                job=request.job,
                version=request.decided_on or 0,
                wait=triggers.LOCK,
                owner=owner,
                timeout_s=left,
            ),
            method_name="resume",
            kwargs={"waited_s": waited_s},
        )


class _DeferredStep(BaseOperator):
    """A step of the operation ``op`` that may hand its wait for model ``version`` to the triggerer: it looks
    once, defers if it must wait, and decides on the trigger's event when a worker picks it up again."""

    template_fields: tuple[str, ...] = ("op",)
    ui_color = "#e8f4fa"
    wait_param: tuple[str, int]
    """The run parameter that bounds the wait, and its default in seconds."""

    def __init__(self, *, op: Any, **kwargs: Any) -> None:
        super().__init__(**_deferrable(kwargs))
        self.op = op

    def execute(self, context: Context) -> Any:
        with noted_failure():
            return self._look(_home(), _op(self.op))

    def resume(self, context: Context, event: dict[str, Any], version: int) -> Any:
        """Back on a worker once the trigger fired."""
        with noted_failure():
            home, op = _home(), _op(self.op)
            scaling.renew(home, op)
            _report(event)
            return self._resumed(home, op, event, version)

    def _wait(self, home: Any, op: scaling.ScalingOperation, version: int, wait: str, **trigger: Any) -> None:
        self.defer(
            trigger=triggers.ScalingWaitTrigger(
                home=str(home.root), job=op.job, version=version, wait=wait, timeout_s=self._timeout(), **trigger
            ),
            method_name="resume",
            kwargs={"version": version},
        )

    def _timeout(self) -> float:
        return float(_param(*self.wait_param))

    def _look(self, home: Any, op: scaling.ScalingOperation) -> Any:
        raise NotImplementedError

    def _resumed(self, home: Any, op: scaling.ScalingOperation, event: dict[str, Any], version: int) -> Any:
        raise NotImplementedError


class RestartJob(_DeferredStep):
    """Get the new model running: wait (deferred) for a live driver's in-place switch, or run a catch-up.

    Returns how the job restarted: ``in-place``, ``catch-up run``, or ``none: nothing to catch up`` (a stopped
    job that had read its inputs to their ends).
    """

    template_fields = ("op", "mode")
    wait_param = ("restart_timeout_s", 300)

    def __init__(self, *, op: Any, mode: Any, **kwargs: Any) -> None:
        super().__init__(op=op, **kwargs)
        self.mode = mode

    def _look(self, home: Any, op: scaling.ScalingOperation) -> str:
        version = scaling.begin_restart(home, op)
        if scaling.Mode(self.mode) is scaling.Mode.IN_PLACE:
            state = scaling.switch_state(home, op.job, version)
            if state is scaling.Switch.WAITING:
                print(f"waiting for the driver of {op.job} to start v{version}, on the triggerer (no worker slot)")
                self._wait(home, op, version, triggers.SWITCH)
            if state is scaling.Switch.SWITCHED:
                return str(scaling.switched(op, version)["restarted"])
            scaling.driver_gone(op, version)
        return self._catch_up(home, op, version)

    def _resumed(self, home: Any, op: scaling.ScalingOperation, event: dict[str, Any], version: int) -> str:
        """The switch happened, the driver died, or time ran out."""
        if event["status"] == triggers.SWITCHED:
            return str(scaling.switched(op, version)["restarted"])
        if event["status"] == triggers.DRIVER_GONE:
            scaling.driver_gone(op, version)
            return self._catch_up(home, op, version)
        raise AirflowFailException(str(scaling.restart_timed_out(op, version, self._timeout())))

    def _catch_up(self, home: Any, op: scaling.ScalingOperation, version: int) -> str:
        return str(scaling.catch_up_run(home, op, version, master=_param("spark_master"))["restarted"])


class WaitCaughtUp(_DeferredStep):
    """Wait (deferred) until the new model reached the inputs' ends as of its activation; returns the seconds."""

    wait_param = ("catch_up_timeout_s", 600)

    def _look(self, home: Any, op: scaling.ScalingOperation) -> float:
        version, target = scaling.begin_catch_up(home, op)
        try:
            done, behind = scaling.catch_up_state(home, op.job, version, target)
        except Exception as error:
            if not scaling.input_outage(error):  # a bug fails the task; an outage is a look the trigger repeats
                raise
            print(f"could not look at v{version} of {op.job} ({error}): waiting on the triggerer, which looks again")
        else:
            if done:
                return float(scaling.caught_up(home, op)["caught_up_s"])
            print(
                f"v{version} of {op.job} is {scaling.behind_text(behind)} records behind the activation point: "
                "waiting on the triggerer (no worker slot)"
            )
        self._wait(home, op, version, triggers.CATCH_UP, target=target)
        raise AssertionError("unreachable: defer raises")

    def _resumed(self, home: Any, op: scaling.ScalingOperation, event: dict[str, Any], version: int) -> float:
        if event["status"] == triggers.CAUGHT_UP:
            return float(scaling.caught_up(home, op)["caught_up_s"])
        raise AirflowFailException(str(scaling.catch_up_timed_out(op, version, event.get("behind"), self._timeout())))


def _report(event: dict[str, Any]) -> None:
    line = f"the triggerer's wait ended: {event['status']} after {event['waited_s']:.1f}s ({event['looks']} looks)"
    print(line + (f"; last failed look: {event['error']}" if event.get("error") else ""))


def dag_run() -> DagRunRef:
    """This task's DAG run, recorded with the verdicts it produces so the UI can link a verdict to its run."""
    context = get_current_context()
    return DagRunRef(context["ti"].dag_id, context["run_id"])


def docs_in_ui() -> str | None:
    """The Data Docs' address in this Airflow's UI, for the task's log (the report's own line is a path)."""
    from airflow.configuration import conf

    from pipelines_airflow.datadocs import docs_address

    return docs_address(conf.get("api", "base_url", fallback=None))


@task(outlets=[QUALITY])
def verify_quality(op: dict[str, Any]) -> str:
    with noted_failure():
        verdict: str = scaling.verify(_home(), _op(op), sequence=_param("sequence_column"), dag_run=dag_run())["dq"]
    if link := docs_in_ui():
        print(f"Data Docs in Airflow: {link}")
    return verdict


@task(outlets=[SCALING_EVENTS])
def record_event(op: dict[str, Any]) -> dict[str, Any]:
    """Close the scaling event with its figures and release the lock (the teardown of ``begin``)."""
    with noted_failure():
        return scaling.finish(_home(), _op(op))


@task_group(group_id="scale")
def scaling_path(request: dict[str, Any]) -> None:
    """begin → stop → migrate → activate → restart → catch up → verify, and record (teardown)."""
    # arg-type: Airflow types a @task call with the function's own parameters, so an XComArg (the upstream task's
    # value, resolved at run time) cannot pass; its Task protocol says so itself (airflow.sdk.bases.decorator).
    begin = BeginScaling(task_id="begin", request=request)
    op = begin.output
    mode = stop_at_batch_boundary(op)  # type: ignore[arg-type]
    migrated = migrate_checkpoints(op)  # type: ignore[arg-type]
    activated = activate_model(op)  # type: ignore[arg-type]
    restarted = RestartJob(task_id="restart_job", op=op, mode=mode)
    caught_up = WaitCaughtUp(task_id="wait_caught_up", op=op)
    verified = verify_quality(op)  # type: ignore[arg-type]
    recorded = record_event(op).as_teardown(setups=begin)  # type: ignore[arg-type]
    mode >> migrated >> activated >> restarted >> caught_up >> verified >> recorded
