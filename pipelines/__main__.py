"""``python -m pipelines``: the operator CLI (see ``pipelines.cli``)."""

try:
    from pipelines.cli import main
except KeyboardInterrupt:  # Ctrl-C while the CLI is still loading: nothing has started yet
    raise SystemExit(130) from None

raise SystemExit(main())
