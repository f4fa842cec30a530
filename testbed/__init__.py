"""Hosts made of Linux namespaces on one machine, an S3 store and a standalone Spark cluster across them.

Shared by the multi-host tests (``tests/cluster``) and the cluster benchmark (``benchmarks/bench_cluster.py``),
which must not import from ``tests``: a top-level package like ``benchmarks``, run from the repository root,
not part of the installed distribution (which is ``pipelines`` only). Linux only; needs CAP_NET_ADMIN and
CAP_SYS_ADMIN (``hosts.require_namespaces`` names what is missing).
"""
