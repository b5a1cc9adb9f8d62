# irq_affinity under the packaged unit: the switch turned on by a reload
# (the shipped file has `irq_affinity = false`: the line is changed, as a
# second key would be an error), then a job of the rule of scenario reload
# pins a CPU beside X and R. Every interrupt whose affinity still meets the
# exclusive CPUs must be one the kernel refuses to move (checked by a write
# of our own, from outside the unit's sandbox) and listed as refused by
# `pinctl status`; the guest's virtio-blk has a kernel-managed vector per
# CPU (MSI-X), which refuses with EIO, and a config vector, which moves. The
# serial port's interrupt moves, and is delivered elsewhere;
# default_smp_affinity leaves the exclusive CPUs. The job's end puts back
# what the job's CPU took; turning the switch off by a reload (the file as it
# was) puts every interrupt back as it was before. The unit's mount
# namespace must leave /proc/irq writable and /proc/sys read-only.
cp "$CONFIG" /run/pinctld.toml.irq

# refusal N: why the daemon's write to N failed (the status's JSON).
refusal() { pinctl status --json 2>/dev/null | jq -r --arg n "$1" '.interrupts.refused[]? | select(.irq == $n) | .error' | sed 's/.*: //'; }
# mnt_mode PID PATH: ro or rw, the mount PATH is on in the mount namespace
# of PID (the last of the longest mount points that hold it: one mounted
# over another comes later).
mnt_mode() {
    awk -v p="$2" '{ mp = $5
        if (mp == "/" || p == mp || index(p, mp "/") == 1) {
            if (length(mp) >= best) { best = length(mp); split($6, o, ","); mode = o[1] }
        } } END { print mode }' "/proc/$1/mountinfo"
}
_sandbox() {
    _pid=$(unit_prop MainPID)
    _seen="" _bad=""
    for _p in /proc/irq /proc/sys /proc/sysrq-trigger /sys "$CS"; do
        _m=$(mnt_mode "$_pid" "$_p")
        _seen="$_seen $_p=$_m"
        case "$_p=$_m" in
            /proc/irq=rw | "$CS=rw" | /proc/sys=ro | /proc/sysrq-trigger=ro | /sys=ro) ;;
            *) _bad="$_bad $_p" ;;
        esac
    done
    echo "pid $_pid:$_seen"
    [ -z "$_bad" ]
}
check sandbox "pinctld's mount namespace: /proc/irq and the cgroups writable, /proc/sys and /sys read-only" _sandbox

# Why the unit does not simply add ReadWritePaths=/proc/irq to
# ProtectKernelTunables=yes: a transient unit with both, its mounts and a
# write of the serial port's affinity as it is (a no-op for the kernel).
SERIAL=$(awk '$NF == "ttyS0" { sub(":", "", $1); print $1; exit }' /proc/interrupts)
cat > /run/irq-probe.sh <<'PROBE'
m() { awk -v p="$1" '{ mp = $5; if (mp == "/" || p == mp || index(p, mp "/") == 1) { if (length(mp) >= best) { best = length(mp); split($6, o, ","); mode = o[1] } } } END { print mode }' /proc/self/mountinfo; }
w() { _e=$( { cat "$1" > "$1"; } 2>&1 ) && echo ok || echo "${_e##*: }"; }
echo "/proc/irq=$(m /proc/irq) /proc/sys=$(m /proc/sys), a write to irq $1: $(w "/proc/irq/$1/smp_affinity_list")"
PROBE
note "ProtectKernelTunables=yes with ReadWritePaths=/proc/irq: $(systemd-run --wait --pipe --quiet -p ProtectSystem=strict \
    -p ProtectKernelTunables=yes -p ReadWritePaths=/proc/irq /bin/sh /run/irq-probe.sh "$SERIAL" 2>&1 | tr '\n' ' ')"

BEFORE=$(irqs)
DEF_BEFORE=$(def_list)
if grep -q '^irq_affinity = ' "$CONFIG"; then
    sed -i 's/^irq_affinity = .*/irq_affinity = true/' "$CONFIG"
else
    sed -i '1i irq_affinity = true' "$CONFIG"
fi
check reload-on "systemctl reload with irq_affinity = true" _reload

# X and R are pinned still: the first pass keeps interrupts off them.
if wait_for 30 _passed "$EXCL"; then
    pass irq-pass "$(irq_line)"
else
    fail irq-pass "no pass over $EXCL: $(irq_line)"
fi
MID=$(irqs)
DEF_MID=$(def_list)

mkcg hpc.slice/job-8.scope
JOB8_PID=$(spawn hpc.slice/job-8.scope)
pin irq-pinned hpc.slice/job-8.scope 1; J=$GOT
AWAY=$(cl union "$EXCL" "$J")
if wait_for 30 _passed "$AWAY"; then
    pass irq-pass-job "$(irq_line)"
else
    fail irq-pass-job "no pass over $AWAY: $(irq_line)"
fi

