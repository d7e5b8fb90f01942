#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""deploy/kubernetes/*.yaml checked as a cluster would read them, and
against each other and kvtierd:

1. every file parses as YAML (python3-yaml), every document has an
   apiVersion and a kind, and the kinds this project ships have the
   apiVersion Kubernetes serves them under;
2. in every workload (Pod, Deployment, DaemonSet, StatefulSet, Job):
   the selector's labels are the template's, every container has a name
   and an image, container names are unique, every volumeMount names a
   volume of the pod and every volume is mounted, hostPath paths are
   absolute, a configMap volume names a ConfigMap in the directory;
3. kvtierd's configuration in the ConfigMap kvtierd-config is one that
   `kvtierd --check-config` accepts (with --kvtierd PATH); each tenant's
   socket and each spill file is on a hostPath volume of the DaemonSet;
   each engine's socket directory (a hostPath volume) is the directory of
   one tenant's socket as the node sees it, and the socket its
   KVTIER_SOCKET and kv-transfer-config name is that socket as the engine
   sees it, and the only hostPath it mounts; the connector named in
   kv-transfer-config is kvtier's; the engine containers add no
   capability, are not privileged and share no host namespace; an engine
   pod with hostUsers: false (host-mapped ids, in no group of the node's)
   has a tenant whose socket_mode is 0666; the DaemonSet's probes ask the
   image's main socket (scripts/image.sh).

4. the PodMonitor kvtierd selects the DaemonSet's pods by their labels
   and scrapes a port the daemon's container names, on the port the
   ConfigMap's [metrics] listen gives.

Files of other kinds in the directory (a seccomp profile) are not read.

Usage: test-manifests.py DEPLOY_DIR [--kvtierd PATH]
Exits 0, 1 (each problem named) or 77 without python3-yaml.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is not installed (apt-get install python3-yaml)")
    sys.exit(77)

API = {
    "ConfigMap": "v1", "Pod": "v1", "Service": "v1", "Namespace": "v1",
    "ServiceAccount": "v1", "Secret": "v1",
    "DaemonSet": "apps/v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1",
    "Job": "batch/v1",
    "PodMonitor": "monitoring.coreos.com/v1", "ServiceMonitor": "monitoring.coreos.com/v1",
}
WORKLOADS = ("Pod", "Deployment", "DaemonSet", "StatefulSet", "Job")
# The image's main socket (scripts/image.sh's entrypoint).
MAIN_SOCKET = "/run/kvtierd/kvtierd.sock"

problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def pod_spec(doc):
    if doc["kind"] == "Pod":
        return doc.get("spec") or {}
    return ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}


def check_workload(where, doc, configmaps):
    spec = doc.get("spec") or {}
    if doc["kind"] != "Pod":
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if not sel:
            problem(where, "no spec.selector.matchLabels")
        for k, v in sel.items():
            if labels.get(k) != v:
                problem(where, f"selector {k}={v} is not a label of the template")
    ps = pod_spec(doc)
    containers = (ps.get("initContainers") or []) + (ps.get("containers") or [])
    if not ps.get("containers"):
        problem(where, "no containers")
    names = [c.get("name") for c in containers]
    if len(set(names)) != len(names):
        problem(where, f"container names repeat: {names}")
    volumes = {v.get("name"): v for v in ps.get("volumes") or []}
    mounted = set()
    for c in containers:
        if not c.get("name") or not c.get("image"):
            problem(where, f"a container without a name or an image: {c.get('name')}")
        for m in c.get("volumeMounts") or []:
            mounted.add(m.get("name"))
            if m.get("name") not in volumes:
                problem(where, f"container {c.get('name')} mounts {m.get('name')}, which is no volume of the pod")
            if not str(m.get("mountPath", "")).startswith("/"):
                problem(where, f"container {c.get('name')}: mountPath {m.get('mountPath')} is not absolute")
    for name, v in volumes.items():
        if name not in mounted:
            problem(where, f"volume {name} is mounted by no container")
        if "hostPath" in v and not str(v["hostPath"].get("path", "")).startswith("/"):
            problem(where, f"volume {name}: hostPath {v['hostPath'].get('path')} is not absolute")
        if "configMap" in v and v["configMap"].get("name") not in configmaps:
            problem(where, f"volume {name} names the ConfigMap {v['configMap'].get('name')}, not in the directory")


