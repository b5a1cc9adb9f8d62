# Shared shell library of the VM test bed, sourced by tests/vm/init and by
# every scenario (busybox ash). It knows the guest's cgroup hierarchy (v1 or
# v2), makes cgroups the way the kubelet and runc do, runs real `sleep`
# processes in them, drives pinctld, and reports checks.
#
# Every check reads the kernel's own view: `cpuset.cpus.effective` (v2) or
# `cpuset.effective_cpus` (v1) of a cgroup, and `Cpus_allowed_list` of a
# process in /proc. Nothing here trusts what the daemon says it did.
#
# Output, one line per check, on the console:
#   PASS <hier>/<topo>/<scenario>/<check>: <what was seen>
#   FAIL <hier>/<topo>/<scenario>/<check>: expected <X> got <Y>
# The host driver (tests/vm/run) collects these lines.

# --- set by init ---------------------------------------------------------------
# HIER  v1 | v2
# TOPO  the topology's name (1s4c2t, ...)
# SCEN  the running scenario's name
CGROOT=/sys/fs/cgroup
if [ "$HIER" = v1 ]; then
    CS=$CGROOT/cpuset
    CPU=$CGROOT/cpu
    EFF=cpuset.effective_cpus
else
    CS=$CGROOT
    CPU=$CGROOT
    EFF=cpuset.cpus.effective
fi
CONFIG=/etc/pinctl/pinctld.toml
STATE=/var/lib/pinctl/state.json
LOG=/var/log/pinctld.log
NOTES=/run/pinctl-notes
NOTIFY_SOCKET_PATH=/run/pinctl-notify.sock
FAILS=/run/fails
# How long the daemon may take to act, in seconds. Software emulation is
# slow; the daemon reacts in milliseconds on real hardware.
WAIT=${WAIT:-15}

# --- CPU lists -------------------------------------------------------------------
# cl OP A [B]: set arithmetic on CPU lists in the kernel's format ("0-3,8").
#   norm A, union A B, minus A B, inter A B, count A, list A (space-separated)
cl() {
    awk -v op="$1" -v a="$2" -v b="$3" '
    function load(s, arr,    n, parts, i, r, c) {
        n = split(s, parts, ",")
        for (i = 1; i <= n; i++) {
            gsub(/[ \t\r\n]/, "", parts[i])
            if (parts[i] == "") continue
            if (split(parts[i], r, "-") == 2) { for (c = r[1] + 0; c <= r[2] + 0; c++) arr[c] = 1 }
            else arr[parts[i] + 0] = 1
        }
    }
    function out(arr,    c, s, start, prev) {
        s = ""; start = -1
        for (c = 0; c <= 1025; c++) {
            if (c in arr) { if (start < 0) start = c; prev = c }
            else if (start >= 0) { s = s (s == "" ? "" : ",") (start == prev ? start : start "-" prev); start = -1 }
        }
        return s
    }
    BEGIN {
        load(a, A); load(b, B)
        if (op == "union") { for (c in B) A[c] = 1; print out(A) }
        else if (op == "minus") { for (c in B) delete A[c]; print out(A) }
        else if (op == "inter") { for (c in A) if (!(c in B)) delete A[c]; print out(A) }
        else if (op == "count") { n = 0; for (c in A) n++; print n }
        else if (op == "norm") print out(A)
        else if (op == "list") { s = ""; for (c = 0; c <= 1025; c++) if (c in A) s = s (s == "" ? "" : " ") c; print s }
    }'
}

show() { [ -n "$1" ] && echo "$1" || echo "(empty)"; }

