#!/usr/bin/env bash
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
#
# Capture real Slurm output (CLI text, CLI --json, slurmrestd JSON) for the parser fixtures in
# tests/fixtures/slurm-captures/<version>/, in the scenario that tests/fixtures/slurm-captures/README.md
# describes: gpu-a-001 runs job `train`, gpu-a-002 is drained by gpufleet, gpu-a-003 is FUTURE,
# two jobs stay pending; then gpu-a-001 goes DOWN and the requeued job waits with reason BeginTime.
#
# Usage (as root): tools/capture_slurm.sh CHROOT OUTDIR
#   CHROOT  a Debian root with slurmctld slurmd slurmrestd slurm-client munge slurm-wlm-jwt-plugin
#           installed, e.g. for Slurm 26.05 (Debian forky), on a bookworm host:
#             apt-get install -y debootstrap
#             debootstrap --variant=minbase forky DIR http://deb.debian.org/debian \
#                 /usr/share/debootstrap/scripts/sid
#             chroot DIR apt-get install -y --no-install-recommends slurmctld slurmd slurmrestd \
#                 slurm-client munge slurm-wlm-jwt-plugin
#           (never add a newer suite to the host's own apt sources: its libc would replace the host's).
#   OUTDIR  where the 15 CLI files go; the slurmrestd files go to OUTDIR/rest/.
#
# Everything runs inside CHROOT, so the host's own Slurm and munge are never touched: a private
# munged on its own socket and key, slurmctld, one slurmd per node (slurmd -N) and slurmrestd,
# all on 127.0.0.1 and on ports of their own (below) so that another lab on the same host keeps
# its ports. Every daemon's PID is recorded and the EXIT trap stops them by PID (never by name),
# then unmounts what this script mounted. The lab directory inside the chroot is wiped first, so
# job ids start at 1 on every run, as in the other captures.
set -euo pipefail

CTLD_PORT=${CTLD_PORT:-36817}
SLURMD_PORT_BASE=${SLURMD_PORT_BASE:-36901}   # gpu-a-001..003 get BASE, BASE+1, BASE+2
REST_PORT=${REST_PORT:-36820}
DRAIN_REASON='gpufleet: Xid79 GPU-fc522a91 (remediation r-1)'
DOWN_REASON='gpufleet: Xid79 test down'

