# The watchdog: a daemon stopped with SIGSTOP sends no WATCHDOG=1; after
# WatchdogSec (30 s) systemd aborts it and, as a failure, restarts it; the
# new daemon finds the pins in the live cgroups and keeps them. Then the
# loop alone is wedged: the daemon names it before the kill.
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

# The loop alone wedged (the test hook, SIGUSR2, set through a drop-in),
# the process alive: before systemd's watchdog kills it, the daemon's own
# stall report names the event and what the loop's thread waits in (here
# a sleep), a quarter of WatchdogSec after its last sign of life.
mkdir -p /run/systemd/system/pinctld.service.d
printf '[Service]\nEnvironment=PINCTL_TEST_WEDGE=1\n' >/run/systemd/system/pinctld.service.d/wedge.conf
systemctl daemon-reload
systemctl restart pinctld.service
N1=$(unit_prop NRestarts); P1=$(unit_prop MainPID)
kill -USR2 "$P1"
_restarted_again() { [ "$(unit_prop NRestarts)" -gt "$N1" ] && [ "$(systemctl is-active pinctld.service)" = active ]; }
if wait_for 120 _restarted_again; then
    pass wedge-restarted "NRestarts $N1 -> $(unit_prop NRestarts), pid $P1 -> $(unit_prop MainPID)"
else
    fail wedge-restarted "NRestarts $(unit_prop NRestarts), $(systemctl is-active pinctld.service), pid $(unit_prop MainPID)"
fi
# The report's line comes before systemd's kill in the journal.
_stall_named() {
    journalctl -b -u pinctld.service --no-pager -o cat |
        grep -e "the event loop has been handling one event (wedge (test hook))" -e "Watchdog timeout" |
        tail -n 2 | head -n 1 | grep "wedge (test hook)"
}
check stall-named "the daemon named the wedged event before the watchdog's kill" _stall_named
rm -f /run/systemd/system/pinctld.service.d/wedge.conf
systemctl daemon-reload
systemctl restart pinctld.service
expect_stays pin-kept-again "$X" eff "$G" 2
