# `pinctl run` under systemd with the .deb (issue #33): [run] turned on for
# the group hpc, the daemon restarted. root and alice (in hpc) run commands
# on CPUs of their own; bob is refused, told which group would do; two runs
# at once get disjoint CPUs; an over-ask is refused with the free count; a
# daemon restart keeps a running command where it is; a run's cgroup goes
# once its command ended.
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
_in() { grep -qx "$2" "$CS/pinctl.slice/$1/cgroup.procs" 2>/dev/null; }
wait_for 30 _in alice-1 "$AL_PID"
check run-alice-joined "alice's run: its cgroup holds her process ($(cat /run/run-alice.err))" _in alice-1 "$AL_PID"
pin run-alice-pinned pinctl.slice/alice-1 2; AL=$GOT
if [ "$(cl count "$AL")" = 2 ]; then
    expect run-alice-process "$AL" allowed "$AL_PID"
    check run-alice-apart "alice's CPUs are no one else's" disjoint "$AL" "$EXCL"
fi

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

systemctl restart pinctld.service
wait_for 20 _sock
[ -z "$AL" ] || expect_stays run-after-restart "$AL" allowed "$AL_PID" 2

kill "$AL_PID" 2>/dev/null
_gone() { [ ! -d "$CS/pinctl.slice/alice-1" ]; }
wait_for 40 _gone
check run-alice-gone "alice's run ended: its cgroup is removed" _gone
shared_ok run-released "$EXCL" burstable=$B_PID

cp /run/pinctld.toml.before "$CONFIG"
systemctl restart pinctld.service
