"""`benchfarm export kcidb`: the KCIDB v5 document of a finished run, or of each finished run of
a campaign, written (stdout or a file) and with `--submit URL` posted to a KCIDB submission
endpoint (a bearer token from BENCHFARM_KCIDB_TOKEN). Each run's outcome is what `benchfarm
submit` decides for it (`cli.outcome`), rendered by `report.ci`.
Exit codes: 0 written (and accepted), 1 no such run or campaign (or none of its runs finished),
2 the lab or the receiver not reachable or refusing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchfarm.api.campaigns import BenchmarkCampaignStatus
from benchfarm.api.outcomes import Phase
from benchfarm.api.runs import BenchmarkRunStatus
from benchfarm.cli.outcome import lab_api, outcome_of
from benchfarm.settings import Settings


def add_parsers(sub: Any) -> None:
    e = sub.add_parser("export", help="export a finished run's or campaign's results")
    fmt = e.add_subparsers(dest="format", required=True)
    k = fmt.add_parser("kcidb", help="a KCIDB v5 document (validates with kcidb-io)")
    k.add_argument("ref", help="NAMESPACE/NAME of a BenchmarkRun or a BenchmarkCampaign")
    k.add_argument("-o", "--output", default="-", help="file (default: stdout)")
    k.add_argument("--submit", metavar="URL", help="POST the document there too (a KCIDB "
                   "submission endpoint; a bearer token from $BENCHFARM_KCIDB_TOKEN)")
    k.set_defaults(func=export_main)


def export_outcomes(settings: Settings, ref: str) -> list[Any]:
    """The outcomes of a run NAMESPACE/NAME, or of each run of a campaign of that name."""
    kube = lab_api(settings)
    from benchfarm.kubeapi.kubeconfig import object_ref
    ns, name = object_ref(settings, ref)
    run = kube.get_run(ns, name)
    if run is not None:
        return [outcome_of(run, settings)[0]]
    campaign = kube.get_custom("benchmarkcampaigns", ns, name)
    if campaign is None:
        raise LookupError(f"no BenchmarkRun or BenchmarkCampaign {ns}/{name}")
    out = []
    for column in BenchmarkCampaignStatus.of(campaign.get("status")).columns:
        body = kube.get_run(ns, column.run) if column.run else None
        if body is not None and BenchmarkRunStatus.of(body.get("status")).phase in (
                Phase.succeeded, Phase.failed, Phase.cancelled):
            out.append(outcome_of(body, settings)[0])
    if not out:
        raise LookupError(f"campaign {ns}/{name} has no finished run yet")
    return out


def post(url: str, doc: dict[str, Any], token: str | None = None, timeout: float = 30) -> int:
    """POST a KCIDB document; the HTTP status."""
    import requests
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return requests.post(url, data=json.dumps(doc), headers=headers, timeout=timeout).status_code


def export_main(args: argparse.Namespace) -> int:
    from kubernetes import client
    from kubernetes.config import ConfigException

    from benchfarm.errors import BenchfarmError
    from benchfarm.report.ci import kcidb
    try:
        doc = kcidb(export_outcomes(args.settings, args.ref))
    except LookupError as exc:
        print(f"benchfarm export: {exc}", file=sys.stderr)
        return 1
    except (BenchfarmError, client.ApiException, ConfigException, OSError) as exc:
        print(f"benchfarm export: the lab is not reachable: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(doc, indent=2)
    if args.output == "-":
        print(text)
    else:
        Path(args.output).write_text(text + "\n")
    if args.submit:
        try:
            code = post(args.submit, doc, args.settings.kcidb_token or None)
        except OSError as exc:
            print(f"benchfarm export: {args.submit}: {exc}", file=sys.stderr)
            return 2
        if not 200 <= code < 300:
            print(f"benchfarm export: {args.submit} answered {code}", file=sys.stderr)
            return 2
        print(f"benchfarm export: submitted {len(doc['tests'])} test(s) to {args.submit}",
              file=sys.stderr)
    return 0