def conf_sections(text):
    """{section: {key: value}} of a kvtierd.conf."""
    out, section = {}, None
    for line in text.splitlines():
        m = re.match(r"\[(.+)\]\s*$", line)
        if m:
            section = out.setdefault(m.group(1), {})
            continue
        m = re.match(r"(\w+)\s*=\s*(.*?)\s*$", line)
        if m and section is not None:
            section[m.group(1)] = m.group(2)
    return out


def node_path(path, ps, container):
    """The node's path of a path in the container, through its hostPath mounts."""
    volumes = {v["name"]: v for v in ps.get("volumes") or []}
    best = None
    for m in container.get("volumeMounts") or []:
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            v = volumes.get(m["name"]) or {}
            if "hostPath" in v and (best is None or len(mp) > len(best[0])):
                best = (mp, v["hostPath"]["path"].rstrip("/"))
    if best is None:
        return None
    return best[1] + path[len(best[0]):]


def check_kvtier(docs, kvtierd):
    cms = [d for _, d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kvtierd-config"]
    dss = [(w, d) for w, d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "kvtierd"]
    if len(cms) != 1 or len(dss) != 1:
        problem("deploy/kubernetes", "expected one ConfigMap kvtierd-config and one DaemonSet kvtierd")
        return
    conf = cms[0]["data"]["kvtierd.conf"]
    if kvtierd:
        with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
            f.write(conf)
            f.flush()
            r = subprocess.run([kvtierd, "--check-config", "--config", f.name],
                               capture_output=True, text=True)
        if r.returncode != 0:
            problem("kvtierd-config", f"kvtierd --check-config refuses it: {r.stderr.strip()}")
    sections = conf_sections(conf)
    where, ds = dss[0]
    ps = pod_spec(ds)
    daemon = next((c for c in ps["containers"] if c["name"] == "kvtierd"), None)
    if daemon is None:
        problem(where, "no container kvtierd")
        return
    if not any(m["mountPath"] == "/etc/kvtierd" and
               next((v for v in ps["volumes"] if v["name"] == m["name"]), {}).get("configMap", {}).get("name")
               == "kvtierd-config" for m in daemon.get("volumeMounts") or []):
        problem(where, "the ConfigMap kvtierd-config is not mounted on /etc/kvtierd")
    for probe in ("livenessProbe", "readinessProbe"):
        cmd = ((daemon.get(probe) or {}).get("exec") or {}).get("command") or []
        if MAIN_SOCKET not in cmd:
            problem(where, f"{probe} does not ask the daemon's socket {MAIN_SOCKET}: {cmd}")
    tenants, modes = {}, {}
    for name, keys in sections.items():
        if name.startswith("tenant.") and ("socket" in keys or "socket_dir" in keys):
            sock = keys.get("socket") or keys["socket_dir"].rstrip("/") + "/kvtierd.sock"
            node = node_path(sock, ps, daemon)
            if node is None:
                problem(where, f"[{name}] socket {sock} is on no hostPath volume")
            else:
                tenants[name[7:]] = node
                modes[node] = keys.get("socket_mode", "0660")
        if name.startswith("spill.") and node_path(keys.get("path", ""), ps, daemon) is None:
            problem(where, f"[{name}] path {keys.get('path')} is on no hostPath volume")
    for w, d in docs:
        if d["kind"] not in WORKLOADS or d is ds:
            continue
        eps = pod_spec(d)
        for c in eps.get("containers") or []:
            env = {e["name"]: e.get("value") for e in c.get("env") or []}
            sock = env.get("KVTIER_SOCKET")
            if not sock:
                continue
            node = node_path(sock, eps, c)
            if node not in tenants.values():
                problem(w, f"KVTIER_SOCKET {sock} is {node} on the node, no tenant's socket {sorted(tenants.values())}")
            elif eps.get("hostUsers") is False and modes[node] != "0666":
                # Its ids are host-mapped, in no group of the node's.
                problem(w, f"hostUsers: false, and its tenant's socket {node} is not socket_mode = 0666")
            for i, arg in enumerate(c.get("args") or []):
                if arg == "--kv-transfer-config":
                    kv = json.loads(c["args"][i + 1])
                    if kv.get("kv_connector") != "KvtierConnector" or kv.get("kv_connector_module_path") != "kvtier.vllm":
                        problem(w, f"kv-transfer-config does not name kvtier's connector: {kv}")
                    if (kv.get("kv_connector_extra_config") or {}).get("socket") != sock:
                        problem(w, "kv-transfer-config's socket is not KVTIER_SOCKET")
            sc = c.get("securityContext") or {}
            if sc.get("privileged") or (sc.get("capabilities") or {}).get("add"):
                problem(w, f"container {c['name']} is privileged or adds capabilities")
            if sc.get("allowPrivilegeEscalation") is not False:
                problem(w, f"container {c['name']} does not set allowPrivilegeEscalation: false")
            for hp in [v for v in eps.get("volumes") or [] if "hostPath" in v]:
                if hp["hostPath"]["path"].rstrip("/") != os.path.dirname(node or ""):
                    problem(w, f"hostPath {hp['hostPath']['path']} is not the tenant's socket directory")
            if eps.get("hostPID") or eps.get("hostNetwork") or eps.get("hostIPC"):
                problem(w, "the engine pod shares a host namespace")


def check_podmonitor(docs):
    pms = [(w, d) for w, d in docs if d["kind"] == "PodMonitor"]
    ds = next((d for _, d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "kvtierd"), None)
    cm = next((d for _, d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kvtierd-config"), None)
    if not pms or ds is None or cm is None:
        problem("deploy/kubernetes", "expected a PodMonitor beside the DaemonSet kvtierd and its ConfigMap")
        return
    labels = ((ds["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
    daemon = next((c for c in pod_spec(ds)["containers"] if c["name"] == "kvtierd"), {})
    ports = {p.get("name"): p.get("containerPort") for p in daemon.get("ports") or []}
    listen = conf_sections(cm["data"]["kvtierd.conf"]).get("metrics", {}).get("listen", "")
    for w, pm in pms:
        spec = pm.get("spec") or {}
        for k, v in ((spec.get("selector") or {}).get("matchLabels") or {}).items():
            if labels.get(k) != v:
                problem(w, f"selects {k}={v}, which the DaemonSet's pods do not carry")
        for ep in spec.get("podMetricsEndpoints") or []:
            port = ep.get("port")
            if port not in ports:
                problem(w, f"scrapes the port {port}, which the kvtierd container does not name {sorted(ports)}")
            elif not listen.endswith(f":{ports[port]}"):
                problem(w, f"port {port} is {ports[port]}, but [metrics] listen is {listen!r}")
            if ep.get("path", "/metrics") != "/metrics":
                problem(w, f"path {ep.get('path')}: kvtierd serves /metrics only")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("deploy")
    ap.add_argument("--kvtierd")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.deploy, "*.yaml")) + glob.glob(os.path.join(a.deploy, "*.yml")))
    if not files:
        print(f"FAIL: no manifest in {a.deploy}")
        return 1
    docs, configmaps = [], set()
    for path in files:
        base = os.path.basename(path)
        try:
            with open(path) as f:
                loaded = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            problem(base, f"not YAML: {e}")
            continue
        for i, d in enumerate(loaded):
            where = f"{base}[{i}]"
            if not isinstance(d, dict) or "apiVersion" not in d or "kind" not in d:
                problem(where, "no apiVersion or kind")
                continue
            if d["kind"] in API and d["apiVersion"] != API[d["kind"]]:
                problem(where, f"{d['kind']} is served as {API[d['kind']]}, not {d['apiVersion']}")
            if not (d.get("metadata") or {}).get("name"):
                problem(where, "no metadata.name")
                continue
            if d["kind"] == "ConfigMap":
                configmaps.add(d["metadata"]["name"])
            docs.append((f"{where} {d['kind']} {d['metadata']['name']}", d))
    for where, d in docs:
        if d["kind"] in WORKLOADS:
            check_workload(where, d, configmaps)
    check_kvtier(docs, a.kvtierd)
    check_podmonitor(docs)
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        return 1
    for where, _ in docs:
        print(f"ok: {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
