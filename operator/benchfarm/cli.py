"""The `benchfarm` command: lab lifecycle, parsing, reports and comparisons for people and CI."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: benchfarm lab up|down|status | operator | parse SUITE FILE | "
              "report NS/RUN | compare RUN BASELINE | import-guide RST")
        return 0
    cmd, rest = args[0], args[1:]
    if cmd == "lab":
        from . import devlab
        return devlab.main(rest)
    print(f"benchfarm: unknown command {cmd!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
