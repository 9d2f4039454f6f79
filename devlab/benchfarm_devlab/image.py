"""The operator image, built here from the repository's own `Dockerfile`, without a Docker daemon.

Why this exists: a cluster needs the operator as an image, but this machine has no Docker engine
and reaches no container registry (only Debian's mirrors and PyPI). So the image is built the way a
CI without a daemon would, and from the very file users build elsewhere:

1. The base (`python:3.11.x-slim-bookworm` elsewhere) is made from Debian packages: mmdebstrap of
   bookworm, minbase plus python3, python3-venv, passwd, ca-certificates and the clients sessions
   run (openssh-client, rsync, sigrok-cli), with merged /usr, no
   documentation, no device nodes, no apt lists, caches or logs, file dates from SOURCE_DATE_EPOCH
   (bit-for-bit the same tarball from the same packages). It is imported into a private buildah
   store and passed to the Dockerfile as its base `ARG PYTHON_IMAGE`.
2. `buildah bud --isolation chroot --timestamp 0` builds the Dockerfile from a context holding
   exactly the inputs below (file modes normalised, nothing .gitignore ignores), with
   SOURCE_DATE_EPOCH as a build argument (useradd dates /etc/shadow by it). The host's CA bundle
   is bind-mounted read-only into the RUN steps so pip reaches PyPI through a TLS-inspecting proxy;
   a mount is never part of a layer.
3. The image is written as an OCI archive that `ctr -n k8s.io images import` names
   `docker.io/benchfarm/operator:<version>` (the chart's `benchfarm/operator` + appVersion).

Everything is cached by content: the image (BENCHFARM_CACHE/images/benchfarm-operator-*.tar) by
a hash of the Dockerfile, pyproject.toml, README.md, constraints.txt, operator/**,
exporters/device-types/**, the base's package list and the builder's version; the base (under
BENCHFARM_CACHE/images/operator/) by its recipe. A second build with nothing changed only hashes
the inputs. `digests.json` keeps the first digest seen per content hash,
so a rebuild (`benchfarm lab image --rebuild`) that gives another digest is reported as not
reproducible.

`unpack` and `run` run the image's own runtime config (umoci's translation of the image config)
under runc with a read-only root and a tmpfs /tmp, as the chart's restricted pod does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from benchfarm_devlab.config import CACHE, REPO, LabError

IMAGES = CACHE / "images"      # the archives, beside the lab's other images
WORK = IMAGES / "operator"     # the builder's own: bases, buildah's store, log, digests, lock
REPOSITORY = "benchfarm/operator"
RECIPE_VERSION = "1"          # bump when the build procedure changes what it produces

# The Dockerfile's inputs: what its COPY lines read, plus the file itself and its .dockerignore.
INPUTS = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "constraints.txt",
          "operator", "exporters/device-types")

SOURCE_DATE_EPOCH = 1735689600   # 2025-01-01: file dates of the base, shadow's last-change day
BASE_SUITE = "bookworm"
# python for the operator; ssh and rsync for staging and LG_PROXY; sigrok-cli for sigrok rails
BASE_PACKAGES = ("python3", "python3-venv", "passwd", "ca-certificates", "openssh-client", "rsync",
                 "sigrok-cli")
BASE_MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
BASE_OPTIONS = (
    "--variant=minbase",
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",   # usr-is-merged, not usrmerge (+perl)
    "--skip=output/dev",                                     # an image's /dev is the runtime's
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-include=/usr/share/locale/locale.alias",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
)
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
TOOLS = {"mmdebstrap": "mmdebstrap", "buildah": "buildah", "umoci": "umoci", "runc": "runc"}


def say(msg: str) -> None:
    print(f"[image] {msg}", flush=True)


@dataclass(frozen=True)
class Image:
    ref: str              # what a pod names: benchfarm/operator:<version>
    name: str             # what containerd stores after `ctr images import`
    key: str              # content hash of the inputs
    digest: str           # manifest digest (what `ctr images ls` and the kubelet report)
    config_digest: str    # image ID
    archive: str          # the OCI archive
    base: str             # the base image's content key
    seconds: float        # how long the build took (0 when it came from the cache)


# --- inputs and keys -------------------------------------------------------------------------------

def version() -> str:
    """The package's version, which must be the chart's appVersion (the chart's default tag)."""
    ver = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    chart = (REPO / "helm" / "benchfarm" / "Chart.yaml").read_text()
    app = next((line.split(":", 1)[1].strip().strip("\"'") for line in chart.splitlines()
                if line.startswith("appVersion:")), None)
    if app != ver:
        raise LabError(f"pyproject.toml version {ver} and the chart's appVersion {app} differ; "
                       "the chart would run an image that was not built")
    return ver


def input_files() -> list[str]:
    """The Dockerfile's inputs, relative to the clone: tracked or new, never ignored (.gitignore
    keeps out egg-info and __pycache__ an editable install leaves in operator/)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                              "--", *INPUTS], cwd=REPO, capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f and (REPO / f).is_file()]
    except (OSError, subprocess.CalledProcessError):     # not a git clone: walk, skip the usual
        files = []
        for top in INPUTS:
            p = REPO / top
            if p.is_file():
                files.append(top)
                continue
            for dirpath, dirnames, names in os.walk(p):
                dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info")]
                files += [str(Path(dirpath, n).relative_to(REPO)) for n in names if not n.endswith(".pyc")]
    return sorted(set(files))


def _executable(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o111)


def _tool_version(tool: str) -> str:
    try:
        return subprocess.run([tool, "--version"], capture_output=True, text=True,
                              check=True).stdout.strip().splitlines()[0]
    except (OSError, subprocess.CalledProcessError) as exc:
        raise LabError(f"{tool} is missing: `make image` installs it (IMAGE_APT_PACKAGES)") from exc


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def base_recipe() -> dict:
    return {"suite": BASE_SUITE, "packages": list(BASE_PACKAGES), "mirrors": list(BASE_MIRRORS),
            "options": list(BASE_OPTIONS), "source_date_epoch": SOURCE_DATE_EPOCH,
            "mmdebstrap": _tool_version("mmdebstrap")}


def base_key() -> str:
    return _digest(json.dumps(base_recipe(), sort_keys=True).encode())[:12]


def image_key(base: str, files: Sequence[str] | None = None) -> str:
    h = hashlib.sha256()
    h.update(f"benchfarm-image {RECIPE_VERSION}\n{_tool_version('buildah')}\n".encode())
    h.update(f"base {base}\n".encode())
    h.update((WORK / f"base-{base}" / "packages.txt").read_bytes())
    for rel in files if files is not None else input_files():
        p = REPO / rel
        h.update(f"{rel}\0{'x' if _executable(p) else '-'}\0{_file_sha256(p)}\n".encode())
    return h.hexdigest()[:12]


# --- the builders ----------------------------------------------------------------------------------

def _buildah(*args: str) -> list[str]:
    return ["buildah", "--root", str(WORK / "buildah" / "storage"),
            "--runroot", str(WORK / "buildah" / "run"), "--storage-driver", "overlay", *args]


def _run(argv: Sequence[str], log: Path, what: str, env: dict | None = None, cwd: Path | None = None) -> None:
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        res = subprocess.run(list(argv), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    if res.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise LabError(f"{what} failed (exit {res.returncode}); last lines of {log}:\n{tail}")


@contextmanager
def _locked() -> Iterator[None]:
    WORK.mkdir(parents=True, exist_ok=True)
    with (WORK / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _packages(rootfs_tar: Path) -> str:
    """`name version arch` of every installed package, from the tarball's dpkg status."""
    with tarfile.open(rootfs_tar) as tar:
        member = tar.extractfile("./var/lib/dpkg/status")
        status = member.read().decode() if member else ""
    rows = []
    for stanza in status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
        if fields.get("Status", "").endswith(" installed"):
            rows.append(f"{fields['Package']} {fields['Version']} {fields['Architecture']}")
    return "\n".join(sorted(rows)) + "\n"


def build_base(log: Path) -> str:
    """The Debian base as a rootfs tarball, its package list and a buildah image; cached by recipe."""
    key = base_key()
    d = WORK / f"base-{key}"
    if not (d / "packages.txt").exists():
        say(f"base: mmdebstrap {BASE_SUITE} minbase + {' '.join(BASE_PACKAGES)} (first time only)")
        t0 = time.monotonic()
        tmp = WORK / f"base-{key}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
        _run(["mmdebstrap", *BASE_OPTIONS, "--include=" + ",".join(BASE_PACKAGES), "--format=tar",
              BASE_SUITE, str(tmp / "rootfs.tar"), *BASE_MIRRORS], log, "mmdebstrap", env=env)
        packages = _packages(tmp / "rootfs.tar")
        (tmp / "packages.txt").write_text(packages)
        (tmp / "base.json").write_text(json.dumps({
            "key": key, "recipe": base_recipe(), "rootfs_sha256": _file_sha256(tmp / "rootfs.tar"),
            "packages": packages.count("\n"), "seconds": round(time.monotonic() - t0, 1)}, indent=1) + "\n")
        shutil.rmtree(d, ignore_errors=True)
        tmp.rename(d)
        info = json.loads((d / "base.json").read_text())
        say(f"base: {info['packages']} packages, rootfs sha256 {info['rootfs_sha256'][:16]}…, "
            f"{info['seconds']:.0f} s")
    ref = base_ref(key)
    if subprocess.run(_buildah("inspect", "--type", "image", ref), capture_output=True).returncode != 0:
        say(f"base: importing as {ref}")
        (d / "Containerfile").write_text('FROM scratch\nADD rootfs.tar /\nCMD ["python3"]\n')
        _run(_buildah("bud", "--isolation", "chroot", "--timestamp", "0", "--format", "oci",
                      "-f", str(d / "Containerfile"), "-t", ref, str(d)), log, "importing the base")
    return key


def base_ref(key: str) -> str:
    return f"localhost/benchfarm/python-base:{BASE_SUITE}-{key}"


def _context(files: Sequence[str], dest: Path) -> None:
    """Exactly the inputs, with modes a checkout under any umask would agree on."""
    for rel in files:
        src, dst = REPO / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o755 if _executable(src) else 0o644)
    for dirpath, _dirs, _names in os.walk(dest):
        os.chmod(dirpath, 0o755)


