#!/usr/bin/env bash
# Checks the deployment files without a cluster and without the internet:
# - every Kubernetes manifest of deploy/k8s against the API schemas (kubernetes-validate, from
#   PyPI, ships them; --strict refuses unknown fields), and a broken copy must be refused;
# - what the manifests promise: host network, a node selector, resources, the secret from a
#   Secret, capabilities NET_RAW and NET_ADMIN only (all others dropped);
# - the shared secret: the repository's Secret holds a placeholder that the daemons refuse (never
#   a real secret), and `--secret FILE.yaml` refuses a Secret of yours that holds a placeholder
#   or fewer than 16 bytes, as the daemons would at start;
# - the systemd units of packaging/: UMask=0077 (the archive and comparison files hold production
#   data), and with ProtectSystem=strict a 0700 StateDirectory that ReadWritePaths names;
# - the Grafana dashboard: valid JSON, and every metric its queries use is one the daemons
#   define (their metrics tables: copier/src/metrics_table.rs, intercept/src/metrics_table.rs).
#   The Prometheus lab test (tests/tests/prometheus.rs) checks the same names against a live
#   scrape.
# The validator lives in a virtualenv under ~/.cache (made once, reused).
set -euo pipefail
# --secret FILE.yaml (repeatable): also refuse a Secret manifest of yours that holds a placeholder
secrets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --secret) secrets+=("$(realpath "$2")"); shift 2 ;;
    *) echo "check-deploy: unknown argument $1 (usage: check-deploy.sh [--secret FILE.yaml]...)" >&2; exit 2 ;;
  esac
done
export CHECK_DEPLOY_SECRETS="${secrets[*]:-}"
cd "$(dirname "$0")/.."
VENV="${XDG_CACHE_HOME:-$HOME/.cache}/trafficcopy/venv"
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  echo "check-deploy: installing kubernetes-validate into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "kubernetes-validate==1.37.0"
fi
K8S_VERSION=1.33.0
"$VENV/bin/kubernetes-validate" --quiet --strict -k "$K8S_VERSION" deploy/k8s/*.yaml
# the validator must refuse a manifest with a misspelt field
bad="$(mktemp --suffix=.yaml)"
trap 'rm -f "$bad"' EXIT
sed 's/fieldPath: status.hostIP/fieldPth: status.hostIP/' deploy/k8s/copier-daemonset.yaml > "$bad"
if "$VENV/bin/kubernetes-validate" --quiet --strict -k "$K8S_VERSION" "$bad" >/dev/null 2>&1; then
  echo "check-deploy: the validator accepted a broken manifest" >&2
  exit 1
fi
"$VENV/bin/python" - <<'PY'
import base64, glob, json, os, re, sys, yaml

problems = []
for path in sorted(glob.glob("deploy/k8s/*.yaml")):
    for doc in yaml.safe_load_all(open(path)):
        if not doc or doc.get("kind") != "DaemonSet":
            continue
        name = doc["metadata"]["name"]
        spec = doc["spec"]["template"]["spec"]
        if spec.get("hostNetwork") is not True:
            problems.append(f"{path}: {name} does not use the host network")
        if not spec.get("nodeSelector"):
            problems.append(f"{path}: {name} has no nodeSelector")
        secrets = [v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v]
        if not secrets:
            problems.append(f"{path}: {name} takes no Secret")
        for c in spec["containers"]:
            caps = c.get("securityContext", {}).get("capabilities", {})
            if caps.get("drop") != ["ALL"] or sorted(caps.get("add", [])) != ["NET_ADMIN", "NET_RAW"]:
                problems.append(f"{path}: {name}/{c['name']} capabilities {caps}: want drop ALL, add NET_RAW and NET_ADMIN")
            if c.get("securityContext", {}).get("allowPrivilegeEscalation") is not False:
                problems.append(f"{path}: {name}/{c['name']} allows privilege escalation")
            res = c.get("resources", {})
            if not res.get("requests") or not res.get("limits"):
                problems.append(f"{path}: {name}/{c['name']} has no resource requests and limits")

# The systemd units: what the daemons write (the --record archive, the --compare-log file) holds
# production requests and answers, so files are owner-only whatever the code does (UMask=0077),
# and the copier's one writable data directory is named (ProtectSystem=strict).
def unit(path):
    keys = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            k, v = line.split("=", 1)
            keys.setdefault(k.strip(), []).append(v.strip())
    return keys
units = sorted(glob.glob("packaging/*/*.service"))
if len(units) < 2:
    problems.append(f"packaging: {len(units)} systemd units found, want the copier's and the intercept's")
