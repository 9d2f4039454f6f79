"""`benchfarm lease`: a board for a person, through the lab's queue (what `jmp shell` is to
Jumpstarter).

It creates a BoardLease, waits showing its place in the queue and the estimated start, then
prints the labgrid environment the lease's status gives (`status.commands`), or with `--shell`
runs a shell with it and releases the lease (`spec.release: true`: the board is powered off and
goes to the next in the queue) when that shell exits. Ctrl-C while waiting gives the place in the
queue up the same way. Any cluster: a kubeconfig (KUBECONFIG) or in-cluster credentials.

The lease's labgrid user is this host and the kubeconfig's own Kubernetes user name as labgrid
spells it (`api.labgridusers`; the name from a SelfSubjectReview): the API server refuses a lease
under any other person's name, or the lab's.

With `--shell` it makes a key pair here and puts the public key in the lease (`spec.publicKey`);
the operator grants with a certificate for the lease's user that expires with the lease
(`status.access`). The private key never leaves this process (a 0700 directory of its own while
the shell runs). A loopback forwarder (`lab.labgrid_forward`) takes the stock `labgrid-client`'s
plaintext in and connects to the coordinator with that certificate: the shell's LG_COORDINATOR.
The lease's OpenSSH certificate for the same key (`status.access.ssh`) is how labgrid reaches the
place's console and power, through the exporter hosts' SSH: the directory also holds the key in
OpenSSH's form, the certificate, the hosts' known_hosts and an ssh_config for them
(`lab.lease_ssh.client_config`), and the shell's `labgrid-client` is labgrid's own client with
that ssh_config (`labgrid_forward --stock-client`, first on the shell's PATH).
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchfarm.api.base import GROUP, VERSION
from benchfarm.api.labgridusers import labgrid_name, user_problem
from benchfarm.api.leases import BoardLeaseSpec
from benchfarm.api.outcomes import Condition, LeasePhase
from benchfarm.core.scheduling import durations
from benchfarm.settings import Settings

PLURAL = "boardleases"
LABGRID_KEYS = "BENCHFARM_LABGRID_"     # BENCHFARM_LABGRID_CA/_CERT/_KEY/_ISSUER_*: a lab's own


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("lease", help="lease a board for yourself through the lab's queue; "
                                     "print its labgrid environment or run a shell with it")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--device-type", help="any board of this device type")
    which.add_argument("--board", help="this board (labgrid place)")
    p.add_argument("--label", action="append", default=[], help="KEY=VALUE the board must carry")
    p.add_argument("--duration", default="1h", help="how long, e.g. 90m, 2h (default 1h)")
    p.add_argument("--user", default=None,
                   help="your labgrid user host/name (default: this host and your Kubernetes "
                        "user name as labgrid spells it; the API server takes no other name)")
    p.add_argument("--priority", type=int, default=100,
                   help="higher first, within the namespace's ceiling (LabPolicy)")
    p.add_argument("-n", "--namespace", default=None, help="default: the kubeconfig's")
    p.add_argument("--name", default=None, help="the BoardLease's name (default: generated)")
    p.add_argument("--shell", action="store_true",
                   help="run $SHELL with the environment; release the lease when it exits")
    p.set_defaults(func=main)


def _namespace(given: str | None, settings: Settings) -> str:
    from benchfarm.kubeapi.kubeconfig import current_namespace
    return given or current_namespace(settings)


def whoami(api: Any) -> str:
    """The kubeconfig's Kubernetes user name, as the API server sees it (a SelfSubjectReview)."""
    from kubernetes import client
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1",
                                   kind="SelfSubjectReview"))
    info = review.status.user_info if review.status else None
    if info is None or not info.username:
        raise ValueError("the API server did not say who this kubeconfig is (SelfSubjectReview)")
    return str(info.username)


def default_user(username: str, host: str | None = None) -> str:
    """This host and the labgrid name of Kubernetes user `username` (what admission wants)."""
    name = labgrid_name(username)
    if name is None:
        raise ValueError(user_problem("x/x", username))
    return f"{host or socket.gethostname().split('.')[0]}/{name}"


