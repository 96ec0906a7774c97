"""The deploy/ checks, and proof that each of their rules catches what it is for.

Every manifest rendered from deploy/k8s (with `kubectl kustomize`) and
deploy/kubeflow must pass the schema and cross-reference checks, with
weft's flags read from the weft binary's own `--help`. Then each broken
variant breaks one thing in a copy of the rendered objects, the TFJob, the
ServiceMonitor or a Dockerfile (a typo, a wrong port, a cluster spec out of
step with the replicas, a pod that keeps its service-account token, a
NetworkPolicy that lets any pod reach the master, a plaintext metrics port
off the loopback...) and requires exactly one rule of the checkers to fire,
with a message that names the object and the rule. RuleCoverageTest requires
every rule the checkers can report to be drawn by some variant.
deploy/k8s/make-tls-secrets.sh, run with a stand-in for `weft certs`, must
make every Secret key the manifests (and the ServiceMonitor) read.

Run with pytest (tests/deploy_manifests_test.sh does, under Bazel):

    WEFT_REPO_ROOT=. WEFT=bazel-bin/client/weft python3 -m pytest tests/deploy_manifests_test.py

WEFT_REPO_ROOT defaults to the current directory; WEFT to the repository's
client/weft, else bazel-bin/client/weft.
"""
import ast
import collections
import copy
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import yaml

ROOT = os.path.abspath(os.environ.get("WEFT_REPO_ROOT") or ".")
DEPLOY = os.path.join(ROOT, "deploy")
CHECKS = os.path.join(DEPLOY, "check")
sys.path.insert(0, CHECKS)
import check_manifests  # noqa: E402
import crossref  # noqa: E402
import dockerfile_lint  # noqa: E402
import monitoring  # noqa: E402
import render  # noqa: E402
import schema  # noqa: E402
import security  # noqa: E402


def weft_binary():
    if os.environ.get("WEFT"):
        return os.path.abspath(os.environ["WEFT"])
    for path in (os.path.join(ROOT, "client", "weft"), os.path.join(ROOT, "bazel-bin", "client", "weft")):
        if os.path.isfile(path):
            return path
    raise RuntimeError("no weft binary: set WEFT, or `bazel build //client:weft`")


@functools.lru_cache(maxsize=None)
def weft_flags():
    return crossref.read_weft_flags(weft_binary())


@functools.lru_cache(maxsize=None)
def deployment():
    """(errors, {label: rendered objects}) of check_manifests.check_deploy; never mutate them."""
    return check_manifests.check_deploy(DEPLOY, weft_flags())


OVERLAYS = ("overlays/cpu", "overlays/gpu")
MONITORING = check_manifests.MONITORING  # the ServiceMonitor's rendering


def rendered(label):
    return copy.deepcopy(deployment()[1][label])


def overlays():
    """{label: objects} of the overlays' renderings (not k8s/monitoring's); never mutate them."""
    return {k: v for k, v in deployment()[1].items() if k in OVERLAYS}


def find(objects, kind, name):
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def container(objects, name):
    return find(objects, "StatefulSet", name)["spec"]["template"]["spec"]["containers"][0]


def pod(objects, kind, name):
    return find(objects, kind, name)["spec"]["template"]["spec"]


def env_var(c, name):
    return next(e for e in c["env"] if e["name"] == name)


def volume(spec, name):
    return next(v for v in spec["volumes"] if v["name"] == name)


def policy(objects, name):
    return find(objects, "NetworkPolicy", name)["spec"]


def set_flag(args, flag, value):
    """Replaces --flag=... in a container's args (value None: removes it)."""
    i = next(i for i, a in enumerate(args) if a.startswith("--%s=" % flag))
    if value is None:
        del args[i]
    else:
        args[i] = "--%s=%s" % (flag, value)


def annotations(objects, name):
    return find(objects, "StatefulSet", name)["spec"]["template"]["metadata"]["annotations"]


def service_monitor(objects):
    return find(objects, "ServiceMonitor", "weft")["spec"]


def drop_metrics(objects, name, keep=()):
    """Takes the metrics port off StatefulSet `name`: the flag, the container port, the pod annotations, the
    Service port; `keep` names those to leave ("flag", "port", "annotations", "service")."""
    c = container(objects, name)
    if "flag" not in keep:
        set_flag(c["args"], "metrics_port", None)
    if "port" not in keep:
        c["ports"] = [p for p in c["ports"] if p["name"] != "metrics"]
    if "annotations" not in keep:
        find(objects, "StatefulSet", name)["spec"]["template"]["metadata"].pop("annotations")
    if "service" not in keep:
        svc = find(objects, "Service", find(objects, "StatefulSet", name)["spec"]["serviceName"])
        svc["spec"]["ports"] = [p for p in svc["spec"]["ports"] if p["name"] != "metrics"]


def read_dockerfile(name):
    with open(os.path.join(DEPLOY, "docker", name)) as f:
        return f.read()


# --- The rules ----------------------------------------------------------------
#
# A rule is one message template of a checker: the string literal of a report,
# which is a string added to an error list (`errors.append(...)`,
# `problems.append(...)`), given to an error function (`self.error(obj, ...)`,
# `bad(line, ...)`) or returned in a list literal. A template of placeholders
# and punctuation alone only puts an object's name before another report.

CHECKERS = ("check_manifests.py", "crossref.py", "dockerfile_lint.py", "monitoring.py", "netpol.py", "render.py",
            "schema.py", "security.py")
PLACEHOLDER = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdrofx]")


class Rule(collections.namedtuple("Rule", "template where")):
    """A message template and where the checkers report it ("file:line", the first place)."""

    @property
    def pattern(self):
        parts = [re.escape(p) for p in PLACEHOLDER.split(self.template)]
        return re.compile("(?s).*" + "(.*?)".join(parts))

    @property
    def literal(self):
        return len(PLACEHOLDER.sub("", self.template))


def report_template(node):
    """The template of a report expression: "literal" or "literal" % (...); None otherwise."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        node = node.left
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def reports_in(tree):
    """The report expressions in a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            receiver = f.value if isinstance(f, ast.Attribute) else None
            receiver = getattr(receiver, "attr", None) or getattr(receiver, "id", None)
            if name == "append" and receiver in ("errors", "problems") and node.args:
                yield node.args[0]
            elif name in ("error", "bad") and len(node.args) == 2:
                yield node.args[1]
        elif isinstance(node, (ast.Return, ast.AugAssign)) and isinstance(node.value, ast.List):
            yield from node.value.elts


@functools.lru_cache(maxsize=None)
def rules():
    """{template: Rule} of every checker."""
    out = {}
    for name in CHECKERS:
        with open(os.path.join(CHECKS, name)) as f:
            tree = ast.parse(f.read(), name)
        for node in reports_in(tree):
            template = report_template(node)
            if template is None or not re.search(r"[A-Za-z]", PLACEHOLDER.sub("", template)):
                continue
            out.setdefault(template, Rule(template, "%s:%d" % (name, node.lineno)))
    return out


def rule_of(message):
    """The most specific rule whose template `message` ends with; None if none does."""
    matches = [r for r in rules().values() if r.pattern.fullmatch(message)]
    return max(matches, key=lambda r: r.literal) if matches else None


def rule_with(fragment):
    """The template of the one rule whose text holds `fragment` (for a variant's `also`)."""
    found = [t for t in rules() if fragment in t]
    assert len(found) == 1, "%d rules hold %r: %s" % (len(found), fragment, found)
    return found[0]


# --- Broken variants ------------------------------------------------------------

class Variant(collections.namedtuple("Variant", "name errors expect also")):
    """A broken copy: `errors()` runs the checkers on it; `expect` must begin the
    report that names the fault (after the file or rendering's label), and no rule
    but that one's (and those in `also`) may fire."""


class Variants:
    """Broken variants; test_case() makes a TestCase with one test for each."""

    def __init__(self):
        self.items = []

    def add(self, errors, expect, also, fn):
        self.items.append(Variant(fn.__name__, errors, expect, tuple(also)))
        return fn

    def overlay(self, expect, overlay="overlays/cpu", also=()):
        def register(mutate):
            def errors():
                objects = rendered(overlay)
                mutate(objects)
                return check_manifests.check_objects(overlay, objects, weft_flags()), overlay + ": "
            return self.add(errors, expect, also, mutate)
        return register

    def tfjob(self, expect, also=()):
        def register(mutate):
            def errors():
                tfjobs, others = check_manifests.load_kubeflow(DEPLOY)
                mutate(tfjobs[0], others)
                return (check_manifests.check_tfjob(tfjobs[0], rendered("overlays/cpu"), others, weft_flags()),
                        "kubeflow/tfjob.yaml: ")
            return self.add(errors, expect, also, mutate)
        return register

    def monitoring(self, expect, also=()):
        """A variant of k8s/monitoring's rendering, checked against the cpu overlay's objects."""
        def register(mutate):
            def errors():
                objects = rendered(MONITORING)
                mutate(objects)
                return check_manifests.check_monitoring(objects, rendered("overlays/cpu")), MONITORING + ": "
            return self.add(errors, expect, also, mutate)
        return register

    def dockerfile(self, expect, name="Dockerfile"):
        def register(mutate):
            def errors():
                text = read_dockerfile(name)
                broken = mutate(text)
                assert broken != text, "%s: the variant changed nothing" % mutate.__name__
                return dockerfile_lint.lint(broken, name), ""
            return self.add(errors, expect, (), mutate)
        return register

    def test_case(self, class_name, doc):
        def make(v):
            def test(self):
                check_variant(self, v)
            test.__doc__ = v.expect
            return test
        body = {"test_" + v.name: make(v) for v in self.items}
        assert len(body) == len(self.items), "two variants of %s share a name" % class_name
        return type(class_name, (unittest.TestCase,), dict(body, __doc__=doc))


@functools.lru_cache(maxsize=None)
def run_variant(v):
    return v.errors()


def check_variant(test, v):
    """The checks on the broken variant `v` report its fault, and only it."""
    errors, label = run_variant(v)
    test.assertTrue(errors, "%s: the checks found nothing wrong" % v.name)
    named = [e for e in errors if e.startswith(label) and e[len(label):].startswith(v.expect)]
    test.assertTrue(named, "no error begins %r; got %s" % (label + v.expect, errors))
    unknown = [e for e in errors if rule_of(e) is None]
    test.assertEqual(unknown, [], "reports that match no rule's template (see rules())")
    fired = {rule_of(e).template for e in errors}
    allowed = {rule_of(named[0]).template} | set(v.also)
    test.assertEqual(fired - allowed, set(), "rules other than the one broken fired: %s" % errors)


# Crossref: the objects of one deployment agree (crossref.Checker).
CROSSREF = Variants()


@CROSSREF.overlay("StatefulSet/weft-ps: no --data_root: the daemons read and write datasets only under it")
def ps_without_data_root(o):
    set_flag(container(o, "weft-ps")["args"], "data_root", None)


@CROSSREF.overlay("StatefulSet/weft-worker: the dataset dir /usr/share/datasets/fashion-mnist (job.pbtxt) is "
                  "outside --data_root=/data")
def job_dataset_outside_data_root(o):
    set_flag(container(o, "weft-worker")["args"], "data_root", "/data")


@CROSSREF.overlay("no PodDisruptionBudget covers the daemons")
def no_pdb(o):
    o.remove(find(o, "PodDisruptionBudget", "weft"))


@CROSSREF.overlay("PodDisruptionBudget/weft: selector {'app.kubernetes.io/name': 'weft', "
                  "'app.kubernetes.io/component': 'worker'} does not cover the master pods")
def pdb_not_covering_every_daemon(o):
    find(o, "PodDisruptionBudget", "weft")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "worker"


