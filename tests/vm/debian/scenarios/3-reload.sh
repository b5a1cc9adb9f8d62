# systemctl reload: a rule added to the configuration takes effect without a
# restart; a broken file fails the reload (ExecReload= runs --check first),
# the daemon keeps running with what it had, and the pins stay.
PID0=$(unit_prop MainPID)
cp "$CONFIG" /run/pinctld.toml.good
cat >> "$CONFIG" <<RULE

[[rule]]
match = "hpc.slice/job-*.scope"
cpus = 1
RULE
_reload() { systemctl reload pinctld.service 2>&1; }
check reload "systemctl reload with a new rule" _reload
mkcg hpc.slice
mkcg hpc.slice/job-1.scope
JOB_PID=$(spawn hpc.slice/job-1.scope)
pin rule-pinned hpc.slice/job-1.scope 1; R=$GOT
expect rule-process "$R" allowed "$JOB_PID"

echo 'reserved_cpus = [' >> "$CONFIG"
_reload_fails() {
    if systemctl reload pinctld.service >/run/reload.out 2>&1; then echo "the reload succeeded"; return 1; fi
    # ExecReload's --check names the file and the line, in the journal.
    journalctl -b -u pinctld.service --no-pager -n 20 | grep -m1 -E 'pinctld\.toml:[0-9]+:[0-9]+' ||
        { echo "no message naming the file and line"; return 1; }
}
check reload-broken "a broken file fails the reload, naming file and line" _reload_fails
_same_daemon() {
    [ "$(systemctl is-active pinctld.service)" = active ] || { echo "not active"; return 1; }
    [ "$(unit_prop MainPID)" = "$PID0" ] || { echo "pid $PID0 became $(unit_prop MainPID)"; return 1; }
}
check still-running "the daemon runs on, the same process" _same_daemon
expect_stays pins-kept "$X" eff "$G" 1
expect_stays rule-kept "$R" eff hpc.slice/job-1.scope 1
cp /run/pinctld.toml.good "$CONFIG"
cat >> "$CONFIG" <<RULE

[[rule]]
match = "hpc.slice/job-*.scope"
cpus = 1
RULE
check reload-fixed "the fixed file reloads" _reload
