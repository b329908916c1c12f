//! Runs a child and reaps it with wait4(2), which returns that child's own resource usage (peak
//! RSS, CPU time). std's `Child::wait` discards it, and getrusage(RUSAGE_CHILDREN) only gives the
//! maximum over every child so far; declaring wait4 here avoids a dependency for one call.

use std::ffi::{c_int, c_long};
use std::process::Command;
use std::time::{Duration, Instant};

#[repr(C)]
#[derive(Default)]
struct Timeval {
    tv_sec: c_long,
    tv_usec: c_long,
}

/// `struct rusage` as Linux defines it: two timevals, then fourteen longs.
#[repr(C)]
#[derive(Default)]
struct Rusage {
    ru_utime: Timeval,
    ru_stime: Timeval,
    /// Kilobytes on Linux.
    ru_maxrss: c_long,
    rest: [c_long; 13],
}

unsafe extern "C" {
    fn wait4(pid: c_int, status: *mut c_int, options: c_int, usage: *mut Rusage) -> c_int;
}

/// One run of a process.
pub struct Sample {
    /// From just before the spawn to the reaping: fork, exec, the work and the exit.
    pub wall: Duration,
    pub user: Duration,
    pub sys: Duration,
    pub max_rss_kib: u64,
    /// The exit code, `None` when killed by a signal.
    pub status: Option<i32>,
}

pub fn run(cmd: &mut Command) -> std::io::Result<Sample> {
    let start = Instant::now();
    let child = cmd.spawn()?;
    let pid = child.id() as c_int;
    let mut status: c_int = 0;
    let mut usage = Rusage::default();
    loop {
        // SAFETY: `status` and `usage` are live, writable and laid out as the kernel expects; the
        // pid is our own unreaped child (std never waits for it: `child` is not waited on).
        let r = unsafe { wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let wall = start.elapsed();
    drop(child);
    let tv = |t: &Timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    // WIFEXITED / WEXITSTATUS, as glibc defines them.
    let code = if status & 0x7f == 0 {
        Some((status >> 8) & 0xff)
    } else {
        None
    };
    Ok(Sample {
        wall,
        user: tv(&usage.ru_utime),
        sys: tv(&usage.ru_stime),
        max_rss_kib: usage.ru_maxrss as u64,
        status: code,
    })
}
