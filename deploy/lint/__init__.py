"""tilegate's own deployment rules: what the generic linters (cfn-lint, checkov, the Kubernetes
and KEDA schemas) cannot know about tilegate.

* `iam` — each function's role grants exactly what `grants.yaml` lists for it, no more.
* `template` — the SAM template's wiring: the resources the code names (tables and queues from
  `deploy/facts.json`, generated from the Rust code), queues to their functions and
  dead-letter queues, the arrivals rule, the functions' environments, the job API's routes.
* `k8s` — the manifests' cross-references: each Deployment's command, service account,
  ConfigMap and NetworkPolicy; the worker's queue is the one its KEDA scaler watches.
* `schemas` — the manifests against the Kubernetes schemas (kubernetes-validate) and KEDA's
  CRD schemas (vendored in `keda/`).
* `generic` — checkov, run over the real files and over every fixture at once.
* `selftest` — every fixture in deploy/tests must be refused by the rule it names.

Every finding names its rule: a rule of this package (`iam-grants`, `k8s-serve`, ...), a
checkov check (`CKV_K8S_22`) or a schema (`k8s-schema`, `keda-schema`).
"""

from __future__ import annotations

import functools
import json
import pathlib
from typing import Any, NamedTuple

import yaml

DEPLOY = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = pathlib.Path(__file__).resolve().parent
TEMPLATE = DEPLOY / "aws" / "template.yaml"
K8S_DIR = DEPLOY / "k8s"
TESTS_DIR = DEPLOY / "tests"
FACTS = DEPLOY / "facts.json"


class Finding(NamedTuple):
    """One refusal: the rule (or checkov check, or schema) and what it says."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


@functools.cache
def facts() -> dict[str, Any]:
    """What the Rust code defines and the deployment must match (generated, see deploy/facts.json).
    Read once; not to be modified."""
    with FACTS.open(encoding="utf-8") as f:
        return json.load(f)


@functools.cache
def data(name: str) -> Any:
    """One of the package's data files (grants.yaml, environment.yaml). Read once; not to be
    modified."""
    with (PACKAGE / name).open(encoding="utf-8") as f:
        return yaml.safe_load(f)
