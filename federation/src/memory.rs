//! Giving freed heap back to the operating system.
//!
//! A snapshot build holds an O(1) copy of the state while apply goes on; every node apply
//! changes meanwhile is copied, and when the build ends the old copies are freed all at
//! once, tens of megabytes at a million workloads, scattered among live allocations. glibc
//! keeps such holes in its arenas: the process's resident set stays at its high-water mark
//! although the heap in use fell, and a leader at a million workloads sits near its memory
//! budget on freed pages. `malloc_trim` hands every whole free page back (`MADV_DONTNEED`),
//! in every arena; the allocator reuses them later as before.

/// Returns free pages to the system (glibc on Linux; a no-op elsewhere), answering what it
/// took in seconds. Each arena is locked while it is trimmed, so it is called after large
/// frees on a blocking thread, not on every request.
pub fn release_free_pages() -> f64 {
    let started = tideway_api::clock::Clock::instant(&tideway_api::clock::RealClock);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only walks and trims the allocator's own free lists.
        unsafe {
            malloc_trim(0);
        }
    }
    started.elapsed().as_secs_f64()
}

/// The process's resident set in KiB (`VmRSS`, Linux), or 0 where it cannot be read.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| vm_rss_kib(&s))
        .unwrap_or(0)
}

/// The `VmRSS` line of a `/proc/PID/status` text, in KiB.
pub fn vm_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_resident_set_is_read_from_its_line() {
        let status = "Name:\ttideway\nVmPeak:\t  900 kB\nVmRSS:\t  123456 kB\nThreads:\t8\n";
        assert_eq!(super::vm_rss_kib(status), Some(123_456));
        assert_eq!(super::vm_rss_kib("Name:\tx\n"), None);
    }
}
