# Opt-in scenario (PINCTL_VM_DEBIAN_SCENARIOS=install,soak; the cgroup v2
# boot): the soak of issue #47 (tests/soak/, a static build that
# tests/vm/run puts at /vm/pinctl-soak) under systemd as PID 1, with the
# two faults only a guest may suffer: CPU hot-plug (PINCTL_SOAK_HOTPLUG=1:
# a CPU but the reserved one offline, later online again) and systemd's
# daemon-reloads (PINCTL_SOAK_RELOADS=1: the systemd driver's containers
# are real transient scopes and slices, and pinctld talks to systemd on the
# system bus as the shipped configuration does). The daemon is the .deb's
# /usr/bin/pinctld, started by the soak with a configuration of its own;
# the packaged service is stopped meanwhile.
#
# 10 minutes by default; tests/vm/run passes PINCTL_SOAK_SECS, _SEED,
# _CONTAINERS, _HOTPLUG and _RELOADS (0 leaves that fault out; RELOADS=plain
# reloads without changing a unit first) from the host (/vm/debian/soak.env). 100 containers by
# default: the guest's 16 vCPUs are emulated by one host thread, and the
# sampler reads every workload every 100 ms. The soak prints a line a
# minute (the bed stops a silent guest). Its report comes as SOAK| lines,
# its CSV rows as SOAK-CSV|soak-summary| and SOAK-CSV|soak-samples| lines
# naming the machine "VM debian (qemu TCG on HOST)"; the check is its exit
# status.
_soak() {
    PINCTL_SOAK_SECS=600
    PINCTL_SOAK_CONTAINERS=100
    PINCTL_SOAK_SEED=""
    PINCTL_SOAK_HOTPLUG=1
    PINCTL_SOAK_RELOADS=1
    # shellcheck disable=SC1091
    [ -f /vm/debian/soak.env ] && . /vm/debian/soak.env
    _host=$(cat /vm/bench-host 2>/dev/null || echo "an unnamed host")
    # Two daemons would hand out the same CPUs.
    systemctl stop pinctld.service
    echo 1048576 > /proc/sys/fs/inotify/max_user_watches
    rm -rf /tmp/soak
    _since=$(date '+%Y-%m-%d %H:%M:%S')
    note "soak for $PINCTL_SOAK_SECS s, $PINCTL_SOAK_CONTAINERS containers, PINCTL_SOAK_HOTPLUG=$PINCTL_SOAK_HOTPLUG PINCTL_SOAK_RELOADS=$PINCTL_SOAK_RELOADS"
    {
        PINCTL_SOAK=1 PINCTL_SOAK_SECS=$PINCTL_SOAK_SECS PINCTL_SOAK_CONTAINERS=$PINCTL_SOAK_CONTAINERS \
            PINCTL_SOAK_SEED=$PINCTL_SOAK_SEED PINCTL_SOAK_HOTPLUG=$PINCTL_SOAK_HOTPLUG PINCTL_SOAK_RELOADS=$PINCTL_SOAK_RELOADS \
            PINCTL_SOAK_PINCTLD=/usr/bin/pinctld PINCTL_SOAK_PINCTL=/usr/bin/pinctl \
            PINCTL_SOAK_OUT=/tmp/soak PINCTL_BENCH_MACHINE="VM $TOPO (qemu TCG on $_host)" \
            /vm/pinctl-soak 2>&1
        echo $? > /tmp/soak.rc
    } | sed -u 's/^/SOAK| /'
    _rc=$(cat /tmp/soak.rc)
    for _f in soak-summary soak-samples; do
        [ -f "/tmp/soak/$_f.csv" ] && sed "s/^/SOAK-CSV|$_f| /" "/tmp/soak/$_f.csv"
    done
    if [ "$_rc" = 0 ]; then
        pass ran "the soak passed: $(tail -n 1 /tmp/soak/soak-summary.csv 2>/dev/null)"
    else
        fail ran "the soak failed (exit $_rc): its SOAK| lines above"
        # The soak's daemon logs to the journal (its socket exists): its
        # messages with their fields (cgroup, unit, cpus, error, ...).
        journalctl --no-pager -b --since "$_since" -t pinctld -n 400 -o json |
            jq -r '[(.__REALTIME_TIMESTAMP | tonumber / 1e6 | strftime("%T")), ._PID, .MESSAGE]
                + [to_entries[] | select((.key | test("^[A-Z][A-Z_]*$")) and (.key | IN("MESSAGE",
                "PRIORITY", "SYSLOG_IDENTIFIER", "CODE_FILE", "CODE_LINE", "TARGET") | not))
                | "\(.key)=\(.value)"] | join(" ")' | sed 's/^/LOG| /'
    fi
    systemctl start pinctld.service
}
if [ "$HIER" = v2 ]; then
    _soak
else
    note "the soak runs on the cgroup v2 boot only"
fi
