# One image for every process of a deployment: Airflow's servers and workers, Spark's master, workers and drivers.
# Built by docker-compose.yaml; the same pins as scripts/setup.sh (requirements.txt + constraints.txt).
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/pipelines
COPY requirements.txt constraints.txt pyproject.toml README.md ./
RUN pip install --no-cache-dir -r requirements.txt -c constraints.txt psycopg2-binary
# Spark's JVM libraries (Delta Lake, s3a, Spark's Kafka source): the same Maven step as scripts/setup.sh, into the
# folder pipelines/runtime/session.py puts on every driver's and executor's class path. Every host of a deployment
# runs this image, so the jars are at the same path on each. Maven and its download cache leave with the layer.
COPY jvm ./jvm
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends maven \
 && mvn -B -q -f jvm/spark/pom.xml -Dmaven.repo.local=/opt/m2-build dependency:copy-dependencies \
        -DoutputDirectory=/opt/pipelines/.jvm/spark-jars \
 && rm -rf /opt/m2-build \
 && apt-get purge -y --auto-remove maven \
 && rm -rf /var/lib/apt/lists/*
COPY pipelines ./pipelines
COPY dags ./dags
COPY plugins ./plugins
COPY include ./include
RUN pip install --no-cache-dir --no-deps -e . \
 && pip install --no-cache-dir --no-deps -e plugins
# ^ the Airflow provider and plugin (elastic-pipelines-airflow): every Airflow process finds the `pipelines`
#   connection type, the page and the trigger through its entry points, so no plugins folder is configured.
# An editable install compiles nothing: compile once, so no worker or task compiles the package again.
RUN python -m compileall -q pipelines dags plugins include
# The class-data archive of a Spark driver's classes (pipelines/runtime/jvm_archive.py), made by running a small job.
RUN PYSPARK_PYTHON=/usr/local/bin/python python -m pipelines.runtime.jvm_archive

ENV PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python \
    PIPELINES_HOME=/data/pipelines-home \
    AIRFLOW_HOME=/opt/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/pipelines/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=False
ENTRYPOINT ["/usr/bin/tini", "--"]
