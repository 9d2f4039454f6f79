"""`benchfarm lab …` and `benchfarm demo`: the dev lab's subcommands of the one `benchfarm` CLI.

Registered through the `benchfarm.commands` entry point group, so the operator image (which does
not install this package) has no lab commands and the package it ships knows nothing of the lab.
"""

from __future__ import annotations

import argparse
import sys

from benchfarm_devlab.config import STATE, LabError, say


def register_lab(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lab", help="the embedded lab: up, down, status, operator, image, "
                                   "cluster-up, cluster-down")
    p.add_argument("action", choices=["up", "down", "status", "operator", "image", "cluster-up",
                                      "cluster-down"],
                   help="what to do with the lab under .benchfarm/ (up: start whatever is not "
                        "running; down: stop what up started)")
    p.add_argument("--rebuild", action="store_true",
                   help="image: build base and image again from nothing and check the digest is the one "
                        "recorded for the same inputs")
    p.set_defaults(func=lambda args: lab(args.action, rebuild=args.rebuild))


def register_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the demo BenchmarkRun on the local lab")
    p.add_argument("--manifest", default=None,
                   help="the BenchmarkRun to apply (default: testplans/examples/demo-run.yaml)")
    p.add_argument("--cluster", action="store_true",
                   help="on the one-node cluster: the image imported, helm install, sessions as Jobs")
    p.add_argument("--runs", type=int, default=1,
                   help="with --cluster: apply the run this many times, one after the other, and "
                        "print the median apply -> power-on and ratio")
    p.set_defaults(func=lambda args: _demo(args.manifest, args.cluster, args.runs))


def _demo(manifest: str | None, on_cluster: bool, runs: int = 1) -> int:
    if on_cluster:
        from benchfarm_devlab.democluster import demo_cluster
        return demo_cluster(manifest, runs)
    from benchfarm_devlab.demo import demo
    return demo(manifest)


def lab(action: str, rebuild: bool = False) -> int:
    try:
        if action == "image":      # the operator image from the Dockerfile, without a daemon
            from benchfarm_devlab.image import build
            build(rebuild=rebuild)
            return 0
        from benchfarm_devlab import lab as lab_
        if action == "up":
            lab_.up()
            lab_.start_operator()
            say("operator running; log: " + str(STATE / "logs" / "benchfarm-operator.log"))
            lab_.start_web()
            say(f"dashboard at {lab_.lab_env()['BENCHFARM_WEB_URL']} (sign in with a token: "
                "`kubectl create token NAME -n NAMESPACE`); log: "
                + str(STATE / "logs" / "benchfarm-web.log"))
        elif action == "operator":
            lab_.start_operator()
            say("operator running; log: " + str(STATE / "logs" / "benchfarm-operator.log"))
        elif action == "down":
            lab_.down()
        elif action == "cluster-up":
            from benchfarm_devlab import cluster
            from benchfarm_devlab.cluster.network import pod_addresses
            cluster.up()
            say(f"cluster up: node {cluster.NODE}; pods reach the lab at {cluster.HOST_ADDR}"
                f" (API server {pod_addresses()['apiserver']}, via the kubernetes Service)")
        elif action == "cluster-down":
            from benchfarm_devlab import cluster
            cluster.down()
        elif action == "status":
            for name, pid in lab_.status().items():
                print(f"{name:32} {'running pid ' + str(pid) if pid else 'stopped'}")
    except LabError as exc:
        print(f"[{'image' if action == 'image' else 'lab'}] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0
