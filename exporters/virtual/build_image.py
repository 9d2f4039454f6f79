#!/usr/bin/env python3
"""Builds a virtual board's kernel and initramfs from Debian packages.

A virtual board must run the same programs a lab engineer would put on a real board, so its root
filesystem is made of Debian packages of the board's architecture, unpacked (never installed, so no
maintainer scripts run and arm64 works on an x86 host), pruned to the ELF closure of the programs
we need, and packed as an uncompressed initramfs (faster to boot under TCG than a compressed one).
The result is cached under ~/.cache/benchfarm/images/<profile>-<digest>/, keyed by everything that
goes into it, so it is rebuilt only when its inputs change.

Usage: build_image.py PROFILE   (amd64, arm64, amd64-gpu; prints the image directory)
       build_image.py --kernel ARCH PACKAGE   (another kernel build to deploy on the boards, e.g.
                                               arm64 linux-image-cloud-arm64; prints its vmlinuz)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("BENCHFARM_CACHE", Path.home() / ".cache" / "benchfarm"))
RECIPE_VERSION = "11"  # bump when this file changes what it produces

@dataclass(frozen=True)
class Profile:
    """What goes into one kind of board image."""

    arch: str
    kernel: str                      # the meta package; its versioned dependency is used
    packages: tuple[str, ...]
    programs: tuple[str, ...]        # copied with their ELF closure
    libraries: tuple[str, ...] = ()  # dlopen()ed at run time: copied with their closure too
    extra: tuple[str, ...] = ()      # plain files or whole directories
    modules: tuple[str, ...] = ()


BASE_PACKAGES = ("busybox-static", "util-linux", "rt-tests", "stress-ng", "openssl", "fio",
                 "sysbench", "mbw", "iperf3", "p7zip-full", "coreutils")
BASE_PROGRAMS = ("usr/bin/cyclictest", "usr/bin/hackbench", "usr/bin/stress-ng", "usr/bin/openssl",
                 "usr/bin/fio", "usr/bin/sysbench", "usr/bin/mbw", "usr/bin/iperf3",
                 "usr/sbin/rtcwake", "usr/lib/p7zip/7z", "bin/dd")
BASE_EXTRA = ("usr/lib/ssl/openssl.cnf", "usr/lib/p7zip/7z.so", "usr/lib/p7zip/Codecs/Rar.so")
BASE_MODULES = ("virtio_net", "virtio_blk", "virtio_pci", "virtio_mmio", "virtio_console",
                "rtc-cmos")

PROFILES = {
    "amd64": Profile("amd64", "linux-image-cloud-amd64", BASE_PACKAGES, BASE_PROGRAMS,
                     extra=BASE_EXTRA, modules=BASE_MODULES),
    "arm64": Profile("arm64", "linux-image-arm64", BASE_PACKAGES, BASE_PROGRAMS,
                     extra=BASE_EXTRA, modules=BASE_MODULES),
    # The cloud kernel has no DRM: the GPU board boots the generic kernel with virtio-gpu and
    # renders with Mesa's llvmpipe (software), which is what glmark2 measures here.
    "amd64-gpu": Profile(
        "amd64", "linux-image-amd64",
        BASE_PACKAGES + ("glmark2-es2-drm", "libgl1-mesa-dri", "libegl-mesa0", "libgles2",
                         "libgbm1"),
        BASE_PROGRAMS + ("usr/bin/glmark2-es2-drm",),
        libraries=("usr/lib/x86_64-linux-gnu/dri/kms_swrast_dri.so",
                   "usr/lib/x86_64-linux-gnu/dri/swrast_dri.so",
                   "usr/lib/x86_64-linux-gnu/dri/virtio_gpu_dri.so",
                   "usr/lib/x86_64-linux-gnu/libEGL_mesa.so.0"),
        extra=BASE_EXTRA + ("usr/share/glmark2", "usr/share/glvnd", "usr/share/drirc.d"),
        modules=BASE_MODULES + ("virtio_gpu", "bochs")),
}

INIT_SCRIPT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mkdir -p /proc /sys /dev /tmp /run /mnt/scratch
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/shm /dev/pts
mount -t tmpfs shm /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmp /tmp
for m in $(cat /etc/modules-load); do modprobe -q "$m" 2>/dev/null; done
hostname "$(sed -n 's/.*benchfarm.board=\([^ ]*\).*/\1/p' /proc/cmdline)"
ip link set lo up
if ip link set eth0 up 2>/dev/null; then
  ip addr add 10.0.2.15/24 dev eth0
  ip route add default via 10.0.2.2
fi
setsid /sbin/benchfarm-sensors </dev/null >/dev/null 2>&1 &
echo "benchfarm-init: userspace up"
# the shell once the sensors' tree is whole (a real board's sysfs is there before userspace)
i=0; while [ ! -e /run/benchfarm/sensors-ready ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
export PS1='root@\h:\w# '
export HOME=/root
cd /root
while true; do setsid cttyhack sh -l; done
"""

