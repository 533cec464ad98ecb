"""`logra-repro`: the kit's command line."""

from __future__ import annotations

import argparse
import sys
import time

from logra import notebooks


def _reproduce(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    try:
        notebooks.reproduce(args.scale, only=args.only)
    except notebooks.NotebookFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"reproduce finished in {time.perf_counter() - start:.0f} s; see figures/")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logra-repro", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    rep = commands.add_parser("reproduce", help="execute every notebook, regenerate figures/")
    rep.add_argument("--scale", default="default", help="smoke, default, or a model scale")
    rep.add_argument("--only", nargs="*", help="run only these notebooks (names without .ipynb)")
    rep.set_defaults(func=_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
