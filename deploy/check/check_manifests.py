#!/usr/bin/env python3
"""Checks every manifest under deploy/ offline: renders each kustomization
(overlays/*, submit) with `kubectl kustomize` (render.py), validates every
object against the Kubernetes API schema (schema.py), and checks the
cross-references a schema cannot (crossref.py). The Kubeflow TFJob, a plain
file applied with `kubectl apply -f`, is checked against its CRD's schema and
against the base objects it uses, with the NetworkPolicies beside it. The
monitoring kustomization (k8s/monitoring: the Prometheus Operator's
ServiceMonitor) is rendered and checked against its CRD's schema and the
Services and daemons it scrapes (monitoring.py).

    check_manifests.py [--weft=PATH] DEPLOY_DIR

prints each error and exits 1 if there is any. The `weft` binary is asked
for each subcommand's flags (`weft worker --help`...), which the manifests'
command lines must keep to: PATH is --weft, else $WEFT, else the `weft` on
PATH (`bazel build //client:weft` makes bazel-bin/client/weft).
"""
import os
import shutil
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crossref  # noqa: E402
import render  # noqa: E402
import schema  # noqa: E402


MONITORING = "k8s/monitoring"


def render_all(deploy_dir):
    """{label: [objects]}: each overlay rendered with the submit Job."""
    k8s = os.path.join(deploy_dir, "k8s")
    submit = render.render(os.path.join(k8s, "submit"))
    out = {}
    overlays = os.path.join(k8s, "overlays")
    for name in sorted(os.listdir(overlays)):
        out["overlays/" + name] = render.render(os.path.join(overlays, name)) + submit
    return out


def load_kubeflow(deploy_dir):
    """(the TFJobs, the other objects: their NetworkPolicies) of kubeflow/tfjob.yaml."""
    path = os.path.join(deploy_dir, "kubeflow", "tfjob.yaml")
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    return [d for d in docs if d.get("kind") == "TFJob"], [d for d in docs if d.get("kind") != "TFJob"]


def load_tfjobs(deploy_dir):
    return load_kubeflow(deploy_dir)[0]


def check_objects(label, objects, weft_flags):
    """`weft_flags`: what crossref.read_weft_flags returns."""
    errors = []
    for o in objects:
        errors += ["%s: %s" % (label, e) for e in schema.validate(o)]
    errors += ["%s: %s" % (label, e) for e in crossref.Checker(objects, weft_flags).run()]
    return errors


def check_tfjob(tfjob, base_objects, others, weft_flags):
    """A TFJob, with `others`: the objects beside it in its file (its NetworkPolicies)."""
    # The schema covers each replica's pod template with the core API's.
    errors = ["kubeflow/tfjob.yaml: %s" % e for e in schema.validate(tfjob)]
    errors += ["kubeflow/tfjob.yaml: %s" % e for e in crossref.check_tfjob(tfjob, base_objects, others, weft_flags)]
    return errors


def render_monitoring(deploy_dir):
    return render.render(os.path.join(deploy_dir, MONITORING))


def check_monitoring(monitoring_objects, base_objects):
    """The objects of k8s/monitoring against a rendering's (`base_objects`)."""
    errors = ["%s: %s" % (MONITORING, e) for o in monitoring_objects for e in schema.validate(o)]
    monitors = [o for o in monitoring_objects if o.get("kind") == "ServiceMonitor"]
    if not monitors:
        errors.append("%s: no ServiceMonitor" % MONITORING)
    errors += ["%s: %s" % (MONITORING, e) for e in crossref.check_service_monitors(monitors, base_objects)]
    return errors


def check_deploy(deploy_dir, weft_flags):
    """(errors, {label: rendered objects}): the overlays' renderings (with the submit Job) and k8s/monitoring's;
    raises render.RenderError if kubectl cannot render."""
    errors = []
    rendered = render_all(deploy_dir)
    for label, objects in rendered.items():
        errors += check_objects(label, objects, weft_flags)
    base = next(iter(rendered.values()))
    monitoring_objects = render_monitoring(deploy_dir)
    errors += check_monitoring(monitoring_objects, base)
    rendered[MONITORING] = monitoring_objects
    tfjobs, others = load_kubeflow(deploy_dir)
    for o in others:
        errors += ["kubeflow/tfjob.yaml: %s" % e for e in schema.validate(o)]
    for tfjob in tfjobs:
        errors += check_tfjob(tfjob, base, others, weft_flags)
    return errors, rendered


def main(argv):
    weft = [a[len("--weft="):] for a in argv if a.startswith("--weft=")]
    args = [a for a in argv if not a.startswith("--weft=")]
    if len(args) != 1 or len(weft) > 1:
        print("usage: check_manifests.py [--weft=PATH] DEPLOY_DIR", file=sys.stderr)
        return 2
    weft = weft[0] if weft else os.environ.get("WEFT") or shutil.which("weft")
    if not weft:
        print("check_manifests: no weft binary to read the flags from: pass --weft=PATH "
              "(bazel build //client:weft makes bazel-bin/client/weft)", file=sys.stderr)
        return 2
    try:
        errors, rendered = check_deploy(args[0], crossref.read_weft_flags(weft))
    except (render.RenderError, crossref.WeftFlagsError) as e:
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
