"""The Spark side: the elastic streaming source, the processing step, the exactly-once Delta sink, the driver."""
