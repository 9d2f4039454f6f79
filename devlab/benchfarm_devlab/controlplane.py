"""The control plane and the store: etcd, kube-apiserver (token auth, Node+RBAC authorization,
PodSecurity), kube-controller-manager and MinIO with the artifact bucket, all on 127.0.0.1.

One control plane with or without a node: the API server always carries the flags a kubelet
needs (they change nothing while there is none); the controller-manager runs the few
controllers the light lab needs, or every controller a node needs while `cluster-up`'s
cluster is wanted, and is restarted when that changes.
"""

from __future__ import annotations

from pathlib import Path

from benchfarm_devlab.config import BUCKET, CLUSTER_DIR, PORTS, SERVICE_CIDR, STATE
from benchfarm_devlab.pki import ensure_pki, minio_credentials, write_kubeconfig
from benchfarm_devlab.processes import http_ok, start_process

AUDIT_LOG = STATE / "logs" / "audit.log"

# What the API server records: every write to benchfarm's objects and Leases, and Events, with
# who made it (metadata only, no bodies): how many writes a run costs is counted from here.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete]
    resources:
      - {group: benchfarm.io}
      - {group: coordination.k8s.io, resources: [leases]}
      - {group: "", resources: [events, configmaps]}
  - level: None
"""


def _audit_policy() -> Path:
    path = STATE / "audit-policy.yaml"
    if not path.exists() or path.read_text() != AUDIT_POLICY:
        path.write_text(AUDIT_POLICY)
    return path


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
        ready=lambda: http_ok(f"http://127.0.0.1:{PORTS.etcd}/health", body='"health":"true"'))
    start_process("kube-apiserver", [
        str(bins["kube-apiserver"]), f"--etcd-servers=http://127.0.0.1:{PORTS.etcd}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={PORTS.apiserver}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--token-auth-file={pki / 'tokens.csv'}",
        # for a kubelet (cluster/), harmless without one: the Node authorizer and NodeRestriction
        # only concern system:node:* users; the kubelet is reached by its InternalIP (no DNS here)
        "--authorization-mode=Node,RBAC", "--kubelet-preferred-address-types=InternalIP,Hostname",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--api-audiences=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--endpoint-reconciler-type=none",
        "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,DefaultStorageClass,"
        "ResourceQuota,PodSecurity,NodeRestriction",
        "--event-ttl=2h", "--v=1",
        f"--audit-policy-file={_audit_policy()}", f"--audit-log-path={AUDIT_LOG}",
        "--audit-log-format=json", "--audit-log-maxsize=200", "--audit-log-maxbackup=1",
    ], ports=[PORTS.apiserver], timeout=90, restart_on_change=True,
        ready=lambda: http_ok(f"https://127.0.0.1:{PORTS.apiserver}/readyz", token=admin))
    start_controller_manager(bins)


# Without a node the lab needs only these; with one (cluster/) every default controller runs
# (Deployments, ReplicaSets, Jobs, EndpointSlices, node lifecycle, pod GC, the root CA ConfigMap
# that ServiceAccount token volumes mount) except those that want a cloud or assign pod CIDRs.
LIGHT_CONTROLLERS = ("namespace-controller,garbage-collector-controller,"
                     "serviceaccount-controller,serviceaccount-token-controller,job-controller,"
                     "ttl-after-finished-controller")
CLUSTER_CONTROLLERS = ("*,-node-ipam-controller,-service-lb-controller,"
                       "-cloud-node-lifecycle-controller,-node-route-controller")


def cluster_wanted() -> bool:
    """Whether `cluster-up` ran (and `cluster-down` did not): then the controller-manager runs
    every controller, also after a `lab up` of a lab whose cluster is up."""
    return (CLUSTER_DIR / "wanted").exists()


def start_controller_manager(bins: dict[str, Path]) -> None:
    """kube-controller-manager with the controllers the lab needs now; restarted when that changed."""
    pki = STATE / "pki"
    kcm_kubeconfig = STATE / "kcm.kubeconfig"
    write_kubeconfig(kcm_kubeconfig, (pki / "kcm.token").read_text(), "kube-controller-manager")
    start_process("kube-controller-manager", [
        str(bins["kube-controller-manager"]), f"--kubeconfig={kcm_kubeconfig}",
        f"--authentication-kubeconfig={kcm_kubeconfig}", f"--authorization-kubeconfig={kcm_kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={PORTS.controller_manager}",
        "--controllers=" + (CLUSTER_CONTROLLERS if cluster_wanted() else LIGHT_CONTROLLERS),
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        # its own (empty) FlexVolume dir: the default, /usr/libexec/kubernetes/..., is created
        # by the attach-detach controller outside the lab's directories
        f"--flex-volume-plugin-dir={STATE / 'flexvolume'}",
        "--leader-elect=false", "--v=1",
        # each controller acts as its own ServiceAccount (system:controller:* roles): the
        # controller-manager's own user may not create the pods of Jobs, patch Nodes or publish
        # the root CA ConfigMap
        "--use-service-account-credentials=true",
    ], ports=[PORTS.controller_manager], timeout=60, restart_on_change=True,
        ready=lambda: http_ok(f"https://127.0.0.1:{PORTS.controller_manager}/healthz"))


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
        ready=lambda: http_ok(f"http://127.0.0.1:{PORTS.minio}/minio/health/ready"))
    from minio import Minio
    client = Minio(f"127.0.0.1:{PORTS.minio}", access_key=access, secret_key=secret, secure=False)
    if not client.bucket_exists(BUCKET):
        client.make_bucket(BUCKET)