def _write_archive(layout: Path, archive: Path) -> None:
    """The OCI layout as a tar with fixed owners, modes and dates: same blobs, same bytes."""
    names = ["oci-layout", "index.json", "blobs", "blobs/sha256",
             *sorted(f"blobs/sha256/{p.name}" for p in (layout / "blobs" / "sha256").iterdir())]
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            path = layout / name
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = path.stat().st_size, 0o644
                with path.open("rb") as f:
                    tar.addfile(info, f)


def _record_digest(key: str, digest: str) -> str | None:
    """Keep the first digest seen for a content hash; return it when this one differs."""
    path = WORK / "digests.json"
    seen = json.loads(path.read_text()) if path.exists() else {}
    first = seen.setdefault(key, {"digest": digest, "built": time.strftime("%Y-%m-%d %H:%M:%S")})
    path.write_text(json.dumps(seen, indent=1, sort_keys=True) + "\n")
    return first["digest"] if first["digest"] != digest else None


def archive_path(ver: str, key: str) -> Path:
    return IMAGES / f"benchfarm-operator-{ver}-{key}.tar"


def _cached(ver: str, files: Sequence[str]) -> Image | None:
    bkey = base_key()
    if not (WORK / f"base-{bkey}" / "packages.txt").exists():
        return None
    archive = archive_path(ver, image_key(bkey, files))
    record = archive.with_suffix(".json")
    if not (archive.exists() and record.exists()):
        return None
    return Image(**{**json.loads(record.read_text()), "seconds": 0.0})


