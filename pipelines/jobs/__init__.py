"""Jobs: their YAML configuration and the contract of the user's process function."""
