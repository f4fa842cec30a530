"""The operator's view of a job: what it did over time, which virtual task is behind, what its inputs hold.

Pure modules turn control-plane rows into figures; one module reads them.

===============  ==================================================================
module           holds
===============  ==================================================================
``series``       metric rows and scaling events -> per-batch points, time series, markers
``tasks``        the active model, checkpoints and per-task rows -> the per-task table
``svg``          a time series with its markers -> an inline SVG plot (no JS, no CDN)
``render``       an observation -> HTML (the Airflow page, ``status --export``) and text (``status``)
``systems``      each input as its users know it (Kafka group lag, Kinesis lineage); I/O, time-limited
``collect``      reads the control plane (last N minutes only) and builds one job's observation
===============  ==================================================================
"""
