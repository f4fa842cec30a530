"""Local servers for tests and demos only (never imported by the platform's own code paths)."""
