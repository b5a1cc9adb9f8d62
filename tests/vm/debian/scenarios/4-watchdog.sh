# The watchdog: a daemon stopped with SIGSTOP sends no WATCHDOG=1; after
# WatchdogSec (30 s) systemd aborts it and, as a failure, restarts it; the
# new daemon finds the pins in the live cgroups and keeps them.
N0=$(unit_prop NRestarts); P0=$(unit_prop MainPID)
kill -STOP "$P0"
_restarted() { [ "$(unit_prop NRestarts)" -gt "$N0" ] && [ "$(systemctl is-active pinctld.service)" = active ]; }
if wait_for 120 _restarted; then
    pass restarted "NRestarts $N0 -> $(unit_prop NRestarts), pid $P0 -> $(unit_prop MainPID)"
else
    fail restarted "NRestarts $(unit_prop NRestarts), $(systemctl is-active pinctld.service), pid $(unit_prop MainPID)"
fi
_timeout_logged() { journalctl -b -u pinctld.service --no-pager | grep -m1 -i 'watchdog timeout'; }
check watchdog-logged "systemd logged the watchdog timeout" _timeout_logged
expect_stays pin-kept "$X" eff "$G" 2
expect_stays rule-kept "$R" eff hpc.slice/job-1.scope 1
expect process-kept "$X" allowed "$G_PID"