# The board's cpufreq and thermal stand-in (exporters/virtual/sensors.py): the virtual lab's
# sensor model sends `relative/path value` lines through the virtio-serial port named
# org.benchfarm.sensors; each value is written under /run/benchfarm/sys/<path> (a path with a
# `..`, or anything but [A-Za-z0-9_./-], is refused). Only builtins run per line (no fork: a
# `mv` per value cost an arm64 board 2 % of a CPU), and the loop blocks on read: an idle board
# pays nothing. Opening the port it says `hello`, and the lab answers with the whole tree and a
# line `ready`, on which it creates <root>/../sensors-ready (also when the board has no such
# port): init starts the shell then, so no command meets a tree half written. An update
# truncates before it writes: a reader in those microseconds reads an empty value (None).
# The files that never change exist before the tree.
# Arguments (tests only): another root, and the port to read instead of looking for one.
SENSORS_SCRIPT = r"""#!/bin/busybox sh
root=${1:-/run/benchfarm/sys}
port=$2
ready=${root%/*}/sensors-ready
policy=$root/devices/system/cpu/cpufreq/policy0
zone=$root/class/thermal/thermal_zone0
cooling=$root/class/thermal/cooling_device0
mkdir -p "$policy/stats" "$zone" "$cooling/stats"
echo performance > "$policy/scaling_governor"
echo performance > "$policy/scaling_available_governors"
echo 0 > "$policy/stats/total_trans"
echo cpu-thermal > "$zone/type"
echo passive > "$zone/trip_point_0_type"
echo cpufreq-cpu0 > "$cooling/type"
echo 0 > "$cooling/cur_state"
echo 0 > "$cooling/stats/total_trans"
for try in 1 2 3 4 5 6 7 8 9 10; do
  [ -n "$port" ] && break
  for f in /sys/class/virtio-ports/*/name; do
    [ -r "$f" ] && read -r name < "$f" && [ "$name" = org.benchfarm.sensors ] && {
      d=${f%/name}; port=/dev/${d##*/}; }
  done
  [ -n "$port" ] && [ -e "$port" ] && break
  port=
  sleep 1
done
[ -n "$port" ] || { : > "$ready"; exit 0; }
while :; do
  {
    echo hello >&0
    while read -r path value; do
      case "$path" in
        ready) : > "$ready"; continue ;;
        ''|/*|*[!A-Za-z0-9_./-]*|..|../*|*/..|*/../*) continue ;;
      esac
      dir=${path%/*}
      [ "$dir" = "$path" ] || [ -d "$root/$dir" ] || mkdir -p "$root/$dir"
      printf '%s\n' "$value" > "$root/$path"
    done
  } <>"$port"
  sleep 2
done
"""


