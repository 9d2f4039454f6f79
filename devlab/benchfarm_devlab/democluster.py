"""`make demo-cluster`: the demo run on the one-node cluster, installed the way a lab installs
benchfarm.

The operator image built here from the Dockerfile (image.py) is imported into the cluster's
containerd under the name the chart's defaults give it (`benchfarm/operator:<appVersion>`, pull
policy IfNotPresent: nothing is pulled); `helm install` of helm/benchfarm into a namespace that
enforces the `restricted` pod security standard, with the chart's defaults (2 replicas, one
leader; board sessions as Jobs) and only the lab's addresses as values: the coordinator and
MinIO at the address pods reach the host on (cluster.HOST_ADDR, where the exporters also
advertise the boards' serial ports and power switches while the cluster runs), and the Secret
`benchfarm-ssh` (`ssh.existingSecret`) through which sessions stage software on the exporters. Then the same run
as `make demo`, applied with kubectl, and the same results table; it prints helm-install-to-Ready
seconds and the run's e2e-to-console ratio. The lab's local operator is stopped (one operator
per lab) and stays stopped while the release's operators are Ready (lab.start_operator).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

from benchfarm_devlab import cluster, image, lab, sshd
from benchfarm_devlab.config import (
    CACHE,
    HELM_VERSION,
    HOST_ADDR,
    PORTS,
    REPO,
    STATE,
    LabError,
    say,
)
from benchfarm_devlab.env import kubectl, lab_env, operator_env
from benchfarm_devlab.pki import labgrid_files
from benchfarm_devlab.processes import stop_process
from benchfarm_devlab.release import DEPLOYMENT, NAMESPACE, RELEASE, ready_replicas

CHART = REPO / "helm" / "benchfarm"
SECRET = "benchfarm-minio"
WARM_DEFAULT = 2          # the chart's sessions.warm
SSH_SECRET = "benchfarm-ssh"     # the exporters' SSH for staging (sshd.pod_files)
LABGRID_SECRET = "benchfarm-labgrid"   # the operator's labgrid certificate (pki.labgrid_files)
LABGRID_ISSUER_SECRET = "benchfarm-labgrid-issuer"   # the lab's labgrid CA, which issues sessions'


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    home = str(STATE / "helm")
    env = {**os.environ, **lab_env(), "HELM_CACHE_HOME": home, "HELM_CONFIG_HOME": home,
           "HELM_DATA_HOME": home}
    exe = CACHE / "bin" / f"helm-{HELM_VERSION}" / "helm"
    if not exe.exists():
        raise LabError(f"{exe} is not built: `make helm-binary` (make demo-cluster builds it)")
    res = subprocess.run([str(exe), *args], env=env,
                         capture_output=True, text=True)
    if check and res.returncode != 0:
        raise LabError(f"helm {' '.join(args[:2])}: {(res.stderr or res.stdout).strip()}")
    return res


def values() -> dict:
    """The chart's defaults but for where this lab's services are, as a pod sees them."""
    env = lab_env()
    return {"labgrid": {"coordinator": f"{HOST_ADDR}:{PORTS.coordinator}",
                        "tls": {"existingSecret": LABGRID_SECRET,
                                "issuerSecret": LABGRID_ISSUER_SECRET}},
            "minio": {"endpoint": f"{HOST_ADDR}:{PORTS.minio}", "bucket": env["BENCHFARM_S3_BUCKET"],
                      "existingSecret": SECRET},
            "ssh": {"existingSecret": SSH_SECRET},
            # the lab's own LabPolicy "default" and TestPlans (cluster-scoped) stay as they are
            "labPolicy": {"create": False}, "testPlans": {"install": False}}


def _namespace() -> None:
    env = lab_env()
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest"}}}
    kubectl("apply", "-f", "-", input=json.dumps(manifest), capture=True)
    secret = kubectl("create", "secret", "generic", SECRET, "-n", NAMESPACE,
                     f"--from-literal=accessKey={env['BENCHFARM_S3_ACCESS_KEY']}",
                     f"--from-literal=secretKey={env['BENCHFARM_S3_SECRET_KEY']}",
                     "--dry-run=client", "-o", "yaml", capture=True).stdout
    kubectl("apply", "-f", "-", input=secret, capture=True)
    kubectl("apply", "-f", "-", capture=True, input=json.dumps(ssh_secret(NAMESPACE, SSH_SECRET)))
    kubectl("apply", "-f", "-", capture=True,
            input=json.dumps(labgrid_secret(NAMESPACE, LABGRID_SECRET)))
    kubectl("apply", "-f", "-", capture=True,
            input=json.dumps(labgrid_issuer_secret(NAMESPACE, LABGRID_ISSUER_SECRET)))


def labgrid_secret(namespace: str, name: str) -> dict:
    """The Secret the chart's `labgrid.tls.existingSecret` names: the operator's labgrid client
    certificate and the lab's labgrid CA (the coordinator takes nothing else)."""
    files = labgrid_files("operator")
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": {"ca.crt": Path(files["BENCHFARM_LABGRID_CA"]).read_text(),
                           "tls.crt": Path(files["BENCHFARM_LABGRID_CERT"]).read_text(),
                           "tls.key": Path(files["BENCHFARM_LABGRID_KEY"]).read_text()}}


