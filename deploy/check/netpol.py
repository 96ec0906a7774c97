"""weft's NetworkPolicies, evaluated for the flows weft has and must not have.

The evaluation follows the NetworkPolicy API: a pod's ingress (egress) is
open until a policy whose podSelector selects it lists Ingress (Egress) in
policyTypes; then a connection is admitted when one rule of those policies
matches both the peer (podSelector, namespaceSelector, ipBlock) and the port
(number, name or range, and protocol). A connection needs the destination's
ingress and the source's egress.

What weft needs (every one must be admitted):
  clients -> the master's port      master -> every task's port
  workers that register (--master) -> the master's port
  task -> task, on the task's port  anywhere -> every health port (the
  DNS from every daemon             kubelet's probes come from the node)
  worker -> worker, on a worker's collective port (--collective_port: its
  TLS socket for all-reduce chunks between hosts)
  Prometheus (pods labelled app.kubernetes.io/name: prometheus in the
  namespace `monitoring`) -> every daemon's metrics port
What it must not have (none may be admitted): any other task -> the master's port;
clients -> a task's port; Prometheus, any other pod, of this namespace or
another, or any address, -> the master's or a task's port; anyone but
Prometheus -> a metrics port (weft's own pods and clients, the other pods
of `monitoring`, a pod labelled as Prometheus in another namespace);
anyone but a worker -> a worker's collective port (the master, the ps,
clients, Prometheus, any other pod, any address); anything -> any other
port.

Peers the check cannot place exactly are taken at their most open for the
"must not" rules (an ipBlock may hold pod addresses; a namespaceSelector with
labels may select this namespace) and at their narrowest for the "must"
rules, so that neither can pass by luck.
"""
import collections

# `metrics`: the port Prometheus scrapes (--metrics_port), None if the daemon serves none off its loopback.
# `collective`: a worker's collective socket (--collective_port), None if it opens none (the master, the ps,
# --collective_transport=grpc).
# `registers`: a worker that calls the master's port to register (weft worker --master).
Endpoint = collections.namedtuple("Endpoint", "name role labels ports main health metrics collective registers",
                                  defaults=(None, None, False))
CLIENT_LABELS = {"app.kubernetes.io/name": "weft-client"}
OTHER_PORT = 1  # stands for every port weft does not serve


class Source(collections.namedtuple("Source", "what labels same_namespace namespace_labels", defaults=(None,))):
    """A connection's origin: a pod (its labels, whether in this namespace, and its namespace's labels where
    known) or an address (labels None)."""


WORLD = Source("any address", None, False)
STRANGER = Source("any pod of this namespace", {}, True)
ELSEWHERE = Source("any pod of another namespace", {}, False)
# Where Prometheus runs (deploy/README.md, "Monitoring"): the Prometheus
# Operator's (and kube-prometheus') pod label, in the namespace `monitoring`.
MONITORING_NAMESPACE = {"kubernetes.io/metadata.name": "monitoring"}
PROMETHEUS_LABELS = {"app.kubernetes.io/name": "prometheus"}
PROMETHEUS = Source("Prometheus (app.kubernetes.io/name=prometheus in namespace monitoring)", PROMETHEUS_LABELS,
                    False, MONITORING_NAMESPACE)
MONITORING_OTHERS = Source("any other pod of namespace monitoring", {}, False, MONITORING_NAMESPACE)
PROMETHEUS_ELSEWHERE = Source("a pod labelled app.kubernetes.io/name=prometheus in another namespace",
                              PROMETHEUS_LABELS, False, {"kubernetes.io/metadata.name": "elsewhere"})


def selects(selector, labels):
    """A LabelSelector against a pod's labels; an empty selector selects all."""
    selector = selector or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def policy_types(policy):
    spec = policy.get("spec") or {}
    if spec.get("policyTypes"):
        return spec["policyTypes"]
    return ["Ingress"] + (["Egress"] if spec.get("egress") else [])


def port_matches(rule_ports, port, protocol, named):
    if not rule_ports:
        return True
    for rp in rule_ports:
        if rp.get("protocol", "TCP") != protocol:
            continue
        p = rp.get("port")
        if p is None:
            return True
        if isinstance(p, str):
            p = named.get(p)
            if p is None:
                continue
        if p <= port <= rp.get("endPort", p):
            return True
    return False


def peer_matches(peer, src, widest):
    """Whether one `from`/`to` entry covers `src`; `widest` resolves the unknowable towards admitting."""
    if "ipBlock" in peer:
        if widest:
            return True
        block = peer["ipBlock"] or {}
        return src.labels is None and block.get("cidr") in ("0.0.0.0/0", "::/0") and not block.get("except")
    if src.labels is None:
        return False
    ns = peer.get("namespaceSelector")
    if ns is None:
        ns_ok = src.same_namespace
    elif not (ns.get("matchLabels") or ns.get("matchExpressions")):
        ns_ok = True
    elif src.namespace_labels is not None:
        ns_ok = selects(ns, src.namespace_labels)
    else:
        ns_ok = widest or not src.same_namespace
    return ns_ok and ("podSelector" not in peer or selects(peer["podSelector"], src.labels))