# --- the kernel's view -------------------------------------------------------------
online() { cat /sys/devices/system/cpu/online; }
# eff REL: the CPUs the kernel gives cgroup REL (its effective set).
eff() { cat "$CS/${1:+$1/}$EFF" 2>/dev/null; }
# cpus REL: what was asked for (cpuset.cpus).
cpus() { cat "$CS/${1:+$1/}cpuset.cpus" 2>/dev/null; }
# mems REL: the memory nodes the kernel gives cgroup REL.
mems() {
    if [ "$HIER" = v1 ]; then cat "$CS/$1/cpuset.effective_mems"; else cat "$CS/$1/cpuset.mems.effective"; fi 2>/dev/null
}
# mems_allowed PID: Mems_allowed_list of a process.
mems_allowed() { awk '/^Mems_allowed_list:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
# nodes_of SET: the NUMA nodes of the CPUs of SET, as a list.
nodes_of() { awk -v set="$1" 'BEGIN { n = split(set, p, ","); for (i = 1; i <= n; i++) { if (split(p[i], r, "-") == 2) { for (c = r[1]; c <= r[2]; c++) S[c] = 1 } else S[p[i] + 0] = 1 } } ($1 in S) { printf "%s,", $2 }' "$TOPO_CACHE"; }
# allowed PID: Cpus_allowed_list of a process.
allowed() { awk '/^Cpus_allowed_list:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
# The CPU topology, read once at boot while every CPU is online (/init writes
# $TOPO_CACHE): "cpu node socket siblings" per line. Hot-plug does not move a
# CPU to another core, node or socket, and a core with a thread offline is not
# a whole core, so the boot-time sibling lists are the ones to check against.
TOPO_CACHE=/run/cpu-topo
topo_cache() {
    for c in $(cl list "$(cat /sys/devices/system/cpu/online)"); do
        _node=0
        for n in /sys/devices/system/node/node*; do
            [ -n "$(cl inter "$(cat "$n/cpulist")" "$c")" ] && { _node=${n##*node}; break; }
        done
        echo "$c $_node $(cat "/sys/devices/system/cpu/cpu$c/topology/physical_package_id") $(cat "/sys/devices/system/cpu/cpu$c/topology/thread_siblings_list")"
    done > "$TOPO_CACHE"
}
siblings() { awk -v c="$1" '$1 == c { print $4 }' "$TOPO_CACHE"; }
socket_of() { awk -v c="$1" '$1 == c { print $3 }' "$TOPO_CACHE"; }
node_of() { awk -v c="$1" '$1 == c { print $2 }' "$TOPO_CACHE"; }

# --- reporting ---------------------------------------------------------------------
now_ms() { awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime; }
# Each PASS and FAIL line ends with the guest's uptime (" @123.4s"), read
# without a fork: the log then shows where a boot's time goes.
pass() { read -r _up _ </proc/uptime; echo "PASS $HIER/$TOPO/$SCEN/$1: $2 @${_up%?}s"; }
fail() { read -r _up _ </proc/uptime; echo "FAIL $HIER/$TOPO/$SCEN/$1: $2 @${_up%?}s"; echo "$SCEN/$1" >> "$FAILS"; }
note() { echo "---- $HIER/$TOPO/$SCEN: $*"; echo "----- scenario $SCEN: $*" >> "$LOG"; }

# wait_for SECONDS CMD...: runs CMD every 0.2 s until it succeeds; 1 on timeout.
wait_for() {
    _end=$(( $(now_ms) + $1 * 1000 )); shift
    while :; do
        "$@" && return 0
        [ "$(now_ms)" -ge "$_end" ] && return 1
        sleep 0.2
    done
}

_is_set() { [ "$(cl norm "$($1 "$2")")" = "$3" ]; }
# expect NAME WANT eff|allowed|cpus ARG: waits until the kernel shows WANT.
expect() {
    _want=$(cl norm "$2")
    if wait_for "$WAIT" _is_set "$3" "$4" "$_want"; then
        pass "$1" "$3 $4 = $(show "$_want")"
    else
        fail "$1" "$3 $4: expected $(show "$_want") got $(show "$($3 "$4")")"
    fi
}

_count_is() { [ "$(cl count "$(eff "$1")")" = "$2" ]; }
# pin NAME REL N: waits until the kernel gives cgroup REL exactly N CPUs (its
# effective set) and sets GOT to them.
pin() {
    if wait_for "$WAIT" _count_is "$2" "$3"; then
        GOT=$(eff "$2")
        pass "$1" "eff $2 = $GOT ($3 CPUs)"
    else
        GOT=$(eff "$2")
        fail "$1" "eff $2: expected $3 exclusive CPUs got $(show "$GOT")"
    fi
}

# expect_stays NAME WANT eff|allowed ARG SECONDS [EVERY]: the kernel shows
# WANT now and for SECONDS more, read every EVERY seconds (default 0.2)
# (nothing moves a pinned workload).
expect_stays() {
    _want=$(cl norm "$2"); _end=$(( $(now_ms) + $5 * 1000 ))
    while :; do
        _got=$(cl norm "$($3 "$4")")
        if [ "$_got" != "$_want" ]; then
            fail "$1" "$3 $4: expected $(show "$_want") to stay, got $(show "$_got")"; return 1
        fi
        [ "$(now_ms)" -ge "$_end" ] && break
        sleep "${6:-0.2}"
    done
    pass "$1" "$3 $4 stays $(show "$_want")"
}

# check NAME DESCRIPTION CMD...: one check of a condition, no waiting.
check() {
    _n=$1; _d=$2; shift 2
    if _why=$("$@" 2>&1); then pass "$_n" "$_d${_why:+ ($_why)}"; else fail "$_n" "$_d: $_why"; fi
}

# --- placement rules (used with `check`) ------------------------------------------------
# aligned SET N [FREE]: N CPUs, none reserved (CPU 0), whole cores when N is a
# multiple of the threads per core (else at most one CPU without its sibling),
# on the fewest NUMA nodes and sockets that could hold N out of FREE ∪ SET
# (whole free cores only, for a whole-core request). FREE defaults to online
# minus CPU 0 minus the other exclusive sets the caller puts in OTHERS: what
# was free when the daemon chose SET. One awk over the boot-time topology.
aligned() {
    _free=${3:-$(cl minus "$(cl minus "$(online)" 0)" "$OTHERS")}
    awk -v set="$1" -v n="$2" -v free="$_free" '
    function load(s, arr,    k, parts, i, r, c) {
        k = split(s, parts, ",")
        for (i = 1; i <= k; i++) {
            if (parts[i] == "") continue
            if (split(parts[i], r, "-") == 2) { for (c = r[1] + 0; c <= r[2] + 0; c++) arr[c] = 1 }
            else arr[parts[i] + 0] = 1
        }
    }
    function clear(arr,    k) { for (k in arr) delete arr[k] }
    # The fewest domains (dom[cpu]) whose CPUs in F hold n.
    function fewest(dom,    cap, d, c, k, best, bd, sum, used) {
        for (c in F) cap[dom[c]]++
        sum = 0; k = 0
        while (sum < n) {
            best = -1
            for (d in cap) if (!(d in used) && cap[d] > best) { best = cap[d]; bd = d }
            if (best < 0) break
            used[bd] = 1; sum += best; k++
        }
        return k
    }
    { node[$1] = $2; sock[$1] = $3; sib[$1] = $4 }
    END {
        load(set, S); load(free, F0)
        for (c in S) F0[c] = 1
        cnt = 0; for (c in S) cnt++
        err = ""
        if (cnt != n) err = err "; " cnt " CPUs, not " n
        if (0 in S) err = err "; holds reserved CPU 0"
        clear(T); load(sib[0], T); tpc = 0; for (t in T) tpc++
        partial = 0
        for (c in S) { clear(T); load(sib[c], T); for (t in T) if (!(t in S)) { partial++; break } }
        whole = (n % tpc == 0)
        if (whole && partial > 0) err = err "; not whole cores (" partial " CPUs without their sibling)"
        if (!whole && partial > 1) err = err "; " partial " CPUs without their sibling"
        for (c in F0) {
            ok = 1
            if (whole) { clear(T); load(sib[c], T); for (t in T) if (!(t in F0)) ok = 0 }
            if (ok) F[c] = 1
        }
        nn = 0; ns = 0
        for (c in S) { if (!(node[c] in NN)) { NN[node[c]] = 1; nn++; nl = nl " " node[c] } if (!(sock[c] in NS)) { NS[sock[c]] = 1; ns++ } }
        nn_max = fewest(node); ns_max = fewest(sock)
        if (nn > nn_max) err = err "; spans " nn " NUMA nodes (" substr(nl, 2) "), " nn_max " would do"
        if (ns > ns_max) err = err "; spans " ns " sockets, " ns_max " would do"
        if (err != "") { print set ":" substr(err, 2); exit 1 }
        print set ": " n " CPUs, " nn " NUMA node(s), " ns " socket(s)"
    }' "$TOPO_CACHE"
}

# disjoint A B...: no CPU in two of the sets.
disjoint() {
    _seen=""
    for s in "$@"; do
        _both=$(cl inter "$_seen" "$s")
        [ -z "$_both" ] || { echo "CPUs $_both are in two exclusive sets ($*)"; return 1; }
        _seen=$(cl union "$_seen" "$s")
    done
    echo "$*"
}

# --- cgroups ----------------------------------------------------------------------------
# mkcg REL [empty]: makes cgroup REL as runc/libcontainer does. v2: the cpu and
# cpuset controllers are enabled in every ancestor's subtree_control first. v1:
# the directory in the cpuset and cpu hierarchies; the cpuset one gets its
# parent's cpus and mems copied in (runc's ensureParent), unless "empty" (a
# cgroup made by hand: the daemon must fill it before a task can join).
mkcg() {
    _rel=$1
    if [ "$HIER" = v2 ]; then
        _p=$(dirname "$_rel"); [ "$_p" = . ] && _p=""
        _sc="$CS/${_p:+$_p/}cgroup.subtree_control"
        grep -qw cpuset "$_sc" && grep -qw cpu "$_sc" || echo "+cpu +cpuset" > "$_sc"
        mkdir "$CS/$_rel"
    else
        mkdir "$CPU/$_rel"
        mkdir "$CS/$_rel"
        if [ "$2" != empty ]; then
            _p=$(dirname "$CS/$_rel")
            cat "$_p/cpuset.mems" > "$CS/$_rel/cpuset.mems" 2>/dev/null
            cat "$_p/cpuset.cpus" > "$CS/$_rel/cpuset.cpus" 2>/dev/null
        fi
    fi
}

# mkcg_p REL: makes REL and its missing ancestors at once. v1: `mkdir -p` in
# both hierarchies, as libcontainer's MkdirAll does, with nothing copied in
# (every new level is empty, and inotify on kernfs reports only the top one).
# v2: level by level with the controllers enabled first, as fs2 does.
mkcg_p() {
    if [ "$HIER" = v1 ]; then
        mkdir -p "$CPU/$1" "$CS/$1"
    else
        _acc=""
        for _part in $(echo "$1" | tr / ' '); do
            _acc=${_acc:+$_acc/}$_part
            [ -d "$CS/$_acc" ] || mkcg "$_acc"
        done
    fi
}

# limit REL N: a CPU limit of N whole CPUs (the kubelet's for a Guaranteed
# container with `limits.cpu: N`).
limit() {
    if [ "$HIER" = v2 ]; then
        echo "$(($2 * 100000)) 100000" > "$CPU/$1/cpu.max"
    else
        echo 100000 > "$CPU/$1/cpu.cfs_period_us"
        echo $(($2 * 100000)) > "$CPU/$1/cpu.cfs_quota_us"
    fi
}

# setx REL VALUE: the user.pinctl.cpus xattr on the cgroup directory.
setx() { vm-helper setxattr "$CS/$1" user.pinctl.cpus "$2"; }

# spawn REL: starts `sleep 1000` and moves it into cgroup REL (both v1
# hierarchies); prints its pid. v1 refuses a task while the cpuset is empty
# (ENOSPC): retried until the daemon has filled it, or WAIT seconds.
_join() { echo "$2" > "$CS/$1/cgroup.procs" 2>/dev/null; }
spawn() {
    # Longer than any boot: a Debian boot's last scenario checks the
    # processes its second one made, over 1,000 s later in a slow CI run.
    sleep 86400 </dev/null >/dev/null 2>&1 &
    _pid=$!
    if ! wait_for "$WAIT" _join "$1" "$_pid"; then
        echo "$1" "$_pid" >> /run/spawn-errors
        echo "spawn: cannot move pid $_pid into $1 (cpus '$(cpus "$1")' mems '$(cat "$CS/$1/cpuset.mems" 2>/dev/null)')" >&2
    fi
    [ "$HIER" = v1 ] && echo "$_pid" > "$CPU/$1/cgroup.procs"
    echo "$_pid"
}

# kill_in DIR: kills every task of a cgroup directory and waits until it is empty.
_empty() { [ -z "$(cat "$1/cgroup.procs" 2>/dev/null)" ]; }
kill_in() {
    for p in $(cat "$1/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    wait_for 10 _empty "$1"
}

# rmcg REL...: removes cgroups (and everything below them) bottom-up, killing
# their tasks first, as a runtime deletes a container and its pod.
rmcg() {
    for _r in "$@"; do
        for _base in "$CS" "$CPU"; do
            [ -d "$_base/$_r" ] || continue
            for _d in $(find "$_base/$_r" -depth -type d); do
                kill_in "$_d"
                rmdir "$_d" 2>/dev/null || { sleep 0.2; rmdir "$_d"; }
            done
        done
    done
}

# --- the kubelet's names ---------------------------------------------------------------------
# pod LAYOUT QOS UID / ctr POD ID: systemd or cgroupfs driver, containerd.
pod() {
    case "$1/$2" in
        systemd/guaranteed) echo "kubepods.slice/kubepods-pod$3.slice" ;;
        systemd/burstable) echo "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod$3.slice" ;;
        systemd/besteffort) echo "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod$3.slice" ;;
        cgroupfs/guaranteed) echo "kubepods/pod$3" ;;
        cgroupfs/burstable) echo "kubepods/burstable/pod$3" ;;
        cgroupfs/besteffort) echo "kubepods/besteffort/pod$3" ;;
    esac
}
ctr() {
    case "$1" in
        kubepods.slice/*) echo "$1/cri-containerd-$2.scope" ;;
        *) echo "$1/$2" ;;
    esac
}
# A pod UID (systemd: with underscores) and a 64-hex container id for number N.
uid() { printf '%08x_1111_4222_8333_0123456789ab' "$2" | { [ "$1" = systemd ] && cat || tr _ -; }; }
cid() { printf '%08x%s' "$1" c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00; }

# container LAYOUT QOS N [LIMIT]: a pod with a pause container (no limit, a
# sleep in it) and an app container (LIMIT whole CPUs, or none) with a sleep in
# it, made in the kubelet's order. Sets POD, APP, PAUSE, APP_PID, PAUSE_PID.
container() {
    POD=$(pod "$1" "$2" "$(uid "$1" "$3")")
    mkcg "$POD"
    PAUSE=$(ctr "$POD" "$(cid $(($3 * 2)))")
    mkcg "$PAUSE"
    PAUSE_PID=$(spawn "$PAUSE")
    APP=$(ctr "$POD" "$(cid $(($3 * 2 + 1)))")
    mkcg "$APP"
    [ -n "$4" ] && limit "$APP" "$4"
    APP_PID=$(spawn "$APP")
}

# --- the daemon ---------------------------------------------------------------------------------
DPID=""
_ready_after() { [ "$(grep -c '^READY=1' "$NOTES" 2>/dev/null)" -gt "$1" ]; }
# daemon_start: starts pinctld (stderr into $LOG) and waits for a new READY=1
# on its NOTIFY_SOCKET.
daemon_start() {
    _before=$(grep -c '^READY=1' "$NOTES" 2>/dev/null)
    echo "----- starting pinctld ($SCEN)" >> "$LOG"
    NOTIFY_SOCKET=$NOTIFY_SOCKET_PATH pinctld --config "$CONFIG" </dev/null >>"$LOG" 2>&1 &
    DPID=$!
    echo "$DPID" > /run/pinctld.pid
    if wait_for 60 _ready_after "${_before:-0}"; then
        return 0
    fi
    fail daemon-ready "no READY=1 from pinctld within 60 s"
    return 1
}
_gone() { ! kill -0 "$1" 2>/dev/null; }
# daemon_crash: SIGKILL, no chance to save anything.
daemon_crash() {
    [ -n "$DPID" ] || return 0
    echo "----- SIGKILL pinctld ($SCEN)" >> "$LOG"
    kill -9 "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null; DPID=""
}
# daemon_stop: SIGTERM; it must exit 0.
daemon_stop() {
    [ -n "$DPID" ] || return 0
    echo "----- SIGTERM pinctld ($SCEN)" >> "$LOG"
    kill -TERM "$DPID" 2>/dev/null
    wait "$DPID"; _rc=$?
    DPID=""
    [ "$_rc" -eq 0 ] || fail daemon-exit "pinctld exited with $_rc on SIGTERM"
}
# last STATUS= line of the daemon.
daemon_status() { grep '^STATUS=' "$NOTES" | tail -1; }

# --- hot-plug ------------------------------------------------------------------------------------
cpu_online() { echo "$2" > "/sys/devices/system/cpu/cpu$1/online"; }

# --- the world's invariant -------------------------------------------------------------------------
# shared_ok NAME EXCL ROLE=PID...: the kernel lets every shared process run on
# exactly online minus EXCL (the union of the exclusive sets), never empty.
# One check per process, named NAME/ROLE.
shared_ok() {
    _n=$1; _ex=$2; shift 2
    _pool=$(cl minus "$(online)" "$_ex")
    for _rp in "$@"; do
        expect "$_n/${_rp%%=*}" "$_pool" allowed "${_rp#*=}"
    done
}

# structure_set EX [OWN]: what a kubepods structure cgroup gets when EX are
# the exclusive CPUs and OWN those of the workloads below it: every online CPU
# on v1 (never shrunk: a missing CPU there makes a container's write fail with
# EACCES); on v2 the shared pool with OWN, so that what lies below follows.
structure_set() {
    if [ "$HIER" = v1 ]; then online; else cl union "$(cl minus "$(online)" "$1")" "${2:-}"; fi
}

# structure_ok NAME EX POD=SET...: the kubepods roots, the QoS cgroups and
# the pod cgroups POD get what structure_set says, where the pinned CPUs
# below each are the SETs of the pods within it.
structure_ok() {
    _n=$1; _ex=$2; shift 2
    for _r in kubepods.slice kubepods kubepods.slice/kubepods-burstable.slice kubepods.slice/kubepods-besteffort.slice \
        kubepods/burstable kubepods/besteffort; do
        _own=""
        for _ps in "$@"; do
            case "${_ps%%=*}" in "$_r"/*) _own=$(cl union "$_own" "${_ps#*=}") ;; esac
        done
        expect "$_n/${_r##*/}" "$(structure_set "$_ex" "$_own")" eff "$_r"
    done
    for _ps in "$@"; do
        expect "$_n/${_ps%%=*}" "$(structure_set "$_ex" "${_ps#*=}")" eff "${_ps%%=*}"
    done
}

