#!/usr/bin/env bash
# A real Slurm cluster on loopback, under one directory, for development
# and for the Slurm backend's tests (docs/slurm.md#a-slurm-to-run-against):
#
#   deployments/slurm/cluster.sh DIR
#
# starts munged, MariaDB + slurmdbd (accounting: sacct, QoS), slurmctld,
# one slurmd per node (several on this host: each node gets its own port
# and spool directory) and slurmrestd on a unix socket, writes
# DIR/cluster.env (SLURM_CONF, the socket, the nodes, …), prints "ready"
# on stdout, and runs until its standard input closes (Ctrl-D), or it gets
# SIGINT/SIGTERM; then it stops every daemon it started. The directory is
# kept (logs are under DIR/log); remove it afterwards.
#
# Tests hold its standard input open: when the test process dies, even by
# SIGKILL, the pipe closes and the cluster goes with it.
#
# Settings (environment):
#   SLURM_NODES       "node-a:2 node-b:4": name:gpus of the nodes started
#   SLURM_DOWN_NODES  "node-c:8": nodes declared but never started (DOWN);
#                     work only they could take stays pending
#   SLURM_NODE_CPUS   CPUs per node (2); SLURM_NODE_MEMORY MB per node (4000).
#                     More than the machine has is fine: config_overrides.
#   SLURM_ACCOUNTING  1 (default): slurmdbd and a private MariaDB; 0: none
#   SLURM_QOS         "high:1000": QoS name:priority created with accounting
#   SLURM_REST_USER   nobody: slurmrestd runs as this user, and jobs submitted
#                     through its socket run as it (rest_auth/local)
#   SLURM_REMOVE_DIR  1: remove DIR when stopping (tests)
#
# Needs root (slurmd starts jobs as other users) and the Debian packages
#   apt-get install -y slurmctld slurmd slurmrestd slurm-client munge slurmdbd mariadb-server
# Debian's Slurm 22.05 serves REST v0.0.38 and has no auth/jwt plugin, so
# slurmrestd listens on its unix socket only (rest_auth/local).
set -euo pipefail
# The daemons live in /usr/sbin, which a non-login PATH may lack.
PATH=$PATH:/usr/sbin:/sbin

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit 2
}
[ $# -eq 1 ] || usage
case $1 in -h | --help) usage ;; esac

NODES=${SLURM_NODES:-node-a:2 node-b:4}
DOWN_NODES=${SLURM_DOWN_NODES:-node-c:8}
CPUS=${SLURM_NODE_CPUS:-2}
MEMORY=${SLURM_NODE_MEMORY:-4000}
ACCOUNTING=${SLURM_ACCOUNTING:-1}
QOS=${SLURM_QOS:-high:1000}
REST_USER=${SLURM_REST_USER:-nobody}

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

# Every program and the package it comes from; a missing one stops here
# with the command that installs it.
missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need munged munge
need slurmctld slurmctld
need slurmd slurmd
need slurmrestd slurmrestd
need scontrol slurm-client
need sinfo slurm-client
if [ "$ACCOUNTING" = 1 ]; then
  need slurmdbd slurmdbd
  need mariadbd mariadb-server
  need mariadb-install-db mariadb-server
fi
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  echo "cluster.sh: missing packages: ${missing[*]}; install them with" >&2
  echo "  apt-get install -y slurmctld slurmd slurmrestd slurm-client munge slurmdbd mariadb-server" >&2
  exit 3
fi
[ "$(id -u)" = 0 ] || die "must run as root: slurmd starts jobs as other users"
id munge >/dev/null 2>&1 || die "user munge missing (the munge package creates it)"
id "$REST_USER" >/dev/null 2>&1 || die "user $REST_USER missing"

mkdir -p "$1"
DIR=$(cd "$1" && pwd)
# Every daemon runs as its own user and reads its files under DIR.
chmod 755 "$DIR"
mkdir -p "$DIR"/{etc,state,log,run,dev,rest,jobs,munge}
chmod 755 "$DIR"/{etc,log,run,dev}
# Batch jobs run as the REST user and write their output here.
chmod 1777 "$DIR/jobs" "$DIR/rest"

pids=()
stopped=0
stop() {
  [ "$stopped" = 1 ] && return
  stopped=1
  # Jobs first: their steps (slurmstepd and the job's processes) outlive
  # slurmd otherwise.
  if [ -n "${SLURM_CONF:-}" ] && scontrol ping >/dev/null 2>&1; then
    scancel --partition=gpu >/dev/null 2>&1 || true
    for _ in $(seq 1 100); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  # Last started first; slurmd before slurmctld so that no job is started
  # against a controller that is going away.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [ "${SLURM_REMOVE_DIR:-0}" = 1 ]; then rm -rf "$DIR"; fi
}
trap stop EXIT
trap 'exit 0' INT TERM

# started records a daemon's pid: stop() ends it.
started() { pids+=("$1"); }

