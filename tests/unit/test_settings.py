"""benchfarm's settings (`benchfarm.settings`): read once, typed, a clear error for a bad value,
each documented, and no other module of the package reads its environment."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from benchfarm import settings as settings_module
from benchfarm.operator.launch import launchers
from benchfarm.settings import SESSION_JOB_TTL, SettingError, Settings, describe, variables

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "benchfarm"


def test_defaults_are_the_embedded_labs_and_the_charts():
    s = Settings.from_env({})
    assert (s.namespace, s.launcher, s.max_sessions, s.standby_sessions, s.metrics_port) == \
        ("default", "process", None, 0, 0)
    assert s.session_logs_dir == Path("/tmp/benchfarm/logs/sessions") and s.session_pids is None
    assert (s.spool_dir, s.software_cache_dir) == \
        (Path("/tmp/benchfarm/spool"), Path("/tmp/benchfarm/software"))
    assert s.session_job_ttl == SESSION_JOB_TTL and s.session_server
    assert s.liveness == "http://127.0.0.1:8080/healthz"
    assert s == Settings.from_env({}) and "environ" not in repr(s)   # secrets stay out of logs


def test_values_are_typed_where_they_are_read():
    s = Settings.from_env({
        "BENCHFARM_NAMESPACE": "benchfarm-system", "BENCHFARM_MAX_SESSIONS": "4",
        "BENCHFARM_STATE": "/var/lib/bf", "BENCHFARM_SESSION_SERVER": "0",
        "BENCHFARM_METRICS_PORT": "9090", "LG_COORDINATOR": "coord:20408",
        "BENCHFARM_LEASE_COORDINATOR": "lab.example:20408", "BENCHFARM_LIVENESS": ""})
    assert (s.namespace, s.max_sessions, s.standby_sessions, s.metrics_port) == \
        ("benchfarm-system", 4, 4, 9090)
    assert s.session_logs_dir == Path("/var/lib/bf/logs/sessions") and not s.session_server
    assert s.spool_dir == Path("/var/lib/bf/spool")
    assert (s.coordinator, s.lease_coordinator, s.liveness) == \
        ("coord:20408", "lab.example:20408", "")
    assert s.environ["BENCHFARM_MAX_SESSIONS"] == "4"     # for the secrets' own readers


@pytest.mark.parametrize("env, says", [
    ({"BENCHFARM_MAX_SESSIONS": "four"}, "BENCHFARM_MAX_SESSIONS='four': an integer is needed"),
    ({"BENCHFARM_METRICS_PORT": "70000"}, "BENCHFARM_METRICS_PORT='70000': from 0 to 65535"),
    ({"BENCHFARM_WARM_SESSIONS": "-1"}, "BENCHFARM_WARM_SESSIONS='-1': from 0 up"),
    ({"BENCHFARM_LAUNCHER": "pod"}, "BENCHFARM_LAUNCHER='pod': 'process' or 'job'"),
    ({"BENCHFARM_S3_SECURE": "maybe"}, "BENCHFARM_S3_SECURE='maybe': true or false (1 or 0)"),
    ({"BENCHFARM_NOTIFY_GIVE_UP_SECONDS": "a day"},
     "BENCHFARM_NOTIFY_GIVE_UP_SECONDS='a day': a number is needed"),
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


def test_an_empty_value_is_the_default_except_where_empty_means_none():
    s = Settings.from_env({"BENCHFARM_NAMESPACE": "", "BENCHFARM_METRICS_PORT": " ",
                           "BENCHFARM_LIVENESS": ""})
    assert (s.namespace, s.metrics_port, s.liveness) == ("default", 0, "")


def test_secrets_never_show_in_the_settings_repr():
    s = Settings.from_env({"BENCHFARM_SIGNING_KEY": "k" * 40, "BENCHFARM_S3_SECRET_KEY": "s3cr3t",
                           "BENCHFARM_SMTP_PASSWORD": "hunter22",
                           "BENCHFARM_DATABASE_URL": "postgresql://u:pw@db/x"})
    shown = repr(s) + describe()
    for secret in ("k" * 40, "s3cr3t", "hunter22", "pw@db"):
        assert secret not in shown
    assert s.signing_key == "k" * 40 and s.s3_secret_key == "s3cr3t"


def test_every_setting_has_a_description_a_group_and_one_variable():
    rows = list(variables())
    assert len(rows) > 60
    names = [variable for variable, *_ in rows]
    assert len(names) == len(set(names))
    short = [variable for variable, _, _, _, text in rows if len(text) < 15]
    assert not short, f"settings without a description (a docstring under the field): {short}"
    text = describe()
    for variable, _, _, default, _ in rows:
        assert variable in text and (default in (None, "") or f"default {default})" in text)
    assert "# What the operator hands each session it launches" in text
    assert "BENCHFARM_SESSION_JOB_TTL (default 86400)" in text


def test_benchfarm_settings_prints_every_setting(capsys):
    from benchfarm.cli import main
    assert main(["settings"]) == 0
    out = capsys.readouterr().out
    assert out == describe()
    assert main(["operator", "--help-settings"]) == 0
    assert capsys.readouterr().out == out


def _environment_reads(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        # os.environ (read, written or passed whole), os.getenv, os.putenv
        if isinstance(node, ast.Attribute) and ast.unparse(node) in (
                "os.environ", "os.getenv", "os.putenv", "os.environb"):
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_no_module_of_the_package_but_settings_reads_the_environment():
    own = Path(settings_module.__file__)
    readers = [hit for f in sorted(PACKAGE.rglob("*.py")) if f != own
               for hit in _environment_reads(f)]
    assert readers == [], "read settings through benchfarm.settings.Settings, not os.environ"
    # and the check finds what it looks for
    assert _environment_reads(Path(settings_module.__file__))


def test_every_variable_the_package_spells_is_a_setting():
    known = {variable for variable, *_ in variables()}
    # written for a suite's command on the board, never read by benchfarm
    for_suites = {"BENCHFARM_RUN", "BENCHFARM_IPERF3_HOST", "BENCHFARM_IPERF3_PORT"}
    spelled: dict[str, str] = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        for name in re.findall(r"\bBENCHFARM_[A-Z0-9_]*[A-Z0-9]\b", f.read_text()):
            spelled.setdefault(name, str(f.relative_to(PACKAGE)))
    unknown = {k: v for k, v in spelled.items() if k not in known | for_suites}
    assert not unknown, f"variables no field of benchfarm.settings.Settings names: {unknown}"


def test_the_charts_variables_are_settings():
    known = {variable for variable, *_ in variables()}
    found = set()
    for f in (REPO / "helm" / "benchfarm" / "templates").rglob("*.yaml"):
        found |= set(re.findall(r"name:\s*(BENCHFARM_[A-Z0-9_]+|LG_COORDINATOR)\b",
                                f.read_text()))
    assert len(found) > 15
    assert found <= known, f"the chart sets variables no setting reads: {found - known}"


# -- settings once: built at each program's entry point, read through the object ----------------
DEVLAB = REPO / "devlab" / "benchfarm_devlab"
# the modules that build a program's Settings from its environment, and which program each is
ENTRY_POINTS = {
    "cli/entry.py": "the CLI's dispatch: one Settings for the command it runs",
    "operator/main.py": "`benchfarm operator`",
    "operator/handlers.py": "the operator when kopf runs the handlers without operator.main",
    "session/runner.py": "`benchfarm session run`, also in a forked or warm session, after it "
                         "took its run's variables",
    "session/health.py": "`benchfarm session health`",
    "session/leaseend.py": "`benchfarm session lease-end`",
    "session/warm.py": "`benchfarm session warm`: the slot's settings, before a run exists",
    "session/server.py": "`benchfarm session server`: its own; each session it forks reads its own",
    "web/server.py": "`benchfarm web`",
    "lab/labgrid_forward.py": "`python -m benchfarm.lab.labgrid_forward`, a lease shell's "
                              "labgrid-client",
}
# the dev lab's programs and commands, which read the environment the lab gave them
DEVLAB_ENTRY_POINTS = {
    "exporter.py": "`python -m benchfarm_devlab.exporter`",
    "coordinator.py": "`python -m benchfarm_devlab.coordinator`",
    "demo.py": "`benchfarm demo`, after it took the lab's environment",
    "democluster.py": "`benchfarm demo --cluster`, after it took the lab's environment",
}
# where a module reads `Settings.environ`: handing it to a child process, or variables of other
# programs that no setting names
ENVIRON_READERS = {
    "operator/launch/launchers.py": "a session process inherits the operator's environment",
    "lab/labgrid_forward.py": "the stock labgrid-client runs in the environment, its LG_* set",
    "cli/lease.py": "the lease's shell inherits the environment, less labgrid's keys",
    "kubeapi/client.py": "the database's and the store's client libraries' own credentials "
                         "(PGPASSWORD, AWS_SECRET_ACCESS_KEY) and VIRTUAL_ENV, redacted too",
    "lab/environment.py": "labgrid's own LG_* variables, which a device type's environment names",
}
# the dev lab's own variables, read before any program's Settings exists
DEVLAB_ENVIRONMENT_READERS = {
    "config.py": "the embedded lab's layout (its state, cache, ports, inventory), which the lab "
                 "then writes into its programs' environment",
    "exporter.py": "BENCHFARM_EXPORTER_HOST, the host an exporter process of the lab stands for",
}
KNOWN = {variable for variable, *_ in variables()}


def _calls(tree: ast.AST, attr: str) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == attr]


def _modules(root: Path) -> dict[str, ast.AST]:
    return {str(f.relative_to(root)): ast.parse(f.read_text()) for f in sorted(root.rglob("*.py"))}


def test_only_the_programs_entry_points_build_settings_from_the_environment():
    """A library module that called `Settings.from_env()` read the environment in the middle of
    the code; it takes the Settings (or the fields it needs) from its caller instead."""
    built = {name for name, tree in _modules(PACKAGE).items() if _calls(tree, "from_env")}
    assert built == set(ENTRY_POINTS), (
        f"from_env outside the entry points: {sorted(built - set(ENTRY_POINTS))}; entry points "
        f"that no longer build settings (drop them from the list): "
        f"{sorted(set(ENTRY_POINTS) - built)}")
    # in the dev lab, Settings of a given mapping are values handed in (a PKI's files, the lab's
    # environment); only its programs read their own environment
    own = {name for name, tree in _modules(DEVLAB).items()
           for call in _calls(tree, "from_env") if not call.args and not call.keywords}
    assert own == set(DEVLAB_ENTRY_POINTS), sorted(own ^ set(DEVLAB_ENTRY_POINTS))


def _setting_reads(tree: ast.AST) -> list[int]:
    """Lines reading a setting's variable from a mapping: `x.get("BENCHFARM_…")`, `x["…"]`."""
    lines = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("get", "pop", "getenv") and node.args:
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice
        if isinstance(key, ast.Constant) and key.value in KNOWN:
            lines.append(node.lineno)
    return lines


