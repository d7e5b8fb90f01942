#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""deploy/kubernetes/ made into pods that `podman kube play` runs on one machine.

podman 4.3 plays Pods and Deployments but not DaemonSets, and a test runs
no GPU and no vLLM.  So, changing no more than that needs:

- daemon.yaml: the ConfigMap kvtierd-config, its sizes made small
  (--conf SECTION.KEY=VALUE), and the DaemonSet kvtierd's pod template as a
  Pod, the image named by --image, every hostPath volume a directory
  HOSTDIR/VOLUME; everything else as shipped (security context, probes,
  resources, mounts) but its init containers:
- init-NAME.yaml, one per init container of that template, played before
  daemon.yaml: the same pod with that container alone, to run once.
  Its volumes are those the container mounts.  podman 4.3 waits for a
  kube pod's init container to exit until a 20 s timeout, whenever it exits (podman pull request 16698), and now and then
  then fails to remove it ("cannot remove container ... as it is
  running"): the test plays it, and waits for it, itself;
- engine-NAME.yaml, one per --engine NAME:UID:ARGS: the pod template of
  vllm-engine.yaml's Deployment as a Pod whose container runs
  /usr/local/bin/kvt-engine (the file --kvt-engine, mounted) as uid UID
  with ARGS instead of vLLM, KVTIER_SOCKET as its socket (empty ARGS: it
  waits, for kvt-engine to be run in it by podman exec); its tenant
  socket directory is the daemon's, under HOSTDIR; the GPU and the model
  volume go; security context, supplemental groups and the socket
  directory's mount stay, hostUsers as vllm-engine.yaml has it (false: a
  user namespace of the pod's own).  --host-users removes hostUsers: the
  engines in the host's user namespace.

--hostpid puts the daemon and the engines in the host's pid namespace
(hostPID: true), the alternative to their own.

Usage: kube-pods.py DEPLOY_DIR OUTDIR --prefix P --image IMG --hostdir DIR
         --kvt-engine PATH [--engine NAME:UID:ARGS]... [--conf S.K=V]...
         [--hostpid] [--host-users]
"""
import argparse
import copy
import os
import re
import shlex
import sys

import yaml


def literal(dumper, text):
    """Multi-line strings (the configuration) as YAML's block literals."""
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


yaml.SafeDumper.add_representer(str, literal)


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def one(docs, kind):
    found = [d for d in docs if d.get("kind") == kind]
    if len(found) != 1:
        sys.exit(f"kube-pods: expected one {kind}, found {len(found)}")
    return found[0]


def set_conf(text, changes):
    """kvtierd.conf with [SECTION] KEY set to VALUE for each SECTION.KEY=VALUE."""
    want = {}
    for c in changes:
        k, _, v = c.partition("=")
        section, _, key = k.rpartition(".")
        want[(section, key)] = v
    out, section, seen = [], None, set()
    for line in text.splitlines():
        m = re.match(r"\[(.+)\]\s*$", line)
        if m:
            section = m.group(1)
        m = re.match(r"(\w+)\s*=", line)
        if m and (section, m.group(1)) in want:
            line = f"{m.group(1)} = {want[(section, m.group(1))]}"
            seen.add((section, m.group(1)))
        out.append(line)
    missing = set(want) - seen
    if missing:
        sys.exit(f"kube-pods: not in the configuration: {sorted(missing)}")
    return "\n".join(out) + "\n"


def host_map(volumes, hostdir):
    """{node path: test path} for each hostPath volume."""
    return {v["hostPath"]["path"]: os.path.join(hostdir, v["name"])
            for v in volumes if "hostPath" in v}


def remap(path, paths):
    for node, local in paths.items():
        if path == node or path.startswith(node + "/"):
            return local + path[len(node):]
    sys.exit(f"kube-pods: {path} is under no hostPath volume of the daemon")


def pod(name, template, restart):
    spec = copy.deepcopy(template["spec"])
    spec.pop("nodeSelector", None)
    spec.pop("priorityClassName", None)
    spec["restartPolicy"] = restart
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": dict(template["metadata"].get("labels", {}))},
            "spec": spec}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("deploy")
    ap.add_argument("out")
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--hostdir", required=True)
    ap.add_argument("--kvt-engine", required=True)
    ap.add_argument("--engine", action="append", default=[])
    ap.add_argument("--conf", action="append", default=[])
    ap.add_argument("--hostpid", action="store_true")
    ap.add_argument("--host-users", action="store_true")
    a = ap.parse_args()

    cm = one(load(os.path.join(a.deploy, "kvtierd-config.yaml")), "ConfigMap")
    cm["data"]["kvtierd.conf"] = set_conf(cm["data"]["kvtierd.conf"], a.conf)
    ds = one(load(os.path.join(a.deploy, "kvtierd.yaml")), "DaemonSet")
    daemon = pod(f"{a.prefix}-kvtierd", ds["spec"]["template"], "Always")
    spec = daemon["spec"]
    paths = host_map(spec["volumes"], a.hostdir)
    for v in spec["volumes"]:
        if "hostPath" in v:
            v["hostPath"]["path"] = paths[v["hostPath"]["path"]]
    for c in spec.get("initContainers", []) + spec["containers"]:
        c["image"] = a.image
    # podman keeps a played ConfigMap as a volume of its name, which
    # another run beside this one would share: the test's own name.
    name = f"{a.prefix}-{cm['metadata']['name']}"
    for v in spec["volumes"]:
        if v.get("configMap", {}).get("name") == cm["metadata"]["name"]:
            v["configMap"]["name"] = name
    cm["metadata"]["name"] = name
    if a.hostpid:
        spec["hostPID"] = True
    for c in spec.pop("initContainers", []):
        init = copy.deepcopy(daemon)
        init["metadata"]["name"] = f"{a.prefix}-{c['name']}"
        init["spec"]["containers"] = [c]
        used = {m["name"] for m in c.get("volumeMounts", [])}
        init["spec"]["volumes"] = [v for v in init["spec"]["volumes"] if v["name"] in used]
        init["spec"]["restartPolicy"] = "Never"
        with open(os.path.join(a.out, f"init-{c['name']}.yaml"), "w") as f:
            yaml.safe_dump(init, f, sort_keys=False)
    with open(os.path.join(a.out, "daemon.yaml"), "w") as f:
        yaml.safe_dump_all([cm, daemon], f, sort_keys=False)

    dep = one(load(os.path.join(a.deploy, "vllm-engine.yaml")), "Deployment")
    for e in a.engine:
        name, uid, args = e.split(":", 2)
        p = pod(f"{a.prefix}-{name}", dep["spec"]["template"], "Never")
        spec = p["spec"]
        c = spec["containers"][0]
        env = {v["name"]: v["value"] for v in c.get("env", [])}
        sock = env["KVTIER_SOCKET"]
        c["image"] = a.image
        # The namespaces the engine runs in, then the engine.
        run = f"exec kvt-engine --socket {shlex.quote(sock)} {args}" if args else 'trap "exit 0" TERM; sleep infinity & wait'
        c["command"] = ["sh", "-c",
                        'echo "pid namespace $(readlink /proc/self/ns/pid), user namespace '
                        '$(readlink /proc/self/ns/user), uid $(id -u), groups $(id -G), '
                        'CapEff $(sed -n "s/^CapEff:\\t//p" /proc/self/status)"; ' + run]
        c.pop("args", None)
        c.pop("resources", None)
        c.setdefault("securityContext", {})["runAsUser"] = int(uid)
        c["securityContext"]["runAsGroup"] = int(uid)
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "models"]
        c["volumeMounts"].append({"name": "kvt-engine", "mountPath": "/usr/local/bin/kvt-engine",
                                  "readOnly": True})
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "models"]
        for v in spec["volumes"]:
            if "hostPath" in v:
                v["hostPath"]["path"] = remap(v["hostPath"]["path"], paths)
        spec["volumes"].append({"name": "kvt-engine",
                                "hostPath": {"path": os.path.abspath(a.kvt_engine), "type": "File"}})
        if a.hostpid:
            spec["hostPID"] = True
        if a.host_users:
            spec.pop("hostUsers", None)
        with open(os.path.join(a.out, f"engine-{name}.yaml"), "w") as f:
            yaml.safe_dump(p, f, sort_keys=False)


if __name__ == "__main__":
    main()
