"""`iam-*` rules: each function's role grants exactly what grants.yaml lists for that function
(in any spelling of the resource), permissions come from nowhere else, each function has a role
of its own, and the reconcile schedule's role may invoke that function alone.

Wildcards, `Resource: "*"` and admin-like policies are checkov's (CKV_AWS_62, 63, 107-111);
here a wildcard is simply a grant that is not on the list."""

from __future__ import annotations

import re
from typing import Any

from . import data, facts
from .cfn import Template, as_list, rule, show

# (actions, the equivalent spellings of the one resource they are granted on, what it is)
Grant = tuple[list[str], list[str], str]

IAM_RESOURCE_TYPES = {
    "AWS::IAM::Policy",
    "AWS::IAM::ManagedPolicy",
    "AWS::IAM::RolePolicy",
    "AWS::IAM::User",
    "AWS::IAM::Group",
    "AWS::IAM::UserPolicy",
    "AWS::IAM::GroupPolicy",
}
PARTITION = "${AWS::Partition}"
LAMBDA_PRINCIPAL = "lambda.amazonaws.com"


def resource(on: str, found: dict[str, Any], log_group: Grant | None) -> tuple[list[str], str] | None:
    """The spellings of the resource grants.yaml names `on`, and what to call it; None when the
    template lacks it (another rule says so)."""
    bucket = found.get("bucket")
    tables: dict[str, str | None] = found["tables"]
    if on == "output-prefix":
        return ([f"arn:{PARTITION}:s3:::${{{bucket}}}/${{OutputPrefix}}/*"], "output prefix") if bucket else None
    if on == "output-bucket":
        return ([f"${{{bucket}.Arn}}", f"arn:{PARTITION}:s3:::${{{bucket}}}"], "output bucket") if bucket else None
    if on == "source-objects":
        return [f"arn:{PARTITION}:s3:::${{SourceBucketName}}/*"], "source bucket"
    if on.startswith("table:"):
        table = tables.get(on[len("table:") :])
        return ([f"${{{table}.Arn}}"], f"{on[len('table:') :]} table") if table else None
    if on.startswith("index:"):
        suffix, _, index = on[len("index:") :].partition("/")
        if index not in facts()["tables"].get(suffix, {}).get("indexes", {}):
            raise ValueError(f"grants.yaml: {on}: the code's {suffix} table has no index {index} (deploy/facts.json)")
        table = tables.get(suffix)
        return ([f"${{{table}.Arn}}/index/{index}"], f"{suffix} table's {index} index") if table else None
    if on.startswith("queue:"):
        queue = found.get(on)
        label = {
            "queue:work": "work queue",
            "queue:dlq": "dead-letter queue",
            "queue:arrivals": "arrivals queue",
            "queue:arrivals-dlq": "arrivals dead-letter queue",
        }[on]
        return ([f"${{{queue}.Arn}}"], label) if queue else None
    if on == "topic":
        return ([f"${{{found['topic']}}}"], "announcements topic") if found.get("topic") else None
    if on == "log-group":
        return (log_group[1], log_group[2]) if log_group else None
    raise ValueError(f"grants.yaml: unknown resource {on!r}")


def grants_of(function: str, found: dict[str, Any], log_group: Grant | None) -> list[Grant]:
    """grants.yaml's list for one function, spelled for this template."""
    out: list[Grant] = []
    for entry in data("grants.yaml")["functions"][function]:
        ons = [f"table:{s}" for s in facts()["tables"]] if entry["resource"] == "table:*" else [entry["resource"]]
        for on in ons:
            spelled = resource(on, found, log_group)
            if spelled:
                out.append((list(entry["actions"]), *spelled))
    return out


