//! Telling systemd: `READY=1`, `STATUS=`, `WATCHDOG=1` and `STOPPING=1`,
//! from a thread of its own, and how often the watchdog wants to hear.

use std::time::Duration;

use tracing::warn;

/// A message for systemd.
pub(super) enum Note {
    Status(String, bool),
    Watchdog,
    Stopping,
}

/// Sends sd-notify messages from a thread of its own: `sd_notify` sends on a
/// blocking socket, and a socket whose buffer is full must not freeze the event
/// loop. Messages that find the queue full are dropped; a wedged socket then
/// also stops the watchdog pings, which is the truth.
pub(super) struct Notifier {
    tx: std::sync::mpsc::SyncSender<Note>,
}

impl Notifier {
    pub(super) fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Note>(16);
        let spawned = std::thread::Builder::new()
            .name("pinctl-notify".into())
            .spawn(move || {
                for note in rx {
                    let _ = match &note {
                        Note::Status(s, ready) => {
                            let mut states = vec![sd_notify::NotifyState::Status(s)];
                            if *ready {
                                states.push(sd_notify::NotifyState::Ready);
                            }
                            sd_notify::notify(false, &states)
                        }
                        Note::Watchdog => {
                            sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog])
                        }
                        Note::Stopping => {
                            sd_notify::notify(false, &[sd_notify::NotifyState::Stopping])
                        }
                    };
                }
            });
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start the sd-notify thread; systemd will not hear from us");
        }
        Notifier { tx }
    }

    pub(super) fn send(&self, note: Note) {
        let _ = self.tx.try_send(note);
    }
}

/// The shortest `WATCHDOG=1` period: tokio's timers tick in whole
/// milliseconds (and a zero period panics), so systemd's watchdog cannot be
/// served below 2 ms.
const MIN_PING: Duration = Duration::from_millis(1);

/// The longest gap between two `WATCHDOG=1` under systemd's `WATCHDOG_USEC`:
/// half the period (sd_watchdog_enabled(3)), so one late ping is not fatal,
/// but never below [`MIN_PING`]. The loop pings once half of it has passed
/// (`daemon::half_ping`).
fn ping_period(watchdog_usec: u64) -> Duration {
    Duration::from_micros(watchdog_usec / 2).max(MIN_PING)
}

/// How often to send `WATCHDOG=1`, when systemd asked for it
/// (`WATCHDOG_USEC`): see [`ping_period`].
pub(super) fn watchdog_period() -> Option<Duration> {
    let mut usec = 0u64;
    sd_notify::watchdog_enabled(false, &mut usec).then(|| {
        let every = ping_period(usec);
        if every > Duration::from_micros(usec / 2) {
            tracing::error!(
                watchdog_usec = usec,
                ping_ms = every.as_millis() as u64,
                "WATCHDOG_USEC is shorter than the 2 ms the event loop can serve; pinging every 1 ms, raise WatchdogSec="
            );
        }
        every
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watchdog_period_too_short_to_serve_pings_every_millisecond_not_zero() {
        assert_eq!(ping_period(200_000), Duration::from_millis(100));
        assert_eq!(ping_period(2_000), MIN_PING);
        for usec in [0, 1, 2, 1_999] {
            assert_eq!(ping_period(usec), MIN_PING, "WATCHDOG_USEC={usec}");
        }
        assert_eq!(
            ping_period(u64::MAX),
            Duration::from_micros(u64::MAX / 2),
            "no overflow"
        );
    }
}
