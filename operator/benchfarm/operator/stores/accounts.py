"""Each tenant namespace's store credential, issued and kept by the operator on a thread of its own.

A team's CI uploads its build to `<namespace>/` and reads its runs' results there; it must not
hold the lab's store credential, which reaches every namespace's folder and the lab's own
(`builds/`, whose kernels every namespace may boot). So the operator, the one holder of the
store's admin (root) credential, gives each tenant namespace a MinIO user of its own limited to
`<namespace>/` (`store.accounts`), and keeps its keys in the Secret `benchfarm-store` of that
namespace, where the namespace's people and CI read them with their own Kubernetes token.

Which namespaces: each the LabPolicy names (a lab admin lists a team there to let it in: it may
upload before its first run) and each with a BenchmarkRun (it reads its results back), but never
one named as a folder of the lab's own (`builds`, and the first folder of every
`softwareSources` of the LabPolicy): its user would reach the lab's builds. A new
one is served at once; every RESYNC seconds each is checked again: a Secret deleted (or not the
operator's: another access key, another store) is issued anew with a new secret key, the old
one stops working: deleting the Secret rotates the credential. After a start, and for a user
the store lost, the Secret's own keys are issued again. A namespace's user whose Secret is gone
(the Secret while the namespace wants none) is removed at the next check, so no copy of its
key outlives it; a namespace being deleted loses its user at once (`gone`, from the operator's
watch of namespaces), and none is issued for it again. Nothing here is on kopf's loop or the
owner's thread, and no run waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import replace

from kubernetes.client import ApiException

from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.errors import BenchfarmError
from benchfarm.kubeapi.client import Kube
from benchfarm.operator.state import metrics
from benchfarm.settings import Settings
from benchfarm.store.accounts import (
    LAB_FOLDERS,
    MANAGED_BY,
    SECRET,
    StoreAdmin,
    config_from_secret,
    namespace_of,
    new_secret_key,
    policy_name,
    secret_data,
    user_name,
)
from benchfarm.store.artifacts import StoreConfig

log = logging.getLogger("benchfarm.storeaccounts")

RESYNC = 60.0       # seconds between two checks of every namespace's credential


class StoreAccounts:
    def __init__(self, kube: Kube, admin: StoreAdmin, public: StoreConfig,
                 every: float = RESYNC) -> None:
        self.kube, self.admin, self.every = kube, admin, every
        self.public = public           # the store as tenants reach it (its endpoint, bucket)
        self.lock = threading.Lock()
        self.wanted: set[str] = set()  # namespaces with a credential (both sets: under lock)
        self.new: set[str] = set()     # ... of which not served yet
        self.going: set[str] = set()   # namespaces being deleted, their user not removed yet
        self.confirmed: set[str] = set()   # issued (or issued again) since the start: this thread's
        self.lab_folders = LAB_FOLDERS     # the lab's own top folders: no namespace's (under lock)
        self.refused: set[str] = set()     # namespaces named as one, said once: this thread's
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="store-accounts", daemon=True)

    def want(self, namespaces: Iterable[str]) -> None:
        """These namespaces get a credential (from any thread; never waits)."""
        with self.lock:
            added = set(namespaces) - self.wanted
            self.wanted |= added
            self.new |= added
        if added:
            self.wake.set()

    def gone(self, namespace: str) -> None:
        """The namespace is being deleted (or is gone): its user is removed at once and it
        gets no credential (from any thread; never waits). A run in a namespace of that name
        made later asks for one again."""
        with self.lock:
            self.wanted.discard(namespace)
            self.new.discard(namespace)
            self.going.add(namespace)
        self.wake.set()

    def policy(self, policy: LabPolicySpec) -> None:
        """The LabPolicy changed: the namespaces it names get a credential; the first folders of
        its softwareSources are the lab's (from any thread; never waits)."""
        sources = [policy.default, *policy.namespaces]
        with self.lock:
            self.lab_folders = LAB_FOLDERS | {s.split("/", 1)[0] for p in sources
                                              for s in p.softwareSources}
        self.want(p.namespace for p in policy.namespaces)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)

    def _loop(self) -> None:
        due_all = time.monotonic() + self.every
        while not self.stopping.is_set():
            # new namespaces at once, every one each `every` s however often new ones come
            self.wake.wait(max(0.0, due_all - time.monotonic()))
            self.wake.clear()
            if self.stopping.is_set():
                return
            everyone = time.monotonic() >= due_all
            if everyone:
                due_all = time.monotonic() + self.every
            with self.lock:
                due = set(self.wanted) if everyone else set(self.new)
                self.new.clear()
                going, self.going = self.going, set()
            try:
                self.forget(sorted(going))
                self.tend(sorted(due), strays=everyone)
            except Exception:      # a bug here must not end the thread: said, tried again
                metrics.bug(log, "tending store credentials")

    def tend(self, namespaces: list[str], strays: bool = False) -> None:
        """Each namespace's credential checked, issued where it is missing or not in force; with
        `strays`, the store's other namespace users too: removed where their Secret is gone."""
        if not namespaces and not strays:
            return
        try:
            users = self.admin.users()
        except BenchfarmError as exc:
            log.warning("store credentials not checked: %s", exc)
            self._again(namespaces)
            return
        for ns in namespaces:
            try:
                self.tend_one(ns, users)
            except (BenchfarmError, ApiException, ValueError) as exc:
                log.warning("store credential of namespace %s: %s", ns, _said(exc))
                self._again([ns])
        if strays:
            with self.lock:
                wanted = set(self.wanted)
            for stray in {namespace_of(u) for u in users} - wanted - {None}:
                try:
                    self.tend_stray(str(stray))
                except (BenchfarmError, ApiException) as exc:
                    log.warning("store user of namespace %s: %s", stray, _said(exc))

    def forget(self, namespaces: list[str]) -> None:
        """The users of these namespaces, deleted or being deleted, removed (one the store does
        not answer for is tried again at the next check of everyone, as a stray)."""
        if not namespaces:
            return
        try:
            users = self.admin.users()
        except BenchfarmError as exc:
            log.warning("store users of deleted namespaces not removed yet: %s", exc)
            return
        for ns in namespaces:
            self.confirmed.discard(ns)
            if user_name(ns) not in users:
                continue
            try:
                self.admin.remove(ns)
                log.info("store user of namespace %s removed: the namespace is being deleted", ns)
            except BenchfarmError as exc:
                log.warning("store user of namespace %s: %s", ns, exc)

    def tend_stray(self, ns: str) -> None:
        """A namespace's user this operator was not asked for (it started since, or the
        namespace went): kept while its Secret is there, removed when it is not."""
        if _ours(self.kube.secret_data(ns, SECRET), ns, self.public) is None or \
                not self.kube.namespace_exists(ns):
            self.admin.remove(ns)
            log.info("store user of namespace %s removed: its Secret %s is gone", ns, SECRET)

    def _again(self, namespaces: list[str]) -> None:
        """Tried again at the next check (the set of new ones: not at once, not in a loop)."""
        self.confirmed.difference_update(namespaces)

    def tend_one(self, ns: str, users: dict[str, str]) -> None:
        with self.lock:
            lab_folder = ns in self.lab_folders
        if lab_folder:     # and one issued before the folder was the lab's goes
            if user_name(ns) in users:
                self.admin.remove(ns)
            if ns not in self.refused:
                self.refused.add(ns)
                log.warning("namespace %s gets no store credential: %s/ is the lab's own folder",
                            ns, ns)
            return
        data = self.kube.secret_data(ns, SECRET)
        current = _ours(data, ns, self.public)
        if current is not None and ns in self.confirmed and \
                users.get(user_name(ns)) == policy_name(ns):
            return                       # in force
        if not self.kube.namespace_exists(ns):
            # being deleted (its Secret may still be there) or gone: its key goes, none issued
            if user_name(ns) in users:
                self.admin.remove(ns)
                log.info("store user of namespace %s removed: the namespace is gone", ns)
            return
        if current is None:
            # the store first: whoever reads the Secret finds a key in force
            key = new_secret_key()
            self.admin.issue(ns, key)
            if not self._write(ns, secret_data(replace(self.public, access_key=user_name(ns),
                                                       secret_key=key))):
                self.admin.remove(ns)    # gone meanwhile: it keeps no user
                return
            self.confirmed.add(ns)
            log.info("store credential of namespace %s issued", ns)
        else:
            self.admin.issue(ns, current.secret_key)
            self.confirmed.add(ns)
            log.info("store credential of namespace %s in force again", ns)

    def _write(self, ns: str, data: dict[str, str]) -> bool:
        """The namespace's Secret holds `data`; False when the namespace is not there."""
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "stringData": data,
                "metadata": {"name": SECRET, "namespace": ns, "labels": dict(MANAGED_BY)}}
        try:
            if not self.kube.create_namespaced("Secret", ns, body):
                self.kube.patch_namespaced("Secret", ns, SECRET, {
                    "metadata": {"labels": dict(MANAGED_BY)}, "stringData": data})
        except ApiException as exc:
            if exc.status == 404:      # the LabPolicy names a namespace not made yet
                log.debug("namespace %s is not there: no store credential yet", ns)
                return False
            raise
        return True


