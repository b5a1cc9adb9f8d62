# Scenario 13: isolation = "partition" on a real kernel. On a kernel with
# remote partitions (the root's cpuset.cpus.isolated, Linux 6.7+; the bed
# boots Debian's 6.12 for it) a Guaranteed container's cgroup becomes an
# isolated partition: its CPUs granted by cpuset.cpus.exclusive down its
# path, cpuset.cpus.partition "isolated", cpuset.cpus.exclusive.effective
# its CPUs, the root's cpuset.cpus.isolated listing them and every other
# cgroup's effective set without them. A partition someone else makes
# invalid (its pod's grant shrunk) is found at the next round of checks,
# undone and listed as failing while the container stays pinned; a reload
# off and on makes it again; a restart of the daemon leaves it alone. A CPU of the partition taken offline leaves a
# consistent state; the container's end clears every grant. On cgroup v1
# and older kernels (6.1) the setting is refused with a Config: line in
# `pinctl status` and the container is pinned all the same.
write_config 1h 'isolation = "partition"
watchdog_interval = "1s"'
daemon_start || return

POD=$(pod systemd guaranteed "$(uid systemd 30)")
mkcg "$POD"
limit "$POD" 2
APP=$(ctr "$POD" "$(cid 61)")
mkcg "$APP"
limit "$APP" 2
T_PID=$(spawn "$APP")
pin part-pinned "$APP" 2; X=$GOT

# part REL: REL's partition type.
part() { cat "$CS/$1/cpuset.cpus.partition" 2>/dev/null; }
_part_is() { [ "$(part "$1")" = "$2" ]; }
# part_is NAME REL WANT: waits until REL's partition type reads WANT.
part_is() {
    if wait_for "$WAIT" _part_is "$2" "$3"; then pass "$1" "$2: $3"; else fail "$1" "$2: expected $3 got $(part "$2")"; fi
}
# grants REL: cpuset.cpus.exclusive of REL and of each ancestor, top first.
grants() {
    _acc=""; _out=""
    for _p in $(echo "$1" | tr / ' '); do
        _acc=${_acc:+$_acc/}$_p
        _out="$_out $(cat "$CS/$_acc/cpuset.cpus.exclusive" 2>/dev/null)"
    done
    echo "$_out" | sed 's/^ //'
}
_grants_are() { [ "$(grants "$1")" = "$2" ]; }
part_line() { pinctl status 2>&1 | grep '^Partitions:'; }

if [ "$HIER" = v2 ] && [ -e "$CS/cpuset.cpus.isolated" ]; then
    part_is part-isolated "$APP" isolated
    _g="$X $X $X"
    if wait_for "$WAIT" _grants_are "$APP" "$_g"; then
        pass part-grants "cpuset.cpus.exclusive down the path: $(grants "$APP")"
    else
        fail part-grants "expected '$_g' got '$(grants "$APP")'"
    fi
    check part-exclusive-effective "cpuset.cpus.exclusive.effective $(cat "$CS/$APP/cpuset.cpus.exclusive.effective")" \
        [ "$(cl norm "$(cat "$CS/$APP/cpuset.cpus.exclusive.effective")")" = "$X" ]
    check part-root-isolated "the root's cpuset.cpus.isolated: $(cat "$CS/cpuset.cpus.isolated")" \
        [ "$(cl norm "$(cat "$CS/cpuset.cpus.isolated")")" = "$X" ]
    check part-others-without "the root's effective $(eff ""), system.slice's $(eff system.slice), the pod's $(eff "$POD")" \
        [ -z "$(cl inter "$(eff "")" "$X")" -a -z "$(cl inter "$(eff system.slice)" "$X")" -a -z "$(cl inter "$(eff "$POD")" "$X")" ]
    expect part-task "$X" allowed "$T_PID"
    check part-status "$(part_line)" sh -c "pinctl status 2>&1 | grep -q '^Partitions: *1 workload cgroup isolated (CPUs $X)'"
    check part-verify "pinctl verify: $(pinctl verify 2>&1 | tail -n 1)" pinctl verify

    # Someone shrinks the pod's grant: the kernel keeps the partition
    # "isolated" with fewer CPUs (6.12), and the container runs on those
    # alone; the daemon finds it at its next round of checks
    # (cpuset.cpus.exclusive.effective), undoes it and lists it as
    # failing; the container is back on its cpuset's CPUs.
    _first=$(cl list "$X" | cut -d' ' -f1)
    echo "$_first" > "$CS/$POD/cpuset.cpus.exclusive"
    note "the pod's grant shrunk to $_first: the container's partition reads '$(part "$APP")'"
    part_is part-invalid-undone "$APP" member
    if wait_for "$WAIT" _grants_are "$APP" "  "; then
        pass part-invalid-grants-cleared "grants: '$(grants "$APP")'"
    else
        fail part-invalid-grants-cleared "grants: '$(grants "$APP")'"
    fi
    check part-invalid-listed "$(pinctl status 2>&1 | grep -A1 '^Partitions:' | tr '\n' ' ')" \
        sh -c "pinctl status 2>&1 | grep -q '1 failing'"
    expect part-invalid-pinned "$X" eff "$APP"
    expect part-invalid-task "$X" allowed "$T_PID"
    sleep 2
    check part-invalid-not-retried "after 2 rounds of checks: $(part "$APP")" [ "$(part "$APP")" = member ]

    # A reload off then on tries again.
    write_config 1h 'isolation = "none"
