# Scenario 19: the README's "A five-minute tour", as the README writes it,
# run by tests/tour/run (the host's test, tests/tour/main.rs, runs it on
# the host's hierarchy; CI's is v1). tests/vm/run packs the README and the
# runner as /vm/README.md and /vm/tour/run. One check per check of the
# runner: its steps ran, each `$ pinctl` example prints what the README
# shows, the sleep runs on the CPU status names, and the last step cleans up.
#
# The guest's busybox has what the tour uses but sudo and setfattr: a sudo
# that runs its command as it is (the guest is root), and a setfattr that
# takes the README's form (-n NAME -v VALUE PATH) to vm-helper setxattr.
mkdir -p /tmp/tour-bin
printf '#!/bin/sh\nexec "$@"\n' >/tmp/tour-bin/sudo
cat >/tmp/tour-bin/setfattr <<'SHIM'
#!/bin/sh
if [ $# -ne 5 ] || [ "$1" != -n ] || [ "$3" != -v ]; then
    echo "setfattr (the VM bed's stand-in): only -n NAME -v VALUE PATH, not: $*" >&2
    exit 2
fi
exec vm-helper setxattr "$5" "$2" "$4"
SHIM
chmod +x /tmp/tour-bin/sudo /tmp/tour-bin/setfattr
# The runner's pause, a second after each command: the daemon took about
# 0.1 s to act under emulation.
PATH=/tmp/tour-bin:$PATH TOUR_PAUSE=1 sh /vm/tour/run /vm/README.md /tmp/tour >/tmp/tour.out 2>&1
rc=$?
checks=0
while IFS= read -r line; do
    case $line in
        "ok "*) line=${line#ok } && pass "${line%%: *}" "${line#*: }" ;;
        "not ok "*) line=${line#not ok } && fail "${line%%: *}" "${line#*: }" ;;
        *) continue ;;
    esac
    checks=$((checks + 1))
done </tmp/tour.out
[ "$checks" -gt 0 ] || fail run "tests/tour/run exited $rc and checked nothing"
# After a failing check the bed shows the daemon's log: here, the tour's
# transcript (its daemon's log is in it) and the runner's checks.
{
    echo "---- tests/tour/run's output (exit status $rc)"
    cat /tmp/tour.out
} >>"$LOG"
