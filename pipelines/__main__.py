"""``python -m pipelines``: the operator CLI (see ``pipelines.cli``)."""

from pipelines.cli import main

raise SystemExit(main())
