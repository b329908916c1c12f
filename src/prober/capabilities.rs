//! Giving a command entered into a container exactly the container's capabilities: its bounding,
//! permitted, effective, inheritable and ambient sets as `/proc/PID/status` shows them for the
//! main process, so a root container with systemd's reduced set is entered with that set, never
//! with the manager's.
//!
//! The sets are put in place in two steps around the change of user ([`Sets::prepare`] while this
//! process still has every capability, [`Sets::finish`] after `setuid`), and `execve` then
//! computes the command's sets from them by the same rules that computed the container's.

use rustix::thread::{self as rt, CapabilitiesSecureBits, CapabilitySet, CapabilitySets};
use std::fmt;

/// The five capability sets of a process (bit N is capability N).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sets {
    pub bounding: u64,
    pub permitted: u64,
    pub effective: u64,
    pub inheritable: u64,
    pub ambient: u64,
}

/// A failed system call while setting the sets.
#[derive(Debug)]
pub struct Error(&'static str, rustix::io::Errno);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.0, self.1)
    }
}

impl std::error::Error for Error {}

/// Reads the `Cap*:` lines of `/proc/PID/status`. `CapAmb` is missing before Linux 4.3, which has
/// no ambient set; the other four are required.
pub fn parse(status: &str) -> Result<Sets, String> {
    let mask = |name: &str, required: bool| -> Result<u64, String> {
        match status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        {
            Some(v) => u64::from_str_radix(v.trim(), 16).map_err(|_| format!("bad {name}: line")),
            None if required => Err(format!("no {name}: line")),
            None => Ok(0),
        }
    };
    Ok(Sets {
        bounding: mask("CapBnd", true)?,
        permitted: mask("CapPrm", true)?,
        effective: mask("CapEff", true)?,
        inheritable: mask("CapInh", true)?,
        ambient: mask("CapAmb", false)?,
    })
}

impl Sets {
    /// The permitted set `execve` gives a root process with these sets and no secure bits, for
    /// a file without capabilities: inheritable and bounding (the file's sets count as full for
    /// root) and ambient.
    pub fn root_exec_permitted(&self) -> u64 {
        self.inheritable | self.bounding | self.ambient
    }

    /// Whether a root command must be run with `SECBIT_NOROOT`. A root container got
    /// [`Self::root_exec_permitted`] when it started; if it holds less now (it dropped some
    /// itself), the root rule would give the command more than the container has, so the
    /// command gets only the ambient set (which is never more).
    pub fn needs_noroot(&self, root: bool) -> bool {
        root && self.root_exec_permitted() & !self.permitted != 0
    }

    /// Step one, while this process still has every capability of the manager: the inheritable
    /// set (which may only shrink from now on), the bounding set (every capability outside the
    /// container's is dropped), `SECBIT_NOROOT` when [`Self::needs_noroot`], and keep-caps, so
    /// the permitted set survives the change to a non-root user for [`Self::finish`].
    pub fn prepare(&self, root: bool) -> Result<(), Error> {
        let now = rt::capabilities(None).map_err(|e| Error("capget", e))?;
        rt::set_capabilities(
            None,
            CapabilitySets {
                effective: now.permitted,
                permitted: now.permitted,
                inheritable: set(self.inheritable),
            },
        )
        .map_err(|e| Error("capset of the inheritable set", e))?;
        for cap in 0..64 {
            let one = set(1 << cap);
            // EINVAL: beyond the last capability this kernel knows.
            let Ok(has) = rt::capability_is_in_bounding_set(one) else {
                break;
            };
            if has && self.bounding & (1 << cap) == 0 {
                rt::remove_capability_from_bounding_set(one)
                    .map_err(|e| Error("dropping from the bounding set", e))?;
            }
        }
        let mut bits = rt::capabilities_secure_bits().map_err(|e| Error("securebits", e))?;
        bits.set(CapabilitiesSecureBits::NO_ROOT, self.needs_noroot(root));
        bits.insert(CapabilitiesSecureBits::KEEP_CAPS);
        rt::set_capabilities_secure_bits(bits).map_err(|e| Error("securebits", e))
    }

    /// Step two, after `setuid`: the container's permitted, effective and inheritable sets,
    /// keep-caps off again, and its ambient set raised (only those, after clearing any).
    pub fn finish(&self) -> Result<(), Error> {
        rt::set_capabilities(
            None,
            CapabilitySets {
                effective: set(self.effective),
                permitted: set(self.permitted),
                inheritable: set(self.inheritable),
            },
        )
        .map_err(|e| Error("capset", e))?;
        rt::set_keep_capabilities(false).map_err(|e| Error("keep-caps", e))?;
        rt::clear_ambient_capability_set().map_err(|e| Error("clearing the ambient set", e))?;
        for cap in (0..64).filter(|c| self.ambient & (1 << c) != 0) {
            rt::configure_capability_in_ambient_set(set(1 << cap), true)
                .map_err(|e| Error("raising an ambient capability", e))?;
        }
        Ok(())
    }
}

fn set(bits: u64) -> CapabilitySet {
    CapabilitySet::from_bits_retain(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root container under systemd with the Kubernetes default set (bounding = permitted =
    /// effective), as /proc shows it.
    const ROOT: &str = "Name:\tsleep\nUid:\t0\t0\t0\t0\nCapInh:\t0000000000000000\n\
        CapPrm:\t00000000a80425fb\nCapEff:\t00000000a80425fb\nCapBnd:\t00000000a80425fb\n\
        CapAmb:\t0000000000000000\nNoNewPrivs:\t0\n";

    #[test]
    fn reads_the_five_sets() {
        let s = parse(ROOT).unwrap();
        assert_eq!(
            s,
            Sets {
                bounding: 0xa80425fb,
                permitted: 0xa80425fb,
                effective: 0xa80425fb,
                inheritable: 0,
                ambient: 0,
            }
        );
        let old_kernel = ROOT.replace("CapAmb:\t0000000000000000\n", "");
        assert_eq!(parse(&old_kernel).unwrap().ambient, 0);
        assert!(parse(&ROOT.replace("CapBnd", "CapX")).is_err());
        assert!(parse(&ROOT.replace("00000000a80425fb\nCapEff", "zz\nCapEff")).is_err());
    }

    #[test]
    fn a_root_container_that_dropped_capabilities_is_entered_without_the_root_rule() {
        let s = parse(ROOT).unwrap();
        assert!(!s.needs_noroot(true));
        assert!(!s.needs_noroot(false));
        let dropped = Sets {
            permitted: 1 << 10,
            effective: 1 << 10,
            ..s
        };
        assert!(dropped.needs_noroot(true));
        assert!(
            !dropped.needs_noroot(false),
            "non-root: only ambient anyway"
        );
        // Ambient capabilities of a non-root container count as its own.
        let ambient = Sets {
            bounding: 1 << 10,
            permitted: 1 << 10,
            effective: 1 << 10,
            inheritable: 1 << 10,
            ambient: 1 << 10,
        };
        assert!(!ambient.needs_noroot(true));
    }
}