def function_log_group(t: Template, function: str, fprops: dict) -> Grant | None:
    """The function's log group, as the resource of its log grants (in any spelling)."""
    fname = fprops.get("FunctionName")
    lg_name = "/aws/lambda/" + (t.canon(fname) or "") if fname is not None else "/aws/lambda/${" + function + "}"
    log_groups = [k for k in t.of_type("AWS::Logs::LogGroup") if t.canon(t.props(k).get("LogGroupName")) == lg_name]
    if len(log_groups) != 1:
        t.fail(f"log group: expected exactly one AWS::Logs::LogGroup named {lg_name}, found {len(log_groups)}")
        return None
    lg_arn = f"arn:{PARTITION}:logs:${{AWS::Region}}:${{AWS::AccountId}}:log-group:{lg_name}"
    return ([], [f"${{{log_groups[0]}.Arn}}", lg_arn + ":*", lg_arn + ":log-stream:*"], "log group")


def role_of(t: Template, ref: Any) -> str | None:
    """The logical ID of the template's AWS::IAM::Role that `!GetAtt ROLE.Arn` names."""
    role = None
    if isinstance(ref, dict) and "Fn::GetAtt" in ref:
        parts = ref["Fn::GetAtt"]
        parts = parts.split(".", 1) if isinstance(parts, str) else parts
        if isinstance(parts, list) and len(parts) == 2 and parts[1] == "Arn":
            role = parts[0]
    if role is None or t.resources.get(role, {}).get("Type") != "AWS::IAM::Role":
        return None
    return role


@rule("iam-trust")
def check_trust(t: Template, role: str, principal_service: str) -> None:
    """The role may be assumed by that one service, with sts:AssumeRole."""
    rprops = t.props(role)
    if rprops.get("ManagedPolicyArns"):
        t.fail(f"role {role}: managed policies are not allowed: {rprops['ManagedPolicyArns']}", rule="iam-sources")
    trust = [
        st
        for st in as_list((rprops.get("AssumeRolePolicyDocument") or {}).get("Statement"))
        if st.get("Effect") == "Allow"
    ]
    if not trust:
        t.fail(f"role {role}: trust policy does not let {principal_service} assume it")
    for st in trust:
        principal = st.get("Principal") or {}
        if set(principal) != {"Service"} or as_list(principal.get("Service")) != [principal_service]:
            t.fail(f"role {role}: trust policy principal must be the service {principal_service}, found {principal}")
        if as_list(st.get("Action")) != ["sts:AssumeRole"]:
            t.fail(f"role {role}: trust policy action must be sts:AssumeRole, found {st.get('Action')}")


@rule("iam-grants")
def check_role(t: Template, function: str, fprops: dict, grants: list[Grant], label: str) -> str | None:
    """The function's role grants exactly `grants`; answers its logical ID."""
    if "Policies" in fprops:
        t.fail(
            f"function {function}: SAM Policies property is not allowed (grants go in the explicit role)",
            rule="iam-sources",
        )
    role = role_of(t, fprops.get("Role"))
    if role is None:
        t.fail(
            f"function {function}: Role must be !GetAtt <an AWS::IAM::Role in this template>.Arn", rule="iam-sources"
        )
        return None
    check_trust(t, role, LAMBDA_PRINCIPAL)

    # The allowed (action, resource) pairs in canonical spelling; of each grant one spelling is
    # required, its alternatives being equivalent spellings.
    allowed: set[tuple[str, str]] = set()
    required: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for actions, resources, why in grants:
        for a in actions:
            for r in resources:
                allowed.add((a.lower(), r))
                required.setdefault((a, why), set()).add((a.lower(), r))

    granted: set[tuple[str, str]] = set()
    for _, where, st in statements(t, role):
        actions, resources = as_list(st.get("Action")), as_list(st.get("Resource"))
        if not actions or not resources:
            t.fail(f"{where}: Action and Resource are required")
        for a in actions:
            for r in resources:
                cr = t.canon(r)
                if not isinstance(a, str) or cr is None:
                    t.fail(f"{where}: grant of {a!r} on {show(r)} is not a form this check can read")
                elif (a.lower(), cr) not in allowed:
                    t.fail(f"{where}: grant of {a} on {show(r)} is not allowed")
                else:
                    granted.add((a.lower(), cr))
    for (a, why), spellings in sorted(required.items()):
        if not spellings & granted:
            t.fail(f"role {role}: missing grant of {a} on the {why} (the {label} function needs it)")
    return role


