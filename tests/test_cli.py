"""The CLI: demo exports to the embedded file and reads its breakdown back; serve never imports LiteLLM."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cw_middleware._capture.runtime import get_runtime, set_runtime
from cw_middleware._cli import main as cli


def test_demo_exports_and_reads_back(tmp_path, capsys, runtime):
    path = tmp_path / "demo.jsonl"
    try:
        assert cli.main(["demo", "--turns", "2", "--run-id", "demo-t", "--export", f"file:{path}"]) == 0
    finally:
        demo_runtime = get_runtime()
        if demo_runtime is not runtime:
            demo_runtime.shutdown()
        set_runtime(runtime)
    out = capsys.readouterr().out
    assert f"read back from file:{path}" in out
    after = out.split("read back from", 1)[1]
    assert "implement@1" in after and "plan@1" in after and "staleness: stored" in after and "Skills" in after
    assert path.stat().st_size > 0
    assert cli.main(["show", "demo-t", "plan@1", "--backend", f"file:{path}", "--json"]) == 0
    assert '"not_agent_stage"' in capsys.readouterr().out


def test_bad_export_is_a_usage_error(capsys, runtime):
    assert cli.main(["demo", "--export", "ftp:x"]) == cli.EXIT_USAGE
    assert "export must be" in capsys.readouterr().err


def test_serve_path_never_imports_heavy_modules(tmp_path):
    # LiteLLM (seconds) and tiktoken stay out; the OpenTelemetry SDK (~40 ms) comes with the
    # package, so a worker's first LLM call does not import it (_capture/providers.py says why).
    code = (
        "import sys\n"
        "import cw_middleware as cw\n"
        "from cw_middleware._serve.server import make_server\n"
        f"s = make_server(cw.reader('file:{tmp_path}/t.jsonl'), '127.0.0.1', 0)\n"
        "s.server_close()\n"
        "print(sorted(m for m in ('litellm', 'tiktoken') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_estimate_reads_a_tagged_request_file(tmp_path, capsys, runtime):
    import json

    request = {
        "model": "gpt-4o",
        "messages": [
            {
                "role": "system",
                "content": [{"type": "text", "text": "notes " * 50, "cw_tag": {"category": "memory", "source": "AGENTS.md"}}],
            },
            {"role": "user", "content": "hi"},
        ],
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    assert cli.main(["estimate", str(path)]) == 0
    snapshot = json.loads(capsys.readouterr().out)
    memory = next(b["tokens"] for b in snapshot["breakdown"] if b["category"] == "memory")
    assert memory >= 50 and snapshot["input_tokens"] == sum(b["tokens"] for b in snapshot["breakdown"])


def test_estimate_and_show_explain_bad_input_without_a_traceback(tmp_path, capsys, runtime):
    assert cli.main(["estimate", str(tmp_path / "missing.json")]) == cli.EXIT_USAGE
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text(
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": "x", "cw_tag": {"category": "nope"}}]}'
    )
    assert cli.main(["estimate", str(tmp_path / "bad.json")]) == cli.EXIT_USAGE
    assert "unknown category 'nope'" in capsys.readouterr().err
    assert cli.main(["show", "run", "stage", "--backend", f"file:{tmp_path / 'none.jsonl'}"]) == cli.EXIT_NOT_FOUND
    err = capsys.readouterr().err
    assert "not found" in err and "no telemetry file" in err and "Traceback" not in err


@pytest.mark.system
def test_show_survives_a_closed_pipe(tmp_path):
    done = subprocess.run(
        f"{sys.executable} -m cw_middleware demo --export file:{tmp_path / 't.jsonl'} --run-id r > /dev/null 2>&1; "
        f"{sys.executable} -m cw_middleware show r implement@1 --json --backend file:{tmp_path / 't.jsonl'} | head -1",
        shell=True, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.stdout.strip() == "{"
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_malformed_requests_and_options_are_usage_errors(tmp_path, capsys, runtime):
    import json

    import pytest

    (tmp_path / "shape.json").write_text(json.dumps({"model": "gpt-4o", "messages": [], "tools": 5}))
    assert cli.main(["estimate", str(tmp_path / "shape.json")]) == cli.EXIT_USAGE
    assert "wrong shape" in capsys.readouterr().err
    (tmp_path / "latin1.json").write_bytes('{"model": "gpt-4o", "messages": ["é"]}'.encode("latin-1"))
    assert cli.main(["estimate", str(tmp_path / "latin1.json")]) == cli.EXIT_USAGE
    assert "UTF-8" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["serve", "--port", "99999"])
    assert exited.value.code == 2 and "between 0 and 65535" in capsys.readouterr().err
    assert cli.main(["show", "r", "s", "--backend", "file://"]) == cli.EXIT_USAGE


def test_a_request_nested_too_deeply_is_a_usage_error(tmp_path, capsys, runtime):
    (tmp_path / "deep.json").write_text("[" * 100_000)
    assert cli.main(["estimate", str(tmp_path / "deep.json")]) == cli.EXIT_USAGE
    assert "nested too deeply" in capsys.readouterr().err


# ---------------------------------------------------------------- a newcomer's first commands


def _demo(args, runtime):
    try:
        return cli.main(["demo", *args])
    finally:
        demo_runtime = get_runtime()
        if demo_runtime is not runtime:
            demo_runtime.shutdown()
        set_runtime(runtime)


def test_version_and_a_bare_command_print_what_they_should(capsys):
    import pytest

    import cw_middleware

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == f"cw-middleware {cw_middleware.__version__}"
    assert cli.main([]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: cw-middleware") and "error:" not in err
    for command in ("estimate", "demo", "runs", "show", "summary", "stages", "serve"):
        assert command in err


def test_every_flag_has_help_text():
    import argparse

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) >= {"estimate", "demo", "runs", "show", "summary", "stages", "serve"}
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{name} {action.option_strings or action.dest} has no help text"


def test_negative_and_zero_counts_are_usage_errors(capsys):
    import pytest

    for argv in (
        ["show", "r", "s", "--top", "-1"],
        ["demo", "--turns", "0"],
        ["demo", "--turns", "-3"],
        ["demo", "--turns", "x"],
    ):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == cli.EXIT_USAGE, argv
        err = capsys.readouterr().err
        assert "must be at least" in err or "not a whole number" in err, argv


def test_an_unknown_demo_model_is_a_readable_error(tmp_path, capsys, runtime):
    code = _demo(["--model", "nonsense-model", "--export", f"file:{tmp_path / 't.jsonl'}"], runtime)
    captured = capsys.readouterr()
    assert code == cli.EXIT_USAGE
    assert "nonsense-model" in captured.err and "Traceback" not in captured.err
    assert "Provider List" not in captured.out + captured.err  # LiteLLM's own banner stays out of our output


def test_a_file_that_is_not_otlp_json_is_said_to_be_so(tmp_path, capsys):
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    for argv in (["show", "r", "s"], ["stages", "r"], ["runs"]):
        assert cli.main([*argv, "--backend", str(passwd)]) == cli.EXIT_BACKEND, argv
        err = capsys.readouterr().err
        assert "not an OTLP JSON file" in err and "run 'r' not found" not in err


def test_the_backend_help_lists_the_registered_schemes(monkeypatch):
    from cw_middleware._readback import BACKENDS, Backend

    monkeypatch.setitem(BACKENDS, "tempo", Backend("tempo", "tempo+http://HOST:3200", lambda url, options: None))
    helps = []
    parser = cli.build_parser()
    for sub in parser._subparsers._group_actions[0].choices.values():
        helps += [a.help for a in sub._actions if "--backend" in a.option_strings]
    assert len(helps) == 6  # runs, show, summary, stages, statusline, serve
    assert all("file:PATH" in h and "tempo" in h for h in helps)


def test_each_demo_run_gets_a_fresh_printed_id_and_runs_lists_them(tmp_path, capsys, runtime):
    import json

    path = tmp_path / "demo.jsonl"
    ids = []
    for _ in range(2):
        assert _demo(["--turns", "1", "--export", f"file:{path}"], runtime) == 0
        out = capsys.readouterr().out
        printed = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("run id:")]
        assert len(printed) == 1 and printed[0].startswith("demo-")
        ids.append(printed[0])
    assert ids[0] != ids[1]
    assert cli.main(["runs", "--backend", f"file:{path}", "--json"]) == 0
    listed = [r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]]
    assert sorted(listed) == sorted(ids)
    assert cli.main(["runs", "--backend", f"file:{path}"]) == 0
    table = capsys.readouterr().out
    assert all(run_id in table for run_id in ids)
    assert _demo(["--turns", "1", "--run-id", "mine", "--export", f"file:{path}"], runtime) == 0
    assert "run id: mine" in capsys.readouterr().out


def test_not_found_hints_where_the_telemetry_may_have_gone(tmp_path, capsys):
    missing, empty, metrics_only = tmp_path / "missing.jsonl", tmp_path / "empty.jsonl", tmp_path / "metrics.jsonl"
    empty.write_text("")
    metrics_only.write_text('{"resourceMetrics":[]}\n')
    for path in (missing, empty, metrics_only):
        assert cli.main(["show", "r", "s", "--backend", f"file:{path}"]) == cli.EXIT_NOT_FOUND
        err = capsys.readouterr().err
        assert "own TracerProvider" in err, path


# ---------------------------------------------------------------- serve: where the token comes from, who may bind


def _serving(argv: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """`cw-middleware serve ...` on a free port, and its URL once it listens."""
    import os

    process = subprocess.Popen(
        [sys.executable, "-m", "cw_middleware", "serve", "--port", "0", *argv],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stderr is not None
    lines = [process.stderr.readline()]
    while " on http://" not in lines[-1] and lines[-1] and len(lines) < 5:
        lines.append(process.stderr.readline())  # a warning may come first
    assert " on http://" in lines[-1], lines
    return process, lines[-1].split(" on ", 1)[1].split()[0]


def _status(url: str, token: str | None = None) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.parametrize("source", ["file", "environment"])
def test_serve_reads_its_token_from_a_file_or_the_environment_never_the_command_line(tmp_path, source):
    token = "t0ken-from-" + source
    if source == "file":
        (tmp_path / "token").write_text(token + "\n")
        argv, env = ["--token-file", str(tmp_path / "token")], {}
    else:
        argv, env = [], {"CW_SERVE_TOKEN": token}
    process, url = _serving(["--backend", f"file:{tmp_path / 't.jsonl'}", *argv], env)
    try:
        assert _status(f"{url}/api/v1/runs") == 401
        assert _status(f"{url}/api/v1/runs", token) == 200
        with open(f"/proc/{process.pid}/cmdline", "rb") as f:
            assert token.encode() not in f.read()  # what `ps` shows
    finally:
        process.terminate()
        process.wait(10)


def test_serve_refuses_a_non_loopback_address_without_a_token_unless_told(tmp_path, monkeypatch):
    import os

    monkeypatch.delenv("CW_SERVE_TOKEN", raising=False)
    backend = f"file:{tmp_path / 't.jsonl'}"
    (tmp_path / "empty").write_text("\n")
    for argv, said in (
        (["--host", "0.0.0.0"], "--allow-without-token"),
        (["--token-file", str(tmp_path / "empty")], "is empty"),
        (["--allow-origin", "https://app.example/chat"], "--allow-origin: not an origin"),
    ):
        command = [sys.executable, "-m", "cw_middleware", "serve", "--port", "0", "--backend", backend, *argv]
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, env=dict(os.environ))
        assert done.returncode == cli.EXIT_USAGE and said in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr
    process, url = _serving(["--host", "0.0.0.0", "--allow-without-token", "--backend", backend])
    try:
        assert _status(url.replace("0.0.0.0", "127.0.0.1") + "/healthz") == 200
    finally:
        process.terminate()
        process.wait(10)


def test_serve_without_a_telemetry_file_says_the_absolute_path_it_reads_and_that_it_does_not_exist_yet(tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CW_", "OTEL_"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "cw_middleware", "serve", "--port", "0"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        serving, note = process.stderr.readline(), process.stderr.readline()
        assert "file:cw-telemetry.jsonl on http://" in serving
        assert f"reading {tmp_path / 'cw-telemetry.jsonl'}: the file does not exist yet" in note
    finally:
        process.terminate()
        process.wait(10)
    (tmp_path / "cw-telemetry.jsonl").write_text("")
    process = subprocess.Popen(
        [sys.executable, "-m", "cw_middleware", "serve", "--port", "0"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        process.stderr.readline()
        assert process.stderr.readline().strip() == f"reading {tmp_path / 'cw-telemetry.jsonl'}"
    finally:
        process.terminate()
        process.wait(10)


def test_serve_on_a_file_that_is_not_otlp_json_lines_warns_once_at_start(tmp_path):
    """`serve --backend file:README.md` says, in one warning line at start, that the file is not OTLP JSON lines; a
    telemetry file (its first non-empty line an export record, after a blank one) draws no warning."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CW_", "OTEL_"))}
    readme = tmp_path / "README.md"
    readme.write_text("\n# A project\n\nSome words.\n")
    telemetry = tmp_path / "t.jsonl"
    telemetry.write_text('\n{"resourceSpans":[]}\n')
    for path, warned in ((readme, True), (telemetry, False)):
        process, _ = _serving(["--backend", f"file:{path}"], env)
        try:
            assert process.stderr is not None
            lines = [process.stderr.readline()]
        finally:
            process.terminate()
            process.wait(10)
        rest = process.stderr.read() if process.stderr else ""
        assert lines[0].strip() == f"reading {path}", lines
        warnings = [line for line in rest.splitlines() if line.startswith("warning:")]
        if warned:
            assert len(warnings) == 1 and str(path) in warnings[0] and "not look like OTLP JSON lines" in warnings[0]
            assert '{"resourceSpans": ...}' in warnings[0], warnings
        else:
            assert warnings == [], rest


def test_the_docs_excerpts_of_show_on_the_demo_run_are_lines_it_prints(tmp_path, capsys, runtime):
    """README's and the reading-back page's excerpts of `show` on the demo run, line by line, in a real run's output
    (a line cut short with "...)" by its start): a rule that moves the demo's counts moves the docs with it."""
    from docs_blocks import block

    path = tmp_path / "demo.jsonl"
    assert _demo(["--run-id", "demo-docs", "--export", f"file:{path}"], runtime) == 0
    capsys.readouterr()
    assert cli.main(["show", "demo-docs", "implement@1", "--backend", f"file:{path}"]) == 0
    shown = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    for name in ("demo-show-excerpt", "demo-show-usage-excerpt"):
        for line in filter(str.strip, block(name).code.splitlines()):
            expected = line.rstrip()
            if expected.endswith("...)"):
                assert any(s.startswith(expected[: -len("...)")]) for s in shown), (name, expected)
            else:
                assert expected in shown, (name, expected)
