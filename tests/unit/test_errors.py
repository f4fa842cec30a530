"""Platform errors found in the text of a Spark failure (a Python worker's traceback inside a Java exception)."""

from pipelines.errors import DamagedTableError, PipelinesError, StreamError, raised_inside

TRACE = """org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown: Traceback:
  File "/x/pipelines/systems/deltalog/reader.py", line 46, in read
pipelines.errors.StreamError: stream 'events': its storage is unavailable
During handling of the above exception, another exception occurred:
pipelines.errors.DamagedTableError: stream 'events' cannot be read; nothing was changed. SQLSTATE: 38000
	at org.apache.spark.sql.execution.streaming.runtime.StreamExecution.run(StreamExecution.scala:236)
"""


def test_the_innermost_platform_error_is_found_as_its_own_class_without_spark_s_state() -> None:
    error = raised_inside(TRACE)
    assert isinstance(error, DamagedTableError)
    assert str(error) == "stream 'events' cannot be read; nothing was changed."


def test_an_unknown_error_class_becomes_the_base_class_and_no_error_is_none() -> None:
    error = raised_inside("pipelines.errors.NoSuchError: something")
    assert type(error) is PipelinesError and str(error) == "something"
    assert raised_inside("java.lang.OutOfMemoryError: Java heap space") is None
    assert isinstance(raised_inside(TRACE.split("During")[0]), StreamError)
