//! The two stages of a pull over its layers at once: downloads on a few threads, and each blob, as
//! soon as it is verified, unpacked on another thread while the next downloads go on. The first
//! failure cancels what has not started (and tells running downloads to stop); it is the error
//! returned.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, mpsc};

/// Runs `fetch` for every job on `fetchers` threads and `then` on each result on `workers`
/// threads, as results come. The outputs of `then` come back in job order. `fetch` is given the
/// cancel flag, to stop a long download when another job failed.
pub fn run<J, A, B, E, F, T>(
    jobs: &[J],
    fetchers: usize,
    workers: usize,
    fetch: F,
    then: T,
) -> Result<Vec<B>, E>
where
    J: Sync,
    A: Send,
    B: Send,
    E: Send,
    F: Fn(&J, &AtomicBool) -> Result<A, E> + Sync,
    T: Fn(&J, A) -> Result<B, E> + Sync,
{
    let next = AtomicUsize::new(0);
    let cancel = AtomicBool::new(false);
    let first_error: Mutex<Option<E>> = Mutex::new(None);
    let done: Mutex<Vec<Option<B>>> = Mutex::new(jobs.iter().map(|_| None).collect());
    let fail = |e: E| {
        cancel.store(true, Ordering::Relaxed);
        first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    };
    let (tx, rx) = mpsc::channel::<(usize, A)>();
    let rx = Mutex::new(rx);
    std::thread::scope(|s| {
        for _ in 0..fetchers.clamp(1, jobs.len().max(1)) {
            let tx = tx.clone();
            let (next, cancel, fail, fetch) = (&next, &cancel, &fail, &fetch);
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= jobs.len() || cancel.load(Ordering::Relaxed) {
                        return;
                    }
                    match fetch(&jobs[i], cancel) {
                        Ok(a) => {
                            let _ = tx.send((i, a));
                        }
                        Err(e) => fail(e),
                    }
                }
            });
        }
        drop(tx);
        for _ in 0..workers.clamp(1, jobs.len().max(1)) {
            s.spawn(|| {
                loop {
                    // The guard goes at the end of this statement: one worker waits in recv.
                    let msg = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    let Ok((i, a)) = msg else { return };
                    if cancel.load(Ordering::Relaxed) {
                        continue;
                    }
                    match then(&jobs[i], a) {
                        Ok(b) => done.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(b),
                        Err(e) => fail(e),
                    }
                }
            });
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    Ok(done
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|b| b.expect("every job ran when none failed"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_job_goes_through_both_stages_in_order() {
        let jobs: Vec<u32> = (0..20).collect();
        let out = run(
            &jobs,
            3,
            2,
            |j, _| {
                std::thread::sleep(Duration::from_millis(u64::from(20 - j)));
                Ok::<_, String>(j * 10)
            },
            |j, a| Ok(a + j),
        )
        .unwrap();
        assert_eq!(out, jobs.iter().map(|j| j * 11).collect::<Vec<_>>());
        let none: Vec<u32> = Vec::new();
        assert_eq!(
            run(&none, 3, 2, |_, _| Ok::<u32, ()>(0), |_, a| Ok(a)).unwrap(),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn the_first_failure_is_returned_and_cancels_the_rest() {
        let jobs: Vec<u32> = (0..50).collect();
        let fetched = AtomicUsize::new(0);
        let e = run(
            &jobs,
            2,
            2,
            |j, cancel| {
                fetched.fetch_add(1, Ordering::Relaxed);
                if *j == 3 {
                    return Err(format!("fetch {j}"));
                }
                std::thread::sleep(Duration::from_millis(5));
                if cancel.load(Ordering::Relaxed) {
                    return Err("cancelled".into());
                }
                Ok(*j)
            },
            |j, a| {
                if *j == 1 {
                    Err(format!("then {j}"))
                } else {
                    Ok(a)
                }
            },
        )
        .unwrap_err();
        assert!(e == "fetch 3" || e == "then 1", "{e}");
        assert!(
            fetched.load(Ordering::Relaxed) < 50,
            "later jobs never start"
        );
    }
}
