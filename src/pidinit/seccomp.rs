//! The part of a RuntimeDefault container's system call filter that systemd cannot install for
//! it, since the inner process of `pid-init` needs those calls for its own setup: the `@mount`
//! group (systemd 252's list) and, as `RestrictNamespaces=yes`, new mount and PID namespaces. A
//! second filter, stacked on systemd's and installed just before the container's command runs;
//! refused calls fail with `EPERM`, as `SystemCallErrorNumber=EPERM` makes systemd's do.

use libc::{sock_filter, sock_fprog};

// The layout of `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0: u32 = 16;
const ARG1: u32 = 24;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// systemd 252's `@mount` (`systemd-analyze syscall-filter @mount`), as this architecture has them.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const MOUNT_CALLS: &[libc::c_long] = &[
    libc::SYS_chroot,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fsopen,
    libc::SYS_fspick,
    libc::SYS_mount,
    libc::SYS_mount_setattr,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_pivot_root,
    libc::SYS_umount2,
];

/// The namespaces the inner process made for itself, which the container may not make.
const NS_FLAGS: u32 = (libc::CLONE_NEWNS | libc::CLONE_NEWPID) as u32;

fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The filter program.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn program(deny_mount: bool, deny_namespaces: bool) -> Vec<sock_filter> {
    use libc::{
        BPF_ABS, BPF_ALU, BPF_AND, BPF_JEQ, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_RET, BPF_W,
        SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO,
    };
    let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let enosys = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let ld = |off| stmt(BPF_LD | BPF_W | BPF_ABS, off);
    let ret = |v| stmt(BPF_RET | BPF_K, v);
    let mut p = vec![
        // Another architecture's calls are systemd's to refuse (SystemCallArchitectures=native).
        ld(ARCH),
        jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH, 1, 0),
        ret(SECCOMP_RET_ALLOW),
        ld(NR),
    ];
    let deny = |nr: libc::c_long, verdict: u32, p: &mut Vec<sock_filter>| {
        p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, nr as u32, 0, 1));
        p.push(ret(verdict));
    };
    if deny_mount {
        for nr in MOUNT_CALLS {
            deny(*nr, eperm, &mut p);
        }
    }
    if deny_namespaces {
        // clone3 passes its flags in memory a filter cannot read: ENOSYS makes the C library fall
        // back to clone, as systemd does it.
        deny(libc::SYS_clone3, enosys, &mut p);
        // unshare(flags) and clone(flags, ...) with a mount or PID namespace flag.
        for nr in [libc::SYS_unshare, libc::SYS_clone] {
            p.extend([
                jump(BPF_JMP | BPF_JEQ | BPF_K, nr as u32, 0, 4),
                ld(ARG0),
                jump(BPF_JMP | BPF_JSET | BPF_K, NS_FLAGS, 0, 1),
                ret(eperm),
                ld(NR),
            ]);
        }
        // setns(fd, nstype): any type (0) or one of those.
        p.extend([
            jump(BPF_JMP | BPF_JEQ | BPF_K, libc::SYS_setns as u32, 0, 6),
            ld(ARG1),
            jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0),
            stmt(BPF_ALU | BPF_AND | BPF_K, NS_FLAGS),
            jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0),
            ret(eperm),
            ld(NR),
        ]);
    }
    p.push(ret(SECCOMP_RET_ALLOW));
    p
}

/// Installs the filter on this thread (the process is single-threaded here); it is inherited by
/// what it executes.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn install(deny_mount: bool, deny_namespaces: bool) -> std::io::Result<()> {
    let prog = program(deny_mount, deny_namespaces);
    let fprog = sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut sock_filter,
    };
    // SAFETY: `fprog` points at `prog`, alive for the call; the kernel copies the program.
    #[allow(unsafe_code)]
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &fprog as *const sock_fprog,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn install(_deny_mount: bool, _deny_namespaces: bool) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "RuntimeDefault in a PID namespace of its own is built for x86_64 and aarch64 only",
    ))
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    use super::*;

    /// Runs the program over one call, as the kernel would.
    fn verdict(p: &[sock_filter], nr: libc::c_long, args: [u64; 2]) -> u32 {
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = p[pc];
            let code = u32::from(i.code);
            match code & 0x07 {
                c if c == libc::BPF_LD => {
                    a = match i.k {
                        NR => nr as u32,
                        ARCH => AUDIT_ARCH,
                        ARG0 => args[0] as u32,
                        ARG1 => args[1] as u32,
                        k => panic!("load of {k}"),
                    };
                    pc += 1;
                }
                c if c == libc::BPF_ALU => {
                    a &= i.k;
                    pc += 1;
                }
                c if c == libc::BPF_JMP => {
                    let taken = if code & 0xf0 == libc::BPF_JSET {
                        a & i.k != 0
                    } else {
                        a == i.k
                    };
                    pc += 1 + usize::from(if taken { i.jt } else { i.jf });
                }
                _ => return i.k,
            }
        }
    }

    #[test]
    fn refuses_mounts_and_those_namespaces_only() {
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let allow = libc::SECCOMP_RET_ALLOW;
        let p = program(true, true);
        assert_eq!(verdict(&p, libc::SYS_mount, [0, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_umount2, [0, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_read, [0, 0]), allow);
        let newns = libc::CLONE_NEWNS as u64;
        let newpid = libc::CLONE_NEWPID as u64;
        let newuts = libc::CLONE_NEWUTS as u64;
        assert_eq!(verdict(&p, libc::SYS_unshare, [newns, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_unshare, [newpid, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_unshare, [newuts, 0]), allow);
        assert_eq!(verdict(&p, libc::SYS_clone, [newpid | 17, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_clone, [17, 0]), allow);
        assert_eq!(verdict(&p, libc::SYS_setns, [3, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_setns, [3, newns]), eperm);
        assert_eq!(verdict(&p, libc::SYS_setns, [3, newuts]), allow);
        assert_eq!(
            verdict(&p, libc::SYS_clone3, [0, 0]),
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
        let mounts_only = program(true, false);
        assert_eq!(verdict(&mounts_only, libc::SYS_unshare, [newns, 0]), allow);
        assert_eq!(verdict(&mounts_only, libc::SYS_pivot_root, [0, 0]), eperm);
    }
}
