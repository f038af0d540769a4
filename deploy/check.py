#!/usr/bin/env python3
"""Policy check of tilegate's deployment files (run by .ci/deploy-lint).

Checks what the generic linters cannot know about tilegate:

* aws/template.yaml — each function's own role (the worker's, the ingest function's, the serve
  function's) grants exactly the (action, resource) pairs that function needs and nothing else
  (no wildcard action, no `Resource: "*"`, no managed policy, no SAM `Policies`, no grant on a
  wider or different resource); the queues, event sources and tables have the names, redrive,
  visibility and key schemas the code depends on; the EventBridge rule brings only the source
  bucket's new objects to the arrivals queue, whose policy admits that rule alone; the functions'
  environments (the ingest configuration parsed as the JSON the code reads); the job API: one
  HTTP API whose JWT authorizer (the issuer and audience the serve function also checks) guards
  every route but the three public ones, answered by the serve function alone, throttled, with
  a request timeout inside the function's; the reconcile function (TILEGATE_MODE=reconcile,
  announcing, its own role with the by-open index and no delete) and the one EventBridge
  Scheduler schedule that invokes it through a role that may invoke nothing else; the jobs
  table's by-created, by-tenant and by-open indexes.
* k8s/*.yaml — the worker's probes, its shutdown grace against the pod's termination grace, its
  security context, its metrics endpoint (bound to the pod IP, reached only from one named
  namespace through the NetworkPolicy), the ingest Deployment (hardened the same, its own
  service account, no port and no probe on one, no ingress, the arrivals queue beside the work
  queue), the reconcile CronJob (hardened the same, `reconcile-jobs --once` one run at a time with a
  deadline, no port and no probe, no ingress, announcing, and memory for more than the jobs the
  Lambda functions leave `assembling`), the job API's Deployment (hardened the same, its own
  service account, at least two replicas, listening beyond the loopback, probed on /healthz at
  its port, its JWT settings all or none), its Service (ClusterIP, to that port) and
  NetworkPolicy (ingress to that port alone), and a structural check of the KEDA objects (whose
  CRD schemas kubernetes-validate does not ship).

`--self-test` proves the check itself: the real files must pass, and every fixture in tests/
(a patch that breaks one rule of the real files) must fail with the message it names.

Needs only PyYAML. CloudFormation's short-form tags (!Ref, !Sub, !GetAtt, ...) are read into
their long form (Ref, Fn::Sub, Fn::GetAtt, ...) by the loader below.
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import re
import sys
from typing import Any

import yaml

DEPLOY = pathlib.Path(__file__).resolve().parent
TEMPLATE = DEPLOY / "aws" / "template.yaml"
K8S_DIR = DEPLOY / "k8s"
TESTS_DIR = DEPLOY / "tests"

# --------------------------------------------------------------------------- YAML


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


# --------------------------------------------------------------------------- the template

# What each function's role may do, by resource role. Anything else in a role fails the check.
# -- the worker (TablePrefix-worker): tiles, assembly, announcements
TILES_ACTIONS = [
    "s3:PutObject",
    "s3:GetObject",
    "s3:AbortMultipartUpload",  # the assembler's scene upload, when it fails or loses its lease
]
# The assembler HEADs the scene (and its STAC Item) before writing it; S3 answers a HEAD of an
# absent key with 404 only to a caller with s3:ListBucket, with 403 to any other.
OUTPUT_BUCKET_ACTIONS = ["s3:ListBucket"]
SOURCE_ACTIONS = ["s3:GetObject"]
TABLE_ACTIONS = ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:GetItem"]
COUNTER_BATCH_ACTIONS = ["dynamodb:BatchGetItem"]  # completion: every partition's row counter
QUEUE_ACTIONS = [
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueAttributes",  # required by Lambda's SQS event source mapping
]
DLQ_ACTIONS = ["sqs:SendMessage"]
PUBLISH_ACTIONS = ["sns:Publish"]
LOG_ACTIONS = ["logs:CreateLogStream", "logs:PutLogEvents"]
# -- the ingest function (TablePrefix-ingest): plans jobs from the arrivals queue
INGEST_JOB_ACTIONS = ["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:UpdateItem"]
INGEST_MANIFEST_ACTIONS = ["dynamodb:Query"]
SEND_ACTIONS = ["sqs:SendMessage"]
# -- the serve function (TablePrefix-serve): the job API. It plans jobs as ingest does (the
# source, the job row, the windows), reads the tables, the queues' depths and the output objects
# (reports, STAC Items, scenes, _service/keys/*; a signed URL is honoured only if the signer may
# GetObject), and writes ledger rows (regenerate, accept). No delete, no object write.
SERVE_OBJECT_ACTIONS = ["s3:GetObject"]
SERVE_READ_ACTIONS = ["dynamodb:GetItem", "dynamodb:Query"]
SERVE_WRITE_ACTIONS = ["dynamodb:PutItem", "dynamodb:UpdateItem"]
JOBS_LIST_INDEX = "by-created"  # GET /v1/jobs, newest first (an operator's listing)
JOBS_TENANT_INDEX = "by-tenant"  # GET /v1/jobs, a tenant's own jobs
QUEUE_DEPTH_ACTIONS = ["sqs:GetQueueAttributes"]
# -- the reconcile function (TablePrefix-reconcile): one pass over the open jobs per scheduled
# invocation. It assembles and announces as the worker does (the worker's grants on the tiles,
# the tables and the topic), reads the open jobs through the jobs table's by-open index, sends
# the windows a lost planner never sent, and reads the dead-letter queue (receive for a moment,
# make visible again, its depth) to record windows the queue dead-lettered. No delete of an
# item or a message, no source read, no receive on the work queue.
JOBS_OPEN_INDEX = "by-open"
RECONCILE_DLQ_ACTIONS = ["sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"]
# Its schedule: EventBridge Scheduler, with a role of its own that may invoke it and nothing else.
SCHEDULER_PRINCIPAL = "scheduler.amazonaws.com"
INVOKE_ACTIONS = ["lambda:InvokeFunction"]
# The routes the HTTP API may answer without its authorizer (method, path); every other route
# needs the JWT authorizer, and ANY /v1/{proxy+} must be one of them.
PUBLIC_ROUTES = {("GET", "/"), ("GET", "/healthz"), ("GET", "/v1/openapi.json")}
V1_ROUTE = ("ANY", "/v1/{proxy+}")
# An HTTP API waits at most this long for its integration (payload format 2.0).
HTTP_API_INTEGRATION_MAX_S = 30
# The environment the serve function's token checks read, each from the template parameter of
# the same meaning (the authorizer's issuer and audience are the same parameters).
SERVE_JWT_ENV = {
    "TILEGATE_JWKS": "${JwksUrl}",
    "TILEGATE_JWT_ISSUER": "${JwtIssuer}",
    "TILEGATE_JWT_AUDIENCE": "${JwtAudience}",
    "TILEGATE_TENANT_CLAIM": "${TenantClaim}",
    "TILEGATE_ROLE_CLAIM": "${RoleClaim}",
}

# The queue names the code derives from QueueName, and SQS's limit on a queue name.
QUEUE_SUFFIXES = ["-dlq", "-arrivals", "-arrivals-dlq"]
SQS_NAME_MAX = 80

# The fields of TILEGATE_INGEST (the ingest configuration; unknown fields are refused).
INGEST_FIELDS = {
    "recipe", "prefix", "tenant", "assets", "manifest_shards", "buckets", "key_prefixes", "key_suffixes",
    "collections",
}
# What the source bucket's rule matches: objects created in that bucket, nothing else.
ARRIVALS_PATTERN = {
    "source": ["aws.s3"],
    "detail-type": ["Object Created"],
    "detail": {"bucket": {"name": [{"Ref": "SourceBucketName"}]}},
}
# The assembler holds a scene in memory: the code's default TILEGATE_ASSEMBLE_MAX_BYTES is 4 GiB
# for a 10 GiB function, and no function may assemble more than that share of its memory.
ASSEMBLE_MEMORY_SHARE = 0.4

# Table suffix -> (key schema, attribute types, global secondary indexes), as the code uses them.
TABLES: dict[str, tuple[list[tuple[str, str]], dict[str, str], dict[str, list[tuple[str, str]]]]] = {
    "jobs": (
        [("job_id", "HASH")],
        {"job_id": "S", "list_pk": "S", "created_at": "N", "tenant": "S", "open_pk": "S"},
        {
            "by-created": [("list_pk", "HASH"), ("created_at", "RANGE")],
            # GET /v1/jobs of a tenant (crates/tilegate-aws/src/dynamo/schema.rs)
            "by-tenant": [("tenant", "HASH"), ("created_at", "RANGE")],
            # sparse: only open jobs carry open_pk; the reconciler's O(open jobs) read
            "by-open": [("open_pk", "HASH"), ("created_at", "RANGE")],
        },
    ),
    "manifest": ([("pk", "HASH"), ("sk", "RANGE")], {"pk": "S", "sk": "S"}, {}),
    "claims": ([("resource", "HASH")], {"resource": "S"}, {}),
    "counters": ([("job_id", "HASH")], {"job_id": "S"}, {}),
    "ledger": (
        [("pk", "HASH"), ("sk", "RANGE")],
        {"pk": "S", "sk": "S", "due_shard": "S", "gc_due": "N"},
        {"due": [("due_shard", "HASH"), ("gc_due", "RANGE")]},
    ),
}

IAM_RESOURCE_TYPES = {
    "AWS::IAM::Policy",
    "AWS::IAM::ManagedPolicy",
    "AWS::IAM::RolePolicy",
    "AWS::IAM::User",
    "AWS::IAM::Group",
    "AWS::IAM::UserPolicy",
    "AWS::IAM::GroupPolicy",
}


def as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def show(value: Any) -> str:
    """A CloudFormation value in the short form a reader knows from the template."""
    if isinstance(value, dict) and len(value) == 1:
        (key, inner), = value.items()
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
    def __init__(self, doc: dict) -> None:
        self.doc = doc if isinstance(doc, dict) else {}
        self.resources: dict[str, dict] = self.doc.get("Resources") or {}
        self.parameters: dict[str, dict] = self.doc.get("Parameters") or {}
        self.errors: list[str] = []

    def fail(self, msg: str) -> None:
        self.errors.append(msg)

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
        (key, inner), = value.items()
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


def find_one(t: Template, rtype: str, prop: str, expected: Any, what: str) -> str | None:
    """The one resource of `rtype` whose `prop` equals `expected`."""
    want = t.canon(expected)
    found = [k for k in t.of_type(rtype) if t.canon(t.props(k).get(prop)) == want]
    if len(found) != 1:
        t.fail(f"{what}: expected exactly one {rtype} with {prop} {show(expected)}, found {len(found)}")
        return None
    return found[0]


# (actions, the equivalent spellings of the one resource they are granted on, what it is)
Grant = tuple[list[str], list[str], str]


def check_template(doc: dict) -> list[str]:
    t = Template(doc)
    if t.doc.get("Transform") != "AWS::Serverless-2016-10-31":
        t.fail("template: Transform must be AWS::Serverless-2016-10-31")

    # -- the resources the grants must name, found by what they are, not by their logical IDs
    buckets = t.of_type("AWS::S3::Bucket")
    bucket = buckets[0] if len(buckets) == 1 else None
    if bucket is None:
        t.fail(f"template: expected exactly one AWS::S3::Bucket (the output bucket), found {len(buckets)}")
    queue = find_one(t, "AWS::SQS::Queue", "QueueName", {"Ref": "QueueName"}, "work queue")
    dlq = find_one(t, "AWS::SQS::Queue", "QueueName", {"Fn::Sub": "${QueueName}-dlq"}, "dead-letter queue")
    arrivals = find_one(t, "AWS::SQS::Queue", "QueueName", {"Fn::Sub": "${QueueName}-arrivals"}, "arrivals queue")
    arrivals_dlq = find_one(
        t, "AWS::SQS::Queue", "QueueName", {"Fn::Sub": "${QueueName}-arrivals-dlq"}, "arrivals dead-letter queue"
    )
    tables = {
        suffix: find_one(
            t, "AWS::DynamoDB::Table", "TableName", {"Fn::Sub": "${TablePrefix}-" + suffix}, f"{suffix} table"
        )
        for suffix in TABLES
    }
    topics = t.of_type("AWS::SNS::Topic")
    topic = topics[0] if len(topics) == 1 else None
    if topic is None:
        t.fail(f"template: expected exactly one AWS::SNS::Topic (the announcements), found {len(topics)}")
    elif not t.props(topic).get("KmsMasterKeyId"):
        t.fail(f"topic {topic}: KmsMasterKeyId is not set (alias/aws/sns at least)")

    worker = find_one(
        t, "AWS::Serverless::Function", "FunctionName", {"Fn::Sub": "${TablePrefix}-worker"}, "worker function"
    )
    ingest = find_one(
        t, "AWS::Serverless::Function", "FunctionName", {"Fn::Sub": "${TablePrefix}-ingest"}, "ingest function"
    )
    serve = find_one(
        t, "AWS::Serverless::Function", "FunctionName", {"Fn::Sub": "${TablePrefix}-serve"}, "serve function"
    )
    reconcile = find_one(
        t, "AWS::Serverless::Function", "FunctionName", {"Fn::Sub": "${TablePrefix}-reconcile"}, "reconcile function"
    )
    for logical in t.of_type("AWS::Serverless::Function"):
        if logical not in (worker, ingest, serve, reconcile):
            t.fail(
                f"resource {logical}: another function is not allowed (only PREFIX-worker, PREFIX-ingest, "
                "PREFIX-serve and PREFIX-reconcile)"
            )
    check_permission_sources(t)
    check_queue_name_length(t)

    part = "${AWS::Partition}"
    source = ([f"arn:{part}:s3:::${{SourceBucketName}}/*"], "source bucket")
    roles: dict[str, str] = {}
    if worker:
        wprops = t.props(worker)
        _, lg_grants = function_log_group(t, worker, wprops)
        grants: list[Grant] = []
        if bucket:
            grants.append((TILES_ACTIONS, [f"arn:{part}:s3:::${{{bucket}}}/${{OutputPrefix}}/*"], "tiles prefix"))
            grants.append((OUTPUT_BUCKET_ACTIONS, [f"${{{bucket}.Arn}}", f"arn:{part}:s3:::${{{bucket}}}"], "output bucket"))
        grants.append((SOURCE_ACTIONS, *source))
        for suffix, table in tables.items():
            if table:
                grants.append((TABLE_ACTIONS, [f"${{{table}.Arn}}"], f"{suffix} table"))
        if tables["counters"]:
            grants.append((COUNTER_BATCH_ACTIONS, [f"${{{tables['counters']}.Arn}}"], "counters table"))
        if queue:
            grants.append((QUEUE_ACTIONS, [f"${{{queue}.Arn}}"], "work queue"))
        if dlq:
            grants.append((DLQ_ACTIONS, [f"${{{dlq}.Arn}}"], "dead-letter queue"))
        if topic:
            grants.append((PUBLISH_ACTIONS, [f"${{{topic}}}"], "announcements topic"))
        grants += lg_grants
        role = check_role(t, worker, wprops, grants, "worker")
        if role:
            roles[role] = worker
        check_queues(t, worker, wprops, queue, dlq, "work queue", "dead-letter queue", batch_size=10)
        check_function(t, worker, wprops, {
            "TILEGATE_OBJECTS": f"s3://${{{bucket}}}/${{OutputPrefix}}" if bucket else None,
            "TILEGATE_TABLES": "dynamodb://${TablePrefix}",
            "TILEGATE_QUEUE_URL": f"${{{queue}}}" if queue else None,
            "TILEGATE_DLQ_URL": f"${{{dlq}}}" if dlq else None,
            "TILEGATE_ASSEMBLE": "1",
            "TILEGATE_ANNOUNCE": f"sns:${{{topic}}}" if topic else None,
        })
        check_assembly_memory(t, worker, wprops)
    if ingest:
        iprops = t.props(ingest)
        _, lg_grants = function_log_group(t, ingest, iprops)
        grants = [(SOURCE_ACTIONS, *source)]
        if tables["jobs"]:
            grants.append((INGEST_JOB_ACTIONS, [f"${{{tables['jobs']}.Arn}}"], "jobs table"))
        if tables["manifest"]:
            grants.append((INGEST_MANIFEST_ACTIONS, [f"${{{tables['manifest']}.Arn}}"], "manifest table"))
        if queue:
            grants.append((SEND_ACTIONS, [f"${{{queue}.Arn}}"], "work queue"))
        if arrivals:
            grants.append((QUEUE_ACTIONS, [f"${{{arrivals}.Arn}}"], "arrivals queue"))
        if arrivals_dlq:
            grants.append((DLQ_ACTIONS, [f"${{{arrivals_dlq}.Arn}}"], "arrivals dead-letter queue"))
        grants += lg_grants
        role = check_role(t, ingest, iprops, grants, "ingest")
        if role and role in roles:
            t.fail(f"function {ingest}: the ingest function must have its own role, not the worker's {role}")
        elif role:
            roles[role] = ingest
        check_queues(t, ingest, iprops, arrivals, arrivals_dlq, "arrivals queue", "arrivals dead-letter queue")
        check_function(t, ingest, iprops, {
            "TILEGATE_MODE": "ingest",
            "TILEGATE_OBJECTS": f"s3://${{{bucket}}}/${{OutputPrefix}}" if bucket else None,
            "TILEGATE_TABLES": "dynamodb://${TablePrefix}",
            "TILEGATE_QUEUE_URL": f"${{{queue}}}" if queue else None,
            "TILEGATE_DLQ_URL": f"${{{dlq}}}" if dlq else None,
            "TILEGATE_ARRIVALS_URL": f"${{{arrivals}}}" if arrivals else None,
            "TILEGATE_ARRIVALS_DLQ_URL": f"${{{arrivals_dlq}}}" if arrivals_dlq else None,
        })
        check_ingest_config(t, ingest, iprops)
    if serve:
        sprops = t.props(serve)
        _, lg_grants = function_log_group(t, serve, sprops)
        grants = [(SOURCE_ACTIONS, *source)]
        if bucket:
            prefix_objects = f"arn:{part}:s3:::${{{bucket}}}/${{OutputPrefix}}/*"
            grants.append((SERVE_OBJECT_ACTIONS, [prefix_objects], "output prefix"))
            grants.append(
                (OUTPUT_BUCKET_ACTIONS, [f"${{{bucket}.Arn}}", f"arn:{part}:s3:::${{{bucket}}}"], "output bucket")
            )
        for suffix, table in tables.items():
            if table:
                grants.append((SERVE_READ_ACTIONS, [f"${{{table}.Arn}}"], f"{suffix} table"))
        if tables["jobs"]:
            jobs_arn = f"${{{tables['jobs']}.Arn}}"
            grants.append((SERVE_WRITE_ACTIONS, [jobs_arn], "jobs table"))
            for index in (JOBS_LIST_INDEX, JOBS_TENANT_INDEX):
                grants.append((["dynamodb:Query"], [f"{jobs_arn}/index/{index}"], f"jobs table's {index} index"))
        if tables["counters"]:
            grants.append((COUNTER_BATCH_ACTIONS, [f"${{{tables['counters']}.Arn}}"], "counters table"))
        if tables["ledger"]:
            grants.append((SERVE_WRITE_ACTIONS, [f"${{{tables['ledger']}.Arn}}"], "ledger table"))
        if queue:
            grants.append((SEND_ACTIONS + QUEUE_DEPTH_ACTIONS, [f"${{{queue}.Arn}}"], "work queue"))
        if dlq:
            grants.append((QUEUE_DEPTH_ACTIONS, [f"${{{dlq}.Arn}}"], "dead-letter queue"))
        grants += lg_grants
        role = check_role(t, serve, sprops, grants, "serve")
        if role and role in roles:
            t.fail(f"function {serve}: the serve function must have its own role, not {roles[role]}'s {role}")
        elif role:
            roles[role] = serve
        check_function(t, serve, sprops, {
            "TILEGATE_MODE": "serve",
            "TILEGATE_OBJECTS": f"s3://${{{bucket}}}/${{OutputPrefix}}" if bucket else None,
            "TILEGATE_TABLES": "dynamodb://${TablePrefix}",
            "TILEGATE_QUEUE_URL": f"${{{queue}}}" if queue else None,
            "TILEGATE_DLQ_URL": f"${{{dlq}}}" if dlq else None,
            **SERVE_JWT_ENV,
        })
        check_serve_timeouts(t, serve, sprops)
    check_http_api(t, serve)
    if reconcile:
        cprops = t.props(reconcile)
        _, lg_grants = function_log_group(t, reconcile, cprops)
        grants = []
        if bucket:
            grants.append((TILES_ACTIONS, [f"arn:{part}:s3:::${{{bucket}}}/${{OutputPrefix}}/*"], "tiles prefix"))
            grants.append((OUTPUT_BUCKET_ACTIONS, [f"${{{bucket}.Arn}}", f"arn:{part}:s3:::${{{bucket}}}"], "output bucket"))
        for suffix, table in tables.items():
            if table:
                grants.append((TABLE_ACTIONS, [f"${{{table}.Arn}}"], f"{suffix} table"))
        if tables["counters"]:
            grants.append((COUNTER_BATCH_ACTIONS, [f"${{{tables['counters']}.Arn}}"], "counters table"))
        if tables["jobs"]:
            grants.append((
                ["dynamodb:Query"],
                [f"${{{tables['jobs']}.Arn}}/index/{JOBS_OPEN_INDEX}"],
                f"jobs table's {JOBS_OPEN_INDEX} index",
            ))
        if queue:
            grants.append((SEND_ACTIONS, [f"${{{queue}.Arn}}"], "work queue"))
        if dlq:
            grants.append((RECONCILE_DLQ_ACTIONS, [f"${{{dlq}.Arn}}"], "dead-letter queue"))
        if topic:
            grants.append((PUBLISH_ACTIONS, [f"${{{topic}}}"], "announcements topic"))
        grants += lg_grants
        role = check_role(t, reconcile, cprops, grants, "reconcile")
        if role and role in roles:
            t.fail(f"function {reconcile}: the reconcile function must have its own role, not {roles[role]}'s {role}")
        elif role:
            roles[role] = reconcile
        check_function(t, reconcile, cprops, {
            "TILEGATE_MODE": "reconcile",
            "TILEGATE_OBJECTS": f"s3://${{{bucket}}}/${{OutputPrefix}}" if bucket else None,
            "TILEGATE_TABLES": "dynamodb://${TablePrefix}",
            "TILEGATE_QUEUE_URL": f"${{{queue}}}" if queue else None,
            "TILEGATE_DLQ_URL": f"${{{dlq}}}" if dlq else None,
            "TILEGATE_ANNOUNCE": f"sns:${{{topic}}}" if topic else None,
        })
        check_assembly_memory(t, reconcile, cprops)
        if cprops.get("Events"):
            t.fail(f"function {reconcile}: no event source (its schedule is an AWS::Scheduler::Schedule)")
        schedule_role = check_reconcile_schedule(t, reconcile)
        if schedule_role:
            roles[schedule_role] = reconcile
    all_roles = t.of_type("AWS::IAM::Role")
    extra = sorted(set(all_roles) - set(roles))
    if extra:
        t.fail(f"template: the only AWS::IAM::Roles may be the functions' own, found also {extra}")
    if arrivals:
        rule = check_arrivals_rule(t, arrivals)
        check_queue_policies(t, arrivals, rule)
    check_tables(t, tables)
    check_bucket(t, bucket)
    return t.errors


def check_reconcile_schedule(t: Template, function: str) -> str | None:
    """One enabled EventBridge Scheduler schedule invokes the reconcile function, through a role
    that only the scheduler (of this account) may assume and that may invoke only that function.
    Answers the role's logical ID."""
    want = "${" + function + ".Arn}"
    schedules = [k for k in t.of_type("AWS::Scheduler::Schedule") if t.canon((t.props(k).get("Target") or {}).get("Arn")) == want]
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
    role_ref = (sp.get("Target") or {}).get("RoleArn")
    role = None
    if isinstance(role_ref, dict) and "Fn::GetAtt" in role_ref:
        parts = role_ref["Fn::GetAtt"]
        parts = parts.split(".", 1) if isinstance(parts, str) else parts
        if isinstance(parts, list) and len(parts) == 2 and parts[1] == "Arn":
            role = parts[0]
    if role is None or t.resources.get(role, {}).get("Type") != "AWS::IAM::Role":
        t.fail(f"{where}: Target.RoleArn must be !GetAtt <an AWS::IAM::Role in this template>.Arn")
        return None
    rprops = t.props(role)
    if rprops.get("ManagedPolicyArns"):
        t.fail(f"role {role}: managed policies are not allowed: {rprops['ManagedPolicyArns']}")
    trust = [st for st in as_list((rprops.get("AssumeRolePolicyDocument") or {}).get("Statement")) if st.get("Effect") == "Allow"]
    if not trust:
        t.fail(f"role {role}: trust policy does not let EventBridge Scheduler assume it")
    for st in trust:
        principal = st.get("Principal") or {}
        if set(principal) != {"Service"} or as_list(principal.get("Service")) != [SCHEDULER_PRINCIPAL]:
            t.fail(f"role {role}: trust policy principal must be the service {SCHEDULER_PRINCIPAL}, found {principal}")
        if as_list(st.get("Action")) != ["sts:AssumeRole"]:
            t.fail(f"role {role}: trust policy action must be sts:AssumeRole, found {st.get('Action')}")
    granted = []
    for pol in as_list(rprops.get("Policies")):
        pdoc = pol.get("PolicyDocument") or {}
        for i, st in enumerate(as_list(pdoc.get("Statement"))):
            if st.get("Effect") != "Allow":
                continue
            swhere = f"role {role}, policy {pol.get('PolicyName', '?')}, statement {st.get('Sid', i)}"
            for key in ("NotAction", "NotResource"):
                if key in st:
                    t.fail(f"{swhere}: {key} is not allowed")
            for a in as_list(st.get("Action")):
                for r in as_list(st.get("Resource")):
                    if str(a).lower() not in [x.lower() for x in INVOKE_ACTIONS] or t.canon(r) != want:
                        t.fail(f"{swhere}: grant of {a} on {show(r)} is not allowed (only {INVOKE_ACTIONS[0]} on {function})")
                    else:
                        granted.append(a)
    if not granted:
        t.fail(f"role {role}: missing grant of {INVOKE_ACTIONS[0]} on {function} (the schedule invokes it)")
    return role


