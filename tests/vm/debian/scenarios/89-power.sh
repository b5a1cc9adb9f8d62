# Power classes (issue #35) under the packaged unit, by the one power file
# this qemu guest has: cpuN/power/pm_qos_resume_latency_us. The unit makes
# /sys read-only but /sys/devices/system/cpu, and keeps /run/pinctl (the
# originals) across stop and restart. A job pinned by a rule, its class 20 µs:
# - set on the pin by `systemctl reload` of a configuration alone;
# - kept across `systemctl restart`, and across `systemctl stop`;
# - put back on release, even a release while the daemon was stopped;
# - put back when a reload turns [power] off;
# - a drop-in that makes the CPU files read-only again gets the status's
#   advice, and nothing is written.
# Every other CPU keeps its original all along.
if [ ! -w /sys/devices/system/cpu/cpu1/power/pm_qos_resume_latency_us ]; then
    note "no writable pm_qos_resume_latency_us on this kernel: skipped"
    return 0
fi
qos_orig
cp "$CONFIG" /run/pinctld.toml.before-power
# power_config true|false: the configuration of before, a rule and a class.
power_config() {
    cp /run/pinctld.toml.before-power "$CONFIG"
    cat >> "$CONFIG" <<POWER

[[rule]]
match = "power.slice/job-*.scope"
cpus = 2
class = "latency"

[[class]]
name = "latency"
resume_latency_us = 20

[power]
enabled = $1
POWER
}
power_config true
_reload() { systemctl reload pinctld.service 2>&1; }
_restart() { systemctl restart pinctld.service 2>&1; }
check reload-on "systemctl reload turns [power] on" _reload
mkcg power.slice
mkcg power.slice/job-1.scope
spawn power.slice/job-1.scope >/dev/null
pin pinned power.slice/job-1.scope 2; PX=$GOT
qos_ok set-on-pin "$PX" 20
_status_power() { pinctl status 2>&1 | grep -m1 '^Power:' | grep -q "latency on CPUs $PX" || pinctl status 2>&1 | grep '^Power:'; }
check status "pinctl status: Power: latency on CPUs $PX" _status_power
# In the daemon's mount namespace: the power files are writable, the
# node-wide SMT switch is not.
_sandbox() {
    _ns="nsenter -t $(unit_prop MainPID) -m"
    $_ns sh -c "test -w /sys/devices/system/cpu/cpu1/power/pm_qos_resume_latency_us" || { echo "pm_qos is read-only"; return 1; }
    [ ! -e /sys/devices/system/cpu/smt/control ] && { echo "no smt/control here"; return 0; }
    ! $_ns sh -c "test -w /sys/devices/system/cpu/smt/control" || { echo "smt/control is writable"; return 1; }
}
check sandbox "the unit: power files writable, smt/control read-only" _sandbox

check restart "systemctl restart" _restart
qos_ok kept-across-restart "$PX" 20

_stop() { systemctl stop pinctld.service 2>&1; }
check stop "systemctl stop" _stop
_originals_kept() { [ -s /run/pinctl/power.json ] || { ls -la /run/pinctl 2>&1; return 1; }; }
check originals-kept "/run/pinctl/power.json outlives the stop" _originals_kept
qos_ok kept-across-stop "$PX" 20
rmcg power.slice/job-1.scope
_start() { systemctl start pinctld.service 2>&1; }
check start "systemctl start" _start
qos_ok put-back-after-release-while-stopped "" 0

mkcg power.slice/job-2.scope
spawn power.slice/job-2.scope >/dev/null
pin pinned-again power.slice/job-2.scope 2; PY=$GOT
qos_ok set-again "$PY" 20
power_config false
check reload-off "systemctl reload turns [power] off" _reload
qos_ok put-back-when-off "" 0

# A drop-in that takes the path back: the writes fail, the status says why.
power_config true
mkdir -p /etc/systemd/system/pinctld.service.d
printf '[Service]\nReadOnlyPaths=/sys/devices/system/cpu\n' > /etc/systemd/system/pinctld.service.d/ro.conf
systemctl daemon-reload
check restart-read-only "systemctl restart with the CPU files read-only" _restart
_advice() { pinctl status 2>&1 | grep -q 'ReadWritePaths=/sys/devices/system/cpu'; }
if wait_for "$WAIT" _advice; then
    pass advice "pinctl status names ReadWritePaths=/sys/devices/system/cpu"
else
    fail advice "$(pinctl status 2>&1 | grep -A3 '^Power:')"
fi
qos_ok nothing-written-read-only "" 0

rm -f /etc/systemd/system/pinctld.service.d/ro.conf
systemctl daemon-reload
cp /run/pinctld.toml.before-power "$CONFIG"
check restart-clean "systemctl restart with the configuration of before" _restart
rmcg power.slice
qos_ok all-original "" 0
