# Scenario 4: a corrupt state file, then a missing one: the daemon starts
# anyway, keeps the live assignments and rebuilds the state from the live
# cpusets.
write_config 1h
daemon_start || return
container systemd burstable 1; B_PID=$APP_PID
container cgroupfs guaranteed 2 2; A=$APP; A_PID=$APP_PID
pin pinned "$A" 2; XA=$GOT
daemon_stop
check state-saved "the state file names $A" grep -q "$A" "$STATE"

printf '{"version":1,"checksum":"crc32:0\000\000garbage' > "$STATE"
daemon_start || return
expect_stays corrupt-kept "$XA" eff "$A" 2
expect corrupt-process "$XA" allowed "$A_PID"
check corrupt-moved-aside "the bad file is kept as state.json.corrupt-*" \
    sh -c 'ls /var/lib/pinctl/state.json.corrupt-* && grep -q garbage /var/lib/pinctl/state.json.corrupt-*'
container systemd guaranteed 3 2; C=$APP; C_PID=$APP_PID
pin corrupt-new-pinned "$C" 2; XC=$GOT
check disjoint "no CPU in two exclusive sets" disjoint "$XA" "$XC"
_state_names() { grep -q "$1" "$STATE" 2>/dev/null && grep -q "$2" "$STATE"; }
if wait_for "$WAIT" _state_names "$A" "$C"; then
    pass state-rewritten "a new state file names both workloads"
else
    fail state-rewritten "expected a state file naming $A and $C got: $(cat "$STATE" 2>&1 | head -c 300)"
fi

daemon_crash
rm -f "$STATE"
daemon_start || return
expect_stays missing-kept-first "$XA" eff "$A" 2
expect missing-kept-second "$XC" eff "$C"
expect missing-process "$XC" allowed "$C_PID"
shared_ok missing-shared "$(cl union "$XA" "$XC")" burstable=$B_PID system=$SYS_PID