def check_permission_sources(t: Template) -> None:
    """Where permissions may come from: each function's one inline-policy role, nothing else."""
    globals_fn = ((t.doc.get("Globals") or {}).get("Function")) or {}
    for key in ("Policies", "Role"):
        if key in globals_fn:
            t.fail(f"Globals.Function.{key} is not allowed")
    for logical in t.resources:
        rtype = t.resources[logical].get("Type") if isinstance(t.resources[logical], dict) else None
        if rtype in IAM_RESOURCE_TYPES:
            t.fail(f"resource {logical}: {rtype} is not allowed (only the functions' roles' inline policies grant)")


def check_queue_name_length(t: Template) -> None:
    """Every queue name the code derives from QueueName must fit SQS's limit."""
    p = t.parameters.get("QueueName") or {}
    longest = None
    if "MaxLength" in p and str(p["MaxLength"]).isdigit():
        longest = int(p["MaxLength"])
    m = re.search(r"\{(?:\d+)?,(\d+)\}\$$", str(p.get("AllowedPattern", "")))
    if m:
        longest = min(longest, int(m.group(1))) if longest is not None else int(m.group(1))
    suffix = max(QUEUE_SUFFIXES, key=len)
    if longest is None:
        t.fail(f"parameter QueueName: bound its length (MaxLength or AllowedPattern) so QueueName{suffix} fits {SQS_NAME_MAX}")
    elif longest + len(suffix) > SQS_NAME_MAX:
        t.fail(
            f"parameter QueueName: allows {longest} characters, so QueueName{suffix} may exceed SQS's "
            f"{SQS_NAME_MAX} (at most {SQS_NAME_MAX - len(suffix)})"
        )


