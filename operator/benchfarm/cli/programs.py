"""`benchfarm operator`, `session …`, `web` and `settings`: the programs a deployment runs.

The chart runs the operator and the dashboard; the operator launches the board sessions (a run's,
a health check's, a lease's end, the session server and its warm pods). Each command only starts
its program, which builds what it needs at its own entry point; `settings` (and `operator
--help-settings`) prints the environment they all read. The programs are imported when their
command runs, so `benchfarm --help` loads none of them.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchfarm.api.outcomes import SessionKind


def add_parsers(sub: Any) -> None:
    op = sub.add_parser("operator", help="run the operator (kopf) in the foreground")
    op.add_argument("--liveness", default=None, help="liveness endpoint URL")
    op.add_argument("--help-settings", action="store_true",
                    help="print every setting (environment variable) with its default, and exit")
    op.set_defaults(func=_operator)
    st = sub.add_parser("settings", help="print every setting benchfarm reads (environment "
                                         "variables: the operator's, a session's, the store's, "
                                         "the CLI's) with its default and what it does")
    st.set_defaults(func=_settings)
    sess = sub.add_parser("session", help="a board session (what the operator launches)")
    sess_sub = sess.add_subparsers(dest="session_cmd", required=True)
    sess_run = sess_sub.add_parser(SessionKind.run,
                                   help="run (or resume) the session of a scheduled run")
    sess_run.add_argument("run", help="NAMESPACE/NAME")
    sess_run.set_defaults(func=_session_run)
    sess_health = sess_sub.add_parser(SessionKind.health_check,
                                      help="a quarantined board's health check: boot its own "
                                           "image to its prompt, report")
    sess_health.add_argument("board", help="the board (labgrid place)")
    sess_health.add_argument("check", type=int, help="the number of the check (the operator's)")
    sess_health.set_defaults(func=_session_health)
    sess_end = sess_sub.add_parser(SessionKind.lease_end, help="the end of a BoardLease: power "
                                                               "its board off, release the place")
    sess_end.add_argument("lease", help="NAMESPACE/NAME")
    sess_end.set_defaults(func=_session_lease_end)
    sess_sub.add_parser("server", help="import everything once, then fork a session for each "
                                       "run named on stdin (the operator keeps one running)"
                        ).set_defaults(func=_session_server)
    sess_sub.add_parser("warm", help="a warm session pod: import everything, wait for the run "
                                     "the operator grants this slot, run it (the job "
                                     "launcher's pool)").set_defaults(func=_session_warm)
    w = sub.add_parser("web", help="the dashboard: boards, queues, runs, results over time "
                                   "(people sign in with a Kubernetes token)")
    w.add_argument("--address", default="127.0.0.1", help="the address to listen on")
    w.add_argument("--port", type=int, default=8080, help="the port to listen on")
    w.add_argument("--history-source", metavar="MODULE:FACTORY",
                   default=None,
                   help="where the history page's series come from (default: the finished "
                        "runs' metrics.json in the store, no change points; or "
                        "BENCHFARM_WEB_HISTORY_SOURCE)")
    w.set_defaults(func=_web)


def _settings(args: argparse.Namespace) -> int:
    from benchfarm.settings import describe
    print(describe(), end="")
    return 0


def _operator(args: argparse.Namespace) -> int:
    if args.help_settings:
        return _settings(args)
    from benchfarm.operator.main import run
    return run(args.liveness)


def _session_run(args: argparse.Namespace) -> int:
    from benchfarm.session import runner
    return runner.main(args.run)


def _session_health(args: argparse.Namespace) -> int:
    from benchfarm.session import health
    return health.main(args.board, args.check)


def _session_lease_end(args: argparse.Namespace) -> int:
    from benchfarm.session import leaseend
    return leaseend.main(args.lease)


def _session_server(args: argparse.Namespace) -> int:
    from benchfarm.session import server
    return server.serve()


def _session_warm(args: argparse.Namespace) -> int:
    from benchfarm.session import warm
    return warm.main()


def _web(args: argparse.Namespace) -> int:
    from benchfarm.web.server import serve
    return serve(args.address, args.port, args.history_source)
