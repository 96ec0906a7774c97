"""The metrics port: what each daemon serves, and how Prometheus finds and reads it.

Every daemon serves /metrics (the master also its dashboard) on
--metrics_port (deploy/README.md, "Monitoring"). With its certificates it
serves HTTPS and wants a client certificate from the cluster CA, an admin's
or a cluster member's; --metrics_plaintext serves plain HTTP, which the
daemon refuses on any but a loopback --metrics_host.

  daemon           one daemon container: its metrics flags (a fixed port,
                   no plaintext off the loopback, no port shared with its
                   others), a container port named metrics at
                   --metrics_port, and its pod's prometheus.io/* annotations
                   (scrape, port, scheme, path) agreeing with them
  service_monitor  a ServiceMonitor (deploy/k8s/monitoring) against the
                   Services and StatefulSets of a rendering: it selects weft
                   Services, its endpoints name their metrics port, scheme
                   https, path /metrics, and a tlsConfig that verifies the
                   daemons (a serverName every daemon certificate holds)
                   and presents Prometheus' certificate from its Secret

Each function returns messages that name what to change; the caller
prefixes the object's name where the message does not begin with it.
"""
import re

PORT_NAME = "metrics"
METRICS_PATH = "/metrics"
ANNOTATION = "prometheus.io/"
# The Secret make-tls-secrets.sh makes for Prometheus: <prefix>-prometheus.
PROMETHEUS_SECRET_ROLE = "prometheus"
# Every daemon certificate names localhost (make-tls-secrets.sh, hosts_of).
COMMON_NAME = "localhost"
OTHER_METRICS_FLAGS = ("metrics_host", "metrics_port_file", "metrics_plaintext")


def is_loopback(host):
    """True for what the daemon takes as loopback: 127.0.0.0/8, ::1 and localhost."""
    host = host.strip("[]")
    return host == "localhost" or host == "::1" or bool(re.fullmatch(r"127(\.\d{1,3}){3}", host))


def flag_on(flags, name):
    """A boolean flag as weft reads it: given, and not =false."""
    return name in flags and flags[name] != "false"


def metrics_port(flags):
    """--metrics_port as a fixed port, 1 to 65535; None if absent or not one (0 binds any free port)."""
    value = flags.get("metrics_port")
    if value is None or not value.isdigit() or not 0 < int(value) <= 65535:
        return None
    return int(value)


def exposed_port(flags):
    """The port Prometheus can scrape from outside the pod: --metrics_port on a non-loopback host; else None."""
    port = metrics_port(flags)
    if port is None or is_loopback(flags.get("metrics_host", "0.0.0.0")):
        return None
    return port


def serves_https(flags):
    return not flag_on(flags, "metrics_plaintext") and not flag_on(flags, "insecure")


