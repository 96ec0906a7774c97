#!/usr/bin/env python3
"""The deploy/ checks, and proof that they catch what they are for.

Every manifest rendered from deploy/k8s and deploy/kubeflow must pass the
schema and cross-reference checks; then each test breaks one thing in a copy
of the rendered objects (a typo, a wrong port, a cluster spec out of step
with the replicas, a pod that keeps its service-account token, a worker
holding another task's certificate, a NetworkPolicy that lets any pod reach
the master...) and requires the checker to name the object and the rule.
deploy/k8s/make-tls-secrets.sh, run with a stand-in for `weft certs`, must
make every Secret key the manifests read. The Dockerfiles must pass the
lint, and broken variants must not.

    deploy_manifests_test.py REPO_ROOT
"""
import copy
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else ".")
sys.path.insert(0, os.path.join(ROOT, "deploy", "check"))
import check_manifests  # noqa: E402
import crossref  # noqa: E402
import dockerfile_lint  # noqa: E402
import schema  # noqa: E402
import security  # noqa: E402

DEPLOY = os.path.join(ROOT, "deploy")


def find(objects, kind, name):
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def container(objects, name):
    return find(objects, "StatefulSet", name)["spec"]["template"]["spec"]["containers"][0]


def pod(objects, kind, name):
    return find(objects, kind, name)["spec"]["template"]["spec"]


def set_flag(args, flag, value):
    """Replaces --flag=... in a container's args (value None: removes it)."""
    i = next(i for i, a in enumerate(args) if a.startswith("--%s=" % flag))
    if value is None:
        del args[i]
    else:
        args[i] = "--%s=%s" % (flag, value)


class RenderedTest(unittest.TestCase):
    """The rendered overlays, and `broken`: a mutated copy must draw an error naming the fault."""

    @classmethod
    def setUpClass(cls):
        cls.errors, cls.rendered = check_manifests.check_deploy(DEPLOY)

    def broken(self, mutate, expect, overlay="overlays/cpu"):
        objects = copy.deepcopy(self.rendered[overlay])
        mutate(objects)
        errors = check_manifests.check_objects(overlay, objects)
        self.assertTrue(any(expect in e for e in errors), "no error containing %r in %s" % (expect, errors))


