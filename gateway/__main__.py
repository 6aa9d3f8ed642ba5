"""`python -m gateway` runs the same command line as the `gateway` script."""

from gateway.cli import main

raise SystemExit(main())
