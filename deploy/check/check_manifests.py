#!/usr/bin/env python3
"""Checks every manifest under deploy/ offline: renders each kustomization
(overlays/*, submit), validates every object against the Kubernetes API
schema (schema.py), and checks the cross-references a schema cannot
(crossref.py). The Kubeflow TFJob is checked against its CRD's schema and
against the base objects it uses, with the NetworkPolicies beside it.

    check_manifests.py DEPLOY_DIR     prints each error; exit 1 if any
"""
import os
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crossref  # noqa: E402
import kustomize  # noqa: E402
import schema  # noqa: E402


def render_all(deploy_dir):
    """{label: [objects]}: each overlay rendered with the submit Job."""
    k8s = os.path.join(deploy_dir, "k8s")
    submit = kustomize.render(os.path.join(k8s, "submit"))
    out = {}
    overlays = os.path.join(k8s, "overlays")
    for name in sorted(os.listdir(overlays)):
        out["overlays/" + name] = kustomize.render(os.path.join(overlays, name)) + submit
    return out


def load_kubeflow(deploy_dir):
    """(the TFJobs, the other objects: their NetworkPolicies) of kubeflow/tfjob.yaml."""
    path = os.path.join(deploy_dir, "kubeflow", "tfjob.yaml")
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    return [d for d in docs if d.get("kind") == "TFJob"], [d for d in docs if d.get("kind") != "TFJob"]


def load_tfjobs(deploy_dir):
    return load_kubeflow(deploy_dir)[0]


def check_objects(label, objects):
    errors = []
    for o in objects:
        errors += ["%s: %s" % (label, e) for e in schema.validate(o)]
    errors += ["%s: %s" % (label, e) for e in crossref.Checker(objects).run()]
    return errors


def check_tfjob(tfjob, base_objects, others=()):
    """A TFJob, with `others`: the objects beside it in its file (its NetworkPolicies)."""
    errors = ["kubeflow/tfjob.yaml: %s" % e for e in schema.validate(tfjob)]
    specs = (tfjob.get("spec") or {}).get("tfReplicaSpecs") or {}
    for rtype, spec in specs.items():
        template = dict(spec.get("template") or {})
        errors += ["kubeflow/tfjob.yaml %s: %s" % (rtype, e)
                   for e in schema.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": rtype},
                                             "template": template})]
    errors += ["kubeflow/tfjob.yaml: %s" % e for e in crossref.check_tfjob(tfjob, base_objects, others)]
    return errors


def check_deploy(deploy_dir):
    errors = []
    rendered = render_all(deploy_dir)
    for label, objects in rendered.items():
        errors += check_objects(label, objects)
    base = next(iter(rendered.values()))
    tfjobs, others = load_kubeflow(deploy_dir)
    for o in others:
        errors += ["kubeflow/tfjob.yaml: %s" % e for e in schema.validate(o)]
    for tfjob in tfjobs:
        errors += check_tfjob(tfjob, base, others)
    return errors, rendered


def main(argv):
    if len(argv) != 1:
        print("usage: check_manifests.py DEPLOY_DIR", file=sys.stderr)
        return 2
    try:
        errors, rendered = check_deploy(argv[0])
    except kustomize.KustomizeError as e:
        print("check_manifests: %s" % e, file=sys.stderr)
        return 1
    for e in errors:
        print(e, file=sys.stderr)
    n = sum(len(v) for v in rendered.values())
    print("check_manifests: %d rendering(s), %d object(s), %d error(s)" % (len(rendered), n, len(errors)),
          file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
