# Scenario 5: CPU hot-plug while the daemon runs and between restarts: a shared
# CPU goes and comes back (v1 does not give an onlined CPU back to any cpuset:
# the daemon must), a CPU of an exclusive workload goes (the workload is
# re-planned), and the same between two runs of the daemon. After each step: no
# overlap, the shared pool is online minus the exclusive CPUs.
write_config 1s
daemon_start || return
container systemd burstable 1; B_PID=$APP_PID; B_PAUSE=$PAUSE_PID
container cgroupfs guaranteed 2 2; A=$APP; A_PID=$APP_PID; A_POD=$POD
pin a-pinned "$A" 2; XA=$GOT
container systemd guaranteed 3 2; G=$APP; G_PID=$APP_PID; G_POD=$POD
pin g-pinned "$G" 2; XG=$GOT
check disjoint "no CPU in two exclusive sets" disjoint "$XA" "$XG"

# 1. A shared CPU (the highest one) goes offline and comes back.
S=$(cl list "$(cl minus "$(cl minus "$(online)" "$(cl union "$XA" "$XG")")" 0)" | tr ' ' '\n' | tail -1)
note "CPU $S (shared) offline"
cpu_online "$S" 0
shared_ok shared-offline "$(cl union "$XA" "$XG")" burstable=$B_PID system=$SYS_PID pause=$B_PAUSE
expect shared-offline-a-kept "$XA" eff "$A"
expect shared-offline-g-kept "$XG" eff "$G"
note "CPU $S (shared) online"
cpu_online "$S" 1
shared_ok shared-online "$(cl union "$XA" "$XG")" burstable=$B_PID system=$SYS_PID pause=$B_PAUSE
structure_ok shared-online-structure "$(cl union "$XA" "$XG")" "$A_POD=$XA" "$G_POD=$XG"
expect shared-online-a-kept "$XA" eff "$A"

# 2. A CPU of workload A goes offline: A is re-planned on 2 online CPUs.
V=$(cl list "$XA" | cut -d' ' -f2)
note "CPU $V (exclusive to $A) offline"
cpu_online "$V" 0
_replanned() { _e=$(eff "$1"); [ "$(cl count "$_e")" = 2 ] && [ -z "$(cl inter "$_e" "$2")" ]; }
if wait_for "$WAIT" _replanned "$A" "$V"; then
    XA2=$(eff "$A"); pass exclusive-offline-replanned "eff $A = $XA2"
else
    XA2=$(eff "$A"); fail exclusive-offline-replanned "eff $A: expected 2 online CPUs without $V got $(show "$XA2")"
fi
OTHERS=$XG
check exclusive-offline-aligned "A's new CPUs" aligned "$XA2" 2
check exclusive-offline-disjoint "no overlap" disjoint "$XA2" "$XG"
expect exclusive-offline-process "$XA2" allowed "$A_PID"
expect exclusive-offline-g-kept "$XG" eff "$G"
shared_ok exclusive-offline "$(cl union "$XA2" "$XG")" burstable=$B_PID system=$SYS_PID
note "CPU $V online"
cpu_online "$V" 1
shared_ok exclusive-online "$(cl union "$XA2" "$XG")" burstable=$B_PID system=$SYS_PID
structure_ok exclusive-online-structure "$(cl union "$XA2" "$XG")" "$A_POD=$XA2" "$G_POD=$XG"
expect exclusive-online-a-kept "$XA2" eff "$A"

# 2b. Both CPUs of G (a whole core) go offline. v2: G's effective set falls
# back to its parent's, so G spreads onto shared CPUs until re-planned. v1:
# G's cpuset becomes empty and the kernel moves its tasks to the nearest
# ancestor with CPUs (the pod): no daemon can prevent that, but G must still
# be re-planned and must not break anything.
note "CPUs $XG (all of $G) offline"
# Both at once, as far as the daemon can tell: it is stopped while they go.
# Under emulation on a busy host the second can go offline a second after
# the first, and a daemon that re-plans G in between (CI once saw it) keeps
# G's cpuset from ever being empty, so v1 moves no task.
kill -STOP "$DPID"
for c in $(cl list "$XG"); do cpu_online "$c" 0; done
kill -CONT "$DPID"
if wait_for "$WAIT" _replanned "$G" "$XG"; then
    XG3=$(eff "$G"); pass core-offline-replanned "eff $G = $XG3"
