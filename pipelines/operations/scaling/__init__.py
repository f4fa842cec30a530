"""A scaling operation, one resumable step at a time: what ``elastic_rescale`` and ``repartition_watch`` run.

    plan → begin (lock, recover) → stop → migrate → activate → restart → catch up → verify → finish

The steps are what the Airflow tasks, the CLI and the demo call, by these
names, so this package's namespace is the operation's interface; each module
is one part of it:

=============  ==============================================================
``operation``  the request, the operation (an XCom) and its scaling event
``start``      checks, the dry-run plan, the lock, settling dead operations
``steps``      stop, migrate, activate, verify, finish, and ``run_all``
``switch``     restart (in-place switch or catch-up run) and the catch-up
``readings``   driver liveness, input ends, lag, and the event's figures
=============  ==============================================================

Crash safety, resumption and why nothing compares two hosts' clocks:
docs/design.md, "Rescaling is a model switch, not a redeploy".
"""

from pipelines.operations.scaling.operation import (
    EXPANSION,
    RESCALE,
    Mode,
    Say,
    ScalingOperation,
    ScalingRequest,
    ScalingSkipped,
    Target,
    expansion_request,
    renew,
    reshard_request,
)
from pipelines.operations.scaling.readings import (
    default_sequence,
    end_positions,
    lag_behind,
    last_heartbeat,
    measure,
    records_replayed,
)
from pipelines.operations.scaling.start import apply_plan, begin, plan, settle_abandoned, validate
from pipelines.operations.scaling.steps import activate, finish, migrate, run_all, stop, verify
from pipelines.operations.scaling.switch import (
    CatchUp,
    Switch,
    begin_catch_up,
    begin_restart,
    behind_text,
    catch_up_run,
    catch_up_state,
    catch_up_timed_out,
    caught_up,
    driver_gone,
    input_outage,
    restart,
    restart_timed_out,
    switch_state,
    switched,
    wait_caught_up,
)

__all__ = [
    "EXPANSION",
    "RESCALE",
    "CatchUp",
    "Mode",
    "Say",
    "ScalingOperation",
    "ScalingRequest",
    "ScalingSkipped",
    "Switch",
    "Target",
    "activate",
    "apply_plan",
    "begin",
    "begin_catch_up",
    "begin_restart",
    "behind_text",
    "catch_up_run",
    "catch_up_state",
    "catch_up_timed_out",
    "caught_up",
    "default_sequence",
    "driver_gone",
    "end_positions",
    "expansion_request",
    "finish",
    "input_outage",
    "lag_behind",
    "last_heartbeat",
    "measure",
    "migrate",
    "plan",
    "records_replayed",
    "renew",
    "reshard_request",
    "restart",
    "restart_timed_out",
    "run_all",
    "settle_abandoned",
    "stop",
    "switch_state",
    "switched",
    "validate",
    "verify",
    "wait_caught_up",
]