def labgrid_issuer_secret(namespace: str, name: str) -> dict:
    """The Secret the chart's `labgrid.tls.issuerSecret` names: the lab's labgrid CA, with which
    the operator issues each session's certificate and each lease's."""
    env = operator_env()
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": {"tls.crt": Path(env["BENCHFARM_LABGRID_ISSUER_CERT"]).read_text(),
                           "tls.key": Path(env["BENCHFARM_LABGRID_ISSUER_KEY"]).read_text()}}


def ssh_secret(namespace: str, name: str) -> dict:
    """The Secret the chart's `ssh.existingSecret` names: the lab's exporter SSH key, an
    ssh_config for pods and the pinned host key of the lab's sshd (sshd.pod_files)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace}, "stringData": sshd.pod_files()}


def operator_pods(terminating: bool = False) -> list[str]:
    """The release's operator pods (those being deleted only with `terminating`)."""
    res = kubectl("get", "pods", "-n", NAMESPACE, "-l",
                  f"app.kubernetes.io/name=benchfarm,app.kubernetes.io/instance={RELEASE}", "-o",
                  "json", check=False, capture=True)
    pods = json.loads(res.stdout)["items"] if res.returncode == 0 else []
    return [p["metadata"]["name"] for p in pods
            if terminating or not p["metadata"].get("deletionTimestamp")]


def leader() -> str | None:
    """The operator pod that holds the leader Lease."""
    res = kubectl("get", "lease", "-n", NAMESPACE, "benchfarm-operator", "-o",
                  "jsonpath={.spec.holderIdentity}", check=False, capture=True)
    return res.stdout.strip() or None if res.returncode == 0 else None


