# Scenario 16: power classes (issue #35) on a real kernel, by the one power
# file this qemu guest has: cpuN/power/pm_qos_resume_latency_us (no cpufreq,
# cpuidle or uncore here; those are proved on the validating fake sysfs).
# A class of 20 µs for exclusive CPUs: set on the pin, kept across a
# restart (SIGKILL, the state file lost too: the originals are on /run),
# put back on release, and put back when a reload turns
# [power] off; every other CPU keeps its original all along.
if [ ! -w /sys/devices/system/cpu/cpu1/power/pm_qos_resume_latency_us ]; then
    note "no writable pm_qos_resume_latency_us on this kernel: skipped"
    return 0
fi
qos_orig
rm -f /run/pinctl/power.json
POWER='power_originals = "/run/pinctl/power.json"

[[class]]
name = "latency"
resume_latency_us = 20

[power]
enabled = true
exclusive = "latency"'

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