def admitted_by(policies, direction, subject_labels, peer, port, protocol, named, widest):
    """The names of the policies admitting the connection, [] if refused, None if `direction` is not isolated."""
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [p for p in policies
                 if direction in policy_types(p) and selects((p.get("spec") or {}).get("podSelector"), subject_labels)]
    if not selecting:
        return None
    out = []
    for p in selecting:
        for rule in (p.get("spec") or {}).get(key) or []:
            peers = rule.get(peers_key)
            if port_matches(rule.get("ports"), port, protocol, named) and (
                    not peers or any(peer_matches(x, peer, widest) for x in peers)):
                out.append("NetworkPolicy/%s" % p["metadata"]["name"])
                break
    return out


def pod_source(e):
    return Source("the pods of %s" % e.name, e.labels, True)


def check(policies, endpoints, client=None):
    """Errors for the endpoints (one per daemon pod template) under `policies`.

    `client`: (what, labels) of a client pod; by default any pod labelled
    app.kubernetes.io/name: weft-client.
    """
    what, labels = client or ("weft clients (app.kubernetes.io/name=weft-client)", CLIENT_LABELS)
    client = Source(what, labels, True)
    errors = []
    masters = [e for e in endpoints if e.role == "master"]
    tasks = [e for e in endpoints if e.role != "master"]

    def need(dst, src, src_endpoint, port, why):
        got = admitted_by(policies, "Ingress", dst.labels, src, port, "TCP", dst.ports, widest=False)
        if got == []:
            errors.append("%s: no NetworkPolicy admits %s to port %d; %s" % (dst.name, src.what, port, why))
        if src.labels is None or not src.same_namespace:
            return  # an address, or a pod whose egress policies are its own namespace's
        out = admitted_by(policies, "Egress", src.labels, Source(dst.name, dst.labels, True), port, "TCP", dst.ports,
                          widest=False)
        if out == []:
            errors.append("%s: its NetworkPolicy egress does not let it reach port %d of %s; %s"
                          % (src_endpoint or src.what, port, dst.name, why))

    def refuse(dst, src, port, why):
        got = admitted_by(policies, "Ingress", dst.labels, src, port, "TCP", dst.ports, widest=True)
        if got:
            errors.append("%s: %s admits %s to port %d; %s" % (dst.name, ", ".join(got), src.what, port, why))

    for dst in endpoints:
        if admitted_by(policies, "Ingress", dst.labels, WORLD, dst.main, "TCP", dst.ports, widest=True) is None:
            errors.append("%s: no NetworkPolicy with policyTypes Ingress selects its pods (labels %s), so every pod "
                          "and address can reach them" % (dst.name, dst.labels))
            continue
        if dst.role == "master":
            need(dst, client, None, dst.main, "clients -> master must be allowed")
            for e in endpoints:
                if e.registers:
                    need(dst, pod_source(e), e.name, dst.main,
                         "workers register with the master (weft worker --master)")
                elif e is not dst:
                    refuse(dst, pod_source(e), dst.main,
                           "only weft clients and the workers that register call the master")
        else:
            for e in masters + tasks:
                need(dst, pod_source(e), e.name, dst.main,
                     "master -> tasks and task -> task must be allowed")
            refuse(dst, client, dst.main, "clients talk to the master, never to a task")
        for stranger in (STRANGER, ELSEWHERE, WORLD, PROMETHEUS):
            refuse(dst, stranger, dst.main, "only weft's own pods and clients may reach a daemon")
        if dst.health is not None:
            need(dst, WORLD, None, dst.health, "the kubelet's probes come from the node")
        if dst.metrics is not None:
            need(dst, PROMETHEUS, None, dst.metrics, "Prometheus scrapes every daemon's metrics port")
            for src in [pod_source(e) for e in endpoints] + [client, STRANGER, ELSEWHERE, WORLD, MONITORING_OTHERS,
                                                             PROMETHEUS_ELSEWHERE]:
                refuse(dst, src, dst.metrics, "only Prometheus may reach a metrics port (the master's serves the "
                                              "dashboard too: reach it with kubectl port-forward)")
        if dst.collective is not None:
            # Only workers take part in collectives: they alone dial a peer's collective socket.
            for e in endpoints:
                if e.role == "worker":
                    need(dst, pod_source(e), e.name, dst.collective,
                         "worker -> worker on the collective port must be allowed")
                else:
                    refuse(dst, pod_source(e), dst.collective, "only workers take part in collectives, so only they "
                                                               "may reach a worker's collective port")
            for src in (client, STRANGER, ELSEWHERE, WORLD, PROMETHEUS):
                refuse(dst, src, dst.collective, "only the other workers may reach a worker's collective port")
        served = ["port %d" % dst.main, "the health port %s" % dst.health, "the metrics port %s" % dst.metrics]
        if dst.collective is not None:
            served.append("the collective port %d" % dst.collective)
        for src in [pod_source(e) for e in endpoints] + [client, STRANGER, WORLD, PROMETHEUS]:
            refuse(dst, src, OTHER_PORT, "weft serves only %s and %s" % (", ".join(served[:-1]), served[-1]))
    for e in endpoints:
        dns = admitted_by(policies, "Egress", e.labels, WORLD, 53, "UDP", {}, widest=True)
        if dns == []:
            errors.append("%s: its NetworkPolicy egress refuses DNS (UDP port 53): the daemons resolve their "
                          "peers' names" % e.name)
    return errors
