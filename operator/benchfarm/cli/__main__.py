"""`python -m benchfarm.cli`: the `benchfarm` command."""

from benchfarm.cli.entry import main

if __name__ == "__main__":
    raise SystemExit(main())
