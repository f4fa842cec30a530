"""Local servers for tests, demos and benchmarks only: never imported by the platform's own code paths."""
