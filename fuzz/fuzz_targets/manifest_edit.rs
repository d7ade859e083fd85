#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzz::manifest_edit(data));
