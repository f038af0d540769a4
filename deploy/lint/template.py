"""The SAM template's own rules: the resources the code names (the tables and queues of
deploy/facts.json), each function's role (iam.py, grants.yaml), queue and event-source wiring,
the arrivals rule and queue policy, the functions' environments (environment.yaml), the job
API's authorizer and routes, and the reconcile function's schedule.

Left to checkov: bucket public-access blocks and encryption (CKV_AWS_53-56, CKV_AWS_19), table
point-in-time recovery (CKV_AWS_28), topic encryption (CKV_AWS_26), log-group retention
(CKV_AWS_66), reserved concurrency (CKV_AWS_115), API access logs (CKV_AWS_95), IAM wildcards and
unconstrained grants (CKV_AWS_62, 63, 107-111); to cfn-lint: the template's schema."""

from __future__ import annotations

import json
import re
from typing import Any

from . import Finding, data, facts
from .cfn import Template, as_list, duration_seconds, find_one, resolve_number, rule, show, sub_parts
from .iam import check_permission_sources, check_reconcile_schedule, check_role, function_log_group, grants_of

# SQS's limit on a queue name; the names the deployment derives from QueueName (the dead-letter
# suffix is the code's).
SQS_NAME_MAX = 80
ARRIVALS_SUFFIX = "-arrivals"
# What the source bucket's rule matches: objects created in that bucket, nothing else.
ARRIVALS_PATTERN = {
    "source": ["aws.s3"],
    "detail-type": ["Object Created"],
    "detail": {"bucket": {"name": [{"Ref": "SourceBucketName"}]}},
}
# The assembler holds a scene in memory: the code's default TILEGATE_ASSEMBLE_MAX_BYTES is 4 GiB
# for a 10 GiB function, and no function may assemble more than that share of its memory.
ASSEMBLE_MEMORY_SHARE = 0.4
# The routes the HTTP API may answer without its authorizer (method, path); every other route
# needs the JWT authorizer, and ANY /v1/{proxy+} must be one of them.
PUBLIC_ROUTES = {("GET", "/"), ("GET", "/healthz"), ("GET", "/v1/openapi.json")}
V1_ROUTE = ("ANY", "/v1/{proxy+}")
# An HTTP API waits at most this long for its integration (payload format 2.0).
HTTP_API_INTEGRATION_MAX_S = 30
FUNCTIONS = ("worker", "ingest", "serve", "reconcile")


def queue_suffixes() -> list[str]:
    dlq = facts()["dead_letter_suffix"]
    return [dlq, ARRIVALS_SUFFIX, ARRIVALS_SUFFIX + dlq]


def expected_env(function: str, found: dict[str, Any]) -> dict[str, str | None]:
    """environment.yaml's values for one function, with the found resources' logical IDs."""
    out: dict[str, str | None] = {}
    for key, value in data("environment.yaml")["functions"][function].items():
        missing = False

        def sub(m: re.Match) -> str:
            nonlocal missing
            logical = found.get(m.group(1))
            missing = missing or not logical
            return str(logical or "")

        spelled = re.sub(r"<([a-z:-]+)>", sub, str(value))
        out[key] = None if missing else spelled
    return out


