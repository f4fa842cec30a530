"""Every Spark driver maps the class-data archive set-up built, and goes without one that no longer fits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipelines.runtime import classpath, jvm_archive


def _jvm_maps(spark: Any) -> str:
    import psutil

    gateway = psutil.Process(spark.sparkContext._gateway.proc.pid)
    jvm = next(p for p in [gateway, *gateway.children(recursive=True)] if p.name() == "java")
    return Path(f"/proc/{jvm.pid}/maps").read_text()


def test_the_shared_session_s_jvm_maps_the_archive_set_up_built(spark: Any) -> None:
    assert jvm_archive.java_options(), "scripts/setup.sh builds the archive for this JVM and these jars"
    assert str(jvm_archive.ARCHIVE) in _jvm_maps(spark), "the driver maps the archive's classes"


def test_an_archive_made_for_other_jars_or_another_jvm_is_not_offered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, stamp = tmp_path / "a.jsa", tmp_path / "a.json"
    monkeypatch.setattr(classpath, "ARCHIVE", archive)
    monkeypatch.setattr(classpath, "STAMP", stamp)
    assert classpath.java_options() == "", "no archive, no option"
    archive.write_bytes(b"not really an archive")
    current = classpath.stamp()
    stamp.write_text(json.dumps(current))
    assert classpath.java_options().startswith(f"-XX:SharedArchiveFile={archive} ")
    for key in ("java", "jars"):
        stamp.write_text(json.dumps({**current, key: "something else"}))
        assert classpath.java_options() == "", f"an archive for another {key} is not offered"