@CROSSREF.overlay("StatefulSet/weft-ps: expected one container, found 2")
def sidecar(o):
    c = copy.deepcopy(container(o, "weft-ps"))
    c["name"] = "sidecar"
    pod(o, "StatefulSet", "weft-ps")["containers"].append(c)


@CROSSREF.overlay("StatefulSet/weft-master: weft master needs --port or --listen")
def master_without_port(o):
    set_flag(container(o, "weft-master")["args"], "port", None)


@CROSSREF.overlay("StatefulSet/weft-worker: selector {'app.kubernetes.io/component': 'worker', "
                  "'app.kubernetes.io/name': 'weft', 'tier': 'gpu'} does not match the pod labels")
def selector_not_matching_pods(o):
    find(o, "StatefulSet", "weft-worker")["spec"]["selector"]["matchLabels"]["tier"] = "gpu"


@CROSSREF.overlay("StatefulSet/weft-master: the master must have exactly 1 replica")
def two_masters(o):
    find(o, "StatefulSet", "weft-master")["spec"]["replicas"] = 2


@CROSSREF.overlay("StatefulSet/weft-master: container master: command must be [\"weft\"], got "
                  "['/usr/local/bin/weft']")
def command_not_weft(o):
    container(o, "weft-master")["command"] = ["/usr/local/bin/weft"]


@CROSSREF.overlay("StatefulSet/weft-ps: container ps runs `weft worker`; a ps StatefulSet runs `weft ps`")
def wrong_subcommand(o):
    container(o, "weft-ps")["args"][0] = "worker"


@CROSSREF.overlay("StatefulSet/weft-master: container master: `weft master` has no flag --state-dir")
def unknown_daemon_flag(o):
    container(o, "weft-master")["args"].append("--state-dir=/x")


@CROSSREF.overlay("StatefulSet/weft-worker: container worker: unexpected arguments ['train']")
def positional_argument(o):
    container(o, "weft-worker")["args"].append("train")


@CROSSREF.overlay("StatefulSet/weft-ps: container ps: no --cluster")
def ps_without_cluster(o):
    set_flag(container(o, "weft-ps")["args"], "cluster", None)


@CROSSREF.overlay("StatefulSet/weft-worker: container worker: a worker registers with the master (--master) and "
                  "takes no --cluster: a pod past the cluster spec (a scale-up) would not start")
def worker_with_cluster(o):
    container(o, "weft-worker")["args"].append("--cluster=$(WEFT_MASTER)")


@CROSSREF.overlay("StatefulSet/weft-worker: container worker: no --master (a worker registers there",
                  also=["%s: %s admits %s to port %d; %s"])  # the NetworkPolicy still lets it register
def worker_without_master(o):
    set_flag(container(o, "weft-worker")["args"], "master", None)


@CROSSREF.overlay("StatefulSet/weft-worker: --master is 'weft-master:5000'; the master pod is reached at "
                  "'weft-master-0.weft-master:5000'")
def worker_registers_elsewhere(o):
    set_flag(container(o, "weft-worker")["args"], "master", "weft-master:5000")


@CROSSREF.overlay("StatefulSet/weft-worker: container worker: --advertise must be $(POD_NAME).weft-worker:2222 (the "
                  "pod's StatefulSet name, where the master and its peers reach it), got '$(POD_NAME):2222'")
def worker_advertises_its_bare_name(o):
    set_flag(container(o, "weft-worker")["args"], "advertise", "$(POD_NAME):2222")


@CROSSREF.overlay("StatefulSet/weft-worker: container worker: POD_NAME must come from the fieldRef metadata.name")
def worker_pod_name_from_the_index(o):
    env_var(container(o, "weft-worker"), "POD_NAME")["valueFrom"]["fieldRef"]["fieldPath"] = "metadata.namespace"


@CROSSREF.overlay("StatefulSet/weft-worker: container worker: --task must be worker:$(POD_INDEX) (the pod's "
                  "ordinal), got 'worker:0'")
def fixed_task_index(o):
    set_flag(container(o, "weft-worker")["args"], "task", "worker:0")


@CROSSREF.overlay("StatefulSet/weft-worker: container worker: POD_INDEX must come from the fieldRef "
                  "metadata.labels['apps.kubernetes.io/pod-index']")
def pod_index_from_the_name(o):
    env_var(container(o, "weft-worker"), "POD_INDEX")["valueFrom"]["fieldRef"]["fieldPath"] = "metadata.name"


@CROSSREF.overlay("StatefulSet/weft-worker: container worker: no port named grpc")
def no_grpc_port(o):
    container(o, "weft-worker")["ports"][0]["name"] = "rpc"
    find(o, "Service", "weft-worker")["spec"]["ports"][0]["targetPort"] = 2222


@CROSSREF.overlay("StatefulSet/weft-master: container master: port grpc is 5001 but weft listens on 5000")
def container_port_not_the_listen_port(o):
    container(o, "weft-master")["ports"][0]["containerPort"] = 5001
    find(o, "Service", "weft-master")["spec"]["ports"][0]["targetPort"] = 5000


@CROSSREF.overlay("StatefulSet/weft-ps: serviceName 'weft-ps' names no Service")
def no_service(o):
    o.remove(find(o, "Service", "weft-ps"))


@CROSSREF.overlay("Service/weft-worker: must be headless (clusterIP: None)")
def service_not_headless(o):
    find(o, "Service", "weft-worker")["spec"].pop("clusterIP")


@CROSSREF.overlay("Service/weft-ps: selector {'app.kubernetes.io/component': 'worker', 'app.kubernetes.io/name': "
                  "'weft'} does not select the pods of StatefulSet/weft-ps")
def service_selecting_other_pods(o):
    find(o, "Service", "weft-ps")["spec"]["selector"]["app.kubernetes.io/component"] = "worker"


@CROSSREF.overlay("Service/weft-worker: port 2224 (targetPort grpc) does not reach weft's port 2222")
def service_port_not_weft_port(o):
    find(o, "Service", "weft-worker")["spec"]["ports"][0]["port"] = 2224


# The workers' collective socket (crossref.collective_errors).
@CROSSREF.overlay("StatefulSet/weft-worker: container worker: no --collective_port: the worker would take any free "
                  "port for its collective socket")
def worker_without_collective_port(o):
    set_flag(container(o, "weft-worker")["args"], "collective_port", None)


@CROSSREF.overlay("StatefulSet/weft-worker: container worker: --collective_port=0: the NetworkPolicies and the "
                  "container port need a fixed port number")
def worker_collective_port_any_free_one(o):
    set_flag(container(o, "weft-worker")["args"], "collective_port", "0")


# The Service's collective port resolves to nothing, too.
@CROSSREF.overlay("StatefulSet/weft-worker: container worker: no port named collective at 2223 (--collective_port)",
                  also=[rule_with("does not reach the collective port of")])
def worker_collective_port_undeclared(o):
    c = container(o, "weft-worker")
    c["ports"] = [p for p in c["ports"] if p["name"] != "collective"]


@CROSSREF.overlay("StatefulSet/weft-ps: container ps: port collective (2223) is served by no collective socket: only a "
                  "worker opens one")
def ps_declaring_a_collective_port(o):
    container(o, "weft-ps")["ports"].append({"name": "collective", "containerPort": 2223})


@CROSSREF.overlay("Service/weft-worker: port collective 2224 (targetPort collective) does not reach the collective port "
                  "of StatefulSet/weft-worker (--collective_port=2223)")
def service_collective_port_not_the_workers(o):
    next(p for p in find(o, "Service", "weft-worker")["spec"]["ports"] if p["name"] == "collective")["port"] = 2224


@CROSSREF.overlay("StatefulSet/weft-worker: volumeMount scratch: no volume or volumeClaimTemplate of that name")
def mount_without_volume(o):
    container(o, "weft-worker")["volumeMounts"].append({"name": "scratch", "mountPath": "/scratch"})


@CROSSREF.overlay("StatefulSet/weft-master: the master needs --state_dir on its volume")
def master_without_state_dir(o):
    set_flag(container(o, "weft-master")["args"], "state_dir", None)


@CROSSREF.overlay("StatefulSet/weft-master: --state_dir=/tmp/state is not on a volumeClaimTemplate mount")
def state_dir_off_its_claim(o):
    set_flag(container(o, "weft-master")["args"], "state_dir", "/tmp/state")


@CROSSREF.overlay("StatefulSet/weft-worker: --drain_seconds=twenty is not a number")
def drain_seconds_not_a_number(o):
    find(o, "ConfigMap", "weft-config")["data"]["drain-seconds"] = "twenty"


@CROSSREF.overlay("StatefulSet/weft-worker: terminationGracePeriodSeconds 15 must exceed --drain_seconds 20 "
                  "by 10 s or more")
def grace_shorter_than_drain(o):
    pod(o, "StatefulSet", "weft-worker")["terminationGracePeriodSeconds"] = 15


@CROSSREF.overlay("StatefulSet/weft-ps: container ps: no resources.limits.cpu")
def no_limits(o):
    container(o, "weft-ps")["resources"].pop("limits")


@CROSSREF.overlay("StatefulSet/weft-worker: --gpus=one is not a number")
def gpus_not_a_number(o):
    find(o, "ConfigMap", "weft-config")["data"]["worker-gpus"] = "one"


@CROSSREF.overlay("StatefulSet/weft-worker: --gpus=1 but the nvidia.com/gpu limit is 0", overlay="overlays/gpu")
def gpu_flag_without_gpu_limit(o):
    del container(o, "weft-worker")["resources"]["limits"]["nvidia.com/gpu"]


@CROSSREF.overlay("StatefulSet/weft-worker: nvidia.com/gpu limit 1 but --gpus=0 leaves it idle",
                  overlay="overlays/gpu")
def gpu_limit_left_idle(o):
    find(o, "ConfigMap", "weft-config")["data"]["worker-gpus"] = "0"


@CROSSREF.overlay("StatefulSet/weft-master: volume checkpoints: PersistentVolumeClaim weft-checkpoints is not in "
                  "the manifests")
def claim_missing(o):
    o.remove(find(o, "PersistentVolumeClaim", "weft-checkpoints"))


@CROSSREF.overlay("Job/weft-submit: volume config: ConfigMap weft-conf is not in the manifests")
def configmap_missing(o):
    volume(pod(o, "Job", "weft-submit"), "config")["configMap"]["name"] = "weft-conf"


@CROSSREF.overlay("Job/weft-submit: volume config: ConfigMap ConfigMap/weft-config has no key job.txt")
def configmap_volume_key_missing(o):
    volume(pod(o, "Job", "weft-submit"), "config")["configMap"]["items"][0]["key"] = "job.txt"


@CROSSREF.overlay("Job/weft-submit: env WEFT_MASTER: ConfigMap weft-config has no key 'mastr'")
def configmap_env_key_missing(o):
    env = env_var(pod(o, "Job", "weft-submit")["containers"][0], "WEFT_MASTER")
    env["valueFrom"]["configMapKeyRef"]["key"] = "mastr"


@CROSSREF.overlay("StatefulSet/weft-ps: its --cluster differs from the master's")
def cluster_flag_differs(o):
    set_flag(container(o, "weft-ps")["args"], "cluster",
             "ps=weft-ps-0.weft-ps:2222;worker=weft-worker-0.weft-worker:2222,weft-worker-1.weft-worker:2222")


@CROSSREF.overlay("StatefulSet/weft-worker: the cluster spec's worker job is ['weft-worker-0.weft-worker:2222', "
                  "'weft-worker-1.weft-worker:2222'], but the StatefulSet's pods are")
def cluster_spec_out_of_step_with_replicas(o):
    find(o, "StatefulSet", "weft-worker")["spec"]["replicas"] = 3


