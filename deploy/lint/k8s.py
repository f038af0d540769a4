"""The Kubernetes manifests' own rules: which Deployment runs which command, each pod's identity
(IRSA) and ConfigMap, the worker's shutdown grace, metrics endpoint and probes, the ingest and
reconcile pods serving nothing, the job API's replicas, listen address, Service and JWT
settings, the NetworkPolicies against the ports each pod serves, the reconcile CronJob's
bounds, and the KEDA scaler watching the worker's own queue.

Left to checkov: the pods' security contexts (CKV_K8S_20 no privilege escalation, CKV_K8S_22
read-only root, CKV_K8S_23 and CKV_K8S_40 non-root, CKV_K8S_28 and CKV_K8S_37 capabilities
dropped, CKV_K8S_31 seccomp RuntimeDefault), resource limits, probes; to schemas.py: every
object's shape, KEDA's included."""

from __future__ import annotations

import re
from typing import Any, Callable

from . import Finding, data, facts
from .cfn import show
from .template import ASSEMBLE_MEMORY_SHARE

# A JWT is verified with the key set, against the issuer and for the audience: all three or
# none (API keys alone). Checked without an audience, a token the issuer made for any other
# application would do.
SERVE_JWT_KEYS = ("TILEGATE_JWKS", "TILEGATE_JWT_ISSUER", "TILEGATE_JWT_AUDIENCE")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
# The job API keeps no state: two replicas keep it up through a node drain or a rollout.
SERVE_REPLICAS_MIN = 2
# The CronJob's bounds: a failed run is retried at most this often before the Job fails, and at
# most this many finished Jobs of each outcome are kept.
ASSEMBLE_BACKOFF_MAX = 3
ASSEMBLE_HISTORY_MAX = 5
QUANTITY_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "Ei": 1 << 60,
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


