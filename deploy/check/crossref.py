"""The checks a schema cannot make: that the objects of one deployment agree.

Each check reads the rendered objects of one overlay (plus the submit Job)
and returns errors that name the object and what to change. What is
checked: StatefulSets name a headless Service whose selector and ports match
their pods; the cluster spec in the ConfigMap lists exactly the StatefulSet
pods' DNS names (<set>-<i>.<service>:<port>, i < replicas) at the port each
daemon listens on; probes are gRPC health probes on that port; each
container's `weft` subcommand matches its role and passes only flags that
`weft` knows (as `weft SUBCOMMAND --help` lists them: read_weft_flags), with
every $(VAR) defined; ConfigMap keys, volumes and claims referenced exist; the
checkpoint directory of the example job is on the one shared claim in every
daemon; the master's state dir is on its own claim; the grace period covers
the drain; resources are set, GPUs agree; the PodDisruptionBudget covers the
daemons. The daemons' checkpoints and data are under their --checkpoint_root
and --data_root. The security rules (security.py: hardening, each pod's own
certificate from its role's Secret, probes on the plaintext health port)
hold for every pod, and the NetworkPolicies admit exactly weft's flows
(netpol.py). The metrics port (monitoring.py): --metrics_port, the container
port named metrics and the pod's prometheus.io annotations agree, no plain
HTTP off the loopback, and the Services' metrics port reaches it. The
workers' collective socket (collective_errors): a fixed --collective_port
(unless --collective_transport=grpc), the container port named collective
at it and no such port on a daemon that opens none, the Services'
collective port reaching it, and the NetworkPolicies admitting it from the
other workers alone (netpol.py).
"""
import posixpath
import re
import shlex
import subprocess

import monitoring
import netpol
import security

DAEMONS = ("master", "worker", "ps")
# The client subcommands the manifests run.
CLIENT_COMMANDS = ("submit", "jobs")
# A flag line of `weft SUBCOMMAND --help` (client/flags.h, Flags::HelpText).
HELP_FLAG_LINE = re.compile(r"^  --([A-Za-z0-9_]+)(?:=VALUE)?$", re.M)


class WeftFlagsError(Exception):
    pass


