"""The ``cw-middleware`` command (also ``python -m cw_middleware``).

    cw-middleware estimate [FILE]                    request JSON (completion kwargs; tags allowed) -> snapshot JSON
    cw-middleware demo [--model M]                   a mocked agent run, exported to the embedded file and read back
    cw-middleware show RUN_ID STAGE_ID [--json]      a stage's context window, read back from the backend
    cw-middleware stages RUN_ID [--json]             a run's stages
    cw-middleware serve [--host H] [--port N]        the same answers over HTTP (see server.py)

``--backend URL`` names where to read (``file:PATH``; default $CW_BACKEND, else the
embedded export file). Exit codes: 0 ok, 2 bad input, 3 not found, 4 backend error.
Heavy imports (LiteLLM) happen only inside ``estimate`` and ``demo``: the read
commands start in a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, Optional

EXIT_OK, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_BACKEND = 0, 2, 3, 4


def _cmd_estimate(args: argparse.Namespace) -> int:
    try:
        source = sys.stdin if args.file in (None, "-") else open(args.file, encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot read {args.file!r} ({exc.strerror})", file=sys.stderr)
        return EXIT_USAGE
    with source:
        try:
            request = json.load(source)
        except json.JSONDecodeError as exc:
            print(f"error: the request is not valid JSON ({exc.msg} at line {exc.lineno})", file=sys.stderr)
            return EXIT_USAGE
        except UnicodeDecodeError:
            print("error: the request is not UTF-8 text", file=sys.stderr)
            return EXIT_USAGE
        except RecursionError:
            print("error: the request is nested too deeply to read", file=sys.stderr)
            return EXIT_USAGE
    if (
        not isinstance(request, dict)
        or not isinstance(request.get("model"), str)
        or not isinstance(request.get("messages"), list)
    ):
        print("error: the request must be a JSON object with a 'model' string and a 'messages' list", file=sys.stderr)
        return EXIT_USAGE
    import cw_middleware as cw

    cw.configure(export="none")
    try:
        snapshot = cw.estimate(**request)
    except cw.TagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (TypeError, ValueError, AttributeError, RecursionError) as exc:
        # A field of the wrong shape (e.g. "tools": 5). The type only: the message could quote the request.
        print(
            f"error: the request has a field of the wrong shape ({type(exc).__name__}); see `litellm.completion`'s arguments",
            file=sys.stderr,
        )
        return EXIT_USAGE
    print(snapshot.model_dump_json(indent=2))
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    import cw_middleware as cw

    from . import demo
    from .render import render

    try:
        runtime = cw.configure(export=args.export) if args.export else cw.configure()
    except cw.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"cw-middleware demo: a mocked agent on {args.model} (no API key, no network)", file=sys.stderr)

    def on_turn(turn: int, _: str) -> None:
        latest = cw.snapshots()[-1]
        print(render(latest, title=f"\nturn {turn} (in process)"))

    stage_id = "implement@1"
    with cw.stage(run_id=args.run_id, stage_id="plan@1", kind="planning"):
        pass
    with cw.stage(run_id=args.run_id, stage_id=stage_id):
        demo.run(args.model, cw.completion, on_turn, turns=args.turns)
    cw.flush()
    path = runtime.config.export_path
    if path is None:
        print(f"\n(export={runtime.config.export}: nothing to read back locally)", file=sys.stderr)
        return EXIT_OK
    backend = f"file:{path}"
    with cw.reader(backend) as reader:
        print(f"\nread back from {backend}:")
        print(_render_stages(args.run_id, reader.stages(args.run_id)))
        print(render(reader.context_window(args.run_id, stage_id), title=f"\n{args.run_id} / {stage_id}"))
    print(f"\ntry: cw-middleware show {args.run_id} {stage_id} --backend {backend}", file=sys.stderr)
    return EXIT_OK


def _render_stages(run_id: str, stages: Any) -> str:
    from .render import render_stages

    return render_stages(run_id, stages)


def _open_reader(args: argparse.Namespace) -> Any:
    from .readback import reader

    return reader(args.backend)


def _read_errors(fn: Any) -> Any:
    """CLI error mapping: bad input 2, not found 3, backend failure 4; messages, never tracebacks."""

    def run(args: argparse.Namespace) -> int:
        from .errors import BackendError, ConfigError, NotFound

        try:
            return int(fn(args) or 0)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except NotFound as exc:
            print(f"not found: {exc}", file=sys.stderr)
            backend = str(getattr(args, "backend", "") or "")
            if backend.startswith("file:") and not os.path.exists(backend[5:]):
                print(
                    f"  (there is no telemetry file at {backend[5:]!r} yet: has anything been exported there?)", file=sys.stderr
                )
            return EXIT_NOT_FOUND
        except BackendError as exc:
            print(f"backend error: {exc}", file=sys.stderr)
            return EXIT_BACKEND

    return run


@_read_errors
def _cmd_show(args: argparse.Namespace) -> int:
    with _open_reader(args) as reader:
        answer = reader.context_window(args.run_id, args.stage_id)
    if args.json:
        print(answer.model_dump_json(indent=2))
    else:
        from .render import render

        print(render(answer, title=f"{args.run_id} / {args.stage_id}  ({reader.url})", top_sources=args.top))
    return EXIT_OK


@_read_errors
def _cmd_stages(args: argparse.Namespace) -> int:
    with _open_reader(args) as reader:
        stages = reader.stages(args.run_id)
    if args.json:
        print(json.dumps({"run_id": args.run_id, "stages": [s.as_dict() for s in stages]}, indent=2))
    else:
        print(_render_stages(args.run_id, stages))
    return EXIT_OK


@_read_errors
def _cmd_serve(args: argparse.Namespace) -> int:
    import os

    from .server import make_server

    token = args.token or os.environ.get("CW_SERVE_TOKEN") or None
    if args.host not in ("127.0.0.1", "localhost", "::1") and not token:
        print(f"warning: serving on {args.host} without a bearer token (--token or CW_SERVE_TOKEN)", file=sys.stderr)
    reader = _open_reader(args)
    try:
        server = make_server(reader, args.host, args.port, token)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port} ({exc.strerror})", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"serving {reader.url} on {server.url}  (GET /api/v1/runs/RUN/stages/STAGE/context-window, /openapi.json)",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        reader.close()
    return EXIT_OK


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 0 and 65535, got {port}")
    return port


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
    backend_help = "file:PATH (default: $CW_BACKEND, else the embedded export file)"
    p = sub.add_parser("show", help="a stage's context window, read back from the telemetry backend")
    p.add_argument("run_id")
    p.add_argument("stage_id")
    p.add_argument("--backend", help=backend_help)
    p.add_argument("--json", action="store_true", help="the StageContextWindow contract JSON")
    p.add_argument("--top", type=int, default=8, help="top sources to list (default 8)")
    p.set_defaults(func=_cmd_show)
    p = sub.add_parser("stages", help="the stages of a run")
    p.add_argument("run_id")
    p.add_argument("--backend", help=backend_help)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_stages)
    p = sub.add_parser("serve", help="serve the read-back API over HTTP (loopback by default)")
    p.add_argument("--backend", help=backend_help)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_port, default=8765)
    p.add_argument("--token", help="require this bearer token (also $CW_SERVE_TOKEN)")
    p.set_defaults(func=_cmd_serve)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result: Any = args.func(args)
    except BrokenPipeError:
        # The reader of our output went away (`| head`): not an error. Point stdout at
        # devnull so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