def check_k8s(files: dict[str, list[dict]], lambda_max_bytes: int | None = None) -> list[Finding]:
    errors: list[Finding] = []
    commands = data("environment.yaml")["commands"]

    def failing(rule: str) -> Callable[[str], None]:
        """Where each part below records its findings: as `rule`'s."""
        return lambda msg: errors.append(Finding(rule, msg))

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
    fail = failing("k8s-commands")
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

    def check_pod(fname: str, dep: dict, keys: list[str]) -> tuple[dict, dict, dict, str]:
        """Settings every tilegate pod shares: IRSA, its ConfigMap's keys.
        Answers the pod spec, the container, the configuration it reads, and where it is."""
        fail = failing("k8s-identity")
        fail_config = failing("k8s-config")
        pod = pod_template(dep).get("spec") or {}
        c = (pod.get("containers") or [{}])[0]
        ns = (dep.get("metadata") or {}).get("namespace")
        where = f"{fname}: container {c.get('name')}"
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
                    fail_config(f"{where}: envFrom ConfigMap {ref!r} is not defined in {ns}")
                else:
                    config.update(cm.get("data") or {})
        for key in keys:
            if key not in config:
                fail_config(f"{where}: {key} is not set by its ConfigMap")
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
        fail = failing("k8s-serves-nothing")
        fail_network = failing("k8s-network")
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
            fail_network(f"k8s: no NetworkPolicy in {ns} selects the {command} pods")
        for pname, pol in policies:
            pwhere = f"{pname}: NetworkPolicy {(pol.get('metadata') or {}).get('name')}"
            pspec = pol.get("spec") or {}
            if "Ingress" not in (pspec.get("policyTypes") or ["Ingress"]):
                fail_network(f"{pwhere}: policyTypes must include Ingress")
            if pspec.get("ingress"):
                fail_network(
                    f"{pwhere}: selects the {command} pods, which serve nothing: ingress must be empty, "
                    f"found {show(pspec['ingress'])}"
                )

    def check_serve(found: tuple[str, dict], ns: str | None, worker_sa: str | None, ingest_sa: str | None) -> None:
        """The job API: its own identity, more than one replica, listening
        beyond the loopback, probed on /healthz at its port, its JWT settings all or none; a
        ClusterIP Service to that port; a NetworkPolicy admitting that port alone."""
        fail = failing("k8s-serve")
        fail_service = failing("k8s-service")
        fail_network = failing("k8s-network")
        sname, sdep = found
        sns = (sdep.get("metadata") or {}).get("namespace")
        spod, sc, sconfig, swhere = check_pod(sname, sdep, commands["serve"])
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

        listen = flag_value(sargs, "--listen") or str(settings.get("TILEGATE_LISTEN") or facts()["serve_listen"])
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
            fail_service(f"k8s: expected one Service in {sns} selecting the serve pods, found {len(services)}")
        for vname, svc in services:
            vwhere = f"{vname}: Service {(svc.get('metadata') or {}).get('name')}"
            vspec = svc.get("spec") or {}
            if vspec.get("type", "ClusterIP") != "ClusterIP":
                fail_service(
                    f"{vwhere}: type must be ClusterIP (reach it from outside through an Ingress that terminates "
                    f"TLS), found {vspec.get('type')}"
                )
            vports = vspec.get("ports") or []
            if not vports:
                fail_service(f"{vwhere}: no ports")
            for vp in vports:
                target = vp.get("targetPort", vp.get("port"))
                if listen_port is not None and resolve(target) != listen_port:
                    fail_service(
                        f"{vwhere}: port {vp.get('port')} targets {target}, not the serve container's --listen "
                        f"port {listen_port}"
                    )

        policies = policies_selecting(sdep, sns)
        if not policies:
            fail_network(
                f"k8s: no NetworkPolicy in {sns} selects the serve pods (every port of theirs would be open to all)"
            )
        for pname, pol in policies:
            pwhere = f"{pname}: NetworkPolicy {(pol.get('metadata') or {}).get('name')}"
            pspec = pol.get("spec") or {}
            if "Ingress" not in (pspec.get("policyTypes") or ["Ingress"]):
                fail_network(f"{pwhere}: policyTypes must include Ingress")
            for i, rule in enumerate(pspec.get("ingress") or []):
                rports = (rule or {}).get("ports") or []
                if not rports or any(
                    (p or {}).get("endPort") or resolve((p or {}).get("port")) != listen_port for p in rports
                ):
                    fail_network(
                        f"{pwhere}: ingress rule {i} must be limited to the serve port {listen_port}, "
                        f"found {show(rports)}"
                    )

    # -- the worker
    fail = failing("k8s-worker")
    fname, dep = by_command["work"][0]
    dname = (dep.get("metadata") or {}).get("name")
    ns = (dep.get("metadata") or {}).get("namespace")
    pod, c, config, where = check_pod(fname, dep, commands["work"])
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
    fail = failing("k8s-network")
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
                fail(
                    f"{pwhere}: ingress rule {i} must be limited to the metrics port {metrics_port}, found {show(rports)}"
                )

    # -- the ingest Deployment: serves nothing, its own identity, the arrivals queue beside the
    # work queue
    fail = failing("k8s-ingest")
    if len(by_command["ingest"]) == 1:
        iname, idep = by_command["ingest"][0]
        ins = (idep.get("metadata") or {}).get("namespace")
        ipod, ic, iconfig, iwhere = check_pod(iname, idep, commands["ingest"])
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
            fail(
                f"{iwhere}: the arrivals queue (--arrivals or TILEGATE_ARRIVALS) must be sqs://NAME, found {arrivals!r}"
            )
        elif queue.startswith("sqs://") and arrivals != queue + "-arrivals":
            fail(
                f"{iwhere}: the arrivals queue {arrivals} is not {queue}-arrivals (the template's "
                "QueueName-arrivals, whose dead-letter queue is NAME-dlq)"
            )
        buckets = flag_values(iargs, "--bucket")
        if not buckets or any(not b.startswith("s3://") or "/" in b[len("s3://") :].rstrip("/") for b in buckets):
            fail(
                f"{iwhere}: args must name the source bucket(s) with --bucket s3://BUCKET (a notification of any "
                f"other bucket is refused), found {buckets}"
            )

    # -- the reconcile CronJob: one pass of the reconciler at a time (open jobs moved to their
    # end: missing windows enqueued, complete jobs assembled — among them the jobs the Lambda
    # worker leaves `assembling` — lost windows recorded, pending announcements delivered)
    fail = failing("k8s-reconcile")
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
            fail(
                f"{cname}: container {containers[0].get('name')}: args must start with the `reconcile-jobs` command, found {cargs}"
            )
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
        apod, ac, aconfig, awhere = check_pod(aname, cj, commands["reconcile-jobs"])
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
            fail(
                f"{awhere}: resources.limits.memory must be set (the assembler holds the scene in memory), found {memory}"
            )
        elif lambda_max_bytes is not None and mem_bytes * ASSEMBLE_MEMORY_SHARE <= lambda_max_bytes:
            fail(
                f"{awhere}: memory limit {memory} assembles jobs of at most {int(mem_bytes * ASSEMBLE_MEMORY_SHARE)} "
                f"bytes ({ASSEMBLE_MEMORY_SHARE} x), but the jobs the Lambda worker leaves `assembling` are larger "
                f"than its TILEGATE_ASSEMBLE_MAX_BYTES {lambda_max_bytes}"
            )

    # -- the job API: a Deployment of `serve`, its Service and its NetworkPolicy
    if len(by_command["serve"]) == 1:
        check_serve(by_command["serve"][0], ns, worker_sa, ingest_sa)

    # -- KEDA: the scaler watches the worker's queue, in its region, as its identity (the
    # objects' shape is KEDA's CRD schema's, schemas.py)
    fail = failing("keda-scaler")
    sos = of_kind("ScaledObject")
    if len(sos) != 1:
        fail(f"k8s: expected one KEDA ScaledObject, found {len(sos)}")
        return errors
    sname, so = sos[0]
    where = f"{sname}: ScaledObject {(so.get('metadata') or {}).get('name')}"
    if (so.get("metadata") or {}).get("namespace") != ns:
        fail(f"{where}: must be in the Deployment's namespace {ns}")
    spec = so.get("spec") or {}
    target = spec.get("scaleTargetRef") or {}
    if target.get("name") != dname or target.get("kind", "Deployment") != "Deployment":
        fail(f"{where}: scaleTargetRef must name the Deployment {dname}, found {target}")
    triggers = spec.get("triggers") or []
    sqs = [tr for tr in triggers if isinstance(tr, dict) and tr.get("type") == "aws-sqs-queue"]
    if len(sqs) != 1:
        fail(f"{where}: expected one aws-sqs-queue trigger, found {len(sqs)}")
        return errors
    tr = sqs[0]
    md = tr.get("metadata") or {}
    url = md.get("queueURL", "")
    if not url:
        fail(f"{where}: trigger metadata queueURL is required")
    if not md.get("awsRegion"):
        fail(f"{where}: trigger metadata awsRegion is required")
    queue = str(config.get("TILEGATE_QUEUE", ""))
    if url and queue.startswith("sqs://") and url.rstrip("/").rsplit("/", 1)[-1] != queue[len("sqs://") :]:
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
        tspec = ta.get("spec") or {}
        if (tspec.get("podIdentity") or {}).get("provider") != "aws":
            fail(f"TriggerAuthentication {auth}: podIdentity.provider must be aws (IRSA)")
    return errors