def function_log_group(t: Template, function: str, fprops: dict) -> tuple[str | None, list[Grant]]:
    """The function's log group, and the log grants its role needs on it (in any spelling)."""
    fname = fprops.get("FunctionName")
    lg_name = "/aws/lambda/" + (t.canon(fname) or "") if fname is not None else "/aws/lambda/${" + function + "}"
    log_groups = [k for k in t.of_type("AWS::Logs::LogGroup") if t.canon(t.props(k).get("LogGroupName")) == lg_name]
    log_group = log_groups[0] if len(log_groups) == 1 else None
    if log_group is None:
        t.fail(f"log group: expected exactly one AWS::Logs::LogGroup named {lg_name}, found {len(log_groups)}")
        return None, []
    if "RetentionInDays" not in t.props(log_group):
        t.fail(f"log group {log_group}: RetentionInDays is not set")
    lg_arn = f"arn:${{AWS::Partition}}:logs:${{AWS::Region}}:${{AWS::AccountId}}:log-group:{lg_name}"
    return log_group, [(LOG_ACTIONS, [f"${{{log_group}.Arn}}", lg_arn + ":*", lg_arn + ":log-stream:*"], "log group")]


def check_role(t: Template, function: str, fprops: dict, grants: list[Grant], label: str) -> str | None:
    """The function's role grants exactly `grants`; its logical ID."""
    if "Policies" in fprops:
        t.fail(f"function {function}: SAM Policies property is not allowed (grants go in the explicit role)")
    role_ref = fprops.get("Role")
    role = None
    if isinstance(role_ref, dict) and "Fn::GetAtt" in role_ref:
        parts = role_ref["Fn::GetAtt"]
        parts = parts.split(".", 1) if isinstance(parts, str) else parts
        if isinstance(parts, list) and len(parts) == 2 and parts[1] == "Arn":
            role = parts[0]
    if role is None or t.resources.get(role, {}).get("Type") != "AWS::IAM::Role":
        t.fail(f"function {function}: Role must be !GetAtt <an AWS::IAM::Role in this template>.Arn")
        return None
    rprops = t.props(role)
    if rprops.get("ManagedPolicyArns"):
        t.fail(f"role {role}: managed policies are not allowed: {rprops['ManagedPolicyArns']}")

    trust = as_list((rprops.get("AssumeRolePolicyDocument") or {}).get("Statement"))
    trusted = []
    for st in trust:
        principal = st.get("Principal") or {}
        if st.get("Effect") != "Allow":
            continue
        if set(principal) != {"Service"} or as_list(principal.get("Service")) != ["lambda.amazonaws.com"]:
            t.fail(f"role {role}: trust policy principal must be the service lambda.amazonaws.com, found {principal}")
        if as_list(st.get("Action")) != ["sts:AssumeRole"]:
            t.fail(f"role {role}: trust policy action must be sts:AssumeRole, found {st.get('Action')}")
        trusted.append(st)
    if not trusted:
        t.fail(f"role {role}: trust policy does not let Lambda assume it")

    # -- the allowed (action, resource) pairs, in canonical spelling; one spelling per grant is
    # required, the alternatives of a grant are equivalent spellings
    allowed: set[tuple[str, str]] = set()
    required: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for actions, resources, why in grants:
        for a in actions:
            for r in resources:
                allowed.add((a.lower(), r))
                required.setdefault((a, why), set()).add((a.lower(), r))

    granted: set[tuple[str, str]] = set()
    for pol in as_list(rprops.get("Policies")):
        pname = pol.get("PolicyName", "?")
        pdoc = pol.get("PolicyDocument")
        if not isinstance(pdoc, dict):
            t.fail(f"role {role}, policy {pname}: PolicyDocument must be an inline mapping")
            continue
        for i, st in enumerate(as_list(pdoc.get("Statement"))):
            where = f"role {role}, policy {pname}, statement {st.get('Sid', i)}"
            for key in ("NotAction", "NotResource", "NotPrincipal"):
                if key in st:
                    t.fail(f"{where}: {key} is not allowed")
            effect = st.get("Effect")
            if effect == "Deny":
                continue
            if effect != "Allow":
                t.fail(f"{where}: Effect must be Allow or Deny, found {effect!r}")
                continue
            actions = as_list(st.get("Action"))
            resources = as_list(st.get("Resource"))
            if not actions or not resources:
                t.fail(f"{where}: Action and Resource are required")
            for r in resources:
                if r == "*":
                    t.fail(f'{where}: Resource "*" is not allowed')
            for a in actions:
                if not isinstance(a, str):
                    t.fail(f"{where}: action {a!r} must be a literal string")
                    continue
                if "*" in a or "?" in a:
                    t.fail(f"{where}: wildcard action {a!r} is not allowed")
                    continue
                for r in resources:
                    if r == "*":
                        continue
                    cr = t.canon(r)
                    if cr is None:
                        t.fail(f"{where}: resource {show(r)} is not a form this check can read")
                        continue
                    if (a.lower(), cr) not in allowed:
                        t.fail(f"{where}: grant of {a} on {show(r)} is not allowed")
                    granted.add((a.lower(), cr))
    for (a, why), spellings in sorted(required.items()):
        if not spellings & granted:
            t.fail(f"role {role}: missing grant of {a} on the {why} (the {label} function needs it)")
    return role


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


