"""The ``cw-middleware`` command (also ``python -m cw_middleware``).

    cw-middleware estimate [FILE]        request JSON (completion kwargs; tags allowed) -> snapshot JSON
    cw-middleware demo [--model M]       a short mocked agent conversation, breakdown per turn

Heavy imports (LiteLLM) happen inside the commands that need them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional, Sequence

EXIT_OK, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_BACKEND = 0, 2, 3, 4


def _cmd_estimate(args: argparse.Namespace) -> int:
    source = sys.stdin if args.file in (None, "-") else open(args.file, encoding="utf-8")
    with source:
        try:
            request = json.load(source)
        except json.JSONDecodeError as exc:
            print(f"error: the request is not valid JSON ({exc.msg} at line {exc.lineno})", file=sys.stderr)
            return EXIT_USAGE
    if not isinstance(request, dict) or not isinstance(request.get("model"), str) or not isinstance(request.get("messages"), list):
        print("error: the request must be a JSON object with a 'model' string and a 'messages' list", file=sys.stderr)
        return EXIT_USAGE
    import cw_middleware as cw

    cw.configure(export="none")
    try:
        snapshot = cw.estimate(**request)
    except cw.TagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(snapshot.model_dump_json(indent=2))
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    import cw_middleware as cw

    from . import demo
    from .render import render

    cw.configure(export=args.export) if args.export else cw.configure()
    print(f"cw-middleware demo: a mocked agent on {args.model} (no API key, no network)", file=sys.stderr)

    def on_turn(turn: int, _: str) -> None:
        latest = cw.snapshots()[-1]
        print(render(latest, title=f"\nturn {turn}"))

    with cw.stage(run_id=args.run_id, stage_id="implement@1"):
        demo.run(args.model, cw.completion, on_turn, turns=args.turns)
    cw.flush()
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cw-middleware", description="What fills your model's context window.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("estimate", help="estimate a request (completion kwargs as JSON) locally")
    p.add_argument("file", nargs="?", help="request JSON file (default: stdin)")
    p.set_defaults(func=_cmd_estimate)
    p = sub.add_parser("demo", help="run a short mocked agent conversation and show its breakdown per turn")
    p.add_argument("--model", default="gpt-4o")
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--run-id", default="demo")
    p.add_argument("--export", help="file:PATH | otlp | none (default: CW_EXPORT or the embedded file)")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: Any = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
