#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, to try (and test) the `hydra/launcher=slurm` path without a real one.
#   scripts/slurm_local.sh up       install slurm-wlm + munge if missing (root, apt-get), write slurm.conf, start
#                                   munged, slurmctld, slurmd, wait until the node is idle; prints the
#                                   `export SLURM_CONF=...` line the SLURM client commands need (eval it)
#   scripts/slurm_local.sh down     stop the daemons this script started (by pid)
#   scripts/slurm_local.sh status   whether the cluster answers (exit 0) or not (exit 1), and SLURM_CONF
# Everything lives in LIPGNN_SLURM_DIR (default ${TMPDIR:-/tmp}/lipgnn-slurm): slurm.conf, state, spool,
# pid and log files. One node with this machine's CPUs, one partition `debug`, no accounting daemon (sacct
# fails; the launcher reads job states from squeue instead), munge authentication. `up` when the cluster is
# already up only prints the export line. Messages go to stderr; stdout carries only the export line.
# Exit status of `up`: 0 up; 3 it cannot run here (one line on stderr says why, e.g. not root and no SLURM).
set -euo pipefail

DIR=${LIPGNN_SLURM_DIR:-${TMPDIR:-/tmp}/lipgnn-slurm}
CONF=$DIR/slurm.conf
NODE=$(hostname -s)
UP_TIMEOUT_S=${UP_TIMEOUT_S:-60}

say() { echo "slurm_local: $*" >&2; }
cannot() { say "cannot start a local SLURM cluster: $*"; exit 3; }

alive() {  # pid file names a live process of that program
  local pidfile=$1 prog=$2 pid
  [ -s "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$prog" ]
}

answers() {  # our controller runs and answers, and the node is idle or busy
  [ -f "$CONF" ] && alive "$DIR/slurmctld.pid" slurmctld || return 1
  local state
  state=$(SLURM_CONF=$CONF timeout 10 sinfo -h -N -n "$NODE" -o %t 2>/dev/null) || return 1
  case "$state" in idle*|mix*|alloc*|comp*) return 0 ;; *) return 1 ;; esac
}

install_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
    && command -v munged >/dev/null && return 0
  [ "$(id -u)" = 0 ] || cannot "slurm-wlm and munge are not installed, and installing them needs root"
  command -v apt-get >/dev/null || cannot "slurm-wlm and munge are not installed and there is no apt-get here"
  say "installing slurm-wlm and munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  local apt=(timeout 900 apt-get -q -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  "${apt[@]}" update >/dev/null || cannot "apt-get update failed (no network or mirror?)"
  "${apt[@]}" install --no-install-recommends slurm-wlm munge >/dev/null \
    || cannot "apt-get install slurm-wlm munge failed"
}

write_conf() {
  local cpus mem_mb
  cpus=$(nproc)
  mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  mkdir -p "$DIR/state" "$DIR/spool"
  cat > "$CONF.tmp" <<EOF
# Written by scripts/slurm_local.sh: a one-node cluster for trying the SLURM launcher locally.
ClusterName=lipgnn-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
# A cancelled or preempted job gets SIGKILL 5 s after SIGTERM (default 30 s).
KillWait=5
InactiveLimit=0
# debug2 logs each job time-limit check ("Testing job time limits"): tests/test_slurm.py starts its time-limit
# job right after one, so that SLURM's signal (sent at a check, every 30 s) comes at a known point of the job.
SlurmctldDebug=debug2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    return 0  # a munged already runs (the system's or ours)
  fi
  if [ ! -s /etc/munge/munge.key ]; then
    /usr/sbin/mungekey -c -k /etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  su -s /bin/sh munge -c "/usr/sbin/munged --pid-file=/run/munge/munged.pid"
  cp /run/munge/munged.pid "$DIR/munged.pid"
  for _ in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  cannot "munged did not start (see /var/log/munge/munged.log)"
}

up() {
  if answers; then
    say "already up (node $NODE)"
    echo "export SLURM_CONF=$CONF"
    return 0
  fi
  install_packages
  [ "$(id -u)" = 0 ] || cannot "the daemons run as root here; run 'sudo $0 up' (or use a real cluster)"
  mkdir -p "$DIR"
  write_conf
  export SLURM_CONF=$CONF
  start_munge
  alive "$DIR/slurmctld.pid" slurmctld || slurmctld -f "$CONF"
  alive "$DIR/slurmd.pid" slurmd || slurmd -f "$CONF"
  local waited=0
  until answers; do
    # A node left down by an earlier run (e.g. killed daemons) is put back into service.
    scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
    sleep 1
    waited=$((waited + 1))
    [ "$waited" -lt "$UP_TIMEOUT_S" ] || cannot "node $NODE not idle after ${UP_TIMEOUT_S}s (see $DIR/*.log)"
  done
  say "up: node $NODE idle, $(nproc) CPUs, partition debug (SLURM_CONF=$CONF)"
  echo "export SLURM_CONF=$CONF"
}

stop_pid() {
  local pidfile=$1 prog=$2 pid
  alive "$pidfile" "$prog" || { rm -f "$pidfile"; return 0; }
  pid=$(cat "$pidfile")
  kill "$pid"
  for _ in $(seq 100); do
    [ -d "/proc/$pid" ] || break
    sleep 0.1
  done
  [ ! -d "/proc/$pid" ] || kill -9 "$pid"
  rm -f "$pidfile"
  say "stopped $prog (pid $pid)"
}

down() {
  stop_pid "$DIR/slurmd.pid" slurmd
  stop_pid "$DIR/slurmctld.pid" slurmctld
  stop_pid "$DIR/munged.pid" munged  # only a munged this script started
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status)
    if answers; then
      say "up (node $NODE)"
      echo "export SLURM_CONF=$CONF"
    else
      say "down (no controller answers with $CONF)"
      exit 1
    fi ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
