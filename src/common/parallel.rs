//! An order-keeping parallel map on scoped threads, for the generator's independent per-file and
//! per-pod work. systemd waits for every generator during boot and `daemon-reload`, so the
//! generator uses the machine's cores; the output is the same, in the same order, as a serial run.

use std::num::NonZeroUsize;

/// Below this many items a thread costs more than it saves.
const MIN_PER_THREAD: usize = 16;

/// `f` applied to every item, results in the items' order. Runs on up to
/// `available_parallelism()` threads; small inputs stay on the calling thread.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let threads = cores.min(items.len() / MIN_PER_THREAD).max(1);
    if threads == 1 {
        return items.iter().map(&f).collect();
    }
    // Contiguous chunks: neighbouring files are usually of similar size, and each thread's
    // results come back as one vector to append.
    let chunk = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| s.spawn(move || part.iter().map(f).collect::<Vec<R>>()))
            .collect();
        let mut out = Vec::with_capacity(items.len());
        for h in handles {
            match h.join() {
                Ok(part) => out.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_covers_every_item() {
        for n in [0, 1, 15, 16, 17, 100, 1001] {
            let items: Vec<usize> = (0..n).collect();
            let out = map(&items, |i| i * 2);
            assert_eq!(
                out,
                items.iter().map(|i| i * 2).collect::<Vec<_>>(),
                "n={n}"
            );
        }
    }

    #[test]
    fn runs_on_several_threads_when_there_is_work() {
        let items: Vec<usize> = (0..1000).collect();
        let ids = map(&items, |_| std::thread::current().id());
        let distinct: std::collections::BTreeSet<String> =
            ids.iter().map(|id| format!("{id:?}")).collect();
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        assert_eq!(distinct.len(), cores.min(1000 / MIN_PER_THREAD));
    }
}