# --- interrupts (irq_affinity) ------------------------------------------------------
# Every interrupt line and its affinity, one "N LIST" line each.
# near_port: the PCI serial port qemu puts on NUMA node 1 (tests/vm/run's
# NEAR): sets PORT (its sysfs directory), TTY (its tty's name) and DEVNUM
# (the tty's MAJOR:MINOR); 1 when there is none. Linux 6.1 puts the tty at
# <port>/tty/ttyS4; later kernels put the serial core's port devices
# between (<port>/<port>:0/<port>:0.0/tty/ttyS4).
near_port() {
    local _d _t
    PORT="" TTY="" DEVNUM=""
    for _d in /sys/bus/pci/devices/*; do
        [ "$(cat "$_d/numa_node" 2>/dev/null)" = 1 ] || continue
        _t=$(find "$_d/" -maxdepth 4 -type d -path '*/tty/tty*' 2>/dev/null | head -n 1)
        [ -n "$_t" ] || continue
        PORT=$_d TTY=${_t##*/} DEVNUM=$(cat "$_t/dev")
    done
    [ -n "$PORT" ]
}

irqs() { for _d in /proc/irq/[0-9]*; do echo "${_d##*/} $(cat "$_d/smp_affinity_list")"; done; }
# mask_list FILE: a file's hex mask ("ffff", "ff,ffffffff") as a CPU list.
mask_list() {
    cl norm "$(tr -d ',\n' <"$1" | awk '{
        n = length($0); s = ""
        for (i = n; i >= 1; i--) {
            d = index("0123456789abcdef", tolower(substr($0, i, 1))) - 1
            for (b = 0; b < 4; b++) { if (d % 2) s = s (s == "" ? "" : ",") ((n - i) * 4 + b); d = int(d / 2) }
        }
        print s }')"
}
# The default affinity as a CPU list.
def_list() { mask_list /proc/irq/default_smp_affinity; }
# irq_name N: its name in /proc/interrupts (the last field).
irq_name() { awk -v n="$1:" '$1 == n { print $NF; exit }' /proc/interrupts; }
# stray SET: the interrupts whose affinity meets SET, space-separated.
stray() {
    irqs | while read -r _n _l; do
        [ -n "$(cl inter "$_l" "$1")" ] && printf '%s ' "$_n"
    done
}
# refuses N SET: the kernel refuses to move interrupt N off SET (a write of
# its list minus SET fails); REFUSAL is the shell's error.
refuses() {
    _l=$(cat "/proc/irq/$1/smp_affinity_list")
    _to=$(cl minus "$_l" "$2"); [ -n "$_to" ] || _to=$(cl minus "$(online)" "$2")
    REFUSAL=$( { echo "$_to" > "/proc/irq/$1/smp_affinity_list"; } 2>&1 ) && return 1
    REFUSAL=${REFUSAL##*: }
}
# The status's Interrupts: line.
irq_line() { pinctl status 2>&1 | grep '^Interrupts:'; }
# _passed SET: the daemon's last pass kept interrupts off SET.
_passed() { case "$(irq_line);" in *"kept off CPUs $1;"*) return 0 ;; esac; return 1; }
# The interrupts the status lists as refused ("default" among them when
# default_smp_affinity is), space-separated.
refused() { irq_line | sed -n 's/.*refused: \([^;]*\).*/\1/p' | tr -d ','; }