# wait_for CONDITION WHAT [LOG]: up to 90 s (a loaded machine is slow),
# failing at once when the daemon started last has died.
wait_for() {
  local last=${pids[${#pids[@]}-1]:-}
  for _ in $(seq 1 900); do
    if eval "$1"; then return 0; fi
    if [ -n "$last" ] && ! kill -0 "$last" 2>/dev/null; then
      fail_with_log "$2 exited" "${3:-}"
    fi
    sleep 0.1
  done
  fail_with_log "$2 did not come up in 90 s" "${3:-}"
}

# fail_with_log WHY [LOG]: die with the tail of the daemon's log.
fail_with_log() {
  echo "cluster.sh: $1; logs in $DIR/log" >&2
  if [ -n "${2:-}" ] && [ -f "$2" ]; then tail -n 20 "$2" >&2; fi
  exit 1
}

# free_port VAR: sets VAR to a loopback port nobody listens on, below the
# kernel's ephemeral range (a port in it may be any outgoing connection's),
# and not handed out before. It assigns rather than prints: a $(free_port)
# would run in a subshell and forget the ports it handed out, so two
# daemons could get the same one.
used_ports=" "
read -r ephemeral_low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || ephemeral_low=32768
port_span=$((ephemeral_low - 10000))
free_port() {
  local -n port_out=$1
  local p
  while :; do
    p=$((10000 + (RANDOM * 32768 + RANDOM) % port_span))
    case $used_ports in *" $p "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      used_ports+="$p "
      port_out=$p
      return
    fi
  done
}

# --- munge: its own key and socket, so that nothing of the host's is used.
MUNGE_SOCKET=$DIR/munge/munge.sock
chown munge:munge "$DIR/munge"
chmod 711 "$DIR/munge"
head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
chown munge:munge "$DIR/munge/munge.key"
chmod 400 "$DIR/munge/munge.key"
runuser -u munge -- munged --foreground --force --socket="$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
  --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed" \
  --num-threads=4 >"$DIR/log/munged.out" 2>&1 &
started $!
wait_for '[ -S "$MUNGE_SOCKET" ]' munged "$DIR/munge/munged.log"

free_port CTLD_PORT
declare -a node_names=() node_gpus=() node_ports=() down_names=() down_gpus=() down_ports=()
for n in $NODES; do
  node_names+=("${n%%:*}")
  node_gpus+=("${n##*:}")
  free_port port
  node_ports+=("$port")
done
for n in $DOWN_NODES; do
  down_names+=("${n%%:*}")
  down_gpus+=("${n##*:}")
  free_port port
  down_ports+=("$port")
done

# --- accounting: MariaDB on a private port, slurmdbd in front of it.
ACCT_CONF=""
if [ "$ACCOUNTING" = 1 ]; then
  free_port DB_PORT
  free_port DBD_PORT
  mkdir -p "$DIR/db"
  chown mysql:mysql "$DIR/db"
  mariadb-install-db --no-defaults --datadir="$DIR/db" --user=mysql --skip-test-db \
    --auth-root-authentication-method=normal >"$DIR/log/mariadb-install.out" 2>&1 ||
    die "mariadb-install-db failed; see $DIR/log/mariadb-install.out"
  mariadbd --no-defaults --datadir="$DIR/db" --user=mysql --socket="$DIR/db/mysql.sock" \
    --bind-address=127.0.0.1 --port="$DB_PORT" --pid-file="$DIR/db/mariadbd.pid" \
    --log-error="$DIR/log/mariadb.log" --innodb-buffer-pool-size=32M \
    --innodb-flush-log-at-trx-commit=0 --skip-log-bin >"$DIR/log/mariadbd.out" 2>&1 &
  started $!
  wait_for '[ -S "$DIR/db/mysql.sock" ]' mariadbd "$DIR/log/mariadb.log"
  DB_PASS=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  mariadb --no-defaults -S "$DIR/db/mysql.sock" -u root -e "
    CREATE DATABASE slurm_acct_db;
    CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" ||
    die "cannot create the accounting database"
  # slurmdbd reads slurmdbd.conf beside slurm.conf (SLURM_CONF).
  cat >"$DIR/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DIR/etc/slurmdbd.conf"
  ACCT_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# For auth/munge this names the munge socket of slurmdbd connections.
AccountingStoragePass=$MUNGE_SOCKET
AccountingStoreFlags=job_comment
# QoS decide priority and preemption (PreemptType below).
PriorityWeightQOS=200000"
fi

# --- slurm.conf and gres.conf.
{
  cat <<EOF
# Written by deployments/slurm/cluster.sh for a cluster on loopback.
ClusterName=taskmesh
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
# No cgroups needed: processes are tracked by parentage.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
# Nodes may declare more CPUs and memory than this machine has.
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
GresTypes=gpu
SchedulerType=sched/backfill
ReturnToService=2
# A job past its time limit gets SIGTERM, then SIGKILL 5 s later.
KillWait=5
# Every job gets the partition's weight as its base priority, so that a
# nice value (a task's lower priority) moves it down the queue.
PriorityType=priority/multifactor
PriorityWeightPartition=100000
PreemptType=preempt/qos
PreemptMode=CANCEL
EOF
  if [ "$ACCOUNTING" = 1 ]; then echo "$ACCT_CONF"; else echo "AccountingStorageType=accounting_storage/none"; fi
  all=()
  for i in "${!node_names[@]}"; do
    gres=""
    if ((node_gpus[i] > 0)); then gres="Gres=gpu:${node_gpus[i]} "; fi
    echo "NodeName=${node_names[i]} NodeHostname=localhost NodeAddr=127.0.0.1 Port=${node_ports[i]} CPUs=$CPUS RealMemory=$MEMORY ${gres}State=UNKNOWN"
    all+=("${node_names[i]}")
  done
  for i in "${!down_names[@]}"; do
    gres=""
    if ((down_gpus[i] > 0)); then gres="Gres=gpu:${down_gpus[i]} "; fi
    echo "NodeName=${down_names[i]} NodeHostname=localhost NodeAddr=127.0.0.1 Port=${down_ports[i]} CPUs=$CPUS RealMemory=$MEMORY ${gres}State=UNKNOWN"
    all+=("${down_names[i]}")
  done
  echo "PartitionName=gpu Nodes=$(
    IFS=,
    echo "${all[*]}"
  ) Default=YES MaxTime=INFINITE State=UP PriorityJobFactor=1"
} >"$DIR/etc/slurm.conf"

# GPUs are GRES counts; slurmd wants a character device per GPU, so each
# is a node like /dev/null (no real device behind it).
{
  echo "AutoDetect=off"
  dev=0
  for spec in $NODES $DOWN_NODES; do
    name=${spec%%:*} gpus=${spec##*:}
    first=$dev
    for ((g = 0; g < gpus; g++)); do
      mknod "$DIR/dev/nvidia$dev" c 1 3 2>/dev/null || [ -c "$DIR/dev/nvidia$dev" ]
      dev=$((dev + 1))
    done
    if ((gpus > 0)); then echo "NodeName=$name Name=gpu File=$DIR/dev/nvidia[$first-$((dev - 1))]"; fi
  done
} >"$DIR/etc/gres.conf"

export SLURM_CONF=$DIR/etc/slurm.conf

if [ "$ACCOUNTING" = 1 ]; then
  slurmdbd -D >"$DIR/log/slurmdbd.out" 2>&1 &
  started $!
  wait_for '(exec 3<>"/dev/tcp/127.0.0.1/$DBD_PORT") 2>/dev/null' slurmdbd "$DIR/log/slurmdbd.log"
  sacctmgr -i add cluster taskmesh >/dev/null
  sacctmgr -i add account taskmesh Description=taskmesh Organization=taskmesh >/dev/null
  sacctmgr -i add user "root,$REST_USER" account=taskmesh >/dev/null
  # The REST user may change its jobs' priority and time limit.
  sacctmgr -i modify user "$REST_USER" set adminlevel=operator >/dev/null
  qos_names=()
  for q in $QOS; do
    sacctmgr -i add qos "${q%%:*}" priority="${q##*:}" >/dev/null
    qos_names+=("${q%%:*}")
  done
  if ((${#qos_names[@]})); then
    # A higher QoS preempts jobs of normal (PreemptType=preempt/qos).
    for q in "${qos_names[@]}"; do sacctmgr -i modify qos "$q" set preempt=normal >/dev/null; done
    sacctmgr -i modify user "root,$REST_USER" set qos+="$(
      IFS=,
      echo "${qos_names[*]}"
    )" >/dev/null
  fi
fi

slurmctld -D -f "$SLURM_CONF" >"$DIR/log/slurmctld.out" 2>&1 &
started $!
wait_for 'scontrol ping 2>/dev/null | grep -q UP' slurmctld "$DIR/log/slurmctld.log"
for n in "${node_names[@]}"; do
  mkdir -p "$DIR/spool/$n"
  slurmd -D -N "$n" -f "$SLURM_CONF" >"$DIR/log/slurmd-$n.out" 2>&1 &
  started $!
done
for n in "${node_names[@]}"; do
  wait_for '[ "$(sinfo -h -n '"$n"' -o %T 2>/dev/null)" = idle ]' "slurmd $n" "$DIR/log/slurmd-$n.log"
done

SOCKET=$DIR/rest/slurmrestd.sock
runuser -u "$REST_USER" -- env SLURM_CONF="$SLURM_CONF" slurmrestd -s openapi/v0.0.38 -a rest_auth/local "unix:$SOCKET" >"$DIR/log/slurmrestd.out" 2>&1 &
started $!
wait_for '[ -S "$SOCKET" ]' slurmrestd "$DIR/log/slurmrestd.out"

cat >"$DIR/cluster.env" <<EOF
SLURM_CONF=$SLURM_CONF
SLURMRESTD_SOCKET=$SOCKET
SLURM_REST_VERSION=v0.0.38
SLURM_REST_USER=$REST_USER
SLURM_PARTITION=gpu
SLURM_NODES=$NODES
SLURM_DOWN_NODES=$DOWN_NODES
SLURM_JOB_DIR=$DIR/jobs
SLURM_ACCOUNTING=$ACCOUNTING
SLURM_QOS=$QOS
EOF
echo ready
# Until stdin closes (the test process is gone) or a signal arrives.
while read -r _; do :; done
