# Scenario 12: irq_affinity on a real kernel. A rule's job pins 2 CPUs;
# every interrupt under /proc/irq then keeps off them, or the kernel refuses
# to move it (checked by a write of our own here, and listed by `pinctl
# status`): the serial port's affinity and the CPU the kernel delivers it
# on (effective_affinity_list), and default_smp_affinity (a mask). A
# restart of the daemon keeps the steering; the job's end puts every
# interrupt back as it was before the daemon started (its state file kept
# what each had). A reload that turns the switch off puts them back too.
write_config 1h 'irq_affinity = true
watchdog_interval = "1s"'

# Every interrupt line and its affinity, one "N LIST" line each.
irqs() { for _d in /proc/irq/[0-9]*; do echo "${_d##*/} $(cat "$_d/smp_affinity_list")"; done; }
# The default affinity as a CPU list (it is a hex mask: "ff,ffffffff").
def_list() {
    cl norm "$(tr -d ',\n' </proc/irq/default_smp_affinity | awk '{
        n = length($0); s = ""
        for (i = n; i >= 1; i--) {
            d = index("0123456789abcdef", tolower(substr($0, i, 1))) - 1
            for (b = 0; b < 4; b++) { if (d % 2) s = s (s == "" ? "" : ",") ((n - i) * 4 + b); d = int(d / 2) }
        }
        print s }')"
}
BEFORE=$(irqs)
DEF_BEFORE=$(def_list)
_serial=$(awk -F: '/ttyS0|serial/ { gsub(/ /, "", $1); print $1; exit }' /proc/interrupts)

# stray SET: the interrupts whose affinity meets SET, space-separated.
stray() {
    irqs | while read -r _n _l; do
        [ -n "$(cl inter "$_l" "$1")" ] && printf '%s ' "$_n"
    done
}
# refuses N SET: the kernel refuses to move interrupt N off SET (a write of
# its list minus SET fails).
refuses() {
    _l=$(cat "/proc/irq/$1/smp_affinity_list")
    _to=$(cl minus "$_l" "$2"); [ -n "$_to" ] || _to=$(cl minus "$(online)" "$2")
    ! echo "$_to" > "/proc/irq/$1/smp_affinity_list" 2>/dev/null
}
_same_as_before() { [ "$(irqs)" = "$BEFORE" ]; }
# The status's Interrupts: line.
irq_line() { pinctl status 2>&1 | grep '^Interrupts:'; }
# _passed SET: the daemon's last pass kept interrupts off SET.
_passed() { case "$(irq_line);" in *"kept off CPUs $1;"*) return 0 ;; esac; return 1; }
# The interrupts the status lists as refused, space-separated.
refused() { irq_line | sed -n 's/.*refused: \([0-9, ]*\).*/\1/p' | tr -d ','; }

daemon_start || return
mkcg hpc.slice/job-1.scope empty
J_PID=$(spawn hpc.slice/job-1.scope)
pin irq-pinned hpc.slice/job-1.scope 2; X=$GOT

# Once the daemon's pass is done, what is left on X must be what the
# kernel refuses.
wait_for "$WAIT" _passed "$X" || fail irq-pass "no pass over $X: $(irq_line)"
LEFT=$(stray "$X")
_bad=""
for _n in $LEFT; do refuses "$_n" "$X" || _bad="$_bad $_n"; done
check irq-off-exclusive "interrupts on $X: ${LEFT:-none} (each refused by the kernel)" [ -z "$_bad" ]
_refused=" $(refused) "
for _n in $LEFT; do
    case "$_refused" in
        *" $_n "*) pass "irq-status-refused-$_n" "pinctl status lists $_n as refused" ;;
        *) fail "irq-status-refused-$_n" "not in the status: $(irq_line)" ;;
    esac
done
# Refused for good: rounds of checks (every second here) do not write them
# again, so each is in the audit trail once.
sleep 3
for _n in $LEFT; do
    _tries=$(pinctl events 2>&1 | grep -c "FAILED $_n:")
    check "irq-refused-once-$_n" "interrupt $_n tried $_tries times" [ "$_tries" = 1 ]
done
_d=$(def_list)
check irq-default "default_smp_affinity $_d (was $DEF_BEFORE)" [ -z "$(cl inter "$_d" "$X")" -a -n "$_d" ]
if [ -n "$_serial" ]; then
    _s=$(cat "/proc/irq/$_serial/smp_affinity_list")
    _e=$(cat "/proc/irq/$_serial/effective_affinity_list" 2>/dev/null)
    check irq-serial "serial irq $_serial on $_s, delivered on ${_e:-?}" [ -z "$(cl inter "$_s" "$X")" -a -z "$(cl inter "$_e" "$X")" ]
else
    note "no serial interrupt in /proc/interrupts"
fi

# A restart keeps them off, and keeps what each had.
daemon_stop
daemon_start || return
wait_for "$WAIT" _passed "$X" || fail irq-restart-pass "no pass over $X: $(irq_line)"
check irq-restart-kept "on $X: $(stray "$X")" [ "$(stray "$X")" = "$LEFT" ]

# The job ends: every interrupt as before the daemon started.
kill_in hpc.slice/job-1.scope
rmcg hpc.slice/job-1.scope
if wait_for "$WAIT" _same_as_before; then
    pass irq-put-back "every interrupt as before"
else
    fail irq-put-back "now: $(irqs | tr '\n' ' ' | head -c 300); before: $(echo "$BEFORE" | tr '\n' ' ' | head -c 300)"
fi
_d=$(def_list)
check irq-default-put-back "default_smp_affinity $_d" [ "$_d" = "$DEF_BEFORE" ]

# Pinned again, then a reload turns the switch off: put back.
mkcg hpc.slice/job-2.scope empty
J_PID=$(spawn hpc.slice/job-2.scope)
pin irq-pinned-again hpc.slice/job-2.scope 2; X=$GOT
wait_for "$WAIT" _passed "$X" || fail irq-pass-again "no pass over $X: $(irq_line)"
write_config 1h 'irq_affinity = false'
kill -HUP "$DPID"
if wait_for "$WAIT" _same_as_before; then
    pass irq-reload-off "every interrupt as before"
else
    fail irq-reload-off "now: $(irqs | tr '\n' ' ' | head -c 300)"
fi
kill_in hpc.slice/job-2.scope
rmcg hpc.slice/job-2.scope hpc.slice

# Whatever happened, the next scenario gets interrupts as they were.
echo "$BEFORE" | while read -r _n _l; do
    echo "$_l" > "/proc/irq/$_n/smp_affinity_list" 2>/dev/null
done