def check_template(doc: dict) -> list[Finding]:
    t = Template(doc)
    if t.doc.get("Transform") != "AWS::Serverless-2016-10-31":
        t.fail("template: Transform must be AWS::Serverless-2016-10-31")

    # -- the resources the grants must name, found by what they are, not by their logical IDs
    buckets = t.of_type("AWS::S3::Bucket")
    bucket = buckets[0] if len(buckets) == 1 else None
    if bucket is None:
        t.fail(f"template: expected exactly one AWS::S3::Bucket (the output bucket), found {len(buckets)}")
    dlq_suffix = facts()["dead_letter_suffix"]
    found: dict[str, Any] = {"bucket": bucket}
    for key, suffix, what in (
        ("queue:work", "", "work queue"),
        ("queue:dlq", dlq_suffix, "dead-letter queue"),
        ("queue:arrivals", ARRIVALS_SUFFIX, "arrivals queue"),
        ("queue:arrivals-dlq", ARRIVALS_SUFFIX + dlq_suffix, "arrivals dead-letter queue"),
    ):
        name = {"Fn::Sub": "${QueueName}" + suffix} if suffix else {"Ref": "QueueName"}
        found[key] = find_one(t, "AWS::SQS::Queue", "QueueName", name, what)
    found["tables"] = tables = {
        suffix: find_one(
            t, "AWS::DynamoDB::Table", "TableName", {"Fn::Sub": "${TablePrefix}-" + suffix}, f"{suffix} table"
        )
        for suffix in facts()["tables"]
    }
    topics = t.of_type("AWS::SNS::Topic")
    found["topic"] = topics[0] if len(topics) == 1 else None
    if found["topic"] is None:
        t.fail(f"template: expected exactly one AWS::SNS::Topic (the announcements), found {len(topics)}")

    functions = {
        name: find_one(
            t, "AWS::Serverless::Function", "FunctionName", {"Fn::Sub": "${TablePrefix}-" + name}, f"{name} function"
        )
        for name in FUNCTIONS
    }
    for logical in t.of_type("AWS::Serverless::Function"):
        if logical not in functions.values():
            t.fail(
                f"resource {logical}: another function is not allowed (only PREFIX-worker, PREFIX-ingest, "
                "PREFIX-serve and PREFIX-reconcile)"
            )
    check_permission_sources(t)
    check_queue_name_length(t)

    # -- each function: its role, its environment, what feeds it
    roles: dict[str, str] = {}
    for name in FUNCTIONS:
        logical = functions[name]
        if not logical:
            continue
        fprops = t.props(logical)
        grants = grants_of(name, found, function_log_group(t, logical, fprops))
        role = check_role(t, logical, fprops, grants, name)
        if role and role in roles:
            whose = "the worker's" if roles[role] == functions["worker"] else f"{roles[role]}'s"
            t.fail(
                f"function {logical}: the {name} function must have its own role, not {whose} {role}",
                rule="iam-own-role",
            )
        elif role:
            roles[role] = logical
        check_function(t, logical, fprops, expected_env(name, found))
    worker, ingest, serve, reconcile = (functions[n] for n in FUNCTIONS)
    if worker:
        wprops = t.props(worker)
        check_queues(
            t, worker, wprops, found["queue:work"], found["queue:dlq"], "work queue", "dead-letter queue", batch_size=10
        )
        check_assembly_memory(t, worker, wprops)
    if ingest:
        iprops = t.props(ingest)
        check_queues(
            t,
            ingest,
            iprops,
            found["queue:arrivals"],
            found["queue:arrivals-dlq"],
            "arrivals queue",
            "arrivals dead-letter queue",
        )
        check_ingest_config(t, ingest, iprops)
    if serve:
        check_serve_timeouts(t, serve, t.props(serve))
    check_http_api(t, serve)
    if reconcile:
        cprops = t.props(reconcile)
        check_assembly_memory(t, reconcile, cprops)
        if cprops.get("Events"):
            t.fail(
                f"function {reconcile}: no event source (its schedule is an AWS::Scheduler::Schedule)", rule="schedule"
            )
        schedule_role = check_reconcile_schedule(t, reconcile)
        if schedule_role:
            roles[schedule_role] = reconcile
    extra = sorted(set(t.of_type("AWS::IAM::Role")) - set(roles))
    if extra:
        t.fail(f"template: the only AWS::IAM::Roles may be the functions' own, found also {extra}", rule="iam-sources")
    if found["queue:arrivals"]:
        rule = check_arrivals_rule(t, found["queue:arrivals"])
        check_queue_policies(t, found["queue:arrivals"], rule)
    check_tables(t, tables)
    check_bucket(t, bucket)
    return t.errors


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
        value = int(raw) if raw.isdigit() else int(facts()["lambda_assemble_max_bytes"])
        most = value if most is None else max(most, value)
    return most


@rule("queue-name-length")
def check_queue_name_length(t: Template) -> None:
    """Every queue name the code derives from QueueName must fit SQS's limit."""
    p = t.parameters.get("QueueName") or {}
    longest = None
    if "MaxLength" in p and str(p["MaxLength"]).isdigit():
        longest = int(p["MaxLength"])
    m = re.search(r"\{(?:\d+)?,(\d+)\}\$$", str(p.get("AllowedPattern", "")))
    if m:
        longest = min(longest, int(m.group(1))) if longest is not None else int(m.group(1))
    suffix = max(queue_suffixes(), key=len)
    if longest is None:
        t.fail(
            f"parameter QueueName: bound its length (MaxLength or AllowedPattern) so QueueName{suffix} fits {SQS_NAME_MAX}"
        )
    elif longest + len(suffix) > SQS_NAME_MAX:
        t.fail(
            f"parameter QueueName: allows {longest} characters, so QueueName{suffix} may exceed SQS's "
            f"{SQS_NAME_MAX} (at most {SQS_NAME_MAX - len(suffix)})"
        )


