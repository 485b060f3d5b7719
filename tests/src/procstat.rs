//! What `/proc` says about a process of the lab: memory and open file descriptors. Shared by the
//! lab benchmarks.

/// `VmRSS` and `VmHWM` of a process, in KiB (0 when the process is gone).
pub fn memory_kib(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Open file descriptors of a process (0 when the process is gone).
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Where a process's resident memory lies, from `/proc/PID/smaps`, in KiB: `(kind, Rss)` for
/// the file-backed pages (the binary and libraries), `[heap]`, anonymous mappings (the capture
/// ring, thread stacks, glibc's thread arenas, large allocations), `[stack]` and the rest, and
/// the largest anonymous mappings one by one (`anon NNNN KiB mapping`, up to `largest`).
pub fn smaps_kib(pid: u32, largest: usize) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let (mut file, mut heap, mut anon, mut stack, mut other) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut anons: Vec<(u64, u64)> = Vec::new();
    let mut name = String::new();
    let mut size = 0u64;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let first = it.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: range perms offset dev inode [name]
            let (a, b) = first.split_once('-').unwrap_or(("0", "0"));
            size = (u64::from_str_radix(b, 16).unwrap_or(0)
                - u64::from_str_radix(a, 16).unwrap_or(0))
                / 1024;
            name = it.nth(4).unwrap_or("").to_owned();
        } else if first == "Rss:" {
            let kib: u64 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            match name.as_str() {
                "" => {
                    anon += kib;
                    anons.push((kib, size));
                }
                "[heap]" => heap += kib,
                "[stack]" => stack += kib,
                n if n.starts_with('/') => file += kib,
                _ => other += kib,
            }
        }
    }
    anons.sort_unstable_by(|a, b| b.cmp(a));
    let mut out = vec![
        ("file".to_owned(), file),
        ("[heap]".to_owned(), heap),
        ("anon".to_owned(), anon),
        ("[stack]".to_owned(), stack),
        ("other".to_owned(), other),
    ];
    out.extend(
        anons
            .into_iter()
            .take(largest)
            .map(|(kib, size)| (format!("anon mapping of {size} KiB"), kib)),
    );
    out
}
