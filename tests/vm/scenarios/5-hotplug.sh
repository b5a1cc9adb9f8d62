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
structure_ok shared-online-structure "$A_POD" "$G_POD"
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
structure_ok exclusive-online-structure "$A_POD" "$G_POD"
expect exclusive-online-a-kept "$XA2" eff "$A"

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
structure_ok restart-online-structure "$A_POD" "$G_POD"

# Every CPU that came back can be handed out again: a new workload asks for
# all the free whole cores.
FREE=$(cl minus "$(cl minus "$(online)" 0)" "$(cl union "$XA2" "$XG2")")
F=$(( $(cl count "$FREE") / 2 * 2 ))
note "new workload of $F CPUs on the free $FREE (CPUs $S, $V, $W went and came back)"
container cgroupfs guaranteed 4 "$F"; N=$APP; N_PID=$APP_PID
pin after-hotplug-pinned "$N" "$F"; XN=$GOT
OTHERS=$(cl union "$XA2" "$XG2")
check after-hotplug-aligned "the new workload's CPUs" aligned "$XN" "$F"
check after-hotplug-disjoint "no overlap" disjoint "$XA2" "$XG2" "$XN"
expect after-hotplug-process "$XN" allowed "$N_PID"
shared_ok after-hotplug "$(cl union "$(cl union "$XA2" "$XG2")" "$XN")" burstable=$B_PID system=$SYS_PID