def install(extra: dict | None = None) -> float:
    """Import the operator image, `helm install` the chart afresh; the seconds from helm install
    to every replica Ready."""
    img = image.build()
    say(f"operator image {img.ref}: {img.digest}")
    digest = cluster.import_image(img.archive, img.name)
    say(f"imported into the cluster's containerd as {img.name} ({digest})")
    stop_process("benchfarm-operator")      # one operator per lab: the release's from now on
    if helm("status", RELEASE, "-n", NAMESPACE, check=False).returncode == 0:
        say(f"uninstalling the previous release {RELEASE} (helm install is timed from nothing)")
        helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s")
        deadline = time.monotonic() + 120     # its pods go after it, in their grace period
        while operator_pods(terminating=True) and time.monotonic() < deadline:
            time.sleep(0.5)
    # helm removes the operators' RBAC with them, so the leader could not hand its Lease over:
    # the new release would wait out its expiry (15 s) before leading
    kubectl("delete", "lease", "-n", NAMESPACE, "benchfarm-operator", "--ignore-not-found",
            capture=True, check=False)
    _namespace()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump({**values(), **(extra or {})}, f)
    replicas = (extra or {}).get("replicas", 2)
    say(f"helm install {RELEASE} helm/benchfarm -n {NAMESPACE} (image {img.name}, "
        f"{replicas} replicas, sessions as Jobs)")
    t0 = time.monotonic()
    try:
        helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "-f", f.name, "--wait",
             "--timeout", "300s")
    finally:
        Path(f.name).unlink()
    while ready_replicas() < replicas:
        if time.monotonic() - t0 > 300:
            raise LabError(f"{DEPLOYMENT}: not {replicas} replicas Ready after 300 s; "
                           f"kubectl -n {NAMESPACE} describe pods")
        time.sleep(0.2)
    seconds = time.monotonic() - t0
    say(f"helm install -> {replicas} operator pods Ready: {seconds:.1f} s")
    return seconds


def warm_pods_ready(want: int, timeout: float = 180.0) -> None:
    """Wait until the leader's warm session slots (operator/launch/warm.py) are imported and Ready: a lab's
    pool is warm between runs, and the demo times a run as it starts there."""
    t0 = time.monotonic()
    ready = 0
    while time.monotonic() - t0 < timeout:
        out = kubectl("get", "pods", "-n", NAMESPACE, "-l", "benchfarm.io/warm-slot", "-o",
                      "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Ready')].status}"
                      "{'\\n'}{end}", capture=True, check=False).stdout
        if (ready := out.split().count("True")) >= want:
            say(f"{ready} warm session pods Ready ({time.monotonic() - t0:.1f} s)")
            return
        time.sleep(0.5)
    say(f"only {ready} of {want} warm session pods Ready after {timeout:.0f} s; "
        f"runs start in cold Jobs meanwhile")


def _wall(stamp: str) -> float:
    """RFC 3339 (nanoseconds or none, Z) -> epoch seconds."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", stamp)
    if not m:
        raise ValueError(stamp)
    whole = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return whole + float(m.group(2) or 0)


def _logs(*args: str) -> list[tuple[float, str]]:
    """`kubectl logs --timestamps` as (wall clock, line): the kubelet's nanosecond stamps."""
    res = kubectl("logs", "-n", NAMESPACE, "--timestamps", *args, check=False, capture=True)
    out = []
    for line in res.stdout.splitlines():
        stamp, _, text = line.partition(" ")
        try:
            out.append((_wall(stamp), text))
        except ValueError:
            pass
    return out


def timeline(namespace: str, name: str, applied: float, power_on: float) -> list[tuple[str, float]]:
    """Where apply -> first power-on went, from the timestamps the lab keeps: the operator's and
    the session's logs (kubelet stamps), the scheduler's event, containerd's log (sandbox and
    container started). Milestones as (what, seconds after apply); a missing one is left out."""
    def get(*args: str) -> dict:
        res = kubectl("get", *args, "-o", "json", check=False, capture=True)
        return json.loads(res.stdout) if res.returncode == 0 else {}
    uid = get("benchmarkrun", "-n", namespace, name).get("metadata", {}).get("uid", "")
    jobs = get("jobs", "-n", NAMESPACE, "-l", f"benchfarm.io/run-uid={uid}").get("items", [])
    if not uid or not jobs:
        return []
    job = min(jobs, key=lambda j: j["metadata"]["creationTimestamp"])["metadata"]["name"]
    pods = get("pods", "-n", NAMESPACE, "-l", f"job-name={job}").get("items", [])
    marks: dict[str, float] = {}
    for pod in operator_pods():
        for t, text in _logs(pod):
            if "launched the session of" in text and job in text:
                marks["operator created the Job"] = t
    if pods:
        pod = pods[0]
        pod_name = pod["metadata"]["name"]
        for ev in get("events", "-n", NAMESPACE, "--field-selector",
                      f"involvedObject.name={pod_name}").get("items", []):
            if ev.get("reason") == "Scheduled":
                marks["pod scheduled"] = _wall(ev.get("eventTime") or ev["firstTimestamp"])
        cid = (pod["status"].get("containerStatuses") or [{}])[0].get("containerID", "")
        cid = cid.split("://")[-1]
        sandbox = re.compile(r'time="(\S+)".*RunPodSandbox for .*Name:' + re.escape(pod_name)
                             + r",.* returns sandbox id")
        started = f'StartContainer for \\"{cid}\\" returns successfully'
        for line in (STATE / "logs" / "containerd.log").read_text(errors="replace").splitlines():
            if (m := sandbox.search(line)):
                marks["sandbox ready (network)"] = _wall(m.group(1))
            elif cid and started in line:
                marks["container started"] = _wall(line.split('"')[1])
        for t, text in _logs(pod_name):
            if "started" in text and "after its process" in text:
                marks["Python up (imports done)"] = t
            elif "acquired" in text and "place" in text:
                marks["place acquired (labgrid connected)"] = t
    marks["first power-on"] = power_on
    # a warm slot's pod was scheduled, started and imported before the run existed
    return sorted(((k, v - applied) for k, v in marks.items() if v >= applied),
                  key=lambda kv: kv[1])


