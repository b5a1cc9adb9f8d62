# Scenario 3: the daemon is killed with SIGKILL; while it is down a pinned
# workload goes, a new one comes (its pod UID sorts before the survivor's), a
# best-effort one comes, and another writer widens a pinned cpuset; after the
# restart the survivor keeps its CPUs, the widened one gets its CPUs back, the
# new one is pinned, the gone one's CPUs are shared again.
write_config 1h
daemon_start || return
container systemd burstable 1; B_PID=$APP_PID
container cgroupfs guaranteed 2 2; A=$APP; A_PID=$APP_PID
pin survivor-pinned "$A" 2; XA=$GOT
container systemd guaranteed 3 2; G=$APP; G_POD=$POD
pin leaver-pinned "$G" 2; XG=$GOT
container systemd guaranteed 5 2; W=$APP; W_PID=$APP_PID
pin widened-pinned "$W" 2; XW=$GOT
shared_ok before-crash "$(cl union "$(cl union "$XA" "$XG")" "$XW")" burstable=$B_PID system=$SYS_PID

daemon_crash
rmcg "$G_POD"
# Someone widens a pinned cpuset while the daemon is down: the live set is no
# valid assignment any more, the state file's hint still is.
echo "$(online)" > "$CS/$W/cpuset.cpus"
container cgroupfs guaranteed 1 2; C=$APP; C_PID=$APP_PID
container cgroupfs besteffort 4; N_PID=$APP_PID
daemon_start || return

expect_stays survivor-kept "$XA" eff "$A" 2
expect survivor-process "$XA" allowed "$A_PID"
pin newcomer-pinned "$C" 2; XC=$GOT
OTHERS=$(cl union "$XA" "$XW")
check newcomer-aligned "the newcomer's CPUs" aligned "$XC" 2
expect newcomer-process "$XC" allowed "$C_PID"
expect widened-restored "$XW" eff "$W"
expect widened-process "$XW" allowed "$W_PID"
check disjoint "no CPU in two exclusive sets" disjoint "$XA" "$XC" "$XW"
shared_ok after-restart "$(cl union "$(cl union "$XA" "$XC")" "$XW")" burstable=$B_PID system=$SYS_PID \
    besteffort-new=$N_PID
_released() {
    _left=$(cl minus "$XG" "$(cl union "$(allowed "$SYS_PID")" "$(cl union "$XC" "$XW")")")
    [ -z "$_left" ] || { echo "CPUs $_left of the removed workload are withheld"; return 1; }
}
check released "the removed workload's CPUs ($XG) are shared or the newcomer's" _released
