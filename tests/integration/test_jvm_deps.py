"""Spark's pinned JVM libraries: fetched without a class pyspark already ships, and on every session's class path."""

from __future__ import annotations

import re
import zipfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from pipelines.runtime.session import SPARK_JARS, MissingJarsError, spark_classpath

pytestmark = pytest.mark.integration


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def _classes(folder: Path) -> dict[str, str]:
    """Every class file of the folder's jars, with the jar it is in (module descriptors and manifests left out)."""
    found = {}
    for jar in sorted(folder.glob("*.jar")):
        with zipfile.ZipFile(jar) as z:
            for name in z.namelist():
                if name.endswith(".class") and not name.startswith("META-INF/") and name != "module-info.class":
                    found[name] = jar.name
    return found


def test_no_class_is_on_the_class_path_twice() -> None:
    ours, pysparks = _classes(SPARK_JARS), _classes(_pyspark_jars())
    # every Spark module carries the same empty stub, so that its jar is never empty
    twice = {
        c: (ours[c], pysparks[c]) for c in ours.keys() & pysparks.keys() if not c.startswith("org/apache/spark/unused/")
    }
    assert not twice, f"{len(twice)} classes pyspark ships as well, e.g. {sorted(twice.items())[:5]}"
    assert len(ours) > 10_000  # (the set is there at all)


def test_the_pinned_versions_match_pyspark_and_delta_spark() -> None:
    jars = {p.name for p in SPARK_JARS.glob("*.jar")}
    pyspark_jars = {p.name for p in _pyspark_jars().glob("*.jar")}
    hadoop = next(
        re.fullmatch(r"hadoop-client-api-(.+)\.jar", j).group(1)
        for j in pyspark_jars
        if j.startswith("hadoop-client-api-")
    )  # type: ignore[union-attr]
    import pyspark

    assert f"hadoop-aws-{hadoop}.jar" in jars, "s3a must be the Hadoop that pyspark ships"
    assert f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar" in jars
    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    assert f"delta-spark_{spark_minor}_2.13-{version('delta-spark')}.jar" in jars, "Delta's Python API and jar differ"
    assert not any(j.startswith("bundle-") for j in jars), "the AWS SDK's 686 MB bundle came back"


def test_every_session_loads_them_from_the_class_path_with_deltas_sql(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    for name in (
        "io.delta.tables.DeltaTable",
        "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "org.apache.spark.sql.kafka010.KafkaSourceProvider",
    ):
        cls = jvm.java.lang.Class.forName(name)
        assert cls.getClassLoader() == jvm.java.lang.ClassLoader.getSystemClassLoader(), name
        assert str(SPARK_JARS) in cls.getProtectionDomain().getCodeSource().getLocation().getPath(), name
    assert spark.conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"
    assert spark.sql("SHOW FUNCTIONS LIKE 'current_date'").count() == 1  # the session's catalog (Delta's) answers


def test_missing_jars_are_one_clear_error_naming_the_set_up(tmp_path: Path) -> None:
    with pytest.raises(MissingJarsError, match=r"run scripts/setup\.sh"):
        spark_classpath(tmp_path)
    (tmp_path / "a-1.jar").write_bytes(b"")
    assert spark_classpath(tmp_path) == f"{tmp_path}/*"
