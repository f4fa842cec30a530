"""The operator's view of a job: what it did over time, which virtual task is behind, what its inputs hold.

Pure modules turn control-plane rows into figures; one module reads them.

===============  ==================================================================
module           holds
===============  ==================================================================
``series``       metric rows and scaling events -> per-batch points, time series, markers
``tasks``        the active model, checkpoints and per-task rows -> the per-task table
``skew``         per-task records and distinct keys -> whether a key bucket is significantly hot
``drivers``      the drivers table's latest rows -> whether the job's driver runs, where, since when
``svg``          a time series with its markers -> the layout of a plot (``templates/observe/plot.svg`` draws it)
``html``         the one Jinja2 environment (autoescape) of the operator's views and the Airflow page
``render``       an observation -> HTML (the Airflow page, ``status --export``) and text (``status``)
``systems``      each input as its users know it (Kafka group lag, Kinesis lineage); I/O, time-limited
``collect``      reads the control plane (last N minutes only) and builds one job's observation
``openmetrics``  each job's signals -> OpenMetrics families (``pipelines metrics``, for Prometheus)
``signals``      reads each job's signals (last minute of batches, driver, lock, last switch)
===============  ==================================================================
"""