def statements(t: Template, role: str):
    """The Allow statements of the role's inline policies: (policy, where, statement)."""
    for pol in as_list(t.props(role).get("Policies")):
        pname = pol.get("PolicyName", "?")
        pdoc = pol.get("PolicyDocument")
        if not isinstance(pdoc, dict):
            t.fail(f"role {role}, policy {pname}: PolicyDocument must be an inline mapping", rule="iam-grants")
            continue
        for i, st in enumerate(as_list(pdoc.get("Statement"))):
            where = f"role {role}, policy {pname}, statement {st.get('Sid', i)}"
            # A grant by exclusion cannot be compared with a list of grants.
            for key in ("NotAction", "NotResource", "NotPrincipal"):
                if key in st:
                    t.fail(f"{where}: {key} is not allowed", rule="iam-grants")
            effect = st.get("Effect")
            if effect == "Deny":
                continue
            if effect != "Allow":
                t.fail(f"{where}: Effect must be Allow or Deny, found {effect!r}", rule="iam-grants")
                continue
            yield pname, where, st


@rule("iam-sources")
def check_permission_sources(t: Template) -> None:
    """Where permissions may come from: each function's one inline-policy role, nothing else."""
    globals_fn = ((t.doc.get("Globals") or {}).get("Function")) or {}
    for key in ("Policies", "Role"):
        if key in globals_fn:
            t.fail(f"Globals.Function.{key} is not allowed")
    for logical, res in t.resources.items():
        rtype = res.get("Type") if isinstance(res, dict) else None
        if rtype in IAM_RESOURCE_TYPES:
            t.fail(f"resource {logical}: {rtype} is not allowed (only the functions' roles' inline policies grant)")


@rule("schedule")
def check_reconcile_schedule(t: Template, function: str) -> str | None:
    """One enabled EventBridge Scheduler schedule invokes the reconcile function, through a role
    that only the scheduler may assume and that may invoke only that function. Answers the
    role's logical ID."""
    sched_data = data("grants.yaml")["schedule"]
    want = "${" + function + ".Arn}"
    schedules = [
        k for k in t.of_type("AWS::Scheduler::Schedule") if t.canon((t.props(k).get("Target") or {}).get("Arn")) == want
    ]
    if len(schedules) != 1:
        t.fail(
            f"function {function}: expected exactly one AWS::Scheduler::Schedule whose Target is !GetAtt {function}.Arn "
            f"(nothing else runs the reconciler), found {len(schedules)}"
        )
        return None
    sched = schedules[0]
    sp = t.props(sched)
    where = f"schedule {sched}"
    expr = str(sp.get("ScheduleExpression", ""))
    if not re.fullmatch(r"(rate\(\d+ (minute|minutes|hour|hours)\)|cron\(.+\))", expr):
        t.fail(f"{where}: ScheduleExpression must be a rate(...) or cron(...) expression, found {expr!r}")
    if sp.get("State", "ENABLED") != "ENABLED":
        t.fail(f"{where}: State must be ENABLED, found {sp.get('State')!r}")
    role = role_of(t, (sp.get("Target") or {}).get("RoleArn"))
    if role is None:
        t.fail(f"{where}: Target.RoleArn must be !GetAtt <an AWS::IAM::Role in this template>.Arn")
        return None
    check_trust(t, role, sched_data["principal"])
    invoke = [a.lower() for a in sched_data["actions"]]
    granted = []
    for _, swhere, st in statements(t, role):
        for a in as_list(st.get("Action")):
            for r in as_list(st.get("Resource")):
                if str(a).lower() not in invoke or t.canon(r) != want:
                    t.fail(
                        f"{swhere}: grant of {a} on {show(r)} is not allowed (only {sched_data['actions'][0]} on {function})",
                        rule="iam-grants",
                    )
                else:
                    granted.append(a)
    if not granted:
        t.fail(
            f"role {role}: missing grant of {sched_data['actions'][0]} on {function} (the schedule invokes it)",
            rule="iam-grants",
        )
    return role
