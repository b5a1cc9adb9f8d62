#!/bin/sh
# The noise benchmark (issue #42, "exclusive means quiet"): what else runs
# on an exclusive CPU, and what a latency-sensitive workload feels of it,
# in five set-ups:
#   1-taskset       `taskset -c X` alone, no daemon
#   2-kubelet       pinctld, unthrottle_exclusive = "none", irq_affinity = false
#                   (what the kubelet's static CPU manager gives)
#   3-defaults      pinctld as shipped
#   4-irq-unthrottle  pinctld, irq_affinity = true, unthrottle_exclusive = "all"
#   5-housekeeping  pinctld, housekeeping = true, irq_affinity = true
#
# Each set-up: a Burstable pod's container (kubepods/burstable/pod<uid>/<id>)
# runs stress-ng (a CPU hog per online CPU, int64 arithmetic, which qemu's
# TCG CPU runs too, and a disk writer) on the shared CPUs; a
# Guaranteed pod's container (kubepods/pod<uid>/<id>, 1 CPU of quota) gets
# the exclusive CPU X from pinctld and runs rt-tests' oslat on X alone;
# `pinctl verify --noise` traces X over the same window (its per-minute
# switches by class), and oslat's histogram gives the interruptions of 10 µs
# and more and of 32 µs and more (oslat rounds up to the µs) and its
# maximum. Set-up 1 measures with `--cpus X --pid OSLAT`, no daemon.
#
# A script, not a Rust bench: it only drives other programs (pinctld,
# pinctl, oslat, stress-ng) and cgroupfs, and the same file runs in the VM
# test bed's busybox guest (tests/vm/opt/noise.sh), where a Rust bench
# would need a static build of its own. POSIX sh and busybox tools only.
#
# Run as root on the machine's own cgroupfs (v1 or v2):
#   apt-get install -y rt-tests stress-ng
#   cargo build --release --bins
#   sudo PINCTL_REAL_CGROUP=1 benches/noise.sh
#   benches/plot.py --add --last target/bench/noise.csv
# Without PINCTL_REAL_CGROUP=1, not root, or without oslat or stress-ng it
# says why and exits 0.
#
# Set-ups 4 and 5 change system-wide kernel settings (4: device interrupts
# and default_smp_affinity; 5: also the workqueue masks, the kernel
# threads' affinity, RPS/XPS): they run only with PINCTL_NOISE_SYSTEM=1,
# which only the VM bed sets. Whatever ran, the interrupts' affinity and
# default_smp_affinity are checked at the end and written back if the
# daemon did not put them back. tracefs is mounted if it is not, and
# unmounted at the end.
#
# It makes its own cgroups below pinctl-test-noise-<pid> (removed at the
# end, with every process it started) and its daemon's configuration, state
# file and socket in a temporary directory. Each set-up appends a row to
# $PINCTL_BENCH_CSV_DIR/noise.csv (default $CARGO_TARGET_DIR/bench, else
# target/bench), the columns of benches/support/record.rs first, and keeps
# verify --noise's whole report (every source) in noise/DATE-SETUP.json
# beside it.
#
# Environment:
#   PINCTL_NOISE_DURATION=20     seconds measured per set-up
#   PINCTL_NOISE_SETUPS=1,2,3,4,5  the set-ups to run, in order
#   PINCTL_NOISE_RUNS=1          rounds of every set-up
#   PINCTL_NOISE_SYSTEM=1        allow set-ups 4 and 5 (the VM bed only)
#   PINCTL_BENCH_BIN_DIR=DIR     pinctld and pinctl (default the release build)
#   PINCTL_BENCH_MACHINE=TEXT    the machine column (default: CPU model, host name)
#   PINCTL_CGROUP_ROOT=/sys/fs/cgroup
set -u

say() { printf 'noise: %s\n' "$*"; }
skip() {
    say "skipped: $*"
    exit 0
}

HERE=$(cd "$(dirname "$0")" && pwd)
TARGET=${CARGO_TARGET_DIR:-$HERE/../target}
BIN=${PINCTL_BENCH_BIN_DIR:-$TARGET/release}
CSV_DIR=${PINCTL_BENCH_CSV_DIR:-$TARGET/bench}
DUR=${PINCTL_NOISE_DURATION:-20}
SETUPS=${PINCTL_NOISE_SETUPS:-1,2,3,4,5}
RUNS=${PINCTL_NOISE_RUNS:-1}
CG=${PINCTL_CGROUP_ROOT:-/sys/fs/cgroup}