@rule("queue-wiring")
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


@rule("arrivals-rule")
def check_arrivals_rule(t: Template, arrivals: str) -> str | None:
    """The EventBridge rule that brings the source bucket's new objects to the arrivals queue."""
    rules = t.of_type("AWS::Events::Rule")
    if len(rules) != 1:
        t.fail(
            f"template: expected exactly one AWS::Events::Rule (source bucket to arrivals queue), found {len(rules)}"
        )
        return None
    rule = rules[0]
    rp = t.props(rule)
    if rp.get("EventBusName", "default") != "default":
        t.fail(
            f"rule {rule}: must be on the default event bus (where S3 sends its events), found {show(rp.get('EventBusName'))}"
        )
    if rp.get("State", "ENABLED") != "ENABLED":
        t.fail(f"rule {rule}: State must be ENABLED, found {rp.get('State')}")
    if rp.get("EventPattern") != ARRIVALS_PATTERN:
        t.fail(
            f"rule {rule}: EventPattern must be {ARRIVALS_PATTERN} (objects created in the source bucket, "
            f"nothing else), found {rp.get('EventPattern')}"
        )
    targets = as_list(rp.get("Targets"))
    if len(targets) != 1 or t.canon((targets[0] or {}).get("Arn")) != f"${{{arrivals}.Arn}}":
        t.fail(
            f"rule {rule}: must target !GetAtt {arrivals}.Arn alone, found {[show((x or {}).get('Arn')) for x in targets]}"
        )
    else:
        for key in ("Input", "InputPath", "InputTransformer"):
            if key in targets[0]:
                t.fail(
                    f"rule {rule}: the target must deliver the event as it is (the ingest function parses it), found {key}"
                )
    return rule


@rule("queue-policy")
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
            if (
                not isinstance(principal, dict)
                or set(principal) != {"Service"}
                or as_list(principal.get("Service")) != ["events.amazonaws.com"]
            ):
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


@rule("ingest-config")
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
    fields = set(facts()["ingest_fields"])
    unknown = sorted(set(config) - fields)
    if unknown:
        t.fail(f"{where}: unknown field(s) {unknown} (the code refuses them; known: {sorted(fields)})")
    if config.get("buckets") != [f"s3://{placeholder}"]:
        t.fail(
            f'{where}: buckets must be exactly ["s3://${{SourceBucketName}}"] (a notification of any other '
            f"bucket must be refused; the role reads no other), found {config.get('buckets')}"
        )
    recipe = config.get("recipe")
    if recipe is not None and not (isinstance(recipe, dict) and "operation" in recipe and "window" in recipe):
        t.fail(f"{where}: recipe must be an object with operation and window, found {recipe}")


@rule("serve-timeouts")
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
    raw = env.get("TILEGATE_REQUEST_TIMEOUT", facts()["serve_request_timeout"])  # the code's default
    seconds = duration_seconds(raw)
    if seconds is None:
        t.fail(f"function {function}: environment TILEGATE_REQUEST_TIMEOUT {show(raw)} is not a duration (25s, 1m)")
    elif seconds >= min(timeout, HTTP_API_INTEGRATION_MAX_S):
        t.fail(
            f"function {function}: TILEGATE_REQUEST_TIMEOUT {raw} ({seconds:g} s) is not below the function's "
            f"Timeout {timeout} s and the HTTP API's {HTTP_API_INTEGRATION_MAX_S} s: a slow request would be cut "
            "off instead of answered `request-timeout`"
        )


@rule("http-api")
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
        if issuer != data("environment.yaml")["functions"]["serve"]["TILEGATE_JWT_ISSUER"]:
            t.fail(
                f"{where}, authorizer {name}: issuer must be !Ref JwtIssuer (the function's TILEGATE_JWT_ISSUER), "
                f"found {show(jc.get('issuer'))}"
            )
        if audience != [data("environment.yaml")["functions"]["serve"]["TILEGATE_JWT_AUDIENCE"]]:
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


