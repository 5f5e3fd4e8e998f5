//! Returning freed heap to the system, in a process of its own: the resident set it checks
//! would move with any test running beside it.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
use tideway_federation::memory;

#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn freed_pages_go_back_and_the_heap_still_works() {
    // 40 MiB of small blocks, 63 of every 64 freed: the holes between the survivors are
    // not at the top of the heap, so glibc keeps them resident until trimmed.
    let mut keep = Vec::new();
    let mut blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 2048]).collect();
    for (i, b) in blocks.drain(..).enumerate() {
        if i % 64 == 0 {
            keep.push(b);
        }
    }
    drop(blocks);
    let before = memory::rss_kib();
    memory::release_free_pages();
    let after = memory::rss_kib();
    assert!(
        after + 10 * 1024 < before,
        "at least 10 of the 39 freed MiB go back: {before} -> {after} KiB"
    );
    for (j, b) in keep.iter().enumerate() {
        assert!(b.iter().all(|&x| x == (j * 64) as u8), "live data intact");
    }
    let again: Vec<u8> = vec![7; 1 << 20];
    assert_eq!(again.iter().map(|&x| x as usize).sum::<usize>(), 7 << 20);
}
