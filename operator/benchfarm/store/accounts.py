"""Each namespace's own store credential: what a team's CI and people upload builds and read
results with, never the lab's.

The lab's store credential (BENCHFARM_S3_*) reads and writes every key of the bucket, `builds/`
included: the operator, the sessions, the indexer and the dashboard hold it, and no tenant. For
each tenant namespace the operator makes a MinIO user of its own (`user_name`) whose one policy
(`namespace_policy`) lets it read, write, list and delete under `<namespace>/` and nothing else,
and writes that user's keys into the Secret `benchfarm-store` of the namespace (`secret_data`),
which the namespace's people may read (the chart's `<release>-user` role names that one Secret).
The CLI reads it with the person's or the CI's kubeconfig (`namespace_store`): a kubeconfig is
all a team holds, and what its credential reaches is its own folder.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import urllib3
from minio.credentials import StaticProvider
from minio.error import MinioAdminException

from benchfarm.api.outcomes import LabFault
from benchfarm.errors import InfraError, Outage, Party
from benchfarm.store.artifacts import ArtifactStore, StoreConfig

SECRET = "benchfarm-store"          # the Secret of a namespace that holds its store credential
# the lab's own top folders, whatever the LabPolicy says: its published builds (devlab/builds.py)
LAB_FOLDERS = frozenset({"builds"})
MANAGED_BY = {"app.kubernetes.io/managed-by": "benchfarm"}
SECRET_KEY_LENGTH = 40              # MinIO's longest secret key
# a namespace is a DNS label: nothing in it a policy's StringLike would take for a wildcard
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                  "s3:ListMultipartUploadParts")


def _checked(namespace: str) -> str:
    if not _NAMESPACE.fullmatch(namespace):
        raise ValueError(f"{namespace!r} is not a namespace name")
    return namespace


USER_PREFIX = "benchfarm-ns-"


def user_name(namespace: str) -> str:
    """The namespace's MinIO user (its access key)."""
    return f"{USER_PREFIX}{_checked(namespace)}"


def namespace_of(user: str) -> str | None:
    """The namespace whose user this is; None for any other user of the store."""
    ns = user.removeprefix(USER_PREFIX)
    return ns if ns != user and _NAMESPACE.fullmatch(ns) else None


def policy_name(namespace: str) -> str:
    """The name of the namespace's MinIO policy."""
    return f"benchfarm-ns-{_checked(namespace)}"


def namespace_policy(bucket: str, namespace: str) -> dict[str, Any]:
    """The IAM policy of a namespace's user: objects under `<bucket>/<namespace>/` (read, write,
    delete, multipart uploads), listing only with a prefix inside that folder, and the bucket's
    location (what an S3 client asks first). No other key, no other bucket, no admin action."""
    folder = f"{_checked(namespace)}/"
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "NamespaceObjects", "Effect": "Allow", "Action": list(OBJECT_ACTIONS),
         "Resource": [f"arn:aws:s3:::{bucket}/{folder}*"]},
        {"Sid": "NamespaceListing", "Effect": "Allow", "Action": ["s3:ListBucket"],
         "Resource": [f"arn:aws:s3:::{bucket}"],
         "Condition": {"StringLike": {"s3:prefix": [f"{folder}*"]}}},
        {"Sid": "BucketLocation", "Effect": "Allow", "Action": ["s3:GetBucketLocation"],
         "Resource": [f"arn:aws:s3:::{bucket}"]}]}


