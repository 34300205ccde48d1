"""The ``cw-middleware`` command (also ``python -m cw_middleware``).

    cw-middleware estimate [FILE]                    request JSON (completion kwargs; tags allowed) -> snapshot JSON
    cw-middleware demo [--model M] [--run-id ID]     a mocked agent run, exported to the embedded file and read back
    cw-middleware runs [--json]                      the runs the backend holds, newest first
    cw-middleware show RUN_ID STAGE_ID [--json]      a stage's context window, read back from the backend
    cw-middleware show RUN_ID STAGE_ID --history     the stage over time (one row per call, compactions marked)
    cw-middleware summary RUN_ID [--json]            a run over its stages: calls, tokens, peak, cost per category
    cw-middleware stages RUN_ID [--json]             a run's stages
    cw-middleware serve [--host H] [--port N]        the same answers over HTTP (see _serve/server.py)

``--backend URL`` names where to read (the forms of `readback.BACKENDS`; default
$CW_BACKEND, else the embedded export file). Exit codes: 0 ok, 2 bad input (and a
bare ``cw-middleware``, which prints the help), 3 not found, 4 backend error.
Heavy imports (LiteLLM) happen only inside ``estimate`` and ``demo``: the read
commands start in a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Optional

from .reading import EXIT_BACKEND as EXIT_BACKEND  # the exit codes are this command's (docs/gen_reference.py reads them here)
from .reading import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, file_hint, file_note, indexing_note, read_errors


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
    if not isinstance(request.get("tools", []), (list, type(None))):
        # estimate() reads an odd tool list leniently (as LiteLLM's callers may send one); a file given
        # to the CLI is checked strictly, so a typo is an error, not a silently smaller count.
        print("error: the request has a field of the wrong shape ('tools' must be a list)", file=sys.stderr)
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


def _fresh_run_id() -> str:
    """``demo-20261201T091500-3f2a``: re-runs of the demo never pile into one run."""
    import secrets
    from datetime import UTC, datetime

    return f"demo-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}"


def _known_model(model: str) -> Optional[str]:
    """None when LiteLLM can route ``model``; else a sentence saying why not (no LiteLLM traceback)."""
    import contextlib
    import io

    from .._kernel.offline import litellm

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # LiteLLM prints a provider list on failure
            litellm().get_llm_provider(model)
    except Exception:  # noqa: BLE001 - LiteLLM's BadRequestError and whatever else it raises for a bad name
        return (
            f"LiteLLM does not know which provider serves model {model!r}; "
            "name a known model (gpt-4o) or prefix the provider (openai/my-model, anthropic/claude-sonnet-4-5)"
        )
    return None


def _cmd_demo(args: argparse.Namespace) -> int:
    import cw_middleware as cw

    from .._kernel.contract import validate_id
    from . import demo
    from .render import render

    try:
        runtime = cw.configure(export=args.export) if args.export else cw.configure()
        run_id = validate_id("run_id", args.run_id or _fresh_run_id())
    except cw.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    problem = _known_model(args.model)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    print(f"cw-middleware demo: a mocked agent on {args.model} (no API key, no network), run {run_id}", file=sys.stderr)

    def on_turn(turn: int, _: str) -> None:
        latest = cw.snapshots()[-1]
        print(render(latest, title=f"\nturn {turn}: this process's snapshot (cw.snapshots()), before export"))

    stage_id = "implement@1"
    try:
        with cw.stage(run_id=run_id, stage_id="plan@1", kind="planning"):
            pass
        with cw.stage(run_id=run_id, stage_id=stage_id):
            demo.run(args.model, cw.completion, on_turn, turns=args.turns)
    except Exception as exc:  # noqa: BLE001 - the model call failed: say so, no traceback
        print(f"error: the demo's model call failed ({type(exc).__name__}); try --model gpt-4o", file=sys.stderr)
        return EXIT_USAGE
    cw.flush()
    path = runtime.config.export_path
    if path is None:
        print(f"\n(export={runtime.config.export}: nothing to read back locally)", file=sys.stderr)
        return EXIT_OK
    if runtime.config.sdk_disabled:
        print("\n(OTEL_SDK_DISABLED=true: nothing was exported, so there is nothing to read back)", file=sys.stderr)
        return EXIT_OK
    backend = f"file:{path}"
    with cw.reader(backend) as reader:
        print(f"\nread back from {backend}:")
        print(_render_stages(run_id, reader.stages(run_id)))
        print(render(reader.context_window(run_id, stage_id), title=f"\n{run_id} / {stage_id}"))
    print(f"\nrun id: {run_id}")
    print(f"try: cw-middleware show {run_id} {stage_id} --backend {backend}", file=sys.stderr)
    print(f"     cw-middleware runs --backend {backend}", file=sys.stderr)
    return EXIT_OK


def _render_stages(run_id: str, stages: Any) -> str:
    from .render import render_stages

    return render_stages(run_id, stages)


@read_errors
def _cmd_runs(args: argparse.Namespace, reader: Any) -> int:
    with indexing_note():
        runs = reader.runs()
    if args.json:
        print(json.dumps({"runs": [r.as_dict() for r in runs]}, indent=2))
    elif not runs:
        print(f"no runs in {reader.url}", file=sys.stderr)
        hint = file_hint(reader)
        if hint:
            print(hint, file=sys.stderr)
    else:
        from .render import render_runs

        print(render_runs(runs))
    return EXIT_OK


@read_errors
def _cmd_show(args: argparse.Namespace, reader: Any) -> int:
    if args.history:
        return _show_history(args, reader)
    with indexing_note():
        answer = reader.context_window(args.run_id, args.stage_id)
    if args.json:
        print(answer.model_dump_json(indent=2))
    else:
        from .render import render

        print(render(answer, title=f"{args.run_id} / {args.stage_id}  ({reader.url})", top_sources=args.top))
    return EXIT_OK


def _show_history(args: argparse.Namespace, reader: Any) -> int:
    with indexing_note():
        points = reader.history(args.run_id, args.stage_id, limit=args.limit)
    if args.json:
        body = {"run_id": args.run_id, "stage_id": args.stage_id, "snapshots": [p.model_dump(mode="json") for p in points]}
        print(json.dumps(body, indent=2))
    else:
        from .render_usage import render_history

        print(render_history(points, title=f"{args.run_id} / {args.stage_id} over time  ({reader.url})"))
    return EXIT_OK


_EPOCH = datetime.fromtimestamp(0, UTC)


@read_errors
def _cmd_statusline(args: argparse.Namespace, reader: Any) -> int:
    from .statusline import statusline, statusline_object

    run_id, stage_id = args.run_id, args.stage_id
    if run_id is None:  # the newest run's newest stage
        runs = reader.runs()
        if not runs:
            print("ctx —")
            print("not found: no runs in the backend yet", file=sys.stderr)
            return EXIT_NOT_FOUND
        run_id = runs[0].run_id
    if stage_id is None:
        stages = reader.stages(run_id)
        if not stages:
            print("ctx —")
            return EXIT_NOT_FOUND
        stage_id = max(stages, key=lambda s: s.last_seen_at or s.started_at or _EPOCH).stage_id
    answer = reader.context_window(run_id, stage_id)
    if args.json:
        print(json.dumps(statusline_object(run_id, answer)))
    else:
        print(statusline(answer, colour=args.color))
    return EXIT_OK


@read_errors
def _cmd_summary(args: argparse.Namespace, reader: Any) -> int:
    with indexing_note():
        report = reader.summary(args.run_id)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        from .render_usage import render_summary

        print(render_summary(report))
    return EXIT_OK


@read_errors
def _cmd_stages(args: argparse.Namespace, reader: Any) -> int:
    with indexing_note():
        stages = reader.stages(args.run_id)
    if args.json:
        print(json.dumps({"run_id": args.run_id, "stages": [s.as_dict() for s in stages]}, indent=2))
    else:
        print(_render_stages(args.run_id, stages))
    return EXIT_OK


@read_errors
def _cmd_serve(args: argparse.Namespace, reader: Any) -> int:
    from .._kernel.errors import ConfigError
    from .._serve.access import is_loopback, origin
    from .._serve.server import make_server

    token = _serve_token(args)
    if not token and not is_loopback(args.host):
        if not args.allow_without_token:
            raise ConfigError(
                f"serving {args.host} without a bearer token lets anyone who reaches it read the runs: set CW_SERVE_TOKEN "
                "or --token-file FILE (or pass --allow-without-token)"
            )
        print(f"warning: serving on {args.host} without a bearer token", file=sys.stderr)
    try:
        origins = [origin(o) for o in args.allow_origin or ()]
    except ValueError as exc:
        raise ConfigError(f"--allow-origin: {exc}") from None
    try:
        server = make_server(reader, args.host, args.port, token, allowed_origins=origins)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port} ({exc.strerror})", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"serving {reader.url} on {server.url}  (the live page at /; GET /api/v1/runs, "
        "/api/v1/runs/RUN/stages/STAGE/context-window, /api/v1/runs/RUN/events, /openapi.json)",
        file=sys.stderr,
        flush=True,
    )
    where = file_note(reader)
    if where:
        print(where, file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK


def _serve_token(args: argparse.Namespace) -> Optional[str]:
    """The bearer token: --token-file's first line, else --token (which `ps` shows), else $CW_SERVE_TOKEN."""
    from .._kernel.errors import ConfigError

    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read the token file {args.token_file!r} ({type(exc).__name__})") from None
        if not token:
            raise ConfigError(f"the token file {args.token_file!r} is empty")
        return token
    from .._kernel.config import resolve_read

    return args.token or resolve_read().serve_token