def check_queues(
    t: Template,
    function: str,
    fprops: dict,
    queue: str | None,
    dlq: str | None,
    qlabel: str,
    dlabel: str,
    batch_size: int | None = None,
) -> None:
    """The queue feeding `function`: visibility, redrive to `dlq`, encryption, event source."""
    if not queue or not dlq:
        return
    qp, dp = t.props(queue), t.props(dlq)
    timeouts = t.param_values("FunctionTimeout") if fprops.get("Timeout") == {"Ref": "FunctionTimeout"} else []
    if not timeouts:
        lit = resolve_number(t, fprops.get("Timeout"), 0)
        timeouts = [lit] if lit else []
    if not timeouts:
        t.fail(f"function {function}: Timeout must be a number or !Ref FunctionTimeout with a default")
    for timeout in timeouts:
        vis = resolve_number(t, qp.get("VisibilityTimeout"), timeout)
        if vis is None:
            t.fail(f"{qlabel} {queue}: VisibilityTimeout {show(qp.get('VisibilityTimeout'))} cannot be resolved")
            break
        if vis < 6 * timeout:
            t.fail(
                f"{qlabel} {queue}: VisibilityTimeout {vis} s is less than 6 x the function timeout "
                f"{timeout} s ({6 * timeout} s)"
            )
    redrive = qp.get("RedrivePolicy") or {}
    if str(redrive.get("maxReceiveCount")) != "3":
        t.fail(f"{qlabel} {queue}: RedrivePolicy maxReceiveCount must be 3, found {redrive.get('maxReceiveCount')}")
    if t.canon(redrive.get("deadLetterTargetArn")) != f"${{{dlq}.Arn}}":
        t.fail(f"{qlabel} {queue}: RedrivePolicy deadLetterTargetArn must be !GetAtt {dlq}.Arn")
    for name, p in ((queue, qp), (dlq, dp)):
        if p.get("SqsManagedSseEnabled") is not True and not p.get("KmsMasterKeyId"):
            t.fail(f"queue {name}: not encrypted (SqsManagedSseEnabled or KmsMasterKeyId)")
    if str(dp.get("MessageRetentionPeriod")) != "1209600":
        t.fail(f"{dlabel} {dlq}: MessageRetentionPeriod must be 1209600 (14 days)")

    sqs_events = [
        (name, ev.get("Properties") or {})
        for name, ev in (fprops.get("Events") or {}).items()
        if isinstance(ev, dict) and ev.get("Type") == "SQS"
    ]
    if len(sqs_events) != 1:
        t.fail(f"function {function}: expected one SQS event source, found {len(sqs_events)}")
        return
    name, ep = sqs_events[0]
    if t.canon(ep.get("Queue")) != f"${{{queue}.Arn}}":
        t.fail(f"function {function}, event {name}: Queue must be !GetAtt {queue}.Arn")
    if batch_size is not None and str(ep.get("BatchSize")) != str(batch_size):
        t.fail(f"function {function}, event {name}: BatchSize must be {batch_size}, found {ep.get('BatchSize')}")
    if "ReportBatchItemFailures" not in as_list(ep.get("FunctionResponseTypes")):
        t.fail(f"function {function}, event {name}: FunctionResponseTypes must include ReportBatchItemFailures")
    # More pollers than the function may run would throttle batches, and a throttled batch
    # counts as a receive towards maxReceiveCount without having been worked on.
    maxc = (ep.get("ScalingConfig") or {}).get("MaximumConcurrency")
    reserved = fprops.get("ReservedConcurrentExecutions")
    if maxc is None or (maxc != reserved and str(maxc) != str(reserved)):
        t.fail(
            f"function {function}, event {name}: ScalingConfig.MaximumConcurrency {show(maxc)} must equal "
            f"ReservedConcurrentExecutions {show(reserved)}"
        )


def check_arrivals_rule(t: Template, arrivals: str) -> str | None:
    """The EventBridge rule that brings the source bucket's new objects to the arrivals queue."""
    rules = t.of_type("AWS::Events::Rule")
    if len(rules) != 1:
        t.fail(f"template: expected exactly one AWS::Events::Rule (source bucket to arrivals queue), found {len(rules)}")
        return None
    rule = rules[0]
    rp = t.props(rule)
    if rp.get("EventBusName", "default") != "default":
        t.fail(f"rule {rule}: must be on the default event bus (where S3 sends its events), found {show(rp.get('EventBusName'))}")
    if rp.get("State", "ENABLED") != "ENABLED":
        t.fail(f"rule {rule}: State must be ENABLED, found {rp.get('State')}")
    if rp.get("EventPattern") != ARRIVALS_PATTERN:
        t.fail(
            f"rule {rule}: EventPattern must be {ARRIVALS_PATTERN} (objects created in the source bucket, "
            f"nothing else), found {rp.get('EventPattern')}"
        )
    targets = as_list(rp.get("Targets"))
    if len(targets) != 1 or t.canon((targets[0] or {}).get("Arn")) != f"${{{arrivals}.Arn}}":
        t.fail(f"rule {rule}: must target !GetAtt {arrivals}.Arn alone, found {[show((x or {}).get('Arn')) for x in targets]}")
    else:
        for key in ("Input", "InputPath", "InputTransformer"):
            if key in targets[0]:
                t.fail(f"rule {rule}: the target must deliver the event as it is (the ingest function parses it), found {key}")
    return rule


def check_queue_policies(t: Template, arrivals: str, rule: str | None) -> None:
    """Only the arrivals rule may send to the arrivals queue; no other queue has a policy."""
    policies = t.of_type("AWS::SQS::QueuePolicy")
    if not policies:
        t.fail(f"arrivals queue {arrivals}: no AWS::SQS::QueuePolicy lets the rule send to it")
    source_arn = f"${{{rule}.Arn}}" if rule else None
    for pol in policies:
        pp = t.props(pol)
        queues = [t.canon(q) for q in as_list(pp.get("Queues"))]
        if queues != [f"${{{arrivals}}}"]:
            t.fail(f"queue policy {pol}: must apply to the arrivals queue alone (!Ref {arrivals}), found {queues}")
        for i, st in enumerate(as_list((pp.get("PolicyDocument") or {}).get("Statement"))):
            where = f"queue policy {pol}, statement {st.get('Sid', i)}"
            for key in ("NotAction", "NotResource", "NotPrincipal"):
                if key in st:
                    t.fail(f"{where}: {key} is not allowed")
            if st.get("Effect") != "Allow":
                continue
            principal = st.get("Principal")
            if not isinstance(principal, dict) or set(principal) != {"Service"} or as_list(
                principal.get("Service")
            ) != ["events.amazonaws.com"]:
                t.fail(f"{where}: the principal must be the service events.amazonaws.com, found {principal}")
            if as_list(st.get("Action")) != ["sqs:SendMessage"]:
                t.fail(f"{where}: Action must be sqs:SendMessage alone, found {st.get('Action')}")
            if [t.canon(r) for r in as_list(st.get("Resource"))] != [f"${{{arrivals}.Arn}}"]:
                t.fail(f"{where}: Resource must be !GetAtt {arrivals}.Arn, found {st.get('Resource')}")
            found = []
            for op, conds in (st.get("Condition") or {}).items():
                if op not in ("ArnEquals", "ArnLike", "StringEquals") or not isinstance(conds, dict):
                    continue
                for key, value in conds.items():
                    if key.lower() == "aws:sourcearn":
                        found += [t.canon(v) for v in as_list(value)]
            if source_arn is None or found != [source_arn]:
                t.fail(
                    f"{where}: must be conditioned on aws:SourceArn = !GetAtt {rule}.Arn (ArnEquals), so that only "
                    f"that rule can send through EventBridge; found {found or 'no aws:SourceArn condition'}"
                )


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


def check_ingest_config(t: Template, function: str, fprops: dict) -> None:
    """TILEGATE_INGEST, with the parameters' defaults (the source bucket a placeholder), is the
    JSON the code reads, accepting notifications of the source bucket alone."""
    env = ((fprops.get("Environment") or {}).get("Variables")) or {}
    where = f"function {function}: environment TILEGATE_INGEST"
    parts = sub_parts(env.get("TILEGATE_INGEST"))
    if parts is None:
        t.fail(f"{where} must be an !Sub of the ingest configuration's JSON, found {show(env.get('TILEGATE_INGEST'))}")
        return
    text, variables = parts
    placeholder = "source-bucket.example"

    def value_of(name: str) -> str | None:
        if name in variables:
            v = variables[name]
            if isinstance(v, str):
                return v
            if isinstance(v, dict) and set(v) == {"Ref"}:
                return value_of_param(v["Ref"])
            if isinstance(v, dict) and set(v) == {"Fn::Join"}:
                sep, items = v["Fn::Join"]
                if isinstance(items, dict) and set(items) == {"Ref"}:
                    d = value_of_param(items["Ref"])
                    return None if d is None else sep.join(d.split(","))
            return None
        return value_of_param(name)

    def value_of_param(name: str) -> str | None:
        if name == "SourceBucketName":
            return placeholder
        if name not in t.parameters:
            return None
        d = t.param_default(name)
        return None if d is None else str(d)

    unresolved: list[str] = []

    def substitute(m: re.Match) -> str:
        v = value_of(m.group(1))
        if v is None:
            unresolved.append(m.group(1))
            return ""
        return v

    resolved = re.sub(r"\$\{([^!}][^}]*)\}", substitute, text).replace("${!", "${")
    if unresolved:
        t.fail(f"{where}: cannot resolve {unresolved} (a parameter with a default, or a variable of the !Sub)")
        return
    try:
        config = json.loads(resolved)
    except json.JSONDecodeError as e:
        t.fail(f"{where} is not JSON with the parameters' defaults ({e}): {resolved}")
        return
    if not isinstance(config, dict):
        t.fail(f"{where} must be a JSON object, found {resolved}")
        return
    unknown = sorted(set(config) - INGEST_FIELDS)
    if unknown:
        t.fail(f"{where}: unknown field(s) {unknown} (the code refuses them; known: {sorted(INGEST_FIELDS)})")
    if config.get("buckets") != [f"s3://{placeholder}"]:
        t.fail(
            f'{where}: buckets must be exactly ["s3://${{SourceBucketName}}"] (a notification of any other '
            f"bucket must be refused; the role reads no other), found {config.get('buckets')}"
        )
    recipe = config.get("recipe")
    if recipe is not None and not (isinstance(recipe, dict) and "operation" in recipe and "window" in recipe):
        t.fail(f"{where}: recipe must be an object with operation and window, found {recipe}")


