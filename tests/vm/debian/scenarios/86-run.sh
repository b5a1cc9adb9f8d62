# `pinctl run` under systemd with the .deb (issue #33): [run] turned on for
# the group hpc, the daemon restarted. root and alice (in hpc) run commands
# on CPUs of their own; bob is refused, told which group would do; two runs
# at once get disjoint CPUs; an over-ask is refused with the free count;
# --wait waits in line, in order, and a client killed in line leaves
# nothing; a command's child keeps the run after the command exits; a
# daemon restart keeps a running command where it is; a run's cgroup goes
# once its command ended. Under systemd each run is a transient scope,
# pinctl.slice/run-<name>.scope.
EXCL=${EXCL:-$X}
getent group hpc >/dev/null || groupadd hpc
id alice >/dev/null 2>&1 || useradd -M -G hpc alice
id bob >/dev/null 2>&1 || useradd -M bob
cp "$CONFIG" /run/pinctld.toml.before
# The shipped file's [run] table, turned on for the group hpc.
sed -i 's/^enabled = false$/enabled = true/; s/^groups = \[\]$/groups = ["hpc"]/' "$CONFIG"
check run-restart "systemctl restart pinctld with [run] on" systemctl restart pinctld.service
_sock() { [ -S /run/pinctl/run.sock ]; }
wait_for 20 _sock
check run-socket "the run socket is there, reachable by name ($(stat -c %a /run/pinctl) /run/pinctl)" _sock

_root_sees() {
    pinctl run -n 2 -- sh -c 'echo "$PINCTL_CPUS $(grep Cpus_allowed_list /proc/self/status | cut -f2)"' >/run/run-root.out 2>&1 ||
        { cat /run/run-root.out; return 1; }
    read -r _said _got </run/run-root.out
    [ "$_said" = "$_got" ] && [ "$(cl count "$_got")" = 2 ] && [ -z "$(cl inter "$_got" "$EXCL")" ] ||
        { cat /run/run-root.out; return 1; }
    echo "root's command on $_got"
}
check run-root "root's command runs on 2 CPUs of its own" _root_sees

# setpriv execs (runuser would stay the parent): $! is the client, then
# the command.
setpriv --reuid=alice --regid=alice --init-groups pinctl run -n 2 --name alice-1 -- sleep 300 2>/run/run-alice.err &
AL_PID=$!
_in() { grep -qx "$2" "$CS/pinctl.slice/run-$1.scope/cgroup.procs" 2>/dev/null; }
wait_for 30 _in alice-1 "$AL_PID"
check run-alice-joined "alice's run: its cgroup holds her process ($(cat /run/run-alice.err))" _in alice-1 "$AL_PID"
pin run-alice-pinned pinctl.slice/run-alice-1.scope 2; AL=$GOT
if [ "$(cl count "$AL")" = 2 ]; then
    expect run-alice-process "$AL" allowed "$AL_PID"
    check run-alice-apart "alice's CPUs are no one else's" disjoint "$AL" "$EXCL"
fi

# A second run while alice's holds: CPUs of its own, none of hers.
_second() {
    pinctl run -n 2 --name second -- grep Cpus_allowed_list /proc/self/status >/run/run-second.out 2>&1 ||
        { cat /run/run-second.out; return 1; }
    _got=$(cut -f2 /run/run-second.out)
    [ "$(cl count "$_got")" = 2 ] && [ -z "$(cl inter "$_got" "$AL")" ] && [ -z "$(cl inter "$_got" "$EXCL")" ] ||
        { cat /run/run-second.out; return 1; }
    echo "second run on $_got, alice's on $AL"
}
check run-two-at-once "two runs at once get disjoint CPUs" _second

_bob() {
    ! setpriv --reuid=bob --regid=bob --init-groups pinctl run -n 1 -- true >/run/run-bob.out 2>&1 &&
        grep "may not ask for CPUs: only root and members of the groups hpc may" /run/run-bob.out
}
check run-bob-refused "bob is refused, told which group would do" _bob
_over() {
    ! pinctl run -n 16 -- true >/run/run-over.out 2>&1 && grep "16 CPUs asked, [0-9]* free; held by" /run/run-over.out
}
check run-over-ask "an over-ask is refused with the free count and who holds the rest" _over
shared_ok run-shared "$(cl union "$EXCL" "$AL")" burstable=$B_PID

