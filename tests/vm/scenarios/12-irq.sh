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

BEFORE=$(irqs)
DEF_BEFORE=$(def_list)
_serial=$(awk -F: '/ttyS0|serial/ { gsub(/ /, "", $1); print $1; exit }' /proc/interrupts)

_same_as_before() { [ "$(irqs)" = "$BEFORE" ]; }

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
