"""Local servers for tests and demos only: each starts a real server on 127.0.0.1 and stops it.

Nothing in the platform itself imports this package; a deployment points at
its own servers (an S3 store through the standard AWS variables, a Kafka
cluster through the job's connection settings).
"""