def new_secret_key() -> str:
    return secrets.token_hex(SECRET_KEY_LENGTH // 2)


def secret_data(store: StoreConfig) -> dict[str, str]:
    """What the Secret `benchfarm-store` holds (its stringData): where the store is as tenants
    reach it, the bucket, and the namespace's keys."""
    return {"endpoint": store.endpoint, "bucket": store.bucket,
            "secure": "true" if store.secure else "false",
            "accessKey": store.access_key, "secretKey": store.secret_key}


def config_from_secret(data: Mapping[str, bytes]) -> StoreConfig:
    """The store a Secret `benchfarm-store` names (its data, decoded); ValueError when a key is
    missing."""
    text = {k: v.decode(errors="replace") for k, v in data.items()}
    missing = [k for k in ("endpoint", "bucket", "accessKey", "secretKey") if not text.get(k)]
    if missing:
        raise ValueError(f"Secret {SECRET} lacks {', '.join(missing)}")
    return StoreConfig(endpoint=text["endpoint"], bucket=text["bucket"],
                       access_key=text["accessKey"], secret_key=text["secretKey"],
                       secure=text.get("secure", "false").lower() == "true")


def namespace_store(read_secret: Callable[[str, str], Mapping[str, bytes] | None],
                    namespace: str, *, attempts: int = 3) -> ArtifactStore:
    """The store as `namespace` may use it, with the credential its Secret `benchfarm-store`
    holds, read with `read_secret(namespace, name)` (the caller's kubeconfig: `Kube.secret_data`).
    InfraError NoStoreCredential when there is none yet or the caller may not read it."""
    try:
        data = read_secret(namespace, SECRET)
    except PermissionError as exc:
        raise InfraError(f"this kubeconfig may not read the Secret {SECRET} of namespace "
                         f"{namespace} (the namespace's store credential; the role "
                         "benchfarm-user grants it)", reason=LabFault.no_store_credential) from exc
    if data is None:
        raise InfraError(f"namespace {namespace} has no store credential yet (Secret {SECRET}): "
                         "the operator issues one for each namespace the LabPolicy names and "
                         "each with a BenchmarkRun, within a minute",
                         reason=LabFault.no_store_credential)
    try:
        return ArtifactStore(config_from_secret(data), attempts=attempts)
    except ValueError as exc:
        raise InfraError(f"namespace {namespace}: {exc}; delete it and the operator issues a "
                         "new one", reason=LabFault.no_store_credential) from exc


class StoreAdmin:
    """The store's users and policies, through the MinIO admin API with the lab's own (root)
    credential: only the operator holds one."""

    def __init__(self, config: StoreConfig) -> None:
        from minio import MinioAdmin
        self.config = config
        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=5, read=30),
                                   retries=urllib3.Retry(total=0))
        self.admin = MinioAdmin(endpoint=config.endpoint, secure=config.secure, http_client=http,
                                credentials=StaticProvider(config.access_key, config.secret_key))

    def _call(self, what: str, fn: Callable[[], str]) -> str:
        try:
            return fn()
        except MinioAdminException as exc:
            raise InfraError(f"artifact store admin: {what}: {exc}",
                             reason=LabFault.store_error) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Outage(f"artifact store unreachable at {self.config.endpoint} ({what}): {exc}",
                         party=Party.store, reason=LabFault.store_unreachable) from exc

    def users(self) -> dict[str, str]:
        """Every user of the store: its access key -> its policies' names (comma-separated)."""
        found = json.loads(self._call("list users", self.admin.user_list) or "{}")
        return {k: str((v or {}).get("policyName") or "") for k, v in found.items()}

    def issue(self, namespace: str, secret_key: str) -> StoreConfig:
        """The namespace's user with this secret key (made, or its key replaced: the old one
        stops working) and its policy (written again, attached): its credential, at the admin
        endpoint."""
        user, policy = user_name(namespace), policy_name(namespace)
        self._call(f"write policy {policy}", lambda: self.admin.policy_add(
            policy, policy=namespace_policy(self.config.bucket, namespace)))
        self._call(f"add user {user}", lambda: self.admin.user_add(user, secret_key))
        self._call(f"set the policy of {user}", lambda: self.admin.policy_set(policy, user=user))
        return replace(self.config, access_key=user, secret_key=secret_key)

    def remove(self, namespace: str) -> None:
        """The namespace's user gone (its policy stays, unattached)."""
        user = user_name(namespace)
        self._call(f"remove user {user}", lambda: self.admin.user_remove(user))