def test_every_setting_is_read_through_the_settings_object():
    """No module reads a setting's variable again from an environment (with a default of its
    own), and `Settings.environ` is read only where a child process or another program's
    variable needs it."""
    modules = _modules(PACKAGE)
    readers = {name for name, tree in modules.items() if name != "settings.py"
               for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr == "environ"
               and ast.unparse(node) != "os.environ"}
    assert readers == set(ENVIRON_READERS), sorted(readers ^ set(ENVIRON_READERS))
    again = {f"{name}:{line}" for name, tree in modules.items() if name != "settings.py"
             for line in _setting_reads(tree)}
    # a warm slot names the board of the grant it took in its log, before adopting its variables
    assert again == {f"session/warm.py:{_line(PACKAGE / 'session/warm.py', 'BENCHFARM_RUN_BOARD')}"}
    # and the check finds what it looks for
    assert _setting_reads(ast.parse('env.get("BENCHFARM_SMTP_HOST", "")\nenv["LG_COORDINATOR"]')) \
        == [1, 2]


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_the_dev_lab_reads_benchfarm_variables_only_where_a_settings_cannot_be_built():
    """The dev lab's programs take their Settings too; what it reads itself of os.environ
    is its own layout, each reader named here with its reason."""
    found = set()
    for name, tree in _modules(DEVLAB).items():
        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Call) and ast.unparse(node.func) in (
                    "os.environ.get", "os.getenv") and node.args:
                key = node.args[0]
            elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
                key = node.slice
            if isinstance(key, ast.Constant) and str(key.value).startswith("BENCHFARM_"):
                found.add(name)
    assert found == set(DEVLAB_ENVIRONMENT_READERS), sorted(found ^ set(DEVLAB_ENVIRONMENT_READERS))
