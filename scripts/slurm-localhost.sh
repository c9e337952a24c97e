#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, to try and test xformer's SLURM path (docs/scaling.md):
#
#   sudo scripts/slurm-localhost.sh start     # installs slurm-wlm + munge with apt when absent, starts
#                                             # munged, slurmctld, slurmd; prints the SLURM_CONF to export
#   export SLURM_CONF=/tmp/xformer-slurm/slurm.conf
#   sinfo; sbatch ...; python run.py hydra/launcher=slurm ... -m
#   sudo scripts/slurm-localhost.sh stop      # stops the daemons (the state folder is kept)
#   scripts/slurm-localhost.sh status         # exit 0 when the node answers
#
# The node is this machine (NodeName=localhost, every CPU it has, its memory), in one partition
# named `cpu` (default) with no time limit. Daemons run as root (SlurmUser=root) with process
# tracking by /proc (proctrack/linuxproc) and no task binding (task/none): no cgroups needed, so it
# runs in a container too. No accounting database: `sacct` answers nothing (submitit then polls
# with squeue). Everything lives under $XFORMER_SLURM_DIR (default /tmp/xformer-slurm); the system's
# /etc/slurm is not touched, so clients need SLURM_CONF (the script prints it).
# Requires root (the daemons) and, when slurm is not installed, apt-get. Exit 3 means "cannot
# start here" with one line on stderr saying why (the tests skip on it).
set -euo pipefail

STATE="${XFORMER_SLURM_DIR:-/tmp/xformer-slurm}"
CONF="$STATE/slurm.conf"
PARTITION="${XFORMER_SLURM_PARTITION:-cpu}"
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
  cat >"$CONF" <<EOF
ClusterName=xformer-localhost
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job waits cred_expire seconds before it may start again (default 120)
AuthInfo=cred_expire=10
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
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
NodeName=localhost CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

up() { timeout 5 sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated|completing)'; }

start() {
  [ "$(id -u)" = 0 ] || cannot "not root: slurmctld/slurmd/munged must run as root (run with sudo)"
  install
  if up; then echo "export SLURM_CONF=$CONF"; return; fi
  write_conf
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  [ -s /etc/munge/munge.key ] || { mungekey -c -k /etc/munge/munge.key 2>/dev/null || create-munge-key -f; }
  if ! pgrep -x munged >/dev/null; then
    runuser -u munge -- munged || munged --force || cannot "munged did not start"
  fi
  slurmctld -f "$CONF" || cannot "slurmctld did not start (see $STATE/log/slurmctld.log)"
  slurmd -f "$CONF" || cannot "slurmd did not start (see $STATE/log/slurmd.log)"
  for _ in $(seq 1 60); do
    if up; then
      scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true
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
  for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid"; do
    if [ -s "$pidfile" ]; then
      kill "$(cat "$pidfile")" 2>/dev/null || true
    fi
  done
  for _ in $(seq 1 20); do
    alive=0
    for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid"; do
      [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && alive=1
    done
    [ $alive = 0 ] && break
    sleep 0.5
  done
  rm -f "$STATE/slurmd.pid" "$STATE/slurmctld.pid"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) up ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