def daemon(container, annotations, flags, main_port, health_port):
    """Errors for one daemon container and its pod template's annotations."""
    name = container.get("name")
    errors = []
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
    annotations = annotations or {}
    if "metrics_port" not in flags:
        for other in OTHER_METRICS_FLAGS:
            if other in flags:
                errors.append("container %s: --%s needs --metrics_port; the daemon refuses to start without it"
                              % (name, other))
    elif metrics_port(flags) is None:
        errors.append("container %s: --metrics_port=%s: Prometheus and the container port need a fixed port "
                      "number, 1 to 65535 (0 binds any free one)" % (name, flags["metrics_port"]))
        return errors
    port = metrics_port(flags)
    host = flags.get("metrics_host", "0.0.0.0")
    if port is not None and flag_on(flags, "metrics_plaintext") and not flag_on(flags, "insecure") \
            and not is_loopback(host):
        errors.append("container %s: --metrics_plaintext with --metrics_host=%s: the daemon serves plain HTTP only "
                      "on a loopback address (127.0.0.1, ::1) and refuses to start; leave --metrics_plaintext out "
                      "to serve HTTPS with client certificates" % (name, host))
        return errors
    if port is not None:
        for what, other in (("gRPC", main_port), ("health", health_port)):
            if other is not None and port == other:
                errors.append("container %s: --metrics_port=%d is also its %s port" % (name, port, what))
    exposed = exposed_port(flags)
    if exposed is not None and ports.get(PORT_NAME) != exposed:
        errors.append("container %s: no port named metrics at %d (--metrics_port)" % (name, exposed))
    if exposed is None and PORT_NAME in ports:
        errors.append("container %s: port metrics (%s) is served by no --metrics_port on the pod's address"
                      % (name, ports[PORT_NAME]))
    scrape = annotations.get(ANNOTATION + "scrape")
    if exposed is not None and scrape != "true":
        errors.append("pod annotation prometheus.io/scrape is %r: set \"true\" so that Prometheus' pod discovery "
                      "scrapes --metrics_port=%d" % (scrape, exposed))
    if exposed is None and scrape == "true":
        why = "--metrics_host=%s is a loopback address" % host if port else "no --metrics_port"
        errors.append("pod annotation prometheus.io/scrape is \"true\" but container %s serves no metrics port "
                      "Prometheus can reach (%s)" % (name, why))
    if exposed is not None and scrape == "true":
        ann_port = annotations.get(ANNOTATION + "port")
        if ann_port != str(exposed):
            errors.append("pod annotation prometheus.io/port is %r, but --metrics_port=%d" % (ann_port, exposed))
        # Off the loopback only HTTPS (an --insecure daemon serves HTTP, but security.py refuses --insecure).
        want = "https" if serves_https(flags) else "http"
        scheme = annotations.get(ANNOTATION + "scheme")
        if (scheme or "http") != want and not flag_on(flags, "insecure"):
            errors.append("pod annotation prometheus.io/scheme is %r: the metrics port serves %s only"
                          % (scheme, want.upper()))
        path = annotations.get(ANNOTATION + "path", METRICS_PATH)
        if path != METRICS_PATH:
            errors.append("pod annotation prometheus.io/path is %r: weft serves %s" % (path, METRICS_PATH))
    return errors


def certificate_holds(server_name, host):
    """Whether a daemon certificate made for `host` by make-tls-secrets.sh names `server_name`.

    hosts_of: the host, HOST.NAMESPACE.svc, HOST.NAMESPACE.svc.DOMAIN, and localhost.
    """
    if server_name in (host, COMMON_NAME):
        return True
    return bool(re.fullmatch(re.escape(host) + r"\.[a-z0-9]([-a-z0-9]*[a-z0-9])?\.svc(\.[a-z0-9.-]+)?",
                             server_name or ""))


def selects(selector, labels):
    """A LabelSelector (matchLabels, matchExpressions) against labels; an empty one selects all."""
    selector = selector or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values) \
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def name_of(o):
    return "%s/%s" % (o.get("kind"), (o.get("metadata") or {}).get("name"))


def secret_ref(tls, field):
    """(where, Secret name, key) of a tlsConfig field: ca/cert hold {secret: {name, key}}, keySecret {name, key}."""
    value = tls.get(field)
    if not isinstance(value, dict):
        return None
    if field == "keySecret":
        return "tlsConfig.keySecret", value.get("name"), value.get("key")
    secret = value.get("secret")
    if not isinstance(secret, dict):
        return None
    return "tlsConfig.%s.secret" % field, secret.get("name"), secret.get("key")


