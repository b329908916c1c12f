//! Where a process's memory is, from /proc/PID/smaps in the machine (the benchmarks' breakdown).

use super::nspawn::Machine;

/// One mapping of /proc/PID/smaps: size and resident kB, permissions, name.
struct Mapping {
    size: u64,
    rss: u64,
    perms: String,
    name: String,
}

fn mappings(smaps: &str) -> Vec<Mapping> {
    let mut v: Vec<Mapping> = Vec::new();
    for l in smaps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let Some(first) = f.first() else { continue };
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
        {
            v.push(Mapping {
                size: (b - a) / 1024,
                rss: 0,
                perms: f.get(1).copied().unwrap_or("").to_string(),
                name: f.get(5).copied().unwrap_or("").to_string(),
            });
        } else if *first == "Rss:"
            && let Some(m) = v.last_mut()
        {
            m.rss = f.get(1).and_then(|v| v.parse().ok()).unwrap_or(0);
        }
    }
    v
}

/// The anonymous memory of a process by kind, from /proc/PID/smaps (resident kB): the main
/// heap; thread stacks (a writable mapping right after a small inaccessible guard); malloc's
/// other arenas (a writable mapping followed by the inaccessible rest of its 64 MiB
/// reservation); the rest.
pub fn anon_by_kind(m: &Machine, pid: &str) -> String {
    let maps = mappings(&m.sh_ok(&format!("cat /proc/{pid}/smaps")));
    let none = |i: usize| {
        maps.get(i)
            .filter(|m| m.perms.starts_with("---") && m.name.is_empty())
    };
    let (mut heap, mut stacks, mut arenas, mut other) = (0u64, 0u64, 0u64, 0u64);
    let (mut n_stacks, mut n_arenas) = (0, 0);
    for (i, mp) in maps.iter().enumerate() {
        if mp.name == "[heap]" {
            heap += mp.rss;
            continue;
        }
        if !mp.name.is_empty() || !mp.perms.starts_with("rw") {
            continue;
        }
        let guard_before = i > 0 && none(i - 1).is_some_and(|g| g.size <= 64);
        let rest_after = none(i + 1).is_some_and(|r| r.size >= 1024 && r.size + mp.size <= 65536);
        if rest_after {
            arenas += mp.rss;
            n_arenas += 1;
        } else if guard_before {
            stacks += mp.rss;
            n_stacks += 1;
        } else {
            other += mp.rss;
        }
    }
    format!(
        "heap {heap} kB; {n_stacks} thread stacks {stacks} kB; {n_arenas} malloc arenas \
         {arenas} kB; other anonymous {other} kB"
    )
}

/// The resident file pages of a process by file (kB, largest first): the program's own text and
/// data against the shared libraries'.
pub fn file_by_name(m: &Machine, pid: &str) -> String {
    let mut by: Vec<(String, u64)> = Vec::new();
    for mp in mappings(&m.sh_ok(&format!("cat /proc/{pid}/smaps"))) {
        if !mp.name.starts_with('/') {
            continue;
        }
        let short = mp.name.rsplit('/').next().unwrap_or(&mp.name).to_string();
        match by.iter_mut().find(|(n, _)| *n == short) {
            Some((_, kb)) => *kb += mp.rss,
            None => by.push((short, mp.rss)),
        }
    }
    by.sort_by_key(|b| std::cmp::Reverse(b.1));
    by.iter()
        .filter(|(_, kb)| *kb > 0)
        .map(|(n, kb)| format!("{n} {kb} kB"))
        .collect::<Vec<_>>()
        .join("; ")
}