def duration_seconds(value: Any) -> float | None:
    """A duration as the CLI's flags take it (`25s`, `2m`, `1h`, `1d`, or plain seconds)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?", str(value).strip())
    if not m:
        return None
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2) or "s"]
    return float(m.group(1)) * scale


def check_serve_timeouts(t: Template, function: str, fprops: dict) -> None:
    """The serve function answers within the HTTP API's wait, and its own request timeout ends a
    request before Lambda's timeout cuts it off (the caller would get a bare 503 instead of
    `request-timeout`)."""
    timeout = resolve_number(t, fprops.get("Timeout"), 0)
    if timeout is None:
        t.fail(f"function {function}: Timeout must be a number of seconds, found {show(fprops.get('Timeout'))}")
        return
    if timeout > HTTP_API_INTEGRATION_MAX_S:
        t.fail(
            f"function {function}: Timeout {timeout} s is longer than the HTTP API waits for it "
            f"({HTTP_API_INTEGRATION_MAX_S} s): the caller gets 503 while it runs on"
        )
    env = ((fprops.get("Environment") or {}).get("Variables")) or {}
    raw = env.get("TILEGATE_REQUEST_TIMEOUT", "60s")  # the code's default
    seconds = duration_seconds(raw)
    if seconds is None:
        t.fail(f"function {function}: environment TILEGATE_REQUEST_TIMEOUT {show(raw)} is not a duration (25s, 1m)")
    elif seconds >= min(timeout, HTTP_API_INTEGRATION_MAX_S):
        t.fail(
            f"function {function}: TILEGATE_REQUEST_TIMEOUT {raw} ({seconds:g} s) is not below the function's "
            f"Timeout {timeout} s and the HTTP API's {HTTP_API_INTEGRATION_MAX_S} s: a slow request would be cut "
            "off instead of answered `request-timeout`"
        )


def check_http_api(t: Template, serve: str | None) -> None:
    """The job API: one HTTP API, a JWT authorizer on the issuer and audience the function also
    checks, ANY /v1/{proxy+} behind it, no route without it but the public ones, only the serve
    function behind any route, no other way in (function URL, REST API), stage throttling."""
    for rtype in ("AWS::Serverless::Api", "AWS::ApiGateway::RestApi", "AWS::ApiGatewayV2::Api", "AWS::Lambda::Url"):
        for logical in t.of_type(rtype):
            t.fail(f"resource {logical}: {rtype} is not allowed (the job API is the one AWS::Serverless::HttpApi)")
    for logical in t.of_type("AWS::Serverless::Function"):
        fprops = t.props(logical)
        if "FunctionUrlConfig" in fprops:
            t.fail(
                f"function {logical}: FunctionUrlConfig is not allowed (a function URL reaches the function "
                "without the HTTP API's JWT authorizer and throttling)"
            )
        if logical == serve:
            continue
        for ename, ev in (fprops.get("Events") or {}).items():
            if isinstance(ev, dict) and ev.get("Type") in ("Api", "HttpApi"):
                t.fail(
                    f"function {logical}, event {ename}: only the serve function answers HTTP, found a {ev['Type']} event"
                )
    apis = t.of_type("AWS::Serverless::HttpApi")
    if len(apis) != 1:
        t.fail(f"template: expected exactly one AWS::Serverless::HttpApi (the job API), found {len(apis)}")
        return
    api = apis[0]
    ap = t.props(api)
    where = f"HttpApi {api}"
    auth = ap.get("Auth") or {}
    jwt: list[str] = []
    for name, authorizer in (auth.get("Authorizers") or {}).items():
        if not isinstance(authorizer, dict) or "JwtConfiguration" not in authorizer:
            t.fail(f"{where}: authorizer {name} is not a JWT authorizer (JwtConfiguration)")
            continue
        jc = authorizer.get("JwtConfiguration") or {}
        issuer = t.canon(jc.get("issuer"))
        audience = [t.canon(a) for a in as_list(jc.get("audience"))]
        if issuer != SERVE_JWT_ENV["TILEGATE_JWT_ISSUER"]:
            t.fail(
                f"{where}, authorizer {name}: issuer must be !Ref JwtIssuer (the function's TILEGATE_JWT_ISSUER), "
                f"found {show(jc.get('issuer'))}"
            )
        if audience != [SERVE_JWT_ENV["TILEGATE_JWT_AUDIENCE"]]:
            t.fail(
                f"{where}, authorizer {name}: audience must be [!Ref JwtAudience] (the function's "
                f"TILEGATE_JWT_AUDIENCE), found {[show(a) for a in as_list(jc.get('audience'))]}"
            )
        source = authorizer.get("IdentitySource", "$request.header.Authorization")
        if source != "$request.header.Authorization":
            t.fail(
                f"{where}, authorizer {name}: IdentitySource must be $request.header.Authorization, found {source!r}"
            )
        jwt.append(name)
    if not jwt:
        t.fail(f"{where}: has no JWT authorizer (Auth.Authorizers with a JwtConfiguration); /v1/ would be open")
    default = auth.get("DefaultAuthorizer")
    settings = ap.get("DefaultRouteSettings") or {}
    for key in ("ThrottlingRateLimit", "ThrottlingBurstLimit"):
        value = settings.get(key)
        if not isinstance(value, (int, float)) or value <= 0:
            t.fail(
                f"{where}: DefaultRouteSettings.{key} must be a positive number (the whole API's bound), "
                f"found {value!r}"
            )
    if not serve:
        return
    guarded: list[tuple[str, str]] = []
    for ename, ev in (t.props(serve).get("Events") or {}).items():
        ewhere = f"function {serve}, event {ename}"
        if not isinstance(ev, dict) or ev.get("Type") != "HttpApi":
            found = ev.get("Type") if isinstance(ev, dict) else ev
            t.fail(f"{ewhere}: the serve function takes HttpApi events only, found {found!r}")
            continue
        ep = ev.get("Properties") or {}
        if t.canon(ep.get("ApiId")) != f"${{{api}}}":
            t.fail(
                f"{ewhere}: ApiId must be !Ref {api} (without it SAM puts the route on an implicit API, "
                f"without the JWT authorizer), found {show(ep.get('ApiId'))}"
            )
            continue
        if str(ep.get("PayloadFormatVersion", "2.0")) != "2.0":
            t.fail(
                f"{ewhere}: PayloadFormatVersion must be 2.0 (the events the function parses), "
                f"found {ep['PayloadFormatVersion']}"
            )
        method = str(ep.get("Method", "ANY")).upper()
        path = str(ep.get("Path", "$default"))
        route = (method, path)
        effective = (ep.get("Auth") or {}).get("Authorizer", default)
        if effective in jwt:
            guarded.append(route)
        elif effective in (None, "NONE"):
            if route not in PUBLIC_ROUTES:
                public = ", ".join(" ".join(r) for r in sorted(PUBLIC_ROUTES))
                t.fail(
                    f"{ewhere}: route {method} {path} has no authorizer; only {public} may be reached without "
                    "credentials"
                )
        else:
            t.fail(f"{ewhere}: route {method} {path}: authorizer {effective!r} is not a JWT authorizer of {api}")
    if V1_ROUTE not in guarded:
        t.fail(
            f"{where}: route {' '.join(V1_ROUTE)} must be behind the JWT authorizer "
            f"(routes behind it: {[' '.join(r) for r in guarded]})"
        )


def check_tables(t: Template, tables: dict[str, str | None]) -> None:
    for suffix, logical in tables.items():
        if not logical:
            continue
        keys, attrs, gsis = TABLES[suffix]
        p = t.props(logical)
        where = f"{suffix} table {logical}"
        got_keys = [(k.get("AttributeName"), k.get("KeyType")) for k in as_list(p.get("KeySchema"))]
        if got_keys != keys:
            t.fail(f"{where}: KeySchema must be {keys}, found {got_keys}")
        got_attrs = {a.get("AttributeName"): a.get("AttributeType") for a in as_list(p.get("AttributeDefinitions"))}
        if got_attrs != attrs:
            t.fail(f"{where}: AttributeDefinitions must be {attrs}, found {got_attrs}")
        got_gsis = {}
        for g in as_list(p.get("GlobalSecondaryIndexes")):
            got_gsis[g.get("IndexName")] = [(k.get("AttributeName"), k.get("KeyType")) for k in as_list(g.get("KeySchema"))]
            if (g.get("Projection") or {}).get("ProjectionType") != "ALL":
                t.fail(f"{where}: index {g.get('IndexName')} must project ALL")
        if got_gsis != gsis:
            t.fail(f"{where}: GlobalSecondaryIndexes must be {gsis}, found {got_gsis}")
        if p.get("LocalSecondaryIndexes"):
            t.fail(f"{where}: LocalSecondaryIndexes are not expected")
        if p.get("BillingMode") != "PAY_PER_REQUEST":
            t.fail(f"{where}: BillingMode must be PAY_PER_REQUEST")
        if (p.get("PointInTimeRecoverySpecification") or {}).get("PointInTimeRecoveryEnabled") is not True:
            t.fail(f"{where}: point-in-time recovery must be on")


def check_bucket(t: Template, bucket: str | None) -> None:
    if not bucket:
        return
    r, p = t.resources[bucket], t.props(bucket)
    block = p.get("PublicAccessBlockConfiguration") or {}
    for key in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"):
        if block.get(key) is not True:
            t.fail(f"bucket {bucket}: PublicAccessBlockConfiguration.{key} must be true")
    if r.get("DeletionPolicy") != "Retain":
        t.fail(f"bucket {bucket}: DeletionPolicy must be Retain")
    rules = as_list((p.get("LifecycleConfiguration") or {}).get("Rules"))
    if not any(
        r.get("Status") == "Enabled" and str((r.get("AbortIncompleteMultipartUpload") or {}).get("DaysAfterInitiation")) == "1"
        for r in rules
    ):
        t.fail(f"bucket {bucket}: needs an enabled lifecycle rule aborting incomplete multipart uploads after 1 day")
    sse = as_list((p.get("BucketEncryption") or {}).get("ServerSideEncryptionConfiguration"))
    if not sse:
        t.fail(f"bucket {bucket}: BucketEncryption is not set")


def check_function(t: Template, function: str, fprops: dict, expected: dict[str, str | None]) -> None:
    env = ((fprops.get("Environment") or {}).get("Variables")) or {}
    for key, want in expected.items():
        if want is not None and t.canon(env.get(key)) != want:
            t.fail(f"function {function}: environment {key} must be {want}, found {show(env.get(key))}")
    if "TILEGATE_MODE" not in expected and "TILEGATE_MODE" in env:
        t.fail(f"function {function}: environment TILEGATE_MODE must not be set (it would not run as the worker)")
    if fprops.get("Runtime") != "provided.al2023" or fprops.get("Handler") != "bootstrap":
        t.fail(f"function {function}: Runtime provided.al2023 with Handler bootstrap expected")
    if "ReservedConcurrentExecutions" not in fprops:
        t.fail(f"function {function}: ReservedConcurrentExecutions is not set")
    if fprops.get("Architectures") != ["x86_64"]:
        t.fail(f"function {function}: Architectures must be [x86_64] (the GDAL layer's architecture)")
    if {"Ref": "GdalLayerArn"} not in as_list(fprops.get("Layers")):
        t.fail(f"function {function}: Layers must include !Ref GdalLayerArn (GDAL's runtime libraries)")
    meta = t.resources[function].get("Metadata") or {}
    binary = (meta.get("BuildProperties") or {}).get("Binary")
    if meta.get("BuildMethod") != "rust-cargolambda" or binary != "tilegate-lambda":
        t.fail(f"function {function}: Metadata must build the tilegate-lambda binary with rust-cargolambda")


def check_assembly_memory(t: Template, function: str, fprops: dict) -> None:
    """A function that assembles is told how large a job it may assemble in its memory."""
    env = ((fprops.get("Environment") or {}).get("Variables")) or {}
    if env.get("TILEGATE_ASSEMBLE") != "1" and env.get("TILEGATE_MODE") != "reconcile":
        return
    memory = resolve_number(t, fprops.get("MemorySize"), 0)
    most = str(env.get("TILEGATE_ASSEMBLE_MAX_BYTES", ""))
    if memory is None:
        t.fail(f"function {function}: MemorySize must be set (it bounds the jobs the function assembles)")
        return
    limit = int(memory * (1 << 20) * ASSEMBLE_MEMORY_SHARE)
    if not most.isdigit():
        t.fail(
            f"function {function}: environment TILEGATE_ASSEMBLE_MAX_BYTES must be set, at most {limit} for "
            f"{memory} MB (the code's default, 4 GiB, is for a 10 GiB function)"
        )
    elif int(most) > limit:
        t.fail(
            f"function {function}: TILEGATE_ASSEMBLE_MAX_BYTES {most} is more than {ASSEMBLE_MEMORY_SHARE} x its "
            f"{memory} MB ({limit}); the assembler holds the scene in memory"
        )


# --------------------------------------------------------------------------- Kubernetes

KEDA_SCALEDOBJECT_SPEC = {
    "scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod", "idleReplicaCount",
    "minReplicaCount", "maxReplicaCount", "fallback", "advanced", "triggers",
}
KEDA_TRIGGER_KEYS = {"type", "metadata", "name", "authenticationRef", "metricType", "useCachedMetrics"}
KEDA_TRIGGERAUTH_SPEC = {
    "podIdentity", "secretTargetRef", "env", "configMapTargetRef", "hashiCorpVault", "azureKeyVault",
    "awsSecretManager", "gcpSecretManager", "boundServiceAccountToken",
}
AWS_SQS_METADATA = {
    "queueURL", "queueURLFromEnv", "queueLength", "activationQueueLength", "awsRegion", "awsEndpoint",
    "scaleOnInFlight", "scaleOnDelayed", "awsRoleArn", "identityOwner",
}
# What each command reads from its ConfigMap (the CLI's flags' environment variables).
WORKER_CONFIG = ("TILEGATE_OBJECTS", "TILEGATE_TABLES", "TILEGATE_QUEUE", "AWS_REGION", "TILEGATE_ANNOUNCE")
INGEST_CONFIG = ("TILEGATE_OBJECTS", "TILEGATE_TABLES", "TILEGATE_QUEUE", "AWS_REGION")
# `reconcile-jobs` publishes scenes as the worker does, and delivers announcements (TILEGATE_ANNOUNCE).
RECONCILE_CONFIG = WORKER_CONFIG
# `serve` plans jobs and reads what the workers wrote: the same backends as ingest.
SERVE_CONFIG = INGEST_CONFIG
# A JWT is verified with the key set, against the issuer and for the audience: all three or
# none (API keys alone). Checked without an audience, a token the issuer made for any other
# application would do.
SERVE_JWT_KEYS = ("TILEGATE_JWKS", "TILEGATE_JWT_ISSUER", "TILEGATE_JWT_AUDIENCE")
SERVE_LISTEN_DEFAULT = "127.0.0.1:8080"  # `serve --listen`'s default (TILEGATE_LISTEN)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
# The job API keeps no state: two replicas keep it up through a node drain or a rollout.
SERVE_REPLICAS_MIN = 2
# The CronJob's bounds: a failed run is retried at most this often before the Job fails, and at
# most this many finished Jobs of each outcome are kept.
ASSEMBLE_BACKOFF_MAX = 3
ASSEMBLE_HISTORY_MAX = 5
# The code's TILEGATE_ASSEMBLE_MAX_BYTES when a function that assembles does not set it.
LAMBDA_ASSEMBLE_MAX_BYTES_DEFAULT = 4 << 30
QUANTITY_UNITS = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
}
ANNOUNCE_SCHEMES = ("sns:", "eventbridge:", "https://")
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def flag_value(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def flag_values(args: list[str], flag: str) -> list[str]:
    out = []
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            out.append(args[i + 1])
        elif a.startswith(flag + "="):
            out.append(a.split("=", 1)[1])
    return out


def quantity_bytes(value: Any) -> int | None:
    """A Kubernetes memory quantity (`8Gi`, `512M`, `1e9`, `1073741824`) in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E))?", str(value).strip())
    if not m:
        return None
    number = float(m.group(1) + (m.group(2) or ""))
    return int(number * QUANTITY_UNITS[m.group(3) or ""])