@CROSSREF.overlay("StatefulSet/weft-ps: the cluster spec's ps job is ['weft-ps-0.weft-pss:2222']")
def cluster_spec_dns_typo(o):
    cm = find(o, "ConfigMap", "weft-config")
    cm["data"]["cluster"] = cm["data"]["cluster"].replace("weft-ps-0.weft-ps", "weft-ps-0.weft-pss")


@CROSSREF.overlay("the cluster spec names jobs no StatefulSet runs: ['evaluator']")
def cluster_spec_extra_job(o):
    find(o, "ConfigMap", "weft-config")["data"]["cluster"] += ";evaluator=weft-evaluator-0.weft-evaluator:2222"


@CROSSREF.overlay("ConfigMap/weft-config: master is 'weft-master:5000'; the master pod is reached at "
                  "'weft-master-0.weft-master:5000'",
                  also=["--master is %r; the master pod is reached at %r"])  # the workers' --master
def master_address_mismatch(o):
    find(o, "ConfigMap", "weft-config")["data"]["master"] = "weft-master:5000"


@CROSSREF.overlay("ConfigMap/weft-config: job.pbtxt has no checkpoint { dir: ... }")
def job_without_checkpoints(o):
    data = find(o, "ConfigMap", "weft-config")["data"]
    data["job.pbtxt"] = re.sub(r"checkpoint \{[^}]*\}", "", data["job.pbtxt"])


@CROSSREF.overlay("StatefulSet/weft-ps: checkpoint dir /checkpoints/fmnist-mlp (job.pbtxt) is not on a shared "
                  "PersistentVolumeClaim here")
def checkpoints_on_a_local_volume(o):
    spec = pod(o, "StatefulSet", "weft-ps")
    spec["volumes"].append({"name": "local", "emptyDir": {}})
    spec["containers"][0]["volumeMounts"].append({"name": "local", "mountPath": "/checkpoints/fmnist-mlp"})


@CROSSREF.overlay("checkpoint dir /checkpoints/fmnist-mlp is on different claims in different daemons: "
                  "['weft-checkpoints', 'weft-checkpoints-ps']")
def checkpoints_on_two_claims(o):
    pvc = copy.deepcopy(find(o, "PersistentVolumeClaim", "weft-checkpoints"))
    pvc["metadata"]["name"] = "weft-checkpoints-ps"
    o.append(pvc)
    volume(pod(o, "StatefulSet", "weft-ps"), "checkpoints")["persistentVolumeClaim"]["claimName"] = \
        "weft-checkpoints-ps"


@CROSSREF.overlay("PersistentVolumeClaim/weft-checkpoints: holds the shared checkpoints: it must be ReadWriteMany")
def checkpoint_claim_not_shared(o):
    find(o, "PersistentVolumeClaim", "weft-checkpoints")["spec"]["accessModes"] = ["ReadWriteOnce"]


@CROSSREF.overlay("StatefulSet/weft-ps: --checkpoint_root=/ is not on the shared checkpoint claim")
def checkpoint_root_off_the_claim(o):
    set_flag(container(o, "weft-ps")["args"], "checkpoint_root", "/")


@CROSSREF.overlay("Job/weft-submit: container submit: no WEFT_MASTER")
def client_without_master(o):
    c = pod(o, "Job", "weft-submit")["containers"][0]
    c["env"].remove(env_var(c, "WEFT_MASTER"))


@CROSSREF.overlay("Job/weft-submit: container submit: `weft status` is not a client command here")
def job_running_another_command(o):
    pod(o, "Job", "weft-submit")["containers"][0]["args"][:2] = ["status", "job-1"]


@CROSSREF.overlay("Job/weft-submit: container submit: `weft submit` has no flag --folow")
def unknown_client_flag(o):
    pod(o, "Job", "weft-submit")["containers"][0]["args"].append("--folow")


@CROSSREF.overlay("Job/weft-submit: container submit: weft submit takes one job file")
def two_job_files(o):
    pod(o, "Job", "weft-submit")["containers"][0]["args"].append("/etc/weft/job.pbtxt")


@CROSSREF.overlay("Job/weft-submit: container submit: the job file /etc/weft/jobs.pbtxt is not in a mounted "
                  "ConfigMap")
def job_file_not_mounted(o):
    pod(o, "Job", "weft-submit")["containers"][0]["args"][1] = "/etc/weft/jobs.pbtxt"


@CROSSREF.overlay("Job/weft-submit: container wait-for-master: command must be weft or /bin/sh")
def client_under_another_shell(o):
    pod(o, "Job", "weft-submit")["initContainers"][0]["command"][0] = "/bin/bash"


@CROSSREF.overlay("Job/weft-submit: backoffLimit must be 0")
def submit_retried(o):
    find(o, "Job", "weft-submit")["spec"]["backoffLimit"] = 3


@CROSSREF.overlay("StatefulSet/weft-master: container master: $(LOG_LEVEL) is not defined in its env")
def undefined_variable(o):
    container(o, "weft-master")["args"].append("--log_level=$(LOG_LEVEL)")


@CROSSREF.overlay("StatefulSet/weft-evaluator: label app.kubernetes.io/component must be one of")
def statefulset_of_no_role(o):
    sts = copy.deepcopy(find(o, "StatefulSet", "weft-ps"))
    sts["metadata"]["name"] = "weft-evaluator"
    sts["metadata"]["labels"]["app.kubernetes.io/component"] = "evaluator"
    o.append(sts)


@CROSSREF.overlay("no StatefulSet runs the ps")
def no_ps(o):
    o.remove(find(o, "StatefulSet", "weft-ps"))


CrossrefRulesTest = CROSSREF.test_case("CrossrefRulesTest", "crossref.Checker, one broken variant per rule.")


# Security: hardening, each daemon's own credentials, the health port (security.py).
SECURITY = Variants()


@SECURITY.overlay("StatefulSet/weft-worker: automountServiceAccountToken must be false")
def service_account_token(o):
    pod(o, "StatefulSet", "weft-worker").pop("automountServiceAccountToken")


@SECURITY.overlay("StatefulSet/weft-worker: hostNetwork must not be set")
def host_network(o):
    pod(o, "StatefulSet", "weft-worker")["hostNetwork"] = True


@SECURITY.overlay("Job/weft-submit: hostPID must not be set")
def host_pid(o):
    pod(o, "Job", "weft-submit")["hostPID"] = True


@SECURITY.overlay("Job/weft-submit: pod securityContext.runAsNonRoot must be true")
def root_allowed(o):
    pod(o, "Job", "weft-submit")["securityContext"].pop("runAsNonRoot")


@SECURITY.overlay("StatefulSet/weft-master: pod securityContext.runAsUser is 0 (root)")
def root_user(o):
    pod(o, "StatefulSet", "weft-master")["securityContext"]["runAsUser"] = 0


@SECURITY.overlay("StatefulSet/weft-ps: pod securityContext.seccompProfile.type must be RuntimeDefault, got None")
def no_seccomp_profile(o):
    pod(o, "StatefulSet", "weft-ps")["securityContext"].pop("seccompProfile")


@SECURITY.overlay("StatefulSet/weft-master: container master: securityContext.readOnlyRootFilesystem must be true")
def writable_root_filesystem(o):
    container(o, "weft-master")["securityContext"].pop("readOnlyRootFilesystem")


@SECURITY.overlay("Job/weft-submit: container wait-for-master: securityContext.allowPrivilegeEscalation must be "
                  "false")
def privilege_escalation_in_init_container(o):
    pod(o, "Job", "weft-submit")["initContainers"][0]["securityContext"].pop("allowPrivilegeEscalation")


@SECURITY.overlay("StatefulSet/weft-worker: container worker: securityContext.privileged must not be set")
def privileged(o):
    container(o, "weft-worker")["securityContext"]["privileged"] = True


@SECURITY.overlay("StatefulSet/weft-worker: container worker: securityContext.capabilities.drop must include ALL")
def capabilities_kept(o):
    container(o, "weft-worker")["securityContext"]["capabilities"]["drop"] = ["NET_RAW"]


@SECURITY.overlay("StatefulSet/weft-ps: container ps: securityContext.capabilities.add ['NET_ADMIN']")
def capability_added(o):
    container(o, "weft-ps")["securityContext"]["capabilities"]["add"] = ["NET_ADMIN"]


@SECURITY.overlay("StatefulSet/weft-master: container master: securityContext runs as root")
def container_as_root(o):
    container(o, "weft-master")["securityContext"]["runAsUser"] = 0


@SECURITY.overlay("StatefulSet/weft-master: container master: securityContext.seccompProfile.type Unconfined "
                  "overrides the pod's RuntimeDefault")
def container_unconfined(o):
    container(o, "weft-master")["securityContext"]["seccompProfile"] = {"type": "Unconfined"}


@SECURITY.overlay("StatefulSet/weft-worker: volume tls: defaultMode 0644 lets the key be written, executed or read "
                  "by any user")
def world_readable_key(o):
    volume(pod(o, "StatefulSet", "weft-worker"), "tls")["secret"]["defaultMode"] = 0o644


@SECURITY.overlay("Job/weft-submit: volume tls: Secret files belong to root, so a non-root user reads them only "
                  "through securityContext.fsGroup")
def secret_unreadable_without_fs_group(o):
    pod(o, "Job", "weft-submit")["securityContext"].pop("fsGroup")


@SECURITY.overlay("StatefulSet/weft-ps: container ps: volumeMount tls (a Secret) must be readOnly: true")
def writable_secret_mount(o):
    next(m for m in container(o, "weft-ps")["volumeMounts"] if m["name"] == "tls").pop("readOnly")


@SECURITY.overlay("StatefulSet/weft-ps: container ps: --ca=/etc/ssl/certs/ca.crt is not in a mounted Secret")
def tls_file_outside_a_secret(o):
    set_flag(container(o, "weft-ps")["args"], "ca", "/etc/ssl/certs/ca.crt")


@SECURITY.overlay("StatefulSet/weft-ps: container ps: --ca=/etc/weft/tls/ca.crt comes from Secret weft-tls-worker; "
                  "this pod may mount only weft-tls-ps")
def another_roles_secret(o):
    volume(pod(o, "StatefulSet", "weft-ps"), "tls")["secret"]["secretName"] = "weft-tls-worker"


@SECURITY.overlay("StatefulSet/weft-worker: container worker: --insecure turns off TLS and authentication")
def daemon_insecure(o):
    container(o, "weft-worker")["args"].append("--insecure")


@SECURITY.overlay("StatefulSet/weft-master: container master: `weft master` has no --key")
def daemon_without_key(o):
    set_flag(container(o, "weft-master")["args"], "key", None)


@SECURITY.overlay("StatefulSet/weft-worker: container worker: --cert=/etc/weft/tls/worker-0.crt is not this "
                  "worker's own worker-$(POD_INDEX).crt")
def another_tasks_certificate(o):
    set_flag(container(o, "weft-worker")["args"], "cert", "/etc/weft/tls/worker-0.crt")


@SECURITY.overlay("Job/weft-submit: container submit: --insecure: the master serves only TLS")
def client_insecure(o):
    pod(o, "Job", "weft-submit")["containers"][0]["args"].append("--insecure")


@SECURITY.overlay("Job/weft-submit: container submit: no WEFT_CA (or --ca)")
def client_without_ca(o):
    c = pod(o, "Job", "weft-submit")["containers"][0]
    c["env"].remove(env_var(c, "WEFT_CA"))


@SECURITY.overlay("Job/weft-submit: container submit: no client certificate (WEFT_CERT and WEFT_KEY) or token")
def client_without_certificate(o):
    c = pod(o, "Job", "weft-submit")["containers"][0]
    c["env"] = [e for e in c["env"] if e["name"] not in ("WEFT_CERT", "WEFT_KEY")]


