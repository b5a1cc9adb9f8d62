# Scenario 10: inotify watches run out (fs.inotify.max_user_watches). The
# daemon says so (STATUS= degraded: N cgroups unwatched), still pins a
# Guaranteed container that no watch sees appear, through the reconcile it
# runs every 10 s while cgroups are unwatched, and is healthy again once
# the limit is raised. Unseen cgroups wait for that reconcile (v1: a task
# cannot join before the daemon fills their cpuset), hence the longer WAIT.
WAIT=30
write_config 1h
daemon_start || return
MAXW=/proc/sys/fs/inotify/max_user_watches
OLD=$(cat "$MAXW")
# The guest's only inotify user is the daemon: the limit at what it holds.
HELD=$(cat /proc/"$DPID"/fdinfo/* 2>/dev/null | grep -c '^inotify wd:')
echo "$HELD" > "$MAXW" && note "max_user_watches $OLD -> $HELD (the daemon's watches)"
container systemd burstable 1; B_PID=$APP_PID
container cgroupfs guaranteed 2 2; G=$APP; G_PID=$APP_PID
_unwatched() { daemon_status | grep -q 'unwatched'; }
if wait_for "$WAIT" _unwatched; then
    pass unwatched-reported "$(daemon_status)"
else
    fail unwatched-reported "expected STATUS= with unwatched cgroups got $(daemon_status)"
fi
pin pinned-by-reconcile "$G" 2; XG=$GOT
expect pinned-process "$XG" allowed "$G_PID"
shared_ok while-unwatched "$XG" burstable=$B_PID system=$SYS_PID

echo "$OLD" > "$MAXW" && note "max_user_watches back to $OLD"
_healthy() { ! daemon_status | grep -q 'degraded'; }
if wait_for "$WAIT" _healthy; then
    pass healthy-again "$(daemon_status)"
else
    fail healthy-again "expected STATUS= without degraded got $(daemon_status)"
fi
# Watched again: a new container is pinned on its event.
container systemd guaranteed 3 1; G2=$APP
pin pinned-on-event "$G2" 1
