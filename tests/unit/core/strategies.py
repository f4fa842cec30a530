"""Hypothesis strategies for the pure core: small but varied inputs."""

from __future__ import annotations

from hypothesis import strategies as st

from pipelines.core.groupers import GROUPERS
from pipelines.core.ssp import SystemStream

stream_names = st.sampled_from(["events", "clicks", "orders.v2", "pay_ments"])
factors = st.integers(min_value=1, max_value=12)
partition_counts = st.integers(min_value=1, max_value=9)
containers = st.integers(min_value=1, max_value=7)
elastic_groupers = st.sampled_from(sorted(n for n, g in GROUPERS.items() if g().supports_elasticity))


@st.composite
def inputs(draw: st.DrawFn) -> dict[SystemStream, int]:
    names = draw(st.lists(stream_names, min_size=1, max_size=3, unique=True))
    return {SystemStream("deltalog", n): draw(partition_counts) for n in names}
