# Scenario 15: strict_reservation (issue #34). While it is on, the processes
# of Burstable and BestEffort containers (and of the Guaranteed pod's pause
# container) never run on the reserved CPU 0, while system.slice keeps it; a
# reload turns it off (they get CPU 0 back) and on again, with no restart.
# The pin never moves.
STRICT="strict_reservation = true"
write_config 1h "$STRICT"
daemon_start || return

container systemd burstable 1; B_PID=$APP_PID; B_PAUSE=$PAUSE_PID
container cgroupfs besteffort 2; E_PID=$APP_PID
container systemd guaranteed 3 2; G=$APP; G_PAUSE=$PAUSE_PID
pin pinned "$G" 2; X=$GOT
POOL=$(cl minus "$(online)" "$X")
PODS=$(cl minus "$POOL" 0)

# pods_ok NAME WANT: every shared container's process may run on WANT
# exactly, system.slice's on the whole pool.
pods_ok() {
    for _rp in burstable=$B_PID besteffort=$E_PID pause-burstable=$B_PAUSE \
        pause-guaranteed=$G_PAUSE ${L_PID:+late=$L_PID}; do
        expect "$1/${_rp%%=*}" "$2" allowed "${_rp#*=}"
    done
    expect "$1/system" "$POOL" allowed "$SYS_PID"
    expect "$1/pin" "$X" eff "$G"
}

pods_ok on "$PODS"
# A container made while it is on starts off CPU 0 too.
container cgroupfs burstable 4; L_PID=$APP_PID
expect on/late "$PODS" allowed "$L_PID"

write_config 1h ""
kill -HUP "$DPID"
pods_ok off "$POOL"

write_config 1h "$STRICT"
kill -HUP "$DPID"
pods_ok on-again "$PODS"
