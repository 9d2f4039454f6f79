"""The `benchfarm` command: the operator, board sessions, the dashboard, parsing, reports and
comparisons.

Other packages add subcommands through the `benchfarm.commands` entry point group (a function
that registers a subparser and sets `func`): the dev lab adds `benchfarm lab …` and `benchfarm
demo` that way, so the operator image, which does not install it, has no lab commands.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchfarm.settings import Settings


def _parse(args: argparse.Namespace) -> int:
    from benchfarm.errors import BenchfarmError
    from benchfarm.suites.registry import parse
    try:
        text = Path(args.file).read_text(errors="replace") if args.file != "-" else sys.stdin.read()
        params = dict(p.split("=", 1) for p in args.param)
        metrics = parse(args.suite, text, params)
    except BenchfarmError as exc:
        print(f"benchfarm parse: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"benchfarm parse: {exc}", file=sys.stderr)
        return 1
    print(json.dumps([m.as_dict() for m in metrics], indent=2))
    return 0


def history_scope(namespace: str | None, everywhere: bool) -> frozenset[str] | None:
    """The namespaces `benchfarm history`/`results series` show: `-n` or the kubeconfig's
    current namespace, or every one (None) with --all-namespaces, after the API server said
    (SelfSubjectAccessReview) that the caller may `get benchmarkruns` there (cluster-wide for
    every namespace). Without any Kubernetes credentials there is no one to ask: the database URL
    is then the caller's only credential, and it reads everything anyway."""
    from benchfarm.cli.lease import _namespace
    from benchfarm.history.commands import ScopeRefused
    from benchfarm.kubeapi.client import WATCH_FAILURES
    ns = None if everywhere else _namespace(namespace)
    from kubernetes import client, config
    try:
        try:
            config.load_kube_config(Settings.from_env().kubeconfig or None)
        except (config.ConfigException, OSError):
            config.load_incluster_config()
    except (config.ConfigException, OSError):   # no kubeconfig, not in a cluster: nobody to ask
        return None if ns is None else frozenset({ns})
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(
            namespace=ns, verb="get", group="benchfarm.io", resource="benchmarkruns")))
    try:
        answer = client.AuthorizationV1Api().create_self_subject_access_review(review).status
    except WATCH_FAILURES as exc:       # refused, or the API server away (no `Kube._call` here)
        raise ScopeRefused(f"could not ask the API server who may read "
                           f"{'every namespace' if ns is None else ns}: "
                           f"{type(exc).__name__}") from exc
    if not (answer and answer.allowed):
        raise ScopeRefused(
            "--all-namespaces is a lab admin's (get benchmarkruns cluster-wide); you may not"
            if ns is None else f"you may not read the runs of namespace {ns}")
    return None if ns is None else frozenset({ns})


def _import_guide(path: str, fmt: str, board: str | None) -> int:
    from benchfarm.core.guides.guide import read_guide
    from benchfarm.report.tables import guide_rst
    try:
        guide = read_guide(Path(path).read_text(errors="replace"))
    except OSError as exc:
        print(f"benchfarm import-guide: {exc}", file=sys.stderr)
        return 1
    if board is not None and board not in guide.boards:
        print(f"benchfarm import-guide: no board {board!r} in {path}; boards: "
              f"{', '.join(guide.boards) or 'none named'}", file=sys.stderr)
        return 1
    tables = [t for t in guide.tables if board is None or t.board in ("", board)]
    print(f"benchfarm import-guide: {len(guide.tables)} tables, "
          f"{sum(len(t.rows) for t in guide.tables)} values; boards: "
          f"{', '.join(guide.boards) or 'none named'}", file=sys.stderr)
    for problem in guide.problems:
        print(f"benchfarm import-guide: {problem}", file=sys.stderr)
    if fmt == "rst":
        print(guide_rst(tables))
    else:
        print(json.dumps({"boards": guide.boards, "problems": guide.problems, "tables": [
            {"title": t.title, "board": t.board, "rows": [
                {"name": r.name, "unit": r.unit, "mean": r.value.mean, "min": r.value.min,
                 "max": r.value.max, "text": r.value.text} for r in t.rows]}
            for t in tables]}, indent=2))
    return 0


