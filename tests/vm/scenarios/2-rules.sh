# Scenario 2: a [[rule]] (hpc.slice/job-*.scope, 2 CPUs) and the
# user.pinctl.cpus xattr pin cgroups outside Kubernetes; an xattr set on a
# running container pins it; "0" opts a cgroup out (left as it was). The rule's
# scopes are made empty in v1 (by hand, not by runc): the daemon must fill
# them before a task can join.
write_config 1h
daemon_start || return
ALL=$(online)
container systemd burstable 1; B=$APP; B_PID=$APP_PID
container cgroupfs besteffort 2; E_PID=$APP_PID

mkcg hpc.slice/job-1.scope empty
J1_PID=$(spawn hpc.slice/job-1.scope)
pin rule-pinned hpc.slice/job-1.scope 2; X1=$GOT
OTHERS=""
check rule-aligned "the rule's 2 CPUs" aligned "$X1" 2
expect rule-process "$X1" allowed "$J1_PID"

# The xattr beats the rule.
mkcg hpc.slice/job-2.scope empty
setx hpc.slice/job-2.scope 3
J2_PID=$(spawn hpc.slice/job-2.scope)
pin xattr-pinned hpc.slice/job-2.scope 3; X2=$GOT
OTHERS=$X1
check xattr-aligned "the xattr's 3 CPUs" aligned "$X2" 3
expect xattr-process "$X2" allowed "$J2_PID"

# An xattr set on a running burstable container.
setx "$B" 1
pin xattr-running-pinned "$B" 1; X3=$GOT
OTHERS=$(cl union "$X1" "$X2")
check xattr-running-aligned "1 CPU" aligned "$X3" 1
expect xattr-running-process "$X3" allowed "$B_PID"

# "0" beats the rule: the job is left alone (it has its parent's CPUs, as
# before the daemon saw it). On cgroupfs the xattr can only be set after the
# mkdir, so the daemon may see the rule first and must undo what it did.
mkcg hpc.slice/job-3.scope
setx hpc.slice/job-3.scope 0
J3_PID=$(spawn hpc.slice/job-3.scope)
expect opted-out-left-alone "$ALL" allowed "$J3_PID"

check disjoint "no CPU in two exclusive sets" disjoint "$X1" "$X2" "$X3"
EX=$(cl union "$(cl union "$X1" "$X2")" "$X3")
shared_ok shared-lose "$EX" besteffort=$E_PID system=$SYS_PID
expect_stays opted-out-stays-alone "$ALL" allowed "$J3_PID" 1
expect hpc.slice-not-shrunk "$ALL" eff hpc.slice

rmcg hpc.slice/job-1.scope hpc.slice/job-2.scope
shared_ok jobs-gone "$X3" besteffort=$E_PID system=$SYS_PID

# A reload (SIGHUP). A rule added to the file pins a task already running in
# a slice the daemon did not watch; a file with an error changes nothing; the
# rule taken out again gives the task back its parent's CPUs.
mkcg batch.slice
mkcg batch.slice/task-1.scope
T_PID=$(spawn batch.slice/task-1.scope)
expect reload-before "$ALL" allowed "$T_PID"
write_config 1h '[[rule]]
match = "batch.slice/task-*.scope"
cpus = 1'
kill -HUP "$DPID"
pin reload-rule-pins batch.slice/task-1.scope 1; X4=$GOT
expect reload-rule-process "$X4" allowed "$T_PID"
echo 'no_such_key = 1' >> "$CONFIG"
kill -HUP "$DPID"
_logged() { grep -q "$1" "$LOG"; }
if wait_for "$WAIT" _logged "configuration not reloaded"; then
    pass reload-bad-file-refused "the error is logged"
else
    fail reload-bad-file-refused "no \"configuration not reloaded\" in the daemon's log"
fi
expect_stays reload-bad-file-changes-nothing "$X4" allowed "$T_PID" 1
check reload-bad-file-daemon-runs "the daemon runs on" kill -0 "$DPID"
write_config 1h
kill -HUP "$DPID"
expect reload-rule-removed "$ALL" allowed "$T_PID"
shared_ok reload-shared "$X3" besteffort=$E_PID system=$SYS_PID
