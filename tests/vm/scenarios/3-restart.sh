# Scenario 3: the daemon is killed with SIGKILL; while it is down a pinned
# workload goes and a new one comes (its pod UID sorts before the survivor's),
# and a burstable one; after the restart the survivor keeps its CPUs, the new
# one is pinned, the gone one's CPUs are shared again.
write_config 1h
daemon_start || return
container systemd burstable 1; B_PID=$APP_PID
container cgroupfs guaranteed 2 2; A=$APP; A_PID=$APP_PID
pin survivor-pinned "$A" 2; XA=$GOT
container systemd guaranteed 3 4; G=$APP; G_POD=$POD
pin leaver-pinned "$G" 4; XG=$GOT
shared_ok before-crash "$(cl union "$XA" "$XG")" burstable=$B_PID system=$SYS_PID

daemon_crash
rmcg "$G_POD"
container cgroupfs guaranteed 1 2; C=$APP; C_PID=$APP_PID
container cgroupfs besteffort 4; N_PID=$APP_PID
daemon_start || return

expect_stays survivor-kept "$XA" eff "$A" 2
expect survivor-process "$XA" allowed "$A_PID"
pin newcomer-pinned "$C" 2; XC=$GOT
OTHERS=$XA
check newcomer-aligned "the newcomer's CPUs" aligned "$XC" 2
expect newcomer-process "$XC" allowed "$C_PID"
check disjoint "no CPU in two exclusive sets" disjoint "$XA" "$XC"
shared_ok after-restart "$(cl union "$XA" "$XC")" burstable=$B_PID system=$SYS_PID besteffort-new=$N_PID
_released() {
    _left=$(cl minus "$XG" "$(cl union "$(allowed "$SYS_PID")" "$XC")")
    [ -z "$_left" ] || { echo "CPUs $_left of the removed workload are withheld"; return 1; }
}
check released "the removed workload's CPUs ($XG) are shared or the newcomer's" _released
