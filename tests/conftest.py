"""Shared test setup: markers by folder, so `pytest -m unit` runs the fast pure-logic suite."""

from __future__ import annotations

from pathlib import Path

import pytest

_MARK_BY_FOLDER = {
    "unit": pytest.mark.unit,
    "integration": pytest.mark.integration,
    "e2e": pytest.mark.e2e,
    "faults": pytest.mark.faults,
    "cluster": pytest.mark.cluster,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        try:
            folder = Path(item.fspath).relative_to(root).parts[0]
        except ValueError:
            continue
        mark = _MARK_BY_FOLDER.get(folder)
        if mark is not None:
            item.add_marker(mark)
