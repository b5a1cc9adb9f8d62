# Workloads beside systemd's own units: pods of both cgroup drivers made as
# the kubelet and runc make them; a Guaranteed container is pinned, and a
# Burstable container and, on v2, systemd's own services (system.slice:
# journald, udevd) lose its CPUs. The journal has the daemon's structured fields
# (tracing-journald's names: F_WORKLOAD, F_CPUS; INFO is priority 5).
# The kubelet makes its pod trees (the daemon then repairs any QoS slice
# that goes missing).
for r in kubepods.slice kubepods.slice/kubepods-burstable.slice kubepods.slice/kubepods-besteffort.slice \
    kubepods kubepods/burstable kubepods/besteffort; do
    [ -d "$CS/$r" ] || mkcg "$r"
done
container systemd burstable 1; B_PID=$APP_PID
container cgroupfs guaranteed 2 2; G=$APP; G_PID=$APP_PID
pin pinned "$G" 2; X=$GOT
expect process "$X" allowed "$G_PID"
J_PID=$(systemctl show -p MainPID --value systemd-journald.service)
U_PID=$(systemctl show -p MainPID --value systemd-udevd.service)
if [ "$HIER" = v2 ]; then
    SYSTEM="journald=$J_PID udevd=$U_PID"
else
    # systemd does not use the v1 cpuset hierarchy: its services stay in
    # the root cpuset, which nothing may narrow, so on v1 they keep every
    # CPU (systemd's CPUAffinity= in system.conf is how to keep them off).
    SYSTEM=""
    _root_cpuset() { grep -q ':cpuset:/$' "/proc/$J_PID/cgroup" || grep cpuset "/proc/$J_PID/cgroup"; }
    check journald-root-cpuset "v1: systemd leaves its services in the root cpuset" _root_cpuset
    _warned() { journalctl -b -u pinctld.service --no-pager | grep -m1 'shared cgroup is not in the cpuset hierarchy'; }
    check unconfined-warning "the daemon says system.slice confines nothing here" _warned
fi
# shellcheck disable=SC2086
shared_ok shared "$X" burstable=$B_PID $SYSTEM

_journal_fields() {
    _line=$(journalctl -b -u pinctld.service -o json --no-pager | grep '"MESSAGE":"exclusive CPUs"' | tail -n 1)
    [ -n "$_line" ] || { echo "no \"exclusive CPUs\" message"; return 1; }
    # tracing-journald: INFO is priority 5 (notice), fields get F_.
    for _f in '"SYSLOG_IDENTIFIER":"pinctld"' '"PRIORITY":"5"' '"F_WORKLOAD":"' '"F_CPUS":"'; do
        echo "$_line" | grep -q -- "$_f" || { echo "no $_f in $_line"; return 1; }
    done
    echo "$_line" | grep -o '"F_CPUS":"[^"]*"'
}
check journal-fields "the pin is in the journal with its fields" _journal_fields