def print_timeline(namespace: str, name: str, applied: float, power_on: float) -> None:
    steps = timeline(namespace, name, applied, power_on)
    last = 0.0
    print("[demo-cluster] apply -> first power-on, where the time went:")
    for what, t in steps:
        print(f"[demo-cluster]   {t:6.2f} s (+{t - last:5.2f})  {what}")
        last = t


def demo_cluster(manifest: str | None = None, runs: int = 1) -> int:
    from benchfarm.settings import Settings
    from benchfarm_devlab.demo import DemoRun, run_demo
    t0 = time.monotonic()
    try:
        lab.up()
        os.environ.update({k: v for k, v in lab_env().items() if k != "PATH"})
        lab.install_crds_and_plans()
        cluster.up()
        seconds = install()
        deadline = time.monotonic() + 30
        while (who := leader()) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        say(f"leader: {who}")
    except LabError as exc:
        say(f"ERROR: {exc}")
        return 1
    results: list[DemoRun] = []
    for i in range(runs):
        warm_pods_ready(int(values().get("sessions", {}).get("warm", WARM_DEFAULT)))
        if runs > 1:
            say(f"demo run {i + 1} of {runs}")
        results.append(run_demo(manifest, t0, Settings.from_env(), after=print_timeline))
    ok = all(r.ok for r in results)
    # the session writes the run's end, then powers off and exits: its Job completes just after
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and kubectl(
            "get", "jobs", "-n", NAMESPACE, "-l", "benchfarm.io/run-uid", "-o",
            "jsonpath={.items[?(@.status.active)].metadata.name}", capture=True,
            check=False).stdout.strip():
        time.sleep(0.5)
    kubectl("get", "jobs", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=benchfarm-session")
    timed = [r for r in results if r.power_on_s is not None and r.ratio is not None]
    if len(timed) > 1:
        power = statistics.median(r.power_on_s for r in timed if r.power_on_s is not None)
        ratio = statistics.median(r.ratio for r in timed if r.ratio is not None)
        print(f"[demo-cluster] over {len(timed)} runs: kubectl apply -> first power-on "
              f"{', '.join(f'{r.power_on_s:.2f}' for r in timed)} s (median {power:.2f} s); ratio "
              f"{', '.join(f'{r.ratio:.2f}' for r in timed)} (median {ratio:.2f}x)")
    print(f"[demo-cluster] helm install -> operator pods Ready: {seconds:.1f} s; the session ran "
          f"as a Job (`kubectl logs -n {NAMESPACE} job/<name>`); `make cluster-down` and `make "
          "lab-up` go back to the local operator")
    return 0 if ok else 1