[ "${PINCTL_REAL_CGROUP:-}" = 1 ] || skip "set PINCTL_REAL_CGROUP=1 to run it on this machine's cgroupfs"
[ "$(id -u)" = 0 ] || skip "needs root"
for p in oslat stress-ng; do
    command -v "$p" >/dev/null 2>&1 || skip "no $p (apt-get install -y rt-tests stress-ng)"
done
for b in pinctld pinctl; do
    [ -x "$BIN/$b" ] || skip "no $BIN/$b (cargo build --release --bins)"
done

if [ -f "$CG/cgroup.controllers" ]; then
    HIER=v2
    CS=$CG
    CPU=$CG
    EFF=cpuset.cpus.effective
elif [ -d "$CG/cpuset" ]; then
    HIER=v1
    CS=$CG/cpuset
    CPU=$CG/cpu
    [ -d "$CPU" ] || CPU=$CG/cpu,cpuacct
    EFF=cpuset.effective_cpus
else
    skip "no cpuset hierarchy at $CG"
fi

ONLINE=$(cat /sys/devices/system/cpu/online)
# The highest online CPU is the exclusive one (the daemon hands out what
# is not reserved); CPU 0 is reserved.
LAST=$(echo "$ONLINE" | tr ',' '\n' | sed 's/.*-//' | sort -n | tail -n 1)
[ "$LAST" -ge 1 ] || skip "needs 2 online CPUs or more (has $ONLINE)"
RESERVED=0
NCPUS=$(grep -c '^processor' /proc/cpuinfo)

TOP=pinctl-test-noise-$$
TMP=$(mktemp -d /tmp/pinctl-noise.XXXXXX)
KIDS=""
DPID=""
TRACEFS=/sys/kernel/tracing
MOUNTED=""

# The IRQs' affinity before anything ran, to check it is back at the end.
irq_snapshot() {
    for f in /proc/irq/default_smp_affinity /proc/irq/[0-9]*/smp_affinity_list; do
        printf '%s %s\n' "$f" "$(cat "$f" 2>/dev/null)"
    done
}
irq_snapshot >"$TMP/irqs.before"