class ManifestsTest(RenderedTest):

    def test_every_rendering_is_valid(self):
        self.assertEqual(sorted(self.rendered), ["overlays/cpu", "overlays/gpu"])
        self.assertEqual(self.errors, [])
        for objects in self.rendered.values():
            kinds = sorted({o["kind"] for o in objects})
            self.assertEqual(kinds, ["ConfigMap", "Job", "NetworkPolicy", "PersistentVolumeClaim",
                                     "PodDisruptionBudget", "Service", "StatefulSet"])

    def test_gpu_overlay_gives_workers_a_gpu(self):
        objects = self.rendered["overlays/gpu"]
        c = container(objects, "weft-worker")
        self.assertEqual(c["resources"]["limits"]["nvidia.com/gpu"], "1")
        self.assertTrue(c["image"].endswith("-cuda"))
        self.assertEqual(find(objects, "ConfigMap", "weft-config")["data"]["worker-gpus"], "1")
        self.assertFalse(container(objects, "weft-ps")["image"].endswith("-cuda"))

    def test_catches_unknown_field(self):
        def m(o):
            c = container(o, "weft-worker")
            c["livenessProbes"] = c.pop("livenessProbe")
        self.broken(m, "livenessProbes: unknown field")

    def test_catches_wrong_type(self):
        self.broken(lambda o: find(o, "StatefulSet", "weft-ps")["spec"].update(replicas="1"), "expected int")

    def test_catches_missing_required_field(self):
        self.broken(lambda o: container(o, "weft-master")["readinessProbe"]["grpc"].pop("port"),
                    "grpc.port: required field missing")

    def test_catches_cluster_spec_out_of_step_with_replicas(self):
        self.broken(lambda o: find(o, "StatefulSet", "weft-worker")["spec"].update(replicas=3),
                    "the StatefulSet's pods are")

    def test_catches_cluster_spec_dns_typo(self):
        def m(o):
            cm = find(o, "ConfigMap", "weft-config")
            cm["data"]["cluster"] = cm["data"]["cluster"].replace("weft-ps-0.weft-ps", "weft-ps-0.weft-pss")
        self.broken(m, "the cluster spec's ps job is")

    def test_catches_probe_on_wrong_port(self):
        self.broken(lambda o: container(o, "weft-ps")["livenessProbe"]["grpc"].update(port=2223),
                    "livenessProbe probes port 2223")

    def test_catches_http_probe(self):
        self.broken(lambda o: container(o, "weft-worker").update(readinessProbe={"tcpSocket": {"port": 2222}}),
                    "must be a gRPC health probe")

    def test_catches_listen_port_not_the_container_port(self):
        def m(o):
            args = container(o, "weft-worker")["args"]
            args[args.index("--listen=0.0.0.0:2222")] = "--listen=0.0.0.0:3333"
        self.broken(m, "weft listens on 3333")

    def test_catches_service_name_mismatch(self):
        self.broken(lambda o: find(o, "StatefulSet", "weft-ps")["spec"].update(serviceName="weft-parameter-server"),
                    "names no Service")

    def test_catches_non_headless_service(self):
        self.broken(lambda o: find(o, "Service", "weft-worker")["spec"].pop("clusterIP"), "must be headless")

    def test_catches_unknown_weft_flag(self):
        self.broken(lambda o: container(o, "weft-master")["args"].append("--state-dir=/x"),
                    "`weft master` has no flag --state-dir")

    def test_catches_wrong_subcommand(self):
        self.broken(lambda o: container(o, "weft-ps")["args"].__setitem__(0, "worker"), "runs `weft worker`")

    def test_catches_undefined_variable(self):
        def m(o):
            c = container(o, "weft-worker")
            c["env"] = [e for e in c["env"] if e["name"] != "WEFT_DRAIN_SECONDS"]
        self.broken(m, "$(WEFT_DRAIN_SECONDS) is not defined")

    def test_catches_missing_configmap_key(self):
        def m(o):
            c = container(o, "weft-ps")
            next(e for e in c["env"] if e["name"] == "WEFT_CLUSTER")["valueFrom"]["configMapKeyRef"]["key"] = "clustr"
        self.broken(m, "has no key 'clustr'")

    def test_catches_volume_mount_without_volume(self):
        self.broken(lambda o: container(o, "weft-worker")["volumeMounts"][0].update(name="ckpt"),
                    "volumeMount ckpt: no volume")

    def test_catches_checkpoints_not_shared(self):
        def m(o):
            pod = find(o, "StatefulSet", "weft-ps")["spec"]["template"]["spec"]
            pod["volumes"] = [{"name": "checkpoints", "emptyDir": {}}]
        self.broken(m, "is not on a shared PersistentVolumeClaim")

    def test_catches_state_dir_off_its_volume(self):
        def m(o):
            args = container(o, "weft-master")["args"]
            args[args.index("--state_dir=/var/lib/weft/state")] = "--state_dir=/tmp/state"
        self.broken(m, "is not on a volumeClaimTemplate mount")

    def test_catches_grace_shorter_than_drain(self):
        self.broken(lambda o: find(o, "StatefulSet", "weft-worker")["spec"]["template"]["spec"].update(
            terminationGracePeriodSeconds=15), "must exceed --drain_seconds")

    def test_catches_gpu_flag_without_gpu_limit(self):
        def m(o):
            del container(o, "weft-worker")["resources"]["limits"]["nvidia.com/gpu"]
        self.broken(m, "but the nvidia.com/gpu limit is 0", overlay="overlays/gpu")

    def test_catches_missing_limits(self):
        self.broken(lambda o: container(o, "weft-ps")["resources"].pop("limits"), "no resources.limits.cpu")

    def test_catches_pdb_not_covering_daemons(self):
        self.broken(lambda o: find(o, "PodDisruptionBudget", "weft")["spec"]["selector"]["matchLabels"].update(
            {"app.kubernetes.io/component": "worker"}), "does not cover the master pods")

    def test_catches_submit_job_file_not_mounted(self):
        def m(o):
            c = find(o, "Job", "weft-submit")["spec"]["template"]["spec"]["containers"][0]
            c["args"][1] = "/etc/weft/jobs.pbtxt"
        self.broken(m, "is not in a mounted ConfigMap")

    def test_catches_master_address_mismatch(self):
        self.broken(lambda o: find(o, "ConfigMap", "weft-config")["data"].update(master="weft-master:5000"),
                    "the master pod is reached at")


