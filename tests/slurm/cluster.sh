#!/usr/bin/env bash
# A private single-node Slurm cluster for gpurun's tests, with a GPU GRES on a machine without
# GPUs: four character devices made with mknod (Slurm rejects plain files) that match the NVML
# simulator's scenario. Everything lives under DIR, on its own ports; nothing system-wide is
# started or changed.
#
#   cluster.sh install             install Debian's Slurm and MUNGE if missing (root)
#   cluster.sh start DIR [PGID]    configure and start munged, slurmctld and slurmd in DIR;
#                                  PGID: ProctrackType=proctrack/pgid instead of linuxproc
#   cluster.sh start DIR NODES2    two nodes on this host, n1 and n2 (two slurmd on their own
#                                  ports and spool directories, four GPUs each); a TaskProlog
#                                  gives each node's tasks its own simulated GPUs:
#                                  NVML_SIM_SCENARIO=DIR/<node>.toml
#   cluster.sh start DIR SHARING   one node whose GPUs are also Slurm's MPS (mps:400, 100 a
#                                  GPU) and shards (shard:8, 2 a GPU)
#   cluster.sh stop DIR            stop them
#
# Prints "SKIP: reason" and exits 3 where the machine cannot run a cluster (not root, no mknod).
set -euo pipefail

command=${1:?usage: cluster.sh install|start DIR [PGID]|stop DIR}

skip() { echo "SKIP: $*"; exit 3; }

case "$command" in
install)
    [ "$(id -u)" = 0 ] || skip "installing Slurm needs root"
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null && command -v munged >/dev/null; then
        exit 0
    fi
    [ -z "${NO_INSTALL:-}" ] || [ "${NO_INSTALL}" = 0 ] || skip "Slurm and MUNGE are missing and NO_INSTALL is set"
    command -v apt-get >/dev/null || skip "no apt-get to install Slurm with"
    echo "cluster.sh: installing Debian's slurmctld slurmd slurm-client munge with apt-get (for tests/slurm.rs)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
    ;;
start)
    dir=${2:?cluster.sh start DIR}
    proctrack=linuxproc
    [ "${3:-}" = PGID ] && proctrack=pgid
    nodes=1
    [ "${3:-}" = NODES2 ] && nodes=2
    sharing=
    [ "${3:-}" = SHARING ] && sharing=1
    [ "$(id -u)" = 0 ] || skip "slurmd and mknod need root"
    command -v slurmctld >/dev/null || skip "Slurm is not installed (cluster.sh install)"
    mkdir -p "$dir"/{munge,state,spool,dev,log}
    # munged refuses a socket directory others cannot enter; clients connect as any user.
    chmod 0755 "$dir" "$dir/munge"
    for node in $( [ "$nodes" = 2 ] && echo n1 n2 || echo . ); do
        mkdir -p "$dir/dev/$node"
        for n in 0 1 2 3; do
            [ -c "$dir/dev/$node/nvidia$n" ] || mknod "$dir/dev/$node/nvidia$n" c 195 "$n" 2>/dev/null || skip "mknod is not permitted here"
        done
    done
    key=/etc/munge/munge.key
    if [ ! -s "$key" ]; then
        key="$dir/munge/munge.key"
        dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
        chmod 0400 "$key"
    fi
    munged --force --socket="$dir/munge/munge.socket" --key-file="$key" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
    host=$(hostname -s)
    # Ports from the directory name, so that parallel clusters do not collide.
    base=$(( 20000 + $(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 20000 ))
    cat > "$dir/slurm.conf" <<CONF
ClusterName=gpurun
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
ProctrackType=proctrack/$proctrack
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu${sharing:+,mps,shard}
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
KillWait=3
MessageTimeout=10
CONF
    if [ "$nodes" = 2 ]; then
        mkdir -p "$dir/spool/n1" "$dir/spool/n2"
        cat >> "$dir/slurm.conf" <<CONF
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + 2)) CPUs=8 Gres=gpu:4 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + 3)) CPUs=8 Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
TaskProlog=$dir/task_prolog.sh
CONF
        cat > "$dir/gres.conf" <<CONF
AutoDetect=off
NodeName=n1 Name=gpu File=$dir/dev/n1/nvidia[0-3]
NodeName=n2 Name=gpu File=$dir/dev/n2/nvidia[0-3]
CONF
        # Each node's tasks see that node's simulated GPUs (a TaskProlog's "export" lines
        # are set in the task's environment).
        printf '#!/bin/sh\necho "export NVML_SIM_SCENARIO=%s/$SLURMD_NODENAME.toml"\n' "$dir" > "$dir/task_prolog.sh"
        chmod 0755 "$dir/task_prolog.sh"
        names="n1 n2"
    else
        mkdir -p "$dir/spool/$host"
        cat >> "$dir/slurm.conf" <<CONF
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 Gres=gpu:4${sharing:+,mps:400,shard:8} State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
        cat > "$dir/gres.conf" <<CONF
AutoDetect=off
Name=gpu File=$dir/dev/nvidia[0-3]
CONF
        if [ -n "$sharing" ]; then
            printf 'Name=mps Count=400\nName=shard Count=8\n' >> "$dir/gres.conf"
        fi
        names=$host
    fi
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -c -f "$SLURM_CONF"
    for name in $names; do
        slurmd -f "$SLURM_CONF" -N "$name"
    done
    for _ in $(seq 1 100); do
        states=$(sinfo -h -N -o %t 2>/dev/null | sort -u | tr '\n' ' ' || true)
        up=$(sinfo -h -N -o %t 2>/dev/null | grep -cE '^(idle|mix|alloc)' || true)
        if [ "$up" = "$nodes" ]; then echo "started: SLURM_CONF=$SLURM_CONF"; exit 0; fi
        sleep 0.1
    done
    echo "node states: $states" >&2
    echo "the cluster did not come up; logs in $dir/log" >&2
    tail -n 20 "$dir"/log/*.log >&2 || true
    exit 1
    ;;
stop)
    dir=${2:?cluster.sh stop DIR}
    export SLURM_CONF="$dir/slurm.conf"
    # Jobs first, so that their step daemons end them and exit.
    if squeue -h -o %i >/dev/null 2>&1; then
        squeue -h -o %i | xargs -r scancel 2>/dev/null || true
        for _ in $(seq 1 50); do
            [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
            sleep 0.1
        done
    fi
    for pidfile in "$dir"/slurmd.*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    sleep 0.5
    # Whatever of this cluster is left (a daemon slow to stop, a step daemon that outlived its
    # slurmd, the jobs' processes) holds a file under DIR or names its configuration.
    for proc in /proc/[0-9]*; do
        pid=${proc#/proc/}
        [ "$pid" = $$ ] && continue
        hit=
        # (A process may end between the glob and the read: the redirection's error is muted too.)
        { tr '\0' ' ' < "$proc/cmdline"; } 2>/dev/null | grep -qF "$dir/" && hit=1
        if [ -z "$hit" ]; then
            for fd in "$proc"/fd/*; do
                case "$(readlink "$fd" 2>/dev/null)" in "$dir"/*) hit=1; break ;; esac
            done
        fi
        [ -n "$hit" ] && kill -9 "$pid" 2>/dev/null || true
    done
    ;;
*)
    echo "usage: cluster.sh install|start DIR [PGID]|stop DIR" >&2
    exit 2
    ;;
esac
