# Scenario 9: the watchdog repairs required cgroup paths on a real kernel. A
# QoS slice removed from the cpuset tree is made again at once (inotify), as
# the kernel needs it before anything can join: v1 with its parent's
# cpuset.cpus and cpuset.mems, v2 with the parent's controllers enabled for it
# and for its children; a task (v2: in a pod below it) joins it. v1: also
# removed from the cpu,cpuacct hierarchy (watched too) and from a pids
# hierarchy (not watched: within watchdog_interval). With repair = false a
# removed slice is only reported (log and STATUS=).
BE=kubepods.slice/kubepods-besteffort.slice
BU=kubepods.slice/kubepods-burstable.slice
# The v1 hierarchies the daemon sees are those mounted when it starts: add a
# pids one, with the kubepods skeleton of both drivers as the kubelet makes it.
PIDS=$CGROOT/pids
if [ "$HIER" = v1 ]; then
    mkdir -p "$PIDS"
    mount -t cgroup -o pids pids "$PIDS"
    for r in kubepods.slice $BU $BE kubepods kubepods/burstable kubepods/besteffort; do
        mkdir -p "$PIDS/$r"
    done
fi
write_config 1h 'watchdog_interval = "1s"
repair_cooldown = "1s"'
daemon_start || return
ALL=$(online)

_is_dir() { [ -d "$1" ]; }
_logged() { grep -qF "$1" "$LOG"; }
# made_again NAME DIR: waits until DIR exists again and the log names its repair.
made_again() {
    if wait_for "$WAIT" _is_dir "$2"; then
        pass "$1" "$2 made again"
    else
        fail "$1" "expected $2 to be made again, it is missing"
        return 1
    fi
    if wait_for "$WAIT" _logged "required cgroup path was missing; repaired path=$2"; then
        pass "$1-logged" "repair of $2 logged"
    else
        fail "$1-logged" "expected a log line 'required cgroup path was missing; repaired path=$2' got: $(grep 'required cgroup' "$LOG" | tail -3)"
    fi
}

# --- a QoS slice removed from the cpuset tree ---------------------------------------
note "rmdir $BE"
rmdir "$CS/$BE"
made_again cpuset-made-again "$CS/$BE"
if [ "$HIER" = v1 ]; then
    _filled() { [ -n "$(cpus "$BE")" ] && [ -n "$(cat "$CS/$BE/cpuset.mems")" ]; }
    if wait_for "$WAIT" _filled; then
        pass cpuset-filled "cpus $(cpus "$BE") mems $(cat "$CS/$BE/cpuset.mems")"
    else
        fail cpuset-filled "expected non-empty cpuset.cpus and cpuset.mems got cpus '$(cpus "$BE")' mems '$(cat "$CS/$BE/cpuset.mems")'"
    fi
    expect cpuset-parents-cpus "$(cpus kubepods.slice)" cpus "$BE"
    # The kernel refuses a task in a cpuset with empty cpus or mems (ENOSPC).
    sleep 1000 </dev/null >/dev/null 2>&1 &
    T_PID=$!
    if _join "$BE" "$T_PID"; then
        pass task-joins "pid $T_PID joined the repaired $BE"
    else
        fail task-joins "pid $T_PID cannot join the repaired $BE (cpus '$(cpus "$BE")' mems '$(cat "$CS/$BE/cpuset.mems")')"
    fi
    expect task-allowed "$ALL" allowed "$T_PID"
    kill_in "$CS/$BE"
else
    _enabled() { grep -qw cpuset "$1/cgroup.subtree_control"; }
    check parent-enables-cpuset "kubepods.slice enables cpuset for its children" _enabled "$CS/kubepods.slice"
    if wait_for "$WAIT" _enabled "$CS/$BE"; then
        pass slice-enables-cpuset "$BE/cgroup.subtree_control: $(cat "$CS/$BE/cgroup.subtree_control")"
    else
        fail slice-enables-cpuset "expected cpuset in $BE/cgroup.subtree_control got '$(cat "$CS/$BE/cgroup.subtree_control")'"
    fi
    expect slice-effective "$ALL" eff "$BE"
    # v2: no processes in a cgroup that enables controllers; a pod below it.
    P=$BE/kubepods-besteffort-pod$(uid systemd 90).slice
    mkcg "$P"
    T_PID=$(spawn "$P")
    expect task-allowed "$ALL" allowed "$T_PID"
    rmcg "$P"
fi

# --- v1: the other hierarchies ------------------------------------------------------
if [ "$HIER" = v1 ]; then
    note "rmdir $BU in cpu,cpuacct"
    rmdir "$CPU/$BU"
    made_again cpu-made-again "$CGROOT/cpu,cpuacct/$BU"
    note "rmdir $BE and kubepods/burstable in pids"
    rmdir "$PIDS/$BE" "$PIDS/kubepods/burstable"
    made_again pids-made-again "$PIDS/$BE"
    made_again pids-cgroupfs-made-again "$PIDS/kubepods/burstable"
fi
_whole() {
    for r in kubepods.slice $BU $BE kubepods kubepods/burstable kubepods/besteffort; do
        [ -d "$CS/$r" ] || { echo "$r missing"; return 1; }
    done
}
check structure-kept "the kubepods skeleton is whole" _whole

# --- repair = false: reported, not made -------------------------------------------------
daemon_stop
write_config 1h 'watchdog_interval = "1s"
repair = false'
daemon_start || return
note "rmdir $BE with repair = false"
rmdir "$CS/$BE"
_reported() { daemon_status | grep -q 'missing path'; }
if wait_for "$WAIT" _reported; then
    pass repair-off-status "$(daemon_status)"
else
    fail repair-off-status "expected STATUS= with a missing path got $(daemon_status)"
fi
if wait_for "$WAIT" _logged "required cgroup path missing: missing; repair = false path=$CS/$BE"; then
    pass repair-off-logged "missing $CS/$BE logged"
else
    fail repair-off-logged "expected a log line for $CS/$BE got: $(grep 'required cgroup' "$LOG" | tail -3)"
fi
_absent() { [ ! -d "$CS/$BE" ]; }
check repair-off-not-made "$BE stays missing" _absent
sleep 2
check repair-off-still-not-made "$BE still missing 2 s later" _absent
daemon_stop

if [ "$HIER" = v1 ]; then
    for r in $BE $BU kubepods.slice kubepods/besteffort kubepods/burstable kubepods; do
        rmdir "$PIDS/$r" 2>/dev/null
    done
    umount "$PIDS" && rmdir "$PIDS"
fi
