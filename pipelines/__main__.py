"""``python -m pipelines``: the operator CLI (see ``pipelines.cli``)."""

import os
import sys

if "--verbose" not in sys.argv[1:]:
    # delta-rs logs from Rust straight to the terminal at WARN, and reads RUST_LOG once, when deltalake is first
    # imported: an S3 home without credentials printed a dozen lines of its AWS SDK's warnings before the one
    # `error:` line. Quiet like the other libraries' logs (README, "Home on object storage"); a RUST_LOG given is
    # kept, and --verbose shows everything.
    os.environ.setdefault("RUST_LOG", "error")

try:
    from pipelines.cli import main
except KeyboardInterrupt:  # Ctrl-C while the CLI is still loading: nothing has started yet
    raise SystemExit(130) from None

raise SystemExit(main())
