"""Multi-host fixtures: ``cluster``, the test session's hosts (Linux namespaces, see ``hosts.py``), ``store``,
an S3 server (SeaweedFS) in host ``store`` bound to that host's address, and ``spark_cluster``, a standalone Spark
master on host ``master`` with a worker on ``worker1`` and ``worker2``, whose daemons (and so their executors) have
the store's AWS variables in their environment, as every host of a deployment on an object-store home needs.

One set of hosts serves the whole session (building it takes about a second, tearing it down less). A test may
kill a host whole (``Host.kill_all``); the ``cluster`` fixture boots any host found down after a test, so the next
test starts with every host up (a booted host has an empty ``/tmp`` and ``/dev/shm``, as after a reboot).
A machine that cannot make the hosts fails every test here with the missing capability named: never a skip.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.hosts import Cluster, NamespacesUnavailable
from testbed.spark import SparkCluster, start_spark_cluster
from testbed.store import StoreHost, start_store

HOSTS = ("store", "master", "worker1", "worker2", "driver1", "driver2")
"""The object store, the Spark master, two worker hosts, a driver host and a second one to move the driver to."""


@pytest.fixture(scope="session")
def cluster_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    hosts = Cluster(HOSTS, tmp_path_factory.mktemp("cluster"))
    missing = None
    try:
        hosts.start()
    except NamespacesUnavailable as e:
        missing = str(e)
    if missing is not None:  # failed outside the handler: one message, no chained traceback
        pytest.fail(f"multi-host tests need Linux namespaces on this machine: {missing}", pytrace=False)
    try:
        yield hosts
    finally:
        hosts.close()


@pytest.fixture
def cluster(cluster_session: Cluster) -> Iterator[Cluster]:
    """The session's hosts, every one up; a host a test left down is booted again afterwards."""
    yield cluster_session
    for host in cluster_session:
        if not host.alive:
            host.kill_all()  # reaps what is left of it
            host.boot()


@pytest.fixture(scope="session")
def store(cluster_session: Cluster) -> Iterator[StoreHost]:
    """The session's S3 server, in host ``store`` at its own address; tests create buckets of their own."""
    with start_store(cluster_session["store"]) as served:
        yield served


@pytest.fixture(scope="session")
def spark_cluster(cluster_session: Cluster, store: StoreHost) -> Iterator[SparkCluster]:
    """One standalone Spark cluster for the session: master on ``master``, workers on ``worker1`` and ``worker2``.

    A test that kills a worker host starts its worker again (``spark_cluster.start_worker(host)`` once the host is
    booted) and waits for it (``wait_for_workers``), so later tests find both workers.
    """
    hosts = cluster_session
    with start_spark_cluster(hosts["master"], [hosts["worker1"], hosts["worker2"]], env=store.env) as spark:
        yield spark
