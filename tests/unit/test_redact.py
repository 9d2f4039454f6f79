"""What tenants read names none of the lab's addresses, host paths or credentials
(`core.policy.redact`), and keeps what they wrote themselves."""

from __future__ import annotations

from benchfarm.core.policy.redact import PATH, SECRET, SERVICE, Redactor
from benchfarm.kubeapi.client import lab_redactor
from benchfarm.settings import Settings

ENV = {"BENCHFARM_STATE": "/work/main/.benchfarm", "BENCHFARM_S3_ENDPOINT": "minio.lab:9000",
       "BENCHFARM_S3_SECRET_KEY": "s3-secret-value", "BENCHFARM_S3_ACCESS_KEY": "benchfarm",
       "BENCHFARM_SIGNING_KEY": "k" * 32, "LG_COORDINATOR": "10.0.0.5:20408",
       "BENCHFARM_DATABASE_URL": "postgresql+psycopg://bf:db-password@db.lab:5432/benchfarm",
       "KUBECONFIG": "/etc/lab/kube/config", "BENCHFARM_WEB_URL": "http://127.0.0.1:21088"}
R = lab_redactor(Settings.from_env(ENV), extra_endpoints=["10.96.0.1:443"],
                 extra_directories=["/opt/venv"])


def test_lab_addresses_paths_and_keys_are_hidden():
    cases = {
        "board vb-x86-0 assigned; session pid 12, log "
        "/work/main/.benchfarm/logs/sessions/default.r1.attempt-1.run-0.log":
            f"board vb-x86-0 assigned; session pid 12, log {PATH}/default.r1.attempt-1.run-0.log",
        "artifact store unreachable at minio.lab:9000 (download k): "
        "HTTPConnectionPool(host='127.0.0.1', port=21900): Max retries":
            f"artifact store unreachable at {SERVICE} (download k): "
            f"HTTPConnectionPool({SERVICE}): Max retries",
        "labgrid coordinator at 10.0.0.5:20408: UNAVAILABLE":
            f"labgrid coordinator at {SERVICE}: UNAVAILABLE",
        "API 10.96.0.1:443 refused": f"API {SERVICE} refused",
        'connection to server at "10.1.2.3", port 5432 failed: db-password wrong':
            f"connection to server at {SERVICE} failed: {SECRET} wrong",
        "db.lab:5432 and localhost:8080 and [::1]:443 and 127.0.0.2:1":
            f"{SERVICE} and {SERVICE} and {SERVICE} and {SERVICE}",
        "key s3-secret-value, signing " + "k" * 32: f"key {SECRET}, signing {SECRET}",
        'File "/opt/venv/lib/python3.11/site-packages/minio/api.py", line 3':
            f'File "{PATH}/api.py", line 3',
        "state in /work/main/.benchfarm": f"state in {PATH}",
        "kubeconfig /etc/lab/kube/config unreadable": f"kubeconfig {PATH}/config unreadable",
    }
    for said, shown in cases.items():
        assert R(said) == shown, said


def test_what_the_tenant_wrote_stays():
    for text in ("software kernel: https://downloads.example.com:8443/Image could not be fetched",
                 "suite hackbench failed: exit 1 after 10.5 s", "/proc/sysrq-trigger",
                 "cyclictest max 120 us on vb-x86-0", "benchfarm/run-uid"):
        assert R(text) == text
    assert Redactor.of()("127.0.0.1:21900") == SERVICE     # loopback, any lab


def test_a_status_patch_has_its_messages_redacted_and_nothing_else():
    status = {"progress": "waiting for minio.lab:9000",
              "conditions": [{"type": "Succeeded", "message": "log /work/main/.benchfarm/x.log"},
                             {"type": "Scheduled"}],
              "sessionEnd": {"attempt": 1, "message": "coordinator 10.0.0.5:20408"},
              "resolvedSuites": [{"command": "curl http://127.0.0.1:8080"}],
              "commands": {"env": {"LG_COORDINATOR": "10.0.0.5:20408"}}}
    out = R.status(status)
    assert out["progress"] == f"waiting for {SERVICE}"
    assert out["conditions"] == [{"type": "Succeeded", "message": f"log {PATH}/x.log"},
                                 {"type": "Scheduled"}]
    assert out["sessionEnd"] == {"attempt": 1, "message": f"coordinator {SERVICE}"}
    assert out["resolvedSuites"] == status["resolvedSuites"]      # signed: never touched
    assert out["commands"] == status["commands"]
    assert status["progress"] == "waiting for minio.lab:9000"     # the caller's is its own
    # a Notification's failed deliveries: what the lab's network answered names none of it
    deliveries = R.status({"deliveries": [{"id": "d1", "error": "no connection to minio.lab:9000"},
                                          {"id": "d2"}]})["deliveries"]
    assert deliveries == [{"id": "d1", "error": f"no connection to {SERVICE}"}, {"id": "d2"}]
