"""Generates the CRD manifests in `crds/` from the pydantic models.

Run `make crds` after changing a model; a test regenerates them and fails on any difference from
the committed files, so the cluster's schema never drifts from what the operator validates.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from benchfarm.api import labgridusers, notifications
from benchfarm.api.base import GROUP, VERSION, Status
from benchfarm.api.bisections import (
    BISECTION_SPEC_RULES,
    BenchmarkBisectionSpec,
    BenchmarkBisectionStatus,
)
from benchfarm.api.boards import BoardSpec
from benchfarm.api.campaigns import (
    CAMPAIGN_SPEC_RULES,
    BenchmarkCampaignSpec,
    BenchmarkCampaignStatus,
)
from benchfarm.api.labpolicy import LABPOLICY_RULES, LabPolicySpec, LeasePolicy
from benchfarm.api.leases import BOARDLEASE_SPEC_RULES, BoardLeaseSpec, BoardLeaseStatus
from benchfarm.api.runs import (
    BENCHMARKRUN_SPEC_RULES,
    BenchmarkRunSpec,
    BenchmarkRunStatus,
    TestPlanSpec,
)

_DROP = {"title", "discriminator"}


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """Resolve $refs, fold Optional (anyOf with null) and drop keys Kubernetes rejects."""
    if isinstance(schema, list):
        return [_inline(s, defs) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = copy.deepcopy(defs[schema["$ref"].split("/")[-1]])
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        return _inline({**target, **extra}, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        if len(options) == 1:
            merged = {**_inline(options[0], defs), **{k: v for k, v in rest.items()}}
            if merged.get("default", 0) is None:
                del merged["default"]
            return _inline(merged, defs)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROP or key == "$defs":
            continue
        if key == "default" and value is None:
            continue
        if key == "properties":
            out[key] = {k: _inline(v, defs) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _inline(value, defs)
        elif key == "propertyNames":
            continue  # not allowed in CRD schemas; key lengths are bounded by maxProperties
        else:
            out[key] = _inline(value, defs) if isinstance(value, (dict, list)) else value
    if out.get("type") == "integer" and "format" not in out:
        out["format"] = "int64"
    for bound, flag in (("maximum", "exclusiveMaximum"), ("minimum", "exclusiveMinimum")):
        if isinstance(out.get(flag), (int, float)) and not isinstance(out.get(flag), bool):
            out[bound] = out.pop(flag)   # OpenAPI v3.0 form: a bound plus a boolean flag
            out[flag] = True
    if "properties" in out:
        out.pop("additionalProperties", None)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("type") == "object" and "additionalProperties" in out and "properties" not in out:
        if "maxItems" in out:
            out["maxProperties"] = out.pop("maxItems")
    if out.get("type") == "object" and "maxLength" in out:  # dict max_length -> maxProperties
        out["maxProperties"] = out.pop("maxLength")
    return out


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(mode="validation")
    inlined: dict[str, Any] = _inline(raw, raw.get("$defs", {}))
    return inlined


def _described(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {**schema, "description": description}


_CONDITIONS = _described({
    "type": "array", "maxItems": 16, "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
    "items": {"type": "object", "required": ["type", "status"], "properties": {
        "type": _described({"type": "string", "maxLength": 64},
                           "The condition: Succeeded, Regressed (runs, campaigns), Granted "
                           "(leases), DirectLock (boards), Ready and Delivered (notifications)."),
        "status": _described({"type": "string", "enum": ["True", "False", "Unknown"]},
                             "True, False or Unknown (a run's Succeeded is Unknown while it is "
                             "queued or running)."),
        "reason": _described({"type": "string", "maxLength": 128},
                             "A CamelCase reason (see Metrics and event reasons)."),
        "message": _described({"type": "string", "maxLength": 4096},
                              "What happened, for people; passed through benchfarm's redaction "
                              "(no host paths, no internal addresses)."),
        "lastTransitionTime": _described({"type": "string", "format": "date-time"},
                                         "When the condition last changed status."),
        "observedGeneration": _described({"type": "integer", "format": "int64"},
                                         "The object's metadata.generation the condition was "
                                         "computed for."),
    }},
}, "The resource's conditions (Kubernetes' form), one per type.")


def _status(extra: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"conditions": _CONDITIONS, **extra}}


def status_schema(model: type[Status]) -> dict[str, Any]:
    """A kind's status schema from its model: the fields the model describes (its
    `Field(description=...)`: what kubectl prints and people read), typed as the model reads
    them, with no default (the API server would write it into every status), and the
    conditions in Kubernetes' form; the rest of the status is preserved as written."""
    properties = schema_of(model).get("properties", {})
    return _status({name: {k: v for k, v in properties[name].items() if k != "default"}
                    for name, field in model.model_fields.items()
                    if field.description and name != "conditions"})


