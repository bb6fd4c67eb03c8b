//! The few system calls the standard library does not offer: signals to any process, and the
//! switch to the tests' user (groups, group, user) in the child before it runs the tests.
#![expect(unsafe_code, reason = "libc calls with no std equivalent; each takes plain integers")]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    fn setgroups(size: usize, list: *const u32) -> i32;
    fn setgid(gid: u32) -> i32;
    fn setuid(uid: u32) -> i32;
    fn sysconf(name: i32) -> i64;
}

pub const SIGKILL: i32 = 9;
pub const SIGCONT: i32 = 18;
pub const SIGSTOP: i32 = 19;

/// Sends `signal` to `pid` (-1: every process the caller may signal but itself and init).
/// Whether it was delivered.
pub fn signal(pid: i32, signal: i32) -> bool {
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    unsafe { kill(pid, signal) == 0 }
}

/// Clock ticks per second, the unit of a process's start time in `/proc/<pid>/stat`.
pub fn clock_ticks() -> u64 {
    const SC_CLK_TCK: i32 = 2;
    // SAFETY: sysconf(3) takes an integer and returns one.
    let ticks = unsafe { sysconf(SC_CLK_TCK) };
    if ticks > 0 { ticks as u64 } else { 100 }
}

/// Makes `command`'s child drop to `uid`/`gid` with `groups` before it runs.
pub fn run_as(command: &mut Command, uid: u32, gid: u32, groups: Vec<u32>) {
    // SAFETY: the closure runs in the forked child before exec and only makes three system
    // calls on memory it owns (the groups vector, moved in); no allocation, no locks.
    unsafe {
        command.pre_exec(move || {
            if setgroups(groups.len(), groups.as_ptr()) != 0 || setgid(gid) != 0 || setuid(uid) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
