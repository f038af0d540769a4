"""Reading the deployment files: CloudFormation's short-form tags, a template's resources by
type, and one canonical spelling of each resource expression (so that `!GetAtt Q.Arn`,
`!Sub "${Q.Arn}"` and a `Fn::Join` of the same parts compare equal)."""

from __future__ import annotations

import functools
import pathlib
import re
from typing import Any, Callable, TypeVar

import yaml

from . import Finding

F = TypeVar("F", bound=Callable[..., Any])


class CfnLoader(yaml.SafeLoader):
    """SafeLoader that reads CloudFormation short-form tags into their long form."""


def _cfn_tag(loader: CfnLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "Condition":
        return {"Condition": value}
    if suffix == "GetAtt" and isinstance(value, str):
        logical, _, attr = value.partition(".")
        return {"Fn::GetAtt": [logical, attr]}
    return {f"Fn::{suffix}": value}


CfnLoader.add_multi_constructor("!", _cfn_tag)


def load_template(path: pathlib.Path) -> dict:
    with path.open(encoding="utf-8") as f:
        return yaml.load(f, Loader=CfnLoader)  # noqa: S506 - a SafeLoader subclass


def load_k8s(directory: pathlib.Path) -> dict[str, list[dict]]:
    """Every manifest in the directory (not kustomization.yaml), by file name."""
    out: dict[str, list[dict]] = {}
    for path in sorted(directory.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        with path.open(encoding="utf-8") as f:
            out[path.name] = [d for d in yaml.safe_load_all(f) if d is not None]
    return out


def as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def show(value: Any) -> str:
    """A CloudFormation value in the short form a reader knows from the template."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, inner),) = value.items()
        if key == "Ref":
            return f"!Ref {inner}"
        if key == "Fn::GetAtt":
            return "!GetAtt " + (".".join(inner) if isinstance(inner, list) else str(inner))
        if key == "Fn::Sub" and isinstance(inner, str):
            return f'!Sub "{inner}"'
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


class Template:
    """A loaded template and the findings of the rules run on it."""

    def __init__(self, doc: dict) -> None:
        self.doc = doc if isinstance(doc, dict) else {}
        self.resources: dict[str, dict] = self.doc.get("Resources") or {}
        self.parameters: dict[str, dict] = self.doc.get("Parameters") or {}
        self.errors: list[Finding] = []
        self.rule = "resources"  # the rule of the check running now (see `rule`)

    def fail(self, msg: str, rule: str | None = None) -> None:
        self.errors.append(Finding(rule or self.rule, msg))

    def of_type(self, rtype: str) -> list[str]:
        return [k for k, r in self.resources.items() if isinstance(r, dict) and r.get("Type") == rtype]

    def props(self, logical: str) -> dict:
        return self.resources.get(logical, {}).get("Properties") or {}

    # Canonical spelling of a resource expression: "${X.Arn}", "${X}" or the Sub string.
    def canon(self, value: Any) -> str | None:
        if isinstance(value, str):
            return value
        if not isinstance(value, dict) or len(value) != 1:
            return None
        ((key, inner),) = value.items()
        if key == "Ref" and isinstance(inner, str):
            return "${" + inner + "}"
        if key == "Fn::GetAtt":
            parts = inner.split(".", 1) if isinstance(inner, str) else inner
            if isinstance(parts, list) and len(parts) == 2 and all(isinstance(p, str) for p in parts):
                return "${" + parts[0] + "." + parts[1] + "}"
            return None
        if key == "Fn::Sub":
            if isinstance(inner, list):
                if len(inner) == 2 and not inner[1] and isinstance(inner[0], str):
                    inner = inner[0]
                else:
                    return None
            if not isinstance(inner, str):
                return None
            # ${Bucket.Arn} is the same ARN as arn:${AWS::Partition}:s3:::${Bucket}.
            for bucket in self.of_type("AWS::S3::Bucket"):
                inner = inner.replace("${" + bucket + ".Arn}", "arn:${AWS::Partition}:s3:::${" + bucket + "}")
            return inner
        if key == "Fn::Join" and isinstance(inner, list) and len(inner) == 2:
            sep, parts = inner
            if not isinstance(sep, str) or not isinstance(parts, list):
                return None
            canon_parts = [self.canon(p) for p in parts]
            if any(p is None for p in canon_parts):
                return None
            return sep.join(canon_parts)  # type: ignore[arg-type]
        return None

    def param_default(self, name: str) -> Any:
        return (self.parameters.get(name) or {}).get("Default")

    def param_values(self, name: str) -> list[int]:
        """Default and allowed values of a numeric parameter (the values a deployment may use)."""
        p = self.parameters.get(name) or {}
        values = [p.get("Default")] + list(p.get("AllowedValues") or [])
        if "MaxValue" in p:
            values.append(p["MaxValue"])
        out = []
        for v in values:
            try:
                out.append(int(v))
            except (TypeError, ValueError):
                continue
        return sorted(set(out))


def rule(name: str) -> Callable[[F], F]:
    """A check whose `t.fail(msg)` findings are the rule `name`'s (another may be named per call)."""

    def wrap(check: F) -> F:
        @functools.wraps(check)
        def run(t: Template, *args: Any, **kwargs: Any) -> Any:
            outer, t.rule = t.rule, name
            try:
                return check(t, *args, **kwargs)
            finally:
                t.rule = outer

        return run  # type: ignore[return-value]

    return wrap


def find_one(t: Template, rtype: str, prop: str, expected: Any, what: str) -> str | None:
    """The one resource of `rtype` whose `prop` equals `expected`."""
    want = t.canon(expected)
    found = [k for k in t.of_type(rtype) if t.canon(t.props(k).get(prop)) == want]
    if len(found) != 1:
        t.fail(f"{what}: expected exactly one {rtype} with {prop} {show(expected)}, found {len(found)}")
        return None
    return found[0]


def sub_parts(value: Any) -> tuple[str, dict] | None:
    """The string and variables of an !Sub (either form)."""
    if not isinstance(value, dict) or set(value) != {"Fn::Sub"}:
        return None
    inner = value["Fn::Sub"]
    if isinstance(inner, str):
        return inner, {}
    if isinstance(inner, list) and len(inner) == 2 and isinstance(inner[0], str) and isinstance(inner[1], dict):
        return inner[0], inner[1]
    return None


def resolve_number(t: Template, value: Any, timeout: int) -> int | None:
    """A numeric property for a given FunctionTimeout: a literal, !Ref to a parameter, or
    !FindInMap [Map, !Ref FunctionTimeout, Key]."""
    if isinstance(value, (int, str)) and str(value).isdigit():
        return int(value)
    if isinstance(value, dict) and "Ref" in value:
        if value["Ref"] == "FunctionTimeout":
            return timeout
        d = t.param_default(value["Ref"])
        return int(d) if d is not None and str(d).isdigit() else None
    if isinstance(value, dict) and "Fn::FindInMap" in value:
        m, k1, k2 = value["Fn::FindInMap"]
        if k1 == {"Ref": "FunctionTimeout"}:
            k1 = str(timeout)
        try:
            return int(t.doc["Mappings"][m][str(k1)][k2])
        except (KeyError, TypeError, ValueError):
            return None
    return None


def duration_seconds(value: Any) -> float | None:
    """A duration as the CLI's flags take it (`25s`, `2m`, `1h`, `1d`, or plain seconds)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?", str(value).strip())
    if not m:
        return None
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2) or "s"]
    return float(m.group(1)) * scale
