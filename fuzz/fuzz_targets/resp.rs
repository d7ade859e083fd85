#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let limits = strata_server::resp::Limits { max_bulk_bytes: 1 << 20, ..Default::default() };
    let mut rest = data;
    while let Ok(strata_server::resp::Parsed::Command(_, n)) = strata_server::resp::parse(rest, &limits) {
        if n == 0 {
            break;
        }
        rest = &rest[n.min(rest.len())..];
    }
});