if [[ $# -ne 2 ]]; then
    echo "usage: $0 CHROOT OUTDIR" >&2
    exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "$0: must run as root (chroot, mount, the daemons)" >&2
    exit 2
fi
CHROOT=$(realpath "$1")
mkdir -p "$2"
OUT=$(realpath "$2")
REST_OUT=$OUT/rest
for tool in curl python3 chroot mountpoint; do
    command -v "$tool" >/dev/null || { echo "$0: $tool is needed on the host" >&2; exit 2; }
done
for bin in slurmctld slurmd slurmrestd scontrol sinfo squeue sbatch munged; do
    [[ -x $CHROOT/usr/sbin/$bin || -x $CHROOT/usr/bin/$bin ]] || {
        echo "$0: $bin is not installed in $CHROOT" >&2; exit 2; }
done

# The lab, as seen from inside the chroot (LAB) and from the host (HLAB).
LAB=/srv/gpufleet-capture
HLAB=$CHROOT$LAB
CONF=$LAB/etc/slurm.conf

declare -A PIDS=()      # daemon name -> PID (chroot execs the daemon, so $! is the daemon itself)
MOUNTED=()              # what this run mounted, unmounted in reverse order

log() { printf '[capture %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# Run a command inside the chroot with a fixed environment: C locale and UTC, so dates and
# messages read the same on every run, from /tmp (the jobs' WorkDir, as in the other captures).
in_chroot() {
    chroot "$CHROOT" /usr/bin/env -i -C /tmp PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C TZ=UTC \
        HOME=/root SLURM_CONF=$CONF "$@"
}

# capture FILE CMD...: the command's stdout into OUTDIR/FILE. A refusal is an answer too (22.05's
# "unrecognized option '--json'"): when the command fails its stderr goes into the file after
# stdout; on success stderr is only logged, so a warning cannot break the file's format.
capture() {
    local file=$1 rc=0
    shift
    in_chroot "$@" >"$OUT/$file" 2>"$HLAB/tmp/stderr" || rc=$?
    if [[ $rc -ne 0 ]]; then
        cat "$HLAB/tmp/stderr" >>"$OUT/$file"
        log "$file: rc=$rc (kept the output and the error): $*"
    elif [[ -s $HLAB/tmp/stderr ]]; then
        log "$file: stderr (not in the file): $(tr '\n' ' ' <"$HLAB/tmp/stderr")"
    fi
}

# start_daemon NAME [USERSPEC] -- CMD...: run CMD in the chroot in the background, its output in
# the lab's log directory, and remember its PID. USERSPEC (user:group) for daemons that refuse root.
start_daemon() {
    local name=$1 spec=()
    shift
    if [[ $1 != -- ]]; then spec=(--userspec="$1"); shift; fi
    shift
    chroot "${spec[@]}" "$CHROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin LC_ALL=C TZ=UTC \
        SLURM_CONF=$CONF "$@" >"$HLAB/log/$name.log" 2>&1 &
    PIDS[$name]=$!
    echo "$!" >"$HLAB/run/$name.capture-pid"
    log "started $name (pid $!)"
}

stop_pid() {
    local name=$1 pid=$2 i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || { log "stopped $name (pid $pid)"; return 0; }
        sleep 0.2
    done
    log "$name (pid $pid) ignored TERM: KILL"
    kill -KILL "$pid" 2>/dev/null || true
}

# Processes whose root is this chroot: only this script starts any (the daemons, and slurmd's
# slurmstepd and job steps), so whatever is left after the daemons stopped is ours to stop.
chroot_pids() {
    local proc root
    for proc in /proc/[0-9]*; do
        root=$(readlink "$proc/root" 2>/dev/null) || continue
        [[ $root == "$CHROOT" ]] && echo "${proc#/proc/}"
    done
    return 0
}

cleanup() {
    local rc=$? name pid i
    set +e
    # The REST server first, then the nodes, then the controller, then munge, which they all use.
    for name in slurmrestd slurmd-gpu-a-001 slurmd-gpu-a-002 slurmctld munged; do
        [[ -n ${PIDS[$name]:-} ]] && stop_pid "$name" "${PIDS[$name]}"
    done
    for pid in $(chroot_pids); do
        log "left over in the chroot: pid $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null))"
        stop_pid "leftover" "$pid"
    done
    for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
        umount "${MOUNTED[$i]}" || log "could not unmount ${MOUNTED[$i]}"
    done
    [[ $rc -ne 0 ]] && log "failed (rc=$rc); daemon logs in $HLAB/log"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the chroot: /proc (ps-like reads, slurmd's own checks) and /dev (/dev/null, /dev/urandom);
# only what is not mounted yet, and only that is unmounted at the end.
mount_once() {
    local target=$CHROOT$1
    shift
    if ! mountpoint -q "$target"; then
        mount "$@" "$target"
        MOUNTED+=("$target")
    fi
}
mount_once /proc -t proc proc
mount_once /dev --bind /dev
mount_once /dev/pts --bind /dev/pts
cp /etc/hosts "$CHROOT/etc/hosts"   # localhost must resolve inside the chroot

# --- the lab directory, fresh every run.
if [[ -n $(chroot_pids) ]]; then
    echo "$0: processes already run in $CHROOT (another capture?): $(chroot_pids | tr '\n' ' ')" >&2
    exit 1
fi
rm -rf "$HLAB"
mkdir -p "$HLAB"/{etc,state,spool/gpu-a-001,spool/gpu-a-002,run,log,tmp,dev,munge,munge-socket}
# slurmrestd runs as nobody: the lab and its configuration must be world-readable...
chmod 0755 "$HLAB" "$HLAB/etc"
# ...but the JWT key only for SlurmUser (root), who signs and checks tokens.
chmod 0700 "$HLAB/state"
dd if=/dev/urandom of="$HLAB/state/jwt.key" bs=32 count=1 status=none
chmod 0600 "$HLAB/state/jwt.key"

# munged, as the chroot's munge user, with a private key and socket.
dd if=/dev/urandom of="$HLAB/munge/munge.key" bs=1024 count=1 status=none
chroot "$CHROOT" chown -R munge:munge "$LAB/munge" "$LAB/munge-socket"
chmod 0700 "$HLAB/munge"
chmod 0400 "$HLAB/munge/munge.key"
chmod 0755 "$HLAB/munge-socket"

# Two "GPUs" per node: gres.conf's File= must name character devices; these are /dev/null's
# numbers (1,3), never opened by a job here.
for i in 0 1; do mknod -m 0666 "$HLAB/dev/nvidia$i" c 1 3; done

cat >"$HLAB/etc/slurm.conf" <<EOF
# Written by tools/capture_slurm.sh: the scenario of tests/fixtures/slurm-captures/README.md.
ClusterName=cap
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
# Only the default for nodes without a Port: never bound, since every node line has its own. It
# differs from them so that every node prints Port= (scontrol hides a node's Port when it
# equals SlurmdPort), as in the 24.11 capture.
SlurmdPort=$((SLURMD_PORT_BASE - 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Private munged socket; cred_expire is also how long a requeued job waits (reason BeginTime).
AuthInfo=socket=$LAB/munge-socket/munge.socket,cred_expire=5
# slurmrestd authenticates its clients with JWT tokens from 'scontrol token'.
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$LAB/state/jwt.key
# Every daemon binds 127.0.0.1, never 0.0.0.0.
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
StateSaveLocation=$LAB/state
SlurmdSpoolDir=$LAB/spool/%n
SlurmctldPidFile=$LAB/run/slurmctld.pid
SlurmdPidFile=$LAB/run/slurmd-%n.pid
# Many slurmd on one host: no cgroups, no binding, the configured CPUs and memory.
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SlurmdParameters=config_overrides
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
# An admin-DOWN node stays down.
ReturnToService=1
JobRequeue=1
NodeName=gpu-a-001 Port=$SLURMD_PORT_BASE NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=4 RealMemory=4000 Gres=gpu:2 Feature=pool-gpu-a Weight=10 State=UNKNOWN
NodeName=gpu-a-002 Port=$((SLURMD_PORT_BASE + 1)) NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=4 RealMemory=4000 Gres=gpu:2 Feature=pool-gpu-a Weight=20 State=UNKNOWN
# A spare: hidden from sinfo and scontrol show node unless --future.
NodeName=gpu-a-003 Port=$((SLURMD_PORT_BASE + 2)) NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=4 RealMemory=4000 Gres=gpu:2 State=FUTURE
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$HLAB/etc/gres.conf" <<EOF
NodeName=gpu-a-[001-003] Name=gpu File=$LAB/dev/nvidia[0-1]
EOF
# No cgroup plugin (24.x+ otherwise wants cgroup v2 and systemd's delegation).
cat >"$HLAB/etc/cgroup.conf" <<EOF
CgroupPlugin=disabled
EOF
chmod 0644 "$HLAB"/etc/*.conf

# wait_for SECONDS DESCRIPTION CMD...: poll CMD (host side) until it succeeds.
wait_for() {
    local seconds=$1 what=$2 i
    shift 2
    for ((i = 0; i < seconds * 5; i++)); do
        "$@" && return 0
        sleep 0.2
    done
    log "timed out after ${seconds}s waiting for: $what"
    return 1
}

# --- the daemons.
start_daemon munged munge:munge -- /usr/sbin/munged --foreground \
    --socket="$LAB/munge-socket/munge.socket" --key-file="$LAB/munge/munge.key" \
    --pid-file="$LAB/munge/munged.pid" --seed-file="$LAB/munge/munged.seed" \
    --log-file="$LAB/munge/munged.log"
wait_for 20 "munge socket" test -S "$HLAB/munge-socket/munge.socket"
start_daemon slurmctld -- /usr/sbin/slurmctld -D -f "$CONF"
ctld_up() { in_chroot scontrol ping >/dev/null 2>&1; }
wait_for 30 "slurmctld" ctld_up || { in_chroot scontrol ping || true; exit 1; }
for node in gpu-a-001 gpu-a-002; do
    start_daemon "slurmd-$node" -- /usr/sbin/slurmd -D -N "$node" -f "$CONF"
done
nodes_idle() {
    [[ $(in_chroot sinfo -h -N -n gpu-a-001,gpu-a-002 -o '%N %T' 2>/dev/null | sort | tr '\n' ' ') == \
        "gpu-a-001 idle gpu-a-002 idle " ]]
}
wait_for 60 "gpu-a-001 and gpu-a-002 idle" nodes_idle

# --- the scenario: drain gpu-a-002 first (else a pending job would start there), then the jobs.
in_chroot scontrol update nodename=gpu-a-002 state=drain reason="$DRAIN_REASON"
in_chroot sbatch --requeue --gres=gpu:1 -w gpu-a-001 -J train --time=365-00:00:00 --wrap 'sleep 600'
job_state() { in_chroot squeue -h -j "$1" -o '%T %r' 2>/dev/null; }
train_running() { [[ $(job_state 1) == "RUNNING None" ]]; }
wait_for 30 "job 1 RUNNING" train_running
in_chroot sbatch --gres=gpu:2 -J pending-big --wrap 'sleep 600'
in_chroot sbatch --gres=gpu:2 -J pending-big2 --wrap 'sleep 600'
# The pending jobs get their reasons (Resources, Priority) once the schedulers looked at them.
pending_reasons() {
    [[ $(job_state 2) == "PENDING Resources" && $(job_state 3) == "PENDING Priority" ]]
}
wait_for 30 "jobs 2 and 3 pending with reasons Resources and Priority" pending_reasons || true
sleep 2   # so that RunTime and LastSchedEval read like the other captures' (a few seconds in)

# --- the files before the DOWN (the commands: see README.md and plugins/module_utils/slurm).
log "capturing the CLI files"
capture scontrol_version.txt scontrol --version
capture sinfo.txt sinfo
capture sinfo_N_long.txt sinfo -N -l
capture sinfo_future.txt sinfo --future -N -o '%N %t %G %f %w %E'
capture sinfo.json sinfo --json
capture squeue.txt squeue
capture squeue.json squeue --all --json
# Two nodes, one argument: every release (22.05, 24.11, 26.05) refuses "show node A B" with
# "too many arguments for keyword:show"; a comma-separated list is one node list.
capture scontrol_show_node.txt scontrol show node gpu-a-001,gpu-a-002
capture scontrol_show_node_oneliner.txt scontrol -o show node
capture scontrol_show_node.json scontrol --json show node
capture scontrol_show_job_oneliner.txt scontrol -o show job
capture scontrol_show_job.json scontrol --json show job
# The error for a node that does not exist: stderr only (the file is the message).
if in_chroot scontrol update nodename=gpu-a-999 state=drain reason=x \
    >/dev/null 2>"$OUT/scontrol_update_unknown_node.txt"; then
    log "the update of an unknown node succeeded?"
fi

# --- slurmrestd (still before the DOWN). It refuses to run as root or as SlurmUser: nobody.
log "capturing the slurmrestd files"
mkdir -p "$REST_OUT"
# SLURM_JWT=daemon: talk to slurmctld with each client's token (auth/jwt); without it slurmrestd
# uses auth/munge, which rejects every token ("Rejecting thread config token for user root").
start_daemon slurmrestd nobody:nogroup -- SLURM_JWT=daemon /usr/sbin/slurmrestd -f "$CONF" \
    -a rest_auth/jwt "127.0.0.1:$REST_PORT"
URL=http://127.0.0.1:$REST_PORT
TOKEN=$(in_chroot scontrol token username=root lifespan=600 | sed -n 's/^SLURM_JWT=//p')
[[ -n $TOKEN ]] || { echo "$0: scontrol token gave no token" >&2; exit 1; }
AUTH=(-H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $TOKEN")
# 26.05 wants a token even for its OpenAPI document.
openapi() { curl -sf "${AUTH[@]}" -o "$HLAB/tmp/openapi.json" "$URL/openapi/v3"; }
wait_for 30 "slurmrestd" openapi
# The data parsers it serves: the versions in its OpenAPI paths (the document itself is too big
# to keep), newest last.
mapfile -t PARSERS < <(python3 - "$HLAB/tmp/openapi.json" <<'EOF'
import json, re, sys
paths = json.load(open(sys.argv[1]))["paths"]
found = {m.group(1) for p in paths for m in [re.match(r"/slurm/(v[0-9.]+)/", p)] if m}
for version in sorted(found, key=lambda v: [int(x) for x in v[1:].split(".")]):
    print(version)
EOF
)
[[ ${#PARSERS[@]} -gt 0 ]] || { echo "$0: no /slurm/vX paths in the OpenAPI document" >&2; exit 1; }
NEWEST=${PARSERS[-1]}
PREVIOUS=${PARSERS[-2]:-}
declare -A STATUS=()

# rest FILE METHOD PATH [BODY] [TOKEN]: the response body into rest/FILE, its HTTP status kept.
rest() {
    local file=$1 method=$2 path=$3 body=${4:-} token=${5:-$TOKEN} args=()
    [[ -n $body ]] && args=(-H 'Content-Type: application/json' --data "$body")
    STATUS[$file]=$(curl -sS -X "$method" -o "$REST_OUT/$file" -w '%{http_code}' \
        -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $token" "${args[@]}" "$URL$path")
    log "rest/$file: $method $path -> HTTP ${STATUS[$file]}"
}
rest ping.json GET "/slurm/$NEWEST/ping"
rest nodes.json GET "/slurm/$NEWEST/nodes"
rest node_unknown.json GET "/slurm/$NEWEST/node/nosuch"
rest jobs.json GET "/slurm/$NEWEST/jobs"
rest diag.json GET "/slurm/$NEWEST/diag"
if [[ $(stat -c %s "$REST_OUT/diag.json") -gt 65536 ]]; then
    log "rest/diag.json is $(stat -c %s "$REST_OUT/diag.json") bytes: not kept"
    rm -f "$REST_OUT/diag.json"
    unset 'STATUS[diag.json]'
fi
[[ -n $PREVIOUS ]] && rest nodes_previous.json GET "/slurm/$PREVIOUS/nodes"
# A wrong token: well formed, but signed with another key.
BAD_TOKEN=$(python3 - "$TOKEN" <<'EOF'
import base64, hashlib, hmac, os, sys
head, payload, _ = sys.argv[1].split(".")
sig = hmac.new(os.urandom(32), ("%s.%s" % (head, payload)).encode(), hashlib.sha256).digest()
print("%s.%s.%s" % (head, payload, base64.urlsafe_b64encode(sig).rstrip(b"=").decode()))
EOF
)
rest bad_token.json GET "/slurm/$NEWEST/nodes" "" "$BAD_TOKEN"
# One node update: RESUME the drained gpu-a-002, then drain it back as it was. Jobs 2 and 3 are
# held meanwhile, so that neither starts on gpu-a-002 in between; released, they wait as before.
in_chroot scontrol hold 2,3
rest node_update.json POST "/slurm/$NEWEST/node/gpu-a-002" '{"state":["RESUME"]}'
AFTER_UPDATE=$(in_chroot scontrol -o show node gpu-a-002 | grep -o ' State=[^ ]*' | tr -d ' ')
log "gpu-a-002 after the REST update: $AFTER_UPDATE"
in_chroot scontrol update nodename=gpu-a-002 state=drain reason="$DRAIN_REASON"
# A resumed node is pinged again (26.05 shows it NOT_RESPONDING, '*', until it answers): wait
# until it reads IDLE+DRAIN as before, then let the jobs go.
drained_again() { in_chroot scontrol -o show node gpu-a-002 | grep -q ' State=IDLE+DRAIN '; }
wait_for 30 "gpu-a-002 IDLE+DRAIN again" drained_again || true
in_chroot scontrol release 2,3
wait_for 30 "jobs 2 and 3 pending again with reasons Resources and Priority" pending_reasons || true

{
    echo "# Data parsers served by slurmrestd $(in_chroot scontrol --version | awk '{print $2}')" \
        "(the /slurm/vX/ paths of GET /openapi/v3), oldest first."
    for version in "${PARSERS[@]}"; do
        case $version in
            "$NEWEST") echo "$version newest: ping.json nodes.json node_unknown.json jobs.json" \
                "$([[ -n ${STATUS[diag.json]:-} ]] && echo diag.json)" \
                "bad_token.json node_update.json" | tr -s ' ' ;;
            "$PREVIOUS") echo "$version previous: nodes_previous.json" ;;
            *) echo "$version" ;;
        esac
    done
    echo "# CLI --json (sinfo.json): $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["meta"]["plugin"]["data_parser"])' "$OUT/sinfo.json" 2>/dev/null || echo unknown)"
    echo "# HTTP status per file (requests as user root with 'scontrol token' JWT):"
    echo "ping.json GET /slurm/$NEWEST/ping ${STATUS[ping.json]}"
    echo "nodes.json GET /slurm/$NEWEST/nodes ${STATUS[nodes.json]}"
    echo "node_unknown.json GET /slurm/$NEWEST/node/nosuch ${STATUS[node_unknown.json]}"
    echo "jobs.json GET /slurm/$NEWEST/jobs ${STATUS[jobs.json]}"
    [[ -n ${STATUS[diag.json]:-} ]] && echo "diag.json GET /slurm/$NEWEST/diag ${STATUS[diag.json]}"
    [[ -n $PREVIOUS ]] && echo "nodes_previous.json GET /slurm/$PREVIOUS/nodes ${STATUS[nodes_previous.json]}"
    echo "bad_token.json GET /slurm/$NEWEST/nodes (token signed with another key) ${STATUS[bad_token.json]}"
    echo "node_update.json POST /slurm/$NEWEST/node/gpu-a-002 {\"state\":[\"RESUME\"]} ${STATUS[node_update.json]}"
    echo "# right after the POST, scontrol -o show node gpu-a-002: $AFTER_UPDATE (then drained back)"
} >"$REST_OUT/VERSIONS.txt"
stop_pid slurmrestd "${PIDS[slurmrestd]}"
unset 'PIDS[slurmrestd]'

# --- gpu-a-001 DOWN: its --requeue job is requeued and waits (BeginTime) about cred_expire
# seconds; the files must be taken inside that window.
log "gpu-a-001 DOWN"
in_chroot scontrol update nodename=gpu-a-001 state=down reason="$DOWN_REASON"
after_down() {
    [[ $(job_state 1) == "PENDING BeginTime" ]] &&
        [[ $(job_state 2) == "PENDING Nodes required for job are DOWN"* ]] &&
        in_chroot scontrol -o show node gpu-a-001 | grep -q ' State=DOWN '
}
wait_for 20 "job 1 PENDING BeginTime, job 2 blocked, gpu-a-001 DOWN" after_down || true
capture squeue_after_down.txt squeue -o '%i %j %T %r %N %y'
capture scontrol_show_node_down.txt scontrol -o show node gpu-a-001
log "done: $OUT"