def crd(kind: str, plural: str, short: list[str], scope: str, spec: dict[str, Any],
        status: dict[str, Any] | None, columns: list[dict[str, Any]],
        rules: list[dict[str, str]] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"spec": spec}
    if status is not None:
        props["status"] = status
    root: dict[str, Any] = {"type": "object", "properties": props,
                            **({"required": ["spec"]} if kind != "Board" else {})}
    if rules:   # on the whole object: the only place CEL sees metadata.name
        root["x-kubernetes-validations"] = rules
    version: dict[str, Any] = {
        "name": VERSION, "served": True, "storage": True,
        "schema": {"openAPIV3Schema": root},
        "additionalPrinterColumns": columns,
    }
    if status is not None:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {"group": GROUP, "scope": scope,
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                           "shortNames": short, "categories": ["benchfarm"],
                           "listKind": f"{kind}List"},
                 "versions": [version]},
    }


def all_crds() -> dict[str, dict[str, Any]]:
    run_spec = schema_of(BenchmarkRunSpec)
    run_spec["x-kubernetes-validations"] = BENCHMARKRUN_SPEC_RULES
    campaign_spec = schema_of(BenchmarkCampaignSpec)
    campaign_spec["x-kubernetes-validations"] = CAMPAIGN_SPEC_RULES
    bisection_spec = schema_of(BenchmarkBisectionSpec)
    bisection_spec["x-kubernetes-validations"] = BISECTION_SPEC_RULES
    age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    lease_spec = schema_of(BoardLeaseSpec)
    lease_spec["x-kubernetes-validations"] = BOARDLEASE_SPEC_RULES
    notification_spec = schema_of(notifications.NotificationSpec)
    notification_spec["x-kubernetes-validations"] = notifications.NOTIFICATION_SPEC_RULES
    return {
        "benchmarkruns": crd(
            "BenchmarkRun", "benchmarkruns", ["br"], "Namespaced", run_spec,
            status_schema(BenchmarkRunStatus),
            [{"name": "Succeeded", "type": "string",
              "jsonPath": '.status.conditions[?(@.type=="Succeeded")].status'},
             {"name": "Reason", "type": "string",
              "jsonPath": '.status.conditions[?(@.type=="Succeeded")].reason'},
             {"name": "Board", "type": "string", "jsonPath": ".status.board"},
             {"name": "Progress", "type": "string", "jsonPath": ".status.progress"},
             {"name": "Boot(s)", "type": "string", "jsonPath": ".status.bootSeconds"},
             {"name": "Queue", "type": "integer", "jsonPath": ".status.queuePosition",
              "priority": 1},
             age]),
        "benchmarkcampaigns": crd(
            "BenchmarkCampaign", "benchmarkcampaigns", ["bc"], "Namespaced", campaign_spec,
            status_schema(BenchmarkCampaignStatus),
            [{"name": "Release", "type": "string", "jsonPath": ".spec.release"},
             {"name": "Succeeded", "type": "string",
              "jsonPath": '.status.conditions[?(@.type=="Succeeded")].status'},
             {"name": "Reason", "type": "string",
              "jsonPath": '.status.conditions[?(@.type=="Succeeded")].reason'},
             {"name": "Done", "type": "string", "jsonPath": ".status.done"},
             {"name": "Running", "type": "integer", "jsonPath": ".status.running"},
             {"name": "Failed", "type": "integer", "jsonPath": ".status.failed"},
             {"name": "Regressed", "type": "string", "priority": 1,
              "jsonPath": '.status.conditions[?(@.type=="Regressed")].status'},
             age]),
        "benchmarkbisections": crd(
            "BenchmarkBisection", "benchmarkbisections", ["bb"], "Namespaced", bisection_spec,
            status_schema(BenchmarkBisectionStatus),
            [{"name": "Metric", "type": "string", "jsonPath": ".spec.metric", "priority": 1},
             {"name": "Succeeded", "type": "string",
              "jsonPath": '.status.conditions[?(@.type=="Succeeded")].status'},
             {"name": "Reason", "type": "string",
              "jsonPath": '.status.conditions[?(@.type=="Succeeded")].reason'},
             {"name": "First bad", "type": "string", "jsonPath": ".status.answer.firstBad"},
             {"name": "Board", "type": "string", "jsonPath": ".status.board"},
             {"name": "Pairs", "type": "integer", "jsonPath": ".status.pairs"},
             age]),
        "testplans": crd(
            "TestPlan", "testplans", ["tp"], "Cluster", schema_of(TestPlanSpec), None,
            [{"name": "Description", "type": "string", "jsonPath": ".spec.description"}, age]),
        "labpolicies": crd(
            "LabPolicy", "labpolicies", ["lp"], "Cluster", schema_of(LabPolicySpec), None, [age],
            rules=LABPOLICY_RULES),
        "boards": crd(
            "Board", "boards", ["bd"], "Cluster", schema_of(BoardSpec), _status({}),
            [{"name": "Type", "type": "string", "jsonPath": ".status.deviceType"},
             {"name": "State", "type": "string", "jsonPath": ".status.state"},
             {"name": "Run", "type": "string", "jsonPath": ".status.run"},
             {"name": "Failures", "type": "integer",
              "jsonPath": ".status.consecutiveInfraFailures", "priority": 1},
             age]),
        "boardleases": crd(
            "BoardLease", "boardleases", ["bl"], "Namespaced", lease_spec,
            status_schema(BoardLeaseStatus),
            [{"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
             {"name": "Position", "type": "integer", "jsonPath": ".status.queuePosition"},
             {"name": "Estimated Start", "type": "string", "jsonPath": ".status.estimatedStart"},
             {"name": "Place", "type": "string", "jsonPath": ".status.place"},
             {"name": "Expires", "type": "string", "jsonPath": ".status.expiresAt"},
             {"name": "User", "type": "string", "jsonPath": ".spec.user", "priority": 1},
             age]),
        "notifications": crd(
            "Notification", "notifications", ["bn"], "Namespaced", notification_spec,
            status_schema(notifications.NotificationStatus),
            [{"name": "Ready", "type": "string",
              "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
             {"name": "Delivered", "type": "string",
              "jsonPath": '.status.conditions[?(@.type=="Delivered")].status'},
             {"name": "Reason", "type": "string",
              "jsonPath": '.status.conditions[?(@.type=="Delivered")].reason'},
             {"name": "Sent", "type": "integer", "jsonPath": ".status.delivered"},
             {"name": "Pending", "type": "integer", "jsonPath": ".status.pending"},
             {"name": "Failed", "type": "integer", "jsonPath": ".status.failed",
              "priority": 1},
             age]),
    }


def lease_admission() -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (and its binding) that refuses, at apply, a BoardLease its
    namespace may not make or whose duration is over the LabPolicy's `leases.maxLeaseSeconds`
    for the namespace (an extension too). The LabPolicy `default` is its parameter; without one
    the operator refuses what the built-in defaults do not allow. Releasing is never refused."""
    default = LeasePolicy()
    name = f"boardleases.{GROUP}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LabPolicy"},
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [GROUP], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                "resources": ["boardleases"]}]},
            "variables": [
                {"name": "policies", "expression":
                    "(has(params.spec.namespaces) ? params.spec.namespaces.filter(n, "
                    "n.namespace == request.namespace).map(n, dyn(n)) : []) + "
                    "(has(params.spec.default) ? [dyn(params.spec.default)] : [])"},
                {"name": "leases", "expression":
                    "size(variables.policies) > 0 && has(variables.policies[0].leases) ? "
                    "[variables.policies[0].leases] : []"},
                {"name": "allowed", "expression":
                    "size(variables.leases) > 0 && has(variables.leases[0].allowed) ? "
                    f"variables.leases[0].allowed == true : {str(default.allowed).lower()}"},
                {"name": "maxSeconds", "expression":
                    "size(variables.leases) > 0 && has(variables.leases[0].maxLeaseSeconds) ? "
                    f"int(variables.leases[0].maxLeaseSeconds) : {default.maxLeaseSeconds}"},
                {"name": "seconds", "expression":
                    "duration(object.spec.duration).getSeconds()"},
            ],
            "validations": [
                {"expression": "request.operation != 'CREATE' || variables.allowed",
                 "messageExpression": "'namespace ' + request.namespace + ' may not lease "
                                      "boards: the LabPolicy default does not allow it "
                                      "(leases.allowed)'",
                 "reason": "Forbidden"},
                {"expression": "(request.operation == 'UPDATE' && "
                               "object.spec.duration == oldObject.spec.duration) || "
                               "variables.seconds <= variables.maxSeconds",
                 "messageExpression": "'duration ' + object.spec.duration + ' (' + "
                                      "string(variables.seconds) + ' s) is longer than "
                                      "namespace ' + request.namespace + ' may lease a board: "
                                      "at most ' + string(variables.maxSeconds) + ' s "
                                      "(LabPolicy default, leases.maxLeaseSeconds)'",
                 "reason": "Invalid"},
            ]}}
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "paramRef": {"name": "default", "parameterNotFoundAction": "Allow"}}}
    return [policy, binding]


def lease_user_admission() -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (and its binding) that binds a new BoardLease's `spec.user`
    to the person creating it (`api.labgridusers`): never a lab identity (`benchfarm/...`,
    `operator/...`), and its name part the creator's Kubernetes user name as labgrid spells it.
    Who may impersonate every user (a cluster admin) may name anyone's (`kubectl --as` would do
    the same), never the lab's. No parameter: it holds with or without a LabPolicy. The user
    is immutable, so only CREATE is checked (a lease made before this policy can still be
    released)."""
    name = f"boardlease-users.{GROUP}"
    hosts = ", ".join(f"'{h}'" for h in labgridusers.LAB_HOSTS)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [GROUP], "apiVersions": ["*"], "operations": ["CREATE"],
                "resources": ["boardleases"]}]},
            "variables": [
                {"name": "host", "expression": "object.spec.user.split('/')[0]"},
                {"name": "name", "expression": "object.spec.user.split('/')[1]"},
                {"name": "mine", "expression":
                    labgridusers.cel_labgrid_name("request.userInfo.username")},
                {"name": "impersonator", "expression":
                    "authorizer.group('').resource('users').check('impersonate').allowed()"},
            ],
            "validations": [
                {"expression": f"!(variables.host.lowerAscii() in [{hosts}])",
                 "messageExpression": '"spec.user " + object.spec.user + ": " + variables.host + '
                                      '"/... is the lab\'s own labgrid identity (its runs\', '
                                      'leases\' and health checks\'); use your own machine\'s '
                                      'name as the host"',
                 "reason": "Forbidden"},
                {"expression": "variables.impersonator || variables.mine.matches("
                               f"'{labgridusers.NAME_PATTERN}')",
                 "messageExpression": '"Kubernetes user " + request.userInfo.username + " has no '
                                      'labgrid name (letters, digits and . - _ '
                                      + " ".join(c for c, _ in labgridusers.ESCAPES[1:])
                                      + ' only, starting with a letter or digit): it cannot '
                                      'lease a board"',
                 "reason": "Forbidden"},
                {"expression": "variables.impersonator || variables.name == variables.mine",
                 "messageExpression": '"spec.user " + object.spec.user + ": a lease\'s labgrid '
                                      'user is its creator\'s own: <host>/" + variables.mine + '
                                      '" for Kubernetes user " + request.userInfo.username + '
                                      '" (benchfarm lease fills it in)"',
                 "reason": "Forbidden"},
            ]}}
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]}}
    return [policy, binding]


def render() -> dict[str, str]:
    head = "# Generated by `make crds` from operator/benchfarm/api; do not edit.\n"
    out = {f"{GROUP}_{name}.yaml": head + yaml.safe_dump(body, sort_keys=False, width=100)
           for name, body in all_crds().items()}
    out[f"{GROUP}_boardleases-admission.yaml"] = head + yaml.safe_dump_all(
        [*lease_admission(), *lease_user_admission()], sort_keys=False, width=100)
    return out


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "crds")
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (out / name).write_text(text)
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
