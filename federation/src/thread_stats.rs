//! Whether the calling thread was preempted: the count of its involuntary context switches.
//!
//! A short critical section that sometimes takes a millisecond is either slow work or a
//! thread the kernel took off its core while it held the lock (on a machine whose cores are
//! all busy, a section of 0.1 ms is preempted now and then). The scheduling cycle's hold of
//! the state lock reads this before and after, so a long hold says which it was.

/// The calling thread's involuntary context switches so far (`getrusage(RUSAGE_THREAD)`,
/// Linux), or `None` where they cannot be read.
pub fn involuntary_switches() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes only the struct it is given, which is large enough.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, ru.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: the call succeeded, so the struct is initialised (it was zeroed anyway).
        let ru = unsafe { ru.assume_init() };
        u64::try_from(ru.ru_nivcsw).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_readable_on_every_thread_and_never_goes_back() {
        let first = involuntary_switches();
        if !cfg!(target_os = "linux") {
            assert_eq!(first, None);
            return;
        }
        let first = first.expect("readable on Linux");
        let mut last = first;
        for _ in 0..1000 {
            let now = involuntary_switches().expect("readable again");
            assert!(now >= last);
            last = now;
        }
        // Readable on any thread, not only the first.
        let other = std::thread::spawn(involuntary_switches)
            .join()
            .expect("thread");
        assert!(other.is_some(), "readable on a new thread");
    }
}