# --- power classes (issue #35) ------------------------------------------------------
# The one power file a qemu guest has: cpuN/power/pm_qos_resume_latency_us.
qos() { cat "/sys/devices/system/cpu/cpu$1/power/pm_qos_resume_latency_us" 2>/dev/null; }
# qos_orig: sets QOS_ORIG to every online CPU's value now ("C=V ...").
qos_orig() {
    QOS_ORIG=""
    for _c in $(cl list "$(online)"); do QOS_ORIG="$QOS_ORIG $_c=$(qos "$_c")"; done
}
# qos_ok NAME SET VALUE: the CPUs of SET read VALUE, every other CPU what it
# read at qos_orig.
_qos_is() {
    for _co in $QOS_ORIG; do
        _c=${_co%%=*}
        if [ -n "$(cl inter "$2" "$_c")" ]; then _w=$3; else _w=${_co#*=}; fi
        [ "$(qos "$_c")" = "$_w" ] || { echo "cpu$_c reads $(qos "$_c"), not $_w"; return 1; }
    done
}
qos_ok() {
    if wait_for "$WAIT" _qos_is "$1" "$2" "$3" >/dev/null; then
        pass "$1" "pm_qos_resume_latency_us: ${2:-no CPU} at $3, the rest as they were"
    else
        fail "$1" "$(_qos_is "$1" "$2" "$3")"
    fi
}
