"""The embedded default lab: a real control plane, MinIO, labgrid and QEMU boards on one machine.

`benchfarm lab up` starts, in order and idempotently, etcd, kube-apiserver (token auth + RBAC),
kube-controller-manager, MinIO, labgrid's coordinator, the virtual lab (serial brokers + PDU), one
labgrid-exporter per exporter host of the inventory, and an iperf3 peer; then creates and tags the
places. Every component's state lives under `.benchfarm/`, its log under `.benchfarm/logs/`, its
PID in `.benchfarm/pids/`, and `lab down` stops only what those PID files name.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("BENCHFARM_STATE", REPO / ".benchfarm"))
CACHE = Path(os.environ.get("BENCHFARM_CACHE", Path.home() / ".cache" / "benchfarm"))
PORT_BASE = int(os.environ.get("BENCHFARM_PORT_BASE", "21000"))
INVENTORY = Path(os.environ.get("BENCHFARM_INVENTORY", REPO / "exporters" / "virtual" / "lab.yaml"))
DEVICE_TYPES = REPO / "exporters" / "device-types"
VENV_BIN = Path(sys.executable).parent

K8S_VERSION = "v1.34.4"
ETCD_VERSION = "v3.5.35"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
HELM_VERSION = "v3.19.5"
BUCKET = "benchfarm-artifacts"


class LabError(Exception):
    """A component could not start; the message names it and its log."""


@dataclass(frozen=True)
class Ports:
    etcd: int = PORT_BASE + 379
    etcd_peer: int = PORT_BASE + 380
    apiserver: int = PORT_BASE + 443
    controller_manager: int = PORT_BASE + 257
    minio: int = PORT_BASE + 900
    minio_console: int = PORT_BASE + 901
    coordinator: int = PORT_BASE + 408
    pdu: int = PORT_BASE + 80
    iperf3: int = PORT_BASE + 201
    operator_liveness: int = PORT_BASE + 81
    operator_metrics: int = PORT_BASE + 82
    chart_probes: int = PORT_BASE + 83       # the chart-installed operator in tests
    chart_metrics: int = PORT_BASE + 84
    serial_base: int = PORT_BASE + 100


PORTS = Ports()


def say(msg: str) -> None:
    print(f"[lab] {msg}", flush=True)


# -- processes ------------------------------------------------------------------------------
def _pidfile(name: str) -> Path:
    return STATE / "pids" / f"{name}.pid"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def running_pid(name: str) -> int | None:
    try:
        pid = int(_pidfile(name).read_text())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_process(name: str, argv: list[str], *, ports: list[int], ready: Callable[[], bool],
                  env: dict[str, str] | None = None, cwd: Path | None = None,
                  timeout: float = 60.0) -> None:
    """Start a component unless it already runs; wait until `ready()`; fail with its log."""
    log = STATE / "logs" / f"{name}.log"
    pid = running_pid(name)
    if pid is not None:
        if ready():
            return
        say(f"{name}: running (pid {pid}) but not ready; restarting")
        stop_process(name)
    for port in ports:
        if not _port_free(port):
            raise LabError(f"{name}: port {port} on 127.0.0.1 is already taken by another program;"
                           f" stop it or set BENCHFARM_PORT_BASE (now {PORT_BASE}) to another range")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {name}\n".encode())
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, cwd=cwd,
                                start_new_session=True)
    _pidfile(name).parent.mkdir(parents=True, exist_ok=True)
    _pidfile(name).write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"{name}: exited with code {proc.returncode} while starting; see {log}:\n"
                           + _tail(log))
        if ready():
            return
        time.sleep(0.2)
    raise LabError(f"{name}: not ready after {timeout:.0f} s; see {log}:\n" + _tail(log))


def stop_process(name: str, timeout: float = 20.0) -> bool:
    pid = running_pid(name)
    _pidfile(name).unlink(missing_ok=True)
    if pid is None:
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)
    return True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# -- binaries -------------------------------------------------------------------------------
def binaries() -> dict[str, Path]:
    paths = {
        "etcd": CACHE / "bin" / f"etcd-{ETCD_VERSION}" / "etcd",
        "kube-apiserver": CACHE / "bin" / f"kubernetes-{K8S_VERSION}" / "kube-apiserver",
        "kube-controller-manager": CACHE / "bin" / f"kubernetes-{K8S_VERSION}" / "kube-controller-manager",
        "kubectl": CACHE / "bin" / f"kubernetes-{K8S_VERSION}" / "kubectl",
        "minio": CACHE / "bin" / f"minio-{MINIO_VERSION}" / "minio",
        "helm": CACHE / "bin" / f"helm-{HELM_VERSION}" / "helm",
    }
    missing = [n for n, p in paths.items() if not p.exists()]
    if missing:
        say(f"building {', '.join(missing)} from the Go module proxy (first time only)")
        env = {**os.environ, "K8S_VERSION": K8S_VERSION, "ETCD_VERSION": ETCD_VERSION,
               "MINIO_VERSION": MINIO_VERSION, "HELM_VERSION": HELM_VERSION,
               "BENCHFARM_CACHE": str(CACHE)}
        wanted = sorted({"kubernetes" if n.startswith("kube") else n for n in missing})
        if subprocess.run(["bash", str(REPO / "hack" / "build-binaries.sh"), *wanted],
                          env=env).returncode != 0:
            raise LabError("building the lab binaries failed; see the [build] lines above")
    return paths


# -- PKI and credentials --------------------------------------------------------------------
def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def ensure_pki() -> Path:
    pki = STATE / "pki"
    if (pki / "apiserver.crt").exists() and (pki / "tokens.csv").exists():
        return pki
    pki.mkdir(parents=True, exist_ok=True)
    os.chmod(pki, 0o700)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj",
             "/CN=benchfarm-lab-ca", "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"))
    (pki / "san.cnf").write_text(
        "[req]\ndistinguished_name=dn\n[dn]\n[ext]\nsubjectAltName=DNS:localhost,IP:127.0.0.1,"
        "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
             "-keyout", str(pki / "apiserver.key"), "-out", str(pki / "apiserver.csr"))
    _openssl("x509", "-req", "-in", str(pki / "apiserver.csr"), "-CA", str(pki / "ca.crt"),
             "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "3650",
             "-extfile", str(pki / "san.cnf"), "-extensions", "ext", "-out", str(pki / "apiserver.crt"))
    _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    admin, kcm = secrets.token_hex(24), secrets.token_hex(24)
    (pki / "tokens.csv").write_text(
        f'{admin},benchfarm-admin,uid-admin,"system:masters"\n'
        f"{kcm},system:kube-controller-manager,uid-kcm\n")
    (pki / "admin.token").write_text(admin)
    (pki / "kcm.token").write_text(kcm)
    for f in pki.iterdir():
        os.chmod(f, 0o600)
    return pki


def write_kubeconfig(path: Path, token: str, user: str) -> None:
    import base64
    ca = base64.b64encode((STATE / "pki" / "ca.crt").read_bytes()).decode()
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "benchfarm-lab",
        "clusters": [{"name": "benchfarm-lab", "cluster": {
            "server": f"https://127.0.0.1:{PORTS.apiserver}", "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "benchfarm-lab", "context": {
            "cluster": "benchfarm-lab", "user": user, "namespace": "default"}}],
    }
    path.write_text(yaml.safe_dump(cfg))
    os.chmod(path, 0o600)


def minio_credentials() -> tuple[str, str]:
    f = STATE / "minio" / "credentials.json"
    if not f.exists():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"access": "bf" + secrets.token_hex(8),
                                 "secret": secrets.token_urlsafe(30)}))
        os.chmod(f, 0o600)
    data = json.loads(f.read_text())
    return data["access"], data["secret"]


# -- readiness probes -----------------------------------------------------------------------
def _http_ok(url: str, token: str | None = None, body: str | None = None) -> bool:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=str(STATE / "pki" / "ca.crt")) \
        if url.startswith("https://127.0.0.1:%d" % PORTS.apiserver) else ssl._create_unverified_context()
    try:
        with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
            text = resp.read().decode(errors="replace")
            return resp.status == 200 and (body is None or body in text)
    except Exception:
        return False


# -- components -----------------------------------------------------------------------------
def start_control_plane(bins: dict[str, Path]) -> None:
    pki = ensure_pki()
    admin = (pki / "admin.token").read_text()
    start_process("etcd", [
        str(bins["etcd"]), "--name", "benchfarm", "--data-dir", str(STATE / "etcd"),
        "--listen-client-urls", f"http://127.0.0.1:{PORTS.etcd}",
        "--advertise-client-urls", f"http://127.0.0.1:{PORTS.etcd}",
        "--listen-peer-urls", f"http://127.0.0.1:{PORTS.etcd_peer}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{PORTS.etcd_peer}",
        "--initial-cluster", f"benchfarm=http://127.0.0.1:{PORTS.etcd_peer}",
        "--listen-metrics-urls", "", "--log-level", "warn", "--quota-backend-bytes", "2147483648",
    ], ports=[PORTS.etcd, PORTS.etcd_peer],
        ready=lambda: _http_ok(f"http://127.0.0.1:{PORTS.etcd}/health", body='"health":"true"'))
    start_process("kube-apiserver", [
        str(bins["kube-apiserver"]), f"--etcd-servers=http://127.0.0.1:{PORTS.etcd}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={PORTS.apiserver}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--token-auth-file={pki / 'tokens.csv'}", "--authorization-mode=RBAC",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--api-audiences=https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range=10.96.0.0/24", "--endpoint-reconciler-type=none",
        "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,DefaultStorageClass,"
        "ResourceQuota,PodSecurity",
        "--event-ttl=2h", "--v=1",
    ], ports=[PORTS.apiserver], timeout=90,
        ready=lambda: _http_ok(f"https://127.0.0.1:{PORTS.apiserver}/readyz", token=admin))
    kcm_kubeconfig = STATE / "kcm.kubeconfig"
    write_kubeconfig(kcm_kubeconfig, (pki / "kcm.token").read_text(), "kube-controller-manager")
    start_process("kube-controller-manager", [
        str(bins["kube-controller-manager"]), f"--kubeconfig={kcm_kubeconfig}",
        f"--authentication-kubeconfig={kcm_kubeconfig}", f"--authorization-kubeconfig={kcm_kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={PORTS.controller_manager}",
        "--controllers=namespace-controller,garbage-collector-controller,"
        "serviceaccount-controller,serviceaccount-token-controller",
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        "--leader-elect=false", "--use-service-account-credentials=false", "--v=1",
    ], ports=[PORTS.controller_manager], timeout=60,
        ready=lambda: _http_ok(f"https://127.0.0.1:{PORTS.controller_manager}/healthz"))


def start_minio(bins: dict[str, Path]) -> None:
    access, secret = minio_credentials()
    data = STATE / "minio" / "data"
    data.mkdir(parents=True, exist_ok=True)
    start_process("minio", [
        str(bins["minio"]), "server", str(data), "--address", f"127.0.0.1:{PORTS.minio}",
        "--console-address", f"127.0.0.1:{PORTS.minio_console}", "--quiet",
    ], env={"MINIO_ROOT_USER": access, "MINIO_ROOT_PASSWORD": secret,
            "MINIO_BROWSER": "off", "MINIO_UPDATE": "off"},
        ports=[PORTS.minio, PORTS.minio_console], timeout=60,
        ready=lambda: _http_ok(f"http://127.0.0.1:{PORTS.minio}/minio/health/ready"))
    from minio import Minio
    client = Minio(f"127.0.0.1:{PORTS.minio}", access_key=access, secret_key=secret, secure=False)
    if not client.bucket_exists(BUCKET):
        client.make_bucket(BUCKET)


def load_inventory() -> dict:
    return yaml.safe_load(INVENTORY.read_text())


def device_type(name: str) -> dict:
    return yaml.safe_load((DEVICE_TYPES / f"{name}.yaml").read_text())


def image_profile(dtype: dict) -> str:
    return (dtype.get("virtual") or {}).get("image") or dtype["arch"]


def build_images(profiles: set[str]) -> dict[str, Path]:
    out = {}
    for profile in sorted(profiles):
        res = subprocess.run([sys.executable, str(REPO / "exporters/virtual/build_image.py"),
                              profile], stdout=subprocess.PIPE, text=True)
        if res.returncode != 0:
            raise LabError(f"virtual board image {profile}: build failed (see [image] lines above)")
        out[profile] = Path(res.stdout.strip())
    return out


def qemu_argv(board: dict, dtype: dict, image: Path, serial_socket: Path, qmp_socket: Path,
              scratch: Path) -> list[str]:
    virtual = dtype.get("virtual") or {}
    cmdline = f"printk.time=1 panic=-1 benchfarm.board={board['name']}"
    if virtual.get("append"):
        cmdline += " " + virtual["append"]
    memory = board.get("memoryMiB") or virtual.get("memoryMiB") or 1024
    common = [
        "-accel", "tcg", "-smp", str(board.get("cpus", 2)), "-m", str(memory),
        "-display", "none", "-nodefaults", "-no-user-config", "-no-reboot",
        "-chardev", f"socket,id=s0,path={serial_socket},reconnect=1", "-serial", "chardev:s0",
        "-qmp", f"unix:{qmp_socket},server=on,wait=off",
        "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initramfs.cpio"),
        "-drive", f"file={scratch},if=virtio,format=raw,cache=unsafe",
        *[str(a) for a in virtual.get("qemuArgs", [])],
    ]
    if dtype["arch"] == "amd64":
        return ["qemu-system-x86_64", "-M", "pc", "-global", "PIIX4_PM.disable_s3=0",
                "-rtc", "base=utc", *common,
                "-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,romfile=",
                "-append", f"console=ttyS0 {cmdline}"]
    return ["qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a53", *common,
            "-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,romfile=",
            "-append", f"console=ttyAMA0 {cmdline}"]


def start_virtual_lab(inventory: dict) -> dict:
    boards = inventory["boards"]
    dtypes = {b["deviceType"]: device_type(b["deviceType"]) for b in boards}
    images = build_images({image_profile(d) for d in dtypes.values()})
    rundir = STATE / "vlab"
    rundir.mkdir(parents=True, exist_ok=True)
    config_boards = []
    for index, board in enumerate(boards):
        dtype = dtypes[board["deviceType"]]
        bdir = STATE / "boards" / board["name"]
        bdir.mkdir(parents=True, exist_ok=True)
        scratch = bdir / "scratch.img"
        if not scratch.exists():
            with scratch.open("wb") as f:
                f.truncate(256 * 1024 * 1024)
        serial_socket, qmp_socket = bdir / "serial.sock", bdir / "qmp.sock"
        config_boards.append({
            "name": board["name"], "index": index, "exporter": board["exporter"],
            "device_type": board["deviceType"], "labels": board.get("labels", {}),
            "cpus": board.get("cpus", 2), "rails": dtype.get("rails", []),
            "serial_port": PORTS.serial_base + index, "serial_socket": str(serial_socket),
            "qmp_socket": str(qmp_socket),
            "qemu_argv": qemu_argv(board, dtype, images[image_profile(dtype)], serial_socket,
                                   qmp_socket, scratch),
        })
    code = (REPO / "exporters/virtual/vlab.py").read_bytes()
    config = {"logdir": str(STATE / "logs"), "pdu_port": PORTS.pdu, "boards": config_boards,
              "code": hashlib.sha256(code).hexdigest()[:16]}
    cfg_path = rundir / "vlab.json"
    changed = not cfg_path.exists() or json.loads(cfg_path.read_text()) != config
    if changed and running_pid("vlab"):
        say("virtual lab: inventory, images or code changed; restarting it")
        stop_process("vlab")
    cfg_path.write_text(json.dumps(config, indent=2))
    start_process("vlab", [sys.executable, str(REPO / "exporters/virtual/vlab.py"), str(cfg_path)],
                  ports=[PORTS.pdu] + [b["serial_port"] for b in config_boards],
                  ready=lambda: _port_open(PORTS.pdu))
    return config


def exporter_config(config: dict, exporter: str) -> dict:
    groups = {}
    for b in config["boards"]:
        if b["exporter"] != exporter:
            continue
        groups[b["name"]] = {
            "NetworkSerialPort": {"host": "127.0.0.1", "port": b["serial_port"], "speed": 115200,
                                  "protocol": "raw"},
            "NetworkPowerPort": {"model": "simplerest", "index": b["index"],
                                 "host": f"http://127.0.0.1:{PORTS.pdu}/outlet/{{index}}/{{value}}"},
        }
    return groups


def start_labgrid(config: dict, inventory: dict) -> None:
    coord_dir = STATE / "coordinator"
    coord_dir.mkdir(parents=True, exist_ok=True)
    start_process("labgrid-coordinator", [
        str(VENV_BIN / "labgrid-coordinator"), "--listen", f"127.0.0.1:{PORTS.coordinator}",
    ], cwd=coord_dir, ports=[PORTS.coordinator], ready=lambda: _port_open(PORTS.coordinator))
    from .lab.coordinator import Coordinator
    coordinator = Coordinator(f"127.0.0.1:{PORTS.coordinator}", user="lab-admin", host="benchfarm-lab")
    try:
        for exp in inventory["exporters"]:
            name = exp["name"]
            cfg = STATE / "exporters" / f"{name}.yaml"
            cfg.parent.mkdir(parents=True, exist_ok=True)
            cfg.write_text(yaml.safe_dump(exporter_config(config, name)))
            expected = {f"{name}/{b['name']}/{cls}/{cls}" for b in config["boards"]
                        if b["exporter"] == name for cls in ("NetworkSerialPort", "NetworkPowerPort")}

            def exporter_ready(name: str = name, expected: set[str] = expected) -> bool:
                try:
                    return expected <= set(coordinator.resources().get(name, []))
                except Exception:
                    return False
            start_process(f"labgrid-exporter-{name}", [
                str(VENV_BIN / "labgrid-exporter"), "--coordinator", f"127.0.0.1:{PORTS.coordinator}",
                "--name", name, "--hostname", "127.0.0.1", str(cfg),
            ], ports=[], ready=exporter_ready, timeout=60)
        for b in config["boards"]:
            tags = {"device_type": b["device_type"], **{k: str(v) for k, v in b["labels"].items()}}
            coordinator.ensure_place(b["name"], match=f"{b['exporter']}/{b['name']}/*", tags=tags,
                                     comment=f"virtual board ({b['device_type']})")
    finally:
        coordinator.close()


def start_iperf3() -> None:
    if shutil.which("iperf3") is None:
        say("iperf3 not installed on the host; network suites will have no peer")
        return
    start_process("iperf3", ["iperf3", "-s", "-p", str(PORTS.iperf3)], ports=[PORTS.iperf3],
                  ready=lambda: _port_open(PORTS.iperf3))


def write_env() -> Path:
    access, secret = minio_credentials()
    kubeconfig = STATE / "kubeconfig"
    write_kubeconfig(kubeconfig, (STATE / "pki" / "admin.token").read_text(), "benchfarm-admin")
    kubectl_dir = CACHE / "bin" / f"kubernetes-{K8S_VERSION}"
    env = {
        "KUBECONFIG": str(kubeconfig),
        "LG_COORDINATOR": f"127.0.0.1:{PORTS.coordinator}",
        "BENCHFARM_S3_ENDPOINT": f"127.0.0.1:{PORTS.minio}",
        "BENCHFARM_S3_ACCESS_KEY": access,
        "BENCHFARM_S3_SECRET_KEY": secret,
        "BENCHFARM_S3_BUCKET": BUCKET,
        "BENCHFARM_S3_SECURE": "false",
        "BENCHFARM_STATE": str(STATE),
        "BENCHFARM_IPERF3_PEER": f"10.0.2.2:{PORTS.iperf3}",
        "BENCHFARM_DEVICE_TYPES": str(DEVICE_TYPES),
        "BENCHFARM_LIVENESS": f"http://127.0.0.1:{PORTS.operator_liveness}/healthz",
        "BENCHFARM_METRICS_PORT": str(PORTS.operator_metrics),
        "BENCHFARM_METRICS_ADDR": "127.0.0.1",
        "BENCHFARM_SESSION_PIDS": str(STATE / "pids"),
    }
    lines = [f"export {k}='{v}'" for k, v in env.items()]
    helm_dir = CACHE / "bin" / f"helm-{HELM_VERSION}"
    lines.append(f"export PATH='{VENV_BIN}:{kubectl_dir}:{helm_dir}':\"$PATH\"")
    path = STATE / "env"
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path


def lab_env() -> dict[str, str]:
    """The variables of `.benchfarm/env` as a dict (for tests and the CLI)."""
    out = {}
    for line in (STATE / "env").read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            k, v = line[7:].split("=", 1)
            out[k] = v.strip("'")
    return out


def kubectl(*args: str, check: bool = True, capture: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, **lab_env()}
    exe = CACHE / "bin" / f"kubernetes-{K8S_VERSION}" / "kubectl"
    return subprocess.run([str(exe), *args], env=env, check=check, text=True,
                          capture_output=capture)


def install_crds_and_plans() -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"), capture=True)
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all", capture=True)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "testplans"), capture=True)


def start_operator() -> None:
    """The operator as a lab component: same command a cluster Deployment runs."""
    install_crds_and_plans()
    env = lab_env()
    start_process("benchfarm-operator", [str(VENV_BIN / "benchfarm"), "operator"], env=env,
                  ports=[PORTS.operator_liveness, PORTS.operator_metrics], timeout=90,
                  ready=lambda: _http_ok(env["BENCHFARM_LIVENESS"]))


def up() -> Path:
    t0 = time.monotonic()
    STATE.mkdir(parents=True, exist_ok=True)
    inventory = load_inventory()
    phase = time.monotonic()
    bins = binaries()
    say(f"binaries ready ({time.monotonic() - phase:.1f} s)")
    for name, step in (("control plane", lambda: start_control_plane(bins)),
                       ("MinIO", lambda: start_minio(bins))):
        phase = time.monotonic()
        step()
        say(f"{name} ready ({time.monotonic() - phase:.1f} s)")
    phase = time.monotonic()
    config = start_virtual_lab(inventory)
    say(f"virtual boards ready: {len(config['boards'])} ({time.monotonic() - phase:.1f} s)")
    phase = time.monotonic()
    start_labgrid(config, inventory)
    start_iperf3()
    say(f"labgrid coordinator, exporters and places ready ({time.monotonic() - phase:.1f} s)")
    env = write_env()
    say(f"lab up in {time.monotonic() - t0:.1f} s; `source {env}` to use it")
    return env


COMPONENTS_DOWN_ORDER = ["benchfarm-operator*", "session-*", "iperf3", "labgrid-exporter-*", "labgrid-coordinator",
                         "vlab", "minio", "kube-controller-manager", "kube-apiserver", "etcd"]


def down() -> None:
    pids = STATE / "pids"
    if not pids.exists():
        say("nothing to stop")
        return
    names = [p.stem for p in pids.glob("*.pid")]
    ordered: list[str] = []
    for pattern in COMPONENTS_DOWN_ORDER:
        ordered += sorted(n for n in names if n not in ordered and
                          (n == pattern or (pattern.endswith("*") and n.startswith(pattern[:-1]))))
    ordered += [n for n in names if n not in ordered]
    for name in ordered:
        if stop_process(name):
            say(f"stopped {name}")


def status() -> dict[str, int | None]:
    """Lab components (None when stopped) and the board sessions that still run."""
    out = {}
    for p in sorted((STATE / "pids").glob("*.pid")):
        pid = running_pid(p.stem)
        if p.stem.startswith("session-") and pid is None:
            p.unlink(missing_ok=True)    # a session that ended: nothing to report or restart
            continue
        out[p.stem] = pid
    return out


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "up"
    try:
        if cmd == "up":
            up()
            start_operator()
            say("operator running; log: " + str(STATE / "logs" / "benchfarm-operator.log"))
        elif cmd == "operator":
            start_operator()
            say("operator running; log: " + str(STATE / "logs" / "benchfarm-operator.log"))
        elif cmd == "down":
            down()
        elif cmd == "status":
            for name, pid in status().items():
                print(f"{name:32} {'running pid ' + str(pid) if pid else 'stopped'}")
        else:
            print("usage: benchfarm lab up|down|status|operator", file=sys.stderr)
            return 2
    except LabError as exc:
        print(f"[lab] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0