def build(rebuild: bool = False) -> Image:
    """The operator image as an OCI archive; from the cache when its inputs have not changed."""
    for tool in TOOLS:
        if shutil.which(tool) is None:
            raise LabError(f"{tool} is missing: `make image` installs it (IMAGE_APT_PACKAGES)")
    ver = version()
    ref = f"{REPOSITORY}:{ver}"
    with _locked():
        files = input_files()
        if not rebuild and (cached := _cached(ver, files)):
            say(f"{ref} up to date (content hash {cached.key}): {cached.archive}")
            say(f"digest {cached.digest}")
            return cached
        log = WORK / "build.log"
        log.write_text("")
        if rebuild:
            say("rebuilding from nothing: base, builder store and image")
            shutil.rmtree(WORK / f"base-{base_key()}", ignore_errors=True)
            if (WORK / "buildah").exists():
                subprocess.run(_buildah("rmi", "--all", "--force"), capture_output=True)
                shutil.rmtree(WORK / "buildah", ignore_errors=True)
        t0 = time.monotonic()
        bkey = build_base(log)
        key = image_key(bkey, files)
        archive = archive_path(ver, key)
        record = archive.with_suffix(".json")
        say(f"building {ref} (content hash {key}) from Dockerfile with buildah; log: {log}")
        work = WORK / f"build-{key}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        try:
            _context(files, work / "context")
            local = f"localhost/{ref}"
            argv = ["bud", "--isolation", "chroot", "--timestamp", "0", "--format", "oci",
                    "--pull=never", "--build-arg", f"PYTHON_IMAGE={base_ref(bkey)}",
                    "--build-arg", f"SOURCE_DATE_EPOCH={SOURCE_DATE_EPOCH}", "-t", local]
            if HOST_CA_BUNDLE.exists():
                argv += ["-v", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"]
            t1 = time.monotonic()
            _run(_buildah(*argv, str(work / "context")), log, "buildah bud")
            say(f"built in {time.monotonic() - t1:.0f} s; writing the OCI archive")
            _run(_buildah("push", "--format", "oci", local, f"oci:{work / 'oci'}:{ver}"), log,
                 "buildah push")
            index = json.loads((work / "oci" / "index.json").read_text())
            manifest = index["manifests"][0]
            digest = manifest["digest"]
            name = f"docker.io/{ref}"
            manifest["annotations"] = {"io.containerd.image.name": name,
                                       "org.opencontainers.image.ref.name": ver}
            (work / "oci" / "index.json").write_text(json.dumps(index, sort_keys=True))
            blob = json.loads((work / "oci" / "blobs" / "sha256" / digest.split(":")[1]).read_text())
            _write_archive(work / "oci", work / "image.tar")
            img = Image(ref=ref, name=name, key=key, digest=digest,
                        config_digest=blob["config"]["digest"], archive=str(archive), base=bkey,
                        seconds=round(time.monotonic() - t0, 1))
            (work / "image.tar").rename(archive)
            record.write_text(json.dumps(asdict(img), indent=1) + "\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)
            subprocess.run(_buildah("rmi", f"localhost/{ref}"), capture_output=True)
            subprocess.run(_buildah("rmi", "--prune"), capture_output=True)
        say(f"{ref} in {img.seconds:.0f} s: {archive} ({archive.stat().st_size >> 20} MiB)")
        say(f"digest {digest}")
        first = _record_digest(key, digest)
        if first:
            raise LabError(f"not reproducible: content hash {key} built before as {first}, now {digest}")
        if rebuild:
            say(f"reproducible: content hash {key} has the digest it had before")
        _prune(archive, bkey)
        return img


def _prune(current: Path, bkey: str, keep: int = 3) -> None:
    """Older archives beyond the newest `keep`, and bases of other recipes, go."""
    archives = sorted(IMAGES.glob("benchfarm-operator-*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [a for a in archives if a != current][keep - 1:]:
        old.unlink(missing_ok=True)
        old.with_suffix(".json").unlink(missing_ok=True)
    for old in WORK.glob("base-*"):
        if old.is_dir() and old.name != f"base-{bkey}":
            subprocess.run(_buildah("rmi", base_ref(old.name.removeprefix("base-"))), capture_output=True)
            shutil.rmtree(old, ignore_errors=True)


# --- running it ------------------------------------------------------------------------------------

def unpack(img: Image, dest: Path) -> Path:
    """The image as an OCI runtime bundle (rootfs + config.json from the image config), by umoci."""
    layout = dest / "oci"
    layout.mkdir(parents=True)
    with tarfile.open(img.archive) as tar:
        # the "tar" filter (no absolute paths, no links out) where this Python has it: Debian 12's
        # 3.11.2 has no extraction filters (3.11.4 brought them); the archive is our own build
        tar.extractall(layout, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
    bundle = dest / "bundle"
    res = subprocess.run(["umoci", "unpack", "--image", f"{layout}:{img.ref.split(':')[1]}", str(bundle)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise LabError(f"umoci unpack failed: {res.stderr.strip()}")
    shutil.rmtree(layout)
    shutil.copyfile(bundle / "config.json", bundle / "image-config.json")   # run() starts from it
    return bundle


def run(bundle: Path, args: Sequence[str] | None = None, readonly: bool = True,
        timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the image's config under runc: its user and env, a read-only root (as the chart's
    restricted pod: readOnlyRootFilesystem) and a tmpfs on /tmp (its emptyDir); `args` replaces the
    entrypoint, None keeps it."""
    spec = json.loads((bundle / "image-config.json").read_text())
    spec["process"]["terminal"] = False
    if args is not None:
        spec["process"]["args"] = list(args)
    spec["root"]["readonly"] = readonly
    spec["mounts"] = [m for m in spec["mounts"] if m["destination"] != "/tmp"] + [
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", "mode=1777", "size=65536k"]}]
    (bundle / "config.json").write_text(json.dumps(spec, indent=1))
    state = bundle.parent / "runc"
    cid = f"benchfarm-image-check-{os.getpid()}-{time.monotonic_ns()}"
    try:
        return subprocess.run(["runc", "--root", str(state), "run", "--bundle", str(bundle), cid],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    finally:
        subprocess.run(["runc", "--root", str(state), "delete", "--force", cid], capture_output=True)
