"""The fixtures in deploy/tests: each is a JSON-Patch-like change to one real file that breaks
one rule, and names that rule (`expect.rule`: a rule of this package, a checkov check ID, or a
schema) and, for this package's rules, a piece of its message (`expect.message`). The self-test
passes when the real files pass and every fixture is refused by the rule it names."""

from __future__ import annotations

import copy
import json
import pathlib
import tempfile
from typing import Any

import yaml

from . import TESTS_DIR, Finding
from .cfn import CfnLoader
from .generic import FRAMEWORKS, checkov


def pointer_parts(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"patch path {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def apply_patch(doc: Any, ops: list[dict]) -> None:
    """A small JSON Patch (add, replace, remove) over the loaded document."""
    for op in ops:
        parts = pointer_parts(op["path"])
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        kind = op["op"]
        if isinstance(parent, list):
            if kind == "add":
                if last == "-":
                    parent.append(op["value"])
                else:
                    parent.insert(int(last), op["value"])
            elif kind == "replace":
                parent[int(last)] = op["value"]
            elif kind == "remove":
                del parent[int(last)]
            else:
                raise ValueError(f"unknown patch op {kind!r}")
        else:
            if kind in ("replace", "remove") and last not in parent:
                raise KeyError(f"patch path {op['path']} does not exist")
            if kind in ("add", "replace"):
                parent[last] = op["value"]
            elif kind == "remove":
                del parent[last]
            else:
                raise ValueError(f"unknown patch op {kind!r}")


def write_for_checkov(
    root: pathlib.Path, stem: str, target: str, tpl: dict, kube: dict[str, list[dict]]
) -> pathlib.Path:
    """The fixture's patched file under root/<framework>/<fixture>/, for one checkov run over all."""
    area = target.split("/", 1)[0]
    folder = root / area / stem
    folder.mkdir(parents=True)
    if area == "aws":
        path = folder / "template.json"
        path.write_text(json.dumps(tpl, default=str, indent=1), encoding="utf-8")
    else:
        path = folder / target[len("k8s/") :]
        path.write_text(yaml.safe_dump_all(kube[target[len("k8s/") :]], sort_keys=False), encoding="utf-8")
    return path.resolve()


def self_test(template: dict, k8s: dict[str, list[dict]], run) -> int:
    """`run(template, k8s)` is the in-process lint (this package's rules and the schemas)."""
    base = run(template, k8s)
    if base:
        print("self-test: the real files must pass first:")
        for e in base:
            print(f"  FAIL: {e}")
        return 1
    fixtures = sorted(TESTS_DIR.glob("*.yaml"))
    if not fixtures:
        print(f"self-test: no fixtures in {TESTS_DIR}")
        return 1
    passed = failed = 0
    results: dict[str, tuple[dict, list[Finding], pathlib.Path | None]] = {}
    with tempfile.TemporaryDirectory(prefix="deploy-selftest-") as tmp:
        root = pathlib.Path(tmp)
        for path in fixtures:
            with path.open(encoding="utf-8") as f:
                fx = yaml.load(f, Loader=CfnLoader)  # noqa: S506 - a SafeLoader subclass
            expect = fx.get("expect")
            if not isinstance(expect, dict) or not expect.get("rule"):
                print(f"  FAIL {path.name}: `expect` must name the rule (expect: {{rule: ..., message: ...}})")
                failed += 1
                continue
            tpl, kube = copy.deepcopy(template), copy.deepcopy(k8s)
            target = fx["file"]
            try:
                if target == "aws/template.yaml":
                    apply_patch(tpl, fx["patch"])
                elif target.startswith("k8s/") and target[4:] in kube:
                    apply_patch(kube[target[4:]][fx.get("doc", 0)], fx["patch"])
                else:
                    raise KeyError(f"unknown file {target}")
            except (KeyError, IndexError, ValueError, TypeError) as e:
                print(f"  FAIL {path.name}: the patch no longer applies to {target} ({e}); update the fixture")
                failed += 1
                continue
            generic = None
            if str(expect["rule"]).startswith("CKV"):
                generic = write_for_checkov(root, path.stem, target, tpl, kube)
            results[path.name] = (expect, run(tpl, kube), generic)
        by_file: dict[pathlib.Path, list[Finding]] = {}
        for area, framework in FRAMEWORKS.items():
            if (root / area).is_dir():
                by_file.update(checkov(root / area, framework))
    for name, (expect, findings, generic) in results.items():
        if generic is not None:
            findings = findings + by_file.get(generic, [])
        hits = [f for f in findings if f.rule == expect["rule"] and str(expect.get("message", "")) in f.message]
        if hits:
            print(f"  ok   {name}: {hits[0]}")
            passed += 1
        else:
            want = f"[{expect['rule']}]" + (f" {expect['message']!r}" if expect.get("message") else "")
            got = "; ".join(str(f) for f in findings) or "none"
            print(f"  FAIL {name}: expected {want}, got {got}")
            failed += 1
    print(f"self-test: {passed} of {passed + failed} bad fixtures refused by the rule they name")
    return 1 if failed else 0