def service_monitor(monitor, objects, daemon_flags, secret_prefix):
    """Errors for a ServiceMonitor against the objects of a rendering.

    `daemon_flags`: {StatefulSet name: its container's flags}, expanded;
    `secret_prefix`: the Secrets' prefix (weft-tls).
    """
    me = name_of(monitor)
    errors = []
    spec = monitor.get("spec") or {}
    services = [o for o in objects if o.get("kind") == "Service"
                and selects(spec.get("selector"), (o.get("metadata") or {}).get("labels") or {})]
    sets = {}
    for svc in services:
        sts = next((o for o in objects if o.get("kind") == "StatefulSet"
                    and (o.get("spec") or {}).get("serviceName") == svc["metadata"]["name"]), None)
        if sts is not None and sts["metadata"]["name"] in daemon_flags:
            sets[svc["metadata"]["name"]] = sts
    if not sets:
        errors.append("%s: selector %s selects no weft daemon's Service" % (me, spec.get("selector")))
        return errors
    want_secret = "%s-%s" % (secret_prefix, PROMETHEUS_SECRET_ROLE)
    for i, ep in enumerate(spec.get("endpoints") or []):
        where = "%s: endpoints[%d]" % (me, i)
        https = True
        for svc_name, sts in sorted(sets.items()):
            svc = next(o for o in services if o["metadata"]["name"] == svc_name)
            flags = daemon_flags[sts["metadata"]["name"]]
            https = https and serves_https(flags)
            sp = next((p for p in (svc.get("spec") or {}).get("ports") or [] if p.get("name") == ep.get("port")),
                      None)
            if sp is None:
                errors.append("%s: port %r is not a port of %s" % (where, ep.get("port"), name_of(svc)))
                continue
            c = (((sts.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [{}]
            cports = {p.get("name"): p.get("containerPort") for p in c[0].get("ports") or []}
            target = sp.get("targetPort", sp.get("port"))
            reached = cports.get(target) if isinstance(target, str) else target
            if reached is None or reached != exposed_port(flags):
                errors.append("%s: port %s of %s reaches port %s of %s, not its metrics port (--metrics_port=%s)"
                              % (where, ep.get("port"), name_of(svc), reached, name_of(sts),
                                 flags.get("metrics_port")))
        want = "https" if https else "http"
        if ep.get("scheme", "http") != want:
            errors.append("%s: scheme %r: the daemons' metrics port serves %s only" % (where, ep.get("scheme"),
                                                                                         want.upper()))
        if ep.get("path", METRICS_PATH) != METRICS_PATH:
            errors.append("%s: path %r: weft serves %s" % (where, ep.get("path"), METRICS_PATH))
        if not https:
            continue
        tls = ep.get("tlsConfig") or {}
        for field, why in (("ca", "Prometheus could not verify the daemons' certificates"),
                           ("cert", "the metrics port refuses a client without a certificate"),
                           ("keySecret", "the metrics port refuses a client without a certificate")):
            ref = secret_ref(tls, field)
            if ref is None:
                errors.append("%s: no tlsConfig.%s from a Secret: %s" % (where, field, why))
            elif ref[1] != want_secret:
                errors.append("%s: %s is Secret %s; Prometheus' certificate and the CA are in %s "
                              "(make-tls-secrets.sh)" % (where, ref[0], ref[1], want_secret))
        if tls.get("insecureSkipVerify"):
            errors.append("%s: tlsConfig.insecureSkipVerify: Prometheus would take any certificate for a daemon's"
                          % where)
        server = tls.get("serverName")
        if not server:
            errors.append("%s: no tlsConfig.serverName: Prometheus would check the pod's IP address, which no weft "
                          "certificate names; every daemon's names %s" % (where, COMMON_NAME))
            continue
        for svc_name, sts in sorted(sets.items()):
            replicas = (sts.get("spec") or {}).get("replicas", 1)
            for j in range(replicas if isinstance(replicas, int) else 1):
                host = "%s-%d.%s" % (sts["metadata"]["name"], j, svc_name)
                if not certificate_holds(server, host):
                    errors.append("%s: tlsConfig.serverName %r is not a name in the certificate of %s (its names: "
                                  "%s and its namespace's forms, and %s)" % (where, server, host, host, COMMON_NAME))
                    break
    if not spec.get("endpoints"):
        errors.append("%s: no endpoints: it scrapes nothing" % me)
    return errors


def secret_keys(monitor):
    """{secret: {key}} that a ServiceMonitor's tlsConfigs read."""
    out = {}
    for ep in (monitor.get("spec") or {}).get("endpoints") or []:
        tls = ep.get("tlsConfig") or {}
        for field in ("ca", "cert", "keySecret"):
            ref = secret_ref(tls, field)
            if ref is not None and ref[1]:
                out.setdefault(ref[1], set()).add(ref[2])
    return out