# Each interrupt left on the exclusive CPUs: refused by the kernel (our
# write), and listed by the status with the daemon's error.
LEFT=$(stray "$AWAY")
_refused=" $(refused) "
_bad="" _why=""
for _n in $LEFT; do
    if refuses "$_n" "$AWAY"; then
        _why="$_why $_n($(irq_name "$_n"):$REFUSAL)"
    else
        _bad="$_bad $_n($(irq_name "$_n"))"
    fi
    case "$_refused" in
        *" $_n "*) pass "irq-status-refused-$_n" "pinctl status lists $_n ($(irq_name "$_n")) as refused: $(refusal "$_n")" ;;
        *) fail "irq-status-refused-$_n" "not in the status: $(irq_line)" ;;
    esac
done
check irq-off-exclusive "interrupts on $AWAY:${_why:- none} (each refused by the kernel)" \
    eval '[ -z "$_bad" ] || { echo "the kernel let us move:$_bad"; false; }'
# Refused by the daemon but movable by us: the sandbox, not the kernel.
_wrongly=""
for _n in $(refused); do
    case " $LEFT " in *" $_n "*) ;; *) _wrongly="$_wrongly $_n" ;; esac
done
check irq-refused-by-kernel "every interrupt the status lists as refused is still on $AWAY" \
    eval '[ -z "$_wrongly" ] || { echo "moved since, or refused for another reason:$_wrongly ($(refusal "${_wrongly# }"))"; false; }'

_d=$(def_list)
check irq-default "default_smp_affinity $_d (was $DEF_BEFORE)" [ -n "$_d" -a -z "$(cl inter "$_d" "$AWAY")" ]
if [ -n "$SERIAL" ]; then
    _serial_off() {
        [ -z "$(cl inter "$(cat "/proc/irq/$SERIAL/smp_affinity_list")" "$AWAY")" ] &&
            [ -z "$(cl inter "$(cat "/proc/irq/$SERIAL/effective_affinity_list")" "$AWAY")" ]
    }
    wait_for 5 _serial_off
    check irq-serial "serial (ttyS0) irq $SERIAL on $(cat "/proc/irq/$SERIAL/smp_affinity_list") (was $(echo "$BEFORE" | awk -v n="$SERIAL" '$1 == n { print $2 }')), delivered on $(cat "/proc/irq/$SERIAL/effective_affinity_list")" _serial_off
else
    fail irq-serial "no ttyS0 in /proc/interrupts"
fi

# What became of the virtio interrupts (names from /proc/interrupts).
_ref="" _mov="" _kept=""
for _n in $(awk '$NF ~ /^virtio/ { sub(":", "", $1); print $1 }' /proc/interrupts); do
    _was=$(echo "$BEFORE" | awk -v n="$_n" '$1 == n { print $2 }')
    _now=$(cat "/proc/irq/$_n/smp_affinity_list")
    _eff=$(cat "/proc/irq/$_n/effective_affinity_list" 2>/dev/null)
    case " $(refused) " in
        *" $_n "*) _ref="$_ref $_n $(irq_name "$_n") $_now eff $_eff ($(refusal "$_n"));" ;;
        *) if [ "$_was" != "$_now" ]; then _mov="$_mov $_n $(irq_name "$_n") $_was->$_now eff $_eff;"
           else _kept="$_kept $_n $(irq_name "$_n") $_now eff $_eff;"; fi ;;
    esac
done
note "virtio refused:${_ref:- none}"
note "virtio moved:${_mov:- none}"
note "virtio off $AWAY already, left:${_kept:- none}"
note "status: $(irq_line)"
note "event: $(pinctl events 2>/dev/null | grep ' irqs off ' | tail -n 1)"

# The job ends: what its CPU took is put back (X and R stay pinned).
kill_in "$CS/hpc.slice/job-8.scope"
rmcg hpc.slice/job-8.scope
_as_mid() { _passed "$EXCL" && [ "$(irqs)" = "$MID" ]; }
if wait_for 30 _as_mid; then
    pass irq-job-gone "every interrupt as before the job, $(irq_line)"
else
    fail irq-job-gone "now: $(irqs | tr '\n' ' ' | head -c 400); before the job: $(echo "$MID" | tr '\n' ' ' | head -c 400)"
fi
check irq-default-job-gone "default_smp_affinity $(def_list)" [ "$(def_list)" = "$DEF_MID" ]

# The file as it was (the switch off) and a reload: every interrupt back.
cp /run/pinctld.toml.irq "$CONFIG"
check reload-off "systemctl reload with the file as it was (irq_affinity = false)" _reload
_as_before() { [ "$(irqs)" = "$BEFORE" ]; }
if wait_for 30 _as_before; then
    pass irq-put-back "every interrupt as before"
else
    fail irq-put-back "now: $(irqs | tr '\n' ' ' | head -c 400); before: $(echo "$BEFORE" | tr '\n' ' ' | head -c 400)"
fi
check irq-default-put-back "default_smp_affinity $(def_list)" [ "$(def_list)" = "$DEF_BEFORE" ]
_no_line() { _l=$(irq_line); [ -z "$_l" ] || { echo "$_l"; false; }; }
wait_for 15 _no_line
check irq-status-off "no Interrupts: line once all is put back" _no_line

# Whatever happened, the next scenarios get interrupts as they were.
echo "$BEFORE" | while read -r _n _l; do
    [ "$(cat "/proc/irq/$_n/smp_affinity_list")" = "$_l" ] || echo "$_l" > "/proc/irq/$_n/smp_affinity_list" 2>/dev/null
done
