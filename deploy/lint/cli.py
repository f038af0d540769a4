"""`python deploy/check.py [--self-test]`: this package's rules and the schema validation on
the real files; with --self-test, also every fixture (checkov included)."""

from __future__ import annotations

import argparse
import pathlib

from . import K8S_DIR, TEMPLATE, Finding
from .cfn import load_k8s, load_template
from .k8s import check_k8s
from .schemas import check_schemas
from .selftest import self_test
from .template import check_template, lambda_assemble_max_bytes


def run_checks(template: dict, k8s: dict[str, list[dict]]) -> list[Finding]:
    return check_template(template) + check_k8s(k8s, lambda_assemble_max_bytes(template)) + check_schemas(k8s)


def main() -> int:
    ap = argparse.ArgumentParser(description="tilegate's own deployment rules (deploy/lint)")
    ap.add_argument("--template", type=pathlib.Path, default=TEMPLATE)
    ap.add_argument("--k8s", type=pathlib.Path, default=K8S_DIR)
    ap.add_argument("--self-test", action="store_true", help="also prove that every fixture in tests/ is refused")
    args = ap.parse_args()

    template = load_template(args.template)
    k8s = load_k8s(args.k8s)
    if args.self_test:
        return self_test(template, k8s, run_checks)
    errors = run_checks(template, k8s)
    for e in errors:
        print(f"FAIL: {e}")
    if errors:
        print(f"check: {len(errors)} problem(s)")
        return 1
    print(f"check: ok ({args.template.name} and {len(k8s)} Kubernetes manifests, schemas included)")
    return 0
