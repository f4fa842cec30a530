"""Platform errors found in the text of a Spark failure (a Python worker's traceback inside a Java exception)."""

from pipelines.errors import DamagedTableError, PipelinesError, StreamError, one_line, raised_inside

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


def test_a_coloured_chain_of_causes_becomes_one_line() -> None:
    text = (
        "Operation not supported\n          \x1b[31m↳\x1b[0m an error occurred while loading credentials\n"
        "           \x1b[31m↳\x1b[0m failed to load IMDS session token\n"
    )
    assert one_line(text) == (
        "Operation not supported: an error occurred while loading credentials: failed to load IMDS session token"
    )


def test_one_line_keeps_a_plain_message_and_drops_blank_and_repeated_lines() -> None:
    assert one_line("No such file or directory") == "No such file or directory"
    assert one_line("a\n\n  a\n  Caused by: b \n") == "a: b"
    assert one_line("") == ""


def test_an_s3_error_body_is_its_code_and_message() -> None:
    text = (
        "Generic S3 error: Error performing list request: Server returned non-2xx status code: 403 Forbidden: "
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SignatureDoesNotMatch</Code><Message>The signature '
        "does not match.</Message><Resource>/b</Resource></Error>"
    )
    assert one_line(text) == (
        "Generic S3 error: Error performing list request: Server returned non-2xx status code: 403 Forbidden: "
        "SignatureDoesNotMatch: The signature does not match."
    )