@rule("table-schema")
def check_tables(t: Template, tables: dict[str, str | None]) -> None:
    """Each table as the code creates it (deploy/facts.json): keys, attribute types, indexes."""
    for suffix, logical in tables.items():
        if not logical:
            continue
        spec = facts()["tables"][suffix]
        keys = [tuple(k) for k in spec["key"]]
        attrs = spec["attributes"]
        gsis = {name: [tuple(k) for k in key] for name, key in spec["indexes"].items()}
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
            got_gsis[g.get("IndexName")] = [
                (k.get("AttributeName"), k.get("KeyType")) for k in as_list(g.get("KeySchema"))
            ]
            if (g.get("Projection") or {}).get("ProjectionType") != "ALL":
                t.fail(f"{where}: index {g.get('IndexName')} must project ALL")
        if got_gsis != gsis:
            t.fail(f"{where}: GlobalSecondaryIndexes must be {gsis}, found {got_gsis}")
        if p.get("LocalSecondaryIndexes"):
            t.fail(f"{where}: LocalSecondaryIndexes are not expected")
        if p.get("BillingMode") != "PAY_PER_REQUEST":
            t.fail(f"{where}: BillingMode must be PAY_PER_REQUEST")


@rule("bucket")
def check_bucket(t: Template, bucket: str | None) -> None:
    """The output bucket outlives the stack and drops abandoned multipart uploads."""
    if not bucket:
        return
    r, p = t.resources[bucket], t.props(bucket)
    if r.get("DeletionPolicy") != "Retain":
        t.fail(f"bucket {bucket}: DeletionPolicy must be Retain")
    rules = as_list((p.get("LifecycleConfiguration") or {}).get("Rules"))
    if not any(
        r.get("Status") == "Enabled"
        and str((r.get("AbortIncompleteMultipartUpload") or {}).get("DaysAfterInitiation")) == "1"
        for r in rules
    ):
        t.fail(f"bucket {bucket}: needs an enabled lifecycle rule aborting incomplete multipart uploads after 1 day")


@rule("function-build")
def check_function(t: Template, function: str, fprops: dict, expected: dict[str, str | None]) -> None:
    """The function's environment (environment.yaml) and how it is built and run."""
    env = ((fprops.get("Environment") or {}).get("Variables")) or {}
    for key, want in expected.items():
        if want is not None and t.canon(env.get(key)) != want:
            t.fail(
                f"function {function}: environment {key} must be {want}, found {show(env.get(key))}",
                rule="function-env",
            )
    if "TILEGATE_MODE" not in expected and "TILEGATE_MODE" in env:
        t.fail(
            f"function {function}: environment TILEGATE_MODE must not be set (it would not run as the worker)",
            rule="function-env",
        )
    if fprops.get("Runtime") != "provided.al2023" or fprops.get("Handler") != "bootstrap":
        t.fail(f"function {function}: Runtime provided.al2023 with Handler bootstrap expected")
    if fprops.get("Architectures") != ["x86_64"]:
        t.fail(f"function {function}: Architectures must be [x86_64] (the GDAL layer's architecture)")
    if {"Ref": "GdalLayerArn"} not in as_list(fprops.get("Layers")):
        t.fail(f"function {function}: Layers must include !Ref GdalLayerArn (GDAL's runtime libraries)")
    meta = t.resources[function].get("Metadata") or {}
    binary = (meta.get("BuildProperties") or {}).get("Binary")
    if meta.get("BuildMethod") != "rust-cargolambda" or binary != "tilegate-lambda":
        t.fail(f"function {function}: Metadata must build the tilegate-lambda binary with rust-cargolambda")


@rule("assemble-memory")
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
            f"{memory} MB (the code's default, {facts()['lambda_assemble_max_bytes']}, is for a 10 GiB function)"
        )
    elif int(most) > limit:
        t.fail(
            f"function {function}: TILEGATE_ASSEMBLE_MAX_BYTES {most} is more than {ASSEMBLE_MEMORY_SHARE} x its "
            f"{memory} MB ({limit}); the assembler holds the scene in memory"
        )
