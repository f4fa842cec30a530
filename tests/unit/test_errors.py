"""Platform errors found in the text of a Spark failure (a Python worker's traceback inside a Java exception)."""

import pytest

from pipelines.errors import (
    DamagedTableError,
    PipelinesError,
    StreamError,
    last_error_line,
    one_line,
    raised_inside,
    store_unanswered,
)

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


# delta-rs 1.6's own texts (coloured chains, as it raises them), met with a real store paused, a 503 and a closed port
_TIMED_OUT = (
    "Kernel error -> Generic S3 error\n          \x1b[31m↳\x1b[0m Error performing list request\n"
    "           \x1b[31m↳\x1b[0m Error performing GET http://127.0.0.1:49677/b?list-type=2&prefix=t%2F_delta_log%2F in "
    "6.2s, after 2 retries, max_retries\n            \x1b[31m↳\x1b[0m 2, retry_timeout\n"
    "             \x1b[31m↳\x1b[0m 8s  - HTTP error\n              \x1b[31m↳\x1b[0m error sending request\n"
    "               \x1b[31m↳\x1b[0m operation timed out\n"
)
_SERVER_ERROR = (
    "Kernel error -> Generic S3 error\n  \x1b[31m↳\x1b[0m Error performing GET http://127.0.0.1:39167/b/t/_delta_log/"
    "_last_checkpoint in 303ms, after 2 retries, max_retries\n  \x1b[31m↳\x1b[0m 2, retry_timeout\n"
    "  \x1b[31m↳\x1b[0m 8s  - Server returned non-2xx status code\n  \x1b[31m↳\x1b[0m 503 Service Unavailable\n"
)
_REFUSED = (
    "Kernel error -> Generic S3 error\n  ↳ Error performing GET http://127.0.0.1:35927/b/t/_delta_log/_last_checkpoint"
    " in 279ms, after 2 retries, max_retries\n  ↳ 2, retry_timeout\n  ↳ 8s  - HTTP error\n  ↳ error sending request\n"
    "  ↳ client error (Connect)\n  ↳ tcp connect error\n  ↳ Connection refused (os error 111)\n"
)


@pytest.mark.parametrize("text", [_TIMED_OUT, _SERVER_ERROR, _REFUSED], ids=["timed-out", "503", "refused"])
def test_a_store_that_does_not_answer_or_fails_with_a_server_error_is_an_outage(text: str) -> None:
    assert store_unanswered(text)


@pytest.mark.parametrize(
    "text",
    [
        "Generic delta kernel error: No files in log segment",
        "Object at location b/t/part-0001.parquet not found: Client error with status 404 Not Found: No Body",
        "Parquet error: Invalid Parquet file. Corrupt footer",
        "Generic S3 error: Client error with status 403 Forbidden: <?xml version='1.0'?><Error><Code>"
        "SignatureDoesNotMatch</Code><Message>wrong</Message></Error>",
        "Operation not supported\n ↳ an error occurred while loading credentials\n ↳ error sending request\n"
        " ↳ operation timed out",
        "Couldn't deserialize arrow-rs error: Json error: expected value at line 1 column 1",
    ],
    ids=["no-log", "missing-file", "garbled-parquet", "wrong-keys", "no-credentials", "garbled-commit"],
)
def test_damage_a_missing_object_and_the_user_s_own_mistakes_are_no_outage(text: str) -> None:
    assert not store_unanswered(text)


@pytest.mark.parametrize(
    "text",
    [
        "When reading information for key 'h/s/part-0.parquet' in bucket 'b': AWS Error NETWORK_CONNECTION during "
        "HeadObject operation: curlCode: 7, Couldn't connect to server",
        "AWS Error SLOW_DOWN during GetObject operation: Please reduce your request rate.",
        "AWS Error UNKNOWN (HTTP status 503) during GetObject operation: curlCode: 28, Timeout was reached",
    ],
)
def test_pyarrow_s_s3_outages_are_outages_too(text: str) -> None:
    assert store_unanswered(text)


SESSION_FAILED = """WARNING: Using incubator modules: jdk.incubator.vector
26/11/29 06:41:36 WARN Utils: Set SPARK_LOCAL_IP if you need to bind to another address
Traceback (most recent call last):
  File "/x/pipelines/runtime/driver.py", line 540, in <module>
    sys.exit(main())
py4j.protocol.Py4JJavaError: An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.
: org.apache.spark.SparkException: Failed to add file:/missing.jar
\tat org.apache.spark.SparkContext.addJar(SparkContext.scala:2178)
Caused by: java.io.FileNotFoundException: Jar /missing.jar not found
\tat org.apache.spark.SparkContext.addLocalJarFile$1(SparkContext.scala:2099)
\t... 15 more

26/11/29 06:41:37 INFO ShutdownHookManager: Shutdown hook called
"""


def test_a_dead_driver_s_log_is_its_innermost_exception_line_not_a_frame_or_spark_s_chatter() -> None:
    assert last_error_line(SESSION_FAILED) == "Caused by: java.io.FileNotFoundException: Jar /missing.jar not found"
    assert last_error_line(SESSION_FAILED.split("Caused by")[0]) == (
        "org.apache.spark.SparkException: Failed to add file:/missing.jar"
    )


def test_a_log_without_an_exception_is_its_last_plain_line_and_an_empty_one_is_none() -> None:
    assert last_error_line("26/11/29 06:41:36 INFO X: up\nKilled\n\n") == "Killed"
    assert last_error_line("26/11/29 06:41:36 WARN X: slow\n\tat a.B.c(B.java:1)\n") is None
    assert last_error_line("") is None
    assert len(last_error_line("java.lang.Error: " + "x" * 5000) or "") == 500