@SECURITY.overlay("StatefulSet/weft-ps: container ps: no --health_port")
def no_health_port(o):
    set_flag(container(o, "weft-ps")["args"], "health_port", None)


# One port cannot be both open to the kubelet and closed to strangers, so
# the NetworkPolicies refuse the probes too.
@SECURITY.overlay("StatefulSet/weft-master: container master: --health_port=5000 is the daemon's own port",
                  also=["%s: no NetworkPolicy admits %s to port %d; %s"])
def health_on_the_mtls_port(o):
    c = container(o, "weft-master")
    set_flag(c["args"], "health_port", "5000")
    c["ports"][1]["containerPort"] = 5000
    c["readinessProbe"]["grpc"]["port"] = c["livenessProbe"]["grpc"]["port"] = 5000


@SECURITY.overlay("StatefulSet/weft-worker: container worker: no port named health at 8081 (--health_port)")
def health_port_unnamed(o):
    container(o, "weft-worker")["ports"][1]["name"] = "probe"


@SECURITY.overlay("StatefulSet/weft-ps: container ps: no livenessProbe")
def no_liveness_probe(o):
    container(o, "weft-ps").pop("livenessProbe")


@SECURITY.overlay("StatefulSet/weft-worker: container worker: readinessProbe must be a gRPC health probe")
def tcp_probe(o):
    container(o, "weft-worker")["readinessProbe"] = {"tcpSocket": {"port": 2222}}


@SECURITY.overlay("StatefulSet/weft-ps: container ps: livenessProbe probes port 2223, but the plaintext health "
                  "service is on 8081")
def probe_on_wrong_port(o):
    container(o, "weft-ps")["livenessProbe"]["grpc"]["port"] = 2223


SecurityRulesTest = SECURITY.test_case("SecurityRulesTest", "security.py, one broken variant per rule.")


# NetworkPolicies (netpol.py): every flow weft needs, none it must refuse.
NETPOL = Variants()


@NETPOL.overlay("StatefulSet/weft-master: no NetworkPolicy admits the weft client pods of Job/weft-submit to port "
                "5000; clients -> master must be allowed")
def clients_shut_out_of_the_master(o):
    policy(o, "weft-master")["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] = \
        "weft-cli"


@NETPOL.overlay("StatefulSet/weft-ps: no NetworkPolicy admits the pods of StatefulSet/weft-master to port 2222; "
                "master -> tasks and task -> task must be allowed")
def master_shut_out_of_the_tasks(o):
    policy(o, "weft-tasks")["ingress"][0]["from"][0]["podSelector"] = {"matchExpressions": [
        {"key": "app.kubernetes.io/component", "operator": "In", "values": ["worker", "ps"]}]}


@NETPOL.overlay("StatefulSet/weft-worker: no NetworkPolicy admits any address to port 8081; the kubelet's probes")
def health_port_closed(o):
    policy(o, "weft")["ingress"][0]["ports"][0]["port"] = 8082


@NETPOL.overlay("StatefulSet/weft-master: its NetworkPolicy egress does not let it reach port 2222 of "
                "StatefulSet/weft-worker")
def egress_to_tasks_closed(o):
    policy(o, "weft")["egress"][0]["ports"][0]["port"] = 2224


@NETPOL.overlay("StatefulSet/weft-worker: NetworkPolicy/weft-tasks admits the pods of StatefulSet/weft-ps to port 1; "
                "weft serves only port 2222, the health port 8081, the metrics port 9464 and the collective port 2223")
def every_port_open_between_tasks(o):
    policy(o, "weft-tasks")["ingress"][0].pop("ports")


@NETPOL.overlay("StatefulSet/weft-master: NetworkPolicy/weft-master admits the pods of StatefulSet/weft-ps to "
                "port 5000; only weft clients and the workers that register call the master")
def tasks_reach_the_master(o):
    policy(o, "weft-master")["ingress"][0]["from"].append(
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "weft"}}})


@NETPOL.overlay("StatefulSet/weft-master: no NetworkPolicy admits the pods of StatefulSet/weft-worker to port 5000; "
                "workers register with the master (weft worker --master)")
def workers_shut_out_of_the_master(o):
    del policy(o, "weft-master")["ingress"][1]


@NETPOL.overlay("StatefulSet/weft-worker: its NetworkPolicy egress does not let it reach port 5000 of "
                "StatefulSet/weft-master; workers register with the master")
def workers_cannot_leave_for_the_master(o):
    o.remove(find(o, "NetworkPolicy", "weft-register"))


@NETPOL.overlay("StatefulSet/weft-worker: NetworkPolicy/weft-tasks admits the weft client pods of Job/weft-submit "
                "to port 2222; clients talk to the master, never to a task")
def clients_reach_the_tasks(o):
    policy(o, "weft-tasks")["ingress"][0]["from"].append(
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "weft-client"}}})


@NETPOL.overlay("StatefulSet/weft-master: NetworkPolicy/weft-master admits any pod of another namespace to port "
                "5000; only weft's own pods and clients may reach a daemon")
def master_open_to_other_namespaces(o):
    policy(o, "weft-master")["ingress"][0]["from"].append({"namespaceSelector": {}})


@NETPOL.overlay("StatefulSet/weft-worker: no NetworkPolicy with policyTypes Ingress selects its pods")
def no_network_policies(o):
    o[:] = [x for x in o if x["kind"] != "NetworkPolicy"]


@NETPOL.overlay("StatefulSet/weft-ps: its NetworkPolicy egress refuses DNS (UDP port 53)")
def dns_closed(o):
    policy(o, "weft")["egress"].pop(1)


@NETPOL.overlay("StatefulSet/weft-master: no NetworkPolicy admits Prometheus (app.kubernetes.io/name=prometheus in "
                "namespace monitoring) to port 9464; Prometheus scrapes every daemon's metrics port")
def prometheus_shut_out(o):
    peer = policy(o, "weft-metrics")["ingress"][0]["from"][0]
    peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] = "observability"


@NETPOL.overlay("StatefulSet/weft-ps: NetworkPolicy/weft-metrics admits any other pod of namespace monitoring to port "
                "9464; only Prometheus may reach a metrics port")
def metrics_open_to_the_monitoring_namespace(o):
    policy(o, "weft-metrics")["ingress"][0]["from"][0].pop("podSelector")


@NETPOL.overlay("StatefulSet/weft-master: NetworkPolicy/weft-metrics admits the weft client pods of Job/weft-submit to "
                "port 9464; only Prometheus may reach a metrics port (the master's serves the dashboard too")
def dashboard_open_to_clients(o):
    policy(o, "weft-metrics")["ingress"][0]["from"].append(
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "weft-client"}}})


@NETPOL.overlay("StatefulSet/weft-worker: NetworkPolicy/weft-metrics admits a pod labelled "
                "app.kubernetes.io/name=prometheus in another namespace to port 9464")
def metrics_open_to_prometheus_anywhere(o):
    policy(o, "weft-metrics")["ingress"][0]["from"][0]["namespaceSelector"] = {}


@NETPOL.overlay("StatefulSet/weft-master: NetworkPolicy/weft-master admits Prometheus (app.kubernetes.io/name=prometheus "
                "in namespace monitoring) to port 5000; only weft's own pods and clients may reach a daemon")
def prometheus_reaches_the_master_api(o):
    # Its certificate is an admin's: the master's API must stay out of its reach.
    policy(o, "weft-master")["ingress"][0]["from"].append(copy.deepcopy(policy(o, "weft-metrics")["ingress"][0]["from"][0]))


@NETPOL.overlay("StatefulSet/weft-worker: no NetworkPolicy admits the pods of StatefulSet/weft-worker to port 2223; "
                "worker -> worker on the collective port must be allowed")
def workers_shut_out_of_the_collective_port(o):
    policy(o, "weft-collective")["ingress"][0]["ports"][0]["port"] = 2224


@NETPOL.overlay("StatefulSet/weft-worker: its NetworkPolicy egress does not let it reach port 2223 of "
                "StatefulSet/weft-worker; worker -> worker on the collective port must be allowed")
def collective_egress_closed(o):
    policy(o, "weft-collective").pop("egress")


@NETPOL.overlay("StatefulSet/weft-worker: NetworkPolicy/weft-collective admits the pods of StatefulSet/weft-ps to port "
                "2223; only workers take part in collectives")
def collective_port_open_to_every_daemon(o):
    policy(o, "weft-collective")["ingress"][0]["from"][0]["podSelector"]["matchLabels"].pop(
        "app.kubernetes.io/component")


@NETPOL.overlay("StatefulSet/weft-worker: NetworkPolicy/weft-collective admits Prometheus (app.kubernetes.io/name="
                "prometheus in namespace monitoring) to port 2223; only the other workers may reach a worker's "
                "collective port")
def collective_port_open_to_prometheus(o):
    policy(o, "weft-collective")["ingress"][0]["from"].append(
        copy.deepcopy(policy(o, "weft-metrics")["ingress"][0]["from"][0]))


NetworkPolicyRulesTest = NETPOL.test_case("NetworkPolicyRulesTest", "netpol.py, one broken variant per rule.")


# The metrics port of each daemon: flags, container port, annotations, Service (monitoring.py, crossref.py).
METRICS = Variants()


@METRICS.overlay("StatefulSet/weft-worker: container worker: --metrics_plaintext with --metrics_host=0.0.0.0: the "
                 "daemon serves plain HTTP only on a loopback address")
def plaintext_metrics_off_the_loopback(o):
    container(o, "weft-worker")["args"].append("--metrics_plaintext")


@METRICS.overlay("StatefulSet/weft-ps: container ps: --metrics_plaintext with --metrics_host=10.0.0.7: the daemon "
                 "serves plain HTTP only on a loopback address")
def plaintext_metrics_on_a_pod_address(o):
    container(o, "weft-ps")["args"] += ["--metrics_host=10.0.0.7", "--metrics_plaintext=true"]


@METRICS.overlay("StatefulSet/weft-ps: container ps: --metrics_host needs --metrics_port")
def metrics_host_without_metrics_port(o):
    drop_metrics(o, "weft-ps")
    container(o, "weft-ps")["args"].append("--metrics_host=0.0.0.0")


@METRICS.overlay("StatefulSet/weft-worker: container worker: --metrics_port=0: Prometheus and the container port need "
                 "a fixed port number")
def metrics_port_not_fixed(o):
    set_flag(container(o, "weft-worker")["args"], "metrics_port", "0")


@METRICS.overlay("StatefulSet/weft-master: container master: --metrics_port=8081 is also its health port",
                 also=[rule_with("no port named metrics at %d"), rule_with("prometheus.io/port is %r"),
                       rule_with("does not reach the metrics port of"), rule_with("%s: %s admits %s to port %d; %s")])
def metrics_port_is_the_health_port(o):
    # The rest follows: the container port, the annotation and the Service still say 9464, and the health port's
    # rule admits anyone to what is now also the metrics port.
    set_flag(container(o, "weft-master")["args"], "metrics_port", "8081")


@METRICS.overlay("StatefulSet/weft-ps: container ps: no port named metrics at 9464 (--metrics_port)")
def no_metrics_container_port(o):
    c = container(o, "weft-ps")
    c["ports"] = [p for p in c["ports"] if p["name"] != "metrics"]
    find(o, "Service", "weft-ps")["spec"]["ports"][1]["targetPort"] = 9464


@METRICS.overlay("StatefulSet/weft-worker: container worker: port metrics (9464) is served by no --metrics_port")
def metrics_container_port_without_flag(o):
    drop_metrics(o, "weft-worker", keep=("port",))


@METRICS.overlay("StatefulSet/weft-worker: pod annotation prometheus.io/scrape is 'false': set \"true\"")
def metrics_not_announced(o):
    annotations(o, "weft-worker")["prometheus.io/scrape"] = "false"


