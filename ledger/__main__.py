from ._cli import run

raise SystemExit(run())