class SecurityTest(RenderedTest):
    """Pod hardening, each daemon's own certificate, the health port, the roots (security.py)."""

    def test_every_pod_is_hardened_and_has_tls(self):
        for overlay, objects in self.rendered.items():
            for o in objects:
                if o["kind"] in ("StatefulSet", "Job"):
                    spec = o["spec"]["template"]["spec"]
                    self.assertEqual(security.hardening(spec), [], "%s %s" % (overlay, o["metadata"]["name"]))
                    self.assertTrue(any("secret" in v for v in spec["volumes"]), o["metadata"]["name"])

    def test_catches_service_account_token(self):
        self.broken(lambda o: pod(o, "StatefulSet", "weft-worker").pop("automountServiceAccountToken"),
                    "StatefulSet/weft-worker: automountServiceAccountToken must be false")

    def test_catches_missing_seccomp_profile(self):
        self.broken(lambda o: pod(o, "StatefulSet", "weft-ps")["securityContext"].pop("seccompProfile"),
                    "StatefulSet/weft-ps: pod securityContext.seccompProfile.type must be RuntimeDefault")

    def test_catches_container_unconfined_seccomp(self):
        self.broken(lambda o: container(o, "weft-master")["securityContext"].update(
            seccompProfile={"type": "Unconfined"}), "container master: securityContext.seccompProfile.type Unconfined")

    def test_catches_root(self):
        self.broken(lambda o: pod(o, "Job", "weft-submit")["securityContext"].pop("runAsNonRoot"),
                    "Job/weft-submit: pod securityContext.runAsNonRoot must be true")

    def test_catches_writable_root_filesystem(self):
        self.broken(lambda o: container(o, "weft-master")["securityContext"].pop("readOnlyRootFilesystem"),
                    "StatefulSet/weft-master: container master: securityContext.readOnlyRootFilesystem must be true")

    def test_catches_privilege_escalation_in_init_container(self):
        self.broken(lambda o: pod(o, "Job", "weft-submit")["initContainers"][0]["securityContext"].pop(
            "allowPrivilegeEscalation"),
            "Job/weft-submit: container wait-for-master: securityContext.allowPrivilegeEscalation must be false")

    def test_catches_capabilities(self):
        self.broken(lambda o: container(o, "weft-worker")["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
                    "StatefulSet/weft-worker: container worker: securityContext.capabilities.drop must include ALL")
        self.broken(lambda o: container(o, "weft-ps")["securityContext"]["capabilities"].update(add=["NET_ADMIN"]),
                    "StatefulSet/weft-ps: container ps: securityContext.capabilities.add ['NET_ADMIN']")

    def test_catches_host_network(self):
        self.broken(lambda o: pod(o, "StatefulSet", "weft-worker").update(hostNetwork=True),
                    "StatefulSet/weft-worker: hostNetwork must not be set")

    def test_catches_world_readable_key(self):
        def m(o):
            tls = next(v for v in pod(o, "StatefulSet", "weft-worker")["volumes"] if v["name"] == "tls")
            tls["secret"]["defaultMode"] = 0o644
        self.broken(m, "StatefulSet/weft-worker: volume tls: defaultMode 0644")

    def test_catches_writable_secret_mount(self):
        def m(o):
            next(v for v in container(o, "weft-ps")["volumeMounts"] if v["name"] == "tls").pop("readOnly")
        self.broken(m, "StatefulSet/weft-ps: container ps: volumeMount tls (a Secret) must be readOnly")

    def test_catches_secret_unreadable_without_fs_group(self):
        self.broken(lambda o: pod(o, "Job", "weft-submit")["securityContext"].pop("fsGroup"),
                    "Job/weft-submit: volume tls: Secret files belong to root")

    def test_catches_insecure(self):
        self.broken(lambda o: container(o, "weft-worker")["args"].append("--insecure"),
                    "StatefulSet/weft-worker: container worker: --insecure turns off TLS")

    def test_catches_missing_key(self):
        self.broken(lambda o: set_flag(container(o, "weft-master")["args"], "key", None),
                    "StatefulSet/weft-master: container master: `weft master` has no --key")

    def test_catches_another_tasks_certificate(self):
        self.broken(lambda o: set_flag(container(o, "weft-worker")["args"], "cert", "/etc/weft/tls/worker-0.crt"),
                    "StatefulSet/weft-worker: container worker: --cert=/etc/weft/tls/worker-0.crt is not this "
                    "worker's own worker-$(POD_INDEX).crt")

    def test_catches_another_roles_secret(self):
        def m(o):
            tls = next(v for v in pod(o, "StatefulSet", "weft-ps")["volumes"] if v["name"] == "tls")
            tls["secret"]["secretName"] = "weft-tls-worker"
        self.broken(m, "StatefulSet/weft-ps: container ps: --ca=/etc/weft/tls/ca.crt comes from Secret "
                       "weft-tls-worker; this pod may mount only weft-tls-ps")

    def test_accepts_per_task_secrets_projected(self):
        # The cert-manager layout of deploy/README.md: one Secret per task, projected.
        objects = copy.deepcopy(self.rendered["overlays/cpu"])
        tls = next(v for v in pod(objects, "StatefulSet", "weft-worker")["volumes"] if v["name"] == "tls")
        tls.pop("secret")
        tls["projected"] = {"defaultMode": 0o440, "sources": [
            {"secret": {"name": "weft-tls-worker-%d" % i, "items": (
                [{"key": "ca.crt", "path": "ca.crt"}] if i == 0 else []) + [
                {"key": "tls.crt", "path": "worker-%d.crt" % i}, {"key": "tls.key", "path": "worker-%d.key" % i}]}}
            for i in range(2)]}
        self.assertEqual(check_manifests.check_objects("overlays/cpu", objects), [])
        tls["projected"]["sources"][1]["secret"]["name"] = "weft-tls-master"
        errors = check_manifests.check_objects("overlays/cpu", objects)
        self.assertTrue(any("--ca=/etc/weft/tls/ca.crt comes from Secret weft-tls-master;" in e for e in errors), errors)

    def test_catches_tls_file_outside_a_secret(self):
        self.broken(lambda o: set_flag(container(o, "weft-ps")["args"], "ca", "/etc/ssl/certs/ca.crt"),
                    "StatefulSet/weft-ps: container ps: --ca=/etc/ssl/certs/ca.crt is not in a mounted Secret")

    def test_catches_client_without_certificate(self):
        def m(o):
            c = pod(o, "Job", "weft-submit")["containers"][0]
            c["env"] = [e for e in c["env"] if e["name"] not in ("WEFT_CERT", "WEFT_KEY")]
        self.broken(m, "Job/weft-submit: container submit: no client certificate (WEFT_CERT and WEFT_KEY) or token")

    def test_catches_client_without_ca(self):
        def m(o):
            c = pod(o, "Job", "weft-submit")["initContainers"][0]
            c["env"] = [e for e in c["env"] if e["name"] != "WEFT_CA"]
        self.broken(m, "Job/weft-submit: container wait-for-master: no WEFT_CA")

    def test_catches_client_holding_the_masters_key(self):
        def m(o):
            tls = next(v for v in pod(o, "Job", "weft-submit")["volumes"] if v["name"] == "tls")
            tls["secret"]["secretName"] = "weft-tls-master"
        self.broken(m, "this pod may mount only weft-tls-client")

    def test_catches_probe_on_the_mtls_port(self):
        self.broken(lambda o: container(o, "weft-worker")["readinessProbe"]["grpc"].update(port=2222),
                    "StatefulSet/weft-worker: container worker: readinessProbe probes port 2222, but the plaintext "
                    "health service is on 8081")

    def test_catches_missing_health_port(self):
        self.broken(lambda o: set_flag(container(o, "weft-master")["args"], "health_port", None),
                    "StatefulSet/weft-master: container master: no --health_port")

    def test_catches_health_port_on_the_daemon_port(self):
        self.broken(lambda o: set_flag(container(o, "weft-ps")["args"], "health_port", "2222"),
                    "StatefulSet/weft-ps: container ps: --health_port=2222 is the daemon's own port")

    def test_catches_health_port_not_declared(self):
        def m(o):
            c = container(o, "weft-worker")
            c["ports"] = [p for p in c["ports"] if p["name"] != "health"]
        self.broken(m, "StatefulSet/weft-worker: container worker: no port named health at 8081")

    def test_catches_missing_checkpoint_root(self):
        self.broken(lambda o: set_flag(container(o, "weft-ps")["args"], "checkpoint_root", None),
                    "StatefulSet/weft-ps: no --checkpoint_root")

    def test_catches_checkpoint_dir_outside_the_root(self):
        self.broken(lambda o: set_flag(container(o, "weft-master")["args"], "checkpoint_root", "/checkpoints/other"),
                    "StatefulSet/weft-master: the checkpoint dir /checkpoints/fmnist-mlp (job.pbtxt) is outside "
                    "--checkpoint_root=/checkpoints/other")

    def test_catches_checkpoint_root_off_the_claim(self):
        self.broken(lambda o: set_flag(container(o, "weft-master")["args"], "checkpoint_root", "/tmp"),
                    "StatefulSet/weft-master: --checkpoint_root=/tmp is not on the shared checkpoint claim")

    def test_catches_dataset_outside_the_data_root(self):
        self.broken(lambda o: set_flag(container(o, "weft-worker")["args"], "data_root", "/data"),
                    "StatefulSet/weft-worker: the dataset dir /usr/share/datasets/fashion-mnist (job.pbtxt) is "
                    "outside --data_root=/data")

    def test_catches_misspelt_security_flag(self):
        self.broken(lambda o: container(o, "weft-ps")["args"].append("--health-port=8081"),
                    "`weft ps` has no flag --health-port")


class NetworkPolicyTest(RenderedTest):
    """The NetworkPolicies admit weft's flows and nothing else (netpol.py)."""

    def policy(self, objects, name):
        return find(objects, "NetworkPolicy", name)["spec"]

    def test_catches_no_policy(self):
        def m(o):
            o[:] = [x for x in o if x["kind"] != "NetworkPolicy"]
        self.broken(m, "StatefulSet/weft-master: no NetworkPolicy with policyTypes Ingress selects its pods")

    def test_catches_master_open_to_every_pod(self):
        self.broken(lambda o: self.policy(o, "weft-master")["ingress"][0].pop("from"),
                    "StatefulSet/weft-master: NetworkPolicy/weft-master admits any pod of this namespace to port 5000")

    def test_catches_master_open_to_tasks_and_not_clients(self):
        def m(o):
            self.policy(o, "weft-master")["ingress"][0]["from"][0]["podSelector"]["matchLabels"] = {
                "app.kubernetes.io/name": "weft"}
        self.broken(m, "StatefulSet/weft-master: NetworkPolicy/weft-master admits the pods of "
                       "StatefulSet/weft-worker to port 5000; tasks never call the master")
        self.broken(m, "StatefulSet/weft-master: no NetworkPolicy admits the weft client pods of Job/weft-submit "
                       "to port 5000")

    def test_catches_master_open_to_other_namespaces(self):
        def m(o):
            self.policy(o, "weft-master")["ingress"][0]["from"] = [{"namespaceSelector": {}}]
        self.broken(m, "NetworkPolicy/weft-master admits any pod of another namespace to port 5000")

    def test_catches_master_open_to_any_address(self):
        def m(o):
            self.policy(o, "weft-master")["ingress"][0]["from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}})
        self.broken(m, "StatefulSet/weft-master: NetworkPolicy/weft-master admits any address to port 5000")

    def test_catches_tasks_open_to_clients(self):
        self.broken(lambda o: self.policy(o, "weft-tasks")["ingress"][0]["from"][0].update(podSelector={}),
                    "StatefulSet/weft-worker: NetworkPolicy/weft-tasks admits the weft client pods of "
                    "Job/weft-submit to port 2222")

    def test_catches_tasks_closed_to_the_master(self):
        def m(o):
            self.policy(o, "weft-tasks")["ingress"][0]["from"][0]["podSelector"] = {
                "matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In",
                                      "values": ["worker", "ps"]}]}
        self.broken(m, "StatefulSet/weft-ps: no NetworkPolicy admits the pods of StatefulSet/weft-master to port "
                       "2222; master -> tasks and task -> task must be allowed")

    def test_catches_every_port_open_between_tasks(self):
        self.broken(lambda o: self.policy(o, "weft-tasks")["ingress"][0].pop("ports"),
                    "StatefulSet/weft-worker: NetworkPolicy/weft-tasks admits the pods of StatefulSet/weft-ps to "
                    "port 1; weft serves only port 2222 and the health port 8081")

    def test_catches_health_port_closed(self):
        self.broken(lambda o: self.policy(o, "weft")["ingress"][0]["ports"][0].update(port=8082),
                    "StatefulSet/weft-worker: no NetworkPolicy admits any address to port 8081; the kubelet's probes")

    def test_catches_egress_to_tasks_closed(self):
        self.broken(lambda o: self.policy(o, "weft")["egress"][0]["ports"][0].update(port=2223),
                    "StatefulSet/weft-master: its NetworkPolicy egress does not let it reach port 2222 of "
                    "StatefulSet/weft-worker")

    def test_catches_dns_closed(self):
        self.broken(lambda o: self.policy(o, "weft")["egress"].pop(1),
                    "StatefulSet/weft-ps: its NetworkPolicy egress refuses DNS (UDP port 53)")

    def test_named_ports_resolve_per_pod(self):
        # `grpc` is 5000 on the master and 2222 on the tasks: still exact.
        def m(o):
            self.policy(o, "weft-master")["ingress"][0]["ports"][0]["port"] = "grpc"
            self.policy(o, "weft-tasks")["ingress"][0]["ports"][0]["port"] = "grpc"
        objects = copy.deepcopy(self.rendered["overlays/cpu"])
        m(objects)
        self.assertEqual(check_manifests.check_objects("overlays/cpu", objects), [])


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
        for overlay, objects in check_manifests.render_all(DEPLOY).items():
            need = needed_keys(objects)
            self.assertEqual(sorted(need), ["weft-tls-client", "weft-tls-master", "weft-tls-ps", "weft-tls-worker"])
            for name, keys in need.items():
                self.assertLessEqual(keys, set(secrets.get(name, {})), "%s: Secret %s" % (overlay, name))
        self.assertEqual(sorted(secrets["weft-tls-worker"]),
                         ["ca.crt", "worker-0.crt", "worker-0.key", "worker-1.crt", "worker-1.key"])

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
        objects = copy.deepcopy(check_manifests.render_all(DEPLOY)["overlays/cpu"])
        c = pod(objects, "Job", "weft-submit")["containers"][0]
        next(e for e in c["env"] if e["name"] == "WEFT_CERT")["value"] = "/etc/weft/tls/alice.crt"
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


