#!/usr/bin/env python3
"""The deploy/ checks, and proof that they catch what they are for.

Every manifest rendered from deploy/k8s and deploy/kubeflow must pass the
schema and cross-reference checks; then each test breaks one thing in a copy
of the rendered objects (a typo, a wrong port, a cluster spec out of step
with the replicas...) and requires the checker to name it. The Dockerfiles
must pass the lint, and broken variants must not.

    deploy_manifests_test.py REPO_ROOT
"""
import copy
import os
import sys
import unittest

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else ".")
sys.path.insert(0, os.path.join(ROOT, "deploy", "check"))
import check_manifests  # noqa: E402
import crossref  # noqa: E402
import dockerfile_lint  # noqa: E402
import schema  # noqa: E402

DEPLOY = os.path.join(ROOT, "deploy")


def find(objects, kind, name):
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def container(objects, name):
    return find(objects, "StatefulSet", name)["spec"]["template"]["spec"]["containers"][0]


class ManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.errors, cls.rendered = check_manifests.check_deploy(DEPLOY)

    def test_every_rendering_is_valid(self):
        self.assertEqual(sorted(self.rendered), ["overlays/cpu", "overlays/gpu"])
        self.assertEqual(self.errors, [])
        for objects in self.rendered.values():
            kinds = sorted({o["kind"] for o in objects})
            self.assertEqual(kinds, ["ConfigMap", "Job", "PersistentVolumeClaim", "PodDisruptionBudget", "Service",
                                     "StatefulSet"])

    def test_gpu_overlay_gives_workers_a_gpu(self):
        objects = self.rendered["overlays/gpu"]
        c = container(objects, "weft-worker")
        self.assertEqual(c["resources"]["limits"]["nvidia.com/gpu"], "1")
        self.assertTrue(c["image"].endswith("-cuda"))
        self.assertEqual(find(objects, "ConfigMap", "weft-config")["data"]["worker-gpus"], "1")
        self.assertFalse(container(objects, "weft-ps")["image"].endswith("-cuda"))

    def broken(self, mutate, expect, overlay="overlays/cpu"):
        objects = copy.deepcopy(self.rendered[overlay])
        mutate(objects)
        errors = check_manifests.check_objects(overlay, objects)
        self.assertTrue(any(expect in e for e in errors), "no error containing %r in %s" % (expect, errors))

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


class TfJobTest(unittest.TestCase):
    def setUp(self):
        self.tfjob = check_manifests.load_tfjobs(DEPLOY)[0]
        self.base = check_manifests.render_all(DEPLOY)["overlays/cpu"]

    def test_valid(self):
        self.assertEqual(check_manifests.check_tfjob(self.tfjob, self.base), [])

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