else
    XG3=$(eff "$G"); fail core-offline-replanned "eff $G: expected 2 online CPUs outside $XG got $(show "$XG3")"
fi
OTHERS=$XA2
check core-offline-aligned "G's new CPUs" aligned "$XG3" 2
check core-offline-disjoint "no overlap" disjoint "$XA2" "$XG3"
if [ "$HIER" = v1 ]; then
    _moved() { grep -qx "$G_PID" "$CS/$G_POD/cgroup.procs"; }
    if wait_for "$WAIT" _moved; then
        pass core-offline-kernel-moved-task "v1 moved pid $G_PID from the emptied $G to its pod"
    else
        fail core-offline-kernel-moved-task "expected pid $G_PID in $G_POD got it in $(grep -l "^$G_PID\$" $(find "$CS" -name cgroup.procs) 2>/dev/null)"
    fi
    # The runtime's view of the container is gone in v1; put the task back to
    # go on.
    _join "$G" "$G_PID"
fi
expect core-offline-process "$XG3" allowed "$G_PID"
shared_ok core-offline "$(cl union "$XA2" "$XG3")" burstable=$B_PID system=$SYS_PID
note "CPUs $XG online"
for c in $(cl list "$XG"); do cpu_online "$c" 1; done
shared_ok core-online "$(cl union "$XA2" "$XG3")" burstable=$B_PID system=$SYS_PID pause=$B_PAUSE
structure_ok core-online-structure "$(cl union "$XA2" "$XG3")" "$A_POD=$XA2" "$G_POD=$XG3"
expect core-online-g-kept "$XG3" eff "$G"
XG_GONE=$XG; XG=$XG3

# 3. Between restarts: a CPU of G goes offline while the daemon is down.
daemon_crash
W=$(cl list "$XG" | cut -d' ' -f1)
note "CPU $W (exclusive to $G) offline while the daemon is down"
cpu_online "$W" 0
daemon_start || return
if wait_for "$WAIT" _replanned "$G" "$W"; then
    XG2=$(eff "$G"); pass restart-offline-replanned "eff $G = $XG2"
else
    XG2=$(eff "$G"); fail restart-offline-replanned "eff $G: expected 2 online CPUs without $W got $(show "$XG2")"
fi
OTHERS=$XA2
check restart-offline-aligned "G's new CPUs" aligned "$XG2" 2
check restart-offline-disjoint "no overlap" disjoint "$XA2" "$XG2"
expect restart-offline-process "$XG2" allowed "$G_PID"
expect restart-offline-a-kept "$XA2" eff "$A"
shared_ok restart-offline "$(cl union "$XA2" "$XG2")" burstable=$B_PID system=$SYS_PID

daemon_crash
note "CPU $W online while the daemon is down"
cpu_online "$W" 1
daemon_start || return
shared_ok restart-online "$(cl union "$XA2" "$XG2")" burstable=$B_PID system=$SYS_PID pause=$B_PAUSE
expect restart-online-a-kept "$XA2" eff "$A"
expect restart-online-g-kept "$XG2" eff "$G"
structure_ok restart-online-structure "$(cl union "$XA2" "$XG2")" "$A_POD=$XA2" "$G_POD=$XG2"

# Every CPU that came back can be handed out again: a new workload asks for
# all the free whole cores.
FREE=$(cl minus "$(cl minus "$(online)" 0)" "$(cl union "$XA2" "$XG2")")
F=$(( $(cl count "$FREE") / 2 * 2 ))
note "new workload of $F CPUs on the free $FREE (CPUs $S, $V, $XG_GONE, $W went and came back)"
container cgroupfs guaranteed 4 "$F"; N=$APP; N_PID=$APP_PID
pin after-hotplug-pinned "$N" "$F"; XN=$GOT
OTHERS=$(cl union "$XA2" "$XG2")
check after-hotplug-aligned "the new workload's CPUs" aligned "$XN" "$F"
check after-hotplug-disjoint "no overlap" disjoint "$XA2" "$XG2" "$XN"
expect after-hotplug-process "$XN" allowed "$N_PID"
shared_ok after-hotplug "$(cl union "$(cl union "$XA2" "$XG2")" "$XN")" burstable=$B_PID system=$SYS_PID
