//! Giving the heap a burst of work freed back to the system, once podunit-sync is quiet again.
//!
//! glibc's malloc returns memory to the kernel only from the top of the heap. A burst (80 new
//! pods: their API objects, spool texts, D-Bus replies, status JSON) leaves the heap riddled with
//! free chunks between the few long-lived ones, and those pages stay resident: with 110 pods idle,
//! 3.1 MB in use held 5.9 MB (docs/benchmarks.md). `malloc_trim(0)` walks the free chunks and
//! hands their whole pages back (`MADV_DONTNEED`); it costs a walk of the heap, well under a
//! millisecond at this size, so it runs once after each burst, not on a timer: on the cluster
//! agent's first quiet tick after work, after each local reconcile, and when the kubelet API's
//! last open connection closes.

/// Releases free heap pages; whether any were released.
pub fn release_free() -> bool {
    imp::trim()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    #[allow(unsafe_code)]
    pub fn trim() -> bool {
        // SAFETY: malloc_trim takes no pointers and locks each arena itself, so it is safe to
        // call from any thread at any time (glibc's malloc_trim(3), MT-Safe).
        unsafe { libc::malloc_trim(0) == 1 }
    }
}

/// Other C libraries have no such call (musl's malloc returns memory on free).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    pub fn trim() -> bool {
        false
    }
}

/// Calls [`release_free`] on the first quiet moment after work was done.
#[derive(Debug, Default)]
pub struct AfterWork {
    worked: bool,
}

impl AfterWork {
    /// Some work was done (a message handled, a reconcile run).
    pub fn worked(&mut self) {
        self.worked = true;
    }

    /// Nothing is waiting: trims if work was done since the last trim.
    pub fn quiet(&mut self) {
        if std::mem::take(&mut self.worked) {
            release_free();
        }
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    #[test]
    fn freed_pages_between_live_chunks_are_released() {
        // 16 MiB in 4 KiB blocks, one in 64 kept: what a burst leaves behind, far below the
        // heap's top, so only a trim of the middle of the heap gives it back.
        let mut blocks: Vec<Vec<u8>> = (0..4096).map(|i| vec![i as u8; 4096]).collect();
        let kept: Vec<Vec<u8>> = blocks.iter_mut().step_by(64).map(std::mem::take).collect();
        drop(blocks);
        assert!(
            release_free(),
            "free pages in the middle of the heap were not released"
        );
        assert_eq!(kept[1][0], 64u8);
    }

    #[test]
    fn trims_once_per_burst() {
        let mut t = AfterWork::default();
        t.quiet();
        assert!(!t.worked);
        t.worked();
        t.worked();
        assert!(t.worked);
        t.quiet();
        assert!(!t.worked);
    }
}