rm_tree() {
    [ -d "$1" ] || return 0
    find "$1" -depth -type d | while read -r d; do
        for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        i=0
        while [ -n "$(cat "$d/cgroup.procs" 2>/dev/null)" ] && [ $i -lt 50 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        rmdir "$d" 2>/dev/null || say "cannot remove $d"
    done
}

stop_daemon() {
    [ -n "$DPID" ] || return 0
    kill -TERM "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
    DPID=""
}

cleanup() {
    for p in $KIDS; do kill -9 "$p" 2>/dev/null; done
    stop_daemon
    rm_tree "$CS/$TOP"
    [ "$HIER" = v1 ] && rm_tree "$CPU/$TOP"
    # Any IRQ not as it was (the daemon puts them back when it stops).
    irq_snapshot >"$TMP/irqs.after"
    if ! cmp -s "$TMP/irqs.before" "$TMP/irqs.after"; then
        say "IRQ affinity not as before: writing back $(diff "$TMP/irqs.before" "$TMP/irqs.after" | grep -c '^<') of them"
        while read -r f v; do
            [ -n "$v" ] && [ "$(cat "$f" 2>/dev/null)" != "$v" ] && echo "$v" >"$f" 2>/dev/null
        done <"$TMP/irqs.before"
    fi
    [ -n "$MOUNTED" ] && umount "$TRACEFS" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if [ ! -d "$TRACEFS/instances" ]; then
    mount -t tracefs nodev "$TRACEFS" || skip "cannot mount tracefs at $TRACEFS"
    MOUNTED=1
fi

# mk REL [empty]: a cgroup as runc makes it (v1: in the cpuset and the cpu
# hierarchy, the cpuset one given its parent's cpus and mems).
mk() {
    if [ "$HIER" = v2 ]; then
        parent=$(dirname "$CS/$1")
        grep -qw cpuset "$parent/cgroup.subtree_control" && grep -qw cpu "$parent/cgroup.subtree_control" ||
            echo "+cpu +cpuset" >"$parent/cgroup.subtree_control"
        mkdir "$CS/$1"
    else
        mkdir "$CPU/$1" "$CS/$1"
        if [ "${2:-}" != empty ]; then
            cat "$(dirname "$CS/$1")/cpuset.mems" >"$CS/$1/cpuset.mems"
            cat "$(dirname "$CS/$1")/cpuset.cpus" >"$CS/$1/cpuset.cpus"
        fi
    fi
}
quota() {
    if [ "$HIER" = v2 ]; then
        echo "100000 100000" >"$CPU/$1/cpu.max"
    else
        echo 100000 >"$CPU/$1/cpu.cfs_period_us"
        echo 100000 >"$CPU/$1/cpu.cfs_quota_us"
    fi
}
# in REL CMD...: runs CMD in cgroup REL, in the background; its pid in $!.
in_cg() {
    _rel=$1
    shift
    if [ "$HIER" = v2 ]; then
        sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CS/$_rel" "$@" &
    else
        sh -c 'echo $$ > "$0/cgroup.procs" && echo $$ > "$1/cgroup.procs" && shift && exec "$@"' \
            "$CS/$_rel" "$CPU/$_rel" "$@" &
    fi
}
wait_for() {
    _n=$(($1 * 10))
    shift
    while [ $_n -gt 0 ]; do
        "$@" && return 0
        sleep 0.1
        _n=$((_n - 1))
    done
    return 1
}
single_cpu() { _c=$(cat "$CS/$1/cpuset.cpus" 2>/dev/null) && [ -n "$_c" ] && echo "$_c" | grep -qv '[-,]'; }
lacks() { ! cat "$CS/$1/$EFF" 2>/dev/null | tr ',' '\n' | awk -v x="$2" -F- '{ hi = ($2 == "") ? $1 : $2 } $1 <= x && x <= hi { f = 1 } END { exit !f }'; }

model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1 |
    sed 's/ @ .*//; s/(R)//g; s/(TM)//g; s/ CPU\b//; s/ Processor\b//; s/ [0-9]*-Core\b//; s/  */ /g')
MACHINE=${PINCTL_BENCH_MACHINE:-"$model, host $(hostname)"}
KERNEL=$(cat /proc/sys/kernel/osrelease)
# Every row of a run has its start as date, as benches/support/record.rs
# writes it (`benches/plot.py --add --last` keeps a file's newest run).
RUN_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)

COLUMNS="date,machine,kernel,cpus,setup,hierarchy,duration_s,neighbour,movable,per_cpu,interrupt,softirq,lost_events,oslat_s,oslat_10us,oslat_32us,oslat_max_us"
mkdir -p "$CSV_DIR"
OUT_CSV=$CSV_DIR/noise.csv
if [ ! -s "$OUT_CSV" ]; then
    echo "$COLUMNS" >"$OUT_CSV"
elif [ "$(head -n 1 "$OUT_CSV")" != "$COLUMNS" ]; then
    say "$OUT_CSV has other columns: move it away"
    exit 1
fi
csv_cell() { printf '"%s"' "$(printf '%s' "$1" | sed 's/"/""/g')"; }

# Makes the top cgroup and the kubepods skeleton.
skeleton() {
    if [ "$HIER" = v2 ]; then
        grep -qw cpuset "$CG/cgroup.subtree_control" && grep -qw cpu "$CG/cgroup.subtree_control" ||
            echo "+cpuset +cpu" >"$CG/cgroup.subtree_control"
        mkdir "$CS/$TOP"
    else
        mkdir "$CPU/$TOP" "$CS/$TOP"
        echo "$ONLINE" >"$CS/$TOP/cpuset.cpus"
        cat "$CS/cpuset.mems" >"$CS/$TOP/cpuset.mems"
    fi
    for rel in kubepods kubepods/burstable kubepods/besteffort system.slice; do
        mk "$TOP/$rel"
    done
}

config() {
    mkdir -p "$TMP/state" "$TMP/bundles"
    cat >"$TMP/pinctld.toml" <<EOF
# Written by benches/noise.sh, set-up $1.
cgroup_root = "$CG"
sysfs_root = "/sys"
proc_root = "/proc"
state_file = "$TMP/state/state.json"
socket = "$TMP/pinctl.sock"
reserved_cpus = "$RESERVED"
reconcile_interval = "1h"
log_level = "info"
managed = ["$TOP/kubepods"]
shared_cgroups = ["$TOP/system.slice"]
bundle_dirs = ["$TMP/bundles"]
housekeeping_originals = "$TMP/housekeeping.json"
power_originals = "$TMP/power.json"
EOF
    case $1 in
        2) printf 'unthrottle_exclusive = "none"\nirq_affinity = false\n' ;;
        3) ;;
        4) printf 'unthrottle_exclusive = "all"\nirq_affinity = true\n' ;;
        5) printf 'housekeeping = true\nirq_affinity = true\n' ;;
    esac >>"$TMP/pinctld.toml"
}

