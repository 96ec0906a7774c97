"""Renders a kustomization with kustomize itself: `kubectl kustomize DIR`.

kubectl is the one on PATH. Debian 12's kubernetes-client package provides
one (kubectl 1.20, whose kustomize is v2); a newer kubectl renders
deploy/k8s to the same objects, because the kustomization files use only
fields that both understand (`bases:`, `patchesStrategicMerge:`, `images:`).
"""
import os
import shutil
import subprocess

import yaml

PACKAGE = "kubernetes-client"


class RenderError(Exception):
    pass


def kubectl():
    """The kubectl on PATH; RenderError naming the package to install if there is none."""
    path = shutil.which("kubectl")
    if path is None:
        raise RenderError("no kubectl on PATH: the manifests are rendered with `kubectl kustomize`; install "
                          "Debian's %s package (`make deps` does)" % PACKAGE)
    return path


def render(directory):
    """The objects `kubectl kustomize DIRECTORY` renders, as dicts."""
    if os.path.islink(os.path.join(directory, "kustomization.yaml")):
        # kustomize then says that there is none.
        raise RenderError("%s: kustomize does not read a kustomization.yaml that is a symbolic link (as in Bazel's "
                          "runfiles): render a copy with the links resolved (cp -RL)" % directory)
    cmd = [kubectl(), "kustomize", directory]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RenderError("%s: %s" % (" ".join(cmd), e))
    if r.returncode != 0:
        raise RenderError("%s exited %d: %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    try:
        return [d for d in yaml.safe_load_all(r.stdout) if d is not None]
    except yaml.YAMLError as e:
        raise RenderError("%s printed what is not YAML: %s" % (" ".join(cmd), e))