def log(msg: str) -> None:
    print(f"[image] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, **kw)


class AptRoot:
    """A private apt tree for one architecture; the host's apt state is never touched."""

    def __init__(self, arch: str) -> None:
        self.arch = arch
        self.root = CACHE / "apt" / arch
        for sub in ("etc/apt/sources.list.d", "etc/apt/preferences.d", "var/lib/apt/lists/partial",
                    "var/cache/apt/archives/partial", "var/lib/dpkg"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        status = self.root / "var/lib/dpkg/status"
        if not status.exists():
            status.write_text("")
        for src in Path("/etc/apt/sources.list.d").glob("*.sources"):
            shutil.copy(src, self.root / "etc/apt/sources.list.d" / src.name)
        if Path("/etc/apt/sources.list").exists():
            shutil.copy("/etc/apt/sources.list", self.root / "etc/apt/sources.list")

    def opts(self) -> list[str]:
        r = self.root
        return [
            "-o", f"APT::Architecture={self.arch}", "-o", f"APT::Architectures::={self.arch}",
            "-o", f"Dir::Etc={r}/etc/apt", "-o", f"Dir::State={r}/var/lib/apt",
            "-o", f"Dir::State::status={r}/var/lib/dpkg/status", "-o", f"Dir::Cache={r}/var/cache/apt",
            "-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root", "-o", "APT::Install-Recommends=0",
        ]

    def update(self) -> None:
        lists = self.root / "var/lib/apt/lists"
        fresh = any(lists.glob("*_Packages*")) and time.time() - lists.stat().st_mtime < 7 * 86400
        if not fresh:
            log(f"{self.arch}: apt-get update (private tree)")
            run(["apt-get", *self.opts(), "update", "-qq"])
            lists.touch()

    def candidate(self, package: str) -> str:
        out = run(["apt-cache", *self.opts(), "policy", package], capture_output=True).stdout
        m = re.search(r"Candidate:\s*(\S+)", out)
        if not m or m.group(1) == "(none)":
            raise SystemExit(f"[image] {self.arch}: package {package} has no candidate")
        return m.group(1)

    def depends_on(self, package: str) -> str:
        out = run(["apt-cache", *self.opts(), "depends", package], capture_output=True).stdout
        m = re.search(r"Depends:\s*(linux-image-\S+)", out)
        return m.group(1) if m else package

    def download(self, packages: list[str]) -> list[Path]:
        """Download the packages and their dependencies; return exactly their .debs.

        The archive cache is shared by every image of this architecture, so what to unpack is
        what apt resolves for this install, not whatever the cache holds."""
        archives = self.root / "var/cache/apt/archives"
        log(f"{self.arch}: resolving and downloading {len(packages)} packages with dependencies")
        run(["apt-get", *self.opts(), "install", "-y", "-qq", "--download-only", *packages],
            stdout=subprocess.DEVNULL)
        plan = run(["apt-get", *self.opts(), "install", "-s", *packages],
                   capture_output=True).stdout
        wanted = set(re.findall(r"^Inst (\S+) \((\S+)", plan, flags=re.M))
        debs = []
        for deb in sorted(archives.glob("*.deb")):
            name, _, rest = deb.name.partition("_")
            version = rest.rsplit("_", 1)[0].replace("%3a", ":")
            if (name, version) in wanted or (name.split(":")[0], version) in wanted:
                debs.append(deb)
        if len(debs) < len(wanted):
            have = {d.name.partition("_")[0] for d in debs}
            missing = sorted(n for n, _ in wanted if n not in have)
            raise SystemExit(f"[image] {self.arch}: packages not downloaded: {', '.join(missing)}")
        return debs


def modules_closure(moddir: Path, wanted: list[str]) -> list[str]:
    deps: dict[str, list[str]] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
    by_name = {Path(p).name.split(".ko")[0].replace("-", "_"): p for p in deps}
    out: list[str] = []

    def visit(path: str) -> None:
        if path in out:
            return
        for d in deps.get(path, []):
            visit(d)
        out.append(path)

    for name in wanted:
        path = by_name.get(name.replace("-", "_"))
        if path:  # absent means built into this kernel
            visit(path)
    return out


LIB_DIRS = ("lib/{triplet}", "usr/lib/{triplet}", "lib", "usr/lib")
TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}


def elf_closure(tree: Path, programs: list[str], arch: str = "amd64") -> set[str]:
    """Every file the programs need. lddtree resolves executables' libraries through their
    interpreter's search path; a bare shared object (a dlopen()ed driver) has none, so names it
    leaves unresolved are looked up in the tree's library directories, recursively."""
    files: set[str] = set()
    todo = ["/" + p for p in programs]
    seen: set[str] = set()
    dirs = [d.format(triplet=TRIPLETS[arch]) for d in LIB_DIRS]
    while todo:
        item = todo.pop()
        if item in seen:
            continue
        seen.add(item)
        out = run(["/usr/bin/python3", "/usr/bin/lddtree", "--root", str(tree), "-l", item],
                  capture_output=True).stdout
        for line in out.split():
            if "/" in line:
                files.add(line.removeprefix(str(tree)))
                continue
            for d in dirs:
                if (tree / d / line).exists():
                    todo.append(f"/{d}/{line}")
                    break
    return files


def build(name: str) -> Path:
    """Build (or find) the image; labs that share the cache (CI, helper sessions) take turns per
    architecture, since they share its apt tree and work directories."""
    lock_path = CACHE / "build" / f"image-{PROFILES[name].arch}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(name)


def _build(name: str) -> Path:
    profile = PROFILES[name]
    arch = profile.arch
    apt = AptRoot(arch)
    apt.update()
    lists_mtime = (apt.root / "var/lib/apt/lists").stat().st_mtime
    resolved_file = apt.root / f"resolved-{name}.json"
    resolved = json.loads(resolved_file.read_text()) if resolved_file.exists() else {}
    packages = list(profile.packages)
    if resolved.get("lists_mtime") != lists_mtime or resolved.get("packages") != packages:
        kernel_pkg = apt.depends_on(profile.kernel)
        versions = {p: apt.candidate(p) for p in [kernel_pkg, *packages]}
        resolved = {"lists_mtime": lists_mtime, "packages": packages, "kernel": kernel_pkg,
                    "versions": versions}
        resolved_file.write_text(json.dumps(resolved))
    kernel_pkg, versions = resolved["kernel"], resolved["versions"]
    digest_src = json.dumps({"recipe": RECIPE_VERSION, "profile": name, "versions": versions,
                             "layout": repr(profile), "init": INIT_SCRIPT,
                             "sensors": SENSORS_SCRIPT}, sort_keys=True)
    digest = hashlib.sha256(digest_src.encode()).hexdigest()[:12]
    out = CACHE / "images" / f"{name}-{digest}"
    if (out / "initramfs.cpio").exists() and (out / "vmlinuz").exists():
        return out

    start = time.monotonic()
    debs = apt.download([kernel_pkg, *packages])
    work = CACHE / "build" / f"image-{name}"
    shutil.rmtree(work, ignore_errors=True)
    tree = work / "tree"
    tree.mkdir(parents=True)
    log(f"{arch}: unpacking {len(debs)} packages")
    for deb in debs:
        run(["dpkg-deb", "-x", str(deb), str(tree)])

    kernel_version = kernel_pkg.removeprefix("linux-image-")
    moddir = tree / "lib/modules" / kernel_version
    run(["busybox", "depmod", "-b", str(tree), kernel_version])

    root = work / "root"
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "tmp", "root",
              "run", "var/tmp", "mnt"):
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy(tree / "bin/busybox", root / "bin/busybox")
    libraries = [lib for lib in profile.libraries if (tree / lib).exists()]
    for f in sorted(elf_closure(tree, [*profile.programs, *libraries], arch)):
        src = tree / f.lstrip("/")
        if src.exists():
            dst = root / f.lstrip("/")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src.resolve(), dst)
    for f in profile.extra:
        src = tree / f
        if src.is_dir():
            shutil.copytree(src, root / f, symlinks=False, dirs_exist_ok=True)
        elif src.exists():
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src.resolve(), root / f)
    # Debian's merged /usr: the loader is asked for under /lib and /lib64.
    for link in ("lib", "lib64"):
        if (root / "usr" / link).exists() and not (root / link).exists():
            (root / link).symlink_to(f"usr/{link}")
    for prog in profile.programs:
        link = root / "usr/bin" / Path(prog).name
        if not link.exists():
            link.symlink_to("/" + prog)

    mods = modules_closure(moddir, list(profile.modules))
    target_moddir = root / "lib/modules" / kernel_version if not (root / "lib").is_symlink() \
        else root / "usr/lib/modules" / kernel_version
    for m in mods:
        dst = target_moddir / m
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(moddir / m, dst)
    for f in ("modules.dep", "modules.alias", "modules.symbols", "modules.builtin",
              "modules.order"):
        if (moddir / f).exists():
            shutil.copy2(moddir / f, target_moddir / f)
    (root / "etc/modules-load").write_text(
        "\n".join(Path(m).name.split(".ko")[0] for m in mods) + "\n")

    (root / "init").write_text(INIT_SCRIPT)
    (root / "init").chmod(0o755)
    (root / "sbin/benchfarm-sensors").write_text(SENSORS_SCRIPT)
    (root / "sbin/benchfarm-sensors").chmod(0o755)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n10.0.2.2 labhost\n")
    (root / "etc/profile").write_text("export PATH=/bin:/sbin:/usr/bin:/usr/sbin\n")

    out_tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(out_tmp, ignore_errors=True)
    out_tmp.mkdir(parents=True)
    vmlinuz = tree / "boot" / f"vmlinuz-{kernel_version}"
    shutil.copy(vmlinuz, out_tmp / "vmlinuz")
    files = subprocess.run(["find", ".", "-mindepth", "1"], cwd=root, check=True,
                           capture_output=True).stdout
    with open(out_tmp / "initramfs.cpio", "wb") as cpio:
        subprocess.run(["cpio", "-o", "-H", "newc", "--quiet", "-R", "0:0"], cwd=root, input=files,
                       stdout=cpio, check=True)
    (out_tmp / "manifest.json").write_text(json.dumps(
        {"profile": name, "arch": arch, "kernel": kernel_version, "versions": versions,
         "modules": mods}, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    out_tmp.rename(out)
    shutil.rmtree(work, ignore_errors=True)
    size = (out / "initramfs.cpio").stat().st_size / 1e6
    log(f"{name}: image built in {time.monotonic() - start:.0f} s ({size:.0f} MB initramfs): {out}")
    return out


def kernel(arch: str, meta: str) -> Path:
    """The vmlinuz of a Debian kernel package (the versioned one `meta` depends on), cached by
    package version: software a run can deploy on a board instead of its image's own kernel."""
    lock_path = CACHE / "build" / f"image-{arch}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        apt = AptRoot(arch)
        apt.update()
        package = apt.depends_on(meta)
        out = CACHE / "kernels" / f"{package}_{apt.candidate(package)}" / "vmlinuz"
        if out.exists():
            return out
        work = CACHE / "build" / f"kernel-{package}"
        shutil.rmtree(work, ignore_errors=True)
        deb = next(d for d in apt.download([package]) if d.name.startswith(f"{package}_"))
        run(["dpkg-deb", "-x", str(deb), str(work)])
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(work / "boot" / f"vmlinuz-{package.removeprefix('linux-image-')}",
                    out.with_suffix(".tmp"))
        out.with_suffix(".tmp").rename(out)
        shutil.rmtree(work, ignore_errors=True)
        log(f"{arch}: kernel {package} ready: {out}")
        return out


def main() -> None:
    if sys.argv[1:2] == ["--kernel"] and len(sys.argv) == 4:
        print(kernel(sys.argv[2], sys.argv[3]))
        return
    name = sys.argv[1] if len(sys.argv) > 1 else "amd64"
    if name not in PROFILES:
        raise SystemExit(f"unknown image profile {name!r}; known: {', '.join(PROFILES)}")
    print(build(name))


if __name__ == "__main__":
    main()
