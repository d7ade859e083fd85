//! Prefetch hints: ask the processor to bring memory into cache without waiting for it, so
//! that misses whose addresses are known early overlap instead of following one another.

/// Bytes per cache line.
const LINE: usize = 64;

/// Hints that the line holding `p` will be read soon. Never faults, whatever the address.
#[inline]
pub(crate) fn line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Hints that every line of `bytes` will be read soon.
#[inline]
pub(crate) fn bytes(bytes: &[u8]) {
    let start = bytes.as_ptr() as usize;
    let mut at = start & !(LINE - 1);
    while at < start + bytes.len() {
        line(at as *const u8);
        at += LINE;
    }
}
