//! Exponential back-off with full jitter (what client-go's reflector does, roughly): a down API
//! server is retried ever more slowly, and a fleet of nodes does not retry in lockstep.

use std::time::Duration;

/// Back-off state: call [`Backoff::next_delay`] after each failure, [`Backoff::reset`] after success.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
    rng: u64,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration, seed: u64) -> Self {
        Backoff {
            base,
            max,
            attempt: 0,
            rng: seed | 1,
        }
    }

    /// Seeded from the clock and pid, so nodes restarted together still spread out.
    pub fn with_time_seed(base: Duration, max: Duration) -> Self {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Backoff::new(base, max, t ^ (u64::from(std::process::id()) << 32))
    }

    /// The ceiling of the current step: base * 2^attempt, capped at max.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(30)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// The delay before the next try: uniform in [ceiling/2, ceiling], then the ceiling doubles.
    pub fn next_delay(&mut self) -> Duration {
        let ceil = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        let half = ceil / 2;
        let span = (ceil - half).as_millis() as u64;
        let jitter = if span == 0 {
            0
        } else {
            self.next_rand() % (span + 1)
        };
        half + Duration::from_millis(jitter)
    }

    /// A uniform random duration in [0, span] (whole milliseconds); the schedule is unchanged.
    pub fn jitter(&mut self, span: Duration) -> Duration {
        let ms = span.as_millis() as u64;
        Duration::from_millis(self.next_rand() % (ms + 1))
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// xorshift64*: plenty for jitter, no dependency.
    fn next_rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_within_jitter_bounds_and_caps() {
        let mut b = Backoff::new(Duration::from_millis(200), Duration::from_secs(30), 7);
        let mut ceil = Duration::from_millis(200);
        for _ in 0..20 {
            let d = b.next_delay();
            assert!(
                d >= ceil / 2 && d <= ceil,
                "{d:?} not in [{:?}, {ceil:?}]",
                ceil / 2
            );
            ceil = (ceil * 2).min(Duration::from_secs(30));
        }
        assert_eq!(b.ceiling(), Duration::from_secs(30));
        b.reset();
        assert_eq!(b.ceiling(), Duration::from_millis(200));
    }

    #[test]
    fn jitter_is_bounded_and_leaves_the_schedule_alone() {
        let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(30), 7);
        for _ in 0..1000 {
            assert!(b.jitter(Duration::from_secs(300)) <= Duration::from_secs(300));
        }
        assert_eq!(b.attempts(), 0);
        assert_eq!(b.ceiling(), Duration::from_millis(500));
    }

    #[test]
    fn jitter_differs_between_seeds() {
        let run = |seed| {
            let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60), seed);
            (0..8).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_ne!(run(1), run(2));
        assert_eq!(run(3), run(3));
    }

    #[test]
    fn huge_attempt_counts_do_not_overflow() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30), 1);
        for _ in 0..1000 {
            assert!(b.next_delay() <= Duration::from_secs(30));
        }
    }
}