# --wait: the free CPUs all taken by "big" until the checks let it end
# (/run/big.done: a fixed time was too short under a loaded host's
# emulation); a waiting ask is told it waits, then runs once they are
# back; a waiting client killed leaves the line with nothing held; an ask
# without --wait meanwhile is refused, told that one waits before it.
FREE=$(pinctl run -n 16 -- true 2>&1 | sed -n 's/.*asked, \([0-9]*\) free.*/\1/p')
rm -f /run/big.done
pinctl run -n "${FREE:-1}" --name big -- sh -c 'until [ -e /run/big.done ]; do sleep 0.2; done' >/dev/null 2>&1 &
_big() { [ -d "$CS/pinctl.slice/run-big.scope" ]; }
wait_for 20 _big
pinctl run -n 1 --wait 60s --name waiter -- grep Cpus_allowed_list /proc/self/status >/run/run-wait.out 2>/run/run-wait.err &
W_PID=$!
pinctl run -n 1 --wait 60s --name doomed -- sleep 100 >/dev/null 2>&1 &
D_PID=$!
_told_wait() { grep -q "waiting for CPUs" /run/run-wait.err; }
wait_for 10 _told_wait
check run-wait-told "a waiting ask is told so ($(cat /run/run-wait.err))" _told_wait
sleep 1
kill -9 "$D_PID" 2>/dev/null
# One or two ahead, as the daemon has noticed the killed client or not yet.
_behind() { ! pinctl run -n 1 -- true >/run/run-behind.out 2>&1 && grep -E "waits? before it" /run/run-behind.out; }
check run-wait-in-order "an ask without --wait is refused while others wait" _behind
touch /run/big.done
# (check runs its command in a subshell, where `wait` cannot wait for it.)
_ended() { ! kill -0 "$1" 2>/dev/null; }
wait_for 40 _ended "$W_PID"
_waited() {
    _got=$(cut -f2 /run/run-wait.out)
    [ "$(cl count "$_got")" = 1 ] && [ -z "$(cl inter "$_got" "$EXCL")" ] || { cat /run/run-wait.out; return 1; }
    echo "ran on $_got once big ended"
}
check run-wait-runs "--wait runs the command once CPUs free up" _waited
_no_doomed() {
    [ ! -d "$CS/pinctl.slice/run-doomed.scope" ] && ! pinctl status 2>/dev/null | grep -q "run:doomed"
}
check run-killed-waiting "a client killed while waiting leaves nothing" _no_doomed

# An MPI launcher's way: the command starts a child and exits; the child
# keeps the run (its CPUs, its cgroup) until it ends too.
pinctl run -n 1 --name mpi -- sh -c 'sleep 6 >/dev/null 2>&1 & echo $!' >/run/run-mpi.out 2>&1
MPI_CHILD=$(cat /run/run-mpi.out)
_mpi_held() { grep -qx "$MPI_CHILD" "$CS/pinctl.slice/run-mpi.scope/cgroup.procs" 2>/dev/null; }
check run-child-keeps "the command exited; its child keeps the run" _mpi_held
_mpi_gone() { [ ! -d "$CS/pinctl.slice/run-mpi.scope" ]; }
wait_for 40 _mpi_gone
check run-child-ends "the run ends when the child ends too" _mpi_gone

systemctl restart pinctld.service
wait_for 20 _sock
[ -z "$AL" ] || expect_stays run-after-restart "$AL" allowed "$AL_PID" 2

kill "$AL_PID" 2>/dev/null
_gone() { [ ! -d "$CS/pinctl.slice/run-alice-1.scope" ]; }
wait_for 40 _gone
check run-alice-gone "alice's run ended: its cgroup is removed" _gone
shared_ok run-released "$EXCL" burstable=$B_PID

cp /run/pinctld.toml.before "$CONFIG"
systemctl restart pinctld.service