def read_weft_flags(weft, commands=DAEMONS + CLIENT_COMMANDS):
    """{subcommand: {flag}}: the flags each subcommand accepts, read from `WEFT SUBCOMMAND --help`."""
    out = {}
    for sub in commands:
        cmd = [weft, sub, "--help"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise WeftFlagsError("cannot run `%s`: %s" % (" ".join(cmd), e))
        flags = set(HELP_FLAG_LINE.findall(r.stdout))
        if r.returncode != 0 or not flags:
            raise WeftFlagsError("`%s` exited %d listing no flags; the checks need a weft whose --help lists "
                                 "them: %s" % (" ".join(cmd), r.returncode, (r.stdout + r.stderr).strip()[-300:]))
        out[sub] = flags
    return out


# The container (and Service) port of a worker's collective socket.
COLLECTIVE_PORT_NAME = "collective"


def opens_collective_socket(role, flags):
    """Whether the daemon's peers dial it on a collective socket: workers do, unless --collective_transport=grpc;
    the master and the ps take part in no collectives."""
    return role == "worker" and flags.get("collective_transport", "socket") != "grpc"


def collective_port(role, flags):
    """The port of a worker's collective socket (--collective_port) where it is a fixed one its peers can be let
    through to; None where it opens none (opens_collective_socket) or the port is not fixed (0 takes any free
    one)."""
    if not opens_collective_socket(role, flags):
        return None
    value = flags.get("collective_port", "0")
    return int(value) if value.isdigit() and 0 < int(value) <= 65535 else None


def collective_errors(container, role, flags):
    """A daemon container's collective socket: a worker that opens one needs a fixed --collective_port (the
    NetworkPolicies open a port number) and a container port named collective at it; no other declares one."""
    name = container.get("name")
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
    opens, port = opens_collective_socket(role, flags), collective_port(role, flags)
    errors = []
    if opens and port is None:
        if "collective_port" not in flags:
            errors.append("container %s: no --collective_port: the worker would take any free port for its "
                          "collective socket, which no NetworkPolicy can open to the other workers; pass a fixed one "
                          "(or --collective_transport=grpc to keep the chunks on the gRPC port)" % name)
        else:
            errors.append("container %s: --collective_port=%s: the NetworkPolicies and the container port need a "
                          "fixed port number, 1 to 65535 (0 takes any free one)" % (name, flags["collective_port"]))
    if port is not None and ports.get(COLLECTIVE_PORT_NAME) != port:
        errors.append("container %s: no port named collective at %d (--collective_port)" % (name, port))
    if not opens and COLLECTIVE_PORT_NAME in ports:
        errors.append("container %s: port collective (%s) is served by no collective socket: only a worker opens "
                      "one, at a fixed --collective_port, unless --collective_transport=grpc"
                      % (name, ports[COLLECTIVE_PORT_NAME]))
    return errors


# The Secrets of the StatefulSets are weft-tls-<role>; a TFJob's <name>-tls-<role>.
SECRET_PREFIX = "weft-tls"
VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
POD_INDEX_FIELD = "metadata.labels['apps.kubernetes.io/pod-index']"


def name_of(o):
    return "%s/%s" % (o.get("kind"), (o.get("metadata") or {}).get("name"))


def pod_template(o):
    if o.get("kind") in ("StatefulSet", "Job", "Deployment"):
        return (o.get("spec") or {}).get("template") or {}
    return {}


def pod_spec(o):
    if o.get("kind") in ("StatefulSet", "Job", "Deployment"):
        return ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
    return {}


def flags_of(args):
    """(subcommand, {flag: value}, positional args) of a `weft` argument list."""
    sub = args[0] if args else None
    flags, positional = {}, []
    for a in args[1:]:
        if a.startswith("--"):
            k, _, v = a[2:].partition("=")
            flags[k] = v
        else:
            positional.append(a)
    return sub, flags, positional


def port_of(address):
    return int(address.rsplit(":", 1)[1]) if ":" in address else None


def parse_cluster(text):
    """'worker=a:1,b:2;ps=c:3' -> {'worker': ['a:1', 'b:2'], 'ps': ['c:3']}."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        job, _, addrs = part.partition("=")
        out[job] = [a.strip() for a in addrs.split(",")]
    return out


def job_checkpoint_dir(job_text):
    m = re.search(r'checkpoint\s*\{[^}]*\bdir\s*:\s*"([^"]+)"', job_text or "")
    return m.group(1) if m else None


def job_dataset_dir(job_text):
    m = re.search(r'dataset\s*\{[^}]*\bdir\s*:\s*"([^"]+)"', job_text or "")
    return m.group(1) if m else None


def shell_weft_commands(cmdline):
    """[(subcommand, flags)] of each `weft ...` in a shell command line."""
    out = []
    for segment in re.split(r"[;&|]+", cmdline):
        try:
            words = shlex.split(segment)
        except ValueError:
            continue
        if len(words) > 2 and posixpath.basename(words[0]) in ("sh", "bash") and words[1] == "-c":
            words = words[2:]
        if words and words[0] == "weft":
            sub, flags, _ = flags_of(words[1:])
            out.append((sub, flags))
    return out


def root_errors(flags, job_text):
    """The example job's checkpoint and dataset directories against a daemon's roots."""
    errors = []
    for flag, path, what in (("checkpoint_root", job_checkpoint_dir(job_text), "checkpoint"),
                             ("data_root", job_dataset_dir(job_text), "dataset")):
        root = flags.get(flag)
        if not root:
            errors.append("no --%s: the daemons read and write %ss only under it" % (flag, what))
        elif path and not under(path, root):
            errors.append("the %s dir %s (job.pbtxt) is outside --%s=%s: the daemons refuse it"
                          % (what, path, flag, root))
    return errors


def under(path, mount):
    return path == mount or path.startswith(mount.rstrip("/") + "/")


class Checker:
    """`weft_flags`: what read_weft_flags() returns, for the subcommands the objects run."""

    def __init__(self, objects, weft_flags):
        self.objects = objects
        self.weft_flags = weft_flags
        self.errors = []
        self.by_kind = {}
        for o in objects:
            self.by_kind.setdefault(o.get("kind"), {})[(o.get("metadata") or {}).get("name")] = o

    def error(self, obj, msg):
        self.errors.append("%s: %s" % (name_of(obj) if isinstance(obj, dict) else obj, msg))

    def get(self, kind, name):
        return self.by_kind.get(kind, {}).get(name)

    def configmap_value(self, ref):
        cm = self.get("ConfigMap", ref.get("name"))
        if cm is None:
            return None
        return (cm.get("data") or {}).get(ref.get("key"))

    def env_of(self, obj, container):
        """{name: value or None for downward-API values}, reporting bad refs."""
        env = {}
        for e in container.get("env") or []:
            vf = e.get("valueFrom")
            if vf is None:
                env[e["name"]] = str(e.get("value", ""))
            elif "configMapKeyRef" in vf:
                ref = vf["configMapKeyRef"]
                value = self.configmap_value(ref)
                if value is None:
                    self.error(obj, "env %s: ConfigMap %s has no key %r" % (e["name"], ref.get("name"), ref.get("key")))
                env[e["name"]] = value
            elif "fieldRef" in vf:
                env[e["name"]] = None
            else:
                env[e["name"]] = None
        return env

    def expand(self, obj, container, env, text):
        def sub(m):
            if m.group(1) not in env:
                self.error(obj, "container %s: $(%s) is not defined in its env; Kubernetes would pass it literally"
                           % (container.get("name"), m.group(1)))
                return m.group(0)
            v = env[m.group(1)]
            return m.group(0) if v is None else v
        return VAR_REF.sub(sub, text)

    # --- the checks ---------------------------------------------------------

    def run(self):
        daemons = {}
        for sts in self.by_kind.get("StatefulSet", {}).values():
            role = ((sts.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")
            if role not in DAEMONS:
                self.error(sts, "label app.kubernetes.io/component must be one of %s" % (DAEMONS,))
                continue
            daemons[role] = sts
            self.check_statefulset(sts, role)
        for role in DAEMONS:
            if role not in daemons:
                self.errors.append("no StatefulSet runs the %s" % role)
        if len(daemons) == len(DAEMONS):
            self.check_cluster_spec(daemons)
            self.check_checkpoints(daemons)
        for job in self.by_kind.get("Job", {}).values():
            self.check_submit_job(job, daemons)
        if daemons:
            self.check_network_policies(daemons)
        for pdb in self.by_kind.get("PodDisruptionBudget", {}).values():
            sel = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            for role, sts in daemons.items():
                labels = ((sts["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
                if any(labels.get(k) != v for k, v in sel.items()):
                    self.error(pdb, "selector %s does not cover the %s pods" % (sel, role))
        if daemons and not self.by_kind.get("PodDisruptionBudget"):
            self.errors.append("no PodDisruptionBudget covers the daemons")
        return self.errors

    def daemon_container(self, sts, role):
        containers = pod_spec(sts).get("containers") or []
        if len(containers) != 1:
            self.error(sts, "expected one container, found %d" % len(containers))
            return None
        return containers[0]

    def listen_port(self, sts, role, flags):
        if role == "master":
            if "port" in flags:
                return int(flags["port"])
            if "listen" in flags:
                return port_of(flags["listen"])
            self.error(sts, "weft master needs --port or --listen")
            return None
        if "listen" in flags:
            return port_of(flags["listen"])
        return None  # the port of its own cluster address

    def check_statefulset(self, sts, role):
        spec = sts.get("spec") or {}
        pod = pod_spec(sts)
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        if any(labels.get(k) != v for k, v in sel.items()):
            self.error(sts, "selector %s does not match the pod labels %s" % (sel, labels))
        if role == "master" and spec.get("replicas", 1) != 1:
            self.error(sts, "the master must have exactly 1 replica (one master drives a cluster)")
        c = self.daemon_container(sts, role)
        if c is None:
            return
        env = self.env_of(sts, c)
        if c.get("command") != ["weft"]:
            self.error(sts, "container %s: command must be [\"weft\"], got %s" % (c.get("name"), c.get("command")))
        args = [self.expand(sts, c, env, a) for a in c.get("args") or []]
        sub, flags, positional = flags_of(args)
        if sub != role:
            self.error(sts, "container %s runs `weft %s`; a %s StatefulSet runs `weft %s`" % (c["name"], sub, role, role))
            return
        for f in sorted(set(flags) - self.weft_flags[role]):
            self.error(sts, "container %s: `weft %s` has no flag --%s" % (c["name"], role, f))
        if positional:
            self.error(sts, "container %s: unexpected arguments %s" % (c["name"], positional))
        if role == "worker":
            self.check_registration(sts, c, env, flags)
        elif "cluster" not in flags:
            self.error(sts, "container %s: no --cluster (the daemons take it from the ConfigMap)" % c["name"])
        if role != "master":
            task = flags.get("task", "")
            if not re.fullmatch(r"%s:\$\(POD_INDEX\)" % role, task):
                self.error(sts, "container %s: --task must be %s:$(POD_INDEX) (the pod's ordinal), got %r"
                           % (c["name"], role, task))
            pod_index = [e for e in c.get("env") or [] if e.get("name") == "POD_INDEX"]
            if not pod_index or (((pod_index[0].get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
                                 != POD_INDEX_FIELD):
                self.error(sts, "container %s: POD_INDEX must come from the fieldRef %s" % (c["name"], POD_INDEX_FIELD))
        # Ports and probes: the daemon's port is mTLS-only, so the probes go
        # to the plaintext health port.
        port = self.listen_port(sts, role, flags)
        cports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        if "grpc" not in cports:
            self.error(sts, "container %s: no port named grpc" % c["name"])
        elif port is not None and cports["grpc"] != port:
            self.error(sts, "container %s: port grpc is %s but weft listens on %s" % (c["name"], cports["grpc"], port))
        listen = port if port is not None else cports.get("grpc")
        for e in security.health(c, flags, listen):
            self.error(sts, e)
        health = int(flags["health_port"]) if flags.get("health_port", "").isdigit() else None
        annotations = ((spec.get("template") or {}).get("metadata") or {}).get("annotations") or {}
        for e in monitoring.daemon(c, annotations, flags, listen, health):
            self.error(sts, e)
        metrics = monitoring.exposed_port(flags)
        for e in collective_errors(c, role, flags):
            self.error(sts, e)
        collective = collective_port(role, flags)
        for e in security.daemon_tls(pod, c, role, flags, SECRET_PREFIX):
            self.error(sts, e)
        # The headless Service.
        svc = self.get("Service", spec.get("serviceName"))
        if svc is None:
            self.error(sts, "serviceName %r names no Service" % spec.get("serviceName"))
        else:
            sspec = svc.get("spec") or {}
            if sspec.get("clusterIP") != "None":
                self.error(svc, "must be headless (clusterIP: None) to give each pod a DNS name")
            ssel = sspec.get("selector") or {}
            if not ssel or any(labels.get(k) != v for k, v in ssel.items()):
                self.error(svc, "selector %s does not select the pods of %s" % (ssel, name_of(sts)))
            for sp in sspec.get("ports") or []:
                target = sp.get("targetPort", sp.get("port"))
                resolved = cports.get(target) if isinstance(target, str) else target
                if monitoring.PORT_NAME in (sp.get("name"), target):
                    if "metrics_port" in flags and monitoring.metrics_port(flags) is None:
                        continue  # not a port number: reported as such
                    if metrics is None or resolved != metrics or sp.get("port") != metrics:
                        self.error(svc, "port %s %s (targetPort %s) does not reach the metrics port of %s "
                                        "(--metrics_port=%s)" % (sp.get("name"), sp.get("port"), target, name_of(sts),
                                                                 flags.get("metrics_port")))
                elif COLLECTIVE_PORT_NAME in (sp.get("name"), target):
                    if collective is None and opens_collective_socket(role, flags):
                        continue  # no fixed port: reported as such
                    if collective is None or resolved != collective or sp.get("port") != collective:
                        self.error(svc, "port %s %s (targetPort %s) does not reach the collective port of %s "
                                        "(--collective_port=%s)" % (sp.get("name"), sp.get("port"), target,
                                                                    name_of(sts), flags.get("collective_port")))
                elif resolved != listen or sp.get("port") != listen:
                    self.error(svc, "port %s (targetPort %s) does not reach weft's port %s" % (sp.get("port"), target, listen))
        # Volumes.
        claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates") or []}
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        for m in c.get("volumeMounts") or []:
            if m["name"] not in volumes and m["name"] not in claims:
                self.error(sts, "volumeMount %s: no volume or volumeClaimTemplate of that name" % m["name"])
        for v in volumes.values():
            self.check_volume(sts, v)
        if role == "master":
            state = flags.get("state_dir")
            if not state:
                self.error(sts, "the master needs --state_dir on its volume, or a restart forgets its jobs")
            elif not any(under(state, m["mountPath"]) and m["name"] in claims for m in c.get("volumeMounts") or []):
                self.error(sts, "--state_dir=%s is not on a volumeClaimTemplate mount" % state)
        # Grace, resources, security.
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if role != "master":
            drain = flags.get("drain_seconds", "20")
            if not drain.isdigit():
                self.error(sts, "--drain_seconds=%s is not a number" % drain)
            elif grace < int(drain) + 10:
                self.error(sts, "terminationGracePeriodSeconds %d must exceed --drain_seconds %s by 10 s or more"
                           % (grace, drain))
        res = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in (res.get(kind) or {}):
                    self.error(sts, "container %s: no resources.%s.%s" % (c["name"], kind, r))
        gpu_limit = int((res.get("limits") or {}).get("nvidia.com/gpu", 0))
        if role == "worker":
            gpus = flags.get("gpus", "-1")
            if gpus.lstrip("-").isdigit():
                if int(gpus) > gpu_limit:
                    self.error(sts, "--gpus=%s but the nvidia.com/gpu limit is %d" % (gpus, gpu_limit))
                if gpu_limit > 0 and int(gpus) == 0:
                    self.error(sts, "nvidia.com/gpu limit %d but --gpus=0 leaves it idle" % gpu_limit)
            else:
                self.error(sts, "--gpus=%s is not a number" % gpus)
        for e in security.hardening(pod):
            self.error(sts, e)

    def check_volume(self, obj, v):
        if "persistentVolumeClaim" in v:
            claim = v["persistentVolumeClaim"].get("claimName")
            if self.get("PersistentVolumeClaim", claim) is None:
                self.error(obj, "volume %s: PersistentVolumeClaim %s is not in the manifests" % (v["name"], claim))
        if "configMap" in v:
            cm = self.get("ConfigMap", v["configMap"].get("name"))
            if cm is None:
                self.error(obj, "volume %s: ConfigMap %s is not in the manifests" % (v["name"], v["configMap"].get("name")))
            else:
                for item in v["configMap"].get("items") or []:
                    if item.get("key") not in (cm.get("data") or {}):
                        self.error(obj, "volume %s: ConfigMap %s has no key %s" % (v["name"], name_of(cm), item.get("key")))

    def check_registration(self, sts, c, env, flags):
        """A worker registers with the master (--master) at its StatefulSet name (--advertise), and reads no
        --cluster, so that a pod past the cluster spec (a scale-up) starts and joins like the others."""
        name = c["name"]
        if "cluster" in flags:
            self.error(sts, "container %s: a worker registers with the master (--master) and takes no --cluster: "
                            "a pod past the cluster spec (a scale-up) would not start" % name)
        if "master" not in flags:
            self.error(sts, "container %s: no --master (a worker registers there: the ConfigMap's master)" % name)
        want = "$(POD_NAME).%s:%s" % (sts["spec"].get("serviceName"), port_of(flags.get("listen", "")))
        if flags.get("advertise") != want:
            self.error(sts, "container %s: --advertise must be %s (the pod's StatefulSet name, where the master and "
                            "its peers reach it), got %r" % (name, want, flags.get("advertise")))
        pod_name = [e for e in c.get("env") or [] if e.get("name") == "POD_NAME"]
        if not pod_name or (((pod_name[0].get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
                            != "metadata.name"):
            self.error(sts, "container %s: POD_NAME must come from the fieldRef metadata.name" % name)

    def daemon_args(self, sts):
        c = (pod_spec(sts).get("containers") or [{}])[0]
        env = self.env_of(sts, c)
        return flags_of([self.expand(sts, c, env, a) for a in c.get("args") or []])[1], env

    def check_cluster_spec(self, daemons):
        flags, _ = self.daemon_args(daemons["master"])
        text = flags.get("cluster", "")
        if "$(" in text or not text:
            return  # reported as an undefined variable or a missing flag
        cluster = parse_cluster(text)
        for role in ("worker", "ps"):
            sts = daemons[role]
            rflags, _ = self.daemon_args(sts)
            # A missing one is reported as such; a worker's, as a worker's.
            if role == "ps" and "cluster" in rflags and rflags["cluster"] != text:
                self.error(sts, "its --cluster differs from the master's: %r vs %r" % (rflags.get("cluster"), text))
            spec = sts["spec"]
            replicas = spec.get("replicas", 1)
            if not isinstance(replicas, int):
                continue  # the schema check reports it
            c = pod_spec(sts)["containers"][0]
            port = port_of(rflags["listen"]) if "listen" in rflags else None
            if port is None:
                port = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}.get("grpc")
            want = ["%s-%d.%s:%s" % (sts["metadata"]["name"], i, spec.get("serviceName"), port)
                    for i in range(replicas)]
            got = cluster.get(role, [])
            if got != want:
                self.error(sts, "the cluster spec's %s job is %s, but the StatefulSet's pods are %s"
                           " (replicas, Service name and port must agree)" % (role, got, want))
        extra = set(cluster) - {"worker", "ps"}
        if extra:
            self.errors.append("the cluster spec names jobs no StatefulSet runs: %s" % sorted(extra))
        master = daemons["master"]
        mport = self.listen_port(master, "master", flags)
        if mport is None:
            return  # reported as a missing flag
        want_master = "%s-0.%s:%s" % (master["metadata"]["name"], master["spec"].get("serviceName"), mport)
        cm = self.by_kind.get("ConfigMap", {})
        for o in cm.values():
            if "master" in (o.get("data") or {}) and o["data"]["master"] != want_master:
                self.error(o, "master is %r; the master pod is reached at %r" % (o["data"]["master"], want_master))
        wflags, _ = self.daemon_args(daemons["worker"])
        if "master" in wflags and "$(" not in wflags["master"] and wflags["master"] != want_master:
            self.error(daemons["worker"], "--master is %r; the master pod is reached at %r"
                       % (wflags["master"], want_master))

    def check_checkpoints(self, daemons):
        job_texts = [(o, (o.get("data") or {}).get("job.pbtxt")) for o in self.by_kind.get("ConfigMap", {}).values()]
        for cm, text in job_texts:
            if text is None:
                continue
            ckpt = job_checkpoint_dir(text)
            if not ckpt:
                self.error(cm, "job.pbtxt has no checkpoint { dir: ... }: a job could not survive a lost task")
                continue
            claims = set()
            for role, sts in daemons.items():
                c = pod_spec(sts)["containers"][0]
                volumes = {v["name"]: v for v in pod_spec(sts).get("volumes") or []}
                mounts = [m for m in c.get("volumeMounts") or [] if under(ckpt, m["mountPath"])]
                pvc = [volumes.get(m["name"], {}).get("persistentVolumeClaim", {}).get("claimName") for m in mounts]
                if not pvc or not pvc[-1]:
                    self.error(sts, "checkpoint dir %s (job.pbtxt) is not on a shared PersistentVolumeClaim here" % ckpt)
                else:
                    claims.add(pvc[-1])
            if len(claims) > 1:
                self.errors.append("checkpoint dir %s is on different claims in different daemons: %s"
                                   % (ckpt, sorted(claims)))
            for claim in claims:
                pvc = self.get("PersistentVolumeClaim", claim)
                if pvc and "ReadWriteMany" not in (pvc.get("spec") or {}).get("accessModes", []):
                    self.error(pvc, "holds the shared checkpoints: it must be ReadWriteMany")
            for role, sts in daemons.items():
                flags, _ = self.daemon_args(sts)
                for e in root_errors(flags, text):
                    self.error(sts, e)
                root = flags.get("checkpoint_root")
                c = pod_spec(sts)["containers"][0]
                volumes = {v["name"]: v for v in pod_spec(sts).get("volumes") or []}
                if root and not any(under(root, m["mountPath"]) and "persistentVolumeClaim" in volumes.get(m["name"], {})
                                    for m in c.get("volumeMounts") or []):
                    self.error(sts, "--checkpoint_root=%s is not on the shared checkpoint claim" % root)

    def check_network_policies(self, daemons):
        endpoints = []
        for role, sts in daemons.items():
            c = self.daemon_container(sts, role)
            if c is None:
                continue
            flags, _ = self.daemon_args(sts)
            labels = ((sts["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
            ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
            main = self.listen_port(sts, role, flags) or ports.get("grpc")
            health = int(flags["health_port"]) if flags.get("health_port", "").isdigit() else None
            endpoints.append(netpol.Endpoint(name_of(sts), role, labels, ports, main, health,
                                             monitoring.exposed_port(flags), collective_port(role, flags),
                                             registers=role == "worker" and "master" in flags))
        # The submit Job is the weft client whose pods must reach the master.
        clients = [("the weft client pods of %s" % name_of(j),
                    (pod_template(j).get("metadata") or {}).get("labels") or {})
                   for j in self.by_kind.get("Job", {}).values()]
        policies = list(self.by_kind.get("NetworkPolicy", {}).values())
        self.errors += netpol.check(policies, endpoints, clients[0] if clients else None)

    def check_submit_job(self, job, daemons):
        pod = pod_spec(job)
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        for v in volumes.values():
            self.check_volume(job, v)
        for e in security.hardening(pod):
            self.error(job, e)
        for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
            env = self.env_of(job, c)
            if "WEFT_MASTER" not in env:
                self.error(job, "container %s: no WEFT_MASTER" % c.get("name"))
            args = [self.expand(job, c, env, a) for a in c.get("args") or []]
            if c.get("command") == ["weft"]:
                flags = flags_of(args)[1]
            else:  # a shell: the flags of its weft commands
                flags = {}
                for _, f in shell_weft_commands(" ".join((c.get("command") or []) + args)):
                    flags.update(f)
            for e in security.client_tls(pod, c, env, flags, SECRET_PREFIX):
                self.error(job, e)
            if c.get("command") == ["weft"]:
                sub, flags, positional = flags_of(args)
                if sub not in CLIENT_COMMANDS:
                    self.error(job, "container %s: `weft %s` is not a client command here" % (c["name"], sub))
                    continue
                for f in sorted(set(flags) - self.weft_flags[sub]):
                    self.error(job, "container %s: `weft %s` has no flag --%s" % (c["name"], sub, f))
                if sub == "submit":
                    if len(positional) != 1:
                        self.error(job, "container %s: weft submit takes one job file" % c["name"])
                        continue
                    path = positional[0]
                    ok = False
                    for m in c.get("volumeMounts") or []:
                        v = volumes.get(m["name"], {})
                        if "configMap" in v and under(path, m["mountPath"]):
                            rel = path[len(m["mountPath"].rstrip("/")) + 1:]
                            items = v["configMap"].get("items")
                            keys = [i.get("path") for i in items] if items else list(
                                ((self.get("ConfigMap", v["configMap"].get("name")) or {}).get("data") or {}))
                            ok = rel in keys
                    if not ok:
                        self.error(job, "container %s: the job file %s is not in a mounted ConfigMap" % (c["name"], path))
            elif c.get("command", [None])[0] != "/bin/sh":
                self.error(job, "container %s: command must be weft or /bin/sh" % c.get("name"))
        if job.get("spec", {}).get("backoffLimit", 6) != 0:
            self.error(job, "backoffLimit must be 0: a retried `weft submit` would start a second training job")


def daemon_flags(objects):
    """{StatefulSet name: its daemon container's flags, $(VAR)s expanded} of the daemons among `objects`."""
    checker = Checker(objects, {})
    out = {}
    for sts in checker.by_kind.get("StatefulSet", {}).values():
        if ((sts.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component") in DAEMONS:
            out[sts["metadata"]["name"]] = checker.daemon_args(sts)[0]
    return out


def check_service_monitors(monitors, objects):
    """ServiceMonitors (deploy/k8s/monitoring) against the objects of a rendering (monitoring.py)."""
    errors = []
    flags = daemon_flags(objects)
    for m in monitors:
        errors += monitoring.service_monitor(m, objects, flags, SECRET_PREFIX)
    return errors


TFJOB_INDEX_FIELD = "metadata.labels['training.kubeflow.org/replica-index']"


def tfjob_labels(tfjob, rtype, template):
    """A replica pod's labels: its template's and those the training operator adds."""
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels.update({"training.kubeflow.org/job-name": tfjob["metadata"]["name"],
                   "training.kubeflow.org/replica-type": rtype.lower(),
                   "training.kubeflow.org/replica-index": "0"})
    return labels


def check_tfjob(tfjob, base_objects, policies, weft_flags):
    """A TFJob's replicas against Kubeflow's conventions and the base objects it uses.

    `policies`: the NetworkPolicies beside it; `weft_flags`: as read_weft_flags() returns.
    """
    errors = []
    names = {(o.get("kind"), o["metadata"]["name"]) for o in base_objects}
    job_text = next(((o.get("data") or {}).get("job.pbtxt") for o in base_objects
                     if o.get("kind") == "ConfigMap" and "job.pbtxt" in (o.get("data") or {})), None)
    prefix = "%s-tls" % tfjob["metadata"]["name"]
    endpoints = []
    specs = (tfjob.get("spec") or {}).get("tfReplicaSpecs") or {}
    roles = {"Chief": "master", "Master": "master", "PS": "ps", "Worker": "worker"}
    for rtype in ("Chief", "PS", "Worker"):
        if rtype not in specs:
            errors.append("TFJob: no %s replica" % rtype)
    for rtype, spec in specs.items():
        where = "TFJob %s" % rtype
        pod = (spec.get("template") or {}).get("spec") or {}
        cs = [c for c in pod.get("containers") or [] if c.get("name") == "tensorflow"]
        if not cs:
            errors.append("%s: the operator needs a container named tensorflow" % where)
            continue
        c = cs[0]
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        if "tfjob-port" not in ports:
            errors.append("%s: no port named tfjob-port (the port TF_CONFIG lists)" % where)
        cmdline = " ".join((c.get("command") or []) + (c.get("args") or []))
        errors += ["%s: %s" % (where, e) for e in security.hardening(pod)]
        for v in pod.get("volumes") or []:
            if "persistentVolumeClaim" in v and ("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]) not in names:
                errors.append("%s: claim %s is not created by deploy/k8s" % (where, v["persistentVolumeClaim"]["claimName"]))
            if "configMap" in v and ("ConfigMap", v["configMap"]["name"]) not in names:
                errors.append("%s: ConfigMap %s is not created by deploy/k8s" % (where, v["configMap"]["name"]))
        mounts = {m["name"]: m for m in c.get("volumeMounts") or []}
        for name in mounts:
            if name not in {v["name"] for v in pod.get("volumes") or []}:
                errors.append("%s: volumeMount %s has no volume" % (where, name))
        if not any(m["mountPath"] == "/checkpoints" for m in mounts.values()):
            errors.append("%s: the shared checkpoints volume is not mounted at /checkpoints" % where)
        role = roles.get(rtype)
        if role is None:
            continue  # no weft daemon; the schema check refuses a replica type Kubeflow does not know
        if c.get("command") == ["weft"]:
            commands = [flags_of(c.get("args") or [])[:2]]
        else:
            commands = shell_weft_commands(cmdline)
        daemon = [f for sub, f in commands if sub == role]
        if not daemon:
            errors.append("%s: does not run `weft %s`" % (where, role))
            continue
        flags = daemon[0]
        if "--cluster" in cmdline or "--task" in cmdline:
            errors.append("%s: the cluster and task come from TF_CONFIG; pass no --cluster/--task" % where)
        allowed = set(weft_flags[role])
        if role == "master":  # the chief also submits and follows the job
            allowed |= weft_flags["submit"] | weft_flags["jobs"]
        for m in re.finditer(r"--(\w+)", cmdline):
            if m.group(1) not in allowed:
                errors.append("%s: `weft %s` has no flag --%s" % (where, role, m.group(1)))
        env = {e.get("name"): e for e in c.get("env") or []}
        for var in sorted(set(VAR_REF.findall(cmdline)) - set(env)):
            errors.append("%s: $(%s) is not defined in its env; Kubernetes would pass it literally" % (where, var))
        if "POD_INDEX" in env and ((env["POD_INDEX"].get("valueFrom") or {}).get("fieldRef") or {}).get(
                "fieldPath") != TFJOB_INDEX_FIELD:
            errors.append("%s: POD_INDEX must come from the fieldRef %s" % (where, TFJOB_INDEX_FIELD))
        probes = ("readinessProbe", "livenessProbe") if role != "master" else ("readinessProbe",)
        errors += ["%s: %s" % (where, e) for e in security.health(c, flags, ports.get("tfjob-port"), probes)]
        errors += ["%s: %s" % (where, e) for e in security.daemon_tls(pod, c, role, flags, prefix)]
        if job_text is not None:
            errors += ["%s: %s" % (where, e) for e in root_errors(flags, job_text)]
        health = int(flags["health_port"]) if flags.get("health_port", "").isdigit() else None
        annotations = ((spec.get("template") or {}).get("metadata") or {}).get("annotations") or {}
        errors += ["%s: %s" % (where, e) for e in monitoring.daemon(c, annotations, flags, ports.get("tfjob-port"),
                                                                    health)]
        errors += ["%s: %s" % (where, e) for e in collective_errors(c, role, flags)]
        if "tfjob-port" in ports:  # else reported above
            endpoints.append(netpol.Endpoint(where, role, tfjob_labels(tfjob, rtype, spec.get("template") or {}),
                                             ports, ports["tfjob-port"], health, monitoring.exposed_port(flags),
                                             collective_port(role, flags)))
        clients = [f for sub, f in commands if sub in CLIENT_COMMANDS]
        if clients:
            client_flags = {}
            for f in clients:
                client_flags.update(f)
            plain_env = {k: e.get("value") for k, e in env.items() if "value" in e}
            errors += ["%s: %s" % (where, e) for e in security.client_tls(pod, c, plain_env, client_flags, prefix)]
    if endpoints:
        errors += netpol.check([p for p in policies if p.get("kind") == "NetworkPolicy"], endpoints)
    return errors