def pod_template(obj: dict) -> dict:
    """The pod template of a Deployment or of a CronJob's Job."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    return spec.get("template") or {}


def lambda_assemble_max_bytes(doc: dict) -> int | None:
    """The largest job a Lambda function of the template assembles (TILEGATE_ASSEMBLE=1, or the
    reconcile function); the jobs above it are left `assembling` for the CronJob. None when no
    function assembles."""
    t = Template(doc)
    most = None
    for logical in t.of_type("AWS::Serverless::Function"):
        env = ((t.props(logical).get("Environment") or {}).get("Variables")) or {}
        if env.get("TILEGATE_ASSEMBLE") != "1" and env.get("TILEGATE_MODE") != "reconcile":
            continue
        raw = str(env.get("TILEGATE_ASSEMBLE_MAX_BYTES", ""))
        value = int(raw) if raw.isdigit() else LAMBDA_ASSEMBLE_MAX_BYTES_DEFAULT
        most = value if most is None else max(most, value)
    return most


def check_k8s(files: dict[str, list[dict]], lambda_max_bytes: int | None = None) -> list[str]:
    errors: list[str] = []
    fail = errors.append
    objs = [(name, d) for name, docs in files.items() for d in docs if isinstance(d, dict)]

    def of_kind(kind: str) -> list[tuple[str, dict]]:
        return [(n, d) for n, d in objs if d.get("kind") == kind]

    def named(kind: str, name: str, ns: str | None) -> dict | None:
        for _, d in of_kind(kind):
            md = d.get("metadata") or {}
            if md.get("name") == name and md.get("namespace") == ns:
                return d
        return None

    # -- the Deployments, told apart by their command: one `work`, one `ingest`
    by_command: dict[str, list[tuple[str, dict]]] = {"work": [], "ingest": [], "serve": []}
    for fname, dep in of_kind("Deployment"):
        containers = (((dep.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        if len(containers) != 1:
            fail(f"{fname}: expected one container, found {len(containers)}")
            continue
        args = [str(a) for a in (containers[0].get("args") or [])]
        if not args or args[0] not in by_command:
            fail(
                f"{fname}: container {containers[0].get('name')}: args must start with the `work`, `ingest` or "
                f"`serve` command, found {args}"
            )
            continue
        by_command[args[0]].append((fname, dep))
    if len(by_command["work"]) != 1:
        fail(f"k8s: expected one Deployment running `work` (the worker), found {len(by_command['work'])}")
        return errors
    if len(by_command["ingest"]) != 1:
        fail(f"k8s: expected one Deployment running `ingest`, found {len(by_command['ingest'])}")
    if len(by_command["serve"]) != 1:
        fail(f"k8s: expected one Deployment running `serve` (the job API), found {len(by_command['serve'])}")

    def check_pod(fname: str, dep: dict, keys: tuple[str, ...]) -> tuple[dict, dict, dict, str]:
        """Settings every tilegate pod shares: security context, IRSA, its ConfigMap's keys.
        Answers the pod spec, the container, the configuration it reads, and where it is."""
        pod = pod_template(dep).get("spec") or {}
        c = (pod.get("containers") or [{}])[0]
        ns = (dep.get("metadata") or {}).get("namespace")
        where = f"{fname}: container {c.get('name')}"
        psc = pod.get("securityContext") or {}
        csc = c.get("securityContext") or {}

        def effective(key: str) -> Any:
            return csc[key] if key in csc else psc.get(key)

        if effective("runAsNonRoot") is not True:
            fail(f"{where}: runAsNonRoot must be true")
        uid = effective("runAsUser")
        if not isinstance(uid, int) or uid == 0:
            fail(f"{where}: runAsUser must be a non-zero uid, found {uid}")
        if csc.get("readOnlyRootFilesystem") is not True:
            fail(f"{where}: readOnlyRootFilesystem must be true")
        if csc.get("allowPrivilegeEscalation") is not False:
            fail(f"{where}: allowPrivilegeEscalation must be false")
        if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
            fail(f"{where}: capabilities must drop ALL")
        if (effective("seccompProfile") or {}).get("type") != "RuntimeDefault":
            fail(f"{where}: seccompProfile must be RuntimeDefault")
        if pod.get("automountServiceAccountToken") is False:
            fail(f"{fname}: automountServiceAccountToken false breaks IRSA (it needs the projected token)")

        sa_name = pod.get("serviceAccountName")
        sa = named("ServiceAccount", sa_name, ns) if sa_name else None
        if sa is None:
            fail(f"{fname}: serviceAccountName {sa_name!r} has no ServiceAccount in {ns}")
        elif not ((sa.get("metadata") or {}).get("annotations") or {}).get("eks.amazonaws.com/role-arn"):
            fail(f"ServiceAccount {sa_name}: eks.amazonaws.com/role-arn annotation (IRSA) is missing")

        config: dict = {}
        for src in c.get("envFrom") or []:
            ref = (src.get("configMapRef") or {}).get("name")
            if ref:
                cm = named("ConfigMap", ref, ns)
                if cm is None:
                    fail(f"{where}: envFrom ConfigMap {ref!r} is not defined in {ns}")
                else:
                    config.update(cm.get("data") or {})
        for key in keys:
            if key not in config:
                fail(f"{where}: {key} is not set by its ConfigMap")
        return pod, c, config, where

    def policies_selecting(dep: dict, ns: str | None) -> list[tuple[str, dict]]:
        pod_labels = (pod_template(dep).get("metadata") or {}).get("labels") or {}

        def selects(pol: dict) -> bool:
            sel = (pol.get("spec") or {}).get("podSelector") or {}
            wanted = sel.get("matchLabels") or {}
            return not sel.get("matchExpressions") and all(pod_labels.get(k) == v for k, v in wanted.items())

        return [
            (n, d)
            for n, d in of_kind("NetworkPolicy")
            if (d.get("metadata") or {}).get("namespace") == ns and selects(d)
        ]

    def check_serves_nothing(obj: dict, ns: str | None, c: dict, where: str, command: str) -> None:
        """A pod that serves no port: no metrics endpoint, no port, no probe on one (it would
        fail forever), and a NetworkPolicy that admits no ingress at all."""
        args = [str(a) for a in (c.get("args") or [])]
        if "--metrics-addr" in args or any(a.startswith("--metrics-addr=") for a in args):
            fail(f"{where}: `{command}` has no metrics endpoint; drop --metrics-addr")
        if c.get("ports"):
            fail(f"{where}: `{command}` serves no port, found ports {[p.get('containerPort') for p in c['ports']]}")
        for probe_name in PROBES:
            probe = c.get(probe_name) or {}
            for kind in ("httpGet", "tcpSocket", "grpc"):
                if kind in probe:
                    fail(f"{where}: {probe_name} {kind} probes a port, but `{command}` serves none")
        policies = policies_selecting(obj, ns)
        if not policies:
            fail(f"k8s: no NetworkPolicy in {ns} selects the {command} pods")
        for pname, pol in policies:
            pwhere = f"{pname}: NetworkPolicy {(pol.get('metadata') or {}).get('name')}"
            pspec = pol.get("spec") or {}
            if "Ingress" not in (pspec.get("policyTypes") or ["Ingress"]):
                fail(f"{pwhere}: policyTypes must include Ingress")
            if pspec.get("ingress"):
                fail(
                    f"{pwhere}: selects the {command} pods, which serve nothing: ingress must be empty, "
                    f"found {show(pspec['ingress'])}"
                )

    def check_serve(found: tuple[str, dict], ns: str | None, worker_sa: str | None, ingest_sa: str | None) -> None:
        """The job API: hardened as the others, its own identity, more than one replica, listening
        beyond the loopback, probed on /healthz at its port, its JWT settings all or none; a
        ClusterIP Service to that port; a NetworkPolicy admitting that port alone."""
        sname, sdep = found
        sns = (sdep.get("metadata") or {}).get("namespace")
        spod, sc, sconfig, swhere = check_pod(sname, sdep, SERVE_CONFIG)
        sargs = [str(a) for a in (sc.get("args") or [])]
        senv = {e.get("name"): e.get("value") for e in (sc.get("env") or []) if isinstance(e, dict) and "value" in e}
        settings = {**sconfig, **senv}
        if sns != ns:
            fail(f"{sname}: must be in the worker's namespace {ns}, found {sns}")
        replicas = (sdep.get("spec") or {}).get("replicas", 1)
        if not isinstance(replicas, int) or replicas < SERVE_REPLICAS_MIN:
            fail(
                f"{sname}: replicas must be at least {SERVE_REPLICAS_MIN} (the API keeps no state; one replica is "
                f"down through every rollout and node drain), found {replicas}"
            )
        sa = spod.get("serviceAccountName")
        for other, whose in ((worker_sa, "the worker's"), (ingest_sa, "ingest's")):
            if other and sa == other:
                fail(
                    f"{swhere}: serviceAccountName {sa} is {whose}; serve needs its own (its IAM role plans jobs "
                    "and reads outputs, and may delete and write no object)"
                )

        listen = flag_value(sargs, "--listen") or str(settings.get("TILEGATE_LISTEN") or SERVE_LISTEN_DEFAULT)
        host, _, port_text = listen.rpartition(":")
        listen_port = int(port_text) if port_text.isdigit() else None
        if listen_port is None:
            fail(f"{swhere}: --listen {listen} is not HOST:PORT")
        if host.strip("[]") in LOOPBACK_HOSTS:
            fail(
                f"{swhere}: --listen {listen} is the loopback: neither the Service nor the kubelet's probes can "
                "reach it (listen on 0.0.0.0:PORT; the NetworkPolicy admits that port alone)"
            )
        ports = {p.get("name"): p.get("containerPort") for p in (sc.get("ports") or [])}
        if listen_port is not None and listen_port not in ports.values():
            fail(f"{swhere}: ports must declare the --listen port {listen_port}, found {list(ports.values())}")

        def resolve(port: Any) -> Any:
            return ports.get(port) if isinstance(port, str) else port

        for probe_name in ("livenessProbe", "readinessProbe"):
            http = (sc.get(probe_name) or {}).get("httpGet") or {}
            if http.get("path") != "/healthz":
                fail(f"{swhere}: {probe_name} must be httpGet /healthz, found {http or sc.get(probe_name)}")
            elif listen_port is not None and resolve(http.get("port")) != listen_port:
                fail(f"{swhere}: {probe_name} port {http.get('port')} is not the --listen port {listen_port}")

        present = [k for k in SERVE_JWT_KEYS if settings.get(k)]
        if present and len(present) != len(SERVE_JWT_KEYS):
            missing = [k for k in SERVE_JWT_KEYS if k not in present]
            fail(
                f"{swhere}: {', '.join(missing)} not set beside {', '.join(present)}: set the JWKS, issuer and "
                "audience together (a JWT checked without its audience or issuer is one made for anyone), "
                "or none of them (API keys alone)"
            )

        pod_labels = (pod_template(sdep).get("metadata") or {}).get("labels") or {}
        services = [
            (n, d)
            for n, d in of_kind("Service")
            if (d.get("metadata") or {}).get("namespace") == sns
            and ((d.get("spec") or {}).get("selector") or {})
            and all(pod_labels.get(k) == v for k, v in ((d.get("spec") or {}).get("selector") or {}).items())
        ]
        if len(services) != 1:
            fail(f"k8s: expected one Service in {sns} selecting the serve pods, found {len(services)}")
        for vname, svc in services:
            vwhere = f"{vname}: Service {(svc.get('metadata') or {}).get('name')}"
            vspec = svc.get("spec") or {}
            if vspec.get("type", "ClusterIP") != "ClusterIP":
                fail(
                    f"{vwhere}: type must be ClusterIP (reach it from outside through an Ingress that terminates "
                    f"TLS), found {vspec.get('type')}"
                )
            vports = vspec.get("ports") or []
            if not vports:
                fail(f"{vwhere}: no ports")
            for vp in vports:
                target = vp.get("targetPort", vp.get("port"))
                if listen_port is not None and resolve(target) != listen_port:
                    fail(
                        f"{vwhere}: port {vp.get('port')} targets {target}, not the serve container's --listen "
                        f"port {listen_port}"
                    )

        policies = policies_selecting(sdep, sns)
        if not policies:
            fail(f"k8s: no NetworkPolicy in {sns} selects the serve pods (every port of theirs would be open to all)")
        for pname, pol in policies:
            pwhere = f"{pname}: NetworkPolicy {(pol.get('metadata') or {}).get('name')}"
            pspec = pol.get("spec") or {}
            if "Ingress" not in (pspec.get("policyTypes") or ["Ingress"]):
                fail(f"{pwhere}: policyTypes must include Ingress")
            for i, rule in enumerate(pspec.get("ingress") or []):
                rports = (rule or {}).get("ports") or []
                if not rports or any(
                    (p or {}).get("endPort") or resolve((p or {}).get("port")) != listen_port for p in rports
                ):
                    fail(
                        f"{pwhere}: ingress rule {i} must be limited to the serve port {listen_port}, "
                        f"found {show(rports)}"
                    )

    # -- the worker
    fname, dep = by_command["work"][0]
    dname = (dep.get("metadata") or {}).get("name")
    ns = (dep.get("metadata") or {}).get("namespace")
    pod, c, config, where = check_pod(fname, dep, WORKER_CONFIG)
    args = [str(a) for a in (c.get("args") or [])]
    worker_sa = pod.get("serviceAccountName")
    for sink in str(config.get("TILEGATE_ANNOUNCE", "sns:")).split(","):
        if not sink.strip().startswith(ANNOUNCE_SCHEMES):
            fail(f"{where}: TILEGATE_ANNOUNCE sink {sink!r} is none of {', '.join(ANNOUNCE_SCHEMES)}")

    grace = flag_value(args, "--shutdown-grace-s")
    tgps = pod.get("terminationGracePeriodSeconds")
    if grace is None or not grace.isdigit():
        fail(f"{where}: args must set --shutdown-grace-s")
    elif not isinstance(tgps, int) or tgps < int(grace) + 5:
        fail(
            f"{fname}: terminationGracePeriodSeconds {tgps} must be at least --shutdown-grace-s {grace} + 5, "
            "so the worker exits on its own before the kubelet's SIGKILL"
        )

    metrics_addr = flag_value(args, "--metrics-addr")
    metrics_port = None
    if metrics_addr is None or not metrics_addr.rsplit(":", 1)[-1].isdigit():
        fail(f"{where}: args must set --metrics-addr HOST:PORT (the probes' endpoint)")
    else:
        metrics_port = int(metrics_addr.rsplit(":", 1)[-1])
    env = {e.get("name"): e for e in (c.get("env") or []) if isinstance(e, dict)}
    if metrics_addr is not None:
        host = metrics_addr.rsplit(":", 1)[0].strip("[]")
        if host in ("", "0.0.0.0", "::"):
            fail(
                f"{where}: --metrics-addr {metrics_addr} listens on every interface; "
                "bind the pod IP ($(POD_IP) from the downward API's status.podIP)"
            )
        # The kubelet expands $(VAR) in args only for a variable the container defines; any
        # other is passed through as text and the worker cannot parse the address.
        for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", metrics_addr):
            ref = (((env.get(var) or {}).get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if ref != "status.podIP":
                fail(f"{where}: --metrics-addr uses $({var}) but env {var} is not set from fieldRef status.podIP")
    ports = {p.get("name"): p.get("containerPort") for p in (c.get("ports") or [])}
    for probe_name in ("livenessProbe", "readinessProbe"):
        probe = c.get(probe_name)
        http = (probe or {}).get("httpGet") or {}
        if http.get("path") != "/healthz":
            fail(f"{where}: {probe_name} must be httpGet /healthz, found {http or probe}")
            continue
        port = http.get("port")
        port = ports.get(port) if isinstance(port, str) else port
        if metrics_port is not None and port != metrics_port:
            fail(f"{where}: {probe_name} port {http.get('port')} is not the --metrics-addr port {metrics_port}")

    # -- NetworkPolicy: the metrics port, from one named namespace only
    policies = policies_selecting(dep, ns)
    if not policies:
        fail(f"k8s: no NetworkPolicy in {ns} selects the worker's pods (the metrics port would be open to all)")
    for pname, pol in policies:
        pwhere = f"{pname}: NetworkPolicy {(pol.get('metadata') or {}).get('name')}"
        pspec = pol.get("spec") or {}
        if "Ingress" not in (pspec.get("policyTypes") or ["Ingress"]):
            fail(f"{pwhere}: policyTypes must include Ingress")
        for i, rule in enumerate(pspec.get("ingress") or []):
            rule = rule or {}
            peers = rule.get("from") or []
            if not peers:
                fail(f"{pwhere}: ingress rule {i} has no `from`, so it admits every source")
            for peer in peers:
                nsel = (peer or {}).get("namespaceSelector") or {}
                name = (nsel.get("matchLabels") or {}).get("kubernetes.io/metadata.name")
                if "ipBlock" in (peer or {}) or not name or nsel.get("matchExpressions"):
                    fail(
                        f"{pwhere}: ingress rule {i} must come from one namespace named by namespaceSelector "
                        f"matchLabels kubernetes.io/metadata.name, found {show(peer)}"
                    )
            rports = rule.get("ports") or []
            allowed = {metrics_port, "metrics"} if metrics_port is not None else {"metrics"}
            if not rports or any((p or {}).get("port") not in allowed for p in rports):
                fail(f"{pwhere}: ingress rule {i} must be limited to the metrics port {metrics_port}, found {show(rports)}")

    # -- the ingest Deployment: serves nothing, its own identity, the arrivals queue beside the
    # work queue
    if len(by_command["ingest"]) == 1:
        iname, idep = by_command["ingest"][0]
        ins = (idep.get("metadata") or {}).get("namespace")
        ipod, ic, iconfig, iwhere = check_pod(iname, idep, INGEST_CONFIG)
        iargs = [str(a) for a in (ic.get("args") or [])]
        replicas = (idep.get("spec") or {}).get("replicas", 1)
        if not isinstance(replicas, int) or replicas < 1:
            fail(f"{iname}: replicas must be at least 1 (nothing else plans what lands), found {replicas}")
        if ins != ns:
            fail(f"{iname}: must be in the worker's namespace {ns}, found {ins}")
        if ipod.get("serviceAccountName") == worker_sa:
            fail(
                f"{iwhere}: serviceAccountName {worker_sa} is the worker's; ingest needs its own "
                "(its IAM role sends windows and reads arrivals, the worker's writes tiles)"
            )
        # No endpoint: a probe on a port would fail forever and restart a healthy process; a
        # fatal error ends the process non-zero and the kubelet restarts it.
        check_serves_nothing(idep, ins, ic, iwhere, "ingest")
        arrivals = flag_value(iargs, "--arrivals") or str(iconfig.get("TILEGATE_ARRIVALS", ""))
        queue = str(iconfig.get("TILEGATE_QUEUE", ""))
        if not arrivals.startswith("sqs://"):
            fail(f"{iwhere}: the arrivals queue (--arrivals or TILEGATE_ARRIVALS) must be sqs://NAME, found {arrivals!r}")
        elif queue.startswith("sqs://") and arrivals != queue + "-arrivals":
            fail(
                f"{iwhere}: the arrivals queue {arrivals} is not {queue}-arrivals (the template's "
                "QueueName-arrivals, whose dead-letter queue is NAME-dlq)"
            )
        buckets = flag_values(iargs, "--bucket")
        if not buckets or any(not b.startswith("s3://") or "/" in b[len("s3://"):].rstrip("/") for b in buckets):
            fail(
                f"{iwhere}: args must name the source bucket(s) with --bucket s3://BUCKET (a notification of any "
                f"other bucket is refused), found {buckets}"
            )

    # -- the reconcile CronJob: one pass of the reconciler at a time (open jobs moved to their
    # end: missing windows enqueued, complete jobs assembled — among them the jobs the Lambda
    # worker leaves `assembling` — lost windows recorded, pending announcements delivered)
    ingest_sa = None
    if len(by_command["ingest"]) == 1:
        ingest_sa = (pod_template(by_command["ingest"][0][1]).get("spec") or {}).get("serviceAccountName")
    cronjobs: list[tuple[str, dict]] = []
    for cname, cj in of_kind("CronJob"):
        containers = (pod_template(cj).get("spec") or {}).get("containers") or []
        if len(containers) != 1:
            fail(f"{cname}: expected one container, found {len(containers)}")
            continue
        cargs = [str(a) for a in (containers[0].get("args") or [])]
        if not cargs or cargs[0] != "reconcile-jobs":
            fail(f"{cname}: container {containers[0].get('name')}: args must start with the `reconcile-jobs` command, found {cargs}")
            continue
        cronjobs.append((cname, cj))
    if len(cronjobs) != 1:
        fail(
            f"k8s: expected one CronJob running `reconcile-jobs --once` (it moves every open job to its end, and "
            f"assembles the jobs the Lambda worker leaves `assembling`), found {len(cronjobs)}"
        )
    else:
        aname, cj = cronjobs[0]
        ans = (cj.get("metadata") or {}).get("namespace")
        cwhere = f"{aname}: CronJob {(cj.get('metadata') or {}).get('name')}"
        apod, ac, aconfig, awhere = check_pod(aname, cj, RECONCILE_CONFIG)
        aargs = [str(a) for a in (ac.get("args") or [])]
        if ans != ns:
            fail(f"{aname}: must be in the worker's namespace {ns}, found {ans}")
        if "--once" not in aargs or flag_value(aargs, "--every") is not None or "--every" in aargs:
            fail(
                f"{awhere}: args must be `reconcile-jobs --once` (one pass, then exit; with --every the run would "
                f"never end and activeDeadlineSeconds would fail it), found {aargs}"
            )
        sinks = flag_value(aargs, "--announce") or aconfig.get("TILEGATE_ANNOUNCE")
        if not sinks:
            fail(
                f"{awhere}: TILEGATE_ANNOUNCE (or --announce) must be set: the reconciler delivers the "
                "announcements left pending, to nowhere without sinks"
            )
        for sink in str(sinks or "sns:").split(","):
            if not sink.strip().startswith(ANNOUNCE_SCHEMES):
                fail(f"{awhere}: TILEGATE_ANNOUNCE sink {sink!r} is none of {', '.join(ANNOUNCE_SCHEMES)}")
        if ingest_sa and apod.get("serviceAccountName") == ingest_sa:
            fail(
                f"{awhere}: serviceAccountName {ingest_sa} is ingest's, whose IAM role neither reads tiles "
                "nor writes scenes; use the worker's (or one of its own with the same grants)"
            )
        check_serves_nothing(cj, ans, ac, awhere, "reconcile-jobs")

        cspec = cj.get("spec") or {}
        schedule = cspec.get("schedule")
        if not isinstance(schedule, str) or not (len(schedule.split()) == 5 or schedule.startswith("@")):
            fail(f"{cwhere}: schedule must be a cron expression, found {schedule!r}")
        if cspec.get("concurrencyPolicy") != "Forbid":
            fail(
                f"{cwhere}: concurrencyPolicy must be Forbid (one run at a time: a run still assembling a "
                f"large scene makes the next one skip), found {cspec.get('concurrencyPolicy', 'Allow (the default)')}"
            )
        deadline = cspec.get("startingDeadlineSeconds")
        if not isinstance(deadline, int) or deadline < 1:
            fail(f"{cwhere}: startingDeadlineSeconds must be a positive number of seconds, found {deadline}")
        for key, default in (("successfulJobsHistoryLimit", 3), ("failedJobsHistoryLimit", 1)):
            value = cspec.get(key, default)
            if not isinstance(value, int) or not 0 <= value <= ASSEMBLE_HISTORY_MAX:
                fail(f"{cwhere}: {key} must be 0…{ASSEMBLE_HISTORY_MAX}, found {value}")
        jspec = ((cspec.get("jobTemplate") or {}).get("spec")) or {}
        backoff = jspec.get("backoffLimit")
        if not isinstance(backoff, int) or not 0 <= backoff <= ASSEMBLE_BACKOFF_MAX:
            fail(
                f"{cwhere}: jobTemplate backoffLimit must be set, 0…{ASSEMBLE_BACKOFF_MAX} (the default 6 "
                f"reruns a failing assembly of a large scene), found {backoff}"
            )
        active = jspec.get("activeDeadlineSeconds")
        if not isinstance(active, int) or active < 1:
            fail(
                f"{cwhere}: jobTemplate activeDeadlineSeconds must be set (with Forbid, a run that hangs "
                f"would hold off every later one), found {active}"
            )
        if apod.get("restartPolicy") != "Never":
            fail(
                f"{awhere}: restartPolicy must be Never (a retry is a new pod, counted by backoffLimit), "
                f"found {apod.get('restartPolicy')}"
            )
        memory = ((ac.get("resources") or {}).get("limits") or {}).get("memory")
        mem_bytes = quantity_bytes(memory) if memory is not None else None
        if mem_bytes is None:
            fail(f"{awhere}: resources.limits.memory must be set (the assembler holds the scene in memory), found {memory}")
        elif lambda_max_bytes is not None and mem_bytes * ASSEMBLE_MEMORY_SHARE <= lambda_max_bytes:
            fail(
                f"{awhere}: memory limit {memory} assembles jobs of at most {int(mem_bytes * ASSEMBLE_MEMORY_SHARE)} "
                f"bytes ({ASSEMBLE_MEMORY_SHARE} x), but the jobs the Lambda worker leaves `assembling` are larger "
                f"than its TILEGATE_ASSEMBLE_MAX_BYTES {lambda_max_bytes}"
            )

    # -- the job API: a Deployment of `serve`, its Service and its NetworkPolicy
    if len(by_command["serve"]) == 1:
        check_serve(by_command["serve"][0], ns, worker_sa, ingest_sa)

    # -- KEDA: structural check (kubernetes-validate has no schema for these CRDs)
    sos = of_kind("ScaledObject")
    if len(sos) != 1:
        fail(f"k8s: expected one KEDA ScaledObject, found {len(sos)}")
        return errors
    sname, so = sos[0]
    where = f"{sname}: ScaledObject {(so.get('metadata') or {}).get('name')}"
    if so.get("apiVersion") != "keda.sh/v1alpha1":
        fail(f"{where}: apiVersion must be keda.sh/v1alpha1")
    if (so.get("metadata") or {}).get("namespace") != ns:
        fail(f"{where}: must be in the Deployment's namespace {ns}")
    spec = so.get("spec") or {}
    for key in sorted(set(spec) - KEDA_SCALEDOBJECT_SPEC):
        fail(f"{where}: unknown key spec.{key}")
    target = spec.get("scaleTargetRef") or {}
    if target.get("name") != dname or target.get("kind", "Deployment") != "Deployment":
        fail(f"{where}: scaleTargetRef must name the Deployment {dname}, found {target}")
    lo, hi = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi and hi >= 1):
        fail(f"{where}: need 0 <= minReplicaCount <= maxReplicaCount, found {lo}, {hi}")
    triggers = spec.get("triggers") or []
    sqs = [tr for tr in triggers if isinstance(tr, dict) and tr.get("type") == "aws-sqs-queue"]
    if len(sqs) != 1:
        fail(f"{where}: expected one aws-sqs-queue trigger, found {len(sqs)}")
        return errors
    tr = sqs[0]
    for key in sorted(set(tr) - KEDA_TRIGGER_KEYS):
        fail(f"{where}: unknown trigger key {key}")
    md = tr.get("metadata") or {}
    for key, value in md.items():
        if key not in AWS_SQS_METADATA:
            fail(f"{where}: unknown aws-sqs-queue metadata {key}")
        if not isinstance(value, str):
            fail(f"{where}: trigger metadata {key} must be a string (KEDA's schema is map of string), found {value!r}")
    url = md.get("queueURL", "")
    if not url:
        fail(f"{where}: trigger metadata queueURL is required")
    if not str(md.get("queueLength", "")).isdigit() or int(md.get("queueLength", "0")) < 1:
        fail(f"{where}: trigger metadata queueLength must be a positive integer string")
    if not md.get("awsRegion"):
        fail(f"{where}: trigger metadata awsRegion is required")
    queue = str(config.get("TILEGATE_QUEUE", ""))
    if url and queue.startswith("sqs://") and url.rstrip("/").rsplit("/", 1)[-1] != queue[len("sqs://"):]:
        fail(f"{where}: queueURL {url} is not the worker's queue {queue}")
    m = re.match(r"https://sqs\.([a-z0-9-]+)\.amazonaws\.com/", str(url))
    if m and md.get("awsRegion") and m.group(1) != md.get("awsRegion"):
        fail(f"{where}: queueURL region {m.group(1)} differs from awsRegion {md.get('awsRegion')}")
    if config.get("AWS_REGION") and md.get("awsRegion") and config["AWS_REGION"] != md["awsRegion"]:
        fail(f"{where}: awsRegion {md['awsRegion']} differs from the worker's AWS_REGION {config['AWS_REGION']}")
    auth = (tr.get("authenticationRef") or {}).get("name")
    ta = named("TriggerAuthentication", auth, ns) if auth else None
    if ta is None:
        fail(f"{where}: authenticationRef {auth!r} has no TriggerAuthentication in {ns}")
    else:
        if ta.get("apiVersion") != "keda.sh/v1alpha1":
            fail(f"TriggerAuthentication {auth}: apiVersion must be keda.sh/v1alpha1")
        tspec = ta.get("spec") or {}
        for key in sorted(set(tspec) - KEDA_TRIGGERAUTH_SPEC):
            fail(f"TriggerAuthentication {auth}: unknown key spec.{key}")
        if (tspec.get("podIdentity") or {}).get("provider") != "aws":
            fail(f"TriggerAuthentication {auth}: podIdentity.provider must be aws (IRSA)")
    return errors




# --------------------------------------------------------------------------- self-test


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


def run_checks(template: dict, k8s: dict[str, list[dict]]) -> list[str]:
    return check_template(template) + check_k8s(k8s, lambda_assemble_max_bytes(template))


def self_test(template: dict, k8s: dict[str, list[dict]]) -> int:
    passed = failed = 0
    base = run_checks(template, k8s)
    if base:
        print("self-test: the real files must pass first:")
        for e in base:
            print(f"  FAIL: {e}")
        return 1
    fixtures = sorted(TESTS_DIR.glob("*.yaml"))
    if not fixtures:
        print(f"self-test: no fixtures in {TESTS_DIR}")
        return 1
    for path in fixtures:
        with path.open(encoding="utf-8") as f:
            fx = yaml.load(f, Loader=CfnLoader)  # noqa: S506 - a SafeLoader subclass
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
        errors = run_checks(tpl, kube)
        hits = [e for e in errors if fx["expect"] in e]
        if hits:
            print(f"  ok   {path.name}: {hits[0]}")
            passed += 1
        else:
            print(f"  FAIL {path.name}: expected a failure containing {fx['expect']!r}, got {errors or 'none'}")
            failed += 1
    print(f"self-test: {passed} of {passed + failed} bad fixtures refused as expected")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--template", type=pathlib.Path, default=TEMPLATE)
    ap.add_argument("--k8s", type=pathlib.Path, default=K8S_DIR)
    ap.add_argument("--self-test", action="store_true", help="also prove that every fixture in tests/ fails")
    args = ap.parse_args()

    template = load_template(args.template)
    k8s = load_k8s(args.k8s)
    if args.self_test:
        return self_test(template, k8s)
    errors = run_checks(template, k8s)
    for e in errors:
        print(f"FAIL: {e}")
    if errors:
        print(f"check: {len(errors)} problem(s)")
        return 1
    print(f"check: ok ({args.template.name} and {len(k8s)} Kubernetes manifests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
