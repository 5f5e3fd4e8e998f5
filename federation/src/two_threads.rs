//! Two pieces of a restart's work at once: a restarted node decodes its snapshot and shares
//! its strings again before it serves, and each splits into two halves that need nothing of
//! each other (see `raft::snapshot_decode`, `state::shared_strings`).

/// Runs `a` on a scoped thread named `name` and `b` on this one, and answers both. When no
/// thread can be had, `a` runs here after `b`; a panic in `a` comes back as `Err`, for the
/// caller to report as an error or to resume.
pub(crate) fn both<A: Send, B>(
    name: &str,
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B,
) -> (std::thread::Result<A>, B) {
    // Taken by whichever thread runs it: the spawned one, or this one if none started.
    let slot = std::sync::Mutex::new(Some(a));
    let run = || -> std::thread::Result<A> {
        let a = slot.lock().ok().and_then(|mut a| a.take());
        a.map(|a| a())
            .ok_or_else(|| Box::new("already taken") as Box<dyn std::any::Any + Send>)
    };
    std::thread::scope(|s| {
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(s, run);
        let b = b();
        let a = match spawned {
            Ok(h) => h.join().and_then(|a| a),
            Err(_) => run(),
        };
        (a, b)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_halves_run_and_a_panic_comes_back_as_an_error() {
        let data: Vec<u64> = (1..=1000).collect();
        let (a, b) = both("test-a", || data.iter().sum::<u64>(), || data.len());
        assert_eq!(a.expect("no panic"), 500_500);
        assert_eq!(b, 1000);
        let (a, b) = both("test-panic", || -> u64 { panic!("boom") }, || 7);
        assert!(a.is_err());
        assert_eq!(b, 7);
    }
}