for path in units:
    u = unit(path)
    if u.get("UMask") != ["0077"]:
        problems.append(f"{path}: UMask {u.get('UMask')}: want UMask=0077 (files of production data owner-only)")
    if u.get("ProtectSystem") == ["strict"]:
        state = ["/var/lib/" + d for d in " ".join(u.get("StateDirectory", [])).split()]
        rw = " ".join(u.get("ReadWritePaths", [])).split()
        if not state or any(d not in rw for d in state):
            problems.append(f"{path}: ProtectSystem=strict with StateDirectory {state} not all in ReadWritePaths {rw}")
        if u.get("StateDirectoryMode", ["0755"]) != ["0700"]:
            problems.append(f"{path}: StateDirectoryMode {u.get('StateDirectoryMode')}: want 0700")

# The shared secret. The daemons refuse a known placeholder (common/src/proto/auth.rs,
# PLACEHOLDERS) or fewer than 16 bytes. The repository's Secret is a template: its value must be
# one the daemons refuse (a real secret committed here would be everyone's); a Secret given on
# the command line (`scripts/check-deploy.sh --secret my-secret.yaml`, before applying it) must
# not be one.
auth = open("common/src/proto/auth.rs").read()
block = re.search(r"pub const PLACEHOLDERS: &\[&str\] = &\[(.*?)\];", auth, re.S)
placeholders = [p.lower() for p in re.findall(r'"([^"]*)"', block.group(1))] if block else []
if not placeholders:
    problems.append("common/src/proto/auth.rs: PLACEHOLDERS not found")
def secret_problem(value):
    low = value.rstrip("\r\n").lower()
    hit = next((p for p in placeholders if p in low), None)
    if hit:
        return f"holds the placeholder {hit!r}: the daemons refuse it; make one with head -c 32 /dev/urandom | base64"
    if len(value.rstrip("\r\n").encode()) < 16:
        return "holds fewer than 16 bytes: the daemons refuse it"
    return None
def secret_values(path):
    for doc in yaml.safe_load_all(open(path)):
        if doc and doc.get("kind") == "Secret":
            data = dict(doc.get("stringData") or {})
            for k, v in (doc.get("data") or {}).items():
                data[k] = base64.b64decode(v).decode("utf-8", "replace")
            for k, v in data.items():
                yield k, str(v)
given = os.environ.get("CHECK_DEPLOY_SECRETS", "").split()
for path in sorted(glob.glob("deploy/k8s/*.yaml")):
    for k, v in secret_values(path):
        if secret_problem(v) is None:
            problems.append(f"{path}: Secret key {k} holds what looks like a real secret: the repository keeps a placeholder only")
for path in given:
    found = False
    for k, v in secret_values(path):
        found = True
        why = secret_problem(v)
        if why:
            problems.append(f"{path}: Secret key {k} {why}")
    if not found:
        problems.append(f"{path}: no Secret with a value in it")
# the check itself must refuse the template's placeholder and accept a random value
if secret_problem("REPLACE-ME-with-32-random-bytes-base64") is None or secret_problem(base64.b64encode(os.urandom(32)).decode()):
    problems.append("check-deploy: the secret check does not tell a placeholder from a random secret")

defined = set()
for src in ("copier/src/metrics_table.rs", "intercept/src/metrics_table.rs"):
    defined |= set(re.findall(r'"((?:copier|intercept)_[a-z0-9_]+)" \[', open(src).read()))
dash = json.load(open("deploy/grafana/trafficcopy.json"))
used = set()
for p in dash["panels"]:
    for t in p["targets"]:
        for n in re.findall(r"\b((?:copier|intercept)_[a-z0-9_]+)", t["expr"]):
            used.add(re.sub(r"_(bucket|sum|count)$", "", n) if n.startswith("copier_replay_lag") else n)
for n in sorted(used - defined):
    problems.append(f"deploy/grafana/trafficcopy.json: metric {n} is not defined by the daemons")
if problems:
    print("check-deploy:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"check-deploy: manifests valid (Kubernetes {sys.argv[1] if len(sys.argv) > 1 else '1.33'}), {len(units)} systemd units owner-only, dashboard uses {len(used)} metrics, all defined")
PY