@METRICS.overlay("StatefulSet/weft-ps: pod annotation prometheus.io/scrape is \"true\" but container ps serves no "
                 "metrics port Prometheus can reach (no --metrics_port)")
def scrape_annotation_without_metrics_port(o):
    drop_metrics(o, "weft-ps", keep=("annotations",))


@METRICS.overlay("StatefulSet/weft-master: pod annotation prometheus.io/scrape is \"true\" but container master serves "
                 "no metrics port Prometheus can reach (--metrics_host=127.0.0.1 is a loopback address)")
def scrape_annotation_on_a_loopback_port(o):
    drop_metrics(o, "weft-master", keep=("flag", "annotations"))
    container(o, "weft-master")["args"].append("--metrics_host=127.0.0.1")


@METRICS.overlay("StatefulSet/weft-worker: pod annotation prometheus.io/port is '9090', but --metrics_port=9464")
def scrape_annotation_port_mismatch(o):
    annotations(o, "weft-worker")["prometheus.io/port"] = "9090"


@METRICS.overlay("StatefulSet/weft-master: pod annotation prometheus.io/scheme is 'http': the metrics port serves "
                 "HTTPS only")
def scrape_annotation_plain_http(o):
    annotations(o, "weft-master")["prometheus.io/scheme"] = "http"


@METRICS.overlay("StatefulSet/weft-ps: pod annotation prometheus.io/path is '/stats': weft serves /metrics")
def scrape_annotation_wrong_path(o):
    annotations(o, "weft-ps")["prometheus.io/path"] = "/stats"


@METRICS.overlay("Service/weft-worker: port metrics 9465 (targetPort metrics) does not reach the metrics port of "
                 "StatefulSet/weft-worker (--metrics_port=9464)")
def service_metrics_port_not_the_daemons(o):
    find(o, "Service", "weft-worker")["spec"]["ports"][1]["port"] = 9465


MetricsRulesTest = METRICS.test_case("MetricsRulesTest", "The daemons' metrics port, one broken variant per rule.")


# The ServiceMonitor (k8s/monitoring) against the daemons it scrapes (monitoring.py, schema.py).
MONITOR = Variants()


@MONITOR.monitoring("no ServiceMonitor")
def no_service_monitor(o):
    o[:] = [x for x in o if x["kind"] != "ServiceMonitor"]


@MONITOR.monitoring("ServiceMonitor/weft: selector {'matchExpressions': [{'key': 'app.kubernetes.io/name', "
                    "'operator': 'In', 'values': ['weft-client']}")
def service_monitor_selecting_no_daemon(o):
    service_monitor(o)["selector"]["matchExpressions"][0]["values"] = ["weft-client"]


@MONITOR.monitoring("ServiceMonitor/weft: no endpoints: it scrapes nothing")
def service_monitor_without_endpoints(o):
    service_monitor(o)["endpoints"] = []


@MONITOR.monitoring("ServiceMonitor/weft: endpoints[0]: port 'prometheus' is not a port of Service/weft-master")
def service_monitor_port_unknown(o):
    service_monitor(o)["endpoints"][0]["port"] = "prometheus"


@MONITOR.monitoring("ServiceMonitor/weft: endpoints[0]: port grpc of Service/weft-master reaches port 5000 of "
                    "StatefulSet/weft-master, not its metrics port (--metrics_port=9464)")
def service_monitor_scraping_the_grpc_port(o):
    service_monitor(o)["endpoints"][0]["port"] = "grpc"


@MONITOR.monitoring("ServiceMonitor/weft: endpoints[0]: scheme 'http': the daemons' metrics port serves HTTPS only")
def service_monitor_plain_http(o):
    service_monitor(o)["endpoints"][0]["scheme"] = "http"


@MONITOR.monitoring("ServiceMonitor/weft: endpoints[0]: path '/': weft serves /metrics")
def service_monitor_scraping_the_dashboard(o):
    service_monitor(o)["endpoints"][0]["path"] = "/"


@MONITOR.monitoring("ServiceMonitor/weft: endpoints[0]: no tlsConfig.keySecret from a Secret: the metrics port "
                    "refuses a client without a certificate")
def service_monitor_without_a_client_key(o):
    service_monitor(o)["endpoints"][0]["tlsConfig"].pop("keySecret")


@MONITOR.monitoring("ServiceMonitor/weft: endpoints[0]: tlsConfig.cert.secret is Secret weft-tls-client; Prometheus' "
                    "certificate and the CA are in weft-tls-prometheus")
def service_monitor_with_the_submit_jobs_certificate(o):
    service_monitor(o)["endpoints"][0]["tlsConfig"]["cert"]["secret"]["name"] = "weft-tls-client"


@MONITOR.monitoring("ServiceMonitor/weft: endpoints[0]: tlsConfig.insecureSkipVerify: Prometheus would take any "
                    "certificate")
def service_monitor_skipping_verification(o):
    service_monitor(o)["endpoints"][0]["tlsConfig"]["insecureSkipVerify"] = True


@MONITOR.monitoring("ServiceMonitor/weft: endpoints[0]: no tlsConfig.serverName: Prometheus would check the pod's IP "
                    "address")
def service_monitor_without_server_name(o):
    service_monitor(o)["endpoints"][0]["tlsConfig"].pop("serverName")


@MONITOR.monitoring("ServiceMonitor/weft: endpoints[0]: tlsConfig.serverName 'weft-worker-0.weft-worker' is not a name "
                    "in the certificate of weft-master-0.weft-master")
def service_monitor_naming_one_pod(o):
    service_monitor(o)["endpoints"][0]["tlsConfig"]["serverName"] = "weft-worker-0.weft-worker"


@MONITOR.monitoring("ServiceMonitor/weft: spec.endpoints[0].intervall: unknown field (not in ServiceMonitorEndpoint)")
def service_monitor_unknown_field(o):
    service_monitor(o)["endpoints"][0]["intervall"] = "15s"


@MONITOR.monitoring("ServiceMonitor/weft: spec.endpoints[0].scheme: must be one of ['http', 'https']",
                    also=[rule_with("the daemons' metrics port serves")])
def service_monitor_scheme_not_in_the_enum(o):
    service_monitor(o)["endpoints"][0]["scheme"] = "HTTPS"


@MONITOR.monitoring("ServiceMonitor/weft: spec.selector: required field missing (ServiceMonitorSpec)",
                    also=[rule_with("selects no weft daemon's Service")])
def service_monitor_without_selector(o):
    service_monitor(o).pop("selector")


ServiceMonitorRulesTest = MONITOR.test_case("ServiceMonitorRulesTest",
                                            "The ServiceMonitor, one broken variant per rule.")


# The API schema (schema.py).
SCHEMA = Variants()


@SCHEMA.overlay("StatefulSet/weft-worker: spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem: "
                "unknown field (not in V1SecurityContext)")
def unknown_field(o):
    container(o, "weft-worker")["securityContext"]["readOnlyRootFileSystem"] = True


@SCHEMA.overlay("StatefulSet/weft-ps: spec.replicas: expected int, got str '1'")
def wrong_type(o):
    find(o, "StatefulSet", "weft-ps")["spec"]["replicas"] = "1"


@SCHEMA.overlay("StatefulSet/weft-master: spec.template.spec.containers[0].lifecycle.preStop.httpGet.port: "
                "required field missing")
def missing_required_field(o):
    container(o, "weft-master")["lifecycle"] = {"preStop": {"httpGet": {"path": "/quitquitquit"}}}


@SCHEMA.overlay("StatefulSet/weft-master: spec.template.spec.tolerations: expected a list, got dict")
def map_for_a_list(o):
    pod(o, "StatefulSet", "weft-master")["tolerations"] = {"key": "dedicated"}


@SCHEMA.overlay("ConfigMap/weft-config: metadata.labels: expected a map, got list")
def list_for_a_map(o):
    find(o, "ConfigMap", "weft-config")["metadata"]["labels"] = ["weft"]


@SCHEMA.overlay("StatefulSet/weft-worker: spec.updateStrategy: expected an object (V1StatefulSetUpdateStrategy), "
                "got str")
def string_for_an_object(o):
    find(o, "StatefulSet", "weft-worker")["spec"]["updateStrategy"] = "RollingUpdate"


@SCHEMA.overlay("ConfigMap/weft-config: no schema for apiVersion v2, kind ConfigMap")
def unknown_api_version(o):
    find(o, "ConfigMap", "weft-config")["apiVersion"] = "v2"


@SCHEMA.tfjob("TFJob/weft-fmnist: spec.tfReplicaSpecs.Trainer: replica type must be one of")
def unknown_replica_type(tfjob, others):
    specs = tfjob["spec"]["tfReplicaSpecs"]
    specs["Trainer"] = copy.deepcopy(specs["PS"])


@SCHEMA.tfjob("TFJob/weft-fmnist: spec.tfReplicaSpecs.PS.restartPolicy: must be one of")
def unknown_restart_policy(tfjob, others):
    tfjob["spec"]["tfReplicaSpecs"]["PS"]["restartPolicy"] = "Sometimes"