pinctl() { taskset -c "$RESERVED" "$BIN/pinctl" "$@"; }
daemon_up() { pinctl status --config "$TMP/pinctld.toml" >/dev/null 2>&1; }

# one SETUP: runs one set-up and appends its row.
one() {
    s=$1
    case $s in
        1) name=1-taskset ;;
        2) name=2-kubelet ;;
        3) name=3-defaults ;;
        4) name=4-irq-unthrottle ;;
        5) name=5-housekeeping ;;
        *)
            say "no set-up $s"
            return 1
            ;;
    esac
    if [ "$s" -ge 4 ] && [ "${PINCTL_NOISE_SYSTEM:-}" != 1 ]; then
        say "$name: skipped: it changes system-wide kernel settings (interrupts$([ "$s" = 5 ] && echo ', workqueues, kernel threads')); it runs in the VM bed only (PINCTL_NOISE_SYSTEM=1)"
        return 0
    fi
    skeleton
    X=$LAST
    if [ "$s" != 1 ]; then
        config "$s"
        taskset -c "$RESERVED" "$BIN/pinctld" --config "$TMP/pinctld.toml" </dev/null >>"$TMP/pinctld.log" 2>&1 &
        DPID=$!
        wait_for 30 daemon_up || {
            say "$name: pinctld did not come up: $(tail -n 5 "$TMP/pinctld.log")"
            return 1
        }
    fi
    # The neighbour: a Burstable pod's container.
    b=$TOP/kubepods/burstable/pod0000beef-0000-4000-8000-00000000000b
    mk "$b"
    mk "$b/b0b0b0b0"
    in_cg "$b/b0b0b0b0" stress-ng --cpu "$NCPUS" --cpu-method int64 --hdd 1 --hdd-bytes 64M \
        --temp-path "$TMP" --timeout $((DUR + 30))s --quiet
    KIDS="$KIDS $!"
    if [ "$s" = 1 ]; then
        taskset -c "$X" oslat -c "$X" -C "$X" -D $((DUR + 4)) -b 32 >"$TMP/oslat.out" 2>&1 &
        OSLAT=$!
    else
        g=$TOP/kubepods/pod0000beef-0000-4000-8000-00000000000a
        mk "$g" empty
        quota "$g"
        mk "$g/a0a0a0a0" empty
        quota "$g/a0a0a0a0"
        if ! wait_for 30 single_cpu "$g/a0a0a0a0"; then
            say "$name: the Guaranteed container was not pinned (cpuset.cpus $(cat "$CS/$g/a0a0a0a0/cpuset.cpus"))"
            return 1
        fi
        X=$(cat "$CS/$g/a0a0a0a0/cpuset.cpus")
        wait_for 30 lacks "$b/b0b0b0b0" "$X" || say "$name: the neighbour still has CPU $X"
        in_cg "$g/a0a0a0a0" oslat -c "$X" -C "$X" -D $((DUR + 4)) -b 32 >"$TMP/oslat.out" 2>&1
        OSLAT=$!
    fi
    KIDS="$KIDS $OSLAT"
    # oslat's preheat, then the same window.
    sleep 2
    if [ "$s" = 1 ]; then
        pinctl verify --noise "${DUR}s" --json --cpus "$X" --pid "$OSLAT" >"$TMP/noise.json" 2>"$TMP/noise.err"
    else
        pinctl verify --noise "${DUR}s" --json --config "$TMP/pinctld.toml" >"$TMP/noise.json" 2>"$TMP/noise.err"
    fi
    rc=$?
    wait "$OSLAT"
    orc=$?
    j=$(tr -d '\n ' <"$TMP/noise.json")
    pm=$(echo "$j" | sed -n 's/.*"per_minute":{\([^}]*\)}.*/\1/p')
    key() { echo "$2" | tr ',{' '\n\n' | sed -n "s/^\"$1\":\\(.*\\)/\\1/p" | head -n 1; }
    if [ -z "$pm" ] || [ "$rc" -gt 1 ]; then
        say "$name: verify --noise failed (exit $rc): $(tail -c 400 "$TMP/noise.err")"
        return 1
    fi
    top=$(echo "$j" | sed 's/"sources":.*//')
    cells=""
    for k in neighbour movable per_cpu interrupt softirq; do cells="$cells,$(key "$k" "$pm")"; done
    # The bucket's label without its leading zeros: busybox awk reads 032
    # as octal.
    o=$(awk '$2 == "(us):" && $1 ~ /^[0-9]+$/ { x = $1; sub(/^0+/, "", x); b = x + 0; n = $3 + 0; if (b >= 10) a += n; if (b >= 32) c += n }
        /Maximum:/ { m = $2 } /Duration:/ { d = $2 }
        END { printf "%s,%d,%d,%s", d, a, c, m }' "$TMP/oslat.out")
    # oslat's own summary, for the log: the last buckets and the extremes.
    sed -n '/ 03[0-2] (us)/p; /Maximum:/p; /Duration:/p' "$TMP/oslat.out" | sed 's/^ */oslat: /'
    if [ "$orc" != 0 ] || [ "${o%%,*}" = "" ]; then
        say "$name: oslat failed (exit $orc): $(tail -c 400 "$TMP/oslat.out")"
        return 1
    fi
    row="$RUN_DATE,$(csv_cell "$MACHINE"),$KERNEL,$NCPUS,$name,$HIER,$(key duration_s "$top")$cells,$(key lost_events "$top"),$o"
    echo "$row" >>"$OUT_CSV"
    say "$name on CPU $X: $(echo "$pm" | tr -d '"'); oslat (s, >=10us, >=32us, max us): $o"
    # The movable sources, for the reader.
    movable=$(echo "$j" | grep -o '"class":"movable","name":"[^"]*"' | sed 's/.*"name":"//; s/"$//' | sort -u | head -n 12 | tr '\n' ' ')
    [ -n "$movable" ] && say "$name: movable: $movable"
    # The whole report, for who wants the sources.
    mkdir -p "$CSV_DIR/noise"
    cp "$TMP/noise.json" "$CSV_DIR/noise/$(date -u +%Y%m%dT%H%M%SZ)-$name.json"
    for p in $KIDS; do kill -9 "$p" 2>/dev/null; done
    for p in $KIDS; do wait "$p" 2>/dev/null; done
    KIDS=""
    # The pods go first, as on a node: the daemon releases the CPU (and
    # puts back what it moved for it) before it stops.
    for d in "$CS/$TOP"/kubepods/pod* "$CS/$TOP"/kubepods/burstable/pod*; do
        rm_tree "$d"
        [ "$HIER" = v1 ] && rm_tree "$CPU/${d#"$CS/"}"
    done
    sleep 1
    stop_daemon
    rm_tree "$CS/$TOP"
    [ "$HIER" = v1 ] && rm_tree "$CPU/$TOP"
    return 0
}

say "$MACHINE, kernel $KERNEL, cgroup $HIER, CPUs $ONLINE; $DUR s per set-up ($SETUPS), $RUNS round(s)"
failed=0
r=0
while [ $r -lt "$RUNS" ]; do
    for s in $(echo "$SETUPS" | tr ',' ' '); do
        if ! one "$s"; then
            failed=$((failed + 1))
            for p in $KIDS; do kill -9 "$p" 2>/dev/null; done
            KIDS=""
            stop_daemon
            rm_tree "$CS/$TOP"
            [ "$HIER" = v1 ] && rm_tree "$CPU/$TOP"
        fi
    done
    r=$((r + 1))
done
say "rows appended to $OUT_CSV"
[ $failed = 0 ]