class TfJobTest(unittest.TestCase):
    def setUp(self):
        tfjobs, self.others = check_manifests.load_kubeflow(DEPLOY)
        self.tfjob = tfjobs[0]
        self.base = check_manifests.render_all(DEPLOY)["overlays/cpu"]

    def replica(self, rtype):
        return self.tfjob["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"]

    def expect(self, fault):
        errors = check_manifests.check_tfjob(self.tfjob, self.base, self.others)
        self.assertTrue(any(fault in e for e in errors), "no error containing %r in %s" % (fault, errors))

    def test_valid(self):
        self.assertEqual(check_manifests.check_tfjob(self.tfjob, self.base, self.others), [])
        self.assertEqual(sorted(o["kind"] for o in self.others), ["NetworkPolicy"] * 3)

    def test_catches_worker_without_certificate(self):
        set_flag(self.replica("Worker")["containers"][0]["args"], "cert", None)
        self.expect("TFJob Worker: container tensorflow: `weft worker` has no --cert")

    def test_catches_chief_probing_the_mtls_port(self):
        self.replica("Chief")["containers"][0]["readinessProbe"]["grpc"]["port"] = 2222
        self.expect("TFJob Chief: container tensorflow: readinessProbe probes port 2222, but the plaintext health "
                    "service is on 8081")

    def test_catches_chief_master_without_data_root(self):
        c = self.replica("Chief")["containers"][0]
        c["args"][0] = c["args"][0].replace("--data_root=/usr/share/datasets", "")
        self.expect("TFJob Chief: no --data_root")

    def test_catches_chief_client_without_key(self):
        c = self.replica("Chief")["containers"][0]
        c["env"] = [e for e in c["env"] if e["name"] != "WEFT_KEY"]
        self.expect("TFJob Chief: container tensorflow: no client certificate (WEFT_CERT and WEFT_KEY)")

    def test_catches_pod_index_from_the_wrong_field(self):
        env = self.replica("PS")["containers"][0]["env"]
        next(e for e in env if e["name"] == "POD_INDEX")["valueFrom"]["fieldRef"]["fieldPath"] = "metadata.name"
        self.expect("TFJob PS: POD_INDEX must come from the fieldRef "
                    "metadata.labels['training.kubeflow.org/replica-index']")

    def test_catches_service_account_token(self):
        self.replica("Worker")["automountServiceAccountToken"] = True
        self.expect("TFJob Worker: automountServiceAccountToken must be false")

    def test_catches_worker_holding_the_ps_keys(self):
        next(v for v in self.replica("Worker")["volumes"] if v["name"] == "tls")["secret"]["secretName"] = \
            "weft-fmnist-tls-ps"
        self.expect("TFJob Worker: container tensorflow: --ca=/etc/weft/tls/ca.crt comes from Secret "
                    "weft-fmnist-tls-ps; this pod may mount only weft-fmnist-tls-worker")

    def test_catches_missing_network_policies(self):
        self.others = []
        self.expect("TFJob Worker: no NetworkPolicy with policyTypes Ingress selects its pods")

    def test_catches_tasks_open_to_any_pod(self):
        tasks = next(p for p in self.others if p["metadata"]["name"] == "weft-fmnist-tasks")
        tasks["spec"]["ingress"][0].pop("from")
        self.expect("TFJob PS: NetworkPolicy/weft-fmnist-tasks admits any pod of this namespace to port 2222")

    def test_catches_wrong_container_name(self):
        self.tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "weft"
        errors = check_manifests.check_tfjob(self.tfjob, self.base)
        self.assertTrue(any("container named tensorflow" in e for e in errors), errors)

    def test_catches_cluster_flag_and_bad_replica_type(self):
        specs = self.tfjob["spec"]["tfReplicaSpecs"]
        specs["PS"]["template"]["spec"]["containers"][0]["args"].append("--cluster=x=a:1")
        specs["Workers"] = specs.pop("Worker")
        errors = check_manifests.check_tfjob(self.tfjob, self.base)
        self.assertTrue(any("come from TF_CONFIG" in e for e in errors), errors)
        self.assertTrue(any("replica type must be one of" in e for e in errors), errors)

    def test_catches_unknown_field_in_pod_template(self):
        self.tfjob["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["restartPolicyy"] = "Never"
        errors = check_manifests.check_tfjob(self.tfjob, self.base)
        self.assertTrue(any("restartPolicyy: unknown field" in e for e in errors), errors)


class DockerfileTest(unittest.TestCase):
    def read(self, name):
        with open(os.path.join(DEPLOY, "docker", name)) as f:
            return f.read()

    def test_dockerfiles_pass(self):
        for name in ("Dockerfile", "Dockerfile.cuda"):
            self.assertEqual(dockerfile_lint.lint(self.read(name), name), [])

    def test_build_script_is_the_one_ci_runs(self):
        with open(os.path.join(ROOT, "tools", "build_release.sh")) as f:
            script = f.read()
        self.assertIn("make -s deps", script)
        self.assertIn("build //client:weft", script)

    def expect_problem(self, old, new, problem):
        text = self.read("Dockerfile")
        self.assertIn(old, text)
        problems = dockerfile_lint.lint(text.replace(old, new))
        self.assertTrue(any(problem in p for p in problems), problems)

    def test_catches_root_user(self):
        self.expect_problem("USER 10001:10001", "USER root", "runs as root")

    def test_catches_missing_user(self):
        self.expect_problem("USER 10001:10001\n", "", "sets no USER")

    def test_catches_unpinned_base(self):
        self.expect_problem("ARG DEBIAN_SLIM_IMAGE=debian:12.11-slim", "ARG DEBIAN_SLIM_IMAGE=debian:latest",
                            "exact version")

    def test_catches_add_url(self):
        self.expect_problem("COPY . .", "ADD https://example.com/src.tgz /src", "ADD")

    def test_catches_bypassing_the_build_script(self):
        self.expect_problem("RUN tools/build_release.sh /release", "RUN bazel build //client:weft",
                            "calls bazel directly")

    def test_catches_single_stage(self):
        text = self.read("Dockerfile")
        single = text[:text.index("FROM ${DEBIAN_SLIM_IMAGE}")]
        self.assertTrue(any("not multi-stage" in p for p in dockerfile_lint.lint(single)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
