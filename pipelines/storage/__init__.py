"""The home's storage: where it is (``location``), the one door to its bytes (``objects``), S3 settings, checks."""
