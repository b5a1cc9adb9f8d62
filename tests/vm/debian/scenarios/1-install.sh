# The operator's install: `dpkg -i` creates the group, enables the unit and
# does not start it (the configuration is to be reviewed first); `systemctl
# start` returns once the daemon is ready: with Type=notify systemd has it
# active only after READY=1, which comes after the first full reconcile; its
# STATUS= line is the unit's status text. The unit's sandbox (read-only
# system, one capability, a system-call filter) lets it read sysfs, procfs,
# the cgroups and their xattrs, and write cpusets (scenario pin).
_dpkg() { dpkg -i /vm/debian/pinctl.deb >/run/dpkg.out 2>&1 || { tail -n 5 /run/dpkg.out; return 1; }; }
check dpkg-install "dpkg -i pinctl.deb" _dpkg
_enabled() { [ "$(systemctl is-enabled pinctld.service 2>&1)" = enabled ] || systemctl is-enabled pinctld.service; }
check enabled "the package enables pinctld.service" _enabled
_inactive() { [ "$(systemctl is-active pinctld.service)" = inactive ] || systemctl is-active pinctld.service; }
check not-started "the package does not start it" _inactive
_group() { getent group pinctl >/dev/null || echo "no group pinctl"; }
check group "the package creates the group pinctl" _group

_start() { systemctl start pinctld.service 2>&1; }
check start "systemctl start pinctld" _start
_active() { [ "$(systemctl is-active pinctld.service)" = active ] || echo "$(systemctl is-active pinctld.service) ($(unit_prop Result))"; }
check active "active once systemctl start returned (READY=1)" _active
# The daemon logs "first reconcile done" just before READY=1; systemd
# enters "active" when READY=1 arrives. The message's time is when the
# daemon sent it (_SOURCE_REALTIME_TIMESTAMP: journald may take it in
# later), the unit's is systemd's (D-Bus, µs).
_ready_after_reconcile() {
    _at=$(journalctl -b -u pinctld.service -o json --no-pager | grep '"MESSAGE":"first reconcile done"' | head -n 1 |
        sed -n 's/.*"_SOURCE_REALTIME_TIMESTAMP":"\([0-9]*\)".*/\1/p')
    _active_at=$(busctl get-property org.freedesktop.systemd1 /org/freedesktop/systemd1/unit/pinctld_2eservice \
        org.freedesktop.systemd1.Unit ActiveEnterTimestamp | cut -d' ' -f2)
    [ -n "$_at" ] || { echo "no \"first reconcile done\" in the journal"; return 1; }
    [ "$_at" -le "$_active_at" ] || { echo "reconcile sent at $_at µs, active at $_active_at µs"; return 1; }
    echo "reconcile at $_at µs, active $((_active_at - _at)) µs later"
}
check ready-after-reconcile "READY=1 after the first reconcile" _ready_after_reconcile
_status_text() { _t=$(unit_prop StatusText); echo "$_t"; echo "$_t" | grep -q "shared pool"; }
check status-text "systemctl shows the STATUS= line" _status_text
