#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, to try and test xformer's SLURM path (docs/scaling.md):
#
#   sudo scripts/slurm-localhost.sh start     # installs slurm-wlm + munge with apt when absent, starts
#                                             # munged, slurmctld, slurmd; prints the SLURM_CONF to export
#   export SLURM_CONF=/tmp/xformer-slurm/slurm.conf
#   sinfo; sbatch ...; python run.py hydra/launcher=slurm ... -m
#   sudo scripts/slurm-localhost.sh stop      # stops the daemons (a later start begins with no jobs)
#   scripts/slurm-localhost.sh status         # exit 0 when the node answers
#   sudo XFORMER_SLURM_NODES=2 scripts/slurm-localhost.sh start   # a second cluster of 2 nodes (see below)
#
# The node is this machine (NodeName=localhost, every CPU it has, its memory), in one partition
# named `cpu` (default) with no time limit. Daemons run as root (SlurmUser=root) with process
# tracking by /proc (proctrack/linuxproc) and no task binding (task/none): no cgroups needed, so it
# runs in a container too. No accounting database: `sacct` answers nothing (submitit then polls
# with squeue). Everything lives under $XFORMER_SLURM_DIR (default /tmp/xformer-slurm); the system's
# /etc/slurm is not touched, so clients need SLURM_CONF (the script prints it).
# XFORMER_SLURM_NODES=N (N > 1) starts a separate cluster of N nodes named node1..nodeN, all on this
# machine (one slurmd each, `slurmd -N nodeK`, on ports 17011.. with slurmctld on 17010; the machine's
# CPUs and memory split between them), in partition `cpu` of its own $XFORMER_SLURM_DIR (default
# /tmp/xformer-slurm-<N>nodes), beside the one-node cluster: `srun --nodes=2` gives each task its own
# SLURM_NODEID, as on a real cluster. The node names resolve nowhere: jobs set MASTER_ADDR=127.0.0.1.
# XFORMER_SLURM_PORT=P puts slurmctld on port P and the slurmd on P+1.. (a further cluster beside these,
# with its own XFORMER_SLURM_DIR). A start that finds no cluster answering begins with an empty queue.
# Requires root (the daemons) and, when slurm is not installed, apt-get. Exit 3 means "cannot
# start here" with one line on stderr saying why (the tests skip on it).
set -euo pipefail

NODES="${XFORMER_SLURM_NODES:-1}"
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || { echo "slurm-localhost: XFORMER_SLURM_NODES=$NODES is not a node count" >&2; exit 2; }
if [ "$NODES" = 1 ]; then
  STATE="${XFORMER_SLURM_DIR:-/tmp/xformer-slurm}"
else
  STATE="${XFORMER_SLURM_DIR:-/tmp/xformer-slurm-${NODES}nodes}"
fi
CONF="$STATE/slurm.conf"
PARTITION="${XFORMER_SLURM_PARTITION:-cpu}"
PORT="${XFORMER_SLURM_PORT:-}"  # slurmctld's port, slurmd's the next ones (another cluster beside these)
[[ -z "$PORT" || "$PORT" =~ ^[1-9][0-9]{2,4}$ ]] || { echo "slurm-localhost: XFORMER_SLURM_PORT=$PORT is not a port number (e.g. 17110)" >&2; exit 2; }
export SLURM_CONF="$CONF"

cannot() { echo "slurm-localhost: $*" >&2; exit 3; }

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    return
  fi
  [ "$(id -u)" = 0 ] || cannot "not root: cannot install slurm-wlm/munge (run with sudo)"
  command -v apt-get >/dev/null || cannot "slurmctld is not installed and there is no apt-get to install it"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null 2>&1; } \
    || cannot "apt-get install slurm-wlm munge failed"
}

