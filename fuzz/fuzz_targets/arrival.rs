//! Fuzz `tilegate_core::fuzz::arrival`: see that function for the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tilegate_core::fuzz::arrival(data));
