//! Fuzz `tilegate_core::fuzz::reference_differential`: see that function for the properties
//! checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tilegate_core::fuzz::reference_differential(data));
