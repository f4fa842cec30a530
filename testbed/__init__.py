"""The harness: local servers, free ports, and hosts made of Linux namespaces (docs/layout.md).

Shared by the tests, the benchmarks (which must not import from ``tests``) and
the Kafka and Kinesis demos: a top-level package run from the repository root,
not part of the installed distribution (which is ``pipelines`` only), so a
deployment never carries a test broker. The hosts need Linux with
CAP_NET_ADMIN and CAP_SYS_ADMIN (``hosts.require_namespaces`` names what is missing).
"""
