"""`k8s-schema` and `keda-schema`: every manifest against the schema of its kind — the
Kubernetes kinds against kubernetes-validate's (strict: an unknown field is an error, as with
`kubectl apply --validate=strict`), KEDA's kinds against the openAPIV3Schema of KEDA's own CRDs,
vendored in keda/ (see keda/README.md), made strict the same way. A kind with no schema is an
error: a mistyped apiVersion would otherwise pass unchecked."""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from . import PACKAGE, Finding

KEDA_CRDS = PACKAGE / "keda"


def strict(schema: Any) -> Any:
    """The schema with every object that declares its properties closed to other fields (the
    API server's strict field validation); maps and preserved-unknown objects stay open."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def keda_schemas() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """(apiVersion, kind) -> a validator, for every version of every vendored CRD."""
    out = {}
    for path in sorted(KEDA_CRDS.glob("*.yaml")):
        with path.open(encoding="utf-8") as f:
            crd = yaml.safe_load(f)
        spec = crd["spec"]
        for version in spec["versions"]:
            schema = strict(version["schema"]["openAPIV3Schema"])
            # The API server checks metadata itself; the CRD leaves it a bare object.
            schema["properties"]["metadata"] = {"type": "object"}
            out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = jsonschema.Draft7Validator(schema)
    return out


def where(fname: str, obj: dict) -> str:
    return f"{fname}: {obj.get('kind')} {(obj.get('metadata') or {}).get('name')}"


def error_text(e: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in e.absolute_path) or "(top)"
    return f"{path}: {e.message}"


def check_schemas(files: dict[str, list[dict]], k8s_version: str | None = None) -> list[Finding]:
    version = k8s_version or kubernetes_validate.latest_version()
    out: list[Finding] = []
    for fname, docs in files.items():
        for obj in docs:
            if not isinstance(obj, dict):
                out.append(Finding("k8s-schema", f"{fname}: a document that is not an object"))
                continue
            out += check_object(fname, json.dumps(obj, sort_keys=True, default=str), version)
    return out


@functools.cache
def check_object(fname: str, text: str, version: str) -> tuple[Finding, ...]:
    """One object's findings, by its JSON text (the self-test validates the same objects often)."""
    obj = json.loads(text)
    api, kind = str(obj.get("apiVersion")), str(obj.get("kind"))
    if api.startswith("keda.sh/"):
        validator = keda_schemas().get((api, kind))
        if validator is None:
            return (Finding("keda-schema", f"{where(fname, obj)}: no KEDA CRD schema for {kind} {api}"),)
        errors = sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
        return tuple(Finding("keda-schema", f"{where(fname, obj)}: {error_text(e)}") for e in errors)
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return (Finding("k8s-schema", f"{where(fname, obj)}: no schema for {kind} {api} (Kubernetes {version})"),)
    except kubernetes_validate.ValidationError as e:
        return (Finding("k8s-schema", f"{where(fname, obj)}: {error_text(e)}"),)
    return ()
