"""``python -m tileattn info``: what ``tileattn info`` (the command-line tool) prints."""

import sys

from ._tileattn import __version__, build_report


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["info"]:
        sys.stdout.write(build_report())
        return 0
    if args in (["--version"], ["version"]):
        print(__version__)
        return 0
    print("usage: python -m tileattn info | --version", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
