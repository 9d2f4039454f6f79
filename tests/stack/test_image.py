"""Issue 10, item 1: the operator image, built here from the real Dockerfile without a daemon
(`make image`'s code path, so cached by content: a few seconds when nothing changed, a few minutes
cold), and run the way the chart's restricted pod runs it: the image's own user and entrypoint,
a read-only root filesystem, a writable /tmp, under runc.

The lab is not needed. That two clean builds give the same digest is checked by hand
(`make image REBUILD=1` compares with digests.json); here the digest recorded for the inputs must be
the one the archive holds and the one a second `build()` returns.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile

import pytest

from benchfarm_devlab import image as img

# the operator image (minutes cold), what the one-node cluster runs: `make test-cluster`
pytestmark = [pytest.mark.stack, pytest.mark.full]
SUBCOMMANDS = ("operator", "session", "parse", "report", "compare", "import-guide", "lease", "check",
               "web", "history", "results")


@pytest.fixture(scope="module")
def image() -> img.Image:
    return img.build()


@pytest.fixture(scope="module")
def blobs(image) -> dict[str, bytes]:
    """index.json and the small blobs (manifest, config) of the archive, by name."""
    out = {}
    with tarfile.open(image.archive) as tar:
        for m in tar:
            if m.isfile() and (m.name == "index.json" or m.size < 1 << 20):
                out[m.name] = tar.extractfile(m).read()
    return out


def _json(blobs: dict[str, bytes], digest: str) -> dict:
    return json.loads(blobs[f"blobs/sha256/{digest.removeprefix('sha256:')}"])


@pytest.fixture(scope="module")
def config(blobs, image) -> dict:
    return _json(blobs, _json(blobs, image.digest)["config"]["digest"])


@pytest.fixture(scope="module")
def bundle(image, tmp_path_factory):
    dest = tmp_path_factory.mktemp("image")
    yield img.unpack(image, dest)
    shutil.rmtree(dest, ignore_errors=True)


def test_config_runs_the_operator_as_non_root(config, image):
    c = config["config"]
    assert c["User"] == "10001:10001"
    assert c["Entrypoint"] == ["benchfarm", "operator"]
    assert "Cmd" not in c or not c["Cmd"]
    env = dict(e.split("=", 1) for e in c["Env"])
    assert env["PATH"].split(":")[0] == "/opt/benchfarm/bin"
    assert env["BENCHFARM_DEVICE_TYPES"] == "/etc/benchfarm/device-types"
    assert env["HOME"] == "/tmp" and env["MPLCONFIGDIR"].startswith("/tmp/")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert set(c["ExposedPorts"]) == {"8080/tcp", "9090/tcp"}
    assert config["created"] == "1970-01-01T00:00:00Z"        # --timestamp 0
    assert len(config["rootfs"]["diff_ids"]) == 2              # the Debian base + the operator


def test_archive_is_what_containerd_imports(blobs, image):
    index = json.loads(blobs["index.json"])
    [entry] = index["manifests"]
    version = img.version()
    assert image.ref == f"benchfarm/operator:{version}" and not image.ref.endswith(":latest")
    assert entry["annotations"]["io.containerd.image.name"] == f"docker.io/benchfarm/operator:{version}"
    assert entry["digest"] == image.digest
    manifest = _json(blobs, image.digest)
    assert manifest["config"]["digest"] == image.config_digest
    with tarfile.open(image.archive) as tar:       # every blob is what its name says
        for m in tar:
            if m.isfile() and m.name.startswith("blobs/sha256/"):
                h = hashlib.sha256()
                f = tar.extractfile(m)
                while chunk := f.read(1 << 20):
                    h.update(chunk)
                assert h.hexdigest() == m.name.rsplit("/", 1)[1], m.name
                assert m.mtime == 0 and m.uid == 0


def test_digest_is_stable_for_its_content_hash(image):
    again = img.build()                            # same inputs: from the cache, same digest
    assert (again.key, again.digest, again.seconds) == (image.key, image.digest, 0.0)
    assert img.image_key(image.base) == image.key
    recorded = json.loads((img.WORK / "digests.json").read_text())
    assert recorded[image.key]["digest"] == image.digest


def test_rootfs_has_bytecode_by_hash_and_no_caches_or_logs(bundle):
    root = bundle / "rootfs"
    venv = root / "opt" / "benchfarm"
    site = next(venv.glob("lib/python3*/site-packages"))
    sources = [p for p in site.rglob("*.py") if "__pycache__" not in p.parts]
    pycs = list(venv.rglob("*.pyc"))
    # every module compiled, each .pyc unchecked-hash (flags 0b01: by hash, never checked, so
    # its date is not in it and Python does not read the source to check it)
    assert {(p.parent.name, p.stem) for p in sources} <= {
        (p.parent.parent.name, p.name.split(".")[0]) for p in pycs}
    assert {int.from_bytes(p.read_bytes()[4:8], "little") for p in pycs} == {1}
    assert not (root / "root" / ".cache").exists()
    assert not list((root / "tmp").iterdir())
    assert [p.name for p in (root / "var" / "lib" / "apt" / "lists").iterdir()
            if p.is_file() and p.name != "lock"] == []
    assert not list((root / "var" / "cache" / "apt").glob("*.bin"))
    assert [p for p in (root / "var" / "log").rglob("*") if p.is_file() and p.stat().st_size] == []
    assert not list(venv.rglob("benchfarm_devlab"))              # the dev lab stays out of the image
    shadow = (root / "etc" / "shadow").read_text()
    [entry] = [line for line in shadow.splitlines() if line.startswith("benchfarm:")]
    assert entry.split(":")[2] == str(img.SOURCE_DATE_EPOCH // 86400)   # dated by SOURCE_DATE_EPOCH
    assert (root / "etc" / "benchfarm" / "device-types").is_dir()


def test_runs_read_only_as_non_root(bundle):
    res = img.run(bundle, ["benchfarm", "--help"])
    assert res.returncode == 0, res.stderr
    for sub in SUBCOMMANDS:
        assert sub in res.stdout
    assert "{operator,session,parse,report,compare,import-guide,lease,submit,export,check,web,history,results}" \
        in res.stdout                                                     # no lab commands

    res = img.run(bundle, ["benchfarm", "session", "run", "--help"])
    assert res.returncode == 0 and "NAMESPACE/NAME" in res.stdout, res.stderr

    spec = json.loads((bundle / "image-config.json").read_text())     # umoci's, from the image config
    res = img.run(bundle, ["sh", "-c", "command -v benchfarm && python3 -c 'import benchfarm.operator.main'"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "/opt/benchfarm/bin/benchfarm"
    assert spec["process"]["user"] == {"uid": 10001, "gid": 10001}

    res = img.run(bundle, ["sh", "-c", "id -u; id -g; touch /tmp/ok && echo tmp-writable; touch /probe"])
    assert res.stdout.split() == ["10001", "10001", "tmp-writable"]
    assert res.returncode != 0 and "Read-only file system" in res.stderr


def test_carries_the_clients_sessions_run(bundle):
    """ssh and rsync (staging on exporters, LG_PROXY) and sigrok-cli (sigrok rails), for the
    image's non-root user on a read-only root; imports read the bytecode as it is."""
    res = img.run(bundle, ["sh", "-c", "ssh -V 2>&1; rsync --version | head -1; "
                           "sigrok-cli --version | head -1; sigrok-cli --scan -d demo"])
    assert res.returncode == 0, res.stderr
    assert "OpenSSH" in res.stdout and "rsync  version" in res.stdout, res.stdout
    assert "sigrok-cli" in res.stdout and "Demo device" in res.stdout, res.stdout
    res = img.run(bundle, ["python3", "-v", "-c", "import benchfarm.session.runner"])
    assert res.returncode == 0, res.stderr
    loaded = [ln for ln in res.stderr.splitlines() if "code object from '/opt/benchfarm/" in ln]
    assert len(loaded) > 100 and all(ln.endswith(".pyc'") for ln in loaded), \
        [ln for ln in loaded if not ln.endswith(".pyc'")][:5]


def test_entrypoint_resolves(bundle):
    """The image's own entrypoint (`benchfarm operator`), asked for its help only: no cluster here."""
    entrypoint = json.loads((bundle / "image-config.json").read_text())["process"]["args"]
    assert entrypoint == ["benchfarm", "operator"]
    res = img.run(bundle, [*entrypoint, "--help"])
    assert res.returncode == 0, res.stderr
    assert "usage: benchfarm operator" in res.stdout
