#!/usr/bin/env python3
"""Renders a kustomization offline: the subset of kustomize that deploy/k8s uses.

    kustomize.py DIR            prints the rendered objects as YAML
    kustomize.py --json DIR     as one JSON list

The kustomization files stay standard (`kubectl apply -k` renders the same
objects); this renderer exists so that the checks run without kubectl.
Supported fields: resources (files, or directories holding a
kustomization), patches (`path:` to a strategic-merge patch; its target is
the object with the patch's apiVersion, kind and name), images (name,
newName, newTag, digest). Any other field is an error, never ignored.
Strategic merge: maps merge; lists of named things merge by name
(containers, env, volumes, volumeMounts, ports by containerPort); other
lists are replaced; `null` deletes a key.
"""
import json
import os
import sys

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "patches", "images"}
# Lists whose items merge by a key instead of being replaced.
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "env": "name", "volumes": "name",
    "volumeMounts": "name", "ports": "containerPort", "imagePullSecrets": "name",
    "volumeClaimTemplates": None,  # replaced as a whole
}


class KustomizeError(Exception):
    pass


def load_yaml_documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def merge(base, patch, key=None):
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = merge(out[k], v, k)
            else:
                out[k] = v
        return out
    if isinstance(base, list) and isinstance(patch, list) and MERGE_KEYS.get(key):
        mk = MERGE_KEYS[key]
        out = list(base)
        for item in patch:
            idx = next((i for i, b in enumerate(out)
                        if isinstance(b, dict) and isinstance(item, dict) and b.get(mk) == item.get(mk)), None)
            if idx is None:
                out.append(item)
            else:
                out[idx] = merge(out[idx], item)
        return out
    return patch


def object_id(obj):
    meta = obj.get("metadata") or {}
    return (obj.get("apiVersion"), obj.get("kind"), meta.get("name"))


def split_image(image):
    """'repo/name:tag' -> (name, tag, digest)."""
    digest = None
    if "@" in image:
        image, digest = image.split("@", 1)
    tag = None
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        image, tag = image[:colon], image[colon + 1:]
    return image, tag, digest


def set_images(obj, images):
    def visit(node):
        if isinstance(node, dict):
            for k in ("containers", "initContainers"):
                for c in node.get(k) or []:
                    if isinstance(c, dict) and "image" in c:
                        c["image"] = rewrite(c["image"])
            for v in node.values():
                visit(v)
        elif isinstance(node, list):
            for v in node:
                visit(v)

    def rewrite(image):
        name, tag, digest = split_image(image)
        for rule in images:
            if rule.get("name") != name:
                continue
            unknown = set(rule) - {"name", "newName", "newTag", "digest"}
            if unknown:
                raise KustomizeError("images: unsupported field(s) %s" % sorted(unknown))
            name = rule.get("newName", name)
            if "newTag" in rule:
                tag, digest = str(rule["newTag"]), None
            if "digest" in rule:
                tag, digest = None, rule["digest"]
            break
        return name + (":" + tag if tag else "") + ("@" + digest if digest else "")

    visit(obj)


def render(directory):
    path = os.path.join(directory, "kustomization.yaml")
    if not os.path.exists(path):
        raise KustomizeError("%s: no kustomization.yaml" % directory)
    k = load_yaml_documents(path)[0]
    unknown = set(k) - SUPPORTED
    if unknown:
        raise KustomizeError("%s: fields this renderer does not support: %s" % (path, sorted(unknown)))
    objects = []
    for res in k.get("resources") or []:
        full = os.path.normpath(os.path.join(directory, res))
        if os.path.isdir(full):
            objects.extend(render(full))
        elif os.path.isfile(full):
            objects.extend(load_yaml_documents(full))
        else:
            raise KustomizeError("%s: resource %s does not exist" % (path, res))
    ids = [object_id(o) for o in objects]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise KustomizeError("%s: objects defined twice: %s" % (path, sorted(dup)))
    for p in k.get("patches") or []:
        if set(p) != {"path"}:
            raise KustomizeError("%s: a patch must be just `path:` here, got %s" % (path, sorted(p)))
        for patch in load_yaml_documents(os.path.join(directory, p["path"])):
            target = [i for i, o in enumerate(objects) if object_id(o) == object_id(patch)]
            if not target:
                raise KustomizeError("%s: patch %s matches no object %s" % (path, p["path"], object_id(patch)))
            objects[target[0]] = merge(objects[target[0]], patch)
    if k.get("images"):
        for o in objects:
            set_images(o, k["images"])
    return objects


def main(argv):
    as_json = "--json" in argv
    args = [a for a in argv if a != "--json"]
    if len(args) != 1:
        print("usage: kustomize.py [--json] DIR", file=sys.stderr)
        return 2
    try:
        objects = render(args[0])
    except (KustomizeError, OSError, yaml.YAMLError) as e:
        print("kustomize: %s" % e, file=sys.stderr)
        return 1
    if as_json:
        json.dump(objects, sys.stdout, indent=1, sort_keys=True)
        print()
    else:
        yaml.safe_dump_all(objects, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
