# systemctl stop and dpkg --purge. The daemon exits on SIGTERM and leaves
# every cpuset as it is: a pinned workload keeps its CPUs and the shared
# pool stays narrowed, because a stop must never move running workloads (the
# next start finds the pins in the live cgroups). The purge removes the
# unit, the configuration and the state; the cgroups stay as they were.
_stop() { systemctl stop pinctld.service 2>&1; }
check stop "systemctl stop pinctld" _stop
_stopped_clean() { [ "$(unit_prop Result)" = success ] && [ "$(systemctl is-active pinctld.service)" = inactive ] || echo "$(systemctl is-active pinctld.service) ($(unit_prop Result))"; }
check stopped "inactive, result success" _stopped_clean
expect_stays pin-after-stop "$X" allowed "$G_PID" 1
# shellcheck disable=SC2086
shared_ok shared-after-stop "$(cl union "$X" "$R")" burstable=$B_PID $SYSTEM

_purge() { dpkg --purge pinctl >/run/dpkg.out 2>&1 || { tail -n 5 /run/dpkg.out; return 1; }; }
check purge "dpkg --purge pinctl" _purge
_removed() {
    for _p in /lib/systemd/system/pinctld.service /usr/bin/pinctld /etc/pinctl /var/lib/pinctl; do
        [ ! -e "$_p" ] || { echo "$_p is still there"; return 1; }
    done
    ! systemctl cat pinctld.service >/dev/null 2>&1 || { echo "systemd still knows pinctld.service"; return 1; }
}
check purged "unit, binaries, configuration and state are gone" _removed
expect_stays pin-after-purge "$X" allowed "$G_PID" 1
