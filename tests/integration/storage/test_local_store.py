"""The local store's writes: whole or not at all, and no temporary file left behind, an interrupt included."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.storage.location import local
from pipelines.storage.objects import LocalStore


@pytest.mark.parametrize("method", ["write", "create"])
def test_a_write_interrupted_mid_file_leaves_the_old_object_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """Ctrl-C (or SIGTERM, which the CLI raises) while the temporary file was being written left it in the home
    for good: nothing else removes a writer's ``.NAME.UUID.tmp``."""
    store, place = LocalStore(), local(tmp_path / "state.json")
    if method == "write":
        store.write(place, b"before")
    real = Path.write_bytes

    def torn(self: Path, data: bytes) -> int:
        real(self, data[:3])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_bytes", torn)
    with pytest.raises(KeyboardInterrupt):
        getattr(store, method)(place, b"after, whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["state.json"] if method == "write" else [])
    if method == "write":
        assert (tmp_path / "state.json").read_bytes() == b"before"
