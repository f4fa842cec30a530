"""Keyed state that follows its keys: Delta tables in the home, a per-host cache on executors, a commit that lands
with the sink's (docs/design.md, "Keyed state")."""