watchdog_interval = "1s"'
    kill -HUP "$DPID"
    sleep 1
    write_config 1h 'isolation = "partition"
watchdog_interval = "1s"'
    kill -HUP "$DPID"
    part_is part-made-again "$APP" isolated

    # A stop leaves the partition; a restart leaves one still wanted alone
    # (it learns the kernel has partitions before it releases anything).
    daemon_stop
    check part-stop-leaves "partition $(part "$APP") after a stop" [ "$(part "$APP")" = isolated ]
    daemon_start || return
    sleep 2
    _m=$(pinctl events 2>&1 | grep -c 'cpuset.cpus.partition = member')
    check part-restart-kept "partition $(part "$APP"), $_m writes of member since the restart" [ "$(part "$APP")" = isolated -a "$_m" = 0 ]

    # A CPU of the partition taken offline: the kernel makes the partition
    # invalid; the daemon moves the container or falls back, and either way
    # the kernel and the status agree.
    _last=$(cl list "$X" | tr ' ' '\n' | tail -n 1)
    if [ -e "/sys/devices/system/cpu/cpu$_last/online" ]; then
        cpu_online "$_last" 0
        _consistent() {
            _e=$(eff "$APP")
            case "$(part "$APP")" in
                # The kernel keeps an offline CPU in the grant and the
                # isolated list (seen on 6.12): compared on online CPUs.
                isolated) [ "$(cl inter "$(cat "$CS/$APP/cpuset.cpus.exclusive.effective")" "$(online)")" = "$(cl norm "$_e")" ] \
                    && [ "$(cl inter "$(cat "$CS/cpuset.cpus.isolated")" "$(online)")" = "$(cl norm "$_e")" ] ;;
                member) [ -z "$(cat "$CS/$APP/cpuset.cpus.exclusive")" ] && [ -z "$(cat "$CS/cpuset.cpus.isolated")" ] ;;
                *) return 1 ;;
            esac
        }
        if wait_for "$WAIT" _consistent; then
            pass part-offline "CPU $_last offline: partition $(part "$APP"), effective $(eff "$APP"), isolated '$(cat "$CS/cpuset.cpus.isolated")'; $(part_line)"
        else
            fail part-offline "CPU $_last offline: partition $(part "$APP"), effective $(eff "$APP"), exclusive.effective $(cat "$CS/$APP/cpuset.cpus.exclusive.effective"), isolated '$(cat "$CS/cpuset.cpus.isolated")'"
        fi
        cpu_online "$_last" 1
        if wait_for "$WAIT" _consistent; then
            pass part-online "CPU $_last back: partition $(part "$APP"), effective $(eff "$APP"); $(part_line)"
        else
            fail part-online "CPU $_last back: partition $(part "$APP"), effective $(eff "$APP"), isolated '$(cat "$CS/cpuset.cpus.isolated")'"
        fi
    fi

    # The container ends: every grant cleared, nothing isolated.
    kill_in "$CS/$APP"
    rmcg "$APP"
    if wait_for "$WAIT" _grants_are "$POD" " "; then
        pass part-end-grants "grants: '$(grants "$POD")'"
    else
        fail part-end-grants "grants left: '$(grants "$POD")'"
    fi
    check part-end-isolated "the root's cpuset.cpus.isolated: '$(cat "$CS/cpuset.cpus.isolated")'" [ -z "$(cat "$CS/cpuset.cpus.isolated")" ]
else
    # Refused: a Config: line, and the pin all the same.
    _c=$(pinctl status 2>&1 | grep '^Config:.*isolation')
    check part-refused "${_c:-no Config: line}" [ -n "$_c" ]
    expect part-refused-pinned "$X" allowed "$T_PID"
    if [ "$HIER" = v2 ]; then
        check part-refused-untouched "partition $(part "$APP")" [ "$(part "$APP")" = member ]
    fi
fi
rmcg "$POD"
