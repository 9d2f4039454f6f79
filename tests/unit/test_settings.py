"""The operator's settings (`kube.settings`): read once, typed, a clear error for a bad value,
and no other module of the operator reads its environment."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchfarm.kube import launchers
from benchfarm.kube.settings import SESSION_JOB_TTL, SettingError, Settings

KUBE = Path(__file__).resolve().parents[2] / "operator" / "benchfarm" / "kube"


def test_defaults_are_the_embedded_labs_and_the_charts():
    s = Settings.from_env({})
    assert (s.namespace, s.launcher, s.max_sessions, s.standby, s.metrics_port) == \
        ("default", "process", None, 0, 0)
    assert s.session_logs == Path("/tmp/benchfarm/logs/sessions") and s.session_pids is None
    assert s.session_job_ttl == SESSION_JOB_TTL and s.session_server
    assert s.liveness == "http://127.0.0.1:8080/healthz"
    assert s == Settings.from_env({}) and "environ" not in repr(s)   # secrets stay out of logs


def test_values_are_typed_where_they_are_read():
    s = Settings.from_env({
        "BENCHFARM_NAMESPACE": "benchfarm-system", "BENCHFARM_MAX_SESSIONS": "4",
        "BENCHFARM_STATE": "/var/lib/bf", "BENCHFARM_SESSION_SERVER": "0",
        "BENCHFARM_METRICS_PORT": "9090", "LG_COORDINATOR": "coord:20408",
        "BENCHFARM_LEASE_COORDINATOR": "lab.example:20408", "BENCHFARM_LIVENESS": ""})
    assert (s.namespace, s.max_sessions, s.standby, s.metrics_port) == \
        ("benchfarm-system", 4, 4, 9090)
    assert s.session_logs == Path("/var/lib/bf/logs/sessions") and not s.session_server
    assert (s.coordinator, s.lease_coordinator, s.liveness) == \
        ("coord:20408", "lab.example:20408", "")
    assert s.environ["BENCHFARM_MAX_SESSIONS"] == "4"     # for the secrets' own readers


@pytest.mark.parametrize("env, says", [
    ({"BENCHFARM_MAX_SESSIONS": "four"}, "BENCHFARM_MAX_SESSIONS='four': an integer is needed"),
    ({"BENCHFARM_METRICS_PORT": "70000"}, "BENCHFARM_METRICS_PORT='70000': from 0 to 65535"),
    ({"BENCHFARM_WARM_SESSIONS": "-1"}, "BENCHFARM_WARM_SESSIONS='-1': from 0 up"),
    ({"BENCHFARM_LAUNCHER": "pod"}, "BENCHFARM_LAUNCHER='pod': 'process' or 'job'"),
])
def test_an_unusable_value_stops_the_start_naming_the_variable(env, says):
    with pytest.raises(SettingError) as err:
        Settings.from_env(env)
    assert str(err.value) == says and isinstance(err.value, SystemExit)


def test_the_process_launcher_is_built_from_the_settings(tmp_path):
    s = Settings.from_env({"BENCHFARM_STATE": str(tmp_path), "BENCHFARM_SESSION_SERVER": "0",
                           "BENCHFARM_SESSION_PIDS": str(tmp_path / "pids")})
    launcher = launchers.from_settings(s, kube=None)
    assert isinstance(launcher, launchers.ProcessLauncher)
    assert launcher.log_dir == tmp_path / "logs" / "sessions"
    assert launcher.pid_dir == tmp_path / "pids"


def test_no_module_of_the_operator_but_settings_reads_the_environment():
    readers = []
    for f in sorted(KUBE.glob("*.py")):
        if f.name == "settings.py":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            # os.environ.get(...), os.environ[...], os.getenv(...); passing the whole
            # environment on to a child process ({**os.environ}) is not reading a setting
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    node.func.attr == "getenv" or (
                        node.func.attr == "get" and ast.unparse(node.func.value) == "os.environ")):
                readers.append(f"{f.name}:{node.lineno}")
            if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
                readers.append(f"{f.name}:{node.lineno}")
    assert readers == []
