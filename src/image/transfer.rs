//! A registry's response body, read under the pull's time bounds: the pull's deadline, and a
//! minimum rate over each window of `lowSpeedSeconds` (a server that sends headers and then
//! stalls, or dribbles a byte a second, is abandoned rather than holding the pull, its thread and
//! the store's lock). A read that blocks is ended by the client's per-read timeout, set to the
//! same window; this wrapper turns both into a message naming the limit.

use crate::common::pull_limits::Limits;
use std::io::{self, Read};
use std::time::{Duration, Instant};

/// The time bounds of one pull.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub deadline: Instant,
    pub total: Duration,
    pub window: Duration,
    pub min_bytes_per_window: u64,
}

impl Budget {
    pub fn start(l: &Limits) -> Budget {
        let total = Duration::from_secs(l.pull_timeout_seconds);
        let window = Duration::from_secs(l.low_speed_seconds);
        Budget {
            deadline: Instant::now() + total,
            total,
            window,
            min_bytes_per_window: l
                .low_speed_bytes_per_second
                .saturating_mul(l.low_speed_seconds),
        }
    }

    /// What is left of the pull's time; `None` once it is spent.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    pub fn expired_message(&self) -> String {
        format!(
            "the pull took longer than {} s (registries.limits.pullTimeoutSeconds)",
            self.total.as_secs()
        )
    }

    /// The message for a read that timed out: the deadline, or a stall.
    pub fn timeout_message(&self) -> String {
        if self.remaining().is_none() {
            self.expired_message()
        } else {
            format!(
                "the registry sent nothing for {} s (registries.limits.lowSpeedSeconds)",
                self.window.as_secs()
            )
        }
    }
}

/// `inner`, failing with [`io::ErrorKind::TimedOut`] when the budget is spent or a window went by
/// with fewer bytes than the budget asks for.
pub struct Transfer<R> {
    inner: R,
    budget: Budget,
    window_start: Instant,
    window_bytes: u64,
}

impl<R: Read> Transfer<R> {
    pub fn new(inner: R, budget: Budget) -> Transfer<R> {
        Transfer {
            inner,
            budget,
            window_start: Instant::now(),
            window_bytes: 0,
        }
    }

    fn timed_out(&self, why: String) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, why)
    }
}

impl<R: Read> Read for Transfer<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.budget.remaining().is_none() {
            return Err(self.timed_out(self.budget.expired_message()));
        }
        let n = match self.inner.read(buf) {
            Ok(n) => n,
            Err(e) if is_timeout(&e) => {
                return Err(self.timed_out(self.budget.timeout_message()));
            }
            Err(e) => return Err(e),
        };
        self.window_bytes += n as u64;
        let now = Instant::now();
        if now.duration_since(self.window_start) >= self.budget.window {
            if n > 0 && self.window_bytes < self.budget.min_bytes_per_window {
                return Err(self.timed_out(format!(
                    "the registry sent {} bytes in {} s, slower than {} bytes a second \
                     (registries.limits.lowSpeedBytesPerSecond)",
                    self.window_bytes,
                    now.duration_since(self.window_start).as_secs(),
                    self.budget.min_bytes_per_window / self.budget.window.as_secs().max(1)
                )));
            }
            self.window_start = now;
            self.window_bytes = 0;
        }
        Ok(n)
    }
}

/// A timed-out read: the socket's own, or ureq's timeouts, which its body reader wraps.
fn is_timeout(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::TimedOut
        || e.get_ref()
            .and_then(|x| x.downcast_ref::<ureq::Error>())
            .is_some_and(|x| matches!(x, ureq::Error::Timeout(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body that hands out one byte per read, `delay` apart.
    struct Dribble {
        left: usize,
        delay: Duration,
    }

    impl Read for Dribble {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.left == 0 || buf.is_empty() {
                return Ok(0);
            }
            std::thread::sleep(self.delay);
            buf[0] = b'x';
            self.left -= 1;
            Ok(1)
        }
    }

    fn budget(total_ms: u64, window_ms: u64, min: u64) -> Budget {
        Budget {
            deadline: Instant::now() + Duration::from_millis(total_ms),
            total: Duration::from_millis(total_ms),
            window: Duration::from_millis(window_ms),
            min_bytes_per_window: min,
        }
    }

    #[test]
    fn a_dribbling_body_is_abandoned_at_the_end_of_a_slow_window() {
        let body = Dribble {
            left: 1000,
            delay: Duration::from_millis(10),
        };
        let mut t = Transfer::new(body, budget(60_000, 100, 1000));
        let e = io::copy(&mut t, &mut io::sink()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("lowSpeedBytesPerSecond"), "{e}");
    }

    #[test]
    fn a_fast_body_passes_and_the_deadline_ends_any() {
        let mut t = Transfer::new(&[7u8; 100_000][..], budget(60_000, 1, 1));
        assert_eq!(io::copy(&mut t, &mut io::sink()).unwrap(), 100_000);
        let body = Dribble {
            left: 1000,
            delay: Duration::from_millis(10),
        };
        let mut t = Transfer::new(body, budget(50, 60_000, 0));
        let e = io::copy(&mut t, &mut io::sink()).unwrap_err();
        assert!(e.to_string().contains("pullTimeoutSeconds"), "{e}");
    }
}