write_conf() {
  local cpus mem
  cpus=$(nproc --all)
  mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  mkdir -p "$STATE/ctld" "$STATE/d" "$STATE/log"
  if [ "$NODES" = 1 ]; then
    ports=""  # SLURM's own (6817, 6818) unless XFORMER_SLURM_PORT is set
    [ -z "$PORT" ] || ports=$'SlurmctldPort='"$PORT"$'\nSlurmdPort='"$((PORT + 1))"
    nodes="NodeName=localhost CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    members=localhost
  else  # N slurmd on this machine: own ports, own names, the CPUs and memory split
    ports=$'SlurmctldPort='"${PORT:=17010}"$'\nSlurmdPort='"$((PORT + 1))"
    nodes=""
    for k in $(seq 1 "$NODES"); do
      nodes+="NodeName=node$k NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT + k)) "
      nodes+="CPUs=$(( cpus / NODES > 0 ? cpus / NODES : 1 )) RealMemory=$(( mem / NODES )) State=UNKNOWN"$'\n'
    done
    members="node[1-$NODES]"
  fi
  cat >"$CONF" <<EOF
ClusterName=xformer-localhost$([ "$NODES" = 1 ] || echo "-$NODES")
SlurmctldHost=localhost
$ports
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job waits cred_expire seconds before it may start again (default 120)
AuthInfo=cred_expire=10
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# requeued jobs may start again at once; finished jobs leave squeue quickly
MinJobAge=30
KillWait=30
SchedulerParameters=sched_interval=2
$nodes
PartitionName=$PARTITION Nodes=$members Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

# every node answers
up() {
  local n
  n=$(timeout 5 sinfo -h -N -o %T 2>/dev/null | grep -cE '^(idle|mixed|allocated|completing)') || true
  [ "${n:-0}" -ge "$NODES" ]
}

start() {
  [ "$(id -u)" = 0 ] || cannot "not root: slurmctld/slurmd/munged must run as root (run with sudo)"
  install
  if up; then echo "export SLURM_CONF=$CONF"; return; fi
  # A cluster started here begins empty: jobs saved by a run of it that was killed (a session or CI
  # stopped mid-test) would otherwise come back from StateSaveLocation and hold its CPUs; daemons of
  # such a run that still live but do not answer are stopped first.
  stop
  rm -rf "$STATE/ctld" "$STATE/d" "$STATE/log"
  write_conf
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  [ -s /etc/munge/munge.key ] || { mungekey -c -k /etc/munge/munge.key 2>/dev/null || create-munge-key -f; }
  if ! pgrep -x munged >/dev/null; then
    runuser -u munge -- munged || munged --force || cannot "munged did not start"
  fi
  slurmctld -f "$CONF" || cannot "slurmctld did not start (see $STATE/log/slurmctld.log)"
  if [ "$NODES" = 1 ]; then
    slurmd -f "$CONF" || cannot "slurmd did not start (see $STATE/log/slurmd-localhost.log)"
  else
    for k in $(seq 1 "$NODES"); do
      slurmd -f "$CONF" -N "node$k" || cannot "slurmd -N node$k did not start (see $STATE/log/slurmd-node$k.log)"
    done
  fi
  for _ in $(seq 1 60); do
    if up; then
      scontrol update NodeName="$(sinfo -h -o %N | head -n 1)" State=RESUME >/dev/null 2>&1 || true
      echo "export SLURM_CONF=$CONF"
      return
    fi
    sleep 0.5
  done
  cannot "the node did not come up within 30 s (see $STATE/log/)"
}

stop() {
  # the daemons this script started, by their pid files (scancel first so no job is left running)
  if up; then scancel --full --quiet --user=root 2>/dev/null || true; fi
  local pidfiles=("$STATE"/slurmd*.pid "$STATE/slurmctld.pid")
  for pidfile in "${pidfiles[@]}"; do
    if [ -s "$pidfile" ]; then
      kill "$(cat "$pidfile")" 2>/dev/null || true
    fi
  done
  for _ in $(seq 1 20); do
    alive=0
    for pidfile in "${pidfiles[@]}"; do
      [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && alive=1
    done
    [ $alive = 0 ] && break
    sleep 0.5
  done
  rm -f "${pidfiles[@]}"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) up ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
