# Scenario 7: not enough CPUs. Two Guaranteed containers ask for half the
# machine each; with CPU 0 reserved the second one waits in the shared pool,
# and is pinned when the first one leaves.
write_config 1h
daemon_start || return
H=$(( $(cl count "$(online)") / 2 ))
container systemd burstable 1; B_PID=$APP_PID
container cgroupfs guaranteed 2 "$H"; A_POD=$POD; A=$APP
pin first-pinned "$A" "$H"; XA=$GOT
OTHERS=""
check first-aligned "the first workload's $H CPUs" aligned "$XA" "$H"
container systemd guaranteed 3 "$H"; P=$APP; P_PID=$APP_PID
POOL=$(cl minus "$(online)" "$XA")
expect_stays pending-in-pool "$POOL" eff "$P" 2
expect pending-process "$POOL" allowed "$P_PID"
_pending() { daemon_status | grep -q ', 1 pending'; }
if wait_for "$WAIT" _pending; then
    pass pending-reported "$(daemon_status)"
else
    fail pending-reported "expected STATUS= with 1 pending got $(daemon_status)"
fi

rmcg "$A_POD"
pin second-pinned "$P" "$H"; XP=$GOT
OTHERS=""
check second-aligned "the second workload's $H CPUs" aligned "$XP" "$H"
expect second-process "$XP" allowed "$P_PID"
shared_ok after "$XP" burstable=$B_PID system=$SYS_PID
