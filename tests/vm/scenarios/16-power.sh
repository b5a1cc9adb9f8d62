# Scenario 16: power classes (issue #35) on a real kernel, by the one power
# file this qemu guest has: cpuN/power/pm_qos_resume_latency_us (no cpufreq,
# cpuidle or uncore here; those are proved on the validating fake sysfs).
# A class of 20 µs for exclusive CPUs: set on the pin, kept across a
# restart (SIGKILL, the state file lost too: the originals are on /run),
# put back on release, and put back when a reload turns
# [power] off; every other CPU keeps its original all along.
PM=/sys/devices/system/cpu
qos() { cat "$PM/cpu$1/power/pm_qos_resume_latency_us" 2>/dev/null; }
if [ ! -w "$PM/cpu1/power/pm_qos_resume_latency_us" ]; then
    note "no writable pm_qos_resume_latency_us on this kernel: skipped"
    return 0
fi
# What every CPU has before: put back at the end, and checked at each step.
ORIG=""
for _c in $(cl list "$(online)"); do ORIG="$ORIG $_c=$(qos "$_c")"; done
rm -f /run/pinctl/power.json
POWER='power_originals = "/run/pinctl/power.json"

[[class]]
name = "latency"
resume_latency_us = 20

[power]
enabled = true
exclusive = "latency"'

# qos_ok NAME SET VALUE: the CPUs of SET read VALUE, every other its original.
_qos_is() {
    for _co in $ORIG; do
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

write_config 1h "$POWER"
daemon_start || return
container systemd guaranteed 1 2; G=$APP; G_POD=$POD
pin pinned "$G" 2; X=$GOT
qos_ok set-on-pin "$X" 20

daemon_crash
rm -f "$STATE"
daemon_start || return
qos_ok kept-across-restart "$X" 20

rmcg "$G_POD"
qos_ok put-back-on-release "" 0

container cgroupfs guaranteed 2 2; H=$APP
pin pinned-again "$H" 2; Y=$GOT
qos_ok set-again "$Y" 20
write_config 1h ""
kill -HUP "$DPID"
qos_ok put-back-when-off "" 0
daemon_stop