def lease_name(user: str) -> str:
    """A fresh BoardLease name from the user's name (a DNS name: labgrid's `_` and case go)."""
    stem = re.sub(r"[^a-z0-9]+", "-", user.split("/")[-1].lower()).strip("-")[:40].strip("-")
    return f"{stem or 'lease'}-{uuid.uuid4().hex[:5]}"


def _release(custom: Any, ns: str, name: str) -> None:
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                          {"spec": {"release": True}})


def _wait(custom: Any, ns: str, name: str, until: set[str], out: Any) -> dict[str, Any]:
    """The lease's status once its phase is one of `until`, saying where it stands meanwhile."""
    said = None
    while True:
        st = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name).get(
            "status") or {}
        if st.get("phase") in until:
            return dict(st)
        now = (st.get("phase"), st.get("queuePosition"), st.get("estimatedStart"))
        if now != said and st.get("phase"):
            said = now
            where = f"position {now[1]}" if now[1] else "in the queue"
            print(f"benchfarm lease: {ns}/{name} {now[0]}: {where}"
                  f"{', estimated start ' + now[2] if now[2] else ''}", file=out, flush=True)
        time.sleep(1)


def _forward(access: dict[str, Any], key: bytes, private: Path) -> Any:
    """A loopback forwarder to the coordinator with the lease's certificate (`status.access`)."""
    from benchfarm.lab.labgrid_forward import Forwarder, client_context
    from benchfarm.lab.labgrid_pki import write_private
    for file, data in (("key.pem", key), ("cert.pem", access["certificate"]),
                       ("ca.pem", access.get("ca") or "")):
        write_private(private / file, data)
    ctx = client_context(private / "ca.pem", private / "cert.pem", private / "key.pem")
    return Forwarder(access["coordinator"], ctx)


def _ssh(ssh: dict[str, Any], key: Any, private: Path) -> tuple[Path, Path]:
    """The lease's way through the exporter hosts' SSH (`status.access.ssh`) written into
    `private`: (its ssh_config, the directory of the shell's `labgrid-client`, which takes it)."""
    from benchfarm.api.leases import LeaseSshAccess
    from benchfarm.lab.labgrid_pki import openssh_private, write_private
    from benchfarm.lab.lease_ssh import client_config
    access = LeaseSshAccess.model_validate(ssh)
    files: dict[str, bytes | str] = {"id_lease": openssh_private(key),
                                     "id_lease-cert.pub": access.certificate + "\n",
                                     "known_hosts": access.knownHosts}
    for file, data in files.items():
        write_private(private / file, data)
    write_private(private / "ssh_config", client_config(
        access.hosts, key=private / "id_lease", certificate=private / "id_lease-cert.pub",
        known_hosts=private / "known_hosts"))
    bin_dir = private / "bin"
    bin_dir.mkdir(mode=0o700)
    client = bin_dir / "labgrid-client"
    client.write_text(f"#!/bin/sh\n# labgrid's client with this lease's ssh_config\nexec "
                      f"'{sys.executable}' -m benchfarm.lab.labgrid_forward --stock-client \"$@\"\n")
    client.chmod(0o700)
    return private / "ssh_config", bin_dir