def _plugins(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from importlib.metadata import entry_points
    for ep in entry_points(group="benchfarm.commands"):
        ep.load()(sub)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, plugins included (the docs' CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(prog="benchfarm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    op = sub.add_parser("operator", help="run the operator (kopf) in the foreground")
    op.add_argument("--liveness", default=None, help="liveness endpoint URL")
    op.add_argument("--help-settings", action="store_true",
                    help="print every setting (environment variable) with its default, and exit")
    sub.add_parser("settings", help="print every setting benchfarm reads (environment variables: "
                                    "the operator's, a session's, the store's, the CLI's) with "
                                    "its default and what it does")
    sess = sub.add_parser("session", help="a board session (what the operator launches)")
    sess_sub = sess.add_subparsers(dest="session_cmd", required=True)
    sess_run = sess_sub.add_parser("run", help="run (or resume) the session of a scheduled run")
    sess_run.add_argument("run", help="NAMESPACE/NAME")
    sess_health = sess_sub.add_parser("health", help="a quarantined board's health check: boot "
                                                      "its own image to its prompt, report")
    sess_health.add_argument("board", help="the board (labgrid place)")
    sess_health.add_argument("check", type=int, help="the number of the check (the operator's)")
    sess_end = sess_sub.add_parser("lease-end", help="the end of a BoardLease: power its board "
                                                     "off, release the place")
    sess_end.add_argument("lease", help="NAMESPACE/NAME")
    sess_sub.add_parser("server", help="import everything once, then fork a session for each run "
                                       "named on stdin (the operator keeps one running)")
    sess_sub.add_parser("warm", help="a warm session pod: import everything, wait for the run the "
                                     "operator grants this slot, run it (the job launcher's pool)")
    p = sub.add_parser("parse", help="parse a suite's output file into metrics (JSON)")
    p.add_argument("suite", help="the parser: a suite name of a plan's step (e.g. cyclictest)")
    p.add_argument("file", help="the output to parse; - for standard input")
    p.add_argument("--param", action="append", default=[], help="KEY=VALUE parser parameter")
    rep = sub.add_parser("report", help="print the report of a finished run (any cluster: "
                                        "a kubeconfig)")
    rep.add_argument("run", help="NAMESPACE/NAME")
    rep.add_argument("--format", choices=["md", "rst", "json"], default="md",
                     help="Markdown, reStructuredText (the vendor guides' csv-table layout) or "
                          "the run's metrics as JSON")
    cmp_ = sub.add_parser("compare", help="compare a run with a baseline run or a vendor guide (RST)")
    cmp_.add_argument("run", help="NAMESPACE/NAME of a finished run")
    cmp_.add_argument("baseline", help="NAMESPACE/NAME of another run, or an .rst/.txt guide file")
    cmp_.add_argument("--board", default=None,
                      help="the guide's board column to compare with (import-guide lists them)")
    ig = sub.add_parser("import-guide", help="read a vendor guide's csv-tables (RST) as a baseline")
    ig.add_argument("file", help="the guide, reStructuredText (a report.rst or guide.rst too)")
    ig.add_argument("--format", choices=["json", "rst"], default="json",
                    help="the tables' metrics as JSON, or the tables again as RST")
    ig.add_argument("--board", default=None, help="only this board's columns")
    from benchfarm.cli.lease import add_parser as add_lease
    add_lease(sub)
    from benchfarm.cli.submit import add_parsers as add_submit
    add_submit(sub)
    chk = sub.add_parser("check", help="check this installation: API, leader, labgrid (places and "
                                       "their serial ports), store; with --boards, audit the "
                                       "board network from the boards; what `helm test` runs")
    from benchfarm.cli.boardcheck import add_arguments as add_boardcheck
    add_boardcheck(chk)
    w = sub.add_parser("web", help="the dashboard: boards, queues, runs, results over time "
                                   "(people sign in with a Kubernetes token)")
    w.add_argument("--address", default="127.0.0.1", help="the address to listen on")
    w.add_argument("--port", type=int, default=8080, help="the port to listen on")
    w.add_argument("--history-source", metavar="MODULE:FACTORY",
                   default=None,
                   help="where the history page's series come from (default: the finished "
                        "runs' metrics.json in the store, no change points; or "
                        "BENCHFARM_WEB_HISTORY_SOURCE)")
    from benchfarm.history.commands import register as register_history
    register_history(sub, history_scope)
    _plugins(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("lab", "demo") and argv[0] not in sub.choices:
        print(f"benchfarm {argv[0]}: the embedded lab is not installed here (it is a developer's "
              "tool: `pip install -e devlab/` in a clone of the repository)", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is not None:
        return int(args.func(args))
    if args.cmd == "settings" or (args.cmd == "operator" and args.help_settings):
        from benchfarm.settings import describe
        print(describe(), end="")
        return 0
    if args.cmd == "operator":
        from benchfarm.operator.main import run
        return run(args.liveness)
    if args.cmd == "check" and args.boards is not None:
        from benchfarm.cli.boardcheck import main as boardcheck_main
        return boardcheck_main(args.boards, args.endpoint, args.limit)
    if args.cmd == "check":
        from benchfarm.cli.check import main as check_main
        return check_main()
    if args.cmd == "session":
        if args.session_cmd == "server":
            from benchfarm.session import server
            return server.serve()
        if args.session_cmd == "health":
            from benchfarm.session import health
            return health.main(args.board, args.check)
        if args.session_cmd == "lease-end":
            from benchfarm.session import leaseend
            return leaseend.main(args.lease)
        if args.session_cmd == "warm":
            from benchfarm.session import warm
            return warm.main()
        from benchfarm.session import runner
        return runner.main(args.run)
    if args.cmd == "web":
        from benchfarm.web.server import serve
        return serve(args.address, args.port, args.history_source)
    if args.cmd == "parse":
        return _parse(args)
    if args.cmd == "report":
        from benchfarm.cli.readback import main_report
        return main_report(args.run, args.format)
    if args.cmd == "compare":
        from benchfarm.cli.readback import main_compare
        return main_compare(args.run, args.baseline, args.board)
    if args.cmd == "lease":
        from benchfarm.cli.lease import main as lease_main
        return lease_main(args)
    if args.cmd == "import-guide":
        return _import_guide(args.file, args.format, args.board)
    return 2

