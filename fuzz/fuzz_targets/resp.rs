#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let limits = strata_server::resp::Limits { max_bulk_bytes: 1 << 20, ..Default::default() };
    let mut rest = data;
    let mut args = strata_server::resp::Args::default();
    while let Ok(strata_server::resp::Parsed::Command(n)) =
        strata_server::resp::parse(rest, &limits, &mut args)
    {
        if n == 0 {
            break;
        }
        rest = &rest[n.min(rest.len())..];
    }
});