def main(args: argparse.Namespace) -> int:
    from kubernetes import client

    from benchfarm.kubeapi.client import Kube
    settings: Settings = args.settings
    kube = Kube(settings, outage_budget=60.0)
    custom = kube.custom
    ns = _namespace(args.namespace, settings)
    labels = dict(kv.split("=", 1) for kv in args.label)
    from benchfarm.lab.labgrid_pki import key_pem, new_key, public_pem
    key = new_key() if args.shell else None      # the lease's certificate is for this key
    try:
        user = args.user or default_user(whoami(kube.api))
        durations.parse(args.duration)
        spec = BoardLeaseSpec(selector={"deviceType": args.device_type, "board": args.board,
                                        "labels": labels},
                              duration=args.duration, user=user, priority=args.priority,
                              publicKey=public_pem(key) if key else None)
    except (ValueError, client.ApiException) as exc:
        print(f"benchfarm lease: {exc}", file=sys.stderr)
        return 2
    name = args.name or lease_name(user)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "BoardLease",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec.model_dump(mode="json", exclude_none=True)}
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    except client.ApiException as exc:    # refused at admission: the API server's message
        import json
        try:
            message = json.loads(exc.body or "{}").get("message", exc.body)
        except (TypeError, ValueError):
            message = exc.body
        print(f"benchfarm lease: refused: {message}", file=sys.stderr)
        return 1
    err = sys.stderr
    print(f"benchfarm lease: {ns}/{name} created ({args.duration} for {user})", file=err)
    try:
        st = _wait(custom, ns, name, {LeasePhase.granted, LeasePhase.refused, LeasePhase.ended},
                   err)
    except KeyboardInterrupt:
        _release(custom, ns, name)
        print(f"benchfarm lease: {ns}/{name} given up", file=err)
        return 130
    if st.get("phase") != LeasePhase.granted:
        cond: dict[str, Any] = next((c for c in st.get("conditions") or []
                                     if c.get("type") == Condition.granted), {})
        print(f"benchfarm lease: {st.get('phase')}: {cond.get('message', '')}", file=err)
        return 1
    cmds = st.get("commands") or {}
    env = {k: str(v) for k, v in (cmds.get("env") or {}).items()}
    print(f"benchfarm lease: {st['place']} is yours until {st['expiresAt']}", file=err)
    if not args.shell:
        for k, v in env.items():
            print(f"export {k}={v}")
        if "LG_COORDINATOR" not in env:
            print("# the coordinator takes only certificates: `benchfarm lease --shell` connects "
                  "labgrid-client with the lease's own")
        print(f"# {cmds.get('console')}\n# {cmds.get('powerCycle')}\n"
              f"# end it early: kubectl -n {ns} patch boardlease {name} --type merge "
              "-p '{\"spec\":{\"release\":true}}'")
        return 0
    print(f"benchfarm lease: {cmds.get('console')}; {cmds.get('powerCycle')}; exit the shell "
          "to release the board", file=err)
    access = st.get("access") or {}
    private = Path(tempfile.mkdtemp(prefix="benchfarm-lease-"))     # mode 0700
    forwarder = None
    try:
        if access.get("certificate") and key is not None:
            forwarder = _forward(access, key_pem(key), private)
            env["LG_COORDINATOR"] = forwarder.address
            print(f"benchfarm lease: labgrid-client reaches the coordinator as {user} through "
                  f"{forwarder.address} (a certificate valid until {access.get('expiresAt')})",
                  file=err)
        # the shell is the lease's: the lease's certificate behind its forwarder, none of the
        # labgrid keys this process may hold (`labgrid-client` would take those instead)
        own = {k: v for k, v in settings.environ.items() if not k.startswith(LABGRID_KEYS)}
        if access.get("ssh") and key is not None:
            config, bin_dir = _ssh(access["ssh"], key, private)
            own.update(BENCHFARM_SSH_CONFIG=str(config), PATH=f"{bin_dir}:{own.get('PATH', '')}")
            print(f"benchfarm lease: labgrid-client reaches {st['place']}'s console and power "
                  "through the exporter hosts' SSH with the lease's own certificate", file=err)
        code = subprocess.call([settings.shell], env={**own, **env})
    finally:
        if forwarder is not None:
            forwarder.close()
        shutil.rmtree(private, ignore_errors=True)
        _release(custom, ns, name)
        st = _wait(custom, ns, name, {LeasePhase.ended}, err)
        end = st.get("leaseEnd") or {}
        print(f"benchfarm lease: {ns}/{name} released: {end.get('message', '')}", file=err)
    return code