@SCHEMA.tfjob("TFJob/weft-fmnist: spec.tfReplicaSpecs.PS.template.spec.restartPolicyy: unknown field")
def unknown_field_in_a_replica_template(tfjob, others):
    tfjob["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["restartPolicyy"] = "Never"


@SCHEMA.tfjob("TFJob/weft-fmnist: spec.tfReplicaSpecs.PS.template.spec.containers[0].lifecycle.preStop.httpGet.port: "
              "required field missing (V1HTTPGetAction)")
def missing_required_field_in_a_replica_template(tfjob, others):
    c = tfjob["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]
    c["lifecycle"] = {"preStop": {"httpGet": {"path": "/quitquitquit"}}}


SchemaRulesTest = SCHEMA.test_case("SchemaRulesTest", "schema.py, one broken variant per rule.")


# The TFJob against Kubeflow's conventions and the base objects (crossref.check_tfjob).
TFJOB = Variants()


@TFJOB.tfjob("TFJob: no PS replica")
def no_ps_replica(tfjob, others):
    tfjob["spec"]["tfReplicaSpecs"].pop("PS")


@TFJOB.tfjob("TFJob Worker: the operator needs a container named tensorflow")
def container_not_named_tensorflow(tfjob, others):
    tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "weft"


@TFJOB.tfjob("TFJob PS: no port named tfjob-port (the port TF_CONFIG lists)")
def no_tfjob_port(tfjob, others):
    tfjob["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]["ports"][0]["name"] = "grpc"


@TFJOB.tfjob("TFJob PS: does not run `weft ps`")
def ps_replica_running_a_worker(tfjob, others):
    tfjob["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]["args"][0] = "worker"


@TFJOB.tfjob("TFJob PS: the cluster and task come from TF_CONFIG; pass no --cluster/--task")
def cluster_flag_under_tf_config(tfjob, others):
    tfjob["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]["args"].append("--cluster=x=a:1")


@TFJOB.tfjob("TFJob Worker: `weft worker` has no flag --gpu")
def unknown_replica_flag(tfjob, others):
    tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"].append("--gpu=1")


@TFJOB.tfjob("TFJob PS: $(LOG_LEVEL) is not defined in its env")
def replica_undefined_variable(tfjob, others):
    c = tfjob["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]
    c["args"].append("--log_level=$(LOG_LEVEL)")


@TFJOB.tfjob("TFJob PS: POD_INDEX must come from the fieldRef metadata.labels['training.kubeflow.org/replica-index']")
def replica_pod_index_from_the_name(tfjob, others):
    c = tfjob["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]
    env_var(c, "POD_INDEX")["valueFrom"]["fieldRef"]["fieldPath"] = "metadata.name"


@TFJOB.tfjob("TFJob Worker: claim weft-checkpoints-2 is not created by deploy/k8s")
def replica_claim_missing(tfjob, others):
    spec = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    volume(spec, "checkpoints")["persistentVolumeClaim"]["claimName"] = "weft-checkpoints-2"


@TFJOB.tfjob("TFJob Chief: ConfigMap weft-fmnist-config is not created by deploy/k8s")
def replica_configmap_missing(tfjob, others):
    spec = tfjob["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
    volume(spec, "config")["configMap"]["name"] = "weft-fmnist-config"


@TFJOB.tfjob("TFJob Worker: volumeMount scratch has no volume")
def replica_mount_without_volume(tfjob, others):
    c = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    c["volumeMounts"].append({"name": "scratch", "mountPath": "/scratch"})


@TFJOB.tfjob("TFJob Worker: the shared checkpoints volume is not mounted at /checkpoints")
def replica_checkpoints_elsewhere(tfjob, others):
    c = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    next(m for m in c["volumeMounts"] if m["name"] == "checkpoints")["mountPath"] = "/ckpt"


@TFJOB.tfjob("TFJob Worker: container tensorflow: `weft worker` has no --cert")
def replica_without_certificate(tfjob, others):
    set_flag(tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"], "cert", None)


@TFJOB.tfjob("TFJob Chief: container tensorflow: readinessProbe probes port 2222, but the plaintext health service "
             "is on 8081")
def chief_probing_the_mtls_port(tfjob, others):
    tfjob["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"][
        "port"] = 2222


@TFJOB.tfjob("TFJob Chief: no --data_root")
def chief_master_without_data_root(tfjob, others):
    c = tfjob["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
    c["args"][0] = c["args"][0].replace("--data_root=/usr/share/datasets", "")


@TFJOB.tfjob("TFJob Chief: container tensorflow: no client certificate (WEFT_CERT and WEFT_KEY)")
def chief_client_without_key(tfjob, others):
    c = tfjob["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
    c["env"].remove(env_var(c, "WEFT_KEY"))


@TFJOB.tfjob("TFJob Worker: automountServiceAccountToken must be false")
def replica_service_account_token(tfjob, others):
    tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["automountServiceAccountToken"] = True


@TFJOB.tfjob("TFJob Worker: container tensorflow: --ca=/etc/weft/tls/ca.crt comes from Secret weft-fmnist-tls-ps; "
             "this pod may mount only weft-fmnist-tls-worker")
def worker_holding_the_ps_keys(tfjob, others):
    spec = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    volume(spec, "tls")["secret"]["secretName"] = "weft-fmnist-tls-ps"


@TFJOB.tfjob("TFJob Worker: no NetworkPolicy with policyTypes Ingress selects its pods")
def replicas_without_network_policies(tfjob, others):
    others[:] = []


@TFJOB.tfjob("TFJob PS: NetworkPolicy/weft-fmnist-tasks admits any pod of this namespace to port 2222")
def tasks_open_to_any_pod(tfjob, others):
    next(p for p in others if p["metadata"]["name"] == "weft-fmnist-tasks")["spec"]["ingress"][0].pop("from")


# Its egress, which the job's policy weft-fmnist shuts, loses the port too.
@TFJOB.tfjob("TFJob Worker: no NetworkPolicy admits the pods of TFJob Worker to port 2223; worker -> worker on the "
             "collective port must be allowed", also=[rule_with("its NetworkPolicy egress does not let it reach")])
def replicas_without_the_collective_policy(tfjob, others):
    others[:] = [p for p in others if p["metadata"]["name"] != "weft-fmnist-collective"]


@TFJOB.tfjob("TFJob Worker: container tensorflow: no --collective_port")
def replica_without_collective_port(tfjob, others):
    set_flag(tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"],
             "collective_port", None)


TfJobRulesTest = TFJOB.test_case("TfJobRulesTest", "crossref.check_tfjob, one broken variant per rule.")


# The Dockerfiles (dockerfile_lint.py).
DOCKER = Variants()


@DOCKER.dockerfile("Dockerfile:1: not multi-stage")
def single_stage(text):
    return text.replace("FROM ${DEBIAN_SLIM_IMAGE}\n", "")


@DOCKER.dockerfile("Dockerfile:1: no RUN tools/build_release.sh")
def not_building_with_the_script(text):
    return text.replace("RUN tools/build_release.sh /release", "RUN make -s release")


@DOCKER.dockerfile("Dockerfile:24: the final stage sets no USER")
def no_user(text):
    return text.replace("USER 10001:10001\n", "")


@DOCKER.dockerfile("Dockerfile:1: no ENTRYPOINT")
def no_entrypoint(text):
    return text.replace('ENTRYPOINT ["weft"]\n', "")


@DOCKER.dockerfile("Dockerfile:36: the final stage runs as root")
def root_user_in_image(text):
    return text.replace("USER 10001:10001", "USER root")


@DOCKER.dockerfile("Dockerfile:24: base image 'debian:latest'")
def unpinned_base(text):
    return text.replace("ARG DEBIAN_SLIM_IMAGE=debian:12.11-slim", "ARG DEBIAN_SLIM_IMAGE=debian:latest")


@DOCKER.dockerfile("Dockerfile.cuda:16: base image 'debian:12'", name="Dockerfile.cuda")
def unpinned_cuda_base(text):
    return re.sub(r"ARG DEBIAN_IMAGE=debian:12\.\d+", "ARG DEBIAN_IMAGE=debian:12", text)


@DOCKER.dockerfile("Dockerfile:21: ADD: use COPY for files")
def add_instead_of_copy(text):
    return text.replace("COPY . .", "ADD . .")


@DOCKER.dockerfile("Dockerfile:23: RUN pipes a download into a shell")
def curl_into_a_shell(text):
    return text.replace("RUN tools/build_release.sh /release\n",
                        "RUN tools/build_release.sh /release\nRUN curl -fsSL https://example.com/get.sh | sh\n")


@DOCKER.dockerfile("Dockerfile:23: RUN calls bazel directly")
def bazel_beside_the_script(text):
    return text.replace("RUN tools/build_release.sh /release\n",
                        "RUN tools/build_release.sh /release\nRUN bazel test //...\n")


@DOCKER.dockerfile("Dockerfile:17: apt-get install without --no-install-recommends")
def apt_recommends(text):
    return text.replace("apt-get install -y --no-install-recommends make", "apt-get install -y make")


@DOCKER.dockerfile("Dockerfile:17: apt-get install without removing /var/lib/apt/lists in the same RUN")
def apt_lists_kept(text):
    return text.replace("make ca-certificates \\\n && rm -rf /var/lib/apt/lists/*\n", "make ca-certificates\n")


@DOCKER.dockerfile("Dockerfile:28: COPY --from=builder names no earlier stage")
def copy_from_unknown_stage(text):
    return text.replace("COPY --from=build /release/runtime-packages.txt", "COPY --from=builder "
                        "/release/runtime-packages.txt")


@DOCKER.dockerfile("Dockerfile:40: ENTRYPOINT must be exec form running weft")
def shell_form_entrypoint(text):
    return text.replace('ENTRYPOINT ["weft"]', "ENTRYPOINT weft")


DockerfileRulesTest = DOCKER.test_case("DockerfileRulesTest", "dockerfile_lint.py, one broken variant per rule.")

VARIANT_GROUPS = (CROSSREF, SECURITY, NETPOL, METRICS, MONITOR, SCHEMA, TFJOB, DOCKER)


class RuleCoverageTest(unittest.TestCase):
    """Every rule a checker can report is drawn by a broken variant."""

    def test_the_rules_are_found(self):
        # A guard on the scan itself: a rule from each checker that has rules.
        found = {r.where.split(":")[0] for r in rules().values()}
        self.assertEqual(found, {"crossref.py", "dockerfile_lint.py", "monitoring.py", "netpol.py", "schema.py",
                                 "security.py", "check_manifests.py"})
        self.assertGreater(len(rules()), 100)

    def test_every_rule_has_a_broken_variant(self):
        drawn = set()
        for group in VARIANT_GROUPS:
            for v in group.items:
                drawn |= {rule_of(e).template for e in run_variant(v)[0] if rule_of(e) is not None}
        # Reached only if schema.py's own tables name a type that does not
        # exist; SchemaInternalsTest draws it.
        internal = {"%s: schema has no type %s"}
        missing = sorted("%s: %s" % (r.where, t) for t, r in rules().items() if t not in drawn | internal)
        self.assertEqual(missing, [], "rules that no broken variant draws")


class SchemaInternalsTest(unittest.TestCase):
    def test_unknown_type_in_the_tables(self):
        errors = []
        schema.check({"a": 1}, "V1NoSuchType", "spec", errors)
        self.assertEqual(errors, ["spec: schema has no type V1NoSuchType"])

    def test_every_missing_required_field_is_reported(self):
        errors = []
        schema.check({"mode": 0o440}, "V1KeyToPath", "items[0]", errors)
        self.assertEqual(errors, ["items[0].key: required field missing (V1KeyToPath)",
                                  "items[0].path: required field missing (V1KeyToPath)"])


# --- The deployment as it is ---------------------------------------------------

class ManifestsTest(unittest.TestCase):

    def test_every_rendering_is_valid(self):
        errors, renderings = deployment()
        self.assertEqual(sorted(renderings), ["k8s/monitoring", "overlays/cpu", "overlays/gpu"])
        self.assertEqual(errors, [])
        for objects in overlays().values():
            kinds = sorted({o["kind"] for o in objects})
            self.assertEqual(kinds, ["ConfigMap", "Job", "NetworkPolicy", "PersistentVolumeClaim",
                                     "PodDisruptionBudget", "Service", "StatefulSet"])
        self.assertEqual([(o["apiVersion"], o["kind"]) for o in renderings[MONITORING]],
                         [("monitoring.coreos.com/v1", "ServiceMonitor")])

    def test_every_daemon_serves_metrics_over_https(self):
        for label, objects in overlays().items():
            for name in ("weft-master", "weft-worker", "weft-ps"):
                c = container(objects, name)
                self.assertIn("--metrics_port=9464", c["args"], "%s %s" % (label, name))
                self.assertFalse([a for a in c["args"] if a.startswith("--metrics_plaintext")], name)
                self.assertIn({"name": "metrics", "containerPort": 9464}, c["ports"], name)
                self.assertEqual(annotations(objects, name), {
                    "prometheus.io/scrape": "true", "prometheus.io/port": "9464", "prometheus.io/scheme": "https",
                    "prometheus.io/path": "/metrics"}, name)
                svc = find(objects, "Service", name)
                self.assertIn({"name": "metrics", "port": 9464, "targetPort": "metrics"}, svc["spec"]["ports"], name)

    def test_metrics_are_optional(self):
        # A daemon without a metrics port at all passes: nothing to announce or admit.
        objects = rendered("overlays/cpu")
        for name in ("weft-master", "weft-worker", "weft-ps"):
            drop_metrics(objects, name)
        self.assertEqual(check_manifests.check_objects("overlays/cpu", objects, weft_flags()), [])

    def test_only_workers_open_a_collective_port(self):
        for label, objects in overlays().items():
            c = container(objects, "weft-worker")
            self.assertIn("--collective_port=2223", c["args"], label)
            self.assertIn({"name": "collective", "containerPort": 2223}, c["ports"], label)
            self.assertIn({"name": "collective", "port": 2223, "targetPort": "collective"},
                          find(objects, "Service", "weft-worker")["spec"]["ports"], label)
            for name in ("weft-master", "weft-ps"):
                self.assertFalse([a for a in container(objects, name)["args"] if a.startswith("--collective_")],
                                 "%s %s" % (label, name))
                self.assertNotIn("collective", [p["name"] for p in container(objects, name)["ports"]], name)

    def test_collective_socket_is_optional(self):
        # --collective_transport=grpc: no socket, so no port to fix, declare or admit.
        objects = rendered("overlays/cpu")
        c = container(objects, "weft-worker")
        set_flag(c["args"], "collective_port", None)
        c["args"].append("--collective_transport=grpc")
        c["ports"] = [p for p in c["ports"] if p["name"] != "collective"]
        svc = find(objects, "Service", "weft-worker")
        svc["spec"]["ports"] = [p for p in svc["spec"]["ports"] if p["name"] != "collective"]
        self.assertEqual(check_manifests.check_objects("overlays/cpu", objects, weft_flags()), [])

    def test_accepts_plaintext_metrics_on_the_loopback(self):
        # The sidecar layout of deploy/README.md: plain HTTP on 127.0.0.1, not announced, not in the Service.
        objects = rendered("overlays/cpu")
        drop_metrics(objects, "weft-worker", keep=("flag",))
        container(objects, "weft-worker")["args"] += ["--metrics_host=127.0.0.1", "--metrics_plaintext"]
        self.assertEqual(check_manifests.check_objects("overlays/cpu", objects, weft_flags()), [])
        container(objects, "weft-worker")["args"][-2] = "--metrics_host=0.0.0.0"
        errors = check_manifests.check_objects("overlays/cpu", objects, weft_flags())
        self.assertTrue(errors)
        self.assertTrue(all("--metrics_plaintext with --metrics_host=0.0.0.0" in e or "port 9464" in e
                            for e in errors), errors)

    def test_service_monitor_server_name_forms(self):
        self.assertTrue(monitoring.certificate_holds("localhost", "weft-ps-0.weft-ps"))
        self.assertTrue(monitoring.certificate_holds("weft-ps-0.weft-ps.ml.svc.cluster.local", "weft-ps-0.weft-ps"))
        self.assertFalse(monitoring.certificate_holds("weft-ps-1.weft-ps", "weft-ps-0.weft-ps"))
        self.assertFalse(monitoring.certificate_holds("weft-ps-0.weft-ps.evil.com", "weft-ps-0.weft-ps"))
        self.assertTrue(monitoring.is_loopback("127.0.0.1") and monitoring.is_loopback("::1"))
        self.assertFalse(monitoring.is_loopback("0.0.0.0") or monitoring.is_loopback("10.0.0.1"))

    def test_overlays_set_the_image(self):
        for label in ("overlays/cpu", "overlays/gpu"):
            for o in rendered(label):
                if o["kind"] in ("StatefulSet", "Job"):
                    spec = o["spec"]["template"]["spec"]
                    for c in spec.get("initContainers", []) + spec["containers"]:
                        self.assertRegex(c["image"], r"^registry\.example\.com/weft:0\.1\.0(-cuda)?$",
                                         "%s %s" % (label, o["metadata"]["name"]))

    def test_gpu_overlay_gives_workers_a_gpu(self):
        objects = rendered("overlays/gpu")
        c = container(objects, "weft-worker")
        self.assertEqual(c["resources"]["limits"]["nvidia.com/gpu"], "1")
        self.assertEqual(c["image"], "registry.example.com/weft:0.1.0-cuda")
        self.assertEqual(pod(objects, "StatefulSet", "weft-worker")["tolerations"][0]["key"], "nvidia.com/gpu")
        self.assertEqual(find(objects, "ConfigMap", "weft-config")["data"]["worker-gpus"], "1")
        self.assertEqual(container(objects, "weft-ps")["image"], "registry.example.com/weft:0.1.0")

    def test_every_pod_is_hardened_and_has_tls(self):
        for overlay, objects in deployment()[1].items():
            for o in objects:
                if o["kind"] in ("StatefulSet", "Job"):
                    spec = o["spec"]["template"]["spec"]
                    self.assertEqual(security.hardening(spec), [], "%s %s" % (overlay, o["metadata"]["name"]))
                    self.assertTrue(any("secret" in v for v in spec["volumes"]), o["metadata"]["name"])

    def test_accepts_per_task_secrets_projected(self):
        # The cert-manager layout of deploy/README.md: one Secret per task, projected.
        objects = rendered("overlays/cpu")
        tls = volume(pod(objects, "StatefulSet", "weft-worker"), "tls")
        tls.pop("secret")
        tls["projected"] = {"defaultMode": 0o440, "sources": [
            {"secret": {"name": "weft-tls-worker-%d" % i, "items": (
                [{"key": "ca.crt", "path": "ca.crt"}] if i == 0 else []) + [
                {"key": "tls.crt", "path": "worker-%d.crt" % i}, {"key": "tls.key", "path": "worker-%d.key" % i}]}}
            for i in range(2)]}
        self.assertEqual(check_manifests.check_objects("overlays/cpu", objects, weft_flags()), [])
        tls["projected"]["sources"][1]["secret"]["name"] = "weft-tls-master"
        errors = check_manifests.check_objects("overlays/cpu", objects, weft_flags())
        self.assertTrue(any("--ca=/etc/weft/tls/ca.crt comes from Secret weft-tls-master;" in e for e in errors),
                        errors)

    def test_named_ports_resolve_per_pod(self):
        # `grpc` is 5000 on the master and 2222 on the tasks: still exact.
        objects = rendered("overlays/cpu")
        policy(objects, "weft-master")["ingress"][0]["ports"][0]["port"] = "grpc"
        policy(objects, "weft-tasks")["ingress"][0]["ports"][0]["port"] = "grpc"
        policy(objects, "weft-metrics")["ingress"][0]["ports"][0]["port"] = "metrics"
        policy(objects, "weft-collective")["ingress"][0]["ports"][0]["port"] = "collective"
        self.assertEqual(check_manifests.check_objects("overlays/cpu", objects, weft_flags()), [])

    def test_tfjob_is_valid(self):
        tfjobs, others = check_manifests.load_kubeflow(DEPLOY)
        self.assertEqual(check_manifests.check_tfjob(tfjobs[0], rendered("overlays/cpu"), others, weft_flags()), [])
        self.assertEqual(sorted(o["kind"] for o in others), ["NetworkPolicy"] * 4)

    def test_dockerfiles_pass(self):
        for name in ("Dockerfile", "Dockerfile.cuda"):
            self.assertEqual(dockerfile_lint.lint(read_dockerfile(name), name), [])

    def test_build_script_is_the_one_ci_runs(self):
        with open(os.path.join(ROOT, "tools", "build_release.sh")) as f:
            script = f.read()
        self.assertIn("make -s deps", script)
        self.assertIn("build //client:weft", script)


class PrometheusConfigTest(unittest.TestCase):
    """deploy/README.md's scrape config for a Prometheus without the operator reads what the manifests serve."""

    def scrape_config(self):
        with open(os.path.join(DEPLOY, "README.md")) as f:
            blocks = [b for b in re.findall(r"```yaml\n(.*?)```", f.read(), re.S) if "scrape_configs:" in b]
        self.assertEqual(len(blocks), 1, "deploy/README.md: one ```yaml block with scrape_configs")
        return blocks[0]

    def test_matches_the_manifests(self):
        config = yaml.safe_load(self.scrape_config())
        job = config["scrape_configs"][0]
        self.assertEqual(job["scheme"], "https")
        tls = job["tls_config"]
        monitor = find(rendered(MONITORING), "ServiceMonitor", "weft")
        self.assertEqual(sorted(os.path.basename(tls[k]) for k in ("ca_file", "cert_file", "key_file")),
                         sorted(monitoring.secret_keys(monitor)["weft-tls-prometheus"]))
        self.assertNotIn("insecure_skip_verify", tls)
        objects = rendered("overlays/cpu")
        for sts in (o for o in objects if o["kind"] == "StatefulSet"):
            for i in range(sts["spec"].get("replicas", 1)):
                host = "%s-%d.%s" % (sts["metadata"]["name"], i, sts["spec"]["serviceName"])
                self.assertTrue(monitoring.certificate_holds(tls["server_name"], host), host)
        sources = {label for r in job["relabel_configs"] for label in r.get("source_labels", [])}
        for key in ("scrape", "port", "scheme", "path"):
            self.assertIn("__meta_kubernetes_pod_annotation_prometheus_io_" + key, sources)
        keeps = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
        self.assertEqual(keeps, {("__meta_kubernetes_pod_annotation_prometheus_io_scrape",): "true",
                                 ("__meta_kubernetes_pod_container_port_name",): monitoring.PORT_NAME})

    def test_promtool_accepts_it(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.skipTest("no promtool on PATH (Debian's prometheus package)")
        config = yaml.safe_load(self.scrape_config())
        job = config["scrape_configs"][0]
        with tempfile.TemporaryDirectory() as d:
            tls = job["tls_config"]
            for k in ("ca_file", "cert_file", "key_file"):  # promtool wants the files to exist
                path = os.path.join(d, os.path.basename(tls[k]))
                open(path, "w").close()
                tls[k] = path
            path = os.path.join(d, "prometheus.yml")

            def check():
                with open(path, "w") as f:
                    yaml.safe_dump(config, f)
                return subprocess.run([promtool, "check", "config", path], capture_output=True, text=True)
            r = check()
            if r.returncode != 0 and "kubernetes_sd_configs not found" in r.stdout + r.stderr:
                # Debian builds Prometheus without Kubernetes discovery: check the rest (TLS, relabelling)
                # with the one pod it would find in its place.
                self.assertEqual(job.pop("kubernetes_sd_configs"), [{"role": "pod", "namespaces": {"names": ["weft"]}}])
                job["static_configs"] = [{"targets": ["weft-master-0.weft-master:9464"]}]
                r = check()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class RenderTest(unittest.TestCase):
    """The manifests are rendered by kustomize itself, the kubectl on PATH."""

    def test_renders_with_the_kubectl_on_path(self):
        objects = render.render(os.path.join(DEPLOY, "k8s", "submit"))
        self.assertEqual([(o["kind"], o["metadata"]["name"]) for o in objects], [("Job", "weft-submit")])

    def test_no_kubectl_names_the_package(self):
        with tempfile.TemporaryDirectory() as empty, mock.patch.dict(os.environ, {"PATH": empty}):
            with self.assertRaisesRegex(render.RenderError, "no kubectl on PATH.*Debian's kubernetes-client package"):
                render.render(os.path.join(DEPLOY, "k8s", "submit"))

    def test_a_symlinked_kustomization_is_named(self):
        # kustomize itself would say that there is no kustomization.yaml.
        with tempfile.TemporaryDirectory() as d:
            os.symlink(os.path.join(DEPLOY, "k8s", "submit", "kustomization.yaml"),
                       os.path.join(d, "kustomization.yaml"))
            with self.assertRaisesRegex(render.RenderError, "kustomize does not read a kustomization.yaml that is a "
                                                            "symbolic link"):
                render.render(d)

    def test_a_broken_kustomization_names_the_directory(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "kustomization.yaml"), "w") as f:
                f.write("resources:\n  - missing.yaml\n")
            with self.assertRaisesRegex(render.RenderError, re.escape("kustomize %s exited" % d)):
                render.render(d)


class WeftFlagsTest(unittest.TestCase):
    """The flags the checks allow are those the weft binary lists in its --help."""

    def test_flags_come_from_the_binary(self):
        flags = weft_flags()
        self.assertEqual(sorted(flags), ["jobs", "master", "ps", "submit", "worker"])
        for sub in ("master", "worker", "ps"):
            self.assertLessEqual({"cluster", "ca", "cert", "key", "insecure", "health_port", "checkpoint_root",
                                  "data_root", "metrics_port", "metrics_host", "metrics_port_file",
                                  "metrics_plaintext"}, flags[sub], sub)
        self.assertIn("state_dir", flags["master"])
        self.assertNotIn("state_dir", flags["worker"])
        self.assertLessEqual({"follow", "master", "ca", "token_file"}, flags["submit"])
        self.assertNotIn("help", flags["worker"])

    def test_a_binary_that_lists_no_flags_is_refused(self):
        with self.assertRaisesRegex(crossref.WeftFlagsError, "`/bin/true master --help` exited 0 listing no flags"):
            crossref.read_weft_flags("/bin/true")

    def test_checker_runs_by_hand(self):
        script = os.path.join(CHECKS, "check_manifests.py")
        r = subprocess.run([sys.executable, "-B", script, "--weft=" + weft_binary(), DEPLOY],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("3 rendering(s), 33 object(s), 0 error(s)", r.stderr)
        r = subprocess.run([sys.executable, "-B", script, DEPLOY], capture_output=True, text=True,
                           env=dict(os.environ, PATH=os.path.dirname(sys.executable), WEFT=""))
        self.assertEqual(r.returncode, 2)
        self.assertIn("no weft binary to read the flags from: pass --weft=PATH", r.stderr)


# --- make-tls-secrets.sh ---------------------------------------------------------

def run_make_tls_secrets(test, *args):
    """The Secrets make-tls-secrets.sh prints, {name: {key: path}}, and its DIR; `weft certs` is stood in for."""
    work = tempfile.mkdtemp(prefix="weft-tls-test-")
    test.addCleanup(shutil.rmtree, work, True)
    stub = os.path.join(work, "weft")
    with open(stub, "w") as f:
        # certs init DIR: ca.crt, ca.key; certs issue DIR --name=N ...: N's files, holding the arguments.
        f.write('#!/bin/sh\n[ "$1" = certs ] || exit 3\ndir=$3\n'
                'case "$2" in\n'
                '  init) echo ca > "$dir/ca.crt"; echo key > "$dir/ca.key" ;;\n'
                '  issue) for a in "$@"; do case "$a" in --name=*) n=${a#--name=} ;; esac; done\n'
                '    stem=$(echo "$n" | sed -n "s#^/job:\\([^/]*\\)/task:\\([0-9]*\\)\\$#\\1-\\2#p")\n'
                '    [ -n "$stem" ] || stem=$n\n'
                '    echo "$*" > "$dir/$stem.crt"; echo key > "$dir/$stem.key" ;;\n'
                '  *) exit 3 ;;\nesac\n')
    os.chmod(stub, 0o755)
    tls = os.path.join(work, "tls")
    r = subprocess.run([os.path.join(DEPLOY, "k8s", "make-tls-secrets.sh")] + list(args) + [tls],
                       env=dict(os.environ, WEFT=stub), capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError("make-tls-secrets.sh exited %d: %s" % (r.returncode, r.stderr))
    secrets = {}
    for line in r.stdout.splitlines():
        words = shlex.split(line)
        name = words[words.index("generic") + 1]
        secrets[name] = dict(w[len("--from-file="):].split("=", 1) for w in words if w.startswith("--from-file="))
    return secrets, tls


def needed_keys(objects):
    """{secret: {key}} that the StatefulSets' and Jobs' TLS paths read."""
    need = {}
    for o in objects:
        if o["kind"] not in ("StatefulSet", "Job"):
            continue
        spec = o["spec"]["template"]["spec"]
        replicas = o["spec"].get("replicas", 1) if o["kind"] == "StatefulSet" else 1
        for c in spec.get("initContainers", []) + spec["containers"]:
            paths = [a.split("=", 1)[1] for a in c.get("args") or [] if a.split("=")[0] in ("--ca", "--cert", "--key")]
            paths += [e["value"] for e in c.get("env") or [] if e["name"] in ("WEFT_CA", "WEFT_CERT", "WEFT_KEY")]
            for name, keys in security.secret_keys(spec, c, paths, replicas).items():
                need.setdefault(name, set()).update(keys)
    return need


class TlsSecretsScriptTest(unittest.TestCase):
    """deploy/k8s/make-tls-secrets.sh makes what the manifests mount."""

    def test_makes_every_key_the_manifests_read(self):
        secrets, _ = run_make_tls_secrets(self)
        for overlay, objects in overlays().items():
            need = needed_keys(objects)
            self.assertEqual(sorted(need), ["weft-tls-client", "weft-tls-master", "weft-tls-ps", "weft-tls-worker"])
            for name, keys in need.items():
                self.assertLessEqual(keys, set(secrets.get(name, {})), "%s: Secret %s" % (overlay, name))
        self.assertEqual(sorted(secrets["weft-tls-worker"]),
                         ["ca.crt"] + ["worker-%d.%s" % (i, ext) for i in range(4) for ext in ("crt", "key")])

    def test_makes_the_service_monitors_keys(self):
        secrets, tls = run_make_tls_secrets(self)
        need = {}
        for o in rendered(MONITORING):
            for name, keys in monitoring.secret_keys(o).items():
                need.setdefault(name, set()).update(keys)
        self.assertEqual(need, {"weft-tls-prometheus": {"ca.crt", "prometheus.crt", "prometheus.key"}})
        self.assertEqual(sorted(secrets["weft-tls-prometheus"]), ["ca.crt", "prometheus.crt", "prometheus.key"])
        with open(os.path.join(tls, "prometheus.crt")) as f:
            issued = f.read().split()
        # An admin: the metrics ports serve admins and cluster members; no hosts, so it cannot pass for a daemon.
        self.assertIn("--name=prometheus", issued)
        self.assertIn("--role=admin", issued)
        self.assertFalse([w for w in issued if w.startswith("--hosts")], issued)

    def test_prometheus_gets_its_own_certificate(self):
        secrets, tls = run_make_tls_secrets(self, "--prometheus=prom-ops")
        self.assertEqual(secrets["weft-tls-prometheus"]["prometheus.crt"], os.path.join(tls, "prom-ops.crt"))
        with self.assertRaisesRegex(AssertionError, "--prometheus and --user name the same certificate"):
            run_make_tls_secrets(self, "--user=ops", "--prometheus=ops")

    def test_certificates_name_the_pods_dns_names(self):
        _, tls = run_make_tls_secrets(self, "--namespace=ml")
        with open(os.path.join(tls, "worker-1.crt")) as f:
            issued = f.read().split()
        self.assertIn("--name=/job:worker/task:1", issued)
        self.assertIn("--hosts=weft-worker-1.weft-worker,weft-worker-1.weft-worker.ml.svc,"
                      "weft-worker-1.weft-worker.ml.svc.cluster.local,localhost", issued)
        with open(os.path.join(tls, "weft-submit.crt")) as f:
            self.assertIn("--role=user", f.read().split())

    def test_tfjob_secrets(self):
        tfjob = check_manifests.load_tfjobs(DEPLOY)[0]
        specs = tfjob["spec"]["tfReplicaSpecs"]
        cluster = ";".join("%s=%s" % (job, ",".join("weft-fmnist-%s-%d.weft.svc:2222" % (job, i)
                                                      for i in range(specs[rtype]["replicas"])))
                           for job, rtype in (("worker", "Worker"), ("ps", "PS")))
        secrets, tls = run_make_tls_secrets(self, "--prefix=weft-fmnist-tls", "--cluster=" + cluster,
                                            "--master=weft-fmnist-chief-0.weft.svc:2222")
        with open(os.path.join(tls, "master.crt")) as f:
            self.assertIn("--hosts=weft-fmnist-chief-0.weft.svc,weft-fmnist-chief-0.weft.svc.cluster.local,localhost",
                          f.read().split())
        for rtype, spec in specs.items():
            template = spec["template"]["spec"]
            c = template["containers"][0]
            text = " ".join(c.get("command", []) + c.get("args", []))
            paths = [w.split("=", 1)[1] for w in text.split() if w.split("=")[0] in ("--ca", "--cert", "--key")]
            paths += [e["value"] for e in c.get("env") or [] if e["name"] in ("WEFT_CA", "WEFT_CERT", "WEFT_KEY")]
            need = security.secret_keys(template, c, paths, spec["replicas"])
            self.assertTrue(need, rtype)
            for name, keys in need.items():
                self.assertLessEqual(keys, set(secrets.get(name, {})), "%s: Secret %s" % (rtype, name))

    def test_catches_a_key_the_script_does_not_make(self):
        secrets, _ = run_make_tls_secrets(self)
        objects = rendered("overlays/cpu")
        env_var(pod(objects, "Job", "weft-submit")["containers"][0], "WEFT_CERT")["value"] = "/etc/weft/tls/alice.crt"
        self.assertNotIn("alice.crt", secrets["weft-tls-client"])
        self.assertIn("alice.crt", needed_keys(objects)["weft-tls-client"])

    def test_keeps_the_ca_and_reissues_on_request(self):
        _, tls = run_make_tls_secrets(self)
        ca = os.path.join(tls, "ca.crt")
        master = os.path.join(tls, "master.crt")
        os.utime(ca, (0, 0))
        os.utime(master, (0, 0))
        stub = os.path.join(os.path.dirname(tls), "weft")
        script = os.path.join(DEPLOY, "k8s", "make-tls-secrets.sh")
        subprocess.run([script, tls], env=dict(os.environ, WEFT=stub), check=True, capture_output=True)
        self.assertEqual(os.stat(ca).st_mtime, 0)
        self.assertEqual(os.stat(master).st_mtime, 0)
        subprocess.run([script, "--reissue", tls], env=dict(os.environ, WEFT=stub), check=True, capture_output=True)
        self.assertEqual(os.stat(ca).st_mtime, 0)
        self.assertNotEqual(os.stat(master).st_mtime, 0)

    def test_refuses_a_bad_cluster(self):
        with self.assertRaisesRegex(AssertionError, "is not JOB=HOST:PORT"):
            run_make_tls_secrets(self, "--cluster=weft-worker-0.weft-worker:2222")

    def test_workers_past_the_cluster_get_certificates_for_a_scale_up(self):
        # The ConfigMap's max-workers (4): workers 2 and 3 are past its cluster, named as worker 0 is.
        secrets, tls = run_make_tls_secrets(self)
        with open(os.path.join(tls, "worker-3.crt")) as f:
            issued = f.read().split()
        self.assertIn("--name=/job:worker/task:3", issued)
        self.assertIn("--role=cluster", issued)
        self.assertIn("--hosts=weft-worker-3.weft-worker,weft-worker-3.weft-worker.weft.svc,"
                      "weft-worker-3.weft-worker.weft.svc.cluster.local,localhost", issued)
        self.assertNotIn("worker-4.crt", secrets["weft-tls-worker"])
        self.assertNotIn("ps-1.crt", secrets["weft-tls-ps"])  # only workers register
        secrets, _ = run_make_tls_secrets(self, "--max_workers=3")
        self.assertEqual(sorted(k for k in secrets["weft-tls-worker"] if k.endswith(".crt")),
                         ["ca.crt", "worker-0.crt", "worker-1.crt", "worker-2.crt"])
        # A cluster given by hand is the operator's whole list unless --max_workers says more.
        secrets, _ = run_make_tls_secrets(self, "--cluster=worker=w-0.w:1,w-1.w:1")
        self.assertEqual(sorted(k for k in secrets["weft-tls-worker"] if k.endswith(".crt")),
                         ["ca.crt", "worker-0.crt", "worker-1.crt"])
        with self.assertRaisesRegex(AssertionError, "--max_workers must be a count of workers"):
            run_make_tls_secrets(self, "--max_workers=4;rm")
        with self.assertRaisesRegex(AssertionError, "worker 0's address 'w0:1' is not a StatefulSet name"):
            run_make_tls_secrets(self, "--cluster=worker=w0:1", "--max_workers=2")