def _ours(data: dict[str, bytes] | None, ns: str, public: StoreConfig) -> StoreConfig | None:
    """The credential the Secret holds when it is the namespace's at this store; else None."""
    if data is None:
        return None
    try:
        held = config_from_secret(data)
    except ValueError:
        return None
    if (held.access_key, held.endpoint, held.bucket, held.secure) != (
            user_name(ns), public.endpoint, public.bucket, public.secure):
        return None
    return held


def _said(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"the Kubernetes API answered {exc.status} {exc.reason}"
    return str(exc)


def public_store(config: StoreConfig, public_endpoint: str) -> StoreConfig:
    """The store as tenants reach it: `public_endpoint` (HOST:PORT, or http(s)://HOST:PORT,
    whose scheme says whether it is TLS) where the lab sets one, else the lab's own endpoint."""
    endpoint = public_endpoint.strip()
    if not endpoint:
        return config
    scheme, sep, rest = endpoint.partition("://")
    if sep:
        return replace(config, endpoint=rest.rstrip("/"), secure=scheme.lower() == "https")
    return replace(config, endpoint=endpoint)


def from_settings(settings: Settings, store: StoreConfig) -> StoreAccounts | None:
    """The tender, where the lab issues namespace credentials (`store_accounts`)."""
    if not settings.store_accounts:
        return None
    return StoreAccounts(Kube(settings, outage_budget=10.0), StoreAdmin(store),
                         public_store(store, settings.s3_public_endpoint))