def _count(minimum: int) -> Any:
    """An argparse type: a whole number >= ``minimum`` (a usage error otherwise)."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {number}")
        return number

    return parse


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 0 and 65535, got {port}")
    return port


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    from .._readback import known_backends

    parser = argparse.ArgumentParser(
        prog="cw-middleware",
        description="What fills your model's context window: estimate a request, run a demo, read snapshots back.",
        epilog="exit codes: 0 ok, 2 bad input, 3 not found, 4 backend error",
    )
    parser.add_argument("--version", action="version", version=f"cw-middleware {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("estimate", help="estimate a request (completion kwargs as JSON) locally")
    p.add_argument("file", nargs="?", help="request JSON file (default: stdin)")
    p.set_defaults(func=_cmd_estimate)
    p = sub.add_parser("demo", help="run a short mocked agent conversation and show its breakdown per turn")
    p.add_argument("--model", default="gpt-4o", help="the LiteLLM model to mock (default gpt-4o; no call leaves the machine)")
    p.add_argument("--turns", type=_count(1), default=4, help="model calls in the conversation (default 4)")
    p.add_argument("--run-id", help="the run id to write (default: a fresh demo-<UTC time>-<random>, printed at the end)")
    p.add_argument("--export", help="file:PATH | otlp | none (default: $CW_EXPORT or the embedded file)")
    p.set_defaults(func=_cmd_demo)
    backend_help = f"where to read: {known_backends()} (default: $CW_BACKEND, else the embedded export file)"
    p = sub.add_parser("runs", help="the runs the backend holds, newest activity first")
    p.add_argument("--backend", help=backend_help)
    p.add_argument("--json", action="store_true", help='{"runs": [...]} JSON instead of a table')
    p.set_defaults(func=_cmd_runs)
    p = sub.add_parser("show", help="a stage's context window, read back from the telemetry backend")
    p.add_argument("run_id", help="the run id given to cw.stage()")
    p.add_argument("stage_id", help="the stage id given to cw.stage()")
    p.add_argument("--backend", help=backend_help)
    p.add_argument("--json", action="store_true", help="the StageContextWindow contract JSON")
    p.add_argument("--top", type=_count(0), default=8, help="top sources to list (default 8)")
    p.add_argument("--history", action="store_true", help="the stage over time: one row per call, compactions marked")
    p.add_argument("--limit", type=_count(1), default=100, help="with --history: the newest calls to show (default 100)")
    p.set_defaults(func=_cmd_show)
    p = sub.add_parser("summary", help="a run over its stages: calls, latest tokens, peak, cost, per category")
    p.add_argument("run_id", help="the run id given to cw.stage()")
    p.add_argument("--backend", help=backend_help)
    p.add_argument("--json", action="store_true", help="the RunReport JSON")
    p.set_defaults(func=_cmd_summary)
    p = sub.add_parser("stages", help="the stages of a run")
    p.add_argument("run_id", help="the run id given to cw.stage()")
    p.add_argument("--backend", help=backend_help)
    p.add_argument("--json", action="store_true", help='{"run_id", "stages": [...]} JSON instead of a table')
    p.set_defaults(func=_cmd_stages)
    p = sub.add_parser(
        "statusline", help="one line for status bars: the window's share, its largest parts, the forecast, the cost"
    )
    p.add_argument("run_id", nargs="?", help="the run id (default: the newest run)")
    p.add_argument("stage_id", nargs="?", help="the stage id (default: the run's newest stage)")
    p.add_argument("--backend", help=backend_help)
    p.add_argument("--json", action="store_true", help="the same numbers, and the line, as one JSON object")
    p.add_argument("--color", action="store_true", help="colour the share (green, yellow from 80 %%, red from 95 %%)")
    p.set_defaults(func=_cmd_statusline)
    p = sub.add_parser("serve", help="serve the read-back API over HTTP (loopback by default)")
    p.add_argument("--backend", help=backend_help)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs a token)")
    p.add_argument("--port", type=_port, default=8765, help="port to listen on (default 8765; 0 picks a free one)")
    given = p.add_mutually_exclusive_group()
    given.add_argument("--token-file", metavar="FILE", help="require the bearer token on the first line of FILE")
    given.add_argument("--token", help="require this bearer token (visible in `ps`: prefer --token-file or $CW_SERVE_TOKEN)")
    p.add_argument(
        "--allow-without-token",
        action="store_true",
        help="serve a non-loopback --host without a token (anyone who reaches it reads the runs)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        metavar="ORIGIN",
        help="let pages of this origin (https://app.example) read the API (the embedded element); repeatable; none by default",
    )
    p.set_defaults(func=_cmd_serve)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:  # a bare `cw-middleware`: the help, not an error
        parser.print_help(sys.stderr)
        return EXIT_USAGE
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
